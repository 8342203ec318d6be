"""openvla_executor over real DDS, asking a real ActServer on 127.0.0.1 (the deploy server's protocol).

The test plays the arm and the camera at the topic level (joint_states, end_pose, images at 20 Hz from a
simulated gripper that closes on an object of a set width) and the planner (plans).
"""

from __future__ import annotations

import math
import threading
from pathlib import Path

import numpy as np
import pytest
from ament_index_python.packages import get_package_share_directory
from brace_msgs.msg import ContextEntry, EndEffectorDelta, Episode, ExecutionOutcome, Plan, PlanStep, VerifierVerdict
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
from geometry_msgs.msg import PoseStamped
from rclpy.lifecycle import TransitionCallbackReturn
from rclpy.node import Node
from rclpy.parameter import Parameter
from sensor_msgs.msg import Image, JointState

from brace_common import names, qos
from brace_common.act_drip_server import DripServer
from brace_common.testing import wait_for
from brace_common.vocabulary import Block, EntryKind, Failure, TriggerKind
from robot_bridge.openvla.executor_config import ExecutorConfig
from robot_bridge.openvla.openvla_executor_node import OpenVlaExecutorNode, image_to_array

NS = "/arm"
OPEN = 0.07
CLOSE_ACTION = np.array([0.001, 0.0, -0.001, 0.0, 0.0, 0.01, 0.0])   # OpenVLA: gripper 0 = close
OPEN_ACTION = np.array([0.001, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0])


class Policy:
    """The /act policy: answers `action`, or raises while `fail` is set; records instructions and images."""

    def __init__(self, action=CLOSE_ACTION):
        self.action = action
        self.fail = False
        self.instructions: list[str] = []
        self.images: list[np.ndarray] = []
        self.lock = threading.Lock()

    def __call__(self, image, instruction, unnorm_key):
        with self.lock:
            self.instructions.append(instruction)
            self.images.append(image.copy())
        if self.fail:
            raise RuntimeError("CUDA out of memory (simulated)")
        return self.action


class FakeArm(Node):
    """Arm and camera at the topic level: state and images at 20 Hz, a gripper that closes on `object_width`."""

    def __init__(self, encoding: str = "rgb8") -> None:
        super().__init__("fake_arm", namespace=NS)
        self.opening = OPEN
        self.object_width: float | None = 0.03
        self.ee = [0.1, 0.0, 0.2]
        self.encoding = encoding
        self.frames = 0
        self.commands: list[EndEffectorDelta] = []
        self.moving: list[EndEffectorDelta] = []   # with `lag`: steps the arm carries out by its next state message
        self.lag = False
        self.shown: list[list[float]] = []         # with `lag`: the pose in each frame, its index stamped in pixel 0
        self.outcomes: list[ExecutionOutcome] = []
        self.entries: list[ContextEntry] = []
        self.diagnostics: list[DiagnosticStatus] = []
        self.lock = threading.Lock()
        self.joints_pub = self.create_publisher(JointState, names.JOINT_STATES, qos.STATE)
        self.pose_pub = self.create_publisher(PoseStamped, names.END_POSE, qos.STATE)
        self.image_pub = self.create_publisher(Image, "front_camera/" + names.COLOR_IMAGE, qos.STATE)
        self.plan_pub = self.create_publisher(Plan, names.PLAN, qos.PLANS)
        self.episode_pub = self.create_publisher(Episode, names.EPISODE, qos.EVENTS)
        self.create_subscription(EndEffectorDelta, names.EE_DELTA_CMD, self.on_command, qos.INPUTS)
        self.create_subscription(ExecutionOutcome, names.OUTCOMES, self.outcomes.append, qos.INPUTS)
        self.create_subscription(ContextEntry, names.CONTEXT, self.entries.append, qos.INPUTS)
        self.create_subscription(DiagnosticArray, names.DIAGNOSTICS,
                                 lambda m: self.diagnostics.extend(s for s in m.status if "openvla" in s.name),
                                 qos.DIAGNOSTICS)
        self.image = np.zeros((6, 8, 3), np.uint8)
        self.image[:, :, 0] = 200  # red in RGB
        self.create_timer(0.05, self.publish_state)

    def on_command(self, msg: EndEffectorDelta) -> None:
        with self.lock:
            self.commands.append(msg)
            if self.lag:
                self.moving.append(msg)
                return
            self._move(msg)

    def _move(self, msg: EndEffectorDelta) -> None:
        self.ee = [self.ee[0] + msg.translation.x, self.ee[1] + msg.translation.y, self.ee[2] + msg.translation.z]
        if not math.isnan(msg.gripper):
            width = self.object_width
            self.opening = width if width is not None and msg.gripper < width else msg.gripper

    def publish_state(self) -> None:
        with self.lock:
            for msg in self.moving:
                self._move(msg)
            self.moving.clear()
            opening, ee = self.opening, list(self.ee)
            if self.lag:
                self.image[0, 0, 1:] = divmod(len(self.shown), 256)
                self.shown.append(ee)
            image = self.image.copy()
        self.joints_pub.publish(JointState(name=[f"joint{i}" for i in range(1, 7)] + ["gripper"],
                                           position=[0.0] * 6 + [opening]))
        pose = PoseStamped()
        pose.header.frame_id = "base_link"
        pose.pose.position.x, pose.pose.position.y, pose.pose.position.z = ee
        self.pose_pub.publish(pose)
        data = image[:, :, ::-1] if self.encoding == "bgr8" else image
        self.image_pub.publish(Image(height=6, width=8, encoding=self.encoding, step=24,
                                     data=np.ascontiguousarray(data).tobytes()))
        self.frames += 1

    def plan(self, plan_id: str, *steps: tuple[str, str], agent: str = "arm_0", trigger_kind: int = 0) -> None:
        self.plan_pub.publish(Plan(plan_id=plan_id, agent_id=agent, trigger_kind=trigger_kind,
                                   steps=[PlanStep(index=i, action=a, parameters_json=p) for i, (a, p) in enumerate(steps)]))


