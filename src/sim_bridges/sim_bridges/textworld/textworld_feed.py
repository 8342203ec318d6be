"""What a TextWorld game tells the rest of the stack: context entries, the action schema, plans, agent reports.
ROS-free.

Blocks follow the planner's context layout (paper Eq. 3), all entries the player's:
- TASK: the game and its objective open the episode; each point scored (and the win) is a task_done entry;
- CONSTRAINTS: how commands are given;
- STATE: the latest observation each step: where the player is (the game's 'look'), what it carries, the score
  and the admissible commands;
- HISTORY: each command with the game's answer (action_outcome), or a failure_trace for a command outside the
  admissible ones (with what the game would have said) and for a lost game.

The action schema has one action, `command`, with one parameter, `text`. The world takes any text (`COMMANDS`,
its intake schema) and validates each step against the admissible commands when it executes it; the planner's
schema (`action_schema`, on world_info) enumerates the admissible commands of the current state as `text`'s
choices, so a planner that decodes under it writes only commands the game accepts now.
"""

from __future__ import annotations

from brace_common.action_schema import ActionSchema, Fault, PlanError, Step
from brace_common.validation import MAX_TEXT_CHARS, InvalidInput, shorten
from brace_common.vocabulary import Block, EntryKind
from brace_common.world_feed import AgentReport, FeedEntry

from .textworld_decomposition import subtasks_schema
from .textworld_game import COMMAND, PLAYER, TEXT, Event, TextWorldGame
from .textworld_state import Prediction, lookahead

MAX_PLAN_STEPS = 64
"""Longest plan the world accepts."""
MAX_COMMAND_CHARS = 200
"""Longest command the world accepts (a game's commands are a few words)."""

COMMANDS = ActionSchema.from_dict({"max_steps": MAX_PLAN_STEPS, "actions": {COMMAND: {TEXT: {"type": "string"}}}})
"""The world's intake schema: `command(text)`, any text; admissibility is checked when the step executes."""


def _entry(step: int, block: Block, kind: EntryKind, text: str) -> FeedEntry:
    return FeedEntry(PLAYER, step, block, kind.value, text[:MAX_TEXT_CHARS])


def action_schema(game: TextWorldGame, max_steps: int = 1) -> dict:
    """The planner's schema of the current state: `command(text)` with the admissible commands as text's choices,
    and the composite subtasks a ReCAP planner decomposes (textworld_decomposition: get, prepare, finish).

    One step by default: the choices hold now, and a later step's command is mostly not admissible yet.
    """
    return {"max_steps": max_steps, "actions": {COMMAND: {TEXT: {"type": "string", "choices": game.admissible}}},
            "subtasks": subtasks_schema(game)}


def plan_from_steps(raw: list[tuple[str, str]]) -> list[Step]:
    """Plan steps from (action, parameters_json) pairs, checked against the intake schema; InvalidInput naming what
    is wrong (an empty plan clears the player's)."""
    steps = COMMANDS.plan_from_pairs(raw, max_steps=MAX_PLAN_STEPS, allow_empty=True)
    for index, step in enumerate(steps):
        text = step.parameters[TEXT]
        if not text.strip() or len(text) > MAX_COMMAND_CHARS:
            raise PlanError(Fault.BAD_PARAMETER_VALUE, f"step {index}: command '{shorten(text)}' is empty or longer "
                                                       f"than {MAX_COMMAND_CHARS} characters", index, TEXT)
    return steps


def episode_entries(game: TextWorldGame, episode: int, seed: int) -> list[FeedEntry]:
    """The task and constraint entries that open an episode."""
    return [_entry(0, Block.TASK, EntryKind.TASK,
                   f"TextWorld cooking game, episode {episode} (seed {seed}): {game.objective} "
                   f"Winning scores {game.max_score} points."),
            _entry(0, Block.CONSTRAINTS, EntryKind.CONSTRAINT,
                   "Act with command(text), one game command per step, chosen from the admissible commands of the "
                   "latest state; any other command fails and changes nothing.")]


def state_text(game: TextWorldGame) -> str:
    """The player's observation as the planner reads it."""
    return (f"{game.description} {game.inventory} Score {game.score} of {game.max_score}. "
            f"Admissible commands: {', '.join(game.admissible)}.")


EVENT_BLOCKS = {EntryKind.TASK_DONE: Block.TASK, EntryKind.CONSTRAINT: Block.CONSTRAINTS}
"""The block of an event's entry by its kind; any other kind is history."""


def event_entries(events: list[Event]) -> list[FeedEntry]:
    """Entries of a step's events: points scored as task entries, the recipe read as a constraint (protected: a
    compressor cuts the history first), command outcomes and failures as history."""
    return [_entry(e.step, EVENT_BLOCKS.get(e.kind, Block.HISTORY), e.kind, e.text) for e in events]


def step_entries(game: TextWorldGame, events: list[Event]) -> list[FeedEntry]:
    """Entries of one step: its events, then the state."""
    return event_entries(events) + [_entry(game.t, Block.STATE, EntryKind.OBSERVATION, state_text(game))]


def agent_reports(game: TextWorldGame) -> list[AgentReport]:
    """The player's AgentState: a text game has no geometry, so x counts the commands the game executed and y is the
    score (the monitor's progress-based detectors see a failed or idle step as no progress); has_goal while the plan
    has a step left."""
    return [AgentReport(PLAYER, game.t, float(game.commands), float(game.score), 0.0, game.current is not None)]


def answer_lookahead(game: TextWorldGame | None, episode: int, state_episode: int, state_step: int, agent: str,
                     action: str, parameters_json: str) -> Prediction:
    """A Lookahead request against the live game: refused (not valid, no state) when the state it names is not the
    live one or the step is malformed; else the prediction of `textworld_state.lookahead`."""
    live = f"{episode}/{game.t}" if game is not None else "none (between episodes)"
    if game is None or (state_episode, state_step) != (episode, game.t):
        return Prediction(False, f"state {state_episode}/{state_step} is not the live state ({live})", None)
    try:
        step = plan_from_steps([(action, parameters_json)])[0]
    except InvalidInput as exc:
        return Prediction(False, f"malformed step: {exc}", None)
    return lookahead(game, episode, agent, step)
