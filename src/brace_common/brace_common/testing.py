"""Test support for BRACE nodes: real rclpy in one process, nodes on one executor, DDS on loopback.

`RosHarness` spins the executor in a background thread; tests add nodes and
poll with `wait_for`. `PlannerDouble` is a test Replan action server standing
in for the E-RECAP planner: it records goals and either answers at once with a
plan or holds the goal until it is cancelled.
"""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path

import rclpy
from brace_msgs.action import Replan
from brace_msgs.msg import PlanStep
from rclpy.action import ActionServer, CancelResponse
from rclpy.callback_groups import ReentrantCallbackGroup
from rclpy.executors import MultiThreadedExecutor
from rclpy.node import Node

from . import names
from .domain_leases import fresh_domain, leases
from .spin import STACKS_SIGNAL, spin_once

UNREACHED_STEPS = 100_000
"""A world's `max_steps` that no test reaches: its episode ends on the task or with the test, never on the clock of a
busy machine while the test still waits for something."""


def holds_within(predicate: Callable[[], bool], timeout: float) -> bool:
    """Poll `predicate` until true (True) or `timeout` seconds passed (False)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.01)
    return False


def wait_for(predicate: Callable[[], bool], timeout: float = 15.0, what: str = "condition") -> None:
    """Poll `predicate` until true; AssertionError naming `what` after `timeout` seconds."""
    if not holds_within(predicate, timeout):
        raise AssertionError(f"timed out waiting for {what}")


STACKS_WAIT_S = 2.0
"""How long a process that did not stop has to write its threads' stacks (STACKS_SIGNAL) before it is killed."""


def stop_processes(procs: Mapping[str, subprocess.Popen], timeout_s: float = 30.0) -> list[str]:
    """SIGINT every running process (a recorder finishes its bag on SIGINT), wait `timeout_s` for each, then have
    what is still running write its threads' stacks to its output (a node's STACKS_SIGNAL) and SIGKILL it; the
    names of those that did not stop on SIGINT."""
    for proc in procs.values():
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
    killed = []
    for name, proc in procs.items():
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            killed.append(name)
            kill_with_stacks(proc)
    return killed