def executor(url: str, **params) -> OpenVlaExecutorNode:
    # stale_after_s well above a busy machine's pauses: only the test of stale inputs means to fail a step on them
    params = {"server_url": url, "control_period_s": 0.05, "grasp_settle_s": 0.2, "hold_confirm_s": 0.2,
              "image_size": 0, "max_vla_errors": 2, "locations": ["bowl=0.25,0.12,0.12"], "stale_after_s": 10.0,
              **params}
    return OpenVlaExecutorNode(namespace=NS, parameter_overrides=[Parameter(k, value=v) for k, v in params.items()])


def start(ros, node: OpenVlaExecutorNode, encoding: str = "rgb8") -> FakeArm:
    arm = ros.add(FakeArm(encoding))
    assert node.trigger_configure() == TransitionCallbackReturn.SUCCESS, node.last_error
    assert node.trigger_activate() == TransitionCallbackReturn.SUCCESS
    ros.add(node)
    wait_for(lambda: arm.plan_pub.get_subscription_count() > 0 and node.ee_pub.get_subscription_count() > 0
             and node.outcome_pub.get_subscription_count() > 0 and node.context_pub.get_subscription_count() > 0
             and node.runner.image is not None and node.runner.gripper_m is not None and node.runner.ee_xyz is not None,
             what="discovery")
    return arm


