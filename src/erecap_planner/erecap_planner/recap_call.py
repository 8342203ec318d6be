"""What ReCAP's recursion changes in one call (ReCAP Alg. 1 on the call path): the request names the top frame's
goal and asks for π (decompose) or ρ (refine); the answer's (T, S) goes to the agent's frame stack, whose leading
primitives are the plan; a REUSE_SUBPLAN call whose frame waits for ρ reuses its S without the model (BRACE decided
the refinement was not worth a call). Torch-free."""

from __future__ import annotations

from dataclasses import dataclass, field

from brace_common.action_schema import ActionSchema, PlanError, Subtask
from brace_common.vocabulary import CallStatus, Mode, Phase, RecapKind, RecapNeed
from brace_memory.system import MemorySystem

from .phase_clock import PhaseClock
from .plan_parser import parse_recap

RECAP_FORMAT = ('Allowed actions: {actions}. Composite subtasks: {subtasks}. Reply with one JSON object: '
                '{{"think": "<why>", "subtasks": [{{"action": "<name>", "parameters": {{...}}}} or '
                '{{"subtask": "<name>", "parameters": {{...}}}}, ...]}}')
"""The output format of a ReCAP call (after its request line)."""
DEFAULT_GOAL = "the task"
"""An agent's root goal when its world sent no task entry."""


@dataclass
class RecapCall:
    """One call's part in the recursion: its kind, the frame it served, the (T, S) it gave, and what the stack needs
    after it (the top frame's need and depth)."""

    kind: RecapKind
    depth: int
    thought: str = ""
    subtasks: list[Subtask] = field(default_factory=list)
    need: RecapNeed = RecapNeed.NOTHING
    next_depth: int = 0


def recap_request(memory: MemorySystem, schema: ActionSchema, agent_id: str) -> str:
    """The REQUEST line of a ReCAP call for `agent_id`: π for a frame without (T, S), else ρ; then the format."""
    state = memory.recap_open(agent_id, task=DEFAULT_GOAL)
    # The root's goal is the task, which GOALS holds: quoting it again cost ~50 tokens of a 512-token B_t.
    goal = f"'{state.goal}'" if state.depth else "the task"
    if state.need == RecapNeed.DECOMPOSE:
        ask = f"Decompose {goal} for {agent_id}: think, then list its subtasks in order."
    else:
        ask = f"Refine the remaining subtasks of {goal} for {agent_id} after what happened."
    subtasks = schema.subtask_schema().describe() if schema.subtasks else "none"
    return ask + " " + RECAP_FORMAT.format(actions=schema.describe(), subtasks=subtasks)


def recap_reuse(memory: MemorySystem, request, outcome, clock: PhaseClock) -> bool:
    """A REUSE_SUBPLAN call whose agent's top frame waits for ρ: its S reused as the plan, no model call (True);
    False for any other call (the model answers it)."""
    state = memory.recap_open(request.agent_id, request.step, DEFAULT_GOAL)
    if request.mode != Mode.REUSE_SUBPLAN or state.need != RecapNeed.REFINE:
        return False
    t0 = clock.begin(Phase.PARSE)
    thought, subtasks = memory.recap_subtasks(request.agent_id)
    outcome.steps, after = memory.recap_reuse(request.agent_id, request.step)
    outcome.recap = RecapCall(RecapKind.REUSE, state.depth, thought, subtasks, after.need, after.depth)
    clock.end(Phase.PARSE, t0, 0, len(outcome.steps))
    return True


def recap_answer(memory: MemorySystem, outcome, text: str, schema: ActionSchema, request) -> None:
    """The model's answer `text` as (T, S) for the agent's top frame: the plan is the primitives the executor may run
    now; a malformed answer, or a composite at the deepest frame, is a PLANNER_ERROR with its reason."""
    before = memory.recap_open(request.agent_id, request.step, DEFAULT_GOAL)
    try:
        thought, subtasks = parse_recap(text, schema, request.agent_id)
        outcome.steps, after = memory.recap_plan(request.agent_id, request.step, thought, subtasks)
    except PlanError as exc:
        outcome.status, outcome.error = CallStatus.PLANNER_ERROR, str(exc)
        return
    except ValueError as exc:
        outcome.status, outcome.error = CallStatus.PLANNER_ERROR, f"too_deep: {exc}"
        return
    kind = RecapKind.DECOMPOSE if before.need == RecapNeed.DECOMPOSE else RecapKind.REFINE
    outcome.recap = RecapCall(kind, before.depth, thought, subtasks, after.need, after.depth)
