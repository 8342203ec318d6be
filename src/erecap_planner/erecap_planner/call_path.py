"""One replanning call with phase accounting (paper Sec. 3.4, Alg. 1 lines 8-10).

[queue ->] context_compress -> retrieve -> prefill -> decode -> parse. Every phase records
its wall time and tokens in / out. With in-model E-RECAP the pruning happens
inside the prefill; its scoring and selection time is moved from the prefill
phase to context_compress so the overhead is not hidden in the planner. A call
checks its hard deadline (and a cancel request) before every decoder layer
and every generated token, so nothing runs past it. A call that waited for the
model (another call was running) starts its clock when it was queued: the wait
is its `queue` phase, counts in its latency and uses up its deadline, since the
agent waits for it too. A call past its deadline,
cancelled, or with output that is not a valid plan returns no steps (the agent
keeps its current plan) and a status saying why.

The action schema may change between calls (a world publishes its own at each
episode start): `set_schema` replaces it and what is derived from it at once,
and a call keeps the one it started with.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Optional

import torch

from brace_common.action_schema import ActionSchema, PlanError, Step
from brace_common.validation import json_depths
from brace_common.vocabulary import CallState, CallStatus, Decoding, Mode, Phase, meets_slo

from .compressors import Compressor, make_compressor
from .constrained import ConstrainedPlanDecoder
from .context import DEFAULT_SYSTEM_PROMPT, LAYOUTS, ContextBuffer, RenderedContext, TokenCounts
from .memory_phase import MemoryUse, call_blocks, goal_stack, memory_ids, retrieve, splice_memory
from .phase_clock import PhaseClock, PhaseRecord
from .plan_parser import parse_plan
from .predictor import PredictorBank
from .prefix_cache import PrefixCache
from .pruned_forward import CallAborted, ErecapModel
from .pruning import PruneSchedule
from .scoring import best_step, enumerate_steps
from .transformer import DecoderStack

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


@dataclass(frozen=True)
class SchemaUse:
    """An action schema and what a local call path derives from it: the valid skill calls (candidates and
    constrained decoding) and the constrained decoder. Replaced whole, so a running call keeps its own. Where the
    schema refuses an agent's own id (`not_self`), each agent's calls use their own, derived once (`per_agent`)."""

    schema: ActionSchema
    candidates: list[Step]
    constrained: Optional[ConstrainedPlanDecoder]
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

    @property
    def slo_met(self) -> bool:
        """l_t <= SLO_t (Eq. 6 counts the complement); a deadline miss never meets it."""
        return meets_slo(self.status, self.latency_ms, self.slo_ms)


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


INTERNAL_ERROR = "internal_error"
"""The reason at the head of a call record's error when the planner itself failed (a bug, not the model's output)."""


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


def no_schema_outcome(outcome: CallOutcome, clock: PhaseClock) -> CallOutcome:
    """`outcome` of a call that could not run because no schema is known: a planner error saying so."""
    outcome.status = CallStatus.PLANNER_ERROR
    outcome.error = NO_SCHEMA
    outcome.phases = clock.phases
    outcome.latency_ms = clock.elapsed_ms()
    return outcome


def checkpoint_of(abort: Callable[[], bool], where: str) -> Callable[[], None]:
    """A checkpoint for long work in phase `where`: raises CallAborted once `abort()` is true."""
    def checkpoint() -> None:
        if abort():
            raise CallAborted(f"during {where}")
    return checkpoint


def end_aborted(outcome: CallOutcome, clock: PhaseClock, why: str) -> None:
    """A call stopped by its cancel or hard deadline: no steps, the status saying which."""
    outcome.steps = []
    outcome.status = CallStatus.CANCELLED if clock.cancelled() else CallStatus.DEADLINE
    outcome.error = f"{'cancelled' if outcome.status == CallStatus.CANCELLED else 'hard deadline passed'} ({why})"


class PlannerCallPath:
    """Runs replanning calls on one local transformers model with one compressor."""

    def __init__(self, model, tokenizer, schema: Optional[ActionSchema], compressor: str = "erecap",
                 schedule: Optional[PruneSchedule] = None, predictors: Optional[PredictorBank] = None,
                 max_new_tokens: int = 64, system_prompt: str = DEFAULT_SYSTEM_PROMPT,
                 memory: Optional[MemoryUse] = None, protect_blocks: bool = True, model_name: str = "",
                 decoding: str = "json", decode_weights: str = "model",
                 plan_steps: Optional[dict[int, int]] = None, layout: str = "focus", prefix_reuse: bool = False,
                 max_context_tokens: Optional[int] = None):
        self.tokenizer = tokenizer
        self.compressor_name = compressor
        self.max_new_tokens = max_new_tokens
        self.system_prompt = system_prompt
        self.memory = memory
        if decoding not in DECODINGS:
            raise ValueError(f"decoding '{decoding}' is not one of {', '.join(DECODINGS)}")
        self.decoding = Decoding(decoding)
        self.use: Optional[SchemaUse] = None  # None until a schema is known (a world's, from world_info)
        if schema is not None:
            self.set_schema(schema)
        self.protect_blocks = protect_blocks
        self.plan_steps = dict(plan_steps or {})  # mode -> most steps of its plans (constrained decoding)
        if layout not in LAYOUTS:
            raise ValueError(f"layout '{layout}' is not one of {LAYOUTS}")
        self.layout = layout
        self.prefix = PrefixCache() if prefix_reuse else None
        self.max_context_tokens = max_context_tokens  # entries yield (yield_order) from longer prompts
        self.token_counts = TokenCounts(tokenizer)  # each entry's tokens, counted once
        self.model_name = model_name or getattr(model.config, "_name_or_path", "") or model.config.model_type
        self.stack = DecoderStack(model, packed=True, decode_weights=decode_weights)
        self.plain = ErecapModel(model, stack=self.stack)
        self.in_model = compressor == "erecap"
        if self.in_model:
            if schedule is None or predictors is None:
                raise ValueError("in-model E-RECAP needs a pruning schedule and a predictor bank")
            self.pruned = ErecapModel(model, schedule, predictors, stack=self.stack)
            self.compressor: Optional[Compressor] = None
        else:
            self.pruned = None
            self.compressor = make_compressor(compressor, schedule)
        configured = getattr(model.generation_config, "eos_token_id", None)
        configured = configured if isinstance(configured, (list, tuple)) else [configured]
        self.eos_ids = tuple(sorted({int(e) for e in [tokenizer.eos_token_id, *configured] if e is not None}))

    def set_schema(self, schema: ActionSchema) -> None:
        """Plan with `schema` from the next call on (the running one keeps its own); ValueError, the schema
        unchanged, when the decoding cannot use it (candidates and constrained decoding need every parameter
        enumerated, in at most scoring.MAX_CANDIDATES skill calls: CandidateLimit)."""
        candidates = enumerate_steps(schema) if self.decoding is not Decoding.JSON or self.memory is not None else []
        if self.decoding is not Decoding.JSON and not candidates:
            raise ValueError(f"{self.decoding.value} decoding needs actions whose parameters all have enumerated "
                             "choices")
        constrained = (ConstrainedPlanDecoder(self.tokenizer, candidates, schema.max_steps, schema.min_steps)
                       if self.decoding is Decoding.CONSTRAINED else None)
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

    @property
    def schema(self) -> Optional[ActionSchema]:
        """The schema the next call plans with (None: none known yet)."""
        return self.use.schema if self.use is not None else None

    @property
    def candidates(self) -> list[Step]:
        """The valid skill calls of the current schema (decoding candidates / constrained), else []."""
        return self.use.candidates if self.use is not None else []

    def request_text(self, agent_id: str, mode: int) -> str:
        """The REQUEST line for a mode (the current schema's actions)."""
        return request_text(self.schema, agent_id, mode)

    def render(self, buffer: ContextBuffer, request: CallRequest, schema: ActionSchema,
               checkpoint: Callable[[], None] = lambda: None) -> RenderedContext:
        """A call's uncompressed prompt: the context in this path's layout (with the goal stack in `recap`)."""
        return buffer.render(self.tokenizer, request.agent_id, request_text(schema, request.agent_id, request.mode),
                             self.system_prompt, call_blocks(buffer, self.layout, self.memory), self.layout,
                             self.max_context_tokens, checkpoint, self.token_counts,
                             goal_stack(self.memory, self.layout, request.agent_id))

    def prompt(self, buffer: ContextBuffer, request: CallRequest) -> tuple[list[int], list[bool]]:
        """The tokens a call with in-model pruning (or none) reads before its prefill, and which are protected: the
        rendered context with the retrieved MEMORY block spliced before the request (what fine-tuning trains on)."""
        if self.use is None:
            raise ValueError(NO_SCHEMA)
        ctx = self.render(buffer, request, self.use.schema)
        reserve = self.memory.reserve(request.token_budget, request.memory) if self.memory else 0
        got = retrieve(self.memory, self.tokenizer, buffer, request.agent_id, request.step, reserve,
                       self.layout)
        return splice_memory(memory_ids(self.tokenizer, got.lines, reserve), list(ctx.token_ids), ctx.request_start,
                             list(ctx.protected))

    def run(self, buffer: ContextBuffer, request: CallRequest, cancelled: Callable[[], bool] = lambda: False,
            on_phase: Callable[[str, float], None] = lambda phase, elapsed_ms: None,
            queued_at: Optional[float] = None) -> CallOutcome:
        """One call; never raises for planner output, deadline or cancellation.

        `queued_at` (time.monotonic()) is when the call was accepted, if it then
        waited for the model; latency and deadline run from there.
        """
        clock = PhaseClock(request.hard_deadline_ms, cancelled, on_phase, queued_at)
        abort, begin, end = clock.abort, clock.begin, clock.end
        deadline = clock.deadline
        outcome = CallOutcome(status=CallStatus.OK, slo_ms=request.slo_ms, compressor=self.compressor_name)
        use = self.use  # this call's schema, whatever replaces it meanwhile
        if use is None:
            return no_schema_outcome(outcome, clock)
        use = self.use_for(use, request.agent_id)

        try:
            # context_compress
            t0 = begin(Phase.CONTEXT_COMPRESS)
            try:
                checkpoint = checkpoint_of(abort, "context_compress")
                checkpoint()
                ctx = self.render(buffer, request, use.schema, checkpoint)
                outcome.tokens_before = len(ctx)
                reserve = self.memory.reserve(request.token_budget, request.memory) if self.memory else 0
                checkpoint()
                if self.in_model:
                    kept_ids, protect = list(ctx.token_ids), list(ctx.protected) if self.protect_blocks else None
                    request_at = ctx.request_start
                else:
                    compressed = self.compressor.compress(ctx, request.token_budget - reserve, should_abort=abort)
                    kept_ids = compressed.token_ids
                    request_at = compressed.position_of(ctx.request_start)
                    protect = None
            except CallAborted:
                end(Phase.CONTEXT_COMPRESS, t0, outcome.tokens_before, 0)
                raise
            compress_phase = end(Phase.CONTEXT_COMPRESS, t0, len(ctx), len(kept_ids))

            # retrieve
            t0 = begin(Phase.RETRIEVE)
            got = retrieve(self.memory, self.tokenizer, buffer, request.agent_id, request.step, reserve,
                           self.layout)
            block = memory_ids(self.tokenizer, got.lines, reserve)
            kept_ids, protect = splice_memory(block, kept_ids, request_at, protect)
            end(Phase.RETRIEVE, t0, got.tokens, len(block))
            if abort():
                raise CallAborted("before prefill")

            # prefill (in-model E-RECAP prunes here; its overhead is booked to context_compress)
            t0 = begin(Phase.PREFILL)
            ids = torch.tensor(kept_ids)
            if self.in_model:
                mask = torch.tensor(protect) if protect is not None else None
                pre = self.pruned.prefill(ids, token_budget=request.token_budget, protect=mask, should_abort=abort,
                                          prefix=self.prefix)
                compress_phase.duration_ms += pre.prune_ms
                compress_phase.tokens_out = pre.tokens_after
                tokens_after = pre.tokens_after
            else:
                pre = self.plain.prefill(ids, should_abort=abort, prefix=self.prefix)
                tokens_after = len(kept_ids)
            end(Phase.PREFILL, t0, len(kept_ids), tokens_after, minus_ms=pre.prune_ms)
            outcome.tokens_after = tokens_after
            outcome.tokens_reused = pre.tokens_reused

            # decode (free JSON generation, or scoring every valid candidate), then parse
            t0 = begin(Phase.DECODE)
            if self.decoding is Decoding.CANDIDATES:
                step, _ = best_step(self.plain, pre, self.tokenizer, use.candidates, should_abort=abort)
                text = json.dumps({"plan": [{"action": step.action, "parameters": step.parameters}]})
                produced = len(use.candidates)
            elif self.decoding is Decoding.CONSTRAINED:
                constrained = use.constrained.decode(self.plain, pre, should_abort=abort,
                                                      max_steps=self.plan_steps.get(request.mode))
                text, produced = constrained.text, constrained.tokens
            else:
                dec = self.plain.decode(pre, self.max_new_tokens, self.eos_ids, deadline=deadline,
                                        should_stop=lambda toks: cancelled() or json_object_closed(
                                            self.tokenizer.decode(toks, skip_special_tokens=True)))
                text = self.tokenizer.decode(dec.token_ids, skip_special_tokens=True)
                produced = len(dec.token_ids)
            outcome.output_text = text
            end(Phase.DECODE, t0, tokens_after, produced)
            if abort():
                raise CallAborted("deadline or cancel during decode")

            t0 = begin(Phase.PARSE)
            parse_into(outcome, text, use.schema, request.agent_id)
            end(Phase.PARSE, t0, produced, len(outcome.steps))
        except CallAborted as exc:
            end_aborted(outcome, clock, str(exc))
        outcome.phases = clock.phases
        outcome.latency_ms = clock.elapsed_ms()
        return outcome