def test_pick_closes_on_the_object_and_succeeds(ros, act):
    policy = Policy(CLOSE_ACTION)
    server = act(policy)
    node = executor(server.url)
    arm = start(ros, node, encoding="bgr8")
    arm.plan("p1", ("pick", '{"object": "red_cup"}'))
    wait_for(lambda: len(arm.outcomes) == 1, what="the pick's outcome")
    outcome = arm.outcomes[0]
    assert outcome.success and outcome.failure == ExecutionOutcome.FAILURE_NONE
    assert (outcome.agent_id, outcome.action) == ("arm_0", "pick") and outcome.step > 0
    assert "holding red_cup" in outcome.detail and "0.030" in outcome.detail
    wait_for(lambda: len(arm.entries) == 1, what="the context entry")
    entry = arm.entries[0]
    assert (entry.agent_id, entry.block, entry.kind) == ("arm_0", Block.HISTORY, EntryKind.ACTION_OUTCOME.value)
    assert entry.text.startswith("pick(object=red_cup) succeeded: holding red_cup") and entry.step == outcome.step
    # the commands: the VLA's action, scaled and limited, with the gripper convention applied (0 -> closed, 0 m)
    assert arm.commands
    cmd = arm.commands[0]
    assert cmd.header.frame_id == "base_link" and cmd.gripper == 0.0
    assert (cmd.translation.x, cmd.translation.y, cmd.translation.z) == pytest.approx((0.001, 0.0, -0.001))
    assert cmd.rotation.z == pytest.approx(0.01)
    # the server saw the instruction of the template table and the camera image in RGB (bgr8 converted)
    assert policy.instructions[0] == "pick up the red cup"
    assert policy.images[0].shape == (6, 8, 3) and policy.images[0][0, 0].tolist() == [200, 0, 0]
    # the plan is done: the agent is idle, no more commands
    assert node.runner.current is None and not node.runner.monitor.active and node.runner.counts["steps_succeeded"] == 1
    wait_for(lambda: len(arm.commands) == node.runner.counts["actions"], what="every command delivered")
    assert node.runner.counts["actions"] <= len(policy.instructions)


def test_pick_then_place_in_the_bowl(ros, act):
    policy = Policy(CLOSE_ACTION)
    server = act(policy)
    node = executor(server.url)
    arm = start(ros, node)
    with arm.lock:
        arm.ee = [0.25, 0.13, 0.18]                              # above the bowl (0.06 m higher, 0.01 m beside)
    arm.plan("p1", ("pick", '{"object": "apple"}'), ("place", '{"object": "apple", "target": "bowl"}'))
    wait_for(lambda: len(arm.outcomes) == 1, what="the pick's outcome")
    assert arm.outcomes[0].success and node.runner.current.action == "place"
    policy.action = OPEN_ACTION                                   # the VLA opens the gripper over the bowl
    wait_for(lambda: len(arm.outcomes) == 2, what="the place's outcome")
    assert arm.outcomes[1].success and arm.outcomes[1].action == "place" and "at bowl" in arm.outcomes[1].detail
    assert policy.instructions[-1] == "put the apple in the bowl"


def test_slip_after_the_grasp_is_drop_slip(ros, act):
    server = act(Policy(CLOSE_ACTION))
    node = executor(server.url, hold_confirm_s=30.0)
    arm = start(ros, node)
    arm.plan("p1", ("pick", '{"object": "banana"}'), ("place", '{"object": "banana", "target": "bowl"}'))
    wait_for(lambda: node.runner.monitor.gripper.holding, what="the grasp")
    with arm.lock:
        arm.object_width, arm.opening = None, 0.0                 # the object slips out: the gripper closes fully
    wait_for(lambda: len(arm.outcomes) == 1, what="the slip's outcome")
    outcome = arm.outcomes[0]
    assert not outcome.success and outcome.failure == ExecutionOutcome.FAILURE_DROP_SLIP
    assert "slipped" in outcome.detail
    wait_for(lambda: len(arm.entries) == 1, what="the failure trace")
    assert arm.entries[0].kind == EntryKind.FAILURE_TRACE.value and "failed (drop_slip)" in arm.entries[0].text
    assert node.runner.current is None                                   # on_failure abandon: the place is not attempted


def test_closing_on_nothing_is_a_grasp_failure(ros, act):
    server = act(Policy(CLOSE_ACTION))
    node = executor(server.url)
    arm = start(ros, node)
    with arm.lock:
        arm.object_width = None
    arm.plan("p1", ("pick", '{"object": "orange"}'))
    wait_for(lambda: len(arm.outcomes) == 1, what="the outcome")
    assert arm.outcomes[0].failure == Failure.GRASP and "closed on nothing" in arm.outcomes[0].detail


