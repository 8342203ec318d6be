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
`source scripts/env.sh && python bench/viewer.py [--worlds warehouse airsim ...] [--tiny] [--docs] [--quick]`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

from report import cpu_report, describe_cpu, print_written, save_plot, write_csv

from brace_common.domain_leases import fresh_domain
from brace_system_tests.viewer_path import WORLDS, look, record_world, what_a_person_sees
from erecap_planner.testing import saved_tiny_llama

OUT = Path(__file__).resolve().parent / "out"
DOCS_IMAGES = Path(__file__).resolve().parents[1] / "docs" / "images"
FIRST_FRAME_TARGET_S = 10.0
LOADED_TARGET_S = 30.0
SCENE_CHECKED = {"warehouse": 300, "airsim": 0, "pickfruit": 0, "pusht": 0, "textworld": 0}
"""The scene's body check per world (pixels of an agent's colour in one square; 0: not checked): the warehouse's
robots are boxes; drones far off, the arm's tool point and TextWorld's graph are too small or have no colour."""


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
    args = parser.parse_args()
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
