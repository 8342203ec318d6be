"""The lookahead veto over DDS: a plan that would lose the TextWorld game never reaches the world.

The real nodes: the TextWorld world (a one-room game, its `lookahead` service), the trigger monitor and BRACE
controller with the TextWorld stack's settings, and the E-RECAP planner with `veto_lost` on a scripted
OpenAI-protocol server (the LLM's edge). The server answers what a careless planner would: eat the ingredient the
player holds (which loses the game). The veto projects the eat through the world's service, finds the task lost, and
refuses the plan (a served plan has no ranking to fall back on): counted, in the call's record, nothing runs; when the
server answers a harmless command, it runs.
"""

from __future__ import annotations

import json

from brace_msgs.msg import ReplanCall
from rclpy.node import Node
from rclpy.parameter import Parameter

from brace_common import names, qos
from brace_common.names import DEFAULT_NAMESPACE as NS
from brace_common.testing import wait_for
from brace_controller.controller_node import BraceControllerNode
from brace_controller.trigger_monitor_node import TriggerMonitorNode
from erecap_planner.openai_fault_server import FaultServer
from erecap_planner.planner_node import ErecapPlannerNode
from erecap_planner.testing import saved_tiny_llama
from erecap_planner.veto import VETOED_PREFIX
from sim_bridges.textworld.textworld_game import COMMAND, PLAYER, TEXT, TextWorldGame, command_step
from sim_bridges.textworld.textworld_games import GameSpec, generate_game
from sim_bridges.textworld.textworld_state import lookahead
from sim_bridges.textworld.textworld_world_node import TextWorldWorldNode

SPEC = GameSpec(seed=3, recipe=1, take=0, go=1, cook=False, cut=False, open=False)
"""One room, one ingredient, already in the player's inventory: eating it (admissible from the start) loses."""
READ = "examine cookbook"
"""A harmless command admissible from the start."""


def plan(command: str) -> str:
    """A served plan of one command."""
    return json.dumps({"plan": [{"action": COMMAND, "parameters": {TEXT: command}}]})


def losing_command(folder) -> str:
    """An admissible command at the game's start that loses it (by the game itself, on a copy)."""
    game = TextWorldGame(generate_game(SPEC, folder), max_steps=50)
    try:
        assert READ in game.admissible
        for command in (c for c in game.admissible if c.startswith("eat ")):
            if lookahead(game, 0, PLAYER, command_step(command)).state.task_lost(PLAYER):
                return command
        raise AssertionError(f"no eat loses the game: {game.admissible}")
    finally:
        game.close()


class Watcher(Node):
    """Records the planner's calls."""

    def __init__(self) -> None:
        super().__init__("veto_watcher", namespace=NS)
        self.calls: list[ReplanCall] = []
        self.create_subscription(ReplanCall, names.REPLAN_CALLS, self.calls.append, qos.EVENTS)


def node(cls, **params):
    return cls(namespace=NS, parameter_overrides=[Parameter(k, value=v) for k, v in params.items()])


def test_a_plan_that_would_lose_the_game_is_vetoed_and_the_game_goes_on(ros, tmp_path):
    folder = tmp_path / "games"
    eat = losing_command(folder)
    with FaultServer(text=plan(eat)) as server:  # a careless planner: it eats the ingredient at every call
        planner = node(ErecapPlannerNode, model_path=saved_tiny_llama(tmp_path / "tiny"), backend="openai",
                       server_url=server.base_url, compressor="recency", endpoint="completions",
                       structured_output="json_schema", action_schema_file="", plan_steps=[0, 0, 0],
                       veto_lost=True, lookahead_timeout_s=5.0)  # a busy machine answers the service late
        planner.trigger_configure()
        assert planner.call_path is not None, planner.last_error
        planner.trigger_activate()
        watcher = ros.add(Watcher())
        ros.add(planner)
        ros.add(node(TriggerMonitorNode, step_source="agent_state", periodic_interval_steps=3, plan_done_idle_steps=1,
                     initial_plan=True, failure_threshold=1, drift_steps=0, hazard_distance_m=0.0,
                     deadlock_window=0))
        ros.add(node(BraceControllerNode, budget_profile="embedded", max_consecutive_deferrals=2))
        world = ros.add(node(TextWorldWorldNode, episodes=1, seed=SPEC.seed, recipe=1, take=0, go=1, cook=False,
                             cut=False, open=False, game_dir=str(folder), max_steps=10_000, step_period_s=0.05,
                             wait_for_nodes=["trigger_monitor", "brace_controller", "erecap_planner"],
                             replan_action="replan"))
        wait_for(lambda: planner.service.counts["plans_vetoed"] >= 2, timeout=180,
                 what="two plans that eat the ingredient vetoed")
        assert world.world is not None and not world.world.finished and world.world.commands == 0  # nothing ran
        wait_for(lambda: any(c.error.startswith(VETOED_PREFIX) for c in watcher.calls), timeout=60,
                 what="a vetoed call's record")
        vetoed = next(c for c in watcher.calls if c.error.startswith(VETOED_PREFIX))
        assert vetoed.status == ReplanCall.STATUS_PLANNER_ERROR and eat in vetoed.error
        assert list(vetoed.vetoed) == [f"{COMMAND}({TEXT}={eat})"]  # the call's record names the step
        assert planner.lookahead.counts["answered"] >= 2 and planner.service.counts["steps_vetoed"] >= 2
        server.text = plan(READ)  # the planner comes to its senses: the next plan passes the veto and runs
        wait_for(lambda: world.world.commands >= 1 and world.world.recipe is not None, timeout=120,
                 what="the cookbook read after the vetoes")
        assert not world.world.lost
