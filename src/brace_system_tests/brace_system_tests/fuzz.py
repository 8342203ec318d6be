"""Graph fuzzing: every node of the sim stack its own process, hostile input on every input topic, then a real run.

`run(folder, per_topic, goals, seed)` starts the stack's executables (as
`ros2 launch` would, with a tiny planner model), holds the simulator's first
episode behind a node that does not exist yet, and sends from its own node:
`per_topic` messages on each input topic (every field drawn from valid values
and from the values that broke nodes before: 100 KB ids, steps of 2^64 - 1,
NaN, unknown enums, JSON nested thousands deep, 200 KB texts, plans whose
parameters are lists), a tenth of the plans against a decision the simulator
holds, and `goals` abusive Replan goals in bursts with cancels. The same
checks the nodes run (their convert modules) say which messages are malformed;
each node's /diagnostics must count every one of them (refused, or lost to a flood: a gap in the attack's
sequence numbers). Then the held episode
starts: it must run to its end with plans, no call past its hard deadline by
more than OVERRUN_MS, no process dead or hung. `bench/fuzz_graph.py` runs it at
full size; `test_fuzz_graph.py` a short version in `make test`.
"""

from __future__ import annotations

import math
import os
import random
import re
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import rclpy
import yaml
from brace_msgs.action import Replan
from brace_msgs.msg import (
    AgentState,
    ContextEntry,
    ExecutionOutcome,
    PhaseTiming,
    Plan,
    PlanStep,
    ReplanCall,
    ReplanDecision,
    TriggerEvent,
    VerifierVerdict,
)
from diagnostic_msgs.msg import DiagnosticArray
from rclpy.action import ActionClient
from rclpy.executors import SingleThreadedExecutor
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy
from rclpy.serialization import deserialize_message

from brace_audit.audit import records_from_bag, topic_role
from brace_audit.bag import read_bag
from brace_bringup.graph import SIM
from brace_bringup.run_config import RunConfig
from brace_common import convert as common_convert
from brace_common import names, qos
from brace_common.domain_leases import fresh_domain
from brace_common.testing import installed_executable, stop_processes
from brace_controller import convert as controller_convert
from erecap_planner import convert as planner_convert
from erecap_planner.testing import saved_tiny_llama
from sim_bridges.warehouse import warehouse_feed as feed

OVERRUN_MS = 250.0
"""How far past its hard deadline a call may end (the check runs between layers, chunks and tokens)."""
GATE_NODE = "fuzz_gate"
"""A node the simulator waits for: it exists only once the attack is over."""
U64 = 2**64 - 1
U32 = 2**32 - 1


@dataclass
class Attack:
    """One attack's result."""

    name: str
    node: str
    sent: int = 0
    malformed: int = 0
    counted: int = 0
    note: str = ""

    @property
    def fully_counted(self) -> bool:
        """Every malformed message counted (a best-effort topic may lose samples: 90% of them)."""
        if "best-effort" in self.note:
            return self.counted >= 0.9 * self.malformed
        return self.counted >= self.malformed

    @property
    def row(self) -> dict:
        """The table row."""
        return {"attack": self.name, "node": self.node, "sent": self.sent, "malformed": self.malformed,
                "counted": self.counted, "uncounted": max(0, self.malformed - self.counted), "note": self.note}


@dataclass
class FuzzResult:
    """What the harness saw."""

    attacks: list[Attack] = field(default_factory=list)
    crashed: list[str] = field(default_factory=list)
    hung: list[str] = field(default_factory=list)
    episodes: int = 0
    episodes_with_plans: int = 0
    calls: int = 0
    calls_over_deadline: int = 0
    worst_overrun_ms: float = 0.0
    calls_under_attack: int = 0
    over_deadline_under_attack: int = 0  # the same while the attack ran (reported; the machine was flooded)
    worst_overrun_under_attack_ms: float = 0.0
    goals: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """No crash, no hang, every malformed input counted, the real run complete and within its deadlines."""
        return (not self.crashed and not self.hung and all(a.fully_counted for a in self.attacks)
                and self.episodes > 0 and self.episodes_with_plans == self.episodes and self.calls_over_deadline == 0
                and self.goals.get("unanswered", 0) == 0)


# ------------------------------------------------------------------------------------------ hostile values