def test_server_errors_fail_the_step_and_the_node_lives_on(ros, act):
    policy = Policy(CLOSE_ACTION)
    policy.fail = True
    server = act(policy)
    node = executor(server.url, max_vla_errors=3)
    arm = start(ros, node)
    arm.plan("p1", ("pick", '{"object": "cup"}'))
    wait_for(lambda: len(arm.outcomes) == 1, what="the executor failure")
    outcome = arm.outcomes[0]
    assert outcome.failure == ExecutionOutcome.FAILURE_EXECUTOR and not outcome.success
    assert "3 times in a row" in outcome.detail and '"error"' in outcome.detail
    assert node.runner.counts["vla_errors.server_error"] == 3 and server.errors == 3 and not arm.commands
    wait_for(lambda: any(s.level == DiagnosticStatus.ERROR and "VLA failing" in s.message for s in arm.diagnostics),
             what="diagnostics ERROR")
    # the server recovers: the next plan runs
    policy.fail = False
    arm.plan("p2", ("pick", '{"object": "cup"}'))
    wait_for(lambda: len(arm.outcomes) == 2, what="the next plan's outcome")
    assert arm.outcomes[1].success and node.runner.consecutive_vla_errors == 0


def test_unreachable_server_fails_the_step(ros, act):
    server = act(Policy())
    url = server.url
    server.stop()                                                  # nothing listens there any more
    node = executor(url, max_vla_errors=2)
    arm = start(ros, node)
    arm.plan("p1", ("move_to", '{"target": "bowl"}'))
    wait_for(lambda: len(arm.outcomes) == 1, what="the executor failure")
    assert arm.outcomes[0].failure == ExecutionOutcome.FAILURE_EXECUTOR and node.runner.counts["vla_errors.unreachable"] == 2


def diagnostic_value(status: DiagnosticStatus, key: str) -> str:
    return next((kv.value for kv in status.values if kv.key == key), "")


def test_a_dripping_server_fails_the_step_within_the_deadline_and_the_executor_recovers(ros):
    # a byte every 0.5 s (the whole answer takes 18+ s): each byte is well inside a per-read timeout, so only a total
    # deadline per request ends it; the step is the executor's failure, not the skill's TIMEOUT. The deadline (2 s)
    # leaves a busy machine time for the normal answers afterwards: a 200 KB request and its answer on loopback
    with DripServer("drip_body", action=CLOSE_ACTION, drip_s=0.5) as server:
        node = executor(server.url, server_timeout_s=2.0, max_vla_errors=2, step_timeout_s=60.0)
        arm = start(ros, node)
        arm.plan("p1", ("pick", '{"object": "cup"}'))
        wait_for(lambda: len(arm.outcomes) == 1, what="the step's EXECUTOR failure")
        outcome = arm.outcomes[0]
        assert outcome.failure == Failure.EXECUTOR and not outcome.success, outcome.detail
        assert "2 times in a row" in outcome.detail and "slow_body" in outcome.detail
        assert node.runner.counts["vla_errors.slow_body"] == 2 and node.runner.counts["vla_errors"] == 2 and not arm.commands
        assert server.answered == 0
        wait_for(lambda: any(s.level == DiagnosticStatus.ERROR and diagnostic_value(s, "vla_errors.slow_body") == "2"
                             and "VLA failing" in s.message for s in list(arm.diagnostics)), what="diagnostics ERROR")
        # the server answers normally again: the next plan's actions come at once and the pick succeeds
        server.mode = "normal"
        arm.plan("p2", ("pick", '{"object": "cup"}'))
        wait_for(lambda: len(arm.outcomes) == 2, what="the next plan's outcome")
        assert arm.outcomes[1].success and node.runner.consecutive_vla_errors == 0 and arm.commands


def test_a_new_plan_does_not_wait_behind_a_stuck_request(ros):
    # the deadline is far (60 s) and the drip slow (30+ s for the answer): only cancelling the stuck request, when
    # its step is replaced, frees the single worker for the new plan's request
    with DripServer("drip_body", action=CLOSE_ACTION, drip_s=0.2) as server:
        node = executor(server.url, server_timeout_s=60.0)
        arm = start(ros, node)
        arm.plan("p1", ("pick", '{"object": "cup"}'))
        wait_for(lambda: server.requests == 1 and node.runner.in_flight is not None, what="a request dripping")
        server.mode = "normal"
        arm.plan("p2", ("pick", '{"object": "mug"}'))
        wait_for(lambda: len(arm.commands) >= 1, what="the new plan's commands")
        wait_for(lambda: len(arm.outcomes) == 1, what="the new plan's outcome")
        assert arm.outcomes[0].success and "mug" in arm.outcomes[0].detail
        # the stuck request was cancelled; when the new step succeeds, a request for its next action may be in
        # flight too (a busy machine) and is abandoned with the step, so it can count a second time
        assert 1 <= node.runner.counts["vla_requests_cancelled"] <= 2 and node.runner.counts["steps_replaced"] == 1


