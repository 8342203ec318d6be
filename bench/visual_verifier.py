#!/usr/bin/env python3
"""OmniAct Table 6 in shape on the twin: does the visual verifier tell executed picks from failed ones, and how fast?

Trials are PickFruit episodes on the twin's kinematic loop (robot_bridge.pickfruit.pickfruit_rollout: the executor's
step monitor, the /act stand-in, the world's grasps and slips), with the front camera rendered from the world at every
control tick (robot_bridge.pickfruit.scene_render, the twin's calibration) and the geometric verifier beside the
executor (robot_bridge.verifier): each trial executes pick(X), place(X, bowl). A verdict with a violation halts the
running step, as the executor does over DDS.

Balanced set (OmniAct Sec. 4, Table 6): `--clean` trials without faults and `--failed` trials with one injected fault
each, in turn: a slip on the carry (the fruit falls on the table after 7-10 cm of carry: the lift is 6 cm), an
operator's hand taking the fruit away during the approach, and a phantom grasp (the gripper stops at the fruit's
width holding nothing: the executor reports the pick succeeded, the source is unchanged). Truth: whether the trial's
fruit ended in the bowl. Prediction: the expected post-action state is achieved when every end-of-step verdict of the
trial says the frames show the step's expected result and no verdict is a violation. Columns: trials, accuracy,
precision, recall, F1 (positive = achieved), missed failures, false alarms, frames compared, verifier cost per frame pair
(P50 / P95 ms: perception of the new frame; the first frame's is kept), the most frames from a fault to the first
verdict that says so (a violation, or an ended step whose result the frames do not show).
Targets: 0 missed failures, <= 2 false alarms per 10 clean trials, P95 cost <= 50 ms per frame pair.

With --bags (closed-loop runs' bags, e.g. `brace-run runs/piper_twin_verifier.yaml`'s), the preemption path as it
ran over DDS: violations published, steps the executor halted (FAILURE_PREEMPTED), preempt triggers, and
verdict-to-halt, the time from each violation's stamp to the stamp of the halted step's outcome (both ROS time of
one host). Target: verdict-to-halt <= 300 ms (P95 and max reported).
Writes <out>/visual_verifier.csv, visual_verifier_trials.csv and visual_verifier.png (the cost per frame pair, and
the frames from each fault to its verdict); exits 1 when a target is missed.
Run inside the workspace: `source scripts/env.sh && python bench/visual_verifier.py` (--quick: 2 + 3 trials).
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

from report import cpu_report, describe_cpu, fill_defaults, print_written, report_checks, save_plot, write_csv

from brace_common.action_schema import Step
from robot_bridge.orbbec.calibration import load_calibration
from robot_bridge.pickfruit.pickfruit_rollout import PickFruitRollout
from robot_bridge.pickfruit.pickfruit_world import PickFruitConfig, PickFruitWorld
from robot_bridge.pickfruit.scene_render import SceneRenderer
from robot_bridge.pickfruit.twin_camera import pickfruit_scene
from robot_bridge.verifier.verifier_config import VerifierConfig
from robot_bridge.verifier.visual_verifier import VisualVerifier

FAULTS = ("slip", "hand", "phantom")
TARGET_MISSED = 0
TARGET_FALSE_ALARMS_PER_10 = 2
TARGET_COST_MS = 50.0
TARGET_HALT_MS = 300.0
CALIBRATION = "package://robot_bridge/config/twin_front_camera.yaml"


@dataclass
class Trial:
    """One trial's truth, the verifier's prediction and its costs."""

    seed: int
    fault: str
    achieved: bool
    predicted: bool
    verdicts: int
    violations: int
    detail: str
    frames: int
    compare_ms: list
    frames_to_verdict: int


def world_for(fault: str, clock) -> PickFruitWorld:
    """A PickFruit world with one fault certain ('' = none)."""
    cfg = PickFruitConfig(slip_probability=1.0 if fault == "slip" else 0.0, slip_after_m=(0.07, 0.1),
                          hand_probability=1.0 if fault == "hand" else 0.0,
                          phantom_probability=1.0 if fault == "phantom" else 0.0)
    return PickFruitWorld(cfg, clock=clock)


def run_trial(seed: int, fault: str, renderer: SceneRenderer, verifier: VisualVerifier) -> Trial:
    """One episode: pick and place the task fruit, every tick rendered and given to the verifier."""
    clock = {"t": 0.0}
    world = world_for(fault, lambda: clock["t"])
    rollout = PickFruitRollout(world)
    fruit = rollout.start(seed)[0]
    plan = [("pick", {"object": fruit}), ("place", {"object": fruit, "target": "bowl"})]
    verifier.clear()
    verifier.on_plan([Step(a, p) for a, p in plan])
    verdicts, costs = [], []
    fault_frame = {"frame": None}

    def frame() -> str:
        clock["t"] = rollout.t
        rgb, depth = renderer.render(pickfruit_scene(world, rollout.tool, rollout.opening_m))
        out = verifier.on_frame(rgb, depth)
        costs.append(verifier.last.compare_ms)
        counts = world.counts
        if fault_frame["frame"] is None and (counts.slips or counts.hands or counts.phantoms):
            fault_frame["frame"] = verifier.frames
        verdicts.extend(out)
        return next((v.detail for v in out if v.violation), "")

    frame()   # the plan's first frame
    for action, parameters in plan:
        record = rollout.step(action, parameters, halt=frame)
        verifier.on_outcome(record.result.success)
        frame()
        if not record.result.success:
            break
    violations = [v for v in verdicts if v.violation]
    first = next((v.frame for v in verdicts if v.violation or (v.step_ended and not v.expected_state_achieved)), None)
    to_verdict = first - fault_frame["frame"] if first is not None and fault_frame["frame"] is not None else -1
    ends = [v for v in verdicts if v.step_ended]
    predicted = not violations and len(ends) == len(plan) and all(v.expected_state_achieved for v in ends)
    negative = next((v.detail for v in verdicts if v.violation or (v.step_ended and not v.expected_state_achieved)), "")
    return Trial(seed, fault or "none", world.success(), predicted, len(verdicts), len(violations), negative,
                 verifier.frames, costs[1:], to_verdict)


def score(trials: list[Trial]) -> dict:
    """Table 6's row: binary verification of the expected post-action state (positive = achieved)."""
    tp = sum(t.achieved and t.predicted for t in trials)
    fp = sum(not t.achieved and t.predicted for t in trials)
    fn = sum(t.achieved and not t.predicted for t in trials)
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    costs = sorted(c for t in trials for c in t.compare_ms)
    reaction = [t.frames_to_verdict for t in trials if t.frames_to_verdict >= 0]
    return {"trials": len(trials), "clean": sum(t.fault == "none" for t in trials),
            "accuracy": round(sum(t.achieved == t.predicted for t in trials) / len(trials), 3),
            "precision": round(precision, 3), "recall": round(recall, 3),
            "f1": round(2 * precision * recall / (precision + recall), 3) if precision + recall else 0.0,
            "missed_failures": fp, "false_alarms": fn, "frames": len(costs),
            "cost_p50_ms": round(statistics.median(costs), 2) if costs else float("nan"),
            "cost_p95_ms": round(costs[int(0.95 * (len(costs) - 1))], 2) if costs else float("nan"),
            "frames_to_verdict_max": max(reaction) if reaction else -1}


