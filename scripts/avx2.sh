#!/usr/bin/env bash
# Run a command as on an AVX2-only CPU: PyTorch's, oneDNN's, MKL's and fbgemm's own dispatch caps.
# On a newer CPU (AVX-512, AVX512-BF16, AMX) this approximates the ordinary machines the numbers must hold on;
# torch.backends.cpu.get_cpu_capability() then reports AVX2 and the planner's dtype 'auto' resolves to float32.
#   scripts/avx2.sh make demo
#   OMP_NUM_THREADS=1 scripts/avx2.sh make demo      # and with half the compute
set -euo pipefail
export ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2 FBGEMM_ENABLE_INSTRUCTIONS=AVX2
exec "$@"
