#!/usr/bin/env python3
"""GiG's loop detection on labelled trajectories: does a revisit of a state raise a loop, and only a revisit?

Loops are injected into oracle runs through each world's own transition model, never by copying states: in the
warehouse (held-out seeds, K = 1 and 3, no slips, no drift) an agent is sent, at a random step, to a random other
place before its oracle plan resumes (it walks there and back along the aisles); in TextWorld cooking (held-out games)
the player, at a random step of the walkthrough, goes through a random exit and back before the policy resumes.

Labels come from each world's physical state, not from the detector's view: in the warehouse an agent's (cell, what
it holds, and for each of its tasks: done, the shelf its object is on, who holds it); in TextWorld the game's whole
set of facts. A state is a revisit when its label equals one the agent held before its previous state (waiting is not
a loop). Each detector sees the states one by
one as the trigger monitor does (brace_common.session_graph): `key` (the scene graph's canonical hash: warehouse
hops 2, cell 1 m; TextWorld the whole scene) and, for each encoder given with --encoder, `embedding` (a revisit
when z_t is within tau of an earlier node but the previous).

Columns per world and detector: revisits (labelled), recall (labelled revisits detected), false positives
(detections that are no revisit / detections), false alarm rate (detections that are no revisit / states that are
no revisit), injected loops and the share of them caught (a detection inside the detour), time per state.
Targets: recall >= 95 % and false positives <= 5 % for the key detector (the one the trigger monitor runs).

With --bags (closed-loop runs' bags, e.g. reproduce's table30 GiG row), the reaction to a loop trigger: how often the
agent reaches a state it had not held this episode (its scene graph's key, as the monitor cut it) within
RECOVERY_STEPS world steps of the trigger. Target: >= 70 % of loop triggers.
Writes <out>/loop_detection.csv (and loop_recovery.csv); exits 1 when a target is missed.
Run inside the workspace: `source scripts/env.sh && python bench/loop_detection.py` (--quick: fewer runs).
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from report import cpu_report, describe_cpu, fill_defaults, print_written, report_checks, write_csv

TARGET_RECALL = 0.95
TARGET_RECOVERY = 0.70
RECOVERY_STEPS = 3
TARGET_FALSE_POSITIVES = 0.05
TAU = 0.1


@dataclass
class Trajectory:
    """One agent's states in order: its scene graphs, their physical labels, and which fall inside an injected
    detour (the index of the detour, or -1)."""

    world: str
    views: list = field(default_factory=list)
    labels: list = field(default_factory=list)
    detour: list = field(default_factory=list)


def collapse(t: Trajectory) -> Trajectory:
    """Consecutive states with the same label are one state (the agent waited): the first stays."""
    out = Trajectory(t.world)
    for view, label, detour in zip(t.views, t.labels, t.detour, strict=True):
        if out.labels and out.labels[-1] == label:
            continue
        out.views.append(view)
        out.labels.append(label)
        out.detour.append(detour)
    return out


def revisits(labels: list) -> list[bool]:
    """Whether each state's label equals one held before its previous state."""
    seen: list = []
    out = []
    for i, label in enumerate(labels):
        out.append(label in seen[:-1] if i >= 2 else False)
        seen.append(label)
    return out