def _string(rng: random.Random, valid: str) -> str:
    return rng.choice([valid, valid, valid, "", " ", "a" * 100_000, "agent 0", "agént", "a\nb", "x" * 129,
                       "../../etc", "agent_1"])


def _step(rng: random.Random) -> int:
    return rng.choice([0, 1, 5, 40, 2**31, 2**40, U64])


def _float(rng: random.Random, valid: float) -> float:
    return rng.choice([valid, valid, math.nan, math.inf, -math.inf, -1.0, 1e30])


def _json(rng: random.Random) -> str:
    return rng.choice(['{"target": "shelf_0"}', '{"target": ["shelf_0"]}', "[" * 5000 + "]" * 5000,
                       '{"a": ' * 50 + "1" + "}" * 50, "{", '"x"', "", '{"object": "cup_1", "target": 7}'])


def _trigger(rng):

    return TriggerEvent(trigger_id=_string(rng, f"fuzz/{rng.randrange(10**6)}"), agent_id=_string(rng, "agent_0"),
                        kind=rng.choice([0, 1, 2, 3, 4, 5, 6, 255]), step=_step(rng),
                        severity=_float(rng, 0.5), consecutive_failures=rng.choice([0, 2, 3, 1754, U32]),
                        detail=rng.choice(["", "fuzz", "d" * 20_000]), has_goal=rng.random() < 0.5)


def _call_record(rng):

    phases = [PhaseTiming(phase=rng.choice(["prefill", "decode", "bogus"]), duration_ms=_float(rng, 10.0))]
    return ReplanCall(call_id=_string(rng, "c"), decision_id=_string(rng, "d"), agent_id=_string(rng, "agent_0"),
                      step=_step(rng), status=rng.choice([0, 1, 2, 4, 9]), latency_ms=_float(rng, 50.0),
                      slo_ms=_float(rng, 4500.0), tokens_before=rng.choice([100, U32]), tokens_after=100,
                      mode=rng.choice([0, 1, 7]), phases=phases)


def _agent_state(rng):

    msg = AgentState(agent_id=_string(rng, "agent_0"), step=_step(rng), tracking_error=_float(rng, 0.1),
                     has_goal=rng.random() < 0.5)
    msg.position.x, msg.position.y, msg.position.z = _float(rng, 1.0), _float(rng, 2.0), 0.0
    return msg


def _outcome(rng):

    return ExecutionOutcome(agent_id=_string(rng, "agent_0"), step=_step(rng), action=_string(rng, "pick"),
                            success=rng.random() < 0.5, detail=rng.choice(["", "slipped", "s" * 20_000]))


def _verdict(rng):

    return VerifierVerdict(agent_id=_string(rng, "agent_0"), violation=rng.random() < 0.5,
                           confidence=_float(rng, 0.9), detail="fuzz")


def _context(rng):

    return ContextEntry(agent_id=_string(rng, "agent_0"), step=_step(rng), block=rng.choice([0, 1, 2, 3, 4, 4, 9]),
                        kind=_string(rng, "observation"),
                        text=rng.choice(["agent_0 at shelf_2", "", "t" * 200_000, "ok " * 100]))


def _plan(rng, decision_id: str):

    steps = [PlanStep(index=i, action=_string(rng, "move_to"), parameters_json=_json(rng))
             for i in range(rng.choice([1, 2, 70]))]
    return Plan(plan_id=_string(rng, "p"), agent_id=rng.choice(["agent_0", "agent_1", "agent_9", ""]),
                decision_id=decision_id, steps=steps)


def _decision(rng):

    msg = ReplanDecision(decision_id=_string(rng, "fuzz_decision"), admitted=rng.random() < 0.5)
    msg.trigger.agent_id = rng.choice(["agent_9", "nobody", "a" * 1000])  # never one of the world's agents
    return msg


# ------------------------------------------------------------------------------------------ the oracle


