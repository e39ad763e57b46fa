"""A run's provenance: the model, corpus (with the hash of its tokens), settings and software versions that ``Result.meta`` records."""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import platform
from concurrent.futures import Future, ThreadPoolExecutor
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


def _memory_hash(model: PosModel, record: dict[str, Any]) -> dict[str, Any]:
    """For a model measured from memory: the sha256 of its weights now (``record``), as its source hash (taken at each measurement).

    Not above :data:`~poslens.model.weights_hash.MAX_HASHED_BYTES`: then ``source_sha256`` is None and
    ``source_sha256_skipped`` says why.
    """
    return dict(record) if model.source == "memory" else {}


#: What ``state_sha256`` covers, as results record it beside the hash.
STATE_COVERS = (
    "every parameter and buffer of the model (saved or not, such as the rotary inv_freq) as measured; not code: "
    "a forward method or module replaced in Python is not recorded"
)


def _forward_state(model: PosModel, record: dict[str, Any]) -> dict[str, Any]:
    """What the forward pass reads, as measured: the sha256 of every parameter and buffer (``record``), and RoPE edits made in memory.

    Taken at each measurement for every model (a folder's weights replaced on disk after loading, an in-memory
    edit of a buffer, change it), not above :data:`~poslens.model.weights_hash.MAX_HASHED_BYTES` (then
    ``state_sha256`` is None and ``state_sha256_skipped`` says why). ``rope_in_memory`` lists, where there are
    any, the rotary frequencies that differ from what the recorded config gives.
    """
    state: dict[str, Any] = {"state_sha256": record["source_sha256"], "state_sha256_covers": STATE_COVERS}
    if "source_sha256_skipped" in record:
        state["state_sha256_skipped"] = record["source_sha256_skipped"]
    notes = rope_in_memory_notes(model)
    if notes:
        state["rope_in_memory"] = notes
    return state


def rope_in_memory_notes(model: Any) -> list[str]:
    """The rotary frequencies in memory that differ from the ones the model's config gives, or from those computed at load.

    A rotary module computes its ``inv_freq`` buffer once, from the config, when the model is built; the forward
    reads the buffer. An edit of the buffer (``rotary_emb.inv_freq.mul_(0.25)``) or of the config after the
    build (``config.rope_parameters["rope_theta"] = 5e5``) then makes the recorded ``rope_base`` (the config's)
    differ from what the figures were measured with: each such case is one sentence here. RoPE types that change
    their frequencies in the forward (``dynamic``) are not checked.

    Args:
        model: A :class:`~poslens.model.pos_model.PosModel` (a TransformerLens ``HookedTransformer`` has no buffer
            to compare: none).

    Returns:
        One sentence per differing buffer; empty when the frequencies are those of the config.

    Example:
        >>> import tempfile, poslens, torch
        >>> from poslens.testing import save_tiny_model
        >>> model = poslens.load_model(save_tiny_model(tempfile.mkdtemp(), "llama"), device="cpu")
        >>> rope_in_memory_notes(model)
        []
        >>> with torch.no_grad():
        ...     _ = model.hf_model.model.rotary_emb.inv_freq.mul_(0.25)
        >>> print(rope_in_memory_notes(model)[0])  # doctest: +ELLIPSIS
        the rotary frequencies model.rotary_emb...inv_freq in memory differ from those computed when the model was built ...
    """
    hf = getattr(model, "hf_model", None)
    if getattr(model, "kind", None) == "hooked" or hf is None:
        return []
    config = hf.config.get_text_config()
    rope_type = str((getattr(config, "rope_parameters", None) or {}).get("rope_type", "default"))
    if "dynamic" in rope_type:
        return []
    notes = []
    for name, module in hf.named_modules():
        current = getattr(module, "inv_freq", None)
        if not isinstance(current, torch.Tensor):
            continue
        original = getattr(module, "original_inv_freq", None)
        if isinstance(original, torch.Tensor) and not torch.equal(current.cpu(), original.cpu()):
            notes.append(
                f"the rotary frequencies {name}.inv_freq in memory differ from those computed when the model was built "
                f"(original_inv_freq): the figures are measured with the frequencies in memory, not with the recorded "
                f"rope_base {_config_theta(config)}"
            )
            continue
        expected = _config_inv_freq(module, config, rope_type)
        if expected is not None and (expected.shape != current.shape or not torch.allclose(expected.float(), current.cpu().float(), rtol=1e-5)):
            base = float(current[1].double() ** (-current.numel())) if current.numel() > 1 and float(current[1]) > 0 else float("nan")
            notes.append(
                f"the config gives rope_theta {_config_theta(config)}, but the rotary frequencies {name}.inv_freq in memory "
                f"were computed from another base (about {base:.6g}; the config was changed after the model was built): the "
                "figures are measured with the frequencies in memory, and the recorded rope_base is the config's"
            )
    return notes