@pytest.mark.parametrize("answer, reason, text", [
    (np.array([0.001, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0 + 1.0j]), "not_real", "complex"),
    (np.array([0.001, 0.0, 0.0, 0.0, 0.0, 0.0, np.nan]), "non_finite", "non-finite"),
])
def test_non_real_actions_are_refused_and_counted(ros, answer, reason, text):
    import json_numpy

    with DripServer("raw") as server:
        server.raw = json_numpy.dumps(answer).encode()
        node = executor(server.url, max_vla_errors=2)
        arm = start(ros, node)
        arm.plan("p1", ("pick", '{"object": "cup"}'))
        wait_for(lambda: len(arm.outcomes) == 1, what="the step's EXECUTOR failure")
    assert arm.outcomes[0].failure == Failure.EXECUTOR and text in arm.outcomes[0].detail
    assert node.runner.counts[f"vla_errors.{reason}"] == 2 and node.runner.counts["actions"] == 0 and not arm.commands


@pytest.mark.parametrize("anchor", [True, False])
def test_each_step_is_applied_from_the_pose_the_vla_saw(ros, act, anchor):
    """A policy that steers the tool to a point, answered one control tick late (the executor pipelines its
    requests): anchored, the tool settles on the point; applied to the pose measured when it arrives, a step repeats
    the one before it and the tool keeps circling the point."""
    goal = np.array([0.13, 0.0, 0.17])
    arms: list[FakeArm] = []

    def steer(image, instruction, unnorm_key):
        with arms[0].lock:     # the pose the image shows, as a camera would: not where the arm has got to since
            ee = np.array(arms[0].shown[int(image[0, 0, 1]) * 256 + int(image[0, 0, 2])])
        return np.array([*np.clip(goal - ee, -0.02, 0.02), 0.0, 0.0, 0.0, 1.0])

    node = executor(act(steer).url, anchor_actions=anchor, control_period_s=0.1, step_timeout_s=60.0)
    arms.append(start(ros, node))
    arm = arms[0]
    arm.lag = True          # a step takes the arm until its next state message (50 ms): the VLA sees it before
    arm.plan("p", ("move_to", '{"target": "bowl"}'))
    wait_for(lambda: len(arm.commands) >= 40, what="40 steps", timeout=60.0)
    with arm.lock:
        last = [(c.translation.x, c.translation.z) for c in arm.commands[-10:]]
    settled = all(abs(x) < 1e-3 and abs(z) < 1e-3 for x, z in last)
    assert settled == anchor, [(round(x, 4), round(z, 4)) for x, z in last]
    assert (node.runner.counts["actions_anchored"] >= 40) == anchor


def test_malformed_plans_are_counted_and_the_step_goes_on(ros, act):
    policy = Policy(OPEN_ACTION)                                   # never closes: the pick goes on
    server = act(policy)
    node = executor(server.url)
    arm = start(ros, node)
    arm.plan("p1", ("pick", '{"object": "cup"}'))
    wait_for(lambda: len(arm.commands) >= 2, what="commands")
    arm.plan("bad1", ("pick", '{"object": '))
    arm.plan("bad2", ("pick", '{"object": "cup"}'), ("dance", "{}"))
    arm.plan("bad3", ("move_to", '{"target": "mars"}'))
    arm.plan("bad4", ("pick", '{}'))
    arm.plan("bad5", ("pick", '["cup"]'))
    arm.plan("other", ("pick", '{"object": "cup"}'), agent="arm_1")
    arm.plan("p1", ("place", '{"object": "cup", "target": "bowl"}'))  # the latched plan again: ignored
    rejected = {"plan.bad_parameters_json": 2, "plan.unknown_skill": 1, "plan.unknown_location": 1,
                "plan.missing_parameter": 1}
    wait_for(lambda: dict(node.runner.rejections.counts) == rejected and node.runner.counts["plans_other_agents"] == 1
             and node.runner.counts["plans_repeated"] == 1, what="rejections counted")
    assert node.runner.plan_id == "p1" and node.runner.current.action == "pick" and node.runner.monitor.active
    sent = len(arm.commands)
    wait_for(lambda: len(arm.commands) > sent + 2, what="commands after the malformed plans")
    assert not arm.outcomes
    wait_for(lambda: any("rejected.plan.unknown_skill" in s.message for s in arm.diagnostics), what="diagnostics WARN")
    # a good plan replaces the current one and starts at its first step
    policy.action = CLOSE_ACTION
    arm.plan("p2", ("pick", '{"object": "mug"}'))
    wait_for(lambda: len(arm.outcomes) == 1, what="the new plan's outcome")
    assert arm.outcomes[0].success and "mug" in arm.outcomes[0].detail and node.runner.counts["steps_replaced"] == 1