def _malformed(kind: str, msg) -> bool:
    """Whether the node's own checks reject `msg` (the convert module of the node that reads the topic)."""

    try:
        if kind == "trigger":
            common_convert.trigger_from_msg(msg)
        elif kind == "call_record":
            controller_convert.call_record_from_msg(msg)
        elif kind == "agent_state":
            controller_convert.observation_from_msg(msg, None)
        elif kind == "outcome":
            controller_convert.outcome_from_msg(msg)
        elif kind == "verdict":
            controller_convert.verdict_from_msg(msg)
        elif kind == "context_entry":
            planner_convert.entry_from_msg(msg)
        elif kind == "plan":
            if msg.agent_id not in ("agent_0", "agent_1"):
                return True
            feed.plan_from_steps([(s.action, s.parameters_json) for s in msg.steps])
        return False
    except ValueError:
        return True


# ------------------------------------------------------------------------------------------ the harness


def _run_config(folder: Path, model_dir: str) -> Path:
    path = folder / "fuzz_run.yaml"
    path.write_text(yaml.safe_dump({"run": {
        "extends": "demo.yaml",  # the installed run configuration
        "overrides": {
            "embedded_sim": {"episodes": 1, "num_agents": 2, "max_steps": 12, "step_period_s": 0.01,
                             "hold_while_planning": True,  # the held episode: lockstep, plans on any CPU
                             "shutdown_when_done": True, "hold_timeout_s": 2.0,
                             "wait_for_nodes": [*SIM.names[1:], GATE_NODE]},
            "erecap_planner": {"model_path": model_dir, "pruning_layers": [1, 3], "predictor_path": "",
                               "adapter_path": ""}}}}))
    return path


def diagnostics_sum(values: dict[str, str], *prefixes: str) -> int:
    """The sum of a diagnostics status's integer values whose key starts with one of `prefixes`."""
    return sum(int(v) for k, v in values.items() if k.startswith(prefixes) and re.fullmatch(r"-?\d+", v))


def _diagnostics_counts(status) -> int:
    """The inputs a node's diagnostics status reports refused or lost (every 'rejected.*' and 'lost.*' value)."""
    return diagnostics_sum({kv.key: kv.value for kv in status.values}, "rejected.", "lost.")


ATTACK_WRITER = QoSProfile(history=HistoryPolicy.KEEP_ALL, reliability=ReliabilityPolicy.RELIABLE,
                           durability=DurabilityPolicy.VOLATILE)
"""The attack's event writers: keep-all, so every loss is the reader's."""
SENSOR_RATE_HZ = 200.0
"""Rate of the best-effort attack (a state stream's rate, e.g. the arm's feedback)."""


