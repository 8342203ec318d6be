#!/usr/bin/env python3
"""PushT's drift / contact-offset trigger: does the contact offset tell a lost contact from pushing, how fast, and
does the repair it asks for help?

Trials are PushT episodes on the twin's kinematic loop (robot_bridge.pickfruit.pickfruit_rollout with a PushTWorld:
the executor's step monitor, the /act stand-in, the world's pushing mechanics and contact losses). After every
control tick (0.2 s) the world's contact offset (how far the low fingertips slid along the table since they last
pushed the block) goes into the trigger monitor's drift detector (brace_controller.triggers.DriftDetector) with the
threshold and step count of runs/piper_twin_pusht.yaml. Two arms on the same seeds:

- `repair`: a drift trigger gives the stand-in its instruction anew (`start_over`), as the executor does for a
  plan repairing a drift (brace_common.plan_start); the planner's call is not simulated (its plan is the same push).
- `none`: drift is not acted on; a push that lost its contact ends over the goal and the next push starts there.

Truth is the world's own flag (`PushTWorld.lost`, from the loss until the stand-in starts over). Columns per arm:
trials, success (the block on the goal within `--steps` push steps), contact losses, losses detected (a drift
trigger while the contact was lost), missed, false alarms (a drift trigger while it was not), detection delay (ticks
from the loss to the trigger, P50 / max, and seconds), the median goal error at the trigger and 13.2 s later (the
paper's PushT motivation note: drift / contact-offset events trigger 2.0 replans per episode and the median goal
error falls by 22.1% within 13.2 s), drift triggers per episode and the mean episode duration.
Targets (ours; the paper states none): >= 95% of the contact losses detected, no false alarm in trials without
contact loss (`--clean`). A loss near the goal can go unseen: the fingertips slide less than the threshold to it.
Writes <out>/pusht_drift.csv and pusht_drift.png (the contact offset of one lossy trial, and detection delays); exits
1 when a target is missed. Run inside the workspace: `source scripts/env.sh && python bench/pusht_drift.py`
(--quick: 3 trials per arm).
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from report import cpu_report, describe_cpu, fill_defaults, print_written, report_checks, save_plot, write_csv

from brace_controller.triggers import DriftDetector
from robot_bridge.pickfruit.pickfruit_rollout import PickFruitRollout
from robot_bridge.pusht.pusht_world import BLOCK, GOAL, PushTConfig, PushTWorld, oracle_part
from robot_bridge.pusht.t_block import PARTS

RUN_CONFIG = Path(__file__).resolve().parents[1] / "src/brace_bringup/runs/piper_twin_pusht.yaml"
"""The twin run whose trigger_monitor drift parameters the trials use."""


def push(world: PushTWorld) -> list:
    """One plan: push the block by the part the oracle names (a planner that chooses well; runs/piper_twin_pusht.yaml's
    template names the part)."""
    return [("push", {"object": BLOCK, "target": GOAL, "part": oracle_part(world) or PARTS[0]})]
AFTER_S = 13.2
"""The paper's window after a drift trigger (BRACE App., PushT motivation subset)."""
ARMS = ("repair", "none")
TARGET_DETECTED = 0.95
"""Share of the contact losses a drift trigger must catch."""


@dataclass
class Trial:
    """One episode of one arm."""

    arm: str
    seed: int
    loss_probability: float
    success: bool = False
    duration_s: float = 0.0
    losses: int = 0
    detected: int = 0
    false_alarms: int = 0
    triggers: int = 0
    delays: list = field(default_factory=list)           # ticks from each detected loss to its trigger
    goal_at_trigger: list = field(default_factory=list)  # m
    goal_after: list = field(default_factory=list)       # m, AFTER_S later (or at the episode's end)
    offsets: list = field(default_factory=list)          # per tick (NaN: fingertips above the block)


def drift_parameters() -> tuple[float, int]:
    """drift_threshold_m and drift_steps of the twin's PushT run."""
    monitor = yaml.safe_load(RUN_CONFIG.read_text())["run"]["overrides"]["trigger_monitor"]
    return float(monitor["drift_threshold_m"]), int(monitor["drift_steps"])


def run_trial(arm: str, seed: int, loss_probability: float, steps: int, threshold_m: float, m: int) -> Trial:
    """Push steps until the block is on the goal or `steps` steps ended; drift judged after every tick."""
    world = PushTWorld(PushTConfig(contact_loss_probability=loss_probability))
    rollout = PickFruitRollout(world)
    rollout.start(seed)
    detector = DriftDetector(threshold_m, m)
    trial = Trial(arm, seed, loss_probability)
    state = {"lost_at": None, "detected": False, "pending": []}   # pending: (tick due, index into goal_after)

    def tick() -> None:
        now = rollout.ticks
        offset = world.contact_offset_m(rollout.tool)
        trial.offsets.append(offset)
        if world.lost and state["lost_at"] is None:
            state["lost_at"], state["detected"] = now, False
        elif not world.lost and state["lost_at"] is not None:
            state["lost_at"] = None
        error = world.goal_error().distance_m
        for _due, i in [p for p in state["pending"] if p[0] <= now]:
            trial.goal_after[i] = error
        state["pending"] = [p for p in state["pending"] if p[0] > now]
        if detector.update("arm", now, offset) is None:
            return
        trial.triggers += 1
        trial.goal_at_trigger.append(error)
        trial.goal_after.append(math.nan)
        state["pending"].append((now + round(AFTER_S / rollout.period_s), len(trial.goal_after) - 1))
        if state["lost_at"] is None:
            trial.false_alarms += 1
        elif not state["detected"]:
            state["detected"] = True
            trial.detected += 1
            trial.delays.append(now - state["lost_at"])
        if arm == "repair":
            rollout.policy.start_over()

    for _ in range(steps):
        rollout.execute(push(world), halt=tick)
        if world.success():
            break
    error = world.goal_error().distance_m
    trial.goal_after = [error if math.isnan(e) else e for e in trial.goal_after]
    trial.success = world.success()
    trial.duration_s = round(rollout.ticks * rollout.period_s, 1)
    trial.losses = world.counts.contact_losses
    return trial