def warehouse_runs(seeds: range, agents: tuple[int, ...], rng: random.Random, max_steps: int = 80) -> list[Trajectory]:
    """Oracle runs with one injected detour per agent (see the module docstring)."""
    from brace_common.action_schema import Step
    from brace_common.scene_graph import agent_view
    from sim_bridges.warehouse.warehouse_world import Warehouse, WorldConfig, world_state

    out = []
    for k in agents:
        for seed in seeds:
            w = Warehouse(WorldConfig(num_agents=k, seed=seed, grasp_failure=0.0, drift=0.0, max_steps=max_steps))
            places = sorted([*w.shelves, *w.docks, *w.parks])
            names = sorted(w.agents)
            detour_at = {a: rng.randrange(1, 12) for a in names}
            in_detour = {a: -1 for a in names}
            trajs = {a: Trajectory("warehouse") for a in names}
            for a in names:
                w.set_plan(a, w.oracle_plan(a))

            def record(w=w, names=names, trajs=trajs, in_detour=in_detour) -> None:
                state = world_state(w, 0)
                for a in names:
                    agent = w.agents[a]
                    mine = [t for t in w.tasks if a in (t.carrier, t.giver)]
                    holders = {b.holding: b.name for b in w.agents.values() if b.holding}
                    where = tuple((t.done, w.objects.get(t.obj), holders.get(t.obj)) for t in mine)
                    trajs[a].views.append(agent_view(state, a, 2, 1.0))
                    trajs[a].labels.append((agent.pos, agent.holding, where))
                    trajs[a].detour.append(in_detour[a])

            record()
            for t in range(1, max_steps + 1):
                for a in names:
                    if t == detour_at[a]:
                        target = rng.choice([p for p in places if w.access(p) != w.agents[a].pos])
                        w.set_plan(a, [Step("move_to", {"target": target})])
                        in_detour[a] = 0
                    elif w.agents[a].current is None:
                        task = w.task_of(a)
                        if in_detour[a] == 0:
                            in_detour[a] = 1           # the detour's place reached: the way back
                        elif in_detour[a] == 1:
                            in_detour[a] = -1
                        if task is not None and not task.done:
                            w.set_plan(a, w.oracle_plan(a))
                w.step()
                for a in names:  # the way back ends when the agent is somewhere the oracle had not taken it
                    if in_detour[a] == 1 and w.agents[a].current is not None and w.agents[a].pos not in \
                            {lab[0] for lab, d in zip(trajs[a].labels, trajs[a].detour, strict=True) if d < 0}:
                        in_detour[a] = -1
                record()
                if all(task.done for task in w.tasks):
                    break
            out += [collapse(trajs[a]) for a in names]
    return out


def textworld_runs(seeds: range, game_dir: Path, rng: random.Random, max_steps: int = 80) -> list[Trajectory]:
    """Walkthroughs with one injected detour each: through a random exit and back (see the module docstring)."""
    from brace_common.scene_graph import agent_view
    from sim_bridges.textworld.textworld_game import PLAYER, TextWorldGame, command_step
    from sim_bridges.textworld.textworld_games import GameSpec, generate_game
    from sim_bridges.textworld.textworld_state import world_state

    back = {"north": "south", "south": "north", "east": "west", "west": "east"}
    out = []
    for seed in seeds:
        game = TextWorldGame(generate_game(GameSpec(seed), game_dir), max_steps)
        traj = Trajectory("textworld")
        try:
            at = rng.randrange(1, max(2, len(game.walkthrough)))
            detour = -1

            def record(detour: int, game=game, traj=traj) -> None:
                traj.views.append(agent_view(world_state(game, 0), PLAYER, 0, 0.0))
                traj.labels.append(frozenset(str(f) for f in game.facts))
                traj.detour.append(detour)

            record(detour)
            pending: list[str] = []
            while not game.finished and game.t < max_steps:
                if game.t == at:
                    exits = [c for c in game.admissible if c.startswith("go ") and c[3:] in back]
                    if exits:
                        out_cmd = rng.choice(exits)
                        pending = [out_cmd, f"go {back[out_cmd[3:]]}"]
                        detour = 0
                if pending:
                    command = pending.pop(0)
                else:
                    detour = -1
                    oracle = game.oracle_commands()
                    if not oracle:
                        break
                    command = oracle[0]
                game.set_plan([command_step(command)])
                game.step()
                record(detour)
        finally:
            game.close()
        out.append(collapse(traj))
    return out


Detector = Callable[[Trajectory], list[bool]]


