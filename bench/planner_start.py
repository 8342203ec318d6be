"""Planner start-up: peak RSS and seconds from interpreter start to configured, each backend in a fresh process.

  python bench/planner_start.py [--repeats 3] [--quick] [--out bench/out]

Rows: backend openai (the scripted OpenAI-protocol server, compressor recency: no torch), the in-process planner on
the tests' tiny saved model, and on SmolLM2-135M when it is installed. Prints a table naming the CPU and writes
<out>/planner_start.csv.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from report import cpu_report, describe_cpu, fill_defaults, print_written, write_csv  # bench/report.py

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
    parser.add_argument("--repeats", type=int, default=None, help="fresh processes per row (3; --quick: 1)")
    parser.add_argument("--quick", action="store_true", help="one process per row, no SmolLM2 row")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "out")
    args = parser.parse_args()
    fill_defaults(args, {"repeats": 1}, {"repeats": 3})
    from erecap_planner.models import SMOLLM2, resolve_model_path
    from erecap_planner.openai_fault_server import FaultServer
    from erecap_planner.testing import saved_tiny_llama

    tiny = saved_tiny_llama(Path(tempfile.mkdtemp()) / "tiny")
    rows = []
    with FaultServer() as server:
        variants = [("openai (recency)", {"backend": "openai", "server_url": server.base_url, "compressor": "recency",
                                          "model_path": tiny}),
                    ("local tiny (erecap)", {"model_path": tiny, "pruning_layers": [1, 3]})]
        if not args.quick:
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
    cpu = cpu_report()
    print(f"CPU: {describe_cpu(cpu)}; float32\n")
    print("| planner | configured (s, median) | peak RSS (MiB) | torch loaded |\n|---|---|---|---|")
    for r in rows:
        print(f"| {r['planner']} | {r['configured_s']} | {r['peak_rss_mib']} | {r['torch_loaded']} |")
    print_written(write_csv([{**r, "cpu": cpu["cpu"]} for r in rows], args.out / "planner_start.csv"))


if __name__ == "__main__":
    main()
