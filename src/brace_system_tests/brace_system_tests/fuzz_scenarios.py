"""The fuzz harness's scenario attacks: what broke a node in the last round, replayed against its executable.

Each attack starts the real executables as their own processes (the shipped parameter files from config/ plus a
small overlay, namespace /brace, a DDS domain of its own, discovery on this host only) and plays the hostile peer
from the harness's own node or socket on 127.0.0.1:

- protected flood: the planner gets 300 TASK entries of 8,000 characters for the agent it then plans for (all
  protected), then one Replan goal with a hard deadline; the call must end within OVERRUN_MS of it, and what the
  planner holds must stay inside its context limits with every entry held, yielded or lost counted on /diagnostics.
- drip server: the OpenVLA executor asks an /act server that sends its answer's head, then a byte every `drip_s`;
  every request must end at server_timeout_s counted by phase (vla_errors.<reason>), the step must end EXECUTOR, and
  once the server answers normally a new plan's commands must flow.
- recorder SIGKILL: the audit recorder is killed in the middle of an episode; `brace-audit report` must exit 1
  naming the episode incomplete, `brace-audit recover` must write a bag that rosbags and both mcap readers open
  with every message the recorder had written out, and its report must still exit 1 (the episode has no end).
- twin kill: piper_twin and piper_arm over udp_multicast (the launch graph's bus) with joint commands at 4 Hz;
  `kill -9` of the twin must turn the arm's diagnostics ERROR (can_silent) and refuse every later command without
  an ERROR -> OK flap while the twin is dead; restarted (powered up: motors disabled) and enabled, the arm is OK and
  takes commands again.

Every function returns a ScenarioResult (a row of the harness's table). `bench/fuzz_graph.py` runs them (quick:
smaller counts and shorter windows); `test_fuzz_graph.py` runs the quick set as the harness's regression check.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import time
import traceback
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import rclpy
import yaml
from brace_msgs.action import Replan
from brace_msgs.msg import ContextEntry, EndEffectorDelta, Episode, ExecutionOutcome, Plan, PlanStep, ReplanCall
from diagnostic_msgs.msg import DiagnosticArray
from geometry_msgs.msg import PoseStamped
from mcap.reader import NonSeekingReader, make_reader
from rclpy.action import ActionClient
from rclpy.executors import SingleThreadedExecutor
from sensor_msgs.msg import Image, JointState
from std_srvs.srv import Trigger

from brace_bringup.run_config import params_dir
from brace_common import names, qos
from brace_common.act_drip_server import DripServer
from brace_common.config import load_ros_parameters
from brace_common.domain_leases import fresh_domain, leases
from brace_common.spin import spin_once
from brace_common.testing import installed_executable, stop_processes
from brace_common.vocabulary import CallStatus
from erecap_planner.testing import saved_tiny_llama

from .fuzz import ATTACK_WRITER as WRITER
from .fuzz import OVERRUN_MS
from .fuzz import diagnostics_sum as _sum

START_LIMIT_S = 120.0
"""How long a node may take to come up (import, model load) on a slow, busy machine."""
BOUND_SLACK_S = 2.0
"""Twin kill: how long after the arm's silence_timeout_s a command may still be accepted (diagnostics, a busy
machine)."""
EVENT_LIMIT_S = 60.0
"""How long the harness waits for any one event it expects (generous: a miss is a failed row, not a slow one)."""

AGENT = "agent_0"
"""The agent of the protected flood (the planner plans for it, so all its TASK entries are protected)."""


@dataclass
class ScenarioResult:
    """One attack's row: what was sent, what the node counted of what it should have, the outcome and whether it
    held."""

    attack: str
    node: str
    sent: int = 0
    counted: int = 0
    expected: int = 0
    outcome: str = ""
    ok: bool = False

    @property
    def row(self) -> dict:
        """The table row (the harness's CSV columns, with `expected` and `ok`)."""
        return {"attack": self.attack, "node": self.node, "sent": self.sent, "counted": self.counted,
                "expected": self.expected, "note": self.outcome, "ok": self.ok}


def _level(status) -> int:
    """A DiagnosticStatus level as an int (rclpy gives bytes)."""
    return int.from_bytes(status.level, "little") if isinstance(status.level, bytes) else int(status.level)


def _values(status) -> dict[str, str]:
    return {kv.key: kv.value for kv in status.values} if status is not None else {}


def _int(values: dict[str, str], key: str) -> int:
    """One integer value (0 when absent or not an integer)."""
    value = values.get(key, "")
    return int(value) if re.fullmatch(r"-?\d+", value) else 0


def _rss_mb(pid: int) -> float:
    """A process's resident memory (MB; 0 when it cannot be read)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return 0.0


class Graph:
    """Executables started as their own processes on DDS domain `domain`, and the harness's node in /brace on the
    same domain, spun in the calling thread (every wait spins it)."""

    def __init__(self, folder: Path, domain: int, env: dict[str, str] | None = None) -> None:

        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self.env = {**os.environ, "ROS_DOMAIN_ID": str(domain), **(env or {})}
        self.procs: dict[str, subprocess.Popen] = {}
        self.context = rclpy.Context()
        rclpy.init(context=self.context, domain_id=domain)
        self.node = rclpy.create_node("fuzz_scenario", namespace=names.DEFAULT_NAMESPACE, context=self.context)
        self.executor = SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)
        self.statuses: dict[str, list[tuple[float, Any]]] = defaultdict(list)  # node -> (received, status)
        self.node.create_subscription(DiagnosticArray, names.DIAGNOSTICS, self._on_diagnostics, qos.DIAGNOSTICS)

    def __enter__(self) -> Graph:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _on_diagnostics(self, array) -> None:
        now = time.monotonic()
        for status in array.status:
            self.statuses[status.name.split(":")[0].rsplit("/", 1)[-1]].append((now, status))

    def start(self, package: str, executable: str, node_name: str, files: list[Path],
              overrides: dict[str, Any]) -> subprocess.Popen:
        """Start `executable` in /brace with parameter `files` and an overlay of `overrides` (its log in the
        folder, appended to when it is started again)."""
        overlay = self.folder / f"{node_name}_overrides.yaml"
        overlay.write_text(yaml.safe_dump({f"/**/{node_name}": {"ros__parameters": overrides}}))
        command = [str(installed_executable(package, executable)), "--ros-args", "-r",
                   f"__ns:={names.DEFAULT_NAMESPACE}", *[a for f in (*files, overlay) for a in ("--params-file", str(f))]]
        with (self.folder / f"{node_name}.log").open("a") as log:
            proc = subprocess.Popen(command, env=self.env, stdout=log, stderr=subprocess.STDOUT)
        self.procs[node_name] = proc
        return proc

    def log_tail(self, node_name: str, chars: int = 600) -> str:
        """The end of a process's log, on one line."""
        path = self.folder / f"{node_name}.log"
        return " | ".join(path.read_text(errors="replace")[-chars:].splitlines()) if path.is_file() else ""

    def wait(self, predicate: Callable[[], bool], limit_s: float = EVENT_LIMIT_S) -> bool:
        """Spin until `predicate()` holds; whether it did within `limit_s`."""

        end = time.monotonic() + limit_s
        while not predicate():
            if time.monotonic() >= end:
                return False
            spin_once(self.executor, 0.02)
        return True

    def latest(self, node_name: str):
        """The node's newest diagnostics status (None before its first)."""
        statuses = self.statuses.get(node_name)
        return statuses[-1][1] if statuses else None

    def values(self, node_name: str) -> dict[str, str]:
        """The key/values of the node's newest diagnostics status."""
        return _values(self.latest(node_name))

    def close(self) -> None:
        """Stop every process (SIGINT, then SIGKILL after 30 s) and the harness's node."""
        stop_processes(self.procs, 30.0)
        self.executor.shutdown(timeout_sec=5.0)
        self.node.destroy_node()
        self.context.try_shutdown()


# ------------------------------------------------------------------------------------------ protected flood


def protected_flood(folder: Path, domain: int, quick: bool = False, entries: int = 300, chars: int = 8_000,
                    hard_deadline_ms: float = 3_000.0) -> ScenarioResult:
    """`entries` TASK entries of `chars` characters for AGENT, then a Replan goal for AGENT with a hard deadline."""

    result = ScenarioResult(f"protected flood: {entries} TASK entries of {chars:,} chars + Replan "
                            f"({hard_deadline_ms / 1000:g} s deadline)", "erecap_planner")
    shipped = params_dir() / "erecap_planner.yaml"
    limits = load_ros_parameters(shipped, "erecap_planner")
    model = saved_tiny_llama(folder / "tiny_llama")
    with Graph(folder, domain) as graph:
        proc = graph.start("erecap_planner", "erecap_planner", "erecap_planner", [shipped], {
            "model_path": model, "pruning_layers": [1, 3], "predictor_path": "", "max_new_tokens": 8,
            "diagnostics_period_s": 0.5})
        client = ActionClient(graph.node, Replan, names.REPLAN, **qos.REPLAN_ACTION)
        context = graph.node.create_publisher(ContextEntry, names.CONTEXT, WRITER)
        if not graph.wait(lambda: graph.values("erecap_planner").get("state") == "active" and client.server_is_ready()
                          and context.get_subscription_count() > 0, START_LIMIT_S):
            result.outcome = f"the planner never came up: {graph.log_tail('erecap_planner')}"
            return result
        rss_before = _rss_mb(proc.pid)
        for i in range(entries):
            context.publish(ContextEntry(agent_id=AGENT, step=100 + i, block=ContextEntry.BLOCK_TASK, kind="task",
                                         text=f"task {i:03d} ".ljust(chars, "x")))
            result.sent += 1

        def counted(values: dict[str, str]) -> int:
            return _int(values, "context_entries") + _int(values, "malformed_context") + _sum(values, "lost.context.")

        graph.wait(lambda: counted(graph.values("erecap_planner")) >= entries)
        goal = Replan.Goal(agent_id=AGENT, step=100 + entries, mode=0, token_budget=384,
                           slo_ms=hard_deadline_ms * 2 / 3, hard_deadline_ms=hard_deadline_ms,
                           decision_id="fuzz_scenarios/flood")
        goal.header.stamp = graph.node.get_clock().now().to_msg()  # the call's clock starts here
        sent = client.send_goal_async(goal)
        if not graph.wait(sent.done) or not sent.result().accepted:
            result.outcome = "the Replan goal was not accepted"
            return result
        answer = sent.result().get_result_async()
        graph.wait(answer.done, 120.0)
        rss_after = _rss_mb(proc.pid)
        count = len(graph.statuses["erecap_planner"])
        graph.wait(lambda: len(graph.statuses["erecap_planner"]) > count)  # the counts after the call
        values = graph.values("erecap_planner")
    if not answer.done():
        result.outcome = "no answer to the Replan goal"
        return result
    call = answer.result().result.call
    held_entries, held_chars = int(values.get("context.held_entries", -1)), int(values.get("context.held_chars", -1))
    yielded = {k.removeprefix("dropped.context."): int(v) for k, v in values.items()
               if k.startswith("dropped.context.") and int(v)}
    lost = _sum(values, "lost.context.")
    result.counted = held_entries + sum(yielded.values()) + lost + _int(values, "malformed_context")
    result.expected = entries
    overrun_ms = call.latency_ms - call.hard_deadline_ms
    # the documented bound for one agent's protected block (a shipped file without it bounds nothing)
    max_entries, max_chars = int(limits.get("max_block_entries", -1)), int(limits.get("max_block_chars", -1))
    bounded = 0 <= held_chars <= max_chars and 0 <= held_entries <= max_entries
    result.ok = overrun_ms <= OVERRUN_MS and bounded and result.counted == result.expected
    result.outcome = (f"call {call.latency_ms:,.0f} ms vs hard deadline {call.hard_deadline_ms:,.0f} ms "
                      f"({CallStatus(call.status).label}, {call.tokens_before:,} tokens in); held {held_entries} "
                      f"entries / {held_chars:,} chars (bound {max_entries} / {max_chars:,} per agent and block), "
                      f"yielded {yielded or 0}, lost {lost}; "
                      f"planner RSS {rss_before:,.0f} -> {rss_after:,.0f} MB")
    return result


# ------------------------------------------------------------------------------------------ drip server


def drip_server(folder: Path, domain: int, quick: bool = False) -> ScenarioResult:
    """The executor's step against a dripping /act server, then a new plan once the server answers normally."""

    drip_s, timeout_s = (0.5, 1.0) if quick else (2.0, 2.0)
    result = ScenarioResult(f"drip server: /act answers a byte every {drip_s:g} s (server_timeout_s {timeout_s:g})",
                            "openvla_executor")
    shipped = params_dir() / "openvla_executor.yaml"
    params = load_ros_parameters(shipped, "openvla_executor")
    server = DripServer("drip_body", (0.001, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0), drip_s)  # a small step, gripper open
    try:
        with Graph(folder, domain) as graph:
            # stale_after_s: the harness's node publishes the arm's state; a busy machine may pause it for seconds
            graph.start("robot_bridge", "openvla_executor", "openvla_executor", [shipped], {
                "server_url": server.url, "server_timeout_s": timeout_s, "stale_after_s": 10.0,
                "diagnostics_period_s": 0.5})
            node = graph.node
            joints = node.create_publisher(JointState, names.JOINT_STATES, qos.STATE)
            pose_pub = node.create_publisher(PoseStamped, names.END_POSE, qos.STATE)
            image_pub = node.create_publisher(Image, params["image_topic"], qos.STATE)
            plans = node.create_publisher(Plan, names.PLAN, qos.PLANS)
            commands: list[EndEffectorDelta] = []
            outcomes: list[ExecutionOutcome] = []
            node.create_subscription(EndEffectorDelta, params["ee_delta_topic"], commands.append, qos.INPUTS)
            node.create_subscription(ExecutionOutcome, names.OUTCOMES, outcomes.append, qos.INPUTS)
            pixels = np.zeros((48, 64, 3), np.uint8)
            pixels[:, :, 0] = 200

            def publish_state() -> None:  # the arm and its camera at 20 Hz: the gripper open, far from the bowl
                joints.publish(JointState(name=[f"joint{i}" for i in range(1, 7)] + [params["gripper_joint"]],
                                          position=[0.0] * 6 + [0.07]))
                pose = PoseStamped()
                pose.header.frame_id = params["frame_id"]
                pose.pose.position.x, pose.pose.position.z = 0.1, 0.2
                pose_pub.publish(pose)
                image_pub.publish(Image(height=48, width=64, encoding="rgb8", step=64 * 3, data=pixels.tobytes()))

            node.create_timer(0.05, publish_state)

            def plan(plan_id: str) -> None:
                plans.publish(Plan(plan_id=plan_id, agent_id=params["agent_id"], steps=[
                    PlanStep(index=0, action="move_to", parameters_json='{"target": "bowl"}')]))

            if not graph.wait(lambda: graph.values("openvla_executor").get("state") == "active"
                              and plans.get_subscription_count() > 0 and joints.get_subscription_count() > 0,
                              START_LIMIT_S):
                result.outcome = f"the executor never came up: {graph.log_tail('openvla_executor')}"
                return result
            started = time.monotonic()
            plan("fuzz_drip/1")
            if not graph.wait(lambda: bool(outcomes), 120.0):
                result.outcome = f"no outcome for the step ({server.requests_by_mode['drip_body']} requests dripping)"
                return result
            failed_s = time.monotonic() - started
            outcome, drip_commands = outcomes[0], len(commands)

            def accounted() -> bool:  # every request of the drip counted by reason (or cancelled) on /diagnostics
                v = graph.values("openvla_executor")
                return (_int(v, "vla_requests") > 0
                        and _sum(v, "vla_errors.") + _int(v, "vla_requests_cancelled") >= _int(v, "vla_requests"))

            graph.wait(accounted)
            values = graph.values("openvla_executor")
            server.mode = "normal"
            recovering = time.monotonic()
            plan("fuzz_drip/2")
            recovered = graph.wait(lambda: len(commands) > drip_commands)
            recovered_s = time.monotonic() - recovering
    finally:
        server.close()
    reasons = {k: int(v) for k, v in values.items() if k.startswith("vla_errors.") and int(v)}
    requests, cancelled = _int(values, "vla_requests"), _int(values, "vla_requests_cancelled")
    result.sent = server.requests_by_mode["drip_body"]
    result.counted, result.expected = sum(reasons.values()), requests - cancelled
    executor_failure = outcome.failure == ExecutionOutcome.FAILURE_EXECUTOR and not outcome.success
    result.ok = executor_failure and result.counted == result.expected > 0 and drip_commands == 0 and recovered
    failure = {ExecutionOutcome.FAILURE_EXECUTOR: "EXECUTOR", ExecutionOutcome.FAILURE_TIMEOUT: "TIMEOUT"}.get(
        outcome.failure, str(outcome.failure))
    result.outcome = (f"step ended {failure} after {failed_s:.1f} s ({outcome.detail[:200]}); {requests} requests, "
                      f"vla_errors {reasons}, {cancelled} cancelled, {drip_commands} commands while dripping; server "
                      f"normal again: " + (f"first command {recovered_s:.2f} s after the new plan" if recovered
                                           else "NO command"))
    return result


# ------------------------------------------------------------------------------------------ recorder SIGKILL


def _metadata_count(bag: Path) -> int:
    """The message count of a bag's metadata.yaml (-1 while there is none or it is being rewritten)."""
    try:
        return int(yaml.safe_load((bag / "metadata.yaml").read_text())["rosbag2_bagfile_information"]["message_count"])
    except (OSError, TypeError, KeyError, ValueError, yaml.YAMLError):
        return -1


def third_party_counts(bag: Path) -> dict[str, int]:
    """Messages that rosbags (its rosbag2 Reader) and the mcap library (seeking and streaming readers) read of a bag
    (-1: the reader failed)."""
    # optional: rosbags (a third-party reader) is a test and benchmark dependency
    from rosbags.rosbag2 import Reader

    read: dict[str, int] = {}
    try:
        with Reader(bag) as reader:
            read["rosbags"] = sum(1 for _ in reader.messages())
    except Exception:  # noqa: BLE001 - any failure of a third-party reader is the outcome being measured
        read["rosbags"] = -1
    for name, make in (("mcap", make_reader), ("mcap streaming", NonSeekingReader)):
        try:
            with next(bag.glob("*.mcap")).open("rb") as f:
                read[name] = sum(1 for _ in make(f).iter_messages())
        except Exception:  # noqa: BLE001
            read[name] = -1
    return read


def recorder_kill(folder: Path, domain: int, quick: bool = False) -> ScenarioResult:
    """An episode recorded whole, a second one cut by SIGKILL of the recorder; report, recover, read."""

    calls = 20 if quick else 200
    result = ScenarioResult(f"recorder SIGKILL mid-episode ({2 * calls + calls // 2} calls), brace-audit report / "
                            "recover", "audit_recorder")
    shipped = params_dir() / "audit_recorder.yaml"
    bag, recovered = folder / "bag", folder / "recovered"
    audit = str(installed_executable("brace_audit", "brace-audit"))
    with Graph(folder, domain) as graph:
        proc = graph.start("brace_audit", "audit_recorder", "audit_recorder", [shipped], {"output_dir": str(bag)})
        episodes = graph.node.create_publisher(Episode, names.EPISODE, WRITER)
        records = graph.node.create_publisher(ReplanCall, names.REPLAN_CALLS, WRITER)
        if not graph.wait(lambda: episodes.get_subscription_count() > 0 and records.get_subscription_count() > 0,
                          START_LIMIT_S):
            result.outcome = f"the recorder never subscribed: {graph.log_tail('audit_recorder')}"
            return result

        def send(msg, publisher) -> None:
            publisher.publish(msg)
            result.sent += 1

        def episode(number: int, count: int, end: bool) -> None:
            send(Episode(event=Episode.EVENT_START, episode=number), episodes)
            for i in range(count):
                send(ReplanCall(call_id=f"fuzz/e{number}c{i}", agent_id=AGENT, latency_ms=float(i)), records)
            if end:
                send(Episode(event=Episode.EVENT_END, episode=number, success=True), episodes)

        episode(0, calls, end=True)
        episode(1, calls, end=False)
        written = graph.wait(lambda: _metadata_count(bag) == result.sent)  # the recorder wrote them all out
        written_out = _metadata_count(bag)
        for i in range(calls // 2):  # the loss window: calls received in the last period, killed before it ends
            send(ReplanCall(call_id=f"fuzz/e1late{i}", agent_id=AGENT), records)
        proc.kill()
        proc.wait(timeout=30.0)
    report = subprocess.run([audit, "report", str(bag)], capture_output=True, text=True, timeout=300, env=graph.env)
    recover = subprocess.run([audit, "recover", str(bag), "--output", str(recovered)], capture_output=True, text=True,
                             timeout=300, env=graph.env)
    readers = third_party_counts(recovered) if recover.returncode == 0 else {}
    again = subprocess.run([audit, "report", str(recovered)], capture_output=True, text=True, timeout=300,
                           env=graph.env) if recover.returncode == 0 else None
    named = "episode 1 incomplete" in report.stderr and "episode 0 incomplete" not in report.stderr
    named_again = again is not None and "episode 1 incomplete" in again.stderr
    result.counted = readers.get("rosbags", 0)
    result.expected = written_out
    result.ok = (written and report.returncode == 1 and named and recover.returncode == 0 and again is not None
                 and again.returncode == 1 and named_again and len(set(readers.values())) == 1
                 and result.counted >= written_out)
    result.outcome = (f"report exit {report.returncode} ({'names' if named else 'does NOT name'} episode 1 "
                      f"incomplete); recover exit {recover.returncode}: {result.counted} of {result.sent} messages "
                      f"({written_out} written out before the kill, {result.sent - result.counted} sent in its last "
                      f"period lost); readers {readers}; the recovered bag's report exit "
                      f"{again.returncode if again else '-'}" + ("" if named_again else " (episode 1 NOT named)"))
    if not result.ok:
        result.outcome += f"; report: {report.stderr[-400:]!r}; recover: {recover.stderr[-400:]!r}"
    return result


# ------------------------------------------------------------------------------------------ twin kill


def _free_udp_port() -> int:
    with socket.socket(socket.AF_INET6, socket.SOCK_DGRAM) as sock:
        sock.bind(("::", 0))
        return sock.getsockname()[1]


def _handled(values: dict[str, str]) -> int:
    """piper_arm's joint commands accounted for: run, refused, superseded or lost (by reason)."""
    return _sum(values, "commands.joint_cmd", "rejected.joint_cmd.", "dropped.joint_cmd.", "lost.joint_cmd.")


def twin_kill(folder: Path, domain: int, quick: bool = False) -> ScenarioResult:
    """piper_twin killed with SIGKILL under 4 Hz joint commands to piper_arm, then started again and enabled."""
    # optional: ament_index exists only in a sourced ROS install (plain YAML use works without it)
    from ament_index_python.packages import get_package_share_directory
    from sensor_msgs.msg import JointState

    dead_attempts = 6 if quick else 12  # reconnection attempts watched while the twin is dead
    result = ScenarioResult("twin kill: SIGKILL piper_twin under joint commands at 4 Hz, then restart", "piper_arm")
    arm_file = params_dir() / "piper_arm.yaml"
    twin_file = Path(get_package_share_directory("robot_bridge")) / "config" / "piper_twin.yaml"
    group = f"ff01::74:{(os.getpid() + domain + 31) % 0xFFFF:x}"  # interface-local multicast: never leaves the host
    env = {"CAN_CONFIG": json.dumps({"port": _free_udp_port()})}  # python-can's udp_multicast: one port per bus
    arm = {"can_interface": "udp_multicast", "can_port": group, "autostart": True, "diagnostics_period_s": 0.2,
           "feedback_timeout_s": 60.0, "reconnect_initial_s": 0.1, "reconnect_max_s": 1.0}
    if quick:  # a busy test machine can pause the SDK's reader thread for a few hundred ms
        arm.update(silence_timeout_s=0.5, feedback_period_s=0.02)
    # no command may be accepted once this much has passed since the kill: the arm's silence bound, and slack for
    # its diagnostics and a busy machine
    bound_s = float(arm.get("silence_timeout_s", load_ros_parameters(arm_file, "piper_arm")["silence_timeout_s"]))
    bound_s += BOUND_SLACK_S
    with Graph(folder, domain, env) as graph:
        twin = graph.start("robot_bridge", "piper_twin", "piper_twin", [twin_file], {"can_port": group})
        graph.start("robot_bridge", "piper_arm", "piper_arm", [arm_file], arm)
        publisher = graph.node.create_publisher(JointState, names.JOINT_CMD, qos.EVENTS)
        enable = graph.node.create_client(Trigger, "piper_arm/enable")
        sent = [0]
        statuses = graph.statuses["piper_arm"]

        def command() -> None:  # joint 1 between 0 and 0.1 rad: a step the arm always takes while it is alive
            publisher.publish(JointState(name=[f"joint{i}" for i in range(1, 7)],
                                         position=[0.1 * (sent[0] % 2)] + [0.0] * 5))
            sent[0] += 1

        def level() -> int:
            status = graph.latest("piper_arm")
            return -1 if status is None else _level(status)

        def accepted() -> int:
            return _int(graph.values("piper_arm"), "commands.joint_cmd")

        def settled() -> dict[str, str]:
            """The counts once no command is in flight: two statuses sent after the stream stopped that agree."""
            stopped = time.monotonic() + 0.5
            graph.wait(lambda: len(statuses) > 1 and statuses[-2][0] > stopped
                       and _handled(_values(statuses[-1][1])) == _handled(_values(statuses[-2][1])))
            return graph.values("piper_arm")

        if not graph.wait(lambda: level() == 0 and graph.values("piper_arm").get("state") == "active"
                          and publisher.get_subscription_count() > 0, START_LIMIT_S):
            result.outcome = f"the arm never came up: {graph.log_tail('piper_arm')} / {graph.log_tail('piper_twin')}"
            return result
        stream = graph.node.create_timer(0.25, command)
        graph.wait(lambda: accepted() >= 3)  # the arm knows this publisher: from now on a lost command is counted
        graph.node.destroy_timer(stream)
        base, base_sent = settled(), sent[0]
        stream = graph.node.create_timer(0.25, command)
        graph.wait(lambda: accepted() >= _int(base, "commands.joint_cmd") + 2)
        twin.kill()
        twin.wait(timeout=30.0)
        killed = time.monotonic()
        before = len(statuses)  # statuses from this index on were received after the kill
        at_kill = _values(statuses[-1][1])

        def fault(status) -> bool:
            return _level(status) == 2 and "can_silent" in status.message

        def first_fault() -> tuple[float, Any] | None:
            return next(((t, s) for t, s in statuses[before:] if fault(s)), None)

        graph.wait(lambda: first_fault() is not None)
        graph.wait(lambda: _sum(graph.values("piper_arm"), "rejected.joint_cmd.")
                   > _sum(at_kill, "rejected.joint_cmd.") + 2)
        graph.wait(lambda: _int(graph.values("piper_arm"), "reconnect_attempt") >= dead_attempts
                   and statuses[-1][0] > killed + bound_s + 1.0)
        graph.node.destroy_timer(stream)  # every command sent must be accounted for before the twin returns
        accounted = graph.wait(lambda: _handled(graph.values("piper_arm")) - _handled(base) >= sent[0] - base_sent)
        last, dead_sent = settled(), sent[0] - base_sent
        dead_times, dead = [t for t, _s in statuses[before:]], [s for _t, s in statuses[before:]]
        restarted = time.monotonic()
        graph.start("robot_bridge", "piper_twin", "piper_twin", [twin_file], {"can_port": group})
        feedback = graph.wait(lambda: statuses[-1][0] > restarted
                              and "can_silent" not in graph.values("piper_arm").get("faults", "can_silent"))
        answer = None
        if feedback and graph.wait(enable.service_is_ready):  # the twin powers up with its motors disabled
            future = enable.call_async(Trigger.Request())
            graph.wait(future.done)
            answer = future.result()
        stream = graph.node.create_timer(0.25, command)
        was = accepted()
        recovered = answer is not None and answer.success and graph.wait(lambda: level() == 0 and accepted() > was + 2)
        recovered_s = time.monotonic() - restarted
        found = first_fault()
    at_fault = _values(found[1]) if found else {}
    at_bound = next((_values(s) for t, s in zip(dead_times, dead, strict=True) if t >= killed + bound_s), {})
    after_bound = _int(last, "commands.joint_cmd") - _int(at_bound, "commands.joint_cmd") if at_bound else -1
    refusing = next((t for t, s in zip(dead_times, dead, strict=True) if _sum(_values(s), "rejected.joint_cmd.")
                     > _sum(at_kill, "rejected.joint_cmd.")), None)
    while_dead = dead[next((i for i, s in enumerate(dead) if fault(s)), len(dead)):]
    after_fault = _int(last, "commands.joint_cmd") - _int(at_fault, "commands.joint_cmd") if found else -1
    flaps = sum(_level(a) == 2 and _level(b) < 2 for a, b in zip(while_dead, while_dead[1:], strict=False))
    result.sent, result.expected, result.counted = dead_sent, dead_sent, _handled(last) - _handled(base)
    result.ok = (found is not None and after_fault == 0 and after_bound == 0 and flaps == 0 and accounted
                 and recovered and result.counted == result.expected)
    detected = f"ERROR (can_silent) {found[0] - killed:.2f} s after the kill" if found else "NO ERROR after the kill"
    refused = f"refused from {refusing - killed:.2f} s" if refusing is not None else "none refused"
    before_fault = _int(at_fault, "commands.joint_cmd") - _int(at_kill, "commands.joint_cmd")
    refused_count = _sum(last, "rejected.joint_cmd.") - _sum(at_kill, "rejected.joint_cmd.")
    result.outcome = (
        f"{detected}, {refused}; commands accepted: {before_fault} between the last status before the kill and the "
        f"ERROR, {after_fault} after it, {after_bound} after {bound_s:g} s (the bound); {refused_count} refused; "
        f"{flaps} ERROR -> OK flaps in {len(while_dead)} statuses over {_int(last, 'reconnect_attempt')} reconnection "
        "attempts; restarted and enabled: " + (
            f"OK, commands accepted, {recovered_s:.1f} s after the restart" if recovered
            else f"NOT recovered ({answer.message if answer else 'no enable answer'})"))
    return result


# ------------------------------------------------------------------------------------------ all of them


SCENARIOS: dict[str, tuple[str, Callable[[Path, int, bool], ScenarioResult]]] = {
    "protected_flood": ("erecap_planner", protected_flood),
    "drip_server": ("openvla_executor", drip_server),
    "recorder_kill": ("audit_recorder", recorder_kill),
    "twin_kill": ("piper_arm", twin_kill),
}
"""Each attack: the node it targets and its function (folder, DDS domain, quick)."""


def run_scenarios(folder: Path, quick: bool = False, log=print) -> list[ScenarioResult]:
    """Every attack of SCENARIOS, fuzz_untrusted.ATTACKS and fuzz_launch.ATTACKS in turn, each in a subfolder of
    `folder` on a DDS domain of its own."""
    # rcl reads the discovery range when the harness's node is created: this host only, as for the processes
    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    from .fuzz_launch import ATTACKS as LAUNCH  # these modules build on this one's Graph and ScenarioResult
    from .fuzz_untrusted import ATTACKS as UNTRUSTED

    results = []
    for name, (node, attack) in {**SCENARIOS, **UNTRUSTED, **LAUNCH}.items():
        domain = fresh_domain()  # held by this process alone while the attack runs
        started = time.monotonic()
        try:
            result = attack(folder / name, domain, quick)
        except Exception as exc:  # noqa: BLE001 - a harness failure is that attack's failed row, the others still run
            log(traceback.format_exc())
            result = ScenarioResult(name.replace("_", " "), node, outcome=f"harness error: {exc!r}")
        finally:
            leases().release(domain)
        log(f"  {result.attack}: {'ok' if result.ok else 'FAILED'} ({time.monotonic() - started:.0f} s): "
            f"{result.outcome}")
        results.append(result)
    return results
