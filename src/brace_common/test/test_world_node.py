"""WorldNode: the base of every world node, on a plain Node and on a ReleasingLifecycleNode, over real DDS."""

from __future__ import annotations

import json
from dataclasses import dataclass

from brace_msgs.msg import CollisionMonitorState, Episode, Plan, PlanStep, WorldInfo
from brace_msgs.msg import WorldState as WorldStateMsg
from rclpy.lifecycle import TransitionCallbackReturn
from rclpy.node import Node

from brace_common import names, qos
from brace_common.counters import Counters
from brace_common.episode import EpisodeResult
from brace_common.lifecycle import ReleasingLifecycleNode
from brace_common.testing import wait_for
from brace_common.validation import InvalidInput
from brace_common.vocabulary import EpisodeEvent, ZoneAction
from brace_common.world_node import WorldNode
from brace_common.world_state import Entity, WorldState

TOPICS = ("episode", "diagnostics", "world_info")


@dataclass
class Config:
    variant: str = "v"


class World(WorldNode, Node):
    """A world of one agent 'a0' whose plans must be non-empty."""

    world_name = "tiny"

    def __init__(self) -> None:
        super().__init__("tiny_world")
        self.config = Config()
        self.counts = Counters(("malformed_plans", "stale_plans"))
        self.init_world(TOPICS, episodes=2, seed=5)
        self.steps: list = []
        self.subscribe_plans(self.on_plan)

    def num_agents(self) -> int:
        return 1

    def world_agents(self) -> list[str]:
        return ["a0"]

    def world_schema(self) -> dict:
        # not in alphabetical order: the order is the prompt's (a fine-tuned planner learnt it)
        return {"max_steps": 2 + self.book.episode, "actions": {"go": {}, "drop": {}}}

    def on_plan(self, msg: Plan) -> None:
        steps = self.take_plan(msg, self.book.running, lambda agent: agent == "a0", lambda: True, self.parse)
        if steps is not None:
            self.steps.append(steps)

    @staticmethod
    def parse(agent: str, raw: list[tuple[str, str]]) -> list:
        if not raw:
            raise InvalidInput("empty_plan", "a plan needs a step")
        return [action for action, _ in raw]


class ManagedWorld(WorldNode, ReleasingLifecycleNode):
    """The same base on a lifecycle node: the stack's topics exist between configure and cleanup."""

    world_name = "managed"

    def __init__(self) -> None:
        super().__init__("managed_world")
        self.init_world(("diagnostics",))

    def on_configure(self, state) -> TransitionCallbackReturn:
        self.out.open(("episode", "context"), keep=self.configured)
        return TransitionCallbackReturn.SUCCESS

    def _release(self) -> None:
        self.out.forget(("episode", "context"))


def result(episode: int) -> EpisodeResult:
    return EpisodeResult(success=True, steps=3, delivered=1, tasks=1, episode=episode, seed=5 + episode)


def test_a_world_announces_its_episodes_and_takes_only_valid_plans_of_a_running_one(ros):
    world = ros.add(World())
    listener = ros.add(Node("listener"))
    episodes: list[Episode] = []
    listener.create_subscription(Episode, names.EPISODE, episodes.append, qos.EVENTS)
    plans = listener.create_publisher(Plan, names.PLAN, qos.PLANS)
    wait_for(lambda: world.out.episode.get_subscription_count() > 0 and plans.get_subscription_count() > 0,
             what="the world and the listener matched")
    assert world.out.context is None and world.out.states is None  # only the topics the world asked for

    plans.publish(Plan(plan_id="early", agent_id="a0", steps=[PlanStep(action="go")]))
    wait_for(lambda: world.counts["stale_plans"] == 1, what="a plan before the episode counted stale")

    assert world.announce_start() == 0
    wait_for(lambda: len(episodes) == 1, what="START")
    assert (episodes[0].event, episodes[0].episode, episodes[0].seed, episodes[0].world, episodes[0].variant) == (
        EpisodeEvent.START, 0, 5, "tiny", "v")
    plans.publish(Plan(plan_id="p1", agent_id="a0", steps=[PlanStep(action="go")]))
    wait_for(lambda: world.steps == [["go"]], what="a valid plan taken")
    plans.publish(Plan(plan_id="p2", agent_id="nobody", steps=[PlanStep(action="go")]))
    wait_for(lambda: world.counts["malformed_plans"] == 1, what="a plan for an unknown agent rejected")
    plans.publish(Plan(plan_id="p3", agent_id="a0", steps=[]))
    wait_for(lambda: world.counts["malformed_plans"] == 2, what="a plan the world's parser refuses rejected")
    assert world.steps == [["go"]] and world.counts["malformed_plans"] == 2
    assert world.rejected_health().values == {"rejected.plan.empty_plan": 1, "rejected.plan.unknown_agent": 1}

    assert not world.announce_end(result(0))
    world.announce_start()
    assert world.announce_end(result(1)) and world.done and world.results == [result(0), result(1)]
    wait_for(lambda: len(episodes) == 4, what="every boundary")
    assert [(e.event, e.episode, e.seed) for e in episodes] == [
        (EpisodeEvent.START, 0, 5), (EpisodeEvent.END, 0, 5), (EpisodeEvent.START, 1, 6), (EpisodeEvent.END, 1, 6)]
    assert episodes[-1].success and episodes[-1].steps == 3


