"""The isaac_bridge node against a stand-in for Isaac Sim's ROS 2 bridge (test/isaac_standin.py): real rclpy, DDS.

The stand-in publishes /clock, odometry, joint states and camera topics with Isaac's message types, names and
default QoS and follows the bridge's cmd_vel / joint_command; a fake stack sends plans and listens to what the
bridge tells it. The last test starts the installed `isaac_bridge` executable as `ros2 run` would.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from ament_index_python.packages import get_package_share_directory
from brace_msgs.msg import AgentState, ContextEntry, Episode, ExecutionOutcome, Plan, PlanStep, WorldState
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
from rclpy.lifecycle import TransitionCallbackReturn
from rclpy.node import Node
from rclpy.parameter import Parameter

from brace_common import qos
from brace_common.action_schema import Step
from brace_common.clock import seconds_of
from brace_common.names import DEFAULT_NAMESPACE as NS
from brace_common.testing import installed_executable, wait_for
from brace_common.vocabulary import EpisodeEvent, Failure, Observability
from brace_common.world_state import world_state_from_msg
from sim_bridges.isaac.isaac_bridge_node import IsaacBridgeNode
from sim_bridges.isaac.isaac_fleet import Tick
from sim_bridges.isaac.isaac_skills import Outcome

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the stand-in beside this file
from isaac_standin import FRANKA_JOINTS, INITIAL_JOINTS, IsaacStandIn  # noqa: E402

PARAMS = Path(get_package_share_directory("brace_bringup")) / "params"  # the stacks' parameter files
READY = (0.0, -0.3, 0.0, -1.9, 0.0, 1.6, 0.785)
BOTH = {"carter_1": "mobile", "franka_1": "arm"}
FAST = {"use_sim_time": True, "control_period_s": 0.02, "agent_state_period_s": 0.05, "observe_period_s": 0.5,
        "diagnostics_period_s": 0.2, "stale_after_s": 0.5, "max_linear_speed": 1.0, "max_angular_speed": 2.0,
        "max_joint_speed": 2.0}


class FakeStack(Node):
    """The stack's side: sends plans, keeps what the bridge publishes."""

    def __init__(self) -> None:
        super().__init__("fake_stack", namespace=NS)
        self.plan_pub = self.create_publisher(Plan, "plan", qos.PLANS)
        self.outcomes: list[ExecutionOutcome] = []
        self.states: list[AgentState] = []
        self.episodes: list[Episode] = []
        self.entries: list[ContextEntry] = []
        self.diagnostics: list[DiagnosticStatus] = []
        self.create_subscription(ExecutionOutcome, "outcomes", self.outcomes.append, qos.INPUTS)
        self.create_subscription(AgentState, "agent_states", self.states.append, qos.INPUTS)
        self.create_subscription(Episode, "episode", self.episodes.append, qos.INPUTS)
        self.create_subscription(ContextEntry, "context", self.entries.append, qos.INPUTS)
        self.world_states: list[WorldState] = []
        self.create_subscription(WorldState, "world_state", self.world_states.append, qos.WORLD_STATE)
        self.create_subscription(DiagnosticArray, "/diagnostics",
                                 lambda m: self.diagnostics.extend(s for s in m.status if "isaac_bridge" in s.name),
                                 qos.DIAGNOSTICS)
        self.sent = 0

    def send(self, agent: str, *steps: tuple[str, dict | str]) -> str:
        self.sent += 1
        plan = Plan(plan_id=f"plan_{self.sent}", agent_id=agent, steps=[
            PlanStep(index=i, action=a, parameters_json=p if isinstance(p, str) else json.dumps(p))
            for i, (a, p) in enumerate(steps)])
        plan.header.stamp = self.get_clock().now().to_msg()
        self.plan_pub.publish(plan)
        return plan.plan_id

    def started(self) -> bool:
        return any(e.event == EpisodeEvent.START for e in self.episodes)

    def last_state(self, agent: str) -> AgentState | None:
        return next((s for s in reversed(self.states) if s.agent_id == agent), None)