def _median(values: list) -> float:
    return round(float(statistics.median(values)), 4) if values else math.nan


def score(arm: str, trials: list[Trial], period_s: float) -> dict:
    """One arm's row."""
    n = len(trials)
    delays = sorted(d for t in trials for d in t.delays)
    at, after = [e for t in trials for e in t.goal_at_trigger], [e for t in trials for e in t.goal_after]
    losses, detected = sum(t.losses for t in trials), sum(t.detected for t in trials)
    return {"arm": arm, "trials": n, "success": round(sum(t.success for t in trials) / n, 3) if n else math.nan,
            "contact_losses": losses, "detected": detected, "missed": losses - detected,
            "false_alarms": sum(t.false_alarms for t in trials),
            "delay_p50_ticks": _median(delays), "delay_max_ticks": delays[-1] if delays else math.nan,
            "delay_max_s": round(delays[-1] * period_s, 1) if delays else math.nan,
            "drift_per_episode": round(sum(t.triggers for t in trials) / n, 2) if n else math.nan,
            "goal_error_at_trigger_m": _median(at), "goal_error_after_m": _median(after),
            "goal_error_decrease": round(1 - _median(after) / _median(at), 3) if at and _median(at) > 0 else math.nan,
            "duration_s": round(statistics.fmean(t.duration_s for t in trials), 1) if n else math.nan}


def figure(plt, trials: list[Trial], threshold_m: float, period_s: float):
    """Left: the contact offset of the lossy trial with the most losses; right: the goal error at each drift trigger and
    AFTER_S later, per arm."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6))
    shown = max(trials, key=lambda t: (t.arm == "repair", t.losses))
    left.plot([i * period_s for i in range(len(shown.offsets))], [100 * o for o in shown.offsets], color="tab:blue")
    left.axhline(100 * threshold_m, color="tab:red", linestyle="--", label=f"threshold {100 * threshold_m:g} cm")
    left.set_xlabel(f"time (s), seed {shown.seed}, {shown.losses} contact losses")
    left.set_ylabel("contact offset (cm; gaps: above the block)")
    left.legend()
    data, labels = [], []
    for arm in ARMS:
        data += [[100 * e for t in trials if t.arm == arm for e in t.goal_at_trigger],
                 [100 * e for t in trials if t.arm == arm for e in t.goal_after]]
        labels += [f"{arm}\nat trigger", f"{arm}\n{AFTER_S:g} s later"]
    right.boxplot([d or [math.nan] for d in data])
    right.set_xticks(range(1, len(labels) + 1), labels, fontsize=8)
    right.set_ylabel("block's goal error (cm)")
    fig.tight_layout()
    return fig


def main() -> int:
    """Run both arms on lossy and clean seeds, print the table, check the targets."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--trials", type=int, default=None, help="lossy trials per arm (seeds from --first-seed)")
    parser.add_argument("--clean", type=int, default=None, help="trials without contact loss per arm")
    parser.add_argument("--loss-probability", type=float, default=0.3, help="per contact, in the lossy trials")
    parser.add_argument("--steps", type=int, default=6, help="push steps an episode may take")
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--out", default="bench/out")
    args = parser.parse_args()
    fill_defaults(args, {"trials": 3, "clean": 2}, {"trials": 20, "clean": 10})
    cpu = cpu_report()
    threshold_m, m = drift_parameters()
    print(f"# PushT drift / contact offset (threshold {threshold_m:g} m for {m} steps), {describe_cpu(cpu)}", flush=True)
    started = time.monotonic()
    period_s = PickFruitRollout(PushTWorld()).period_s
    trials, rows = [], []
    for arm in ARMS:
        lossy = [run_trial(arm, args.first_seed + i, args.loss_probability, args.steps, threshold_m, m)
                 for i in range(args.trials)]
        clean = [run_trial(arm, args.first_seed + i, 0.0, args.steps, threshold_m, m) for i in range(args.clean)]
        trials += lossy + clean
        rows += [{**score(arm, lossy, period_s), "loss_probability": args.loss_probability},
                 {**score(arm, clean, period_s), "loss_probability": 0.0}]
    print("| " + " | ".join(rows[0]) + " |")
    print("|" + "---|" * len(rows[0]))
    for row in rows:
        print("| " + " | ".join(str(v) for v in row.values()) + " |")
    print(f"({time.monotonic() - started:.1f} s)")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    print_written(write_csv([{**r, "cpu": cpu["cpu"], "flags": cpu["flags"]} for r in rows], out / "pusht_drift.csv"),
                  save_plot(out / "pusht_drift.png", lambda plt: figure(plt, trials, threshold_m, period_s)))
    lossy_rows = [r for r in rows if r["loss_probability"] > 0]
    clean_alarms = sum(r["false_alarms"] for r in rows if r["loss_probability"] == 0)
    losses, detected = sum(r["contact_losses"] for r in lossy_rows), sum(r["detected"] for r in lossy_rows)
    return report_checks([
        (f">= {TARGET_DETECTED:.0%} of the contact losses detected", detected >= TARGET_DETECTED * losses,
         ", ".join(f"{r['arm']} {r['detected']} of {r['contact_losses']}" for r in lossy_rows)),
        ("no false alarm without contact loss", clean_alarms == 0, f"{clean_alarms}"),
    ])


if __name__ == "__main__":
    raise SystemExit(main())
