"""Build the call path a PlannerConfig names: the in-process model, or a planner server with local compression.

Every failure is a ConfigError naming the parameter to fix (the node reports it at configure). Only the in-process
branch (and prompt-level E-RECAP, whose scorer is a local model) imports torch.
"""

from __future__ import annotations

import os
from dataclasses import replace
from typing import TYPE_CHECKING, Optional

from brace_common.action_schema import ActionSchema
from brace_common.backoff import Backoff
from brace_common.config import ConfigError, resolve_path
from brace_common.session_graph import Embedder
from brace_memory.rag import load_passages
from brace_memory.store import MemoryStore, StoreError
from brace_memory.system import MemorySystem, MemorySystemConfig

from .call_path import CallOptions, CallPath
from .candidates import CandidateLimit
from .compressors import make_compressor
from .config import PlannerConfig
from .memory_phase import MemoryUse
from .memory_summariser import ChatSummariser
from .models import resolve_model_path
from .openai_client import OpenAIClient
from .prune_schedule import PruneSchedule, table8_layers
from .server_backend import ServerBackend
from .tokenizer_file import TokenizerFile

if TYPE_CHECKING:
    from .predictor import PredictorBank

def load_schema(cfg: PlannerConfig) -> Optional[ActionSchema]:
    """The action schema `cfg` names; None when it comes from the world (WorldInfo)."""
    if cfg.schema_from_world():
        return None

    try:
        return cfg.planner_schema(ActionSchema.load(cfg.schema_path()))
    except (OSError, ValueError) as exc:
        raise ConfigError("action_schema_file", f"cannot load {cfg.schema_path()}: {exc}") from None


def load_local_model(cfg: PlannerConfig, logger=None):
    """(model, tokenizer, precision) of `cfg.model_path` with the adapter merged."""
    import torch  # heavy: only a planner that runs a model here loads torch

    from .models import load_model  # heavy, as torch above
    from .precision import resolve

    if cfg.torch_threads:
        torch.set_num_threads(cfg.torch_threads)   # process-wide: the planner is the process's model
    precision = resolve(cfg.device, cfg.dtype, cfg.decode_weights)  # ConfigError naming the parameter
    if logger is not None:
        threads = f", {cfg.torch_threads} intra-op thread(s)" if cfg.torch_threads else ""
        logger.info(f"precision: {precision.device}, {precision.reason}{threads}")
    try:
        model, tokenizer = load_model(cfg.model_path, precision.device, precision.dtype)
    except (FileNotFoundError, OSError, ValueError) as exc:
        raise ConfigError("model_path", str(exc)) from None
    if cfg.adapter_path:
        from .adapter import AdapterMismatchError, merge_adapter  # only with an adapter

        try:
            merge_adapter(model, resolve_path(cfg.adapter_path))
        except (AdapterMismatchError, FileNotFoundError, OSError) as exc:
            raise ConfigError("adapter_path", str(exc)) from None
    return model, tokenizer, precision


def load_tokenizer(cfg: PlannerConfig):
    """The tokenizer of `cfg.model_path` alone (a server backend that compresses without a scorer model): read with
    `tokenizers` where the folder allows (no transformers, no torch), else with transformers."""
    try:
        folder = resolve_model_path(cfg.model_path)
        tokenizer = TokenizerFile.load(folder)
        if tokenizer is not None:
            return tokenizer
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        from transformers import AutoTokenizer  # a tokenizer only transformers reads

        return AutoTokenizer.from_pretrained(folder)
    except (FileNotFoundError, OSError, ValueError) as exc:
        raise ConfigError("model_path", str(exc)) from None


def pruning_schedule(cfg: PlannerConfig, depth: int) -> PruneSchedule:
    """The pruning schedule of `cfg` for a model `depth` layers deep."""
    layers = cfg.pruning_layers or table8_layers(depth)
    schedule = PruneSchedule(tuple(layers), cfg.keep_ratio, cfg.head_tokens, cfg.tail_min, cfg.tail_frac, cfg.first_cut)
    try:
        schedule.validate(depth)
    except ValueError as exc:
        raise ConfigError("pruning_layers", str(exc)) from None
    return schedule


def prompt_scoring_schedule(schedule: PruneSchedule, layers: int) -> PruneSchedule:
    """The schedule of a prompt-level scorer that runs only the first `layers` pruning layers (0 = all of them).

    Its last layer keeps B_t at once (one stage), so the scorer stops as early as it can.
    """
    if layers <= 0 or layers >= len(schedule.layers):
        return schedule
    return replace(schedule, layers=schedule.layers[:layers], first_cut=0.0 if layers == 1 else schedule.first_cut)