def test_a_replan_that_confirms_the_rest_of_the_plan_lets_the_running_step_go_on(ros, act):
    policy = Policy(OPEN_ACTION)                                   # the pick never closes: a stuck step
    server = act(policy)
    node = executor(server.url, max_step_actions=40)
    arm = start(ros, node)
    arm.plan("p1", ("pick", '{"object": "cup"}'), ("place", '{"object": "cup", "target": "bowl"}'))
    wait_for(lambda: len(arm.commands) >= 10, what="the pick under way")
    arm.plan("p2", ("pick", '{"object": "cup"}'), ("place", '{"object": "cup", "target": "bowl"}'))  # the same
    wait_for(lambda: node.runner.counts["plans_unchanged"] == 1, what="the confirming plan taken")
    assert node.runner.plan_id == "p2" and node.runner.counts["steps_replaced"] == 0
    assert node.runner.monitor.actions >= 10                               # the running step's count went on
    # the same plan repairing a drift gives the VLA the instruction anew; the step's budget still counts
    generation = node.runner.generation
    arm.plan("p2d", ("pick", '{"object": "cup"}'), ("place", '{"object": "cup", "target": "bowl"}'),
             trigger_kind=TriggerKind.DRIFT)
    wait_for(lambda: node.runner.counts["steps_restarted"] == 1, what="the repairing plan taken")
    assert node.runner.plan_id == "p2d" and node.runner.counts["plans_unchanged"] == 2
    assert node.runner.counts["steps_replaced"] == 0
    assert node.runner.generation > generation and node.runner.monitor.actions >= 10
    # so the stuck step still reaches its action budget
    wait_for(lambda: len(arm.outcomes) == 1, 30.0, what="the step's timeout")
    assert node.runner.counts["steps_restarted"] == 1
    assert not arm.outcomes[0].success and arm.outcomes[0].failure == Failure.TIMEOUT
    # a plan that differs from what is left replaces it and starts at its first step
    arm.plan("p3", ("pick", '{"object": "mug"}'))
    wait_for(lambda: node.runner.plan_id == "p3" and node.runner.current is not None
             and node.runner.current.parameters["object"] == "mug",
             what="the new plan")


@pytest.mark.parametrize("event", [Episode.EVENT_START, Episode.EVENT_END])
def test_an_episode_boundary_ends_the_plan_without_an_outcome_and_the_arm_holds(ros, act, event):
    server = act(Policy(OPEN_ACTION))                              # a pick that never closes: it runs on
    node = executor(server.url)
    arm = start(ros, node)
    wait_for(lambda: arm.episode_pub.get_subscription_count() > 0, what="the executor's episode subscription")
    arm.plan("p1", ("pick", '{"object": "cup"}'))
    wait_for(lambda: len(arm.commands) >= 3, what="the pick under way")
    arm.episode_pub.publish(Episode(event=event, episode=1))
    # the node ends the plan on its executor thread: wait for all of it, not only the counter
    wait_for(lambda: node.runner.counts["plans_ended_by_episode"] == 1 and node.runner.current is None
             and not node.runner.monitor.active,
             what="the plan ended by the episode boundary")
    assert not arm.outcomes
    if event == Episode.EVENT_END:        # a plan answered after the end is not run; the next episode's START opens
        arm.plan("late", ("pick", '{"object": "cup"}'))
        wait_for(lambda: node.runner.counts["plans_between_episodes"] == 1, what="the late plan counted")
        assert node.runner.current is None
        arm.episode_pub.publish(Episode(event=Episode.EVENT_START, episode=2))
        wait_for(lambda: not node.runner.between_episodes, what="the next episode's START")
    sent = len(arm.commands)
    arm.plan("p2", ("pick", '{"object": "cup"}'))                  # the new episode's first plan begins anew
    wait_for(lambda: len(arm.commands) > sent + 2 and node.runner.plan_id == "p2", what="the new plan's commands")
    assert node.runner.counts["plans_unchanged"] == 0 and node.runner.monitor.actions < 40


