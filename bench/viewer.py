#!/usr/bin/env python3
"""The viewer from bags in a real browser: how soon a person sees a run, and a picture of every world.

For each world (warehouse, AirSim drones, the PiPER twin's PickFruit and PushT, TextWorld): one short episode through
brace-run, its bag through `brace-audit view`'s mapping into an .rrd, served by Rerun's web viewer on 127.0.0.1,
opened in Debian's chromium (headless, WebGL on SwiftShader) through Playwright, the time cursor on the middle step,
the screenshot checked for what a person would see (brace_system_tests.viewer_path, the browser test's path).
Timed: the bag's conversion, the first frame (the viewer's page up) and the whole run in the viewer.

Targets (a demo run on 2 cores): first frame <= 10 s, whole run drawn <= 30 s. Writes <out>/viewer.{csv,png} and
<out>/viewer_<world>.png (--out, default bench/out; --docs: the pictures also into docs/images/); exits 1 when a
target is missed or a picture lacks what a person should see.

`--live N`: the live viewer's cost instead: `brace-run demo --variants brace_erecap --episodes N` without the viewer,
with `--view` (brace_viewer in its own process and its server), and with `--view` and Chromium watching, one after the
other in one invocation; each row's call P95 and SLO violation from its bag, the CPU time and peak RSS of brace-run
with its children, of the viewer node's process and of the viewer's server. Target: P95 and SLO violation with the
viewer within the run-to-run noise of the row without it (the rows' difference is reported; repeat the invocation to
see the noise). Writes <out>/viewer_live.csv.
`source scripts/env.sh && python bench/viewer.py [--worlds warehouse airsim ...] [--tiny] [--docs] [--quick]
[--live N]`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import psutil
from report import cpu_report, describe_cpu, print_written, save_plot, write_csv

from brace_audit.audit import records_from_bag
from brace_audit.audit_report import summary
from brace_audit.view_browser import ViewerPage
from brace_common.domain_leases import fresh_domain
from brace_common.local_http import free_port
from brace_system_tests.viewer_path import WORLDS, look, record_world, what_a_person_sees
from erecap_planner.testing import saved_tiny_llama

OUT = Path(__file__).resolve().parent / "out"
DOCS_IMAGES = Path(__file__).resolve().parents[1] / "docs" / "images"
FIRST_FRAME_TARGET_S = 10.0
LOADED_TARGET_S = 30.0
SCENE_CHECKED = {"warehouse": 60, "airsim": 0, "pickfruit": 0, "pusht": 0, "textworld": 0}
"""The scene's check per world (pixels of each agent's own colour; 0: not checked): the warehouse's robots are
boxes; drones far off, the arm's tool point and TextWorld's graph are too small or have no colour of their own."""


def tiny_planner(folder: Path) -> tuple[str, ...]:
    """brace-run settings for a tiny planner model (seconds per call, plans of no use: the quick run's)."""
    model = saved_tiny_llama(folder / "tiny_llama")
    return (f"erecap_planner.model_path={model}", "erecap_planner.pruning_layers=[1, 3]",
            "erecap_planner.predictor_path=''", "erecap_planner.adapter_path=''")


def main() -> int:
    """Each world's run, its view in the browser, the table, CSV, PNGs."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worlds", nargs="*", choices=list(WORLDS), help="default: every world (--quick: warehouse)")
    parser.add_argument("--tiny", action="store_true", help="a tiny planner model instead of the shipped one")
    parser.add_argument("--docs", action="store_true", help="also write the pictures into docs/images/")
    parser.add_argument("--quick", action="store_true", help="smoke run: the warehouse with a tiny planner")
    parser.add_argument("--out", type=Path, default=OUT, help="folder of the CSV and PNGs")
    parser.add_argument("--live", type=int, default=0, metavar="EPISODES",
                        help="the live viewer's cost beside the demo instead (episodes per row)")
    args = parser.parse_args()
    if args.live:
        return live(args)
    worlds = args.worlds or (["warehouse"] if args.quick else list(WORLDS))
    args.out.mkdir(parents=True, exist_ok=True)
    cpu = cpu_report()
    planner = "a tiny model" if args.tiny or args.quick else "the shipped planner"
    print(f"\nThe viewer from bags in Chromium ({describe_cpu(cpu)}; runs with {planner}; WebGL on SwiftShader)")
    print("| world | agents | steps | convert s | first frame s | whole run s | targets | seen |")
    print("|---|---|---|---|---|---|---|---|")
    rows, ok = [], True
    with tempfile.TemporaryDirectory(prefix="bench_viewer_") as tmp:
        work = Path(tmp)
        model = tiny_planner(work) if args.tiny or args.quick else ()
        for world in worlds:
            os.environ["ROS_DOMAIN_ID"] = str(fresh_domain())   # this run's own DDS domain
            folder = record_world(world, work / world, model)
            picture = args.out / f"viewer_{world}.png"
            seen = look(folder, None, picture)
            checked = what_a_person_sees(seen.png, WORLDS[world].agents, SCENE_CHECKED[world])
            met = seen.first_frame_s <= FIRST_FRAME_TARGET_S and seen.loaded_s <= LOADED_TARGET_S
            ok &= met and not checked.problems
            print(f"| {world} | {WORLDS[world].agents} | {seen.last_step + 1} | {seen.convert_s:.1f} | "
                  f"{seen.first_frame_s:.1f} | {seen.loaded_s:.1f} | {'ok' if met else 'MISS'} | "
                  f"{'; '.join(checked.problems) or 'ok'} |")
            rows.append({"world": world, "agents": WORLDS[world].agents, "steps": seen.last_step + 1,
                         "convert_s": round(seen.convert_s, 2), "first_frame_s": round(seen.first_frame_s, 2),
                         "loaded_s": round(seen.loaded_s, 2), "first_frame_target_s": FIRST_FRAME_TARGET_S,
                         "loaded_target_s": LOADED_TARGET_S, "met": met, "problems": "; ".join(checked.problems),
                         "slo_pixels": checked.slo_line, "event_pixels": checked.event_text, "planner": planner,
                         "cpu": cpu["cpu"], "torch_capability": cpu["torch_capability"]})
            if args.docs:
                DOCS_IMAGES.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(picture, DOCS_IMAGES / picture.name)
    print_written(write_csv(rows, args.out / "viewer.csv"), save_plot(args.out / "viewer.png", lambda plt: plot(plt, rows)),
                  *(args.out / f"viewer_{w}.png" for w in worlds))
    return 0 if ok else 1


LIVE_ROWS = (("without the viewer", False, False), ("with brace_viewer", True, False),
             ("with brace_viewer and Chromium watching", True, True))


class Sampler:
    """Peak RSS and CPU time of a process and its children, of its child named `rerun` (the viewer's server) and of
    the brace_viewer node's process, sampled every 0.5 s until the process ends."""

    def __init__(self, pid: int) -> None:
        self.process = psutil.Process(pid)
        self.peak_rss = self.viewer_peak_rss = self.node_peak_rss = 0
        self.cpu_s = self.viewer_cpu_s = self.node_cpu_s = 0.0
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while self.process.is_running() and self.process.status() != psutil.STATUS_ZOMBIE:
            try:
                children = self.process.children(recursive=True)
                rss = self.process.memory_info().rss
                cpu = sum(self.process.cpu_times()[:2])
                for child in children:
                    child_rss, child_cpu = child.memory_info().rss, sum(child.cpu_times()[:2])
                    rss, cpu = rss + child_rss, cpu + child_cpu
                    if child.name() == "rerun":
                        self.viewer_peak_rss = max(self.viewer_peak_rss, child_rss)
                        self.viewer_cpu_s = max(self.viewer_cpu_s, child_cpu)
                    elif any("brace_viewer" in part for part in child.cmdline()[:2]):
                        self.node_peak_rss = max(self.node_peak_rss, child_rss)
                        self.node_cpu_s = max(self.node_cpu_s, child_cpu)
                self.peak_rss, self.cpu_s = max(self.peak_rss, rss), max(self.cpu_s, cpu)
            except psutil.Error:    # a child that just ended
                pass
            time.sleep(0.5)


def live(args: argparse.Namespace) -> int:
    """The demo without and with the live viewer (and with a browser watching): the stack's P95 and SLO violation,
    CPU and memory of each row."""
    cpu = cpu_report()
    print(f"\nThe live viewer's cost beside the demo ({args.live} episodes per row, K = 4; {describe_cpu(cpu)})")
    print("| row | calls | P95 ms | SLO violation | success | brace-run CPU s | peak RSS MiB | viewer node CPU s | "
          "viewer node peak RSS MiB | viewer server CPU s | viewer server peak RSS MiB | browser CPU s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench_viewer_live_") as tmp:
        model = tiny_planner(Path(tmp)) if args.tiny else ()
        for label, view, browser in LIVE_ROWS:
            web, grpc = free_port(), free_port()
            cmd = [sys.executable, "-m", "brace_bringup.runner", "demo", "--variants", "brace_erecap", "--episodes",
                   str(args.live), "--output", str(Path(tmp) / "runs"), "--quiet"]
            for item in (*model, *((f"brace_viewer.port={web}", f"brace_viewer.grpc_port={grpc}") if view else ())):
                cmd += ["--set", item]
            cmd += ["--view"] if view else []
            env = {**os.environ, "ROS_DOMAIN_ID": str(fresh_domain())}
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
            sampler = Sampler(proc.pid)
            lines: list[str] = []
            watcher, used = None, {"browser_cpu_s": 0.0}
            for line in proc.stdout:
                lines.append(line)
                if browser and watcher is None and line.startswith("viewer: "):
                    watcher = threading.Thread(target=watch, args=(line.split()[1], proc, used), daemon=True)
                    watcher.start()
            proc.wait()
            sampler.thread.join()
            if watcher is not None:
                watcher.join()
            if proc.returncode != 0 or not lines[-1].startswith("run folder: "):
                print(f"brace-run failed ({proc.returncode}): {''.join(lines)[-2000:]}", file=sys.stderr)
                return 1
            folder = Path(lines[-1].removeprefix("run folder: ").split(" (")[0])
            records, _ = records_from_bag(folder / "brace_erecap" / "bag")
            s = summary(records)
            row = {"row": label, "episodes": args.live, "calls": s["calls"], "latency_p95_ms": s["latency_p95_ms"],
                   "slo_violation": s["slo_violation"], "success": s["success"], "cpu_s": round(sampler.cpu_s, 1),
                   "peak_rss_mib": round(sampler.peak_rss / 2 ** 20), "viewer_node_cpu_s": round(sampler.node_cpu_s, 1),
                   "viewer_node_peak_rss_mib": round(sampler.node_peak_rss / 2 ** 20),
                   "viewer_cpu_s": round(sampler.viewer_cpu_s, 1),
                   "viewer_peak_rss_mib": round(sampler.viewer_peak_rss / 2 ** 20),
                   "browser_cpu_s": round(used["browser_cpu_s"], 1),
                   "planner": "a tiny model" if args.tiny else "the shipped planner", "cpu": cpu["cpu"],
                   "torch_capability": cpu["torch_capability"]}
            rows.append(row)
            print(f"| {label} | {row['calls']} | {row['latency_p95_ms']:.0f} | {100 * row['slo_violation']:.1f}% | "
                  f"{100 * row['success']:.0f}% | {row['cpu_s']} | {row['peak_rss_mib']} | {row['viewer_node_cpu_s']} | "
                  f"{row['viewer_node_peak_rss_mib']} | {row['viewer_cpu_s']} | "
                  f"{row['viewer_peak_rss_mib']} | {row['browser_cpu_s']} |")
    base, viewed = rows[0], rows[1]
    print(f"\nwith the viewer: P95 {viewed['latency_p95_ms'] - base['latency_p95_ms']:+.0f} ms, SLO violation "
          f"{100 * (viewed['slo_violation'] - base['slo_violation']):+.1f} points (one run each: compare with the "
          "spread of repeated runs)")
    print_written(write_csv(rows, args.out / "viewer_live.csv"))
    return 0


def watch(url: str, proc: subprocess.Popen, used: dict[str, float]) -> None:
    """A person's browser on the live viewer (once its node serves it: brace-run prints the URL before the run
    starts) until the run ends; the browser's CPU time (Chromium and Playwright's driver) into `used`."""
    while proc.poll() is None:
        try:
            with urllib.request.urlopen(url, timeout=2.0):
                break
        except OSError:
            time.sleep(0.5)
    if proc.poll() is not None:
        return
    with ViewerPage(url) as page:
        while proc.poll() is None:
            page.page.wait_for_timeout(1000)
            run = {proc.pid} | {c.pid for c in _children(proc.pid)}
            used["browser_cpu_s"] = sum(sum(c.cpu_times()[:2]) for c in psutil.Process().children(recursive=True)
                                        if c.pid not in run)


def _children(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []


def plot(plt, rows: list[dict]):
    """First frame and whole run per world, the targets marked."""
    fig, ax = plt.subplots(figsize=(7, 3.5))
    xs = range(len(rows))
    ax.bar([x - 0.2 for x in xs], [r["first_frame_s"] for r in rows], width=0.4, label="first frame")
    ax.bar([x + 0.2 for x in xs], [r["loaded_s"] for r in rows], width=0.4, label="whole run in the viewer")
    ax.axhline(FIRST_FRAME_TARGET_S, color="tab:blue", linestyle=":", label="target first frame 10 s")
    ax.axhline(LOADED_TARGET_S, color="tab:orange", linestyle=":", label="target whole run 30 s")
    ax.set_xticks(list(xs), [r["world"] for r in rows])
    ax.set_ylabel("s")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


if __name__ == "__main__":
    sys.exit(main())
