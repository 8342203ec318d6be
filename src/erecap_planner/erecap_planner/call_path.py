"""One replanning call, its phases written once: [queue ->] context_compress -> retrieve -> the backend's -> parse.

The backend that turns the prompt into text (the in-process model: prefill, decode; an OpenAI-compatible server:
request, first_token, decode) is a small strategy behind `Backend`; rendering, memory's reserve, compression,
retrieval, splicing, parsing and the outcome are here, once, for both. Torch-free. docs/planner.md has the why.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Optional, Protocol

from brace_common.action_schema import ActionSchema, PlanError, Step
from brace_common.config import ConfigError
from brace_common.counters import Health
from brace_common.validation import json_depths
from brace_common.vocabulary import CallState, CallStatus, Decoding, Mode, Phase, meets_slo
from brace_memory.lookahead import Predict
from brace_memory.recap import subtask_limit

from .call_aborted import CallAborted, checkpoint_of
from .candidates import enumerate_steps
from .compressors import Compressed, Compressor
from .context import DEFAULT_SYSTEM_PROMPT, LAYOUTS, ContextBuffer, RenderedContext, TokenCounts
from .memory_phase import MemoryUse, call_blocks, goal_stack, memory_ids, retrieve, splice_memory
from .phase_clock import PhaseClock, PhaseRecord
from .plan_parser import parse_plan
from .recap_call import RecapCall, recap_answer, recap_request, recap_reuse
from .veto import VETO_TRIES, refusal, vet

__all__ = ["DECODINGS", "INTERNAL_ERROR", "NO_SCHEMA", "Backend", "BackendUnavailable", "CallAborted", "CallOptions",
           "CallOutcome", "CallPath", "CallRequest", "Generated", "Prompt", "SchemaUse",
           "checkpoint_of", "internal_error_outcome", "json_object_closed", "parse_into", "request_text",
           "unserved_outcome"]

# json: free generation, parsed afterwards; candidates: the best single skill call by likelihood;
# constrained: a whole plan generated greedily within the schema's valid skill calls.
DECODINGS = tuple(d.value for d in Decoding)
MODE_REQUESTS = {
    Mode.FULL_REPLAN: "Plan the next steps for {agent} from its current state.",
    Mode.PARTIAL_REPLAN: "Repair the plan of {agent} from the failing or drifting step on.",
    Mode.REUSE_SUBPLAN: "Confirm or adjust the current subplan of {agent}.",
}
OUTPUT_FORMAT = ('Allowed actions: {actions}. Reply with one JSON object: '
                 '{{"plan": [{{"action": "<name>", "parameters": {{...}}}}]}}')

NO_SCHEMA = "no action schema yet (the world publishes it on world_info at its episode start)"
"""Why a call cannot run before a schema is known."""
INTERNAL_ERROR = "internal_error"
"""The reason at the head of a call record's error when the planner itself failed (a bug, not the model's output)."""


@dataclass(frozen=True)
class SchemaUse:
    """An action schema and what a call path derives from it: the valid skill calls (candidates and constrained
    decoding) and the constrained decoder. Replaced whole, so a running call keeps its own. Where the schema refuses
    an agent's own id (`not_self`), each agent's calls use their own, derived once (`per_agent`)."""

    schema: ActionSchema
    candidates: list[Step]
    constrained: Optional[Any]  # constrained.ConstrainedPlanDecoder (in-process decoding only)
    per_agent: dict[str, SchemaUse] = field(default_factory=dict, repr=False, compare=False)


@dataclass
class CallRequest:
    """What the controller asked for (the Replan goal)."""

    agent_id: str
    token_budget: int
    slo_ms: float
    hard_deadline_ms: float
    mode: int = 0
    step: int = 0
    decision_id: str = ""
    memory: bool = True  # retrieved memory allowed (the controller switches it off when the SLO cannot afford it)
    trigger_kind: int = 0  # TriggerEvent.KIND_* of the admitted trigger (the Plan carries it on)


@dataclass
class CallOutcome:
    """Everything the ReplanCall record and the Plan need."""

    status: CallStatus
    steps: list[Step] = field(default_factory=list)
    phases: list[PhaseRecord] = field(default_factory=list)
    tokens_before: int = 0
    tokens_after: int = 0
    tokens_reused: int = 0
    latency_ms: float = 0.0
    slo_ms: float = 0.0
    output_text: str = ""
    error: str = ""
    compressor: str = ""
    backend: str = "local"        # local | openai
    server_prompt_tokens: int = 0  # the server's usage report (backend openai)
    server_completion_tokens: int = 0
    respelled: list[str] = field(default_factory=list)  # ids of the plan spelled another way ('old -> new')
    cut_at_slo: bool = False       # the plan ended at a step boundary to keep SLO_t (CallOptions.end_plan_at_slo)
    recap: Optional[RecapCall] = None  # ReCAP's recursion: the call's π / ρ / reuse, its (T, S), what comes next
    vetoed: list[str] = field(default_factory=list)  # steps the lookahead veto refused (veto.py), their text

    @property
    def slo_met(self) -> bool:
        """l_t <= SLO_t (Eq. 6 counts the complement); a deadline miss never meets it."""
        return meets_slo(self.status, self.latency_ms, self.slo_ms)


@dataclass
class CallOptions:
    """How every call of one call path is made (one PlannerConfig parameter each, `factory.call_options`)."""

    compressor: str = "erecap"     # its name, for the records ("erecap" with no Compressor: the backend prunes)
    max_new_tokens: int = 64
    system_prompt: str = DEFAULT_SYSTEM_PROMPT
    layout: str = "focus"
    max_context_tokens: Optional[int] = None  # entries yield (yield_order) from longer prompts
    plan_steps: dict[int, int] = field(default_factory=dict)  # mode -> most steps of its plans (0: the schema's)
    decoding: str = "json"
    protect_blocks: bool = True    # in-model pruning never drops a protected block's tokens
    end_plan_at_slo: bool = False  # constrained decoding ends a plan at the step boundary where the next step would
                                   # finish past SLO_t
    recursion: bool = False        # ReCAP Alg. 1: calls answer (T, S) for the agent's top frame (recap_call.py)
    think_tokens: int = 32         # the longest thought constrained decoding writes (0: none)
    veto_lost: bool = False        # the lookahead veto: a first step the world projects to lose the task is refused
    veto_tries: int = VETO_TRIES   # ranked steps the veto projects at most

    def __post_init__(self) -> None:
        if self.decoding not in DECODINGS:
            raise ConfigError("decoding", f"'{self.decoding}' is not one of {', '.join(DECODINGS)}")
        if self.layout not in LAYOUTS:
            raise ConfigError("context_layout", f"'{self.layout}' is not one of {LAYOUTS}")
        if self.recursion and self.layout != "recap":
            raise ConfigError("recap_recursion", f"needs context_layout recap, not {self.layout}")
        if self.recursion and self.decoding == Decoding.CANDIDATES.value:
            raise ConfigError("recap_recursion", "needs decoding json or constrained (candidates scores one skill "
                              "call, not a thought and subtasks)")
        if self.veto_lost and self.recursion:
            raise ConfigError("veto_lost", "is not implemented with recap_recursion yet (a vetoed S[0] would leave "
                              "the frame's (T, S) answered)")
        if self.veto_tries < 1:
            raise ConfigError("veto_tries", f"must be >= 1, got {self.veto_tries}")


@dataclass
class Prompt:
    """What a call hands its backend: the rendered context, the kept tokens with the MEMORY block spliced in, their
    positions in the context (-1: memory), the protected ones (in-model pruning) and the compression phase's record
    (in-model pruning books its selection there)."""

    ctx: RenderedContext
    ids: list[int]
    kept_index: list[int]
    protect: Optional[list[bool]]
    compress_phase: PhaseRecord
    deepest: bool = False   # ReCAP: the call answers for a frame at the deepest depth (no composite subtask)


@dataclass
class Generated:
    """What the backend produced: the text and how many tokens (or scored candidates) it took."""

    text: str
    produced: int
    ranked: list[Step] = field(default_factory=list)  # candidates decoding: every candidate, best first


class BackendUnavailable(Exception):
    """The backend could not answer (a planner server down, busy or failing): the call ends UNAVAILABLE."""


class Backend(Protocol):
    """Turns a call's prompt into text: its phases are booked on the call's clock; CallAborted stops it."""

    name: str         # the ReplanCall's backend: local | openai
    tokenizer: Any    # counts, renders and splices the prompt (the model's own)

    @property
    def model_name(self) -> str:
        """The model the calls name (the ReplanCall's `model`)."""

    def generate(self, prompt: Prompt, request: CallRequest, use: SchemaUse, clock: PhaseClock,
                 outcome: CallOutcome) -> Generated:
        """The plan text for `prompt` (sets `outcome.tokens_after`, and what else the backend measures)."""

    def health(self) -> Health:
        """What the backend reports on /diagnostics (`backend` and its own values)."""


def unserved_outcome(call, compressor: str) -> CallOutcome:
    """The outcome of a queued call answered without running: superseded, cancelled or expired while waiting."""
    waited_ms = (time.monotonic() - call.accepted_at) * 1000.0
    status, error = {
        CallState.SUPERSEDED: (CallStatus.CANCELLED, f"superseded while waiting by the agent's newer call {call.superseded_by}"),
        CallState.CANCELLED: (CallStatus.CANCELLED, "cancelled while waiting for the planner"),
        CallState.EXPIRED: (CallStatus.DEADLINE, "hard deadline passed while waiting for the planner"),
    }[call.outcome]
    phase = PhaseRecord(Phase.QUEUE.value, waited_ms, 0, 0)
    return CallOutcome(status=status, phases=[phase], latency_ms=waited_ms, slo_ms=call.slo_ms, error=error,
                       compressor=compressor)


def internal_error_outcome(call, compressor: str, exc: BaseException) -> CallOutcome:
    """The outcome of a call whose run raised unexpectedly: a planner error naming the exception, no steps."""
    waited_ms = (time.monotonic() - call.accepted_at) * 1000.0
    return CallOutcome(status=CallStatus.PLANNER_ERROR, latency_ms=waited_ms, slo_ms=call.slo_ms,
                       error=f"{INTERNAL_ERROR}: {type(exc).__name__}: {exc}", compressor=compressor)


def json_object_closed(text: str) -> bool:
    """True once `text` holds a complete top-level JSON object or array (strings respected, prose before it skipped)."""
    return any(depth == 0 for depth in json_depths(text, prose_first=True))


def request_text(schema: ActionSchema, agent_id: str, mode: int) -> str:
    """The REQUEST line of a call for `agent_id` in `mode` (ReplanDecision.MODE_*)."""
    ask = MODE_REQUESTS.get(mode, MODE_REQUESTS[Mode.FULL_REPLAN]).format(agent=agent_id)
    return ask + " " + OUTPUT_FORMAT.format(actions=schema.describe())


def parse_into(outcome: CallOutcome, text: str, schema: ActionSchema, agent: Optional[str] = None) -> None:
    """Validated steps of `text` (a plan of `agent`, when given) into `outcome` (ids spelled another way respelled,
    listed in `respelled`), or PLANNER_ERROR with the reason."""
    try:
        outcome.steps = parse_plan(text, schema, outcome.respelled, agent)
    except PlanError as exc:
        outcome.status = CallStatus.PLANNER_ERROR
        outcome.error = str(exc)


def end_aborted(outcome: CallOutcome, clock: PhaseClock, why: str) -> None:
    """A call stopped by its cancel or hard deadline: no steps, the status saying which."""
    outcome.steps = []
    outcome.status = CallStatus.CANCELLED if clock.cancelled() else CallStatus.DEADLINE
    outcome.error = f"{'cancelled' if outcome.status == CallStatus.CANCELLED else 'hard deadline passed'} ({why})"


class CallPath:
    """Runs replanning calls: the phases every backend shares, with `backend` producing the text.

    `compressor` None: the context goes whole (protected blocks marked) to a backend that prunes inside its model
    (in-model E-RECAP); otherwise it is compressed to B_t minus memory's reserve before the backend sees it.
    """

    def __init__(self, backend: Backend, options: CallOptions, compressor: Optional[Compressor],
                 schema: Optional[ActionSchema] = None, memory: Optional[MemoryUse] = None) -> None:
        self.backend = backend
        self.options = options
        self.compressor = compressor
        self.memory = memory
        self.decoding = Decoding(options.decoding)
        if options.recursion and (memory is None or not memory.system.recursion):
            raise ValueError("ReCAP's recursion needs a memory system with recursion on (MemorySystemConfig)")
        self.token_counts = TokenCounts(backend.tokenizer)  # each entry's tokens, counted once
        self.use: Optional[SchemaUse] = None  # None until a schema is known (a world's, from world_info)
        self.predict: Optional[Predict] = None  # the world's one-step lookahead, for the veto (veto_lost)
        if schema is not None:
            self.set_schema(schema)

    # ------------------------------------------------------------------ what the calls use

    @property
    def tokenizer(self):
        """The backend's tokenizer (the model's own)."""
        return self.backend.tokenizer

    @property
    def model_name(self) -> str:
        """The model the calls name (the ReplanCall's `model`)."""
        return self.backend.model_name

    @property
    def compressor_name(self) -> str:
        """The compressor the records name."""
        return self.options.compressor

    @property
    def layout(self) -> str:
        """The context layout calls render."""
        return self.options.layout

    @layout.setter
    def layout(self, layout: str) -> None:
        if layout not in LAYOUTS:
            raise ValueError(f"layout '{layout}' is not one of {LAYOUTS}")
        self.options.layout = layout

    @property
    def system_prompt(self) -> str:
        """The system prompt calls render."""
        return self.options.system_prompt

    @property
    def schema(self) -> Optional[ActionSchema]:
        """The schema the next call plans with (None: none known yet)."""
        return self.use.schema if self.use is not None else None

    @property
    def candidates(self) -> list[Step]:
        """The valid skill calls of the current schema (decoding candidates / constrained), else []."""
        return self.use.candidates if self.use is not None else []

    def set_schema(self, schema: ActionSchema) -> None:
        """Plan with `schema` from the next call on (the running one keeps its own); ValueError, the schema
        unchanged, when the decoding cannot use it (candidates and constrained decoding need every parameter
        enumerated, in at most candidates.MAX_CANDIDATES skill calls: CandidateLimit)."""
        candidates = enumerate_steps(schema) if self.decoding is not Decoding.JSON or self.memory is not None else []
        if self.decoding is not Decoding.JSON and not candidates:
            raise ValueError(f"{self.decoding.value} decoding needs actions whose parameters all have enumerated "
                             "choices")
        constrained = None
        if self.decoding is Decoding.CONSTRAINED and self.options.recursion:
            from .recap_decoding import RecapDecoder  # heavy: in-process decoding only (torch)

            old = self.use.constrained if self.use is not None else None
            constrained = RecapDecoder(self.tokenizer, candidates, enumerate_steps(schema.subtask_schema()),
                                       subtask_limit(schema.max_steps), self.options.think_tokens,
                                       vocabulary=old.vocabulary if old is not None else None)
        elif self.decoding is Decoding.CONSTRAINED:
            from .constrained import ConstrainedPlanDecoder  # heavy: in-process decoding only (torch)

            constrained = ConstrainedPlanDecoder(self.tokenizer, candidates, schema.max_steps, schema.min_steps)
        self.use = SchemaUse(schema, candidates if self.decoding is not Decoding.JSON else [], constrained)
        if self.memory is not None:
            self.memory.system.on_schema(candidates)

    @staticmethod
    def use_for(use: SchemaUse, agent: str) -> SchemaUse:
        """What `agent`'s calls use of `use`: itself, or (a schema with `not_self` parameters) its own candidates
        and constrained decoder without the calls naming the agent, derived in its first call from `use`'s
        tokenisation (tens of milliseconds; deriving every agent's with the schema delayed the first call)."""
        if not use.candidates or not use.schema.names_self():
            return use
        if agent not in use.per_agent:
            own = [s for s in use.candidates if use.schema.allows(s, agent)]
            # With nothing left (every call names the agent) the schema's own stay: validation refuses the plan.
            use.per_agent[agent] = SchemaUse(use.schema, own, use.constrained.restricted(own) if use.constrained
                                             else None) if own else use
        return use.per_agent[agent]

    def request_text(self, agent_id: str, mode: int) -> str:
        """The REQUEST line for a mode (the current schema's actions)."""
        return request_text(self.schema, agent_id, mode)

    # ------------------------------------------------------------------ the phases

    def render(self, buffer: ContextBuffer, request: CallRequest, schema: ActionSchema,
               checkpoint: Callable[[], None] = lambda: None) -> RenderedContext:
        """A call's uncompressed prompt: the context in this path's layout (with the goal stack in `recap`)."""
        o = self.options
        ask = recap_request(self.memory.system, schema, request.agent_id) if o.recursion else \
            request_text(schema, request.agent_id, request.mode)
        return buffer.render(self.tokenizer, request.agent_id, ask, o.system_prompt,
                             entries=call_blocks(buffer, o.layout, self.memory, request.agent_id), layout=o.layout,
                             max_tokens=o.max_context_tokens, checkpoint=checkpoint, counts=self.token_counts,
                             goal_stack=goal_stack(self.memory, o.layout, request.agent_id))

    def reserve(self, request: CallRequest) -> int:
        """Memory's share of the call's B_t (0 without memory, or with memory off for this call)."""
        return self.memory.reserve(request.token_budget, request.memory) if self.memory else 0

    def compress(self, ctx: RenderedContext, request: CallRequest, reserve: int,
                 abort: Callable[[], bool] = lambda: False) -> tuple[Compressed, Optional[list[bool]]]:
        """The kept tokens of `ctx` and which of them are protected (None: nothing to protect downstream)."""
        if self.compressor is None:  # in-model pruning: everything goes, the backend prunes to B_t
            n = len(ctx)
            kept = Compressed(list(range(n)), list(ctx.token_ids), n)
            return kept, ctx.protected_within(request.token_budget - reserve) if self.options.protect_blocks else None
        return self.compressor.compress(ctx, request.token_budget - reserve, should_abort=abort), None

    def splice(self, buffer: ContextBuffer, ctx: RenderedContext, kept: Compressed, protect: Optional[list[bool]],
               request: CallRequest, reserve: int) -> tuple[list[int], list[int], Optional[list[bool]], int]:
        """The retrieve phase's work: (ids, their context positions, protect mask, memory's retrieved tokens) with
        the MEMORY block spliced in before the request."""
        got = retrieve(self.memory, self.tokenizer, buffer, request, reserve, self.options.layout)
        block = memory_ids(self.tokenizer, got.lines, reserve)
        request_at = kept.position_of(ctx.request_start)
        ids, protect = splice_memory(block, list(kept.token_ids), request_at, protect)
        index = kept.kept_index[:request_at] + [-1] * len(block) + kept.kept_index[request_at:]
        return ids, index, protect, got.tokens

    def prompt(self, buffer: ContextBuffer, request: CallRequest) -> tuple[list[int], list[bool]]:
        """The tokens a call without compression reads before its prefill, and which are protected: the rendered
        context with the retrieved MEMORY block spliced before the request (what fine-tuning trains on)."""
        return self._read(buffer, request, compressed=False)

    def read(self, buffer: ContextBuffer, request: CallRequest) -> tuple[list[int], list[bool]]:
        """The tokens a call reads after this path's compressor cut its context to B_t (what fine-tuning for a
        compressed row trains on), and which are protected (none marked when the compressor cut them)."""
        return self._read(buffer, request, compressed=True)

    def _read(self, buffer: ContextBuffer, request: CallRequest, compressed: bool) -> tuple[list[int], list[bool]]:
        if self.use is None:
            raise ValueError(NO_SCHEMA)
        ctx = self.render(buffer, request, self.use.schema)
        reserve = self.reserve(request)
        n = len(ctx)
        kept, protect = self.compress(ctx, request, reserve) if compressed else \
            (Compressed(list(range(n)), list(ctx.token_ids), n), ctx.protected_within(request.token_budget - reserve))
        ids, _, protect, _ = self.splice(buffer, ctx, kept, protect, request, reserve)
        return ids, protect if protect is not None else [False] * len(ids)

    def run(self, buffer: ContextBuffer, request: CallRequest, cancelled: Callable[[], bool] = lambda: False,
            on_phase: Callable[[str, float], None] = lambda phase, elapsed_ms: None,
            queued_at: Optional[float] = None) -> CallOutcome:
        """One call; never raises for planner output, server failures, deadline or cancellation.

        `queued_at` (time.monotonic()) is when the call was accepted, if it then waited for the model; latency and
        deadline run from there.
        """
        clock = PhaseClock(request.hard_deadline_ms, cancelled, on_phase, queued_at, request.slo_ms)
        outcome = CallOutcome(status=CallStatus.OK, slo_ms=request.slo_ms, compressor=self.options.compressor,
                              backend=self.backend.name)
        use = self.use  # this call's schema, whatever replaces it meanwhile
        if use is None:
            outcome.status, outcome.error = CallStatus.PLANNER_ERROR, NO_SCHEMA
            return self._finish(outcome, clock)
        use = self.use_for(use, request.agent_id)
        try:
            if self.options.recursion and recap_reuse(self.memory.system, request, outcome, clock):
                return self._finish(outcome, clock)  # BRACE reused the frame's S: no model call
            prompt = self._prompt(buffer, request, use.schema, clock, outcome)
            generated = self.backend.generate(prompt, request, use, clock, outcome)
            t0 = clock.begin(Phase.PARSE)
            if self.options.recursion:
                recap_answer(self.memory.system, outcome, generated.text, use.schema, request)
            else:
                parse_into(outcome, generated.text, use.schema, request.agent_id)
                self._veto(outcome, generated, request.agent_id)
            clock.end(Phase.PARSE, t0, generated.produced, len(outcome.steps))
        except CallAborted as exc:
            end_aborted(outcome, clock, str(exc))
        except BackendUnavailable as exc:
            outcome.status, outcome.error = CallStatus.UNAVAILABLE, str(exc)
        return self._finish(outcome, clock)

    def _veto(self, outcome: CallOutcome, generated: Generated, agent_id: str) -> None:
        """The lookahead veto on a parsed plan (veto.py; with veto_lost and a `predict`): a losing first step is
        replaced by the next-ranked one that does not lose, or the plan is refused."""
        if not self.options.veto_lost or self.predict is None or not outcome.steps:
            return
        vetting = vet(self.predict, agent_id, outcome.steps[0], generated.ranked, self.options.veto_tries)
        outcome.vetoed = [s.text() for s, _ in vetting.vetoed]
        if vetting.step is None:
            outcome.status, outcome.error, outcome.steps = CallStatus.PLANNER_ERROR, refusal(vetting), []
        elif vetting.vetoed:
            outcome.steps = [vetting.step]  # a ranked replacement is one step: the rest was planned after the first

    def _prompt(self, buffer: ContextBuffer, request: CallRequest, schema: ActionSchema, clock: PhaseClock,
                outcome: CallOutcome) -> Prompt:
        """context_compress, then retrieve: the prompt the backend reads."""
        t0 = clock.begin(Phase.CONTEXT_COMPRESS)
        try:
            checkpoint = checkpoint_of(clock.abort, "context_compress")
            checkpoint()
            ctx = self.render(buffer, request, schema, checkpoint)
            outcome.tokens_before = len(ctx)
            reserve = self.reserve(request)
            checkpoint()
            kept, protect = self.compress(ctx, request, reserve, clock.abort)
        except CallAborted:
            clock.end(Phase.CONTEXT_COMPRESS, t0, outcome.tokens_before, 0)
            raise
        compress_phase = clock.end(Phase.CONTEXT_COMPRESS, t0, len(ctx), kept.tokens_after)

        t0 = clock.begin(Phase.RETRIEVE)
        ids, index, protect, retrieved = self.splice(buffer, ctx, kept, protect, request, reserve)
        clock.end(Phase.RETRIEVE, t0, retrieved, len(ids) - kept.tokens_after)
        deepest = False
        if self.options.recursion:
            system = self.memory.system
            deepest = system.recap_need(request.agent_id).depth >= system.config.recap_max_depth - 1
        return Prompt(ctx, ids, index, protect, compress_phase, deepest)

    @staticmethod
    def _finish(outcome: CallOutcome, clock: PhaseClock) -> CallOutcome:
        outcome.phases = clock.phases
        outcome.latency_ms = clock.elapsed_ms()
        return outcome


def __getattr__(name: str):
    """`PlannerCallPath`, the in-process call path, and its `LocalModel` are imported on first use: they need torch."""
    if name in ("PlannerCallPath", "LocalModel"):
        from . import local_backend  # heavy: torch, which a server-backed planner never loads

        return getattr(local_backend, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
