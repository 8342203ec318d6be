"""trigger_monitor node over real DDS, alone and chained to the controller and a planner double."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from ament_index_python.packages import get_package_share_directory
from brace_msgs.msg import AgentActivity as AgentActivityMsg
from brace_msgs.msg import AgentState, Episode, ExecutionOutcome, ReplanDecision, TriggerEvent, VerifierVerdict, WorldInfo
from brace_msgs.msg import Entity as EntityMsg
from brace_msgs.msg import WorldState as WorldStateMsg
from geometry_msgs.msg import Point
from rclpy.node import Node
from rclpy.parameter import Parameter

from brace_common import qos
from brace_common.clock import stamp_of
from brace_common.config import ConfigError
from brace_common.names import DEFAULT_NAMESPACE as NS
from brace_common.testing import PlannerDouble, wait_for
from brace_common.vocabulary import Activity
from brace_common.world_state import AgentActivity, Entity, Pose, WorldState, world_state_msg
from brace_controller.controller_node import BraceControllerNode
from brace_controller.trigger_monitor_node import TriggerMonitorNode


class World(Node):
    """Publishes agent states, outcomes and verdicts; collects triggers and decisions."""

    def __init__(self) -> None:
        super().__init__("world")
        self.states = self.create_publisher(AgentState, "/brace/agent_states", qos.STATE)
        self.outcomes = self.create_publisher(ExecutionOutcome, "/brace/outcomes", qos.EVENTS)
        self.verdicts = self.create_publisher(VerifierVerdict, "/brace/verdicts", qos.EVENTS)
        self.triggers: list[TriggerEvent] = []
        self.decisions: list[ReplanDecision] = []
        self.create_subscription(TriggerEvent, "/brace/triggers", self.triggers.append, qos.EVENTS)
        self.create_subscription(ReplanDecision, "/brace/decisions", self.decisions.append, qos.EVENTS)

    def state(self, agent: str, step: int, x: float, y: float = 0.0, goal: bool = True) -> None:
        self.states.publish(AgentState(agent_id=agent, step=step, position=Point(x=x, y=y), tracking_error=math.nan,
                                       has_goal=goal))

    def of_kind(self, kind: int) -> list[TriggerEvent]:
        return [t for t in self.triggers if t.kind == kind]


def monitor(**params) -> TriggerMonitorNode:
    params.setdefault("agents", ["a", "b"])
    params.setdefault("step_source", "agent_state")
    params.setdefault("periodic_interval_steps", 0)
    params.setdefault("wait_for_episode", False)  # these tests' worlds announce no episodes
    return TriggerMonitorNode(namespace=NS, parameter_overrides=[Parameter(k, value=v) for k, v in params.items()])


def connect(ros, node: TriggerMonitorNode) -> World:
    world = ros.add(World())
    ros.add(node)
    wait_for(lambda: world.states.get_subscription_count() > 0 and world.outcomes.get_subscription_count() > 0
             and node.trigger_pub.get_subscription_count() > 0, what="discovery")
    return world


def publish_step(world: World, step: int, positions: dict[str, float]) -> None:
    for agent, x in positions.items():
        world.state(agent, step, x)


def test_hazard_and_deadlock_from_agent_states(ros):
    node = monitor(hazard_distance_m=1.0, hazard_repeat_steps=100, deadlock_window=2, deadlock_threshold=2)
    world = connect(ros, node)
    for step in range(1, 5):
        publish_step(world, step, {"a": 0.0, "b": 0.5})  # close together and not moving
        wait_for(lambda s=step: node.monitor.step == s and len(node.monitor.states) == 2, what=f"step {step}")
    publish_step(world, 5, {"a": 0.0, "b": 0.5})
    wait_for(lambda: len(world.of_kind(TriggerEvent.KIND_DEADLOCK)) >= 2, what="deadlock triggers")
    hazards = world.of_kind(TriggerEvent.KIND_HAZARD)
    assert sorted(t.agent_id for t in hazards) == ["a", "b"] and hazards[0].step == 1
    assert "0.50 m" in hazards[0].detail
    deadlocks = world.of_kind(TriggerEvent.KIND_DEADLOCK)
    assert {t.step for t in deadlocks} == {3}  # z needs a previous position: steps 2 and 3 stall -> Z_3 = 2
    assert len({t.trigger_id for t in world.triggers}) == len(world.triggers)


def test_failures_and_verdicts_raise_triggers(ros):
    node = monitor(failure_threshold=2)
    world = connect(ros, node)
    wait_for(lambda: world.verdicts.get_subscription_count() > 0, what="verdict subscription")
    for _ in range(3):
        world.outcomes.publish(ExecutionOutcome(agent_id="a", action="pick", success=False, detail="slipped"))
    world.verdicts.publish(VerifierVerdict(agent_id="b", violation=True, confidence=0.9, detail="cup moved"))
    world.verdicts.publish(VerifierVerdict(agent_id="b", violation=True, confidence=0.1))
    wait_for(lambda: len(world.triggers) == 3, what="two failure and one preempt trigger")
    failures = world.of_kind(TriggerEvent.KIND_FAILURE)
    assert [t.consecutive_failures for t in failures] == [2, 3] and failures[0].detail == "slipped"
    assert world.of_kind(TriggerEvent.KIND_PREEMPT)[0].agent_id == "b"
    world.outcomes.publish(ExecutionOutcome(agent_id="b", action="cmd_vel", success=False, detail="stopped",
                                            failure=ExecutionOutcome.FAILURE_SAFETY_STOP))
    wait_for(lambda: world.of_kind(TriggerEvent.KIND_HAZARD), what="the collision monitor's stop as a hazard")
    assert world.of_kind(TriggerEvent.KIND_HAZARD)[0].agent_id == "b" and len(world.triggers) == 4


def test_malformed_inputs_are_counted(ros):
    node = monitor()
    world = connect(ros, node)
    world.states.publish(AgentState(agent_id="a", position=Point(x=math.nan)))
    world.states.publish(AgentState(agent_id="", position=Point()))
    world.outcomes.publish(ExecutionOutcome(agent_id="", success=False))
    wait_for(lambda: node.counts["malformed_outcomes"] == 1 and node.counts["malformed_states"] >= 1,
             what="malformed inputs counted")
    assert node.monitor.states == {}


def test_bad_monitor_parameter_is_rejected(ros):
    with pytest.raises(ConfigError) as err:
        monitor(step_source="wall_clock")
    assert err.value.parameter == "step_source"


def test_chain_outcomes_to_monitor_to_controller_to_planner(ros):
    """Failed outcomes -> failure trigger -> admitted partial replan -> Replan goal at the planner."""
    node = monitor(failure_threshold=2)
    controller = BraceControllerNode(namespace=NS, parameter_overrides=[Parameter("adaptive_budget", value=False)])
    planner = PlannerDouble()
    world = connect(ros, node)
    ros.add(controller)
    ros.add(planner)
    wait_for(lambda: controller.replan_client.server_is_ready() and node.trigger_pub.get_subscription_count() >= 2
             and controller.decisions_pub.get_subscription_count() > 0, what="chain discovery")
    for _ in range(2):
        world.outcomes.publish(ExecutionOutcome(agent_id="a", action="pick", success=False))
    wait_for(lambda: len(planner.goals) == 1 and len(world.decisions) == 1, what="goal at the planner")
    decision = world.decisions[0]
    assert decision.admitted and decision.trigger.kind == TriggerEvent.KIND_FAILURE
    assert decision.mode == ReplanDecision.MODE_PARTIAL_REPLAN and decision.consecutive_failures == 2
    assert planner.goals[0].token_budget == 512 and planner.goals[0].slo_ms == 1500.0


def test_an_empty_agent_list_learns_the_agents_from_the_world(ros, tmp_path):
    """The shipped file's `agents: []`: every agent that reports a state joins, with its initial plan."""
    params = tmp_path / "empty.yaml"
    params.write_text("/**/trigger_monitor:\n  ros__parameters:\n    agents: []\n    step_source: agent_state\n"
                      "    hazard_distance_m: 0.0\n    deadlock_window: 0\n")
    node = TriggerMonitorNode(namespace=NS, cli_args=["--ros-args", "--params-file", str(params)])
    assert node.config.agents == []
    world = connect(ros, node)
    episode = world.create_publisher(Episode, "/brace/episode", qos.EVENTS)
    wait_for(lambda: episode.get_subscription_count() > 0, what="discovery of the episode topic")
    episode.publish(Episode(event=Episode.EVENT_START, num_agents=2))
    wait_for(lambda: node.monitor.initial_plans, what="the episode start")
    for step in (1, 2):
        publish_step(world, step, {"agent_0": 0.0, "agent_1": 3.0})
    wait_for(lambda: {t.agent_id for t in world.triggers} >= {"agent_0", "agent_1"}, what="both initial plans")


