#!/usr/bin/env bash
# Builds llama.cpp's C++ `llama-server` (parallel slots, continuous batching, Prometheus /metrics) from the llama.cpp
# sources that the pinned llama-cpp-python sdist vendors, for AVX2 like `make bench-setup`'s Python build, into
# the model cache (~/.cache/brace_ros/models/llama-server-<version>/llama-server). llama-cpp-python's own server answers one request at a
# time; the fleet benchmark (bench/fleet_load.py) needs the slots. Minutes on 2 cores; nothing runs if it is built.
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=$(sed -n 's/^llama-cpp-python==\([0-9.]*\).*/\1/p' requirements-bench.txt)
DEST="${BRACE_MODEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/brace_ros/models}/llama-server-${VERSION}"
if [ -x "$DEST/llama-server" ]; then
  exit 0
fi
command -v cmake >/dev/null || { echo "build_llama_server: cmake is needed" >&2; exit 2; }
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
PIP=(python3 -m pip)
[ -x .venv/bin/pip ] && PIP=(.venv/bin/pip)
"${PIP[@]}" download -q --no-deps --no-binary :all: "llama-cpp-python==${VERSION}" -d "$WORK" 2>/dev/null
tar -xzf "$WORK"/llama_cpp_python-"${VERSION}".tar.gz -C "$WORK"
cmake -S "$WORK/llama_cpp_python-${VERSION}/vendor/llama.cpp" -B "$WORK/build" -DCMAKE_BUILD_TYPE=Release \
  -DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_AVX512=OFF -DBUILD_SHARED_LIBS=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON >/dev/null
cmake --build "$WORK/build" --target llama-server -j "$(nproc)" >/dev/null
mkdir -p "$DEST.partial"
cp "$WORK/build/bin/llama-server" "$DEST.partial/"
rm -rf "$DEST" && mv "$DEST.partial" "$DEST"  # never a half-copied binary
echo "llama-server: $DEST/llama-server"