def kill_with_stacks(proc: subprocess.Popen, sig: int = STACKS_SIGNAL) -> str:
    """Have `proc` write its threads' stacks to its output (`sig`: a node's STACKS_SIGNAL, or SIGABRT for a process
    that may not have reached spin_node, with Python's fault handler on), wait STACKS_WAIT_S, then SIGKILL it if it
    still runs; what it wrote to a pipe ("" without one)."""
    proc.send_signal(sig)
    try:
        output, _ = proc.communicate(timeout=STACKS_WAIT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        output, _ = proc.communicate()
    return output or ""


def terminate(proc: subprocess.Popen, timeout_s: float = 30.0) -> int:
    """SIGTERM `proc` if it runs, then its exit code (SIGKILLed after `timeout_s`)."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait()


class ManualClock:
    """A clock (a callable giving seconds) that only the test moves, by setting `now`."""

    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        """The time the test set (s)."""
        return self.now


def call_service(client, request, what: str, available_s: float = 15.0, answer_s: float = 30.0, resends: int = 0):
    """Wait for `client`'s service, call it with `request` from a spinning harness, and return the response.

    With `resends`, an idempotent request unanswered after `answer_s` is sent again (up to that many times): a server
    can answer before it has matched the client's response reader (a busy machine, right after discovery), and DDS
    then drops the response; the request itself is not lost, so waiting longer does not help.
    """
    wait_for(client.service_is_ready, available_s, f"{what} available")
    for _ in range(resends + 1):
        future = client.call_async(request)
        if holds_within(future.done, answer_s):
            return future.result()
        client.remove_pending_request(future)
    raise AssertionError(f"timed out waiting for {what} answered ({resends + 1} sent, {answer_s:g} s each)")


class RosHarness:
    """An rclpy context on its own DDS domain with a MultiThreadedExecutor spun in a thread.

    Each harness leases a fresh domain (`domain_leases`), so no test ever discovers the endpoints of an earlier
    test's (destroyed) nodes, nor those of a test running beside it in another process.
    """

    def __init__(self) -> None:
        self.domain_id = fresh_domain()
        rclpy.init(domain_id=self.domain_id)
        self.executor = MultiThreadedExecutor(num_threads=4)
        self.nodes: list[Node] = []
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._spin, daemon=True)
        self.thread.start()

    def _spin(self) -> None:
        while not self._stop.is_set() and rclpy.ok():
            spin_once(self.executor, 0.05)  # a test thread's cleanup may destroy what is being waited on

    def add(self, node: Node) -> Node:
        """Spin `node` on this harness's executor (destroyed at close)."""
        self.nodes.append(node)
        self.executor.add_node(node)
        return node

    def close(self) -> None:
        """Stop spinning, let running callbacks finish, then destroy the nodes and the context."""
        for node in self.nodes:
            if isinstance(node, PlannerDouble):
                node.release.set()
        self._stop.set()
        self.thread.join(timeout=10.0)
        self.executor.shutdown(timeout_sec=5.0)
        for node in self.nodes:
            node.destroy_node()
        rclpy.try_shutdown()
        # rclpy's executor may hold a task made for an entity of a node being destroyed; collect it
        # now, inside the test, rather than at interpreter exit after pytest's summary.
        del self.executor
        gc.collect()
        leases().release(self.domain_id)


class PlannerDouble(Node):
    """Replan action server double: answers with a one-step plan read from `tokens_after` tokens at most (or a
    planner error `error`, when given), holds until cancelled, or (`raises`) aborts the goal."""

    def __init__(self, action_name: str = names.REPLAN, hold: bool = False,
                 namespace: str = names.DEFAULT_NAMESPACE, error: str = "", tokens_after: int = 300,
                 raises: bool = False) -> None:
        super().__init__("planner_double", namespace=namespace)
        self.hold = hold
        self.raises = raises  # its execute callback raises: rclpy aborts the goal without a result
        self.error = error
        self.tokens_after = tokens_after
        self.goals: list[Replan.Goal] = []
        self.cancelled: list[str] = []
        self.release = threading.Event()  # set at teardown so no held goal outlives the test
        self.server = ActionServer(
            self, Replan, action_name, self.execute,
            cancel_callback=lambda _req: CancelResponse.ACCEPT,
            callback_group=ReentrantCallbackGroup(),
        )

    def execute(self, goal_handle):
        """Answer with a one-step plan, or hold until cancelled (or released at teardown)."""
        goal = goal_handle.request
        self.goals.append(goal)
        result = Replan.Result()
        result.call.decision_id = goal.decision_id
        result.call.agent_id = goal.agent_id
        result.call.step = goal.step
        if self.raises:
            raise RuntimeError("the planner double fails in its execute callback")
        if self.hold:
            while not goal_handle.is_cancel_requested and not self.release.is_set():
                time.sleep(0.005)
            if not goal_handle.is_cancel_requested:
                goal_handle.abort()
                return result
            self.cancelled.append(goal.decision_id)
            goal_handle.canceled()
            result.call.status = result.call.STATUS_CANCELLED
            return result
        result.call.token_budget = goal.token_budget
        result.call.tokens_after = min(goal.token_budget, self.tokens_after)
        result.call.latency_ms = 12.0
        if self.error:
            result.call.status = result.call.STATUS_PLANNER_ERROR
            result.call.error = self.error
            goal_handle.succeed()
            return result
        result.plan.agent_id = goal.agent_id
        result.plan.plan_id = f"plan/{len(self.goals)}"
        result.plan.steps = [PlanStep(index=0, action="move_to", parameters_json=f'{{"step": {goal.step}}}')]
        result.call.status = result.call.STATUS_OK
        goal_handle.succeed()
        return result


try:
    import pytest
except ImportError:  # pytest is only needed by test suites
    pytest = None

if pytest is not None:

    @pytest.fixture
    def ros():
        """A fresh rclpy context with a spinning executor, torn down after the test (import into conftest)."""
        harness = RosHarness()
        yield harness
        harness.close()


def worst_order(specs, world: str) -> list:
    """A stack's node specs in the order graph tests start them: the world first (it must wait for its peers), the
    planner (seconds of imports and model loading) last, the rest as given."""
    return sorted(specs, key=lambda s: (s.name != world, s.name == "erecap_planner"))


def installed_executable(package: str, name: str):
    """The executable `ros2 run <package> <name>` would start (from AMENT_PREFIX_PATH); FileNotFoundError if none."""

    for prefix in os.environ.get("AMENT_PREFIX_PATH", "").split(os.pathsep):
        path = Path(prefix) / "lib" / package / name
        if prefix and path.is_file():
            return path
    raise FileNotFoundError(f"{package}/{name} is not installed (colcon build)")
