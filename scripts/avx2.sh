#!/usr/bin/env bash
# Run a command as on an AVX2-only CPU: PyTorch's, oneDNN's, MKL's, fbgemm's and NumPy's own dispatch caps
# (NumPy 2.4's dispatch targets above AVX2 are X86_V4, AVX512_ICL and AVX512_SPR: the verifier and the renderer).
# On a newer CPU (AVX-512, AVX512-BF16, AMX) this approximates the ordinary machines the numbers must hold on;
# torch.backends.cpu.get_cpu_capability() then reports AVX2 and the planner's dtype 'auto' resolves to float32.
#   scripts/avx2.sh make demo
#   OMP_NUM_THREADS=1 scripts/avx2.sh make demo      # and with half the compute
set -euo pipefail
export ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2 FBGEMM_ENABLE_INSTRUCTIONS=AVX2
export NPY_DISABLE_CPU_FEATURES="X86_V4 AVX512_ICL AVX512_SPR"
exec "$@"