def test_deactivate_stops_commands(ros, act):
    server = act(Policy(OPEN_ACTION))
    node = executor(server.url)
    arm = start(ros, node)
    arm.plan("p1", ("pick", '{"object": "cup"}'))
    wait_for(lambda: len(arm.commands) >= 2, what="commands")
    assert node.trigger_deactivate() == TransitionCallbackReturn.SUCCESS
    sent = node.runner.counts["actions"]
    wait_for(lambda: len(arm.commands) == sent, what="the commands sent before deactivate")
    frames = arm.frames
    wait_for(lambda: arm.frames >= frames + 10, what="half a second of arm state")
    assert node.runner.counts["actions"] == sent and len(arm.commands) == sent and node.runner.in_flight is None
    assert node.trigger_activate() == TransitionCallbackReturn.SUCCESS
    wait_for(lambda: len(arm.commands) > sent + 2, what="commands after activate")


def test_no_camera_image_is_an_executor_failure(ros, act):
    server = act(Policy(OPEN_ACTION))
    node = executor(server.url, image_topic="no_camera/color/image_raw", stale_after_s=0.3)
    arm = ros.add(FakeArm())
    assert node.trigger_configure() == TransitionCallbackReturn.SUCCESS
    assert node.trigger_activate() == TransitionCallbackReturn.SUCCESS
    ros.add(node)
    wait_for(lambda: arm.plan_pub.get_subscription_count() > 0 and node.outcome_pub.get_subscription_count() > 0,
             what="discovery")
    arm.plan("p1", ("pick", '{"object": "cup"}'))
    wait_for(lambda: len(arm.outcomes) == 1, what="the outcome")
    assert arm.outcomes[0].failure == Failure.EXECUTOR and "no camera image" in arm.outcomes[0].detail


@pytest.mark.parametrize("name, value", [
    ("gripper_mode", "binary"), ("locations", ["bowl=1,2"]), ("instruction_templates", ["pick"]),
    ("skill_conditions", ["pick=hold"]), ("backend", "cloud"), ("control_period_s", 0.0), ("on_failure", "retry"),
    ("max_translation_m", [0.01, 0.01]), ("min_object_width_m", 0.1), ("gripper_open_value", 0.0),
    ("model_path", ""), ("unnorm_key_typo", "x"),
])
def test_bad_parameters_fail_configure_naming_them(ros, name, value):
    params = {name: value}
    if name == "model_path":
        params["backend"] = "local"
    node = OpenVlaExecutorNode(namespace=NS, parameter_overrides=[Parameter(k, value=v) for k, v in params.items()])
    ros.add(node)
    assert node.trigger_configure() == TransitionCallbackReturn.FAILURE
    assert f"'{name}'" in node.last_error, node.last_error


def test_local_backend_without_a_checkpoint_fails_configure(ros, tmp_path):
    node = OpenVlaExecutorNode(namespace=NS, parameter_overrides=[Parameter("backend", value="local"),
                                                                  Parameter("model_path", value=str(tmp_path))])
    ros.add(node)
    assert node.trigger_configure() == TransitionCallbackReturn.FAILURE
    assert "'model_path'" in node.last_error and "config.json" in node.last_error


