"""operator_task: episodes a real robot's operator starts and judges (core, and the node over real DDS)."""

from __future__ import annotations

import subprocess

import pytest
from brace_msgs.msg import ContextEntry, Episode, ExecutionOutcome, Plan, PlanStep, WorldState
from rclpy.node import Node
from rclpy.parameter import Parameter
from std_msgs.msg import String
from std_srvs.srv import Trigger

from brace_common import names, qos
from brace_common.config import ConfigError
from brace_common.testing import call_service, installed_executable, wait_for
from brace_common.vocabulary import Activity, Block, EpisodeEvent, Failure, Observability
from brace_common.world_state import AgentActivity, world_state_from_msg
from robot_bridge.pickfruit.operator_episodes import EpisodeError, OperatorEpisodes, world_state
from robot_bridge.pickfruit.operator_task_node import OperatorTaskConfig, OperatorTaskNode

NS = "/arm"
TASK = "Put the apple in the bowl."
SKILLS = "Skills: pick(object); place(object, target)."


def test_episodes_start_end_and_time_out():
    eps = OperatorEpisodes(max_episode_s=10.0)
    assert not eps.running
    with pytest.raises(EpisodeError):
        eps.finish(True, 0.0)                       # nothing to judge
    for bad in ([], [""], ["  "], ["x" * 2001]):
        with pytest.raises(EpisodeError):
            eps.start(bad, 0.0)
    assert eps.start([" " + TASK], 1.0) == 0 and eps.tasks == (TASK,)
    with pytest.raises(EpisodeError):
        eps.start([TASK], 2.0)                      # one at a time
    record = eps.finish(True, 4.5)
    assert (record.episode, record.success, record.duration_s, record.reason) == (0, True, 3.5, "operator")
    assert eps.start([TASK], 5.0) == 1
    assert eps.expire(14.9) is None
    record = eps.expire(15.0)
    assert record is not None and not record.success and record.reason == "timeout" and not eps.running
    assert [r.episode for r in eps.history] == [0, 1]
    eps.failed_step(Failure.GRASP)                  # none running: not counted
    eps.start([TASK], 20.0)
    for failure in (Failure.GRASP, Failure.DROP_SLIP, Failure.GRASP, Failure.NONE):
        eps.failed_step(failure)
    metrics = eps.finish(False, 21.0).verdict(5).metrics
    assert metrics == {"duration_s": 1.0, "failure_grasp": 2.0, "failure_drop_slip": 1.0, "failure_timeout": 0.0,
                       "failure_contact_loss": 0.0, "failure_executor": 1.0, "failure_collision": 0.0,
                       "failure_preempted": 0.0, "failure_safety_stop": 0.0}
    eps.start([TASK], 30.0)
    metrics = eps.finish(True, 31.0).verdict(1).metrics  # counts restart with each episode; zero is measured too
    assert metrics["duration_s"] == 1.0 and sum(v for k, v in metrics.items() if k.startswith("failure_")) == 0
    assert OperatorEpisodes().start([TASK], 0.0) == 0 and OperatorEpisodes().expire(1e9) is None


def test_the_world_state_holds_what_the_operator_knows_and_no_more():
    episodes = OperatorEpisodes()
    idle = AgentActivity("arm_0")
    before = world_state(episodes, "real", 0, idle, ["apple", "bowl", "apple"])
    assert [e.id for e in before.entities] == ["arm_0", "apple", "bowl"] and before.observability == Observability.PARTIAL
    assert all(e.pose is None and e.state == "unknown" for e in before.entities)
    episodes.start(["Put the apple in the bowl."], now=0.0)
    running = world_state(episodes, "real", 2, idle, ["apple"])
    assert running.entity("task_0").state == "open" and running.entity("task_0").attributes["text"].startswith("Put")
    assert running.related("assigned") and running.step == 2
    episodes.finish(False, now=1.0)
    assert world_state(episodes, "real", 2, idle, []).entity("task_0").state == "failed"


def test_start_on_ready_needs_a_task():
    with pytest.raises(ConfigError) as err:
        OperatorTaskConfig(start_on_ready=True, tasks=["", " "]).validate()
    assert err.value.parameter == "tasks"


@pytest.mark.parametrize("agent_id", ["", "arm_0/../x", "arm.0", "0arm"])
def test_the_agent_id_is_a_name_token(agent_id):
    with pytest.raises(ConfigError) as err:
        OperatorTaskConfig(agent_id=agent_id).validate()
    assert err.value.parameter == "agent_id"


class Operator(Node):
    """The operator's console and the planner's ears: services, the task topic, episodes and context."""

    def __init__(self) -> None:
        super().__init__("operator", namespace=NS)
        self.episodes: list[Episode] = []
        self.entries: list[ContextEntry] = []
        self.create_subscription(Episode, names.EPISODE, self.episodes.append, qos.INPUTS)
        self.create_subscription(ContextEntry, names.CONTEXT, self.entries.append, qos.INPUTS)
        self.world_states: list[WorldState] = []
        self.create_subscription(WorldState, names.WORLD_STATE, self.world_states.append, qos.WORLD_STATE)
        self.outcome_pub = self.create_publisher(ExecutionOutcome, names.OUTCOMES, qos.EVENTS)
        self.task_pub = self.create_publisher(String, "task", qos.EVENTS)
        self.plan_pub = self.create_publisher(Plan, names.PLAN, qos.PLANS)
        self.clients_ = {name: self.create_client(Trigger, f"{NS}/operator_task/{name}")
                         for name in ("start", "succeed", "fail")}

    def call(self, service: str) -> Trigger.Response:
        return call_service(self.clients_[service], Trigger.Request(), f"~/{service}", answer_s=15.0)


