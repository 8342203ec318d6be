"""Validated configuration of the E-RECAP planner node (one field = one ROS parameter)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from brace_controller.config import ConfigError, check_fields, package_file, param

from .compressors import BASELINES
from .context import DEFAULT_SYSTEM_PROMPT

COMPRESSORS = ("erecap", *BASELINES)


def default_schema_path() -> Path:
    """The action schema shipped with the package (installed share, else the source tree)."""
    return package_file("erecap_planner", "config/action_schema.yaml", Path(__file__).resolve().parents[1])


def resolve_path(path: str) -> str:
    """A file path, or 'package://<pkg>/<relative>': the file installed under share/<pkg>/ (else in src/<pkg>/)."""
    if not path.startswith("package://"):
        return path
    pkg, _, relative = path[len("package://"):].partition("/")
    return str(package_file(pkg, relative, Path(__file__).resolve().parents[2] / pkg))


@dataclass
class PlannerConfig:
    """Parameters of the erecap_planner node."""

    model_path: str = param("smollm2-135m-instruct",
                            "'smollm2-135m-instruct' (packaged, converted once) or a local HF model folder")
    device: str = param("auto", "'auto' (GPU when present), 'cpu', 'cuda', 'cuda:N'")
    dtype: str = param("auto", "'auto' (bfloat16 on GPU, float32 on CPU), 'float32', 'bfloat16', 'float16'")
    compressor: str = param("erecap", "erecap (in-model pruning) | none | random | recency | summary")
    keep_ratio: float = param(0.7, "r: per-pruning-layer keep ratio (Eq. 4)", 1e-6, 1.0)
    pruning_layers: list[int] = param([], "layers that prune; empty = paper Table 8 scaled to the model depth")
    head_tokens: int = param(4, "head tokens always kept (Eq. 5)", 0, 1024)
    tail_min: int = param(16, "minimum tail window (Eq. 5: max(tail_min, ceil(tail_frac N)))", 0, 100000)
    tail_frac: float = param(0.1, "tail window fraction of N", 0.0, 1.0)
    adapter_path: str = param("", "LoRA adapter merged into the model at configure (.safetensors; "
                              "'package://<pkg>/<path>' = a file installed with a package); empty = none")
    predictor_path: str = param("", "trained predictor checkpoint (.safetensors; 'package://<pkg>/<path>' "
                                "allowed); empty = untrained predictor (warned)")
    max_new_tokens: int = param(64, "decode limit per call", 1, 8192)
    decoding: str = param("json", "'json': generate the plan; 'candidates': score every valid skill call; "
                          "'constrained': generate a plan restricted to valid skill calls (small models)")
    action_schema_file: str = param("", "YAML action schema; empty = the one shipped with erecap_planner")
    system_prompt: str = param(DEFAULT_SYSTEM_PROMPT, "system prompt of every call")
    protect_blocks: bool = param(True, "task / state / constraints / coordination tokens outrank predictor scores")
    max_history: int = param(100000, "history entries kept in the context buffer (oldest dropped)", 1, 10**8)
    autostart: bool = param(True, "configure and activate at start (no lifecycle manager needed)")
    diagnostics_period_s: float = param(1.0, "period of /diagnostics (s)", 0.05, 3600.0)

    def validate(self) -> None:
        """Raise ConfigError naming the first invalid parameter."""
        check_fields(self)
        if not 0.0 < self.keep_ratio <= 1.0:
            raise ConfigError("keep_ratio", f"{self.keep_ratio} is outside (0, 1]")
        if self.compressor not in COMPRESSORS:
            raise ConfigError("compressor", f"'{self.compressor}' is not one of {', '.join(COMPRESSORS)}")
        if any(layer < 0 for layer in self.pruning_layers) or self.pruning_layers != sorted(set(self.pruning_layers)):
            raise ConfigError("pruning_layers", "must be distinct, non-negative and increasing")
        if self.decoding not in ("json", "candidates", "constrained"):
            raise ConfigError("decoding", f"'{self.decoding}' is not 'json', 'candidates' or 'constrained'")
        if self.dtype not in ("auto", "float32", "bfloat16", "float16"):
            raise ConfigError("dtype", f"'{self.dtype}' is not auto, float32, bfloat16 or float16")
        if not (self.device in ("auto", "cpu", "cuda") or self.device.startswith("cuda:")):
            raise ConfigError("device", f"'{self.device}' is not auto, cpu, cuda or cuda:N")
        for name in ("predictor_path", "adapter_path"):
            value = getattr(self, name)
            if value and not Path(resolve_path(value)).is_file():
                raise ConfigError(name, f"no such file: {value}")

    def schema_path(self) -> Path:
        """The action schema file this config names."""
        return Path(resolve_path(self.action_schema_file)) if self.action_schema_file else default_schema_path()
