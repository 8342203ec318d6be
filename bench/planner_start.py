"""Planner start-up: peak RSS and seconds from interpreter start to configured, each backend in a fresh process.

  python bench/planner_start.py [--repeats 3]

Rows: backend openai (the scripted OpenAI-protocol server, compressor recency: no torch), the in-process planner on
the tests' tiny saved model, and on SmolLM2-135M when it is installed. Prints a table naming the CPU and writes
bench/out/planner_start.csv.
"""

from __future__ import annotations

import argparse
import csv
import json
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = """
import time
t0 = time.monotonic()
import json, sys
import rclpy
from rclpy.parameter import Parameter
from erecap_planner.planner_node import ErecapPlannerNode
params = json.loads(sys.argv[1])
rclpy.init()
node = ErecapPlannerNode(namespace="/planner_start", parameter_overrides=[Parameter(k, value=v) for k, v in params.items()])
node.trigger_configure()
assert node.call_path is not None, node.last_error
configured_s = time.monotonic() - t0
hwm_kib = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print(json.dumps({"configured_s": configured_s, "peak_rss_mib": hwm_kib / 1024, "torch": "torch" in sys.modules}))
node.destroy_node()
rclpy.shutdown()
"""


def cpu_name() -> str:
    """The CPU's model name and its widest vector extension."""
    info = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").is_file() else ""
    model = next((line.split(":", 1)[1].strip() for line in info.splitlines() if line.startswith("model name")),
                 platform.processor())
    flags = next((line.split(":", 1)[1].split() for line in info.splitlines() if line.startswith("flags")), [])
    isa = "AMX" if "amx_tile" in flags else "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "?"
    return f"{model} ({isa})"


def measure(params: dict) -> dict:
    """One fresh process: configured seconds, peak RSS, whether torch was loaded."""
    run = subprocess.run([sys.executable, "-c", CHILD, json.dumps(params)], capture_output=True, text=True,
                         timeout=900)
    if run.returncode != 0:
        raise RuntimeError(run.stderr[-2000:])
    return json.loads(run.stdout.strip().splitlines()[-1])


def main() -> None:
    """Measure every row `--repeats` times and print the medians."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    from erecap_planner.models import SMOLLM2, resolve_model_path
    from erecap_planner.openai_fault_server import FaultServer
    from erecap_planner.testing import saved_tiny_llama

    tiny = saved_tiny_llama(Path(tempfile.mkdtemp()) / "tiny")
    rows = []
    with FaultServer() as server:
        variants = [("openai (recency)", {"backend": "openai", "server_url": server.base_url, "compressor": "recency",
                                          "model_path": tiny}),
                    ("local tiny (erecap)", {"model_path": tiny, "pruning_layers": [1, 3]})]
        try:
            resolve_model_path(SMOLLM2)
            variants.append(("local SmolLM2-135M (erecap)", {"model_path": SMOLLM2}))
        except (OSError, ValueError) as exc:
            print(f"SmolLM2 not installed: {exc}")
        for label, params in variants:
            runs = sorted((measure(params) for _ in range(args.repeats)), key=lambda r: r["configured_s"])
            mid = runs[len(runs) // 2]
            rows.append({"planner": label, "configured_s": round(mid["configured_s"], 2),
                         "peak_rss_mib": round(max(r["peak_rss_mib"] for r in runs), 1), "torch_loaded": mid["torch"],
                         "repeats": args.repeats})
    print(f"CPU: {cpu_name()}")
    print(f"{'planner':32} {'configured (s, median)':>24} {'peak RSS (MiB)':>16} {'torch':>6}")
    for r in rows:
        print(f"{r['planner']:32} {r['configured_s']:>24} {r['peak_rss_mib']:>16} {str(r['torch_loaded']):>6}")
    out = Path(__file__).resolve().parent / "out" / "planner_start.csv"
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", newline="") as f:
        writer = csv.DictWriter(f, [*rows[0], "cpu"])
        writer.writeheader()
        writer.writerows({**r, "cpu": cpu_name()} for r in rows)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