def parameter(name: str, value) -> Parameter:
    """A parameter override; an empty list reaches rclpy untyped, as from a parameter file (read_config: [])."""
    return Parameter(name, Parameter.Type.NOT_SET) if value == [] else Parameter(name, value=value)


def bridge(robots: dict[str, str] = BOTH, **params) -> IsaacBridgeNode:
    """An isaac_bridge for `robots` (carter_1 with a camera when present), configured and activated."""
    goals = {"carter_1": "carter_1: 2.0 1.0", "franka_1": "franka_1: ready"}
    values = {**FAST, "agents": list(robots), "agent_kinds": list(robots.values()),
              "camera_agents": [r for r in robots if r == "carter_1"], "tasks": [f"{r}: do the task" for r in robots],
              "task_goals": [goals[r] for r in robots], **params}
    node = IsaacBridgeNode(namespace=NS, parameter_overrides=[parameter(k, v) for k, v in values.items()])
    assert node.trigger_configure() == TransitionCallbackReturn.SUCCESS, node.last_error
    assert node.trigger_activate() == TransitionCallbackReturn.SUCCESS
    return node


def standin(robots: dict[str, str] = BOTH, **kwargs) -> IsaacStandIn:
    return IsaacStandIn(robots, cameras=tuple(r for r in robots if r == "carter_1"), time_scale=2.0, **kwargs)


def started(ros, robots: dict[str, str] = BOTH, params: dict | None = None, **standin_args):
    """Bridge, stand-in and fake stack, spinning, with the episode started."""
    node = ros.add(bridge(robots, **(params or {})))
    sim = ros.add(standin(robots, **standin_args))
    stack = ros.add(FakeStack())
    wait_for(stack.started, 20.0, "EVENT_START")
    wait_for(lambda: stack.plan_pub.get_subscription_count() > 0, what="the bridge's plan subscription")
    return node, sim, stack


def test_the_contract_topics_and_types_in_each_robot_namespace_and_the_stack(ros):
    node = ros.add(bridge())

    def topics(kind: str, prefix: str) -> dict[str, list[str]]:
        listed = getattr(node, f"get_{kind}_names_and_types_by_node")("isaac_bridge", NS)
        return {name: types for name, types in listed if name.startswith(prefix)}

    wait_for(lambda: "/clock" in topics("subscriber", "/"), what="the graph lists the bridge's topics")
    assert topics("subscriber", "/carter_1/") == {"/carter_1/odom": ["nav_msgs/msg/Odometry"],
                                                  "/carter_1/camera/rgb": ["sensor_msgs/msg/Image"],
                                                  "/carter_1/camera/camera_info": ["sensor_msgs/msg/CameraInfo"]}
    assert topics("publisher", "/carter_1/") == {"/carter_1/cmd_vel": ["geometry_msgs/msg/Twist"]}
    assert topics("subscriber", "/franka_1/") == {"/franka_1/joint_states": ["sensor_msgs/msg/JointState"]}
    assert topics("publisher", "/franka_1/") == {"/franka_1/joint_command": ["sensor_msgs/msg/JointState"]}
    assert topics("subscriber", "/clock") == {"/clock": ["rosgraph_msgs/msg/Clock"]}
    assert topics("subscriber", NS) == {f"{NS}/plan": ["brace_msgs/msg/Plan"],
                                         f"{NS}/collision_monitor_state": ["brace_msgs/msg/CollisionMonitorState"]}
    published = topics("publisher", "/")
    for name, msg_type in (("agent_states", "AgentState"), ("context", "ContextEntry"),
                           ("outcomes", "ExecutionOutcome"), ("episode", "Episode")):
        assert published[f"{NS}/{name}"] == [f"brace_msgs/msg/{msg_type}"]
    assert published["/diagnostics"] == ["diagnostic_msgs/msg/DiagnosticArray"]


