"""Validated configuration of the E-RECAP planner node (one field = one ROS parameter)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from brace_common.action_schema import ActionSchema
from brace_common.config import (
    ConfigError,
    autostart_param,
    check_base_url_param,
    check_fields,
    diagnostics_period_param,
    package_file,
    param,
    resolve_path,
)
from brace_common.validation import MAX_RECAP_DEPTH
from brace_common.vocabulary import Decoding
from brace_memory.memory_write import with_memory_write
from brace_memory.system import check_modules

from .compressors import BASELINES
from .context import DEFAULT_SYSTEM_PROMPT, LAYOUTS, ContextLimits
from .precision import DECODE_WEIGHTS, DTYPES
from .server_backend import ENDPOINTS, STRUCTURED_OUTPUTS

BACKENDS = ("local", "openai")
"""local: the model runs in the planner process; openai: an OpenAI-compatible server runs it."""

COMPRESSORS = ("erecap", *BASELINES)


SHIPPED_SCHEMA = "package://erecap_planner/config/action_schema.yaml"
"""The action schema shipped with erecap_planner (action_schema_file's default)."""


def default_schema_path() -> Path:
    """The action schema shipped with the package (installed share, else the source tree)."""
    return package_file("erecap_planner", "config/action_schema.yaml", Path(__file__).resolve().parents[1])


@dataclass
class PlannerConfig:
    """Parameters of the erecap_planner node."""

    backend: str = param("local", "'local' (the model in this process) or 'openai' (an OpenAI-compatible server "
                         "at server_url; the context is compressed here, before the request)")
    server_url: str = param("http://127.0.0.1:8001/v1", "backend openai: base URL of the server's OpenAI API "
                                                           "(8001: 8000 is OpenVLA's)")
    server_model: str = param("", "backend openai: model name sent with each request; empty = the first model the "
                              "server lists at GET /models")
    api_key_env: str = param("", "backend openai: NAME of the environment variable holding the API key (the key "
                             "itself is never a parameter and never logged); empty = no key")
    endpoint: str = param("chat", "backend openai: 'chat' (/chat/completions, the server's chat template) or "
                          "'completions' (/completions with the locally templated, compressed prompt)")
    structured_output: str = param("none", "backend openai: 'json_schema' (vLLM, SGLang, llama.cpp server), "
                                   "'json_object' (llama-cpp-python server) or 'none' (free text, validated here)")
    connect_timeout_s: float = param(1.0, "backend openai: longest wait for a TCP connection (s)", 0.01, 60.0)
    retry_backoff_s: float = param(0.1, "backend openai: first backoff after a failed request (s), doubled per "
                                   "failure", 0.001, 60.0)
    retry_backoff_max_s: float = param(5.0, "backend openai: longest backoff (s); Retry-After may ask more",
                                       0.001, 600.0)
    server_probe_period_s: float = param(1.0, "backend openai: period of GET /models while the server has not "
                                         "answered (the action is served only after it has); 5x that after",
                                         0.05, 600.0)
    server_load_period_s: float = param(0.25, "backend openai: period of GET /metrics, the server's requests "
                                        "running and waiting, published on server_load for the controller (a fleet "
                                        "sharing the server); 0 = off. A server without load gauges is asked once",
                                        0.0, 60.0)
    prompt_scoring_layers: int = param(1, "backend openai, compressor erecap (prompt-level): how many of the "
                                       "schedule's pruning layers the local scorer runs before it keeps the B_t "
                                       "tokens to send; 1 = the first only (a fraction of a local prefill), 0 = all "
                                       "(the in-model selection, about a local prefill's cost)", 0, 1000)
    model_path: str = param("smollm2-135m-instruct",
                            "a packaged model, 'smollm2-135m-instruct' or 'gemma3-270m' (converted once), or a "
                            "local HF model folder")
    device: str = param("auto", "'auto' (GPU when present), 'cpu', 'cuda', 'cuda:N'")
    dtype: str = param("auto", "'auto' (bfloat16 where the CPU or GPU computes it natively, else float32), "
                       "'float32', 'bfloat16', 'float16'")
    decode_weights: str = param("auto", "weights of decode-sized forwards: 'auto' (float16 for a float32 model on the "
                                "CPU, else the model's), 'model', 'float16', 'int8' (lossy: 7-bit activations)")
    compressor: str = param("erecap", "erecap (in-model pruning) | none | random | recency | summary")
    keep_ratio: float = param(0.7, "r: per-pruning-layer keep ratio (Eq. 4)", 1e-6, 1.0)
    pruning_layers: list[int] = param([], "layers that prune; empty = paper Table 8 scaled to the model depth")
    head_tokens: int = param(4, "head tokens always kept (Eq. 5)", 0, 1024)
    first_cut: float = param(0.0, "two-stage prefill: the first pruning layer keeps at most first_cut x B_t tokens "
                             "and the later ones go on to B_t, so the prefill's cost follows B_t; 0 = the paper's "
                             "Table 8 progressive schedule", 0.0, 100.0)
    tail_min: int = param(16, "minimum tail window (Eq. 5: max(tail_min, ceil(tail_frac N)))", 0, 100000)
    tail_frac: float = param(0.1, "tail window fraction of N", 0.0, 1.0)
    adapter_path: str = param("", "LoRA adapter merged into the model at configure (.safetensors; "
                              "'package://<pkg>/<path>' = a file installed with a package); empty = none")
    predictor_path: str = param("", "trained predictor checkpoint (.safetensors; 'package://<pkg>/<path>' "
                                "allowed); empty = untrained predictor (warned)")
    max_new_tokens: int = param(64, "decode limit per call", 1, 8192)
    torch_threads: int = param(0, "intra-op threads of the in-process model (0 = PyTorch's default: one per core); "
                               "1 where the planner shares a small CPU with the other nodes of one process (their "
                               "threads and the GIL stall two OpenMP threads at every barrier)", 0, 256)
    plan_steps: list[int] = param([0, 0, 2], "most steps of a plan per mode [full_replan, partial_replan, "
                                  "reuse_subplan] with constrained decoding (0 = the action schema's max_steps): "
                                  "a reuse call confirms a short subplan, so it decodes less")
    end_plan_at_slo: bool = param(False, "in-process constrained decoding ends a plan at the step boundary where one more step "
                                  "(as long as its longest so far) would finish past the call's SLO_t: the steps "
                                  "chosen so far are the plan (decoding is what B_t does not shrink)")
    decoding: str = param("json", "'json': generate the plan; 'candidates': score every valid skill call; "
                          "'constrained': generate a plan restricted to valid skill calls (small models)")
    action_schema_file: str = param(SHIPPED_SCHEMA, "YAML action schema ('package://<pkg>/<path>' allowed); empty = "
                                    "the world's, from world_info (WorldInfo, latched at each episode start; a call "
                                    "before it waits for it)")
    system_prompt: str = param(DEFAULT_SYSTEM_PROMPT, "system prompt of every call")
    protect_blocks: bool = param(True, "task / state / constraints / coordination tokens outrank predictor scores")
    context_layout: str = param("focus", "'focus': the agent's own entries moved to a FOR section next to the request; "
                                "'stable_first': everything that only grows first, in arrival order (a new entry "
                                "only appends, so calls share a prefix), the states and the FOR section last; "
                                "'recap': focus with ReCAP's goal stack before the request and a window of the "
                                "newest recap_window history entries")
    recap_depth: int = param(3, "context_layout recap: plan levels of an agent's goal stack (a repair after a failed "
                             "step is a level; beyond it the levels between the root and the deepest yield)", 1, 16)
    recap_window: int = param(8, "context_layout recap: history entries kept in the prompt (the newest; with "
                              "recap_recursion the agent's own since its top frame opened)", 0, 100000)
    recap_recursion: bool = param(False, "ReCAP Alg. 1: each call answers a thought and subtasks (skill calls or the "
                                  "schema's composite subtasks) for the agent's top frame, a composite opens a child "
                                  "frame, an empty list returns to the parent (docs/memory.md); needs context_layout "
                                  "recap and decoding json or constrained")
    recap_max_depth: int = param(4, "recap_recursion: frames an agent's stack holds at most (the root included); the "
                                 "deepest frame's answers hold no composite subtask", 1, MAX_RECAP_DEPTH)
    recap_think_tokens: int = param(32, "recap_recursion with decoding constrained: the longest thought the planner "
                                    "writes (tokens; 0: none)", 0, 512)
    memory_modules: list[str] = param([], "memory modules on the retrieve phase, in any order: episodic (OmniAct "
                                      "event-boundary records; the history they folded leaves the prompt), "
                                      "reflective (failure reflections, priors, notes), rag_static (memory_corpus_"
                                      "file), rag_memory (this run's records by relevance), state_graph (GiG: a "
                                      "loop warning when the agent's state revisits its session graph), experience "
                                      "(GiG: the next actions of the nearest state of a successful episode), lookahead "
                                      "(GiG: the projected next state of a few candidate steps, through the world's "
                                      "lookahead service); empty = none")
    memory_scene_hops: int = param(2, "state_graph, experience: an agent's state is the scene graph its relations "
                                   "reach within this many edges of the world_state topic's state, other agents "
                                   "left out (0 = the whole scene: a one-agent world)", 0, 100)
    memory_scene_cell_m: float = param(1.0, "state_graph, experience: grid cell (m) the agent's own pose is rounded "
                                       "to in its state (0 = pose left out)", 0.0, 1e6)
    experience_tau: float = param(0.1, "experience: a state matches a stored state whose embedding is closer than "
                                  "this (GiG's tau; an equal scene graph key always matches)", 0.0, 100.0)
    lookahead_candidates: int = param(3, "lookahead: candidate steps a call projects (the current step, an "
                                      "experience's next actions, then the valid calls most relevant to the goal)",
                                      1, 64)
    lookahead_timeout_s: float = param(0.25, "lookahead: longest wait for the world's answer on one candidate (s); "
                                       "a later one is left out (lookahead.late)", 0.001, 10.0)
    veto_lost: bool = param(False, "the lookahead veto (ours; docs/memory.md): a plan whose first step the world's "
                            "lookahead projects to lose the agent's task is refused, the next-ranked valid call "
                            "(decoding candidates) taking its place; projects through the world's lookahead "
                            "service (lookahead_timeout_s); not with recap_recursion")
    veto_tries: int = param(3, "veto_lost: ranked steps one call projects at most before it refuses the plan", 1, 64)
    state_encoder_path: str = param("", "experience: directory of GiG's scene-graph encoder (state_encoder_cli "
                                    "writes it; '~' expanded); empty = keys only (exact states)")
    memory_share: float = param(0.25, "most of B_t that retrieved memory may take (its tokens count inside B_t: the "
                                "context is compressed to the rest)", 0.0, 0.9)
    memory_max_lines: int = param(8, "most retrieved lines per call", 1, 256)
    memory_store_path: str = param("", "SQLite file of the agents' memory, kept across episodes and runs (created "
                                   "when missing; '~' expanded); empty = held in this process only")
    memory_max_records: int = param(1000, "records kept per agent and kind (episodic, failure, note) in the store: "
                                    "the least recently updated yields", 1, 10**7)
    memory_corpus_file: str = param("", "rag_static's corpus: a YAML list of passages {text, keys} ('package://"
                                    "<pkg>/<path>' allowed)")
    memory_priors_file: str = param("", "reflective's static priors (skills, constraints), same format as the "
                                    "corpus: a passage is retrieved when the call names one of its keys; empty = "
                                    "none")
    memory_write: bool = param(False, "plans may call store_memory(text) (OmniAct's explicit memory write): the "
                               "skill joins the planner's action schema, the planner takes its steps off the plan "
                               "and reflective memory keeps each text as a note; needs memory module reflective or "
                               "rag_memory and decoding json (constrained and candidates decoding never write free "
                               "text)")
    memory_summariser_url: str = param("", "OmniAct's LLM summariser of episodic records (App. H): base URL of an "
                                       "OpenAI-compatible chat API (the planner server's server_url, or another); "
                                       "empty = templates only. A record is written from its template at once and "
                                       "rewritten when a valid summary arrives (one background worker); needs "
                                       "memory module episodic or rag_memory; api_key_env's key is sent only to "
                                       "server_url's host and port")
    memory_summariser_model: str = param("", "memory_summariser_url: model name sent with each summary request; "
                                         "empty = none (a server pinned to one model)")
    memory_summariser_timeout_s: float = param(30.0, "memory_summariser_url: longest one summary may take (s); past "
                                               "it the template record stays (memory.summaries.failed.deadline)",
                                               0.1, 600.0)
    prefix_reuse: bool = param(False, "reuse the previous call's prefill of the common prompt prefix in the layers "
                               "before the first pruning layer (exact); pays with context_layout stable_first")
    max_history: int = param(20000, "history entries held in the context buffer (the oldest yield, counted "
                             "dropped.context.history)", 1, 10**8)
    max_entry_chars: int = param(8192, "longest context entry text accepted (longer entries are rejected and "
                                 "counted)", 16, 1_000_000)
    max_block_entries: int = param(256, "entries held per agent in each of the task, constraints and coordination "
                                   "blocks: the agent's oldest entry of the block yields (dropped.context."
                                   "block_entries)", 1, 10**6)
    max_block_chars: int = param(65536, "characters held per agent in each of the task, constraints and "
                                 "coordination blocks: the agent's oldest entry of the block yields (dropped."
                                 "context.block_chars); at least max_entry_chars", 16, 10**9)
    max_context_entries: int = param(20000, "entries held in all (every agent and block, the states included): "
                                     "the oldest history entry yields, then the oldest of any block "
                                     "(dropped.context.total_entries)", 1, 10**8)
    max_context_chars: int = param(1048576, "characters held in all (every agent and block, the states included): "
                                   "the oldest history entry yields, then the oldest of any block "
                                   "(dropped.context.total_chars); at least max_block_chars", 16, 10**10)
    max_context_tokens: int = param(32768, "most context tokens a call reads: beyond it entries leave the prompt, "
                                    "the oldest history first, then other agents' entries, then the oldest of the "
                                    "requested agent's own (its state last)", 256, 10**7)
    context_queue_depth: int = param(1000, "ContextEntry messages the subscription holds before the node takes "
                                     "them (keep-last: an entry overwritten there, or discarded by its publisher, "
                                     "is counted lost.context.sequence_gap)", 1, 100000)
    replan_action: str = param("replan", "name of the Replan action this planner serves (relative: in the node's "
                               "namespace)")
    autostart: bool = autostart_param()
    diagnostics_period_s: float = diagnostics_period_param()

    def validate(self) -> None:
        """Raise ConfigError naming the first invalid parameter."""
        check_fields(self)
        if not 0.0 < self.keep_ratio <= 1.0:
            raise ConfigError("keep_ratio", f"{self.keep_ratio} is outside (0, 1]")
        if self.compressor not in COMPRESSORS:
            raise ConfigError("compressor", f"'{self.compressor}' is not one of {', '.join(COMPRESSORS)}")
        if len(self.plan_steps) != 3 or any(n < 0 for n in self.plan_steps):
            raise ConfigError("plan_steps", f"{self.plan_steps} must be three non-negative counts (0 = schema's)")
        if self.first_cut != 0.0 and self.first_cut < 1.0:
            raise ConfigError("first_cut", f"{self.first_cut} must be 0 (off) or >= 1")
        if any(layer < 0 for layer in self.pruning_layers) or self.pruning_layers != sorted(set(self.pruning_layers)):
            raise ConfigError("pruning_layers", "must be distinct, non-negative and increasing")
        if self.max_block_chars < self.max_entry_chars:
            raise ConfigError("max_block_chars", f"{self.max_block_chars} is less than max_entry_chars "
                              f"({self.max_entry_chars}): an agent's entry would not fit its block")
        if self.max_context_chars < self.max_block_chars:
            raise ConfigError("max_context_chars", f"{self.max_context_chars} is less than max_block_chars "
                              f"({self.max_block_chars})")
        if self.max_context_entries < self.max_block_entries:
            raise ConfigError("max_context_entries", f"{self.max_context_entries} is less than max_block_entries "
                              f"({self.max_block_entries})")
        if not self.replan_action.strip():
            raise ConfigError("replan_action", "must name an action")
        if self.context_layout not in LAYOUTS:
            raise ConfigError("context_layout", f"'{self.context_layout}' is not one of {', '.join(LAYOUTS)}")
        if self.recap_recursion and self.context_layout != "recap":
            raise ConfigError("recap_recursion", f"needs context_layout recap, not {self.context_layout}")
        if self.recap_recursion and self.decoding == "candidates":
            raise ConfigError("recap_recursion", "needs decoding json or constrained, not candidates")
        try:
            check_modules(self.memory_modules)
        except ValueError as exc:
            raise ConfigError("memory_modules", str(exc)) from None
        if self.veto_lost and self.recap_recursion:
            raise ConfigError("veto_lost", "is not implemented with recap_recursion yet")
        if self.state_encoder_path and "experience" not in self.memory_modules:
            raise ConfigError("state_encoder_path", "embeds states for the experience bank: it needs memory module "
                              "experience (memory_modules)")
        if "rag_static" in self.memory_modules and not self.memory_corpus_file:
            raise ConfigError("memory_corpus_file", "memory module rag_static needs a corpus file")
        for name in ("memory_corpus_file", "memory_priors_file"):
            value = getattr(self, name)
            if value and not Path(resolve_path(value)).is_file():
                raise ConfigError(name, f"no such file: {value}")
        if self.memory_write:
            if not ({"reflective", "rag_memory"} & set(self.memory_modules)):
                raise ConfigError("memory_write", "notes are kept by reflective memory: it needs memory module "
                                  "reflective or rag_memory (memory_modules)")
            if self.decoding != Decoding.JSON.value:
                raise ConfigError("memory_write", f"decoding '{self.decoding}' never writes free text: it needs "
                                  "decoding json")
        if self.memory_summariser_url:
            check_base_url_param("memory_summariser_url", self.memory_summariser_url)
            if not ({"episodic", "rag_memory"} & set(self.memory_modules)):
                raise ConfigError("memory_summariser_url", "summarises episodic records: it needs memory module "
                                  "episodic or rag_memory (memory_modules)")
        if self.decoding not in {d.value for d in Decoding}:
            raise ConfigError("decoding", f"'{self.decoding}' is not one of {', '.join(d.value for d in Decoding)}")
        if self.backend not in BACKENDS:
            raise ConfigError("backend", f"'{self.backend}' is not one of {', '.join(BACKENDS)}")
        if self.endpoint not in ENDPOINTS:
            raise ConfigError("endpoint", f"'{self.endpoint}' is not one of {', '.join(ENDPOINTS)}")
        if self.structured_output not in STRUCTURED_OUTPUTS:
            raise ConfigError("structured_output",
                              f"'{self.structured_output}' is not one of {', '.join(STRUCTURED_OUTPUTS)}")
        check_base_url_param("server_url", self.server_url)
        if self.backend == "openai" and self.decoding != Decoding.JSON:
            raise ConfigError("decoding", "backend openai decodes on the server: decoding must be 'json' "
                              "(structured_output asks the server for schema-valid plans)")
        if self.api_key_env and not os.environ.get(self.api_key_env):
            raise ConfigError("api_key_env", f"the environment variable {self.api_key_env} is not set or empty")
        if self.dtype not in DTYPES:
            raise ConfigError("dtype", f"'{self.dtype}' is not one of {', '.join(DTYPES)}")
        if self.decode_weights not in DECODE_WEIGHTS:
            raise ConfigError("decode_weights", f"'{self.decode_weights}' is not one of {', '.join(DECODE_WEIGHTS)}")
        if not (self.device in ("auto", "cpu", "cuda") or self.device.startswith("cuda:")):
            raise ConfigError("device", f"'{self.device}' is not auto, cpu, cuda or cuda:N")
        for name in ("predictor_path", "adapter_path"):
            value = getattr(self, name)
            if value and not Path(resolve_path(value)).is_file():
                raise ConfigError(name, f"no such file: {value}")

    def context_limits(self) -> ContextLimits:
        """What the context buffer holds at most."""
        return ContextLimits(history=self.max_history, block_entries=self.max_block_entries,
                             block_chars=self.max_block_chars, total_entries=self.max_context_entries,
                             total_chars=self.max_context_chars)

    def schema_from_world(self) -> bool:
        """The schema comes from the world's WorldInfo (action_schema_file empty), not from a file."""
        return not self.action_schema_file.strip()

    def planner_schema(self, schema: ActionSchema) -> ActionSchema:
        """The schema the calls use: the world's or the file's, with store_memory when memory_write (ValueError
        when the world has a skill of that name)."""
        return with_memory_write(schema) if self.memory_write else schema

    def schema_path(self) -> Path:
        """The action schema file this config names (the shipped one when it names none)."""
        return Path(resolve_path(self.action_schema_file)) if not self.schema_from_world() else default_schema_path()
