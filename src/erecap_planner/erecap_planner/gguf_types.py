"""The weight types a GGUF export writes (light: the server command line and the benches read it without torch)."""

from __future__ import annotations

WEIGHT_TYPES = {"f16": 1, "q8_0": 7}
"""Weight types of an exported GGUF -> llama.cpp's LLAMA_FTYPE_MOSTLY_* (its general.file_type)."""
