"""The textworld_world node over real DDS: it announces the episode (world_info, context, world_state), plays a plan
to a win and reports it, republishes the schema as the admissible commands change, reports failures, answers
lookahead."""

from __future__ import annotations

import json
import threading

import pytest
from brace_msgs.msg import (
    ContextEntry,
    Episode,
    ExecutionOutcome,
    Plan,
    PlanStep,
    ReplanDecision,
    WorldInfo,
    WorldState,
)
from brace_msgs.srv import Lookahead
from rclpy.node import Node
from rclpy.parameter import Parameter

from brace_common import qos
from brace_common.config import ConfigError
from brace_common.names import DEFAULT_NAMESPACE as NS
from brace_common.testing import call_service, wait_for
from brace_common.vocabulary import Block, EpisodeEvent
from brace_common.world_state import world_state_from_msg
from sim_bridges.textworld.textworld_game import COMMAND, PLAYER, TEXT, TextWorldGame
from sim_bridges.textworld.textworld_games import GameSpec, generate_game
from sim_bridges.textworld.textworld_world_node import TextWorldWorldNode

SPEC = GameSpec(seed=5, recipe=1, take=1, go=6)
"""One ingredient to find in six rooms (a game of about ten commands)."""


@pytest.fixture(scope="module")
def game_dir(tmp_path_factory):
    """A game folder holding the module's one game (made in ~2.5 s), and the game's walkthrough."""
    folder = tmp_path_factory.mktemp("games")
    game = TextWorldGame(generate_game(SPEC, folder), max_steps=100)
    walkthrough = game.oracle_commands()
    game.close()
    return folder, walkthrough


class Controller(Node):
    """Holds the world with an admitted decision, sends plans, records what the world publishes."""

    def __init__(self) -> None:
        super().__init__("fake_controller", namespace=NS)
        self.decisions = self.create_publisher(ReplanDecision, "decisions", qos.EVENTS)
        self.plans = self.create_publisher(Plan, "plan", qos.PLANS)
        self.lock = threading.Lock()
        self.got: dict[str, list] = {"context": [], "outcomes": [], "episode": [], "world_state": [], "world_info": []}
        for topic, cls, profile in (("context", ContextEntry, qos.EVENTS), ("outcomes", ExecutionOutcome, qos.EVENTS),
                                    ("episode", Episode, qos.EVENTS), ("world_state", WorldState, qos.WORLD_STATE),
                                    ("world_info", WorldInfo, qos.WORLD_INFO)):
            self.create_subscription(cls, topic, lambda m, t=topic: self.add(t, m), profile)
        self.lookahead = self.create_client(Lookahead, "lookahead")

    def add(self, topic: str, msg) -> None:
        """Record a message of `topic`."""
        with self.lock:
            self.got[topic].append(msg)

    def seen(self, topic: str) -> list:
        """The messages of `topic` so far."""
        with self.lock:
            return list(self.got[topic])

    def hold(self, decision_id: str) -> None:
        """Admit a call for the player: the world holds until its plan comes."""
        decision = ReplanDecision(decision_id=decision_id, admitted=True)
        decision.trigger.agent_id = PLAYER
        self.decisions.publish(decision)

    def send(self, decision_id: str, commands: list[str], action: str = COMMAND) -> None:
        """The call's plan: one step per command."""
        self.plans.publish(Plan(plan_id=f"p_{decision_id}", agent_id=PLAYER, decision_id=decision_id,
                                steps=[PlanStep(index=i, action=action, parameters_json=json.dumps({TEXT: c}))
                                       for i, c in enumerate(commands)]))


def world(game_dir, **params) -> TextWorldWorldNode:
    """A node playing the module's game once (`params` override)."""
    folder, _ = game_dir
    params = {"episodes": 1, "seed": SPEC.seed, "recipe": SPEC.recipe, "take": SPEC.take, "go": SPEC.go,
              "game_dir": str(folder), "max_steps": 100000, "step_period_s": 0.01, **params}
    return TextWorldWorldNode(namespace=NS, parameter_overrides=[Parameter(k, value=v) for k, v in params.items()])


def held(ros, game_dir, **params) -> tuple[TextWorldWorldNode, Controller]:
    """A world whose episode runs and that holds for the controller's call d_0."""
    controller = ros.add(Controller())
    node = ros.add(world(game_dir, **params))
    wait_for(lambda: node.world is not None and controller.decisions.get_subscription_count() > 0
             and controller.plans.get_subscription_count() > 0, what="the episode and its subscriptions")
    controller.hold("d_0")
    wait_for(lambda: "d_0" in node.holds.waiting, what="the world holds for the call")
    return node, controller