def test_the_episode_starts_only_once_isaac_sims_topics_are_live_whatever_started_first(ros):
    node = ros.add(bridge())
    stack = ros.add(FakeStack())
    wait_for(lambda: node.counts["ticks_waiting_for_contract"] > 20, what="the bridge waits")
    wait_for(lambda: any("waiting for Isaac Sim's topics" in d.message and "/carter_1/odom" in d.message
                         for d in stack.diagnostics), what="diagnostics say what is missing")
    assert not stack.episodes and node.fleet.judge is None
    ros.add(standin())
    wait_for(stack.started, 20.0, "EVENT_START once the stand-in publishes")
    start = stack.episodes[0]
    assert (start.num_agents, start.world) == (2, "isaac_sim")
    wait_for(lambda: {"carter_1", "franka_1"} <= {c.agent_id for c in stack.entries if c.kind == "task"},
             what="each robot's task")
    wait_for(lambda: any(c.kind == "observation" and "camera 8x6" in c.text for c in stack.entries),
             what="an observation with the camera")
    wait_for(lambda: any(d.level == DiagnosticStatus.OK and any(v.key == "episode" and v.value == "running"
                                                                for v in d.values) for d in stack.diagnostics),
             what="diagnostics OK with the episode running")


def test_a_plan_drives_the_base_to_its_goal_and_the_episode_succeeds(ros):
    node, sim, stack = started(ros, {"carter_1": "mobile"})
    stack.send("carter_1", ("move_to", {"x": 2.0, "y": 1.0}))
    wait_for(lambda: stack.outcomes, 30.0, "the move_to outcome")
    outcome = stack.outcomes[0]
    assert (outcome.agent_id, outcome.action, outcome.success, outcome.failure) == ("carter_1", "move_to", True, 0)
    assert max(v for v, _ in sim.cmd_vel["carter_1"]) > 0.3
    wait_for(lambda: (s := stack.last_state("carter_1")) is not None and not s.has_goal
             and abs(s.position.x - 2.0) < 0.2 and abs(s.position.y - 1.0) < 0.2, what="agent_states converge")
    wait_for(lambda: any(e.event == EpisodeEvent.END for e in stack.episodes), what="EVENT_END")
    end = stack.episodes[-1]
    assert (end.success, end.delivered, end.tasks, end.plans) == (True, 1, 1, 1)
    measured = {m.name: m.value for m in end.metrics}
    assert measured["path_efficiency"] > 0.8 and "min_distance_m" not in measured  # one robot: not measured
    wait_for(lambda: sim.cmd_vel["carter_1"][-1] == (0.0, 0.0), what="the base stopped")
    wait_for(lambda: any(c.kind == "task_done" for c in stack.entries), what="the task_done entry")
    wait_for(lambda: stack.world_states and world_state_from_msg(stack.world_states[-1]).entity("task_carter_1").state
             == "done", what="the world state with the task done")
    states = [world_state_from_msg(m) for m in stack.world_states]
    assert {s.world for s in states} == {"isaac_sim"} and states[-1].observability == Observability.PARTIAL
    assert any(s.activity("carter_1").action == "move_to" for s in states)
    pose = states[-1].entity("carter_1").pose
    assert abs(pose.x - 2.0) < 0.2 and abs(pose.y - 1.0) < 0.2
    assert [s.step for s in states] == sorted(s.step for s in states)


def test_a_plan_moves_the_arm_to_a_named_pose(ros):
    node, sim, stack = started(ros, {"franka_1": "arm"})
    stack.send("franka_1", ("move_joints", {"pose": "ready"}))
    wait_for(lambda: stack.outcomes, 30.0, "the move_joints outcome")
    assert (stack.outcomes[0].action, stack.outcomes[0].success) == ("move_joints", True)
    assert max(abs(q - t) for q, t in zip(sim.joints["franka_1"], READY, strict=True)) < 0.05
    # the move ends on its exact target; once the episode is over the hold sends the measured joints instead
    wait_for(lambda: any(list(c.position) == list(READY) for c in sim.joint_commands["franka_1"]),
             what="the final target")
    assert all(list(c.name) == list(FRANKA_JOINTS) for c in sim.joint_commands["franka_1"])
    wait_for(lambda: any(e.event == EpisodeEvent.END and e.success for e in stack.episodes), what="EVENT_END")
    last = sim.joint_commands["franka_1"][-1].position
    assert max(abs(q - t) for q, t in zip(last, READY, strict=True)) < 0.05