def load_predictors(cfg: PlannerConfig, model_config, layers: tuple[int, ...], logger=None) -> PredictorBank:
    """The trained predictor `cfg` names, or an untrained one (warned)."""
    from .predictor import PredictorBank, PredictorMismatchError  # heavy: torch

    if cfg.predictor_path:
        try:
            predictors = PredictorBank.load(resolve_path(cfg.predictor_path), model_config)
            predictors.check_compatible(model_config, list(layers))
        except (PredictorMismatchError, FileNotFoundError) as exc:
            raise ConfigError("predictor_path", str(exc)) from None
        return predictors
    if logger is not None:
        logger.warning("no predictor_path: E-RECAP runs with an UNTRAINED predictor (random token scores)")
    return PredictorBank.for_model(model_config, list(layers))


def build_summariser(cfg: PlannerConfig) -> Optional[ChatSummariser]:
    """OmniAct's episodic summariser on the chat API `memory_summariser_url` names (None: templates only); the key
    of `api_key_env` goes only to server_url's host and port (ConfigError naming the parameter)."""
    if not cfg.memory_summariser_url:
        return None
    key = os.environ.get(cfg.api_key_env, "") if cfg.api_key_env else ""
    try:
        client = OpenAIClient(cfg.memory_summariser_url, "", cfg.connect_timeout_s)
    except ValueError as exc:
        raise ConfigError("memory_summariser_url", str(exc)) from None
    try:
        planner_server = OpenAIClient(cfg.server_url)
    except ValueError:
        planner_server = None
    if key and planner_server is not None and (planner_server.host, planner_server.port, planner_server.tls) == \
            (client.host, client.port, client.tls):
        client = OpenAIClient(cfg.memory_summariser_url, key, cfg.connect_timeout_s)
    return ChatSummariser(client, cfg.memory_summariser_model, cfg.memory_summariser_timeout_s)


def load_state_encoder(path: str) -> Optional[Embedder]:
    """GiG's scene-graph encoder saved at `path` as an Embedder (None when `path` is empty; ConfigError naming
    state_encoder_path when it cannot be loaded)."""
    if not path:
        return None
    try:
        from brace_memory.state_encoder import StateEncoder  # torch and the sentence encoder: only when asked for
        return StateEncoder.load(os.path.expanduser(path)).embed
    except (OSError, ValueError, ImportError) as exc:
        raise ConfigError("state_encoder_path", str(exc)) from None


def build_memory(cfg: PlannerConfig, logger=None) -> MemoryUse:
    """The memory modules `cfg` composes, their store, corpus and priors, and the episodic summariser (ConfigError
    naming the parameter; `logger` hears, throttled, why a summary was not applied)."""
    corpus, priors = [], []
    for name in ("memory_corpus_file", "memory_priors_file"):
        value = getattr(cfg, name)
        if value:
            try:
                (corpus if name == "memory_corpus_file" else priors).extend(load_passages(resolve_path(value)))
            except ValueError as exc:
                raise ConfigError(name, str(exc)) from None
    try:
        store = MemoryStore(os.path.expanduser(cfg.memory_store_path) or None, cfg.memory_max_records)
    except (StoreError, OSError) as exc:
        raise ConfigError("memory_store_path", str(exc)) from None
    try:
        summariser = build_summariser(cfg)
    except ConfigError:
        store.close()
        raise
    log = None if logger is None else (lambda text: logger.warning(text, throttle_duration_sec=10.0))
    try:
        embed = load_state_encoder(cfg.state_encoder_path)
    except ConfigError:
        store.close()
        raise
    system = MemorySystem(memory_config(cfg), store, corpus=corpus, priors=priors, summariser=summariser, log=log,
                          embed=embed)
    return MemoryUse(system, cfg.memory_share, cfg.recap_window)


def memory_config(cfg: PlannerConfig) -> MemorySystemConfig:
    """The memory modules `cfg` composes and their bounds."""
    return MemorySystemConfig(modules=tuple(cfg.memory_modules), tree_depth=cfg.recap_depth,
                              max_lines=cfg.memory_max_lines, scene_hops=cfg.memory_scene_hops,
                              scene_cell_m=cfg.memory_scene_cell_m, tau=cfg.experience_tau,
                              lookahead_candidates=cfg.lookahead_candidates, recursion=cfg.recap_recursion,
                              recap_max_depth=cfg.recap_max_depth)