def test_the_world_announces_its_episode_plays_a_plan_to_a_win_and_reports_it(ros, game_dir):
    _, walkthrough = game_dir
    node, controller = held(ros, game_dir)
    wait_for(lambda: controller.seen("world_info") and controller.seen("episode")
             and any(e.block == Block.STATE for e in controller.seen("context")), what="the episode's start")
    start = controller.seen("episode")[0]
    assert (start.event, start.world, start.num_agents, start.seed) == (EpisodeEvent.START, "textworld", 1, SPEC.seed)
    info = controller.seen("world_info")[0]
    schema = json.loads(info.action_schema_json)
    assert info.agents == [PLAYER] and list(schema["actions"]) == [COMMAND]
    first_choices = schema["actions"][COMMAND][TEXT]["choices"]
    assert walkthrough[0] in first_choices
    blocks = [(e.block, e.kind) for e in controller.seen("context")]
    assert (Block.TASK, "task") in blocks and (Block.CONSTRAINTS, "constraint") in blocks
    state = world_state_from_msg(controller.seen("world_state")[0])
    assert state.world == "textworld" and state.related("at", PLAYER) and state.entity("task_0").state == "open"

    controller.send("d_0", walkthrough)
    wait_for(lambda: node.done, what="the game won and the episode closed")
    wait_for(lambda: len(controller.seen("episode")) == 2, what="the episode's end")
    end = controller.seen("episode")[1]
    metrics = {m.name: m.value for m in end.metrics}
    assert end.event == EpisodeEvent.END and end.success and end.delivered == end.tasks > 0 and end.plans == 1
    assert metrics["plans_agreeing"] == 1 and metrics["commands"] == len(walkthrough) and metrics["lost"] == 0
    wait_for(lambda: len(controller.seen("outcomes")) == len(walkthrough), what="every command's outcome")
    assert all(o.success and o.action == COMMAND for o in controller.seen("outcomes"))
    wait_for(lambda: any(e.kind == "task_done" and "won" in e.text for e in controller.seen("context")),
             what="the win in the context (another topic than the outcomes: no order between them)")
    wait_for(lambda: any(s.step == end.steps for s in controller.seen("world_state")), what="the last state")
    last = world_state_from_msg(controller.seen("world_state")[-1])
    assert last.entity("task_0").state == "won" and last.activity(PLAYER).plan_steps == len(walkthrough)
    def choices(info: WorldInfo) -> list[str]:
        """The admissible commands a schema offers."""
        return json.loads(info.action_schema_json)["actions"][COMMAND][TEXT]["choices"]

    # the admissible commands changed, so did the schema (depth 1, latched: the latest one is what must arrive)
    wait_for(lambda: len(controller.seen("world_info")) > 1 and choices(controller.seen("world_info")[-1]) !=
             first_choices, what="a later schema")
    assert node.counts["schema_updates"] >= len(controller.seen("world_info")) - 1


def test_a_wrong_command_fails_a_malformed_plan_is_counted_and_lookahead_answers(ros, game_dir):
    _, walkthrough = game_dir
    node, controller = held(ros, game_dir)
    controller.send("d_0", ["take", "dance"], action="jump")
    wait_for(lambda: node.rejections.counts["plan.unknown_skill"] == 1, what="the malformed plan counted")
    assert node.world.plan == [] and node.counts["malformed_plans"] == 1
    controller.hold("d_1")
    wait_for(lambda: "d_1" in node.holds.waiting, what="the world holds again")
    t = node.world.t
    wait_for(lambda: any(s.step == t for s in controller.seen("world_state")), what="the held state")
    answer = call_service(controller.lookahead, Lookahead.Request(
        episode=0, step=t, agent_id=PLAYER, action=COMMAND, parameters_json=json.dumps({TEXT: walkthrough[0]})),
        "lookahead")
    assert answer.valid and answer.state.step == t + 1 and node.world.t == t
    controller.send("d_1", ["eat the moon"])
    wait_for(lambda: controller.seen("outcomes"), what="the failed command's outcome")
    outcome = controller.seen("outcomes")[0]
    assert not outcome.success and outcome.action == COMMAND and "eat the moon" in outcome.detail
    wait_for(lambda: any(e.kind == "failure_trace" for e in controller.seen("context")), what="the failure trace")
    assert node.world.failed == 1 and node.world.commands == 0


def test_an_invalid_setting_stops_the_node_naming_it(ros, game_dir):
    with pytest.raises(ConfigError, match="'take'"):
        world(game_dir, take=3)