def halts(bag: Path) -> dict:
    """The preemption path in one bag: violations, halted steps, preempt triggers, verdict-to-halt (ms) of each."""
    from brace_msgs.msg import ExecutionOutcome, TriggerEvent, VerifierVerdict
    from rclpy.serialization import deserialize_message

    from brace_audit.bag import read_bag
    from brace_common.clock import seconds_of

    violations, delays, halted, preempts = [], [], 0, 0
    for m in read_bag(bag).messages:
        if m.topic.endswith("/verdicts"):
            v = deserialize_message(m.data, VerifierVerdict)
            if v.violation:
                violations.append(seconds_of(v.header.stamp))
        elif m.topic.endswith("/outcomes"):
            o = deserialize_message(m.data, ExecutionOutcome)
            if o.failure == ExecutionOutcome.FAILURE_PREEMPTED:
                halted += 1
                stamp = seconds_of(o.header.stamp)
                before = [s for s in violations if s <= stamp]
                if before:
                    delays.append(1000.0 * (stamp - before[-1]))
        elif m.topic.endswith("/triggers"):
            preempts += deserialize_message(m.data, TriggerEvent).kind == TriggerEvent.KIND_PREEMPT
    delays.sort()
    return {"bag": str(bag), "violations": len(violations), "halted_steps": halted, "preempt_triggers": preempts,
            "verdict_to_halt_p50_ms": round(statistics.median(delays), 1) if delays else float("nan"),
            "verdict_to_halt_p95_ms": round(delays[int(0.95 * (len(delays) - 1))], 1) if delays else float("nan"),
            "verdict_to_halt_max_ms": round(delays[-1], 1) if delays else float("nan")}