def test_nothing_is_triggered_before_a_world_announces_an_episode(ros):
    """Started all at once, the robot reports states before the world begins its first episode (it waits for its
    peers): a call then would plan for a world that has not begun. Those triggers are counted and dropped until
    the world's latched world_info says an episode runs; then the episode's initial plans go out."""
    node = monitor(wait_for_episode=True, periodic_interval_steps=1, hazard_distance_m=0.0, deadlock_window=0)
    world = connect(ros, node)
    for step in (1, 2, 3):
        publish_step(world, step, {"a": 0.0, "b": 3.0})
    wait_for(lambda: node.counts["triggers_before_episode"] >= 2 and node.monitor.step == 3
             and len(node.monitor.states) == 2, what="the periodic triggers before the episode, and step 3's states")
    assert world.triggers == [] and not node.in_episode
    info = world.create_publisher(WorldInfo, "/brace/world_info", qos.WORLD_INFO)
    info.publish(WorldInfo(world="warehouse", episode=0, agents=["a", "b"]))  # latched: taken once discovered
    wait_for(lambda: node.in_episode, what="the world's episode")
    steps, sent = iter(range(1, 10**6)), [0.0]

    def both_triggered() -> bool:  # states are best effort: a step every 0.1 s until both agents' triggers come
        if time.monotonic() - sent[0] > 0.1:
            sent[0] = time.monotonic()
            publish_step(world, next(steps), {"a": 0.0, "b": 3.0})
        return {t.agent_id for t in world.triggers} >= {"a", "b"}
    wait_for(both_triggered, what="both agents' initial plans")