def key_detector(t: Trajectory) -> list[bool]:
    """The trigger monitor's rule: the scene graph's key equals one before the previous state's."""
    from brace_common.session_graph import SessionGraph

    graph = SessionGraph("agent")
    return [graph.visit(i, v.key()) is not None for i, v in enumerate(t.views)]


def embedding_detector(embed) -> Detector:
    """A revisit when z_t is within TAU of a node before the previous one (keys not used)."""
    from brace_common.session_graph import SessionGraph

    def detect(t: Trajectory) -> list[bool]:
        graph = SessionGraph("agent", TAU)
        zs = embed(t.views)
        return [graph.visit(i, f"s{i}", z) is not None for i, z in enumerate(zs)]

    return detect


def score(world: str, name: str, trajectories: list[Trajectory], detect: Detector) -> dict:
    """One row: recall, false positives, false alarm rate, injected loops caught, time per state."""
    tp = fp = fn = negatives = states = injected = caught = 0
    started = time.perf_counter()
    for t in trajectories:
        truth, found = revisits(t.labels), detect(t)
        states += len(truth)
        for is_loop, hit in zip(truth, found, strict=True):
            tp += is_loop and hit
            fn += is_loop and not hit
            fp += hit and not is_loop
            negatives += not is_loop
        inside = [i for i, d in enumerate(t.detour) if d >= 0]
        if inside and any(truth[i] for i in range(inside[0], min(len(truth), inside[-1] + 3))):
            injected += 1
            caught += any(found[i] for i in range(inside[0], min(len(found), inside[-1] + 3)))
    elapsed_ms = (time.perf_counter() - started) * 1000.0
    detections = tp + fp
    return {"world": world, "detector": name, "trajectories": len(trajectories), "states": states,
            "revisits": tp + fn, "recall": round(tp / (tp + fn), 4) if tp + fn else float("nan"),
            "false_positives": round(fp / detections, 4) if detections else 0.0,
            "false_alarm_rate": round(fp / negatives, 4) if negatives else 0.0,
            "injected_loops": injected, "injected_caught": round(caught / injected, 4) if injected else float("nan"),
            "ms_per_state": round(elapsed_ms / max(1, states), 3)}


def recovery(bag: Path, hops: int = 2, cell_m: float = 1.0) -> dict:
    """Loop triggers in a bag and how many were followed, within RECOVERY_STEPS world steps, by a state the agent
    had not held this episode."""
    from brace_msgs.msg import TriggerEvent, WorldState

    from brace_audit.bag import read_bag
    from brace_audit.recorded_types import RecordedTypes
    from brace_common.scene_graph import agent_view
    from brace_common.world_state import world_state_from_msg

    contents = read_bag(bag)
    recorded = RecordedTypes(contents.definitions)
    keys: dict[tuple[int, str], list[tuple[int, str]]] = {}   # (episode, agent) -> (step, key) in order
    episode_at: list[tuple[int, int]] = []                     # (log time, episode)
    for m in contents.messages:
        if m.topic.endswith("/world_state"):
            state = world_state_from_msg(recorded.read(m.type, m.data, WorldState)[0])
            episode_at.append((m.log_time_ns, state.episode))
            for a in state.agents:
                keys.setdefault((state.episode, a.agent_id), []).append(
                    (state.step, agent_view(state, a.agent_id, hops, cell_m).key()))
    loops = recovered = 0
    for m in contents.messages:
        if not m.topic.endswith("/triggers"):
            continue
        t = recorded.read(m.type, m.data, TriggerEvent)[0]
        if t.kind != TriggerEvent.KIND_LOOP:
            continue
        episode = max((e for time_ns, e in episode_at if time_ns <= m.log_time_ns), default=0)
        seen = keys.get((episode, t.agent_id), [])
        before = {k for s, k in seen if s <= t.step}
        after = [k for s, k in seen if t.step < s <= t.step + RECOVERY_STEPS]
        loops += 1
        recovered += any(k not in before for k in after)
    return {"bag": str(bag), "loop_triggers": loops, "recovered": recovered,
            "recovered_share": round(recovered / loops, 4) if loops else float("nan")}