def test_a_base_that_cannot_reach_its_goal_fails_as_a_timeout(ros):
    node, sim, stack = started(ros, {"carter_1": "mobile"}, {"move_timeout_s": 1.5})
    sim.stuck.add("carter_1")
    stack.send("carter_1", ("move_to", {"x": 2.0, "y": 0.0}), ("wait", {"seconds": 1.0}))
    wait_for(lambda: stack.outcomes, 20.0, "the outcome")
    assert [(o.action, o.success, o.failure) for o in stack.outcomes] == [("move_to", False, Failure.TIMEOUT)]
    wait_for(lambda: any(c.kind == "failure_trace" and "FAILED (timeout)" in c.text for c in stack.entries),
             what="the failure trace")
    assert not node.fleet.executors["carter_1"].has_goal  # the rest of the plan is abandoned
    wait_for(lambda: sim.cmd_vel["carter_1"][-1] == (0.0, 0.0), what="zero velocity after the timeout")


def test_malformed_plans_are_counted_and_nothing_moves(ros):
    node, sim, stack = started(ros)
    bad = [("drone_9", [("move_to", {"x": 1, "y": 1})]),            # unknown agent
           ("carter_1", [("fly", {})]),                              # unknown skill
           ("carter_1", [("move_joints", {"pose": "ready"})]),       # not a mobile robot's skill
           ("carter_1", [("move_to", {"x": 1})]),                    # missing parameter
           ("carter_1", [("move_to", {"x": "far", "y": 1})]),        # wrong type
           ("carter_1", [("move_to", {"x": 1e9, "y": 0})]),          # out of range
           ("carter_1", [("move_to", "{x: 1")]),                     # not JSON
           ("franka_1", [("move_joints", {"pose": "dance"})]),       # unknown pose
           ("franka_1", [("stop", "")] * 5),                         # too long
           ("franka_1", [("stop", ""), ("move_joints", {})])]        # one bad step: nothing of the plan
    for agent, steps in bad:
        stack.send(agent, *steps)
    wait_for(lambda: node.counts["malformed_plans"] == len(bad), what="every malformed plan counted")
    reasons = {k.removeprefix("plan."): v for k, v in node.rejections.counts.items()}
    assert reasons == {"unknown_agent": 1, "unknown_skill": 1, "skill_not_for_robot": 1, "missing_parameter": 2,
                       "bad_parameter_type": 1, "parameter_out_of_range": 1, "bad_parameters_json": 1,
                       "unknown_choice": 1, "long_plan": 1}
    wait_for(lambda: any(d.level == DiagnosticStatus.WARN and "malformed_plans" in d.message
                         for d in stack.diagnostics), what="a diagnostics warning")
    assert node.counts["plans_applied"] == 0 and not stack.outcomes
    # a contract topic late on a busy machine holds a robot (zero velocity, the measured joints): nothing moves
    assert all(cmd == (0.0, 0.0) for cmd in sim.cmd_vel["carter_1"])
    assert all(tuple(c.position) == pytest.approx(INITIAL_JOINTS) for c in sim.joint_commands["franka_1"])
    assert sim.joints["franka_1"] == pytest.approx(list(INITIAL_JOINTS))
    assert sim.pose["carter_1"] == [0.0, 0.0, 0.0]


