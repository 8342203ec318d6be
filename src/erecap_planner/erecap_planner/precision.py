"""Which device, dtype and int8 path the planner model runs with on this machine, and why.

`auto` chooses by what the hardware computes natively (bfloat16 only with native bf16 arithmetic), never by what was
fastest on one machine; docs/planner.md says why and how to approximate an AVX2-only CPU on a newer one.
"""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass
from typing import Optional

from brace_common.config import ConfigError

DTYPES = ("auto", "float32", "bfloat16", "float16")
DECODE_WEIGHTS = ("auto", "model", "float16", "int8")
# oneDNN ISA names below which bf16 is not computed natively (ONEDNN_MAX_CPU_ISA / DNNL_MAX_CPU_ISA).
_ONEDNN_NO_BF16 = ("SSE41", "AVX", "AVX2", "AVX2_VNNI", "AVX2_VNNI_2", "AVX512_CORE", "AVX512_CORE_VNNI")


@dataclass(frozen=True)
class Precision:
    """The resolved device, dtype and decode weights, with the reason for each choice."""

    device: str
    dtype: str
    decode_weights: str
    reason: str


@dataclass(frozen=True)
class CpuInfo:
    """What decides bf16 on a CPU: PyTorch's dispatch level, the CPU's flags, oneDNN's ISA cap."""

    capability: str                 # torch.backends.cpu.get_cpu_capability()
    flags: frozenset[str]           # /proc/cpuinfo flags (x86) or Features (Arm)
    machine: str = "x86_64"
    onednn_isa: str = ""            # ONEDNN_MAX_CPU_ISA / DNNL_MAX_CPU_ISA, upper-case, '' when unset

    @classmethod
    def read(cls) -> CpuInfo:
        """This machine's values."""
        # heavy: torch / transformers load only when a model is built or run
        import torch

        return cls(torch.backends.cpu.get_cpu_capability(), frozenset(cpu_flags()), platform.machine(),
                   (os.environ.get("ONEDNN_MAX_CPU_ISA") or os.environ.get("DNNL_MAX_CPU_ISA") or "").upper())

    def native_bf16(self) -> tuple[bool, str]:
        """(True, why) when this CPU computes bf16 natively and PyTorch uses it; else (False, why not)."""
        cap = self.capability.upper()
        if self.machine.lower() in ("aarch64", "arm64"):
            if "bf16" in self.flags and cap.startswith("SVE"):
                return True, f"Arm CPU with BF16 and {self.capability}"
            return False, f"Arm CPU without BF16 + SVE (capability {self.capability})"
        has = sorted(self.flags & {"avx512_bf16", "amx_bf16"})
        if not has:
            return False, f"CPU without AVX512-BF16 / AMX (PyTorch capability {self.capability}): bf16 is emulated"
        if not cap.startswith("AVX512"):
            return False, f"PyTorch dispatches at {self.capability} although the CPU has {', '.join(has)}"
        if self.onednn_isa and self.onednn_isa in _ONEDNN_NO_BF16:
            return False, f"oneDNN capped at {self.onednn_isa} although the CPU has {', '.join(has)}"
        return True, f"CPU computes bf16 natively ({', '.join(has)}, PyTorch capability {self.capability})"


def cpu_flags(path: str = "/proc/cpuinfo") -> set[str]:
    """The CPU feature flags of the first processor in /proc/cpuinfo (empty where there is none)."""
    try:
        with open(path) as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() in ("flags", "Features"):
                    return set(value.split())
    except OSError:
        pass
    return set()


def resolve(device: str = "auto", dtype: str = "auto", decode_weights: str = "auto", *,
            cpu: Optional[CpuInfo] = None, cuda_available: Optional[bool] = None, cuda_bf16: Optional[bool] = None,
            int8_runs: Optional[tuple[bool, str]] = None) -> Precision:
    """The precision for the `device` / `dtype` / `decode_weights` parameters on this machine.

    The keyword arguments replace what is read from the machine (tests). An
    explicit dtype is kept, with a warning in the reason when it is emulated.
    ConfigError (a ValueError) naming the parameter for an unknown value, or int8 where it cannot run.
    """
    if dtype not in DTYPES:
        raise ConfigError("dtype", f"dtype '{dtype}' is not one of {', '.join(DTYPES)}")
    if decode_weights not in DECODE_WEIGHTS:
        raise ConfigError("decode_weights", f"decode_weights '{decode_weights}' is not one of {', '.join(DECODE_WEIGHTS)}")
    if cuda_available is None or (cuda_bf16 is None and device != "cpu"):
        # heavy: torch / transformers load only when a model is built or run
        import torch

        cuda_available = torch.cuda.is_available() if cuda_available is None else cuda_available
        if cuda_bf16 is None:
            cuda_bf16 = bool(cuda_available and torch.cuda.is_bf16_supported())
    if device == "auto":
        device = "cuda" if cuda_available else "cpu"
    elif device.startswith("cuda") and not cuda_available:
        raise ConfigError("device", f"device '{device}' asked for, but this PyTorch sees no CUDA GPU "
                         f"(torch.cuda.is_available() is false; use 'auto' or 'cpu')")
    on_cpu = device == "cpu"
    reasons = []
    if on_cpu:
        cpu = cpu or CpuInfo.read()
        native, why = cpu.native_bf16()
        if dtype == "auto":
            dtype = "bfloat16" if native else "float32"
            reasons.append(f"dtype {dtype}: {why}")
        elif dtype in ("bfloat16", "float16") and not native:
            reasons.append(f"dtype {dtype} as configured, WARNING: {why}; expect it to be many times slower than float32")
        else:
            reasons.append(f"dtype {dtype} as configured")
    elif dtype == "auto":
        dtype = "bfloat16" if cuda_bf16 else "float32"
        reasons.append(f"dtype {dtype}: the GPU {'supports' if cuda_bf16 else 'does not support'} bf16")
    else:
        reasons.append(f"dtype {dtype} as configured")
    if decode_weights == "auto":
        if on_cpu and dtype == "float32":
            decode_weights = "float16"
            reasons.append("decode_weights float16: a decode step reads every weight once; half the bytes of float32")
        else:
            decode_weights = "model"
            reasons.append(f"decode_weights model: {dtype} on the {'CPU' if on_cpu else 'GPU'}")
    else:
        reasons.append(f"decode_weights {decode_weights} as configured")
    if decode_weights == "int8":
        if not on_cpu:
            raise ConfigError("decode_weights", f"decode_weights 'int8' runs on the CPU only (device is {device})")
        if int8_runs is None:
            # heavy: transformer imports torch
            from .transformer import int8_available

            int8_runs = int8_available()
        if not int8_runs[0]:
            raise ConfigError("decode_weights", f"decode_weights 'int8' cannot run here: {int8_runs[1]}")
    return Precision(device, dtype, decode_weights, "; ".join(reasons))
