"""Output helpers shared by the benchmarks in bench/."""

from __future__ import annotations

import argparse
import csv
from collections.abc import Callable
from pathlib import Path
from typing import Any, Optional


def write_csv(rows: list[dict], path: Path) -> Path:
    """Write `rows` as a CSV file (the columns: every key of any row, first seen first), creating its folder."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fields = list(dict.fromkeys(key for row in rows for key in row))
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)
    return path


def read_rows(path: Path) -> list[dict]:
    """A CSV file's rows (empty when missing): what a resumable benchmark has measured so far."""
    if not path.exists():
        return []
    with path.open() as f:
        return list(csv.DictReader(f))


def append_rows(rows: list[dict], path: Path) -> None:
    """Append rows to a CSV file (the header when it is new), so an interrupted benchmark keeps what it measured."""
    new = not path.exists()
    with path.open("a", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        if new:
            writer.writeheader()
        writer.writerows(rows)


def sim_planner_checkpoint(name: str) -> str:
    """`adapter_path` or `predictor_path` as brace_bringup's params/erecap_planner_sim.yaml ships it (the benches' default)."""
    from brace_bringup.run_config import params_dir
    from brace_common.config import load_ros_parameters

    sim = params_dir() / "erecap_planner_sim.yaml"
    return str(load_ros_parameters(sim, "erecap_planner")[name])


def fill_defaults(args: argparse.Namespace, quick: dict, full: dict) -> None:
    """Give each argument named in `quick` (a --quick run) or else `full` that value where the command line left it None."""
    for key, value in (quick if args.quick else full).items():
        if getattr(args, key) is None:
            setattr(args, key, value)


def load_planner_model(adapter: str, device: str = "auto", dtype: str = "auto", model_path: str = ""):
    """(model, tokenizer): `model_path` (default SmolLM2-135M-Instruct, the sim planner's model) with the LoRA adapter
    at `adapter` merged ('' = none)."""
    # heavy: torch loads only in the benches that run a model, after their dispatch caps are set
    from brace_common.config import resolve_path
    from erecap_planner.adapter import merge_adapter
    from erecap_planner.models import SMOLLM2, load_model

    model, tokenizer = load_model(model_path or SMOLLM2, device, dtype)
    if adapter:
        merge_adapter(model, resolve_path(adapter))
    return model, tokenizer


def report_checks(checks: list[tuple[str, bool, str]]) -> int:
    """Print each (target, met, measured) check; the exit status: 0 when every target is met, else 1."""
    for name, ok, value in checks:
        print(f"{'ok  ' if ok else 'MISS'} {name}: {value}")
    return 0 if all(ok for _, ok, _ in checks) else 1


def pyplot():
    """matplotlib.pyplot on the file-only Agg backend; ImportError without matplotlib."""
    # optional: the benches write their CSV without matplotlib and plot only where it is installed
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_plot(path: Path, draw: Callable[[Any], Any], dpi: int = 110) -> Optional[Path]:
    """Write the figure `draw(pyplot)` returns (laid out by `draw`) to `path` and close it; None, with nothing
    written, where matplotlib is not installed (the CSV is the result, the PNG its picture)."""
    try:
        plt = pyplot()
    except ImportError:
        return None
    fig = draw(plt)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return path


def print_written(*paths: Optional[Path]) -> None:
    """A bench's last line: the files it wrote (None: not written)."""
    print("\nwrote " + " and ".join(str(path) for path in paths if path is not None))


# PyTorch's, oneDNN's, MKL's, fbgemm's and NumPy's own dispatch caps: on a newer CPU they approximate an AVX2-only one
# (scripts/avx2.sh sets the same).
AVX2_ENV = {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2",
            "FBGEMM_ENABLE_INSTRUCTIONS": "AVX2", "NPY_DISABLE_CPU_FEATURES": "X86_V4 AVX512_ICL AVX512_SPR"}


def reexec_as_avx2() -> None:
    """Re-execute this script with AVX2_ENV set (it must be set before torch is imported); no-op when it is."""
    import os
    import sys

    if all(os.environ.get(k) == v for k, v in AVX2_ENV.items()):
        return
    os.environ.update(AVX2_ENV)
    os.execv(sys.executable, [sys.executable, *sys.argv])


def cpu_report() -> dict:
    """The CPU a figure ran on: model, PyTorch's dispatch level, the flags that matter, threads, emulation."""
    import os
    import platform

    import torch

    model = platform.processor() or platform.machine()
    flags: set[str] = set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and model in ("", platform.machine(), platform.processor()):
                    model = value.strip()
                elif key.strip() in ("flags", "Features") and not flags:
                    flags = set(value.split())
    except OSError:
        pass
    wanted = ("avx2", "fma", "f16c", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16", "asimd", "sve", "bf16")
    emulated = all(os.environ.get(k) == v for k, v in AVX2_ENV.items())
    return {"cpu": model, "torch_capability": torch.backends.cpu.get_cpu_capability(),
            "flags": " ".join(f for f in wanted if f in flags), "threads": torch.get_num_threads(),
            "avx2_emulated": emulated}


def describe_cpu(info: dict) -> str:
    """One line for a table's caption."""
    return (f"{info['cpu']}, PyTorch capability {info['torch_capability']}"
            f"{' (AVX2 dispatch caps set on a newer CPU)' if info['avx2_emulated'] else ''}, "
            f"flags: {info['flags']}, {info['threads']} threads")