def node(**params) -> OperatorTaskNode:
    params = {"tasks": [TASK], "constraints": [SKILLS], "replan_action": "", "wait_settle_s": 0.0, **params}
    return OperatorTaskNode(namespace=NS, parameter_overrides=[Parameter(k, value=v) for k, v in params.items()])


def test_the_operator_starts_and_judges_episodes(ros):
    op = ros.add(Operator())
    task = ros.add(node())
    wait_for(lambda: op.task_pub.get_subscription_count() > 0 and task.out.episode.get_subscription_count() > 0,
             what="discovery")
    reply = op.call("succeed")
    assert not reply.success and "no episode" in reply.message
    assert op.call("start").success
    wait_for(lambda: len(op.episodes) == 1 and len(op.entries) == 2, what="the start and its context")
    assert op.episodes[0].event == EpisodeEvent.START and op.episodes[0].world == "real"
    assert [(e.block, e.text) for e in op.entries] == [(Block.TASK, TASK), (Block.CONSTRAINTS, SKILLS)]
    assert not op.call("start").success                            # one episode at a time
    wait_for(lambda: op.world_states and op.world_states[-1].entities[-1].state == "open", what="the open task")
    op.plan_pub.publish(Plan(plan_id="p1", agent_id="arm_0", steps=[PlanStep(action="pick", parameters_json="{}")]))
    op.plan_pub.publish(Plan(plan_id="p2", agent_id="arm_9"))       # another agent's: not counted
    wait_for(lambda: task.counts["plans"] == 1, what="the plan counted")
    wait_for(lambda: op.world_states[-1].agents[0].action == "pick", what="the plan in the world state")
    op.outcome_pub.publish(ExecutionOutcome(agent_id="arm_0", action="pick", success=False,
                                            failure=ExecutionOutcome.FAILURE_GRASP))
    op.outcome_pub.publish(ExecutionOutcome(agent_id="arm_0", action="pick", success=False, failure=99))
    op.outcome_pub.publish(ExecutionOutcome(agent_id="arm_0", action="pick", success=False))
    wait_for(lambda: op.world_states[-1].agents[0].activity == Activity.FAILED and task.counts["unknown_failures"]
             and sum(task.episodes.failures.values()) == 3, what="the three failed steps")
    state = world_state_from_msg(op.world_states[-1])
    assert state.world == "real" and state.observability == Observability.PARTIAL and state.step == 1
    assert state.entity("arm_0").pose is None and state.entity("task_0").attributes["text"] == TASK
    assert op.call("fail").success
    wait_for(lambda: len(op.episodes) == 2, what="the end")
    wait_for(lambda: op.world_states[-1].entities[-1].state == "failed", what="the verdict in the world state")
    end = op.episodes[1]
    assert end.event == EpisodeEvent.END and not end.success and end.plans == 1 and end.tasks == 1
    metrics = {m.name: m.value for m in end.metrics}  # Table 32's failure columns: the executor's categories
    assert (metrics["failure_grasp"], metrics["failure_executor"]) == (1.0, 2.0) and "duration_s" in metrics
    # a task sent on the topic starts the next episode with its lines
    op.task_pub.publish(String(data="Put the banana in the bowl.\n\nThen the orange."))
    wait_for(lambda: len(op.episodes) == 3 and len(op.entries) == 5, what="the topic's episode and its context")
    assert op.episodes[2].episode == 1
    assert [e.text for e in op.entries[-3:]] == ["Put the banana in the bowl.", "Then the orange.", SKILLS]
    op.task_pub.publish(String(data="another task"))               # refused while one runs: counted, no crash
    wait_for(lambda: task.counts["requests_refused"] == 3, what="refusals counted")
    assert op.call("succeed").success
    wait_for(lambda: len(op.episodes) == 4 and op.episodes[3].success, what="the success")


def test_start_on_ready_and_the_duration_limit(ros):
    op = ros.add(Operator())
    task = ros.add(node(start_on_ready=True, max_episode_s=1.0, period_s=0.05))
    wait_for(lambda: len(op.episodes) >= 2, 20.0, what="an episode that started by itself and timed out")
    assert [e.event for e in op.episodes[:2]] == [EpisodeEvent.START, EpisodeEvent.END]
    assert not op.episodes[1].success and task.counts["episodes_timed_out"] == 1


def test_invalid_parameters_stop_the_executable_naming_them():
    exe = str(installed_executable("robot_bridge", "operator_task"))
    out = subprocess.run([exe, "--ros-args", "-p", "start_on_ready:=true"], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 2 and "tasks" in out.stdout + out.stderr