def load_encoder(path: str):
    """An encoder's embed function (brace_memory.state_encoder)."""
    from brace_memory.state_encoder import StateEncoder

    return StateEncoder.load(Path(path).expanduser()).embed


def main() -> int:
    """Build the labelled trajectories, run each detector, print the table and check the targets."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--warehouse-seeds", type=int, default=None, help="held-out seeds per K (from --first-seed)")
    parser.add_argument("--games", type=int, default=None, help="held-out TextWorld games (seeds from --first-seed)")
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--game-dir", type=Path, default=Path("~/.cache/brace/textworld").expanduser())
    parser.add_argument("--encoder", action="append", default=[], metavar="NAME=DIR",
                        help="also run the embedding detector with this encoder (repeatable)")
    parser.add_argument("--bags", type=Path, nargs="*", default=[], help="closed-loop bags: the reaction to loops")
    parser.add_argument("--out", default="bench/out")
    args = parser.parse_args()
    fill_defaults(args, {"warehouse_seeds": 3, "games": 2}, {"warehouse_seeds": 30, "games": 20})
    rng = random.Random(7)
    cpu = cpu_report()
    print(f"# loop detection on labelled trajectories, {describe_cpu(cpu)}", flush=True)
    worlds = {"warehouse": warehouse_runs(range(args.first_seed, args.first_seed + args.warehouse_seeds), (1, 3), rng)}
    if args.games:
        worlds["textworld"] = textworld_runs(range(args.first_seed, args.first_seed + args.games), args.game_dir, rng)
    detectors: list[tuple[str, Detector]] = [("key", key_detector)]
    for spec in args.encoder:
        name, _, path = spec.partition("=")
        detectors.append((f"embedding:{name}", embedding_detector(load_encoder(path))))
    rows = [score(world, name, trajs, detect) for world, trajs in worlds.items() for name, detect in detectors]
    columns = list(rows[0])
    print("| " + " | ".join(columns) + " |")
    print("|" + "---|" * len(columns))
    for r in rows:
        print("| " + " | ".join(str(r[c]) for c in columns) + " |")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    csv_path = write_csv([{**r, "cpu": cpu["cpu"], "flags": cpu["flags"]} for r in rows], out / "loop_detection.csv")
    print_written(csv_path)
    checks: list[tuple[str, bool, str]] = []
    if args.bags:
        recoveries = [recovery(bag) for bag in args.bags]
        for r in recoveries:
            print(f"{r['bag']}: {r['loop_triggers']} loop triggers, a new state within {RECOVERY_STEPS} steps after "
                  f"{r['recovered']} ({r['recovered_share']:.1%})")
        print_written(write_csv(recoveries, out / "loop_recovery.csv"))
        loops, recovered = sum(r["loop_triggers"] for r in recoveries), sum(r["recovered"] for r in recoveries)
        checks.append((f"a new state within {RECOVERY_STEPS} steps after >= {TARGET_RECOVERY:.0%} of loop triggers",
                       bool(loops) and recovered / loops >= TARGET_RECOVERY, f"{recovered} of {loops}"))
    for r in rows:
        if r["detector"] != "key":
            continue
        checks.append((f"{r['world']} key recall >= {TARGET_RECALL:.0%}", r["recall"] >= TARGET_RECALL,
                       f"{r['recall']:.1%} of {r['revisits']} revisits"))
        checks.append((f"{r['world']} key false positives <= {TARGET_FALSE_POSITIVES:.0%}",
                       r["false_positives"] <= TARGET_FALSE_POSITIVES, f"{r['false_positives']:.1%}"))
    return report_checks(checks)


if __name__ == "__main__":
    raise SystemExit(main())