def test_stale_odometry_holds_the_base_with_an_error_until_it_returns(ros):
    node, sim, stack = started(ros, {"carter_1": "mobile"})
    stack.send("carter_1", ("move_to", {"x": 20.0, "y": 0.0}))
    wait_for(lambda: sim.cmd_vel["carter_1"] and sim.cmd_vel["carter_1"][-1][0] > 0.5, what="the base drives")
    sim.frozen.add("/carter_1/odom")
    frozen_at = len(sim.cmd_vel["carter_1"])
    wait_for(lambda: node.fleet.holding["carter_1"], 10.0, "the hold")
    wait_for(lambda: any(d.level == DiagnosticStatus.ERROR and "/carter_1/odom" in d.message
                         for d in stack.diagnostics), what="diagnostics ERROR naming the stale topic")
    # odometry already on its way when it froze may lift the hold for a moment; then it holds for good
    wait_for(lambda: len(sim.cmd_vel["carter_1"]) > frozen_at + 10
             and all(c == (0.0, 0.0) for c in sim.cmd_vel["carter_1"][-10:]), what="zero commands while held")
    assert stack.plan_pub.get_subscription_count() > 0 and not stack.outcomes  # no crash, no outcome
    sim.frozen.clear()
    wait_for(lambda: not node.fleet.holding["carter_1"] and sim.cmd_vel["carter_1"][-1][0] > 0.5, what="it drives again")


def test_holds_and_outcomes_log_at_both_severities_from_one_node(ros):
    # rclpy refuses a call site that logs at two severities; a tick that raised would stop the control loop
    node = ros.add(bridge())
    spec = node.fleet.robots["carter_1"]
    for why in ("episode over", "/carter_1/odom stale"):
        node.fleet.holding["carter_1"] = False
        tick = Tick()
        node.fleet._hold(spec, why, tick)
        for robot, said in tick.held:
            node._log_hold(robot, said)
    call = Step("stop", {})
    for success in (True, False):
        node._publish_outcome(Outcome("carter_1", "p", 0, call, success, Failure.NONE if success else Failure.TIMEOUT,
                                      "detail"))
    assert node.counts["holds"] == 2 and node.counts["outcomes_failed"] == 1


def test_bad_parameters_fail_configure_naming_the_parameter(ros):
    for name, value in (("agent_kinds", ["mobile", "flying"]), ("named_poses", ["home: 0 0"]),
                        ("goal_tolerance_m", -1.0), ("task_goals", ["franka_1: dance"]),
                        ("action_schema_file", "/nonexistent/isaac_actions.yaml"), ("odom_topic", "odom topic"),
                        ("stale_after", 1.0)):
        node = IsaacBridgeNode(namespace=NS, parameter_overrides=[Parameter(name, value=value)])
        try:
            assert node.trigger_configure() == TransitionCallbackReturn.FAILURE, name
            assert f"parameter '{name}'" in node.last_error
            assert node.state_label == "unconfigured" and node.fleet is None
        finally:
            node.destroy_node()


def test_a_failure_while_creating_the_topics_fails_configure_saying_why_and_releases(ros, monkeypatch):
    """rclpy turns an exception in a transition into a failure without a word: the lifecycle base says why."""
    node = IsaacBridgeNode(namespace=NS)
    try:
        def refuse(*args, **kwargs):
            raise RuntimeError("topic refused")

        monkeypatch.setattr(node, "create_subscription", refuse)
        assert node.trigger_configure() != TransitionCallbackReturn.SUCCESS
        assert node.last_error == "on_configure raised RuntimeError: topic refused"
        assert node.state_label == "unconfigured" and node.fleet is None and node.config is None
        monkeypatch.undo()
        assert node.trigger_configure() == TransitionCallbackReturn.SUCCESS, node.last_error
    finally:
        node.destroy_node()


@pytest.mark.parametrize("line, parameter, file_named", [
    ('agents: ["carter_1", "franka_1\\n"]', "agents", False),  # an id is matched whole: no trailing newline
    ("goal_tolerance_m: '0.05'", "goal_tolerance_m", True),  # rcl would keep the shipped 0.15
    ("agents: '[carter_1]'", "agents", True),
])
def test_the_executable_exits_2_naming_a_bad_parameter_of_a_later_file(tmp_path, line, parameter, file_named):
    site = tmp_path / "site.yaml"
    site.write_text(f"/**/isaac_bridge:\n  ros__parameters:\n    tasks: ['carter_1: go']\n"
                    f"    task_goals: ['carter_1: 3.0 1.0']\n    autostart: true\n    {line}\n")
    proc = subprocess.run([str(installed_executable("sim_bridges", "isaac_bridge")), "--ros-args", "-r", f"__ns:={NS}",
                           "--params-file", str(PARAMS / "isaac_bridge.yaml"), "--params-file", str(site)],
                          env=dict(os.environ), capture_output=True, text=True, timeout=60)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 2 and f"parameter '{parameter}'" in output, output[-2000:]
    assert not file_named or str(site) in output, output[-2000:]