def figure(plt, trials: list[Trial]):
    """Left: the perceiver's cost per frame pair; right: frames from each fault to the verdict that says so."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6))
    left.hist([c for t in trials for c in t.compare_ms], bins=40, color="tab:blue")
    left.axvline(TARGET_COST_MS, color="tab:red", linestyle="--", label=f"target {TARGET_COST_MS:g} ms")
    left.set_xlabel("perceiver cost per frame pair (ms)")
    left.set_ylabel("frames")
    left.legend()
    faulted = [t for t in trials if t.fault != "none"]
    right.bar(range(len(faulted)), [max(t.frames_to_verdict, 0) for t in faulted],
              color=["tab:green" if t.frames_to_verdict >= 0 else "tab:red" for t in faulted])
    right.set_xticks(range(len(faulted)), [f"{t.fault}\n{t.seed}" for t in faulted], fontsize=7)
    right.set_ylabel("frames from fault to verdict (red: none)")
    fig.tight_layout()
    return fig


def main() -> int:
    """Run the balanced set, print Table 6's row and the trials, check the targets."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--clean", type=int, default=None, help="trials without a fault (seeds from --first-seed)")
    parser.add_argument("--failed", type=int, default=None, help="trials with one fault each (slip, hand, phantom)")
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--bags", type=Path, nargs="*", default=[], help="closed-loop bags: verdict-to-halt over DDS")
    parser.add_argument("--out", default="bench/out")
    args = parser.parse_args()
    fill_defaults(args, {"clean": 2, "failed": 3}, {"clean": 10, "failed": 10})
    cpu = cpu_report()
    print(f"# visual verifier, OmniAct Table 6 shape, {describe_cpu(cpu)}", flush=True)
    cfg = VerifierConfig(camera_calibration=CALIBRATION)
    camera = load_calibration(cfg.camera_calibration)
    renderer = SceneRenderer(camera, seed=args.first_seed)
    verifier = VisualVerifier(cfg.perceiver(camera), cfg.confirm_frames)
    started = time.monotonic()
    trials = [run_trial(args.first_seed + i, "", renderer, verifier) for i in range(args.clean)]
    trials += [run_trial(args.first_seed + 100 + i, FAULTS[i % len(FAULTS)], renderer, verifier)
               for i in range(args.failed)]
    row = {"backend": "geometric", **score(trials)}
    print("| " + " | ".join(row) + " |")
    print("|" + "---|" * len(row))
    print("| " + " | ".join(str(v) for v in row.values()) + " |")
    for t in trials:
        print(f"  seed {t.seed:>3} fault {t.fault:<8} achieved={t.achieved!s:<5} predicted={t.predicted!s:<5} "
              f"verdicts={t.verdicts} frames->verdict={t.frames_to_verdict} {t.detail}")
    print(f"({time.monotonic() - started:.1f} s)")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    print_written(write_csv([{**row, "cpu": cpu["cpu"], "flags": cpu["flags"]}], out / "visual_verifier.csv"),
                  write_csv([{k: v for k, v in vars(t).items() if k != "compare_ms"} for t in trials],
                            out / "visual_verifier_trials.csv"),
                  save_plot(out / "visual_verifier.png", lambda plt: figure(plt, trials)))
    false_alarm_limit = TARGET_FALSE_ALARMS_PER_10 * row["clean"] / 10
    checks = []
    if args.bags:
        rows = [halts(bag) for bag in args.bags]
        for r in rows:
            print(f"{r['bag']}: {r['violations']} violations, {r['halted_steps']} halted steps, "
                  f"{r['preempt_triggers']} preempt triggers, verdict-to-halt P50 {r['verdict_to_halt_p50_ms']} ms, "
                  f"P95 {r['verdict_to_halt_p95_ms']} ms, max {r['verdict_to_halt_max_ms']} ms")
        print_written(write_csv(rows, out / "visual_verifier_halts.csv"))
        worst = max((r["verdict_to_halt_max_ms"] for r in rows if r["halted_steps"]), default=float("nan"))
        checks.append((f"verdict-to-halt <= {TARGET_HALT_MS:g} ms", worst <= TARGET_HALT_MS, f"max {worst} ms"))
    return report_checks(checks + [
        ("missed failures = 0", row["missed_failures"] <= TARGET_MISSED, str(row["missed_failures"])),
        (f"false alarms <= {TARGET_FALSE_ALARMS_PER_10} per 10 clean trials", row["false_alarms"] <= false_alarm_limit,
         f"{row['false_alarms']} of {row['clean']}"),
        (f"verifier cost P95 <= {TARGET_COST_MS:g} ms per frame pair", row["cost_p95_ms"] <= TARGET_COST_MS,
         f"{row['cost_p95_ms']} ms"),
    ])


if __name__ == "__main__":
    raise SystemExit(main())