def test_an_episode_begins_once_whichever_of_its_start_and_world_info_comes_first(ros):
    node = ros.add(monitor(wait_for_episode=True))
    begun: list[bool] = []
    node.monitor.reset = lambda episode_start=True: begun.append(episode_start)
    node.on_world_info(WorldInfo(world="warehouse", episode=0, agents=["a", "b"]))
    node.on_episode(Episode(event=Episode.EVENT_START, episode=0, num_agents=2))  # no news: its world_info began it
    assert begun == [True] and node.in_episode
    node.on_episode(Episode(event=Episode.EVENT_START, episode=1, num_agents=2))
    node.on_world_info(WorldInfo(world="warehouse", episode=1, agents=["a", "b"]))  # no news: its START began it
    node.on_episode(Episode(event=Episode.EVENT_END, episode=1, num_agents=2))
    assert begun == [True, True]


def test_a_state_of_the_previous_episode_after_the_start_is_dropped(ros):
    """Topics are not ordered with each other: the last state of episode 0 (step 60) can reach the monitor after
    episode 1's start. It must not set the step ahead of the new episode (nothing would trigger until step 60)."""
    node = monitor(periodic_interval_steps=2, hazard_distance_m=0.0, deadlock_window=0, initial_plan=False)
    world = connect(ros, node)
    episode = world.create_publisher(Episode, "/brace/episode", qos.EVENTS)
    wait_for(lambda: episode.get_subscription_count() > 0, what="discovery of the episode topic")
    boundary = stamp_of(100.0)  # a sim-time world stamps the last state, the end and the next start alike
    start = Episode(event=Episode.EVENT_START, episode=1, num_agents=2)
    start.header.stamp = boundary
    episode.publish(start)
    wait_for(lambda: node.episode_start_s > 0, what="the episode start")
    for stamp, step in ((stamp_of(99.0), 59), (boundary, 60)):  # late states of episode 0
        for agent in ("a", "b"):
            msg = AgentState(agent_id=agent, step=step, position=Point(), tracking_error=math.nan, has_goal=True)
            msg.header.stamp = stamp
            world.states.publish(msg)
    wait_for(lambda: node.counts["stale_states"] >= 1, what="the late states dropped")  # best effort: most arrive
    for step in range(0, 6):  # episode 1: steps from 0, each stamped a step later
        for agent in ("a", "b"):
            msg = AgentState(agent_id=agent, step=step, position=Point(), tracking_error=math.nan, has_goal=True)
            msg.header.stamp = stamp_of(100.0 + step)
            world.states.publish(msg)
    wait_for(lambda: len(world.of_kind(TriggerEvent.KIND_PERIODIC)) >= 2, what="the new episode's periodic triggers")
    assert node.monitor.step <= 5 and 1 <= node.counts["stale_states"] <= 4