def run(folder: Path, per_topic: int = 10_000, goals: int = 100, seed: int = 0,
        rate_hz: float = 2000.0, log=print) -> FuzzResult:
    """Fuzz the sim stack in `folder`; the result (see FuzzResult.ok)."""

    folder.mkdir(parents=True, exist_ok=True)
    cfg = RunConfig.load(_run_config(folder, saved_tiny_llama(folder / "tiny_llama")))
    params = cfg.write_parameters("brace_erecap", folder / "run")
    domain = str(fresh_domain())  # a tested graph of its own: no other test process on this host holds it
    env = {**os.environ, "ROS_DOMAIN_ID": domain}
    procs: dict[str, subprocess.Popen] = {}
    for spec in cfg.stack.nodes:
        procs[spec.name] = subprocess.Popen(
            [str(installed_executable(spec.package, spec.executable)), "--ros-args", "--params-file", str(params),
             "-r", f"__ns:={names.DEFAULT_NAMESPACE}"],
            env=env, stdout=(folder / f"{spec.name}.log").open("w"), stderr=subprocess.STDOUT)
    result = FuzzResult()
    gate_ns = 0  # when the held episode started (system time)
    rng = random.Random(seed)
    context = rclpy.Context()
    rclpy.init(context=context, domain_id=int(domain))
    try:
        node = rclpy.create_node("fuzzer", namespace=names.DEFAULT_NAMESPACE, context=context)
        executor = SingleThreadedExecutor(context=context)
        executor.add_node(node)
        latest: dict[str, object] = {}
        node.create_subscription(DiagnosticArray, names.DIAGNOSTICS,
                                 lambda a: latest.update({s.name.split(":")[0].rsplit("/", 1)[-1]: s
                                                          for s in a.status}), qos.DIAGNOSTICS)

        def spin(seconds: float) -> None:
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                executor.spin_once(timeout_sec=0.02)

        def settle(count, expected: int, limit_s: float = 90.0) -> int:
            """`count()` once it reaches `expected` or stops growing (a node may still work through its queue)."""
            last, still, end = -1, 0, time.monotonic() + limit_s
            while time.monotonic() < end:
                spin(1.0)
                now = count()
                if now >= expected:
                    return now
                still = still + 1 if now == last else 0
                if still >= 3:
                    return now
                last = now
            return count()

        def counted(node_name: str) -> int:
            status = latest.get(node_name)
            return _diagnostics_counts(status) if status is not None else 0

        deadline = time.monotonic() + 120.0
        while time.monotonic() < deadline and not all(n in latest for n in SIM.names):
            spin(0.2)  # every node is up and reporting (the planner loads its model)
        missing = [n for n in SIM.names if n not in latest]
        if missing:
            raise RuntimeError(f"nodes never reported on /diagnostics: {missing}")

        topics = [("trigger", names.TRIGGERS, TriggerEvent, "brace_controller", _trigger),
                  ("call_record", names.REPLAN_CALLS, ReplanCall, "brace_controller", _call_record),
                  ("agent_state", names.AGENT_STATES, AgentState, "trigger_monitor", _agent_state),
                  ("outcome", names.OUTCOMES, ExecutionOutcome, "trigger_monitor", _outcome),
                  ("verdict", names.VERDICTS, VerifierVerdict, "trigger_monitor", _verdict),
                  ("context_entry", names.CONTEXT, ContextEntry, "erecap_planner", _context),
                  ("decision", names.DECISIONS, ReplanDecision, "embedded_sim", _decision)]
        for kind, topic, cls, target, make in topics:
            profile = qos.STATE if topic == names.AGENT_STATES else qos.EVENTS
            # Keep-all: the attack never discards a message itself, so a sample the node did not take is the node's
            # to count (its keep-last input overwrote it: a gap in this writer's sequence numbers).
            pub = node.create_publisher(cls, topic, ATTACK_WRITER if profile is qos.EVENTS else profile)
            spin(1.0)
            before = counted(target)
            attack = Attack(f"{per_topic} fuzzed {cls.__name__}", target)
            # A best-effort stream is read at a sensor's rate (the arm's feedback, 200 Hz), not at the attack's:
            # a faster writer only overwrites samples in the reader's keep-last queue, which counts nothing.
            burst, pace_hz = (2, SENSOR_RATE_HZ) if profile is qos.STATE else (20, rate_hz)
            for i in range(per_topic):
                msg = make(rng)
                attack.sent += 1
                attack.malformed += _malformed(kind, msg) if kind != "decision" else 0
                pub.publish(msg)
                if i % burst == burst - 1:
                    spin(burst / pace_hz)
            attack.counted = settle(lambda t=target, b=before: counted(t) - b, attack.malformed)
            if profile is qos.STATE:
                attack.note = "best-effort topic: a lost sample is not an input"
            result.attacks.append(attack)
            log(f"  {attack.name}: malformed {attack.malformed}, counted {attack.counted}")

        # Plans: against a decision the simulator holds (it has no world yet: they are stale, counted as such).
        plan_pub = node.create_publisher(Plan, names.PLAN, qos.PLANS)  # what the simulator subscribes with
        spin(1.0)
        attack = Attack(f"{max(1, per_topic // 10)} malformed plans", "embedded_sim")
        for i in range(max(1, per_topic // 10)):
            msg = _plan(rng, "fuzz_decision")
            attack.sent += 1
            plan_pub.publish(msg)
            if i % 20 == 19:
                spin(20 / rate_hz)
        spin(2.0)
        status = latest.get("embedded_sim")
        values = {kv.key: kv.value for kv in status.values} if status is not None else {}
        attack.malformed = attack.sent
        attack.counted = int(values.get("stale_plans", 0)) + int(values.get("malformed_plans", 0))
        attack.note = "before the episode: every plan is stale"
        result.attacks.append(attack)

        # Replan goals: bursts of abusive goals, some valid ones cancelled at once.
        client = ActionClient(node, Replan, names.REPLAN, **qos.REPLAN_ACTION)
        client.wait_for_server(timeout_sec=30.0)
        sent = []
        for i in range(goals):
            if rng.random() < 0.3:  # a well-formed goal (cancelled at once half of the time, below)
                goal = Replan.Goal(agent_id=rng.choice(["agent_0", "agent_1"]), step=3, mode=rng.choice([0, 1, 2]),
                                   token_budget=384, slo_ms=4500.0, hard_deadline_ms=9000.0,
                                   decision_id=f"fuzz_goal/{i}")
            else:
                goal = Replan.Goal(agent_id=_string(rng, "agent_0"), step=rng.choice([0, 3, U64]),
                                   mode=rng.choice([0, 1, 2, 3, 255]), token_budget=rng.choice([1, 64, 384, U32]),
                                   slo_ms=rng.choice([4500.0, math.nan, math.inf, 0.0]),
                                   hard_deadline_ms=rng.choice([9000.0, 9000.0, -1.0]),
                                   decision_id=_string(rng, f"fuzz_goal/{i}"))
            goal.header.stamp = node.get_clock().now().to_msg()
            sent.append((goal, client.send_goal_async(goal)))
            if i % 20 == 19:
                spin(0.05)
        answered = {"accepted": 0, "rejected": 0, "cancelled": 0, "finished": 0, "unanswered": 0}
        end = time.monotonic() + 60.0
        while time.monotonic() < end and not all(f.done() for _, f in sent):
            spin(0.1)
        results = []
        for _goal, future in sent:
            if not future.done():
                answered["unanswered"] += 1
                continue
            handle = future.result()
            if not handle.accepted:
                answered["rejected"] += 1
                continue
            answered["accepted"] += 1
            if rng.random() < 0.5:
                handle.cancel_goal_async()
                answered["cancelled"] += 1
            results.append(handle.get_result_async())
        end = time.monotonic() + 120.0
        while time.monotonic() < end and not all(r.done() for r in results):
            spin(0.1)
        answered["finished"] = sum(r.done() for r in results)
        answered["unanswered"] += len(results) - answered["finished"]
        result.goals = answered
        log(f"  {goals} abusive Replan goals: {answered}")

        # The held episode starts: everything must still work.
        result.crashed = [n for n, p in procs.items() if p.poll() is not None]
        gate_ns = time.time_ns()  # the bag's receive times are system time
        gate = rclpy.create_node(GATE_NODE, namespace=names.DEFAULT_NAMESPACE, context=context)
        executor.add_node(gate)
        end = time.monotonic() + 240.0
        while time.monotonic() < end and procs["embedded_sim"].poll() is None:
            spin(0.2)
        if procs["embedded_sim"].poll() is None:
            result.hung.append("embedded_sim (its episode did not end)")
        silent = [n for n in SIM.names if n != "embedded_sim" and procs[n].poll() is None
                  and n not in latest]
        result.hung += silent
    finally:
        result.hung += [f"{name} (did not stop on SIGINT)" for name in stop_processes(procs, 30.0)]
        context.try_shutdown()
    result.crashed += [n for n, p in procs.items() if p.returncode not in (0, None) and n not in result.crashed
                       and p.returncode != -signal.SIGKILL]
    records, _note = records_from_bag(folder / "run" / "bag")
    result.episodes = len(records.episodes)
    result.episodes_with_plans = sum(e.plans > 0 for e in records.episodes)
    return _deadlines(result, folder / "run" / "bag", gate_ns)


def _deadlines(result: FuzzResult, bag: Path, since_ns: int) -> FuzzResult:
    """Calls past their hard deadline by more than OVERRUN_MS (from the bag's call records), after `since_ns` and
    before it (under attack)."""

    for m in read_bag(bag).messages:
        if topic_role(m.topic) != names.REPLAN_CALLS:
            continue
        call = deserialize_message(m.data, ReplanCall)
        if not call.call_id.startswith("erecap_planner/"):
            continue  # the attack's own forged records are on this topic too
        over = call.latency_ms - call.hard_deadline_ms
        if m.log_time_ns >= since_ns:
            result.calls += 1
            result.worst_overrun_ms = max(result.worst_overrun_ms, over)
            result.calls_over_deadline += over > OVERRUN_MS
        else:
            result.calls_under_attack += 1
            result.worst_overrun_under_attack_ms = max(result.worst_overrun_under_attack_ms, over)
            result.over_deadline_under_attack += over > OVERRUN_MS
    return result