def test_shipped_parameter_file_is_valid():

    from brace_common.config import config_from_file

    path = Path(get_package_share_directory("brace_bringup")) / "params" / "openvla_executor.yaml"
    cfg = config_from_file(ExecutorConfig, path, "openvla_executor")
    assert cfg.unnorm_key == "bridge_orig" and cfg.control_period_s == 0.2 and cfg.backend == "server"
    assert cfg.monitor_config().locations["bowl"] == (0.25, 0.12, 0.12)
    assert cfg.templates().instruction("place", {"object": "apple", "target": "bowl"}) == "put the apple in the bowl"


def test_image_conversion():
    rgb = np.arange(2 * 3 * 3, dtype=np.uint8).reshape(2, 3, 3)
    padded = np.zeros((2, 12), np.uint8)                           # step 12 > 9: rows padded
    padded[:, :9] = rgb.reshape(2, 9)
    msg = Image(height=2, width=3, encoding="rgb8", step=12, data=padded.tobytes())
    assert image_to_array(msg).tolist() == rgb.tolist()
    msg = Image(height=2, width=3, encoding="bgr8", step=9, data=rgb[:, :, ::-1].tobytes())
    assert image_to_array(msg).tolist() == rgb.tolist()
    for bad in (Image(height=2, width=3, encoding="mono8", step=3, data=bytes(6)),
                Image(height=2, width=3, encoding="rgb8", step=9, data=bytes(10)),
                Image(height=0, width=3, encoding="rgb8", step=9, data=b"")):
        with pytest.raises(ValueError):
            image_to_array(bad)


def test_a_confident_violation_halts_the_step_and_holds_the_arm(ros, act):
    """OmniAct's preemption: the verifier's violation ends the running step at once (FAILURE_PREEMPTED), the arm gets a
    zero step (hold), the rest of the plan is abandoned; other agents' and unconfident verdicts change nothing."""
    server = act(Policy(OPEN_ACTION))          # the gripper never closes: the pick runs until something ends it
    node = executor(server.url, on_failure="continue")
    arm = start(ros, node)
    verdicts = arm.create_publisher(VerifierVerdict, names.VERDICTS, qos.EVENTS)
    wait_for(lambda: verdicts.get_subscription_count() > 0, what="the executor's verdicts subscription")
    arm.plan("p1", ("pick", '{"object": "apple"}'), ("place", '{"object": "apple", "target": "bowl"}'))
    wait_for(lambda: len(arm.commands) >= 2, what="the pick's first actions")
    verdicts.publish(VerifierVerdict(agent_id="arm_1", violation=True, confidence=0.9, detail="not ours"))
    verdicts.publish(VerifierVerdict(agent_id="arm_0", violation=True, confidence=0.2, detail="unsure"))
    wait_for(lambda: node.runner.counts["verdicts_not_halting"] == 1, what="the unconfident verdict counted")
    assert not arm.outcomes
    verdicts.publish(VerifierVerdict(agent_id="arm_0", violation=True, confidence=0.9,
                                     detail="apple removed: not on the table, not in the gripper"))
    wait_for(lambda: len(arm.outcomes) == 1 and len(arm.entries) == 1, what="the halted step's outcome")
    outcome, entry = arm.outcomes[0], arm.entries[0]
    assert not outcome.success and outcome.failure == ExecutionOutcome.FAILURE_PREEMPTED and outcome.action == "pick"
    assert "visual verifier" in outcome.detail and "apple removed" in outcome.detail
    assert entry.kind == EntryKind.FAILURE_TRACE.value and "apple removed" in entry.text
    wait_for(lambda: any(c.translation.x == c.translation.y == c.translation.z == 0.0 and math.isnan(c.gripper)
                         for c in arm.commands), what="the hold command")
    sent, ticks = len(arm.commands), node.runner.ticks
    wait_for(lambda: node.runner.ticks >= ticks + 5, what="five more control ticks")
    assert len(arm.commands) == sent and node.runner.current is None, "a preempted plan is abandoned, even with 'continue'"
    assert node.runner.counts["halts"] == 1 and len(arm.outcomes) == 1
    verdicts.publish(VerifierVerdict(agent_id="arm_0", violation=True, confidence=0.9, detail="again"))
    wait_for(lambda: node.runner.counts["verdicts_idle"] == 1, what="a verdict while idle counted")