@pytest.mark.parametrize("overlay", [["--params-file", "BAD"], ["-p", "agents:=['..']"]])
def test_a_bad_agent_list_after_the_shipped_file_stops_the_process(tmp_path, overlay):
    """A value given after the shipped file is checked like one in it."""
    bad = tmp_path / "bad.yaml"
    bad.write_text("/**/trigger_monitor:\n  ros__parameters:\n    agents: ['..']\n")
    shipped = Path(get_package_share_directory("brace_bringup")) / "params" / "trigger_monitor.yaml"
    args = ["--ros-args", "-r", f"__ns:={NS}", "--params-file", str(shipped),
            *[str(bad) if a == "BAD" else a for a in overlay]]
    proc = subprocess.run([sys.executable, "-m", "brace_controller.trigger_monitor_node", *args],
                          capture_output=True, text=True, timeout=90, env=os.environ.copy())
    assert proc.returncode == 2 and "'agents'" in proc.stdout + proc.stderr


@pytest.mark.parametrize("line, parameter", [('agents: ["arm_0\\n"]', "agents"), ("loop_cell_m: abc", "loop_cell_m"),
                                             ("periodic_interval_steps: 2^70", "periodic_interval_steps")])
def test_a_newline_id_or_a_value_of_another_type_after_the_shipped_file_stops_the_process(tmp_path, line, parameter):
    """An id is matched whole (no trailing newline); a value of another type is refused naming its file (rcl would
    keep the shipped file's value)."""
    site = tmp_path / "site.yaml"
    site.write_text(f"/**/trigger_monitor:\n  ros__parameters:\n    {line}\n")
    shipped = Path(get_package_share_directory("brace_bringup")) / "params" / "trigger_monitor.yaml"
    proc = subprocess.run([sys.executable, "-m", "brace_controller.trigger_monitor_node", "--ros-args", "-r",
                           f"__ns:={NS}", "--params-file", str(shipped), "--params-file", str(site)],
                          capture_output=True, text=True, timeout=90, env=os.environ.copy())
    output = proc.stdout + proc.stderr
    assert proc.returncode == 2 and f"'{parameter}'" in output, output[-2000:]
    assert parameter == "agents" or str(site) in output, output[-2000:]


def test_a_parameter_file_rcl_cannot_parse_stops_the_process_with_one_line_naming_it(tmp_path):
    site = tmp_path / "site.yaml"
    site.write_text("/**/trigger_monitor:\n  ros__parameters:\n    agents: [agent_0, 3]\n")  # mixed types
    proc = subprocess.run([sys.executable, "-m", "brace_controller.trigger_monitor_node", "--ros-args",
                           "--params-file", str(site)], capture_output=True, text=True, timeout=90,
                          env=os.environ.copy())
    output = proc.stdout + proc.stderr
    assert proc.returncode == 2 and f"Couldn't parse params file: '--params-file {site}'" in output, output[-2000:]
    assert "Traceback" not in output, output[-2000:]


@pytest.mark.parametrize("agent_id", ["agent_0/../../x", "..", "a.b"])
def test_a_path_like_agent_id_is_refused_and_counted(ros, agent_id):
    node = monitor()
    world = connect(ros, node)
    world.outcomes.publish(ExecutionOutcome(agent_id=agent_id, action="pick", success=False))
    wait_for(lambda: node.rejections.counts.get("outcome.bad_agent_id") == 1, what="the refusal counted")
    assert node.monitor.failure.consecutive == {}


FLOOD = """
import sys, time, rclpy, rclpy.duration
from brace_msgs.msg import ExecutionOutcome
from rclpy._rclpy_pybind11 import RCLError
from brace_common import qos
from brace_common.clock import stamp_of
rclpy.init()
node = rclpy.create_node("flood", namespace="/brace")
pub = node.create_publisher(ExecutionOutcome, "outcomes", qos.EVENTS)  # keep-last 200, as every node publishes
end = time.monotonic() + 30
while pub.get_subscription_count() == 0 and time.monotonic() < end:
    rclpy.spin_once(node, timeout_sec=0.05)
sample = ExecutionOutcome(agent_id="", detail="d" * 2000)  # malformed: each one counted when taken


def publish():
    while True:
        try:
            return pub.publish(sample)
        except RCLError:  # the rmw's write timed out on a machine too busy to ack: the sample was not sent, again
            rclpy.spin_once(node, timeout_sec=0.01)


# The first sample must reach the reader too: its sequence number starts the count of gaps, and samples the
# history overwrote before the reader had taken any would leave no gap to see.
publish()
pub.wait_for_all_acked(rclpy.duration.Duration(seconds=100))
for i in range(int(sys.argv[1]) - 1):
    publish()
# The newest samples must reach the reader: a loss after the last sample taken leaves no gap to see.
pub.wait_for_all_acked(rclpy.duration.Duration(seconds=100))
"""