def test_a_lifecycle_world_opens_its_topics_at_configure_and_closes_them_at_cleanup(ros):
    world = ros.add(ManagedWorld())
    assert world.out.diagnostics is not None and world.out.episode is None
    world.trigger_configure()
    assert world.out.episode is not None and world.out.context is not None
    assert names.EPISODE in {n.lstrip("/") for n, _ in world.get_publisher_names_and_types_by_node(
        "managed_world", "/")}
    world.trigger_cleanup()
    assert world.out.episode is None and world.out.diagnostics is not None
    world.trigger_configure()  # configured again: the topics come back
    assert world.out.episode is not None


def test_a_world_latches_its_agents_and_action_schema_at_each_episode_start(ros):
    world = ros.add(World())
    world.announce_start()
    late = ros.add(Node("late_planner"))  # starts after the episode began: the latched WorldInfo reaches it
    infos: list[WorldInfo] = []
    late.create_subscription(WorldInfo, names.WORLD_INFO, infos.append, qos.WORLD_INFO)
    wait_for(lambda: len(infos) == 1, what="the latched WorldInfo of episode 0")
    assert (infos[0].world, infos[0].episode, list(infos[0].agents)) == ("tiny", 0, ["a0"])
    assert len(infos[0].agents) == world.num_agents()
    schema = json.loads(infos[0].action_schema_json)
    assert schema == {"max_steps": 2, "actions": {"go": {}, "drop": {}}} and list(schema["actions"]) == ["go", "drop"]
    world.announce_end(result(0))
    world.announce_start()
    wait_for(lambda: len(infos) == 2, what="the next episode's WorldInfo")
    assert infos[1].episode == 1 and json.loads(infos[1].action_schema_json)["max_steps"] == 3


def test_the_collision_monitors_stops_reach_the_world_state_as_stopped_by_relations(ros):
    world = ros.add(World())
    world.out.open(("world_states",))
    world.subscribe_monitor_states()
    listener = ros.add(Node("listener"))
    states: list[WorldStateMsg] = []
    listener.create_subscription(WorldStateMsg, names.WORLD_STATE, states.append, qos.WORLD_STATE)
    monitor = listener.create_publisher(CollisionMonitorState, names.COLLISION_MONITOR_STATE, qos.EVENTS)
    wait_for(lambda: monitor.get_subscription_count() > 0 and world.out.world_states.get_subscription_count() > 0,
             what="the world and the listener matched")
    world.announce_start()

    def at(step: int) -> WorldState:
        return WorldState("tiny", 0, step, (Entity("a0", "agent"), Entity("box", "object")))

    monitor.publish(CollisionMonitorState(agent_id="a0", action=int(ZoneAction.STOP), obstacle="box"))
    monitor.publish(CollisionMonitorState(agent_id="a0", action=9, obstacle="box"))
    monitor.publish(CollisionMonitorState(agent_id="", action=int(ZoneAction.NONE)))
    wait_for(lambda: len(world.rejections.counts) == 2, what="the malformed states counted")
    assert world.rejected_health().values == {"rejected.collision_monitor_state.unknown_action": 1,
                                              "rejected.collision_monitor_state.empty_agent_id": 1}
    world.publish_state(at(1), "map")
    wait_for(lambda: len(states) == 1, what="the world state")
    assert [(r.subject, r.predicate, r.object) for r in states[0].relations] == [("a0", "stopped_by", "box")]
    monitor.publish(CollisionMonitorState(agent_id="a0", action=int(ZoneAction.NONE), obstacle="box"))
    wait_for(lambda: not world.monitor_relations.stopped_by, what="the hold released")
    world.publish_state(at(2), "map")
    wait_for(lambda: len(states) == 2, what="the next world state")
    assert list(states[1].relations) == []
