"""The in-process backend: the model's prefill (in-model E-RECAP prunes there) and decode, behind call_path.Backend.

Imports torch: only an in-process planner loads this module. `PlannerCallPath` builds a CallPath on it from a
`LocalModel` and the CallOptions (the planner's factory, training and bench scripts).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Optional

import torch

from brace_common.action_schema import ActionSchema
from brace_common.counters import Health
from brace_common.vocabulary import Decoding, Phase

from .call_aborted import CallAborted
from .call_path import CallOptions, CallOutcome, CallPath, CallRequest, Generated, Prompt, SchemaUse, json_object_closed
from .compressors import make_compressor
from .memory_phase import MemoryUse
from .phase_clock import PhaseClock
from .predictor import PredictorBank
from .prefix_cache import PrefixCache
from .pruned_forward import ErecapModel
from .pruning import PruneSchedule
from .scoring import ranked_steps
from .transformer import DecoderStack


@dataclass(frozen=True)
class InModelPruning:
    """In-model E-RECAP: where the prefill prunes and the predictors that score the tokens there."""

    schedule: PruneSchedule
    predictors: PredictorBank


class LocalBackend:
    """One transformers model in this process: prefill (pruned with `pruning` when given) and decode."""

    name = "local"

    def __init__(self, model, tokenizer, options: CallOptions, pruning: Optional[InModelPruning] = None, *,
                 decode_weights: str = "model", prefix_reuse: bool = False) -> None:
        self.tokenizer = tokenizer
        self.options = options
        self.decoding = Decoding(options.decoding)
        self.model_name = getattr(model.config, "_name_or_path", "") or model.config.model_type  # the ReplanCall's
        self.stack = DecoderStack(model, packed=True, decode_weights=decode_weights)
        self.plain = ErecapModel(model, stack=self.stack)
        self.pruned = (ErecapModel(model, pruning.schedule, pruning.predictors, stack=self.stack)
                       if pruning is not None else None)
        self.prefix = PrefixCache() if prefix_reuse else None
        configured = getattr(model.generation_config, "eos_token_id", None)
        configured = configured if isinstance(configured, (list, tuple)) else [configured]
        self.eos_ids = tuple(sorted({int(e) for e in [tokenizer.eos_token_id, *configured] if e is not None}))

    def health(self) -> Health:
        """The model's dtypes, the context layout and, with prefix reuse, how much of the prompts it reused."""
        values = {"backend": self.name, "dtype": str(self.stack.dtype).replace("torch.", ""),
                  "decode_weights": self.stack.decode_weights, "context_layout": self.options.layout}
        if self.prefix is not None:
            stats = self.prefix.stats
            values.update({"prefix.hit_rate": round(stats.hit_rate, 3), "prefix.reused_share":
                           round(stats.reuse_share, 3), "prefix.tokens_reused": stats.tokens_reused})
        return Health(values)

    @property
    def device(self):
        """Where the model runs."""
        return self.plain.device

    def generate(self, prompt: Prompt, request: CallRequest, use: SchemaUse, clock: PhaseClock,
                 outcome: CallOutcome) -> Generated:
        """prefill (in-model E-RECAP prunes here; its selection is booked to context_compress), then decode."""
        abort = clock.abort
        if abort():
            raise CallAborted("before prefill")
        t0 = clock.begin(Phase.PREFILL)
        ids = torch.tensor(prompt.ids)
        if self.pruned is not None:
            mask = torch.tensor(prompt.protect) if prompt.protect is not None else None
            pre = self.pruned.prefill(ids, token_budget=request.token_budget, protect=mask, should_abort=abort,
                                      prefix=self.prefix)
            prompt.compress_phase.duration_ms += pre.prune_ms
            prompt.compress_phase.tokens_out = pre.tokens_after
            tokens_after = pre.tokens_after
        else:
            pre = self.plain.prefill(ids, should_abort=abort, prefix=self.prefix)
            tokens_after = len(prompt.ids)
        clock.end(Phase.PREFILL, t0, len(prompt.ids), tokens_after, minus_ms=pre.prune_ms)
        outcome.tokens_after = tokens_after
        outcome.tokens_reused = pre.tokens_reused

        t0 = clock.begin(Phase.DECODE)
        ranked = []
        if self.decoding is Decoding.CANDIDATES:
            ranked = ranked_steps(self.plain, pre, self.tokenizer, use.candidates, should_abort=abort)
            step = ranked[0]
            text = json.dumps({"plan": [{"action": step.action, "parameters": step.parameters}]})
            produced = len(use.candidates)
        elif self.decoding is Decoding.CONSTRAINED and self.options.recursion:
            answer = use.constrained.decode(self.plain, pre, deepest=prompt.deepest, should_abort=abort)
            text, produced = answer.text, answer.tokens
        elif self.decoding is Decoding.CONSTRAINED:
            constrained = use.constrained.decode(self.plain, pre, should_abort=abort,
                                                 max_steps=self.options.plan_steps.get(request.mode),
                                                 end_by=clock.slo_at if self.options.end_plan_at_slo else None)
            text, produced = constrained.text, constrained.tokens
            outcome.cut_at_slo = constrained.cut
        else:
            dec = self.plain.decode(pre, self.options.max_new_tokens, self.eos_ids, deadline=clock.deadline,
                                    should_stop=lambda toks: clock.cancelled() or json_object_closed(
                                        self.tokenizer.decode(toks, skip_special_tokens=True)))
            text = self.tokenizer.decode(dec.token_ids, skip_special_tokens=True)
            produced = len(dec.token_ids)
        outcome.output_text = text
        clock.end(Phase.DECODE, t0, tokens_after, produced)
        if abort():
            raise CallAborted("deadline or cancel during decode")
        return Generated(text, produced, ranked)


@dataclass(frozen=True)
class LocalModel:
    """The model an in-process call path runs, and how: `schedule` prunes inside it with `predictors` (in-model
    E-RECAP) or sizes a prompt-level compressor's head and tail; `name` is the ReplanCall's `model` ("": the model's
    own); `decode_weights` and `prefix_reuse` as LocalBackend takes them."""

    model: Any
    tokenizer: Any
    schedule: Optional[PruneSchedule] = None
    predictors: Optional[PredictorBank] = None
    name: str = ""
    decode_weights: str = "model"
    prefix_reuse: bool = False


def PlannerCallPath(local: LocalModel, options: Optional[CallOptions] = None,  # noqa: N802
                    schema: Optional[ActionSchema] = None, memory: Optional[MemoryUse] = None) -> CallPath:
    """The in-process CallPath of `options` (None: the defaults) on `local` (ValueError naming what is wrong):
    compressor erecap prunes inside the model by its schedule and predictors; a baseline compresses before it."""
    options = options if options is not None else CallOptions()
    pruning, compressor = None, None
    if options.compressor == "erecap":
        if local.schedule is None or local.predictors is None:
            raise ValueError("in-model E-RECAP needs a pruning schedule and a predictor bank")
        pruning = InModelPruning(local.schedule, local.predictors)
    else:
        compressor = make_compressor(options.compressor, local.schedule)
    backend = LocalBackend(local.model, local.tokenizer, options, pruning, decode_weights=local.decode_weights,
                           prefix_reuse=local.prefix_reuse)
    backend.model_name = local.name or backend.model_name
    return CallPath(backend, options, compressor, schema, memory)