def _config_theta(config: Any) -> Any:
    return (getattr(config, "rope_parameters", None) or {}).get("rope_theta", getattr(config, "rope_theta", None))


def _config_inv_freq(module: torch.nn.Module, config: Any, rope_type: str) -> torch.Tensor | None:
    """The ``inv_freq`` the config gives for a default-RoPE module (its class's own computation), or None when unknown."""
    compute = getattr(type(module), "compute_default_rope_parameters", None)
    if rope_type != "default" or compute is None:
        return None
    try:
        return compute(config)[0].cpu()
    except Exception:  # noqa: BLE001 (a class whose computation needs more than the config: not checked)
        return None


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


def weights_record_in_background(model: PosModel) -> Future[dict[str, Any]]:
    """The model's :func:`~poslens.model.weights_hash.weights_record`, taken on a worker thread: for :func:`run_metadata`.

    Reading every weight through the checksum (and sha256 when they changed) takes about a tenth of a
    forward pass over 8 × 128 tokens of a 135M model on a 2-core CPU; the fits that follow the forward pass run on
    one core, so :func:`poslens.measure` starts the read when the forward passes end, while nothing changes the
    weights, and collects it when it writes the metadata. The worker's error, if any, is raised by ``.result()``.

    Args:
        model: The loaded model, as measured.

    Returns:
        A future whose ``.result()`` is the record.

    Example:
        >>> import tempfile, poslens
        >>> from poslens.testing import save_tiny_model
        >>> model = poslens.load_model(save_tiny_model(tempfile.mkdtemp(), "llama"), device="cpu")
        >>> len(weights_record_in_background(model).result()["source_sha256"])
        64
    """
    from poslens.model.weights_hash import weights_record

    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="poslens-weights-hash")
    future = pool.submit(weights_record, model.module)
    pool.shutdown(wait=False)  # the submitted read still runs; the thread ends with it
    return future


def run_metadata(model: PosModel, corpus: Corpus, settings: dict[str, Any], weights: dict[str, Any] | None = None) -> dict[str, Any]:
    """Provenance of a run: model (with its RoPE type and scaling), corpus, settings and software versions.

    The model's record holds its weights' dtype and device (:meth:`~poslens.model.pos_model.PosModel.describe`),
    the hooks its user put on it (``user_hooks``, :func:`poslens.model.user_hooks.user_hooks`): poslens
    ran them with the model; the SAEs attached to it (``saes``, :func:`poslens.model.user_saes.attached_saes`:
    hook point, ``d_sae``, the sha256 of each SAE's weights), which its ``model`` label names; and for a model
    measured from memory the sha256 of its weights at measurement time (``source_sha256``,
    :func:`poslens.model.weights_hash.weights_record`). For every model it holds ``state_sha256``, the sha256 of
    every parameter and buffer as measured (a weights file replaced after loading, a buffer edited in memory,
    change it), what that hash covers (``state_sha256_covers``), and ``rope_in_memory`` where the rotary
    frequencies in memory differ from those of the recorded config (:func:`rope_in_memory_notes`). Both hashes
    come from one read of the weights (:func:`poslens.model.weights_hash.weights_record`): ``weights``, when the
    caller took it at measurement time (:func:`weights_record_in_background`), or taken here.

    Args:
        model: The loaded model.
        corpus: The corpus.
        settings: The run's settings.
        weights: The model's :func:`~poslens.model.weights_hash.weights_record`, taken by the caller as measured
            (``None``: taken now).

    Returns:
        The metadata, JSON-ready.

    Example:
        >>> run_metadata(model, corpus, {"groups": 8})["settings"]["groups"]  # doctest: +SKIP
        8
    """
    import transformer_lens
    import transformers

    from poslens.model.weights_hash import weights_record

    record = weights_record(model.module) if weights is None else weights
    return {
        "poslens_version": __version__,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "model": {
            **model.describe(),
            **model.rope_record(),
            **_memory_hash(model, record),
            **_forward_state(model, record),
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
