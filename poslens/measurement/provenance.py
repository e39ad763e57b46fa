"""A run's provenance: the model, corpus (with the hash of its tokens), settings and software versions that ``Result.meta`` records."""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import platform
from datetime import datetime, timezone
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import torch

from poslens.model.corpus import Corpus
from poslens.model.pos_model import PosModel
from poslens.version import __version__


def tokens_sha256(tokens: torch.Tensor) -> str:
    """sha256 of token ids as little-endian int64: the provenance of exactly what was measured.

    Args:
        tokens: token ids [n_seqs, seq_len].

    Returns:
        64 hex digits.

    Example:
        >>> tokens_sha256(torch.tensor([[1, 2, 3]])) == tokens_sha256(torch.tensor([[1, 2, 3]], dtype=torch.int32))
        True
        >>> tokens_sha256(torch.tensor([[1, 2, 3]])) == tokens_sha256(torch.tensor([[1, 2, 4]]))
        False
    """
    data = tokens.detach().to("cpu", torch.int64).contiguous().numpy().astype("<i8").tobytes()
    return hashlib.sha256(data).hexdigest()


def _memory_hash(model: PosModel) -> dict[str, Any]:
    """For a model measured from memory: the sha256 of its weights now, as its source hash (taken at each measurement).

    Not above :data:`~poslens.model.weights_hash.MAX_HASHED_BYTES`: then ``source_sha256`` is None and
    ``source_sha256_skipped`` says why.
    """
    if model.source != "memory":
        return {}
    from poslens.model.weights_hash import weights_record

    return weights_record(model.module)


def package_version(module: ModuleType) -> str:
    """The installed version of the distribution that holds ``module`` (the one imported, where two are installed).

    TransformerLens defines no ``__version__`` (3.x and 4.x alike), so the version comes from the package's
    metadata, looked up beside the very files imported: with TransformerLens 3.9 first on ``sys.path`` and 4.3
    in site-packages, the version of the one imported.

    Args:
        module: an imported top-level package.

    Returns:
        Its version, or ``"?"`` when no metadata is found.

    Example:
        >>> import numpy, transformer_lens
        >>> package_version(numpy) == numpy.__version__, package_version(transformer_lens) != "?"
        (True, True)
    """
    version = getattr(module, "__version__", None)
    if version:
        return str(version)
    top = module.__name__.split(".")[0]
    return _installed_version(top, str(Path(module.__file__ or "").resolve().parent.parent))


@functools.cache
def _installed_version(top: str, location: str) -> str:
    """The version of the distribution installed at ``location`` that provides the top-level package ``top``.

    Cached per process, so it names the version of the files this process imported: every ``measure`` records
    it, and the fallback, ``packages_distributions``, reads the metadata of every installed distribution (about
    0.3 s with this project's environment). The distribution named like the package (``transformer_lens`` →
    ``transformer-lens``) is tried first, and taken only if it provides the package (``attr`` is provided by
    ``attrs``, while a distribution called ``attr`` is another project).
    """
    for dist in importlib.metadata.distributions(name=top, path=[location]):
        if _provides(dist, top):
            return dist.version
    for name in importlib.metadata.packages_distributions().get(top, []):
        for dist in importlib.metadata.distributions(name=name, path=[location]):
            return dist.version
    return "?"


def _provides(dist: importlib.metadata.Distribution, top: str) -> bool:
    """Whether ``dist`` installs the top-level package or module ``top`` (its ``top_level.txt``, else its files)."""
    listed = dist.read_text("top_level.txt")
    if listed is not None:
        return top in listed.split()
    return any(path.parts[0] in (top, f"{top}.py") for path in dist.files or [])


def _user_hooks(model: PosModel) -> list[dict[str, str]]:
    """The hooks the model's user put on it (none for a model built by hand without a ModelUse)."""
    use = getattr(model, "use", None)
    return use.hooks() if use is not None else []


def run_metadata(model: PosModel, corpus: Corpus, settings: dict[str, Any]) -> dict[str, Any]:
    """Provenance of a run: model (with its RoPE type and scaling), corpus, settings and software versions.

    The model's record holds its weights' dtype and device (:meth:`~poslens.model.pos_model.PosModel.describe`),
    the hooks its user put on it (``user_hooks``, :func:`poslens.model.user_hooks.user_hooks`): poslens
    ran them with the model; the SAEs attached to it (``saes``, :func:`poslens.model.user_saes.attached_saes`:
    hook point, ``d_sae``, the sha256 of each SAE's weights), which its ``model`` label names; and for a model
    measured from memory the sha256 of its weights at measurement time (``source_sha256``,
    :func:`poslens.model.weights_hash.weights_record`).

    Args:
        model: The loaded model.
        corpus: The corpus.
        settings: The run's settings.

    Returns:
        The metadata, JSON-ready.

    Example:
        >>> run_metadata(model, corpus, {"groups": 8})["settings"]["groups"]  # doctest: +SKIP
        8
    """
    import transformer_lens
    import transformers

    return {
        "poslens_version": __version__,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "model": {
            **model.describe(),
            **model.rope_record(),
            **_memory_hash(model),
            "user_hooks": _user_hooks(model),
            "saes": model.attached_saes(),
        },
        "corpus": {**corpus.describe(), "tokens_sha256": tokens_sha256(corpus.tokens)},
        "settings": settings,
        "versions": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "transformer_lens": package_version(transformer_lens),
            "numpy": np.__version__,
        },
    }