def call_options(cfg: PlannerConfig) -> CallOptions:
    """What every call of `cfg`'s call path shares."""
    return CallOptions(compressor=cfg.compressor, max_new_tokens=cfg.max_new_tokens, system_prompt=cfg.system_prompt,
                       layout=cfg.context_layout, max_context_tokens=cfg.max_context_tokens,
                       plan_steps={mode: n for mode, n in enumerate(cfg.plan_steps) if n}, decoding=cfg.decoding,
                       protect_blocks=cfg.protect_blocks, end_plan_at_slo=cfg.end_plan_at_slo,
                       recursion=cfg.recap_recursion, think_tokens=cfg.recap_think_tokens, veto_lost=cfg.veto_lost,
                       veto_tries=cfg.veto_tries)


def with_schema(path: CallPath, schema: Optional[ActionSchema]) -> CallPath:
    """`path` planning with `schema` (none yet: the world's comes later); ConfigError naming the parameter, the
    memory system closed, when the schema does not fit the decoding."""
    if schema is None:
        return path
    try:
        path.set_schema(schema)
    except CandidateLimit as exc:
        path.memory.system.close()
        raise ConfigError("action_schema_file", str(exc)) from None
    except ValueError as exc:  # set_schema's other refusal: the decoding needs enumerated parameters
        path.memory.system.close()
        raise ConfigError("decoding", str(exc)) from None
    return path


def build_local(cfg: PlannerConfig, schema: Optional[ActionSchema], logger=None) -> CallPath:
    """The in-process call path: model, schedule, predictor (E-RECAP) and decoding of `cfg`."""
    from .local_backend import LocalModel, PlannerCallPath  # heavy: torch

    model, tokenizer, precision = load_local_model(cfg, logger)
    schedule = pruning_schedule(cfg, model.config.num_hidden_layers)
    predictors = load_predictors(cfg, model.config, schedule.layers, logger) if cfg.compressor == "erecap" else None
    local = LocalModel(model, tokenizer, schedule, predictors, name=cfg.model_path,
                       decode_weights=precision.decode_weights, prefix_reuse=cfg.prefix_reuse)
    return with_schema(PlannerCallPath(local, call_options(cfg), memory=build_memory(cfg, logger)), schema)


def build_server(cfg: PlannerConfig, schema: Optional[ActionSchema], logger=None) -> CallPath:
    """The server call path: local tokenizer and compressor (E-RECAP: the local model scores), remote decoding."""
    try:
        client = OpenAIClient(cfg.server_url, os.environ.get(cfg.api_key_env, "") if cfg.api_key_env else "",
                              cfg.connect_timeout_s)
    except ValueError as exc:
        raise ConfigError("server_url", str(exc)) from None
    if cfg.compressor == "erecap":
        from .pruned_forward import ErecapModel  # heavy: the scorer is a local model (torch)

        model, tokenizer, _ = load_local_model(cfg, logger)
        full = pruning_schedule(cfg, model.config.num_hidden_layers)
        predictors = load_predictors(cfg, model.config, full.layers, logger)  # trained for the whole schedule
        schedule = prompt_scoring_schedule(full, cfg.prompt_scoring_layers)
        compressor = make_compressor("erecap", schedule,
                                     scorer=ErecapModel(model, schedule, predictors.subset(list(schedule.layers))))
    else:
        tokenizer = load_tokenizer(cfg)
        compressor = make_compressor(cfg.compressor, PruneSchedule((), 1.0, cfg.head_tokens, cfg.tail_min,
                                                                   cfg.tail_frac))
    options = call_options(cfg)
    backend = ServerBackend(client, tokenizer, options, cfg.server_model, endpoint=cfg.endpoint,
                            structured_output=cfg.structured_output,
                            backoff=Backoff(cfg.retry_backoff_s, cfg.retry_backoff_max_s))
    return with_schema(CallPath(backend, options, compressor, memory=build_memory(cfg, logger)), schema)


def build_call_path(cfg: PlannerConfig, logger=None, schema: Optional[ActionSchema] = None) -> CallPath:
    """The call path of `cfg.backend` (without a schema until the world's arrives, when `cfg` names no file);
    ConfigError naming the parameter on failure."""
    schema = schema if schema is not None else load_schema(cfg)
    return build_server(cfg, schema, logger) if cfg.backend == "openai" else build_local(cfg, schema, logger)


def describe(cfg: PlannerConfig, path: CallPath) -> str:
    """What `build_call_path` built, in a line (the node logs it at configure)."""
    if cfg.backend == "openai":
        return (f"planner server {path.backend.client.base_url} ({cfg.endpoint}, structured output "
                f"{cfg.structured_output}), compressor '{cfg.compressor}' here (tokenizer of '{cfg.model_path}')")
    pruned = path.backend.pruned
    return (f"model '{cfg.model_path}' on {path.backend.device}, compressor '{cfg.compressor}', keep ratio "
            f"{cfg.keep_ratio}, pruning layers {list(pruned.schedule.layers) if pruned else []}")