def test_a_flood_from_a_keep_last_writer_is_taken_or_counted_sample_by_sample(ros):
    """Keep-all readers lost most of a keep-last writer's flood without a trace; now each sample is taken (here
    rejected) or counted as a gap in its publisher's sequence numbers."""
    node = monitor()
    connect(ros, node)
    sent = 20_000
    env = {**os.environ, "ROS_DOMAIN_ID": str(ros.domain_id)}
    writer = subprocess.Popen([sys.executable, "-c", FLOOD, str(sent)], env=env)

    def lost() -> int:
        return node.inputs.counts["lost.outcome.sequence_gap"]

    def taken_or_lost() -> int:
        return node.counts["malformed_outcomes"] + lost()

    try:
        assert writer.wait(timeout=150) == 0  # it ends once the reader acknowledged its newest samples
    finally:
        writer.kill()
    wait_for(lambda: taken_or_lost() >= sent, timeout=30.0,
             what=f"every sample taken or counted (taken {node.counts['malformed_outcomes']}, lost {lost()})")
    assert taken_or_lost() == sent


def test_a_state_from_step_2_to_the_64_is_refused_and_triggers_go_on(ros):
    node = monitor(hazard_distance_m=1.0, hazard_repeat_steps=1)
    world = connect(ros, node)
    publish_step(world, 1, {"a": 0.0, "b": 0.5})
    wait_for(lambda: node.monitor.step == 1, what="step 1")
    world.state("a", 2**64 - 1, 0.0)  # before: the monitor jumped to this step and raised nothing again
    wait_for(lambda: node.rejections.counts["agent_state.range_step"] == 1, what="rejected")
    for step in (2, 3):
        publish_step(world, step, {"a": 0.0, "b": 0.5})
    wait_for(lambda: any(t.step == 2 for t in world.of_kind(TriggerEvent.KIND_HAZARD)), what="hazards go on")
    assert node.monitor.step == 3


def test_a_revisited_world_state_raises_a_loop_trigger_and_a_malformed_one_is_counted(ros):
    node = monitor(loop_detection=True, loop_repeat_steps=1)
    world = connect(ros, node)
    pub = world.create_publisher(WorldStateMsg, "/brace/world_state", qos.WORLD_STATE)
    wait_for(lambda: pub.get_subscription_count() > 0, what="world_state subscription")
    pub.publish(WorldStateMsg(world="w", agents=[AgentActivityMsg(agent_id="ghost")]))  # no entity for it
    for step, x in enumerate([0, 1, 0]):
        state = WorldState("w", 0, step, (Entity("a", "robot", pose=Pose.planar(x, 0)),),
                           agents=(AgentActivity("a", Activity.EXECUTING, "move_to", '{"target": "dock_0"}'),))
        pub.publish(world_state_msg(state, stamp_of(float(step)), "map"))
    wait_for(lambda: world.of_kind(TriggerEvent.KIND_LOOP), what="loop trigger")
    loop = world.of_kind(TriggerEvent.KIND_LOOP)[0]
    assert loop.agent_id == "a" and "state of step 0 again after 2 actions" in loop.detail
    assert loop.consecutive_failures == 1
    wait_for(lambda: node.counts["malformed_world_states"] == 1, what="malformed state counted")


def test_oversized_and_duplicate_id_world_states_are_counted_and_failures_still_trigger(ros):
    node = monitor(loop_detection=True, failure_threshold=1)
    world = connect(ros, node)
    pub = world.create_publisher(WorldStateMsg, "/brace/world_state", qos.WORLD_STATE)
    wait_for(lambda: pub.get_subscription_count() > 0, what="world_state subscription")
    huge = WorldStateMsg(world="w", entities=[EntityMsg(id=f"e{i}", type="object") for i in range(40_000)])
    repeated = WorldStateMsg(world="w", entities=[EntityMsg(id=f"e{i}", type="object") for i in range(4000)])
    repeated.entities.append(EntityMsg(id="e7", type="object"))
    pub.publish(huge)
    wait_for(lambda: node.rejections.counts["world_state.many_entities"] == 1, what="the 40,000-entity state refused")
    pub.publish(repeated)
    wait_for(lambda: node.counts["malformed_world_states"] == 2, what="the repeated id counted")
    world.outcomes.publish(ExecutionOutcome(agent_id="a", step=1, action="pick", success=False,
                                            failure=ExecutionOutcome.FAILURE_GRASP))
    wait_for(lambda: world.of_kind(TriggerEvent.KIND_FAILURE), what="a failure trigger after them")