def test_stamps_follow_isaacs_clock(ros):
    node, sim, stack = started(ros, {"carter_1": "mobile"}, start_time_s=5000.0)
    wait_for(lambda: stack.states, what="agent states")
    for msg in (stack.episodes[0], stack.states[-1], *stack.entries[:1]):
        assert 5000.0 <= seconds_of(msg.header.stamp) <= sim.sim_time + 1.0
    assert 5000.0 <= node.fleet.episode_start_s < 5060.0
    stack.send("carter_1", ("move_to", {"x": 0.5, "y": 0.0}))
    wait_for(lambda: stack.outcomes, what="the outcome")
    assert 5000.0 <= seconds_of(stack.outcomes[0].header.stamp) <= sim.sim_time + 1.0


def test_the_executable_stops_the_base_on_sigint_and_refuses_bad_parameters(ros, tmp_path):
    env = {**os.environ, "ROS_DOMAIN_ID": str(ros.domain_id)}
    executable = str(installed_executable("sim_bridges", "isaac_bridge"))
    params = ["--ros-args", "--params-file", str(PARAMS / "isaac_bridge.yaml"),  # without the stack's monitor:
              "-p", "use_sim_time:=true", "-p", "cmd_vel_topic:=cmd_vel", "-r", f"__ns:={NS}"]  # cmd_vel itself
    bad = subprocess.run([executable, *params, "-p", "agent_kinds:=[mobile,flying]"], env=env, capture_output=True,
                         text=True, timeout=60)
    assert bad.returncode == 2 and "parameter 'agent_kinds'" in bad.stdout + bad.stderr
    sim = ros.add(standin())
    stack = ros.add(FakeStack())
    log = (tmp_path / "isaac_bridge.log").open("w")
    proc = subprocess.Popen([executable, *params], env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_for(stack.started, 30.0, "EVENT_START from the process")
        wait_for(lambda: stack.plan_pub.get_subscription_count() > 0, what="its plan subscription")
        stack.send("carter_1", ("move_to", {"x": 10.0, "y": 0.0}))
        wait_for(lambda: sim.cmd_vel["carter_1"] and sim.cmd_vel["carter_1"][-1][0] > 0.3, 20.0, "the base drives")
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0
        wait_for(lambda: sim.cmd_vel["carter_1"][-1] == (0.0, 0.0), 5.0, "the zero velocity sent on exit")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_deactivate_holds_cleanup_drops_the_robot_topics_and_configure_builds_them_again(ros):
    node, sim, stack = started(ros, {"carter_1": "mobile"})
    stack.send("carter_1", ("move_to", {"x": 20.0, "y": 0.0}))
    wait_for(lambda: sim.cmd_vel["carter_1"] and sim.cmd_vel["carter_1"][-1][0] > 0.5, what="the base drives")
    assert node.trigger_deactivate() == TransitionCallbackReturn.SUCCESS
    wait_for(lambda: sim.cmd_vel["carter_1"][-1] == (0.0, 0.0), what="the hold on deactivate")
    assert node.trigger_cleanup() == TransitionCallbackReturn.SUCCESS

    def subscribed() -> set[str]:
        return {name for name, _ in node.get_subscriber_names_and_types_by_node("isaac_bridge", NS)}

    wait_for(lambda: "/carter_1/odom" not in subscribed(), what="the robot topics dropped")
    assert node.trigger_configure() == TransitionCallbackReturn.SUCCESS
    assert node.trigger_activate() == TransitionCallbackReturn.SUCCESS
    wait_for(lambda: [e.episode for e in stack.episodes if e.event == EpisodeEvent.START] == [0, 1],
             what="a new episode once the topics are live again")
