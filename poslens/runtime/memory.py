"""Peak-memory estimates for a capture run, and the batch size that fits a budget.

A capture run holds the model's weights and, one forward pass at a time, the
transient tensors of that pass plus poslens's reductions of the attention
scores. :func:`estimate_peak_bytes` predicts the peak from the closed form
below; :func:`plan_batch` picks the largest batch whose estimate fits a budget
(by default what is free now), or raises :class:`InsufficientMemoryError` with
the numbers and the longest sequence that would fit.

The formula
-----------
B sequences of T tokens; L layers, H query heads, K key/value heads of width d,
model width D, MLP width F, vocabulary V; ``e`` bytes per element of the model
dtype; C = ``block_elements`` (the float64 elements of one work buffer of
:class:`poslens.capture.leakage_capture.LeakageCapture`'s row blocks: 512 Ki on CPU, 32 Mi
on CUDA by default); N offset bins::

    weights     = Σ numel × element size of hf_model's parameters and buffers
    runtime     = resident memory besides the weights (Python, torch, tokenizer,
                  corpus): measured by plan_batch, 0 unless given
    activations = e·( 4·B·T·D                 hidden states (residual, norm, outputs)
                    + B·T·d·(5·H + 8·K)       q, k, v, rotated q/k, GQA-expanded k/v, z
                    + 3·B·T·F                 MLP gate, up and their product
                    + 2·L·B·T·K·d             HF's KV cache, 0 while run_with_hooks asks for none
                    + M·B·T² )                4-D additive mask, one per kind of layer (M)
                  + 8 MiB                     first-pass allocations (workspaces, objects)
    scores      = e·B·H·T²                    one layer's attention scores
    attention   = B·H·T²·(e + 4 + [e≠4]·e)    scores + float32 softmax (+ its cast back)
    capture     = 3·8·W + 64·B·H·T            poslens's transients, made while the scores live:
                  + 8·B·H·T·(1 + N)
      W         = min(max(C, B·H·T), B·H·T²)  the two float64 row-block buffers (s, exp(s − max))
                                              and the temporaries of one block; per-row float64
                                              results; each sequence's row maxima and offset-bin
                                              sums of exp(s − max), on their way to the row-bin
                                              store (a temporary file)
    logits      = e·B·1·V                     run_with_hooks keeps the last position's logits only
    sums        = poslens.fit.sums.sums_bytes     the float64 accumulators of G groups, held all run
                  + counterfactual_bytes      (mostly 6·8·G·L·H·c·b for c query and b offset bins),
                                              plus the replay's cross-fitted residuals and
                                              Σ log Z' rows (poslens.fit.sums.counterfactual_bytes)
    peak        = runtime + weights + activations + sums
                  + max(slack·attention, slack·(scores + capture), logits)

The three terms of the ``max`` are phases that never overlap: the model's
softmax of one layer; poslens's reduction of that layer's scores, run from the
``hook_attn_scores`` hook before the softmax; and the logits after the last
layer. The activations are summed although not all live at once (the MLP
follows the attention), a small over-estimate where the other terms matter.

``slack`` is the allocator's share. With glibc, blocks below its adaptive mmap
threshold (at most 32 MiB) are freed back to the heap rather than to the
system, so score-sized tensors freed during one layer stay resident while the
next layer allocates. Measured resident peaks of the attention phase were
1.2–1.9× the live tensors (1.45× typical, :data:`CPU_SLACK`); with
``MALLOC_MMAP_THRESHOLD_=1048576`` they fall to 0.94–1.0×, which is how the
live-tensor terms above were checked. On CUDA the terms count the bytes
PyTorch's caching allocator hands out (``torch.cuda.max_memory_allocated``),
slack 1 (:data:`CUDA_SLACK`); the allocator's reserve and the CUDA context
are not counted, and no GPU measurement has checked the formula yet.

Calibration (CPU, float32; ``python benchmarks/memory_calibration.py``, each
setting a fresh measuring process: VmHWM minus the resident memory after
loading, with the weights paged in and the heap's free pages handed back first
with glibc's ``malloc_trim``): the estimated increase was 0.80–1.22× the
measured one for tiny Llama, Mistral and Gemma 3 models at batch 1–16 and
T 64–1024, and 0.89–1.15× for SmolLM2-135M at batch 1–4 and T 256–1024; the
estimated whole peak was 0.97–1.04×. Repeats of one setting agree within 3%.
The table is in docs/benchmarks.md. The script checks the increase within 40%
(or 8 MiB), which bounds the whole peak well within 25%. It measures the
machine it runs on (allocator, BLAS threads, library versions: another machine
measured 37 MiB for an estimated 18 on a tiny model at B=1, T=256), so it is a
calibration run, not a test.

Free and resident memory come from psutil (:func:`free_memory_bytes`,
:func:`resident_bytes`); the free memory on CPU is also bounded by the room
left under the process's cgroup memory limit (:func:`cgroup_room_bytes`), as
in a container.

Example:
    >>> import poslens
    >>> from poslens.runtime.memory import estimate_peak_bytes, plan_batch
    >>> model = poslens.load_model("smollm2-135m")                  # doctest: +SKIP
    >>> print(estimate_peak_bytes(model, 2, 512).describe())        # doctest: +SKIP
    batch 2 × T=512: peak 688.7 MiB = weights 513.3 + runtime 0.0 + activations 54.2 + sums 68.9
    + max(1.45 × attention 36.0, 1.45 × (scores + capture) 22.7, logits 0.4)
    >>> plan_batch(model, seq_len=512, n_seqs=64, budget_bytes="2GiB")  # whole process, ≈ 0.5 GiB runtime  # doctest: +SKIP
    18
"""

from __future__ import annotations

import ctypes
import gc
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

import psutil
import torch

from poslens.capture.leakage_capture import default_block_elements
from poslens.errors import InputError, PoslensError
from poslens.fit.binning import Binning
from poslens.fit.sums import counterfactual_bytes, sums_bytes

MiB = 1 << 20

#: Allocator factor on the attention-phase terms for CPU runs (glibc heap retention), measured.
CPU_SLACK = 1.45
#: Allocator factor for CUDA runs: max_memory_allocated counts live tensors only (not yet measured on a GPU).
CUDA_SLACK = 1.0
#: First-pass allocations that do not scale with the shapes (measured at B=1, T=64 on a tiny model).
FIXED_OVERHEAD = 8 * MiB
#: Groups a run accumulates when none are given (as poslens.measurement.pipeline.measure's default).
DEFAULT_GROUPS = 8
#: Share of the free memory that the default budget (no --max-memory) plans for.
FREE_SHARE = 0.8
#: Whether a hooked forward (poslens.model.hooks.run_with_hooks, logits=False) still makes the logits
#: [B, T, V] and HF's KV cache. It does today (the bridge runs the whole HF forward, use_cache
#: from the config); if run_with_hooks passes logits_to_keep=1 / use_cache=False, set these False.
FULL_LOGITS = False  # hooks.run_with_hooks keeps only the last position's logits
KV_CACHE = False  # ... and asks for no KV cache
#: Where the cgroup file systems are mounted (Linux); :func:`cgroup_room_bytes` reads its limits here.
CGROUP_ROOT = Path("/sys/fs/cgroup")


class InsufficientMemoryError(PoslensError, MemoryError):
    """Even one sequence per forward pass does not fit the memory budget.

    Args:
        message: The error message.
        estimate: The batch-1 :class:`MemoryEstimate` at the requested length (kept as ``.estimate``).
        need: Bytes one sequence needs (kept as ``.need``).
        budget: Bytes the budget allows (kept as ``.budget``).
        max_seq_len: The longest sequence that fits at batch 1, 0 if none (kept as ``.max_seq_len``).

    Example:
        >>> est = MemoryEstimate(1, 4096, weights=200 * MiB, runtime=0, activations=0, scores=0, attention=0,
        ...                      capture=0, logits=100 * MiB)
        >>> error = InsufficientMemoryError("not enough memory", est, need=est.total, budget=256 * MiB, max_seq_len=2048)
        >>> isinstance(error, MemoryError), error.need // MiB, error.max_seq_len
        (True, 300, 2048)
    """

    def __init__(self, message: str, estimate: "MemoryEstimate", need: int, budget: int, max_seq_len: int) -> None:
        super().__init__(message)
        self.estimate = estimate
        self.need = need
        self.budget = budget
        self.max_seq_len = max_seq_len


@dataclass(frozen=True)
class MemoryEstimate:
    """Estimated peak memory of one capture forward pass, in bytes, by component.

    ``total = runtime + weights + activations + sums + max(slack·attention, slack·(scores + capture), logits)``
    (the module docstring explains each term); ``increase`` is the part above
    the loaded model, ``total - runtime - weights``.

    Attributes:
        batch_size: Sequences per forward pass.
        seq_len: Tokens per sequence.
        weights: Bytes of the model's parameters and buffers.
        runtime: Bytes the process holds besides the weights (:func:`runtime_bytes`).
        activations: Bytes of the residual stream and block activations.
        scores: Bytes of one layer's attention scores.
        attention: Bytes of the attention's own work buffers.
        capture: Bytes of the capture's work buffers for one layer.
        logits: Bytes of the output logits.
        sums: Bytes of the accumulated sums, held for the whole run.
        slack: The allocator slack multiplying the transient terms.

    Example:
        >>> e = MemoryEstimate(1, 8, weights=100 * MiB, runtime=0, activations=MiB, scores=MiB,
        ...                    attention=2 * MiB, capture=4 * MiB, logits=3 * MiB, sums=2 * MiB, slack=1.0)
        >>> e.total // MiB, e.increase // MiB
        (108, 8)
        >>> print(e.describe())
        batch 1 × T=8: peak 108.0 MiB = weights 100.0 + runtime 0.0 + activations 1.0 + sums 2.0
        + max(1 × attention 2.0, 1 × (scores + capture) 5.0, logits 3.0)
    """

    batch_size: int
    seq_len: int
    weights: int
    runtime: int
    activations: int
    scores: int
    attention: int
    capture: int
    logits: int
    sums: int = 0
    slack: float = CPU_SLACK

    @property
    def transient(self) -> int:
        """The largest of the three phases that never overlap (softmax, capture, logits).

        Example:
            >>> e = MemoryEstimate(1, 8, weights=0, runtime=0, activations=0, scores=MiB, attention=2 * MiB,
            ...                    capture=4 * MiB, logits=3 * MiB, slack=1.5)
            >>> e.transient / MiB  # max(1.5 × 2, 1.5 × (1 + 4), 3)
            7.5
        """
        return int(max(self.slack * self.attention, self.slack * (self.scores + self.capture), self.logits))

    @property
    def increase(self) -> int:
        """Bytes above the loaded model: the activations, the sums and the largest phase.

        Example:
            >>> e = MemoryEstimate(1, 8, weights=100 * MiB, runtime=0, activations=MiB, scores=MiB,
            ...                    attention=2 * MiB, capture=4 * MiB, logits=3 * MiB, sums=2 * MiB, slack=1.0)
            >>> e.increase // MiB  # activations 1 + sums 2 + transient 5
            8
        """
        return self.activations + self.sums + self.transient

    @property
    def total(self) -> int:
        """Estimated peak: runtime + weights + increase.

        Example:
            >>> e = MemoryEstimate(1, 8, weights=100 * MiB, runtime=50 * MiB, activations=MiB, scores=MiB,
            ...                    attention=2 * MiB, capture=4 * MiB, logits=3 * MiB, sums=2 * MiB, slack=1.0)
            >>> e.total // MiB, (e.runtime + e.weights + e.increase) // MiB
            (158, 158)
        """
        return self.runtime + self.weights + self.increase

    def describe(self) -> str:
        """The sum in one line, in MiB.

        Returns:
            ``batch B × T=…: peak … MiB = weights … + …``, the terms of the total.

        Example:
            >>> e = MemoryEstimate(2, 512, weights=512 * MiB, runtime=0, activations=54 * MiB, scores=18 * MiB,
            ...                    attention=36 * MiB, capture=4 * MiB, logits=MiB // 2, sums=69 * MiB)
            >>> print(e.describe())
            batch 2 × T=512: peak 687.2 MiB = weights 512.0 + runtime 0.0 + activations 54.0 + sums 69.0
            + max(1.45 × attention 36.0, 1.45 × (scores + capture) 22.0, logits 0.5)
        """

        def m(x: float) -> str:
            return f"{x / MiB:.1f}"

        s = f"{self.slack:g}"
        return (
            f"batch {self.batch_size} × T={self.seq_len}: peak {m(self.total)} MiB = weights {m(self.weights)} "
            f"+ runtime {m(self.runtime)} + activations {m(self.activations)} + sums {m(self.sums)} + max({s} × attention {m(self.attention)}, "
            f"{s} × (scores + capture) {m(self.scores + self.capture)}, logits {m(self.logits)})"
        )

    def as_dict(self) -> dict[str, Any]:
        """The components plus ``increase`` and ``total``, for JSON.

        Returns:
            ``{component: bytes}``, with ``increase`` and ``total``.

        Example:
            >>> MemoryEstimate(1, 8, weights=1, runtime=0, activations=0, scores=0, attention=0,
            ...                capture=0, logits=0).as_dict()["total"]
            1
        """
        return {**asdict(self), "increase": self.increase, "total": self.total}


@dataclass(frozen=True)
class _Shape:
    n_layers: int
    n_heads: int
    n_kv_heads: int
    d_head: int
    d_model: int
    d_mlp: int
    vocab: int
    mask_kinds: int
    weights: int
    dtype: torch.dtype


def _unique_tensors(model: Any) -> list[torch.Tensor]:
    """The model's parameters and buffers (hf_model's, or a HookedTransformer's), each storage once (tied embeddings)."""
    hf = getattr(model, "module", None) or model.hf_model
    seen: dict[int, torch.Tensor] = {}
    for t in list(hf.parameters()) + list(hf.buffers()):
        seen.setdefault(id(t), t)
    return list(seen.values())


def weight_bytes(model: Any, dtype: torch.dtype | None = None, device: str | torch.device | None = None) -> int:
    """Bytes of hf_model's parameters and buffers (floating ones counted in ``dtype`` if given).

    ``device`` restricts the count to tensors on that kind of device.

    Args:
        model: A :class:`~poslens.model.loading.PosModel` (or anything with ``hf_model``).
        dtype: Count floating tensors at this dtype's size; default their own.
        device: Count only tensors on this kind of device; default all.

    Returns:
        The bytes.

    Example:
        >>> weight_bytes(model) / 2**20  # doctest: +SKIP
        513.3...
    """
    kind = torch.device(device).type if device is not None else None
    total = 0
    for t in _unique_tensors(model):
        if kind is not None and t.device.type != kind:
            continue
        size = _element_size(dtype) if dtype is not None and t.is_floating_point() else t.element_size()
        total += t.numel() * size
    return total


def _model_dtype(model: Any) -> torch.dtype:
    for t in (getattr(model, "module", None) or model.hf_model).parameters():
        if t.is_floating_point():
            return t.dtype
    return torch.float32


def _shape(model: Any, dtype: torch.dtype | None) -> _Shape:
    cfg = getattr(getattr(model, "bridge", None), "cfg", None)
    if getattr(model, "kind", "bridge") == "hooked":  # a HookedTransformer: its config says it all
        d_model, d_mlp, vocab = int(cfg.d_model), int(cfg.d_mlp or 4 * cfg.d_model), int(cfg.d_vocab_out or cfg.d_vocab)
    else:
        hf = model.hf_model
        config = hf.config.get_text_config() if hasattr(hf.config, "get_text_config") else hf.config
        d_model = int(getattr(cfg, "d_model", None) or config.hidden_size)
        d_mlp = int(getattr(config, "intermediate_size", None) or getattr(cfg, "d_mlp", None) or 4 * d_model)
        head = hf.get_output_embeddings() if hasattr(hf, "get_output_embeddings") else None
        weight = getattr(head, "weight", None)
        vocab = int(weight.shape[0]) if weight is not None else int(config.vocab_size)
    windows = list(getattr(model, "window", None) or [None])
    return _Shape(
        n_layers=int(model.n_layers),
        n_heads=int(model.n_heads),
        n_kv_heads=int(model.n_kv_heads),
        d_head=int(model.d_head),
        d_model=d_model,
        d_mlp=d_mlp,
        vocab=vocab,
        mask_kinds=len(set(windows)),
        weights=weight_bytes(model, dtype),
        dtype=dtype or _model_dtype(model),
    )


def _element_size(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


def _estimate(shape: _Shape, batch: int, t: int, block_elements: int, runtime: int, slack: float, groups: int) -> MemoryEstimate:
    e = _element_size(shape.dtype)
    b, h, k, d = batch, shape.n_heads, shape.n_kv_heads, shape.d_head
    activations = (
        e
        * (
            4 * b * t * shape.d_model
            + b * t * d * (5 * h + 8 * k)
            + 3 * b * t * shape.d_mlp
            + (2 * shape.n_layers * b * t * k * d if KV_CACHE else 0)
            + shape.mask_kinds * b * t * t
        )
        + FIXED_OVERHEAD
    )
    square = b * t * t  # one head's [B, T, T]
    work = min(max(block_elements, b * h * t), h * square)
    n_bins = Binning(t).n_offset_bins
    capture = 3 * 8 * work + 64 * b * h * t + 8 * b * h * t * (1 + n_bins)
    return MemoryEstimate(
        batch_size=batch,
        seq_len=t,
        weights=shape.weights,
        runtime=int(runtime),
        activations=int(activations),
        scores=e * h * square,
        attention=h * square * (e + 4 + (e if e != 4 else 0)),
        capture=capture,
        logits=e * b * (t if FULL_LOGITS else 1) * shape.vocab,
        sums=sums_bytes(groups, shape.n_layers, shape.n_heads, Binning(t)) + counterfactual_bytes(groups, shape.n_layers, shape.n_heads, Binning(t)),
        slack=slack,
    )


def _default_slack(device: str | torch.device | None) -> float:
    return CUDA_SLACK if device is not None and torch.device(device).type == "cuda" else CPU_SLACK


def estimate_peak_bytes(
    model: Any,
    batch_size: int,
    seq_len: int,
    dtype: torch.dtype | None = None,
    block_elements: int | None = None,
    runtime_bytes: int = 0,
    device: str | torch.device | None = None,
    groups: int = DEFAULT_GROUPS,
) -> MemoryEstimate:
    """Estimate the peak memory of one capture forward pass of ``batch_size`` × ``seq_len`` tokens.

    ``model`` is a :class:`poslens.model.loading.PosModel`. ``dtype`` is the model
    dtype to plan for (default: the dtype its weights have); ``block_elements``
    the capture's float64 row-block buffer (default: the device's, see
    :class:`poslens.capture.leakage_capture.LeakageCapture`);
    ``runtime_bytes`` the resident memory besides the weights (see
    :func:`runtime_bytes`), added to the total; ``device`` picks the allocator
    slack (default: the model's device); ``groups`` the number of groups the
    run accumulates (its sums are held for the whole run). The formula is in
    the module docstring.

    Args:
        model: The model to plan for.
        batch_size: Sequences per forward pass.
        seq_len: Tokens per sequence.
        dtype: The model dtype to plan for; default its weights' dtype.
        block_elements: The capture's row-block buffer size; default the device's.
        runtime_bytes: Resident memory besides the weights, added to the total.
        device: The device whose allocator slack applies; default the model's.
        groups: Number of groups the run accumulates.

    Returns:
        The estimate, by component.

    Raises:
        ValueError: When ``batch_size``, ``seq_len`` or ``groups`` is below 1.

    Example:
        >>> import tempfile, poslens
        >>> from poslens.model.tiny import save_tiny_model
        >>> model = poslens.load_model(save_tiny_model(tempfile.mkdtemp(), "llama"))
        >>> est = estimate_peak_bytes(model, batch_size=4, seq_len=512)
        >>> est.attention > est.capture > est.logits   # the model's softmax phase is the largest here
        True
        >>> round(est.increase / 2**20)
        82
        >>> estimate_peak_bytes(model, 8, 512).increase > est.increase
        True
    """
    if batch_size < 1 or seq_len < 1:
        raise ValueError(f"batch_size and seq_len must be ≥ 1, got {batch_size} and {seq_len}")
    device = torch.device(device if device is not None else _model_device(model))
    block = block_elements or default_block_elements(device)
    if groups < 1:
        raise ValueError(f"groups must be ≥ 1, got {groups}")
    return _estimate(_shape(model, dtype), batch_size, seq_len, block, runtime_bytes, _default_slack(device), groups)


# ----------------------------------------------------------------------------- runtime


_UNITS = {
    "": 1, "b": 1,
    "k": 1 << 10, "kib": 1 << 10, "kb": 10**3,
    "m": 1 << 20, "mib": 1 << 20, "mb": 10**6,
    "g": 1 << 30, "gib": 1 << 30, "gb": 10**9,
    "t": 1 << 40, "tib": 1 << 40, "tb": 10**12,
}


def parse_bytes(text: str | int) -> int:
    """A memory size: ``"8GB"``, ``"512MiB"``, ``"1.5G"``, ``"123456"`` (bytes) or an int.

    kB, MB, GB, TB are powers of 1000; KiB, MiB, GiB, TiB and the bare letters
    K, M, G, T powers of 1024.

    Args:
        text: The size, as text or a number of bytes.

    Returns:
        The size in bytes.

    Raises:
        InputError: When ``text`` is not a size, or not a positive finite one.

    Example:
        >>> parse_bytes("512MiB"), parse_bytes("2G"), parse_bytes("1.5GB"), parse_bytes(1024)
        (536870912, 2147483648, 1500000000, 1024)
    """
    if isinstance(text, int) and not isinstance(text, bool):
        value = float(text)
    else:
        s = str(text).strip().replace(" ", "").replace("_", "")
        number = s.rstrip("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
        unit = s[len(number):].lower()
        try:
            value = float(number) * _UNITS[unit]
        except (KeyError, ValueError):
            raise InputError(f"not a memory size: {text!r} (examples: 8GB, 512MiB, 1.5G)") from None
    if not 0 < value < float("inf"):  # also refuses nan, and a size like 1e400GB that overflows to inf
        raise InputError(f"a memory budget must be positive and finite, got {text!r} (examples: 8GB, 512MiB, 1.5G)")
    return int(value)


def resident_bytes() -> int:
    """This process's resident memory now (RSS, read through psutil), in bytes.

    Returns:
        The resident set size in bytes.

    Example:
        >>> resident_bytes() > 0
        True
    """
    return int(psutil.Process().memory_info().rss)


def release_free_heap() -> bool:
    """Hand the C heap's free pages back to the system (glibc ``malloc_trim(0)``).

    glibc keeps memory freed by blocks below its adaptive mmap threshold in
    its arenas. After a measurement that is the hooks' and the fits' freed
    arrays, about 100 MB for SmolLM2-135M at T = 1024, and it fragments the
    heap for the next forward pass, whose peak then rises by as much.
    :func:`poslens.measurement.pipeline.collect_sums` and
    :func:`poslens.measure` call this when they finish. Returns False where
    the C library has no ``malloc_trim`` (not glibc); nothing changes then.

    Returns:
        Whether ``malloc_trim`` could be called.

    Example:
        >>> release_free_heap() in (True, False)
        True
    """
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
        return True
    except (OSError, AttributeError):
        return False


def _read_int(path: Path) -> int | None:
    """The file's content as an int; None for ``max`` (cgroup v2's "no limit")."""
    text = path.read_text().strip()
    return None if text == "max" else int(text)


def cgroup_room_bytes(root: str | Path | None = None) -> int | None:
    """Bytes left under the cgroup memory limit, or None where there is no limit.

    cgroup v2: ``memory.max`` − ``memory.current`` in ``root`` (default
    :data:`CGROUP_ROOT`); where there is no v2 limit file, cgroup v1:
    ``memory/memory.limit_in_bytes`` − ``memory/memory.usage_in_bytes``.
    None where neither can be read (macOS, Windows, no cgroup), for v2's
    ``max`` and for v1's "no limit" value (about 2**63).

    Args:
        root: The cgroup folder to read; default :data:`CGROUP_ROOT`.

    Returns:
        The bytes left under the limit, or ``None``.

    Example:
        >>> import tempfile, pathlib
        >>> root = pathlib.Path(tempfile.mkdtemp())
        >>> _ = (root / "memory.max").write_text("1073741824\\n")
        >>> _ = (root / "memory.current").write_text("268435456\\n")
        >>> cgroup_room_bytes(root) // MiB   # 1 GiB limit, 256 MiB used
        768
        >>> _ = (root / "memory.max").write_text("max\\n")
        >>> print(cgroup_room_bytes(root))
        None
    """
    root = Path(CGROUP_ROOT if root is None else root)
    for limit_file, usage_file in (
        (root / "memory.max", root / "memory.current"),
        (root / "memory" / "memory.limit_in_bytes", root / "memory" / "memory.usage_in_bytes"),
    ):
        try:
            limit = _read_int(limit_file)
            if limit is None or limit >= 1 << 60:
                return None
            return max(0, limit - _read_int(usage_file))
        except (OSError, ValueError, TypeError):
            continue
    return None


def free_memory_bytes(device: str | torch.device | None = None, *, cgroup_root: str | Path | None = None) -> int:
    """Memory available for new allocations on ``device`` (default CPU), in bytes.

    CPU: psutil's ``virtual_memory().available``, and no more than the room
    left under a cgroup memory limit (:func:`cgroup_room_bytes` of
    ``cgroup_root``). CUDA: the free bytes of ``torch.cuda.mem_get_info``
    plus what PyTorch's caching allocator holds unused.

    Args:
        device: ``"cpu"`` or a CUDA device; default the CPU.
        cgroup_root: The cgroup folder whose limit also bounds the CPU's; default :data:`CGROUP_ROOT`.

    Returns:
        The bytes available.

    Raises:
        ValueError: When ``device`` is neither a CPU nor a CUDA device.

    Example:
        >>> free_memory_bytes("cpu") > 0
        True
        >>> import tempfile, pathlib
        >>> root = pathlib.Path(tempfile.mkdtemp())
        >>> _ = (root / "memory.max").write_text(str(512 * MiB)); _ = (root / "memory.current").write_text(str(500 * MiB))
        >>> free_memory_bytes("cpu", cgroup_root=root) // MiB   # a container with 12 MiB left
        12
    """
    device = torch.device(device or "cpu")
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        unused = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
        return int(free + unused)
    if device.type != "cpu":
        raise ValueError(
            f"poslens reads the free memory of cpu and cuda devices, not {device.type}; give a budget (--max-memory)"
        )
    available = int(psutil.virtual_memory().available)
    room = cgroup_room_bytes(cgroup_root)
    return available if room is None else min(available, room)


def _model_device(model: Any) -> torch.device:
    return next((getattr(model, "module", None) or model.hf_model).parameters()).device


def _touch_weights(model: Any) -> None:
    """Read one element per page of every CPU weight, so that mmapped weights are resident.

    transformers maps safetensors files: until the first forward pass, most
    weight pages are not yet in the resident set.
    """
    with torch.inference_mode():
        for t in _unique_tensors(model):
            if t.device.type == "cpu" and t.numel():
                flat = t.detach().reshape(-1)
                flat[:: max(1, 4096 // t.element_size())].sum()


def runtime_bytes(model: Any, device: str | torch.device | None = None) -> int:
    """Memory this process holds on ``device`` besides the model's weights, in bytes.

    CPU: resident memory (:func:`resident_bytes`), after paging in mmapped
    weights, minus the weight bytes (Python, torch, transformers, tokenizer,
    corpus: about 0.5 GiB with poslens imported). Memory that the C heap keeps
    after a free (dequantizing a GGUF file leaves hundreds of MiB) counts as
    held, so a plan errs on the safe side. CUDA: allocated bytes minus the
    weights on the device.

    Args:
        model: The loaded model.
        device: The device to measure; default the model's.

    Returns:
        The bytes held besides the weights (never below 0).

    Example:
        >>> runtime_bytes(model) > 100 * 2**20  # doctest: +SKIP
        True
    """
    device = torch.device(device or _model_device(model))
    weights = weight_bytes(model, device=device)
    if device.type == "cuda":
        return max(0, int(torch.cuda.memory_allocated(device)) - weights)
    _touch_weights(model)
    gc.collect()
    return max(0, resident_bytes() - weights)


# ----------------------------------------------------------------------------- planning


def _largest(fits: Callable[[int], bool], necessary: Callable[[int], bool], hi: int) -> int:
    """Largest x in 1..hi with fits(x), else 0.

    ``necessary`` is monotone (true up to some x, false after) and true
    wherever ``fits`` is: bisection finds its last x, then a short scan down
    finds the last that fits (a guard: should ``fits`` ever step rather than
    grow monotonically, the scan still finds the largest fit).
    """
    lo, top = 0, hi
    while lo < top:
        mid = (lo + top + 1) // 2
        if necessary(mid):
            lo = mid
        else:
            top = mid - 1
    return next((x for x in range(lo, 0, -1) if fits(x)), 0)


def plan_batch(
    model: Any,
    seq_len: int,
    n_seqs: int,
    budget_bytes: int | str | None = None,
    device: str | torch.device | None = None,
    *,
    dtype: torch.dtype | None = None,
    block_elements: int | None = None,
    runtime: int | None = None,
    groups: int = DEFAULT_GROUPS,
) -> int:
    """The largest batch size ≤ ``n_seqs`` whose estimated peak fits the memory budget.

    ``budget_bytes`` (bytes, or a size such as ``"8GB"``) bounds the whole
    process on ``device`` (default: the model's): runtime + weights + the
    forward's increase must fit; ``runtime`` is then measured
    (:func:`runtime_bytes`) unless given. Without a budget, the forward's
    increase over the loaded model must fit in :data:`FREE_SHARE` (80%) of
    what is free now (:func:`free_memory_bytes`): the weights are already
    resident, and the estimate is good to about ±25%.

    Raises :class:`InsufficientMemoryError` when one sequence does not fit,
    with the batch-1 estimate, the budget, and the longest sequence length that
    would fit at batch 1 in its message.

    Args:
        model: The loaded model.
        seq_len: Tokens per sequence.
        n_seqs: Number of sequences to measure (the batch size's upper bound).
        budget_bytes: The memory budget of the whole process; default: plan against the free memory.
        device: The device to plan for; default the model's.
        dtype: The model dtype to plan for; default its weights' dtype.
        block_elements: The capture's row-block buffer size; default the device's.
        runtime: Resident memory besides the weights; measured when a budget is given and this is not.
        groups: Number of groups the run accumulates.

    Returns:
        The batch size.

    Raises:
        InsufficientMemoryError: When one sequence does not fit.
        ValueError: When ``n_seqs`` or ``seq_len`` is below 1.

    Example:
        >>> import tempfile, poslens
        >>> from poslens.model.tiny import save_tiny_model
        >>> model = poslens.load_model(save_tiny_model(tempfile.mkdtemp(), "llama"))
        >>> need4 = estimate_peak_bytes(model, 4, 128).total
        >>> plan_batch(model, 128, n_seqs=64, budget_bytes=need4, runtime=0)
        4
        >>> plan_batch(model, 128, n_seqs=2, budget_bytes=need4, runtime=0)
        2
        >>> plan_batch(model, 512, n_seqs=64, budget_bytes="1MiB", runtime=0)
        Traceback (most recent call last):
        ...
        poslens.runtime.memory.InsufficientMemoryError: not enough memory for one sequence of 512 tokens: ...
    """
    if n_seqs < 1:
        raise ValueError(f"n_seqs must be ≥ 1, got {n_seqs}")
    if seq_len < 1:
        raise ValueError(f"seq_len must be ≥ 1, got {seq_len}")
    device = torch.device(device or _model_device(model))
    shape = _shape(model, dtype)
    slack = _default_slack(device)
    block = block_elements or default_block_elements(device)
    whole = budget_bytes is not None
    if whole:
        budget = parse_bytes(budget_bytes)
        base = runtime_bytes(model, device) if runtime is None else int(runtime)
        source = f"the budget is {budget / MiB:.1f} MiB"
    else:
        free = free_memory_bytes(device)
        budget = int(free * FREE_SHARE)
        base = 0
        source = f"{budget / MiB:.1f} MiB may be used ({FREE_SHARE:.0%} of the {free / MiB:.1f} MiB free on {device.type})"

    def need(b: int, t: int) -> int:
        est = _estimate(shape, b, t, block, base, slack, groups)
        return est.total if whole else est.increase

    def necessary(b: int, t: int) -> bool:
        # the estimate without the capture's term: monotone in b and t, and never above need
        est = _estimate(shape, b, t, block, base, slack, groups)
        floor = est.activations + est.sums + int(max(slack * est.attention, est.logits))
        return (est.total - est.increase if whole else 0) + floor <= budget

    best = _largest(lambda b: need(b, seq_len) <= budget, lambda b: necessary(b, seq_len), n_seqs)
    if best:
        return best
    one = _estimate(shape, 1, seq_len, block, base, slack, groups)
    cost = need(1, seq_len)
    max_t = _largest(lambda t: need(1, t) <= budget, lambda t: necessary(1, t), seq_len - 1)
    max_t = max_t if max_t >= 2 else 0
    counted = "for the whole process" if whole else "above the loaded model"
    setting = "--max-memory" if whole else "free memory"
    if max_t:
        hint = f"--seq-len {max_t} (the longest sequence that fits at batch 1), or at least {cost / MiB:.0f} MiB ({setting})"
    else:
        hint = f"no sequence length fits at batch 1; at least {cost / MiB:.0f} MiB ({setting}) for {seq_len} tokens"
    message = (
        f"not enough memory for one sequence of {seq_len} tokens: poslens estimates {cost / MiB:.1f} MiB "
        f"{counted}, but {source}.\n"
        f"  estimate: {one.describe()}\n"
        f"  smallest setting that fits: {hint}"
    )
    raise InsufficientMemoryError(message, one, cost, budget, max_t)


def choose_batch_size(
    model: Any,
    seq_len: int,
    n_seqs: int,
    groups: int,
    batch_size: int | None = None,
    max_memory: int | str | None = None,
    device: str | torch.device | None = None,
) -> int:
    """The batch size a run uses: ``batch_size`` as given, or the largest that fits ``max_memory``.

    - ``max_memory=None`` and a ``batch_size``: that batch size, unchecked (as before planning existed);
    - ``max_memory="free"`` (or None with ``batch_size=None``): plan against the free memory;
    - ``max_memory`` a size (``"8GB"``, bytes): plan against that budget for the whole process.

    When planning, ``batch_size`` (if given) is an upper bound, and so is the
    largest group (:func:`poslens.measurement.pipeline.batches` never lets a batch span two
    groups). Under torchrun every rank plans and all take the smallest result,
    so that they shard the same list of batches; if one rank cannot fit one
    sequence, every rank raises :class:`InsufficientMemoryError`.

    Args:
        model: The loaded model.
        seq_len: Tokens per sequence.
        n_seqs: Number of sequences to measure.
        groups: Number of groups the sequences are split into.
        batch_size: The batch size asked for (an upper bound when planning).
        max_memory: ``None``, ``"free"``, or a memory budget.
        device: The device to plan for; default the model's.

    Returns:
        The batch size, the same on every rank.

    Raises:
        InsufficientMemoryError: When this rank, or another rank, cannot fit one sequence.
        ValueError: When ``batch_size`` is below 1.

    Example:
        >>> choose_batch_size(model, 128, n_seqs=32, groups=8, batch_size=6)  # doctest: +SKIP
        6
        >>> choose_batch_size(model, 128, n_seqs=32, groups=8, max_memory="free")  # groups of 4  # doctest: +SKIP
        4
    """
    if max_memory is None and batch_size is not None:
        return batch_size
    if batch_size is not None and batch_size < 1:
        raise ValueError(f"batch_size must be ≥ 1, got {batch_size}")
    largest_group = -(-n_seqs // groups)  # group sizes differ by at most one
    cap = largest_group if batch_size is None else min(batch_size, largest_group)
    budget = None if max_memory is None or (isinstance(max_memory, str) and max_memory.lower() in ("free", "auto")) else max_memory
    error: InsufficientMemoryError | None = None
    try:
        chosen = plan_batch(model, seq_len, cap, budget, device, groups=groups)
    except InsufficientMemoryError as e:
        chosen, error = 0, e
    chosen = _smallest_over_ranks(chosen)
    if chosen == 0:
        if error is not None:
            raise error
        one = estimate_peak_bytes(model, 1, seq_len, device=device, groups=groups)
        raise InsufficientMemoryError("another rank cannot fit one sequence in its memory budget; see its message", one, 0, 0, 0)
    return chosen


def _smallest_over_ranks(value: int) -> int:
    """The minimum of ``value`` over torch.distributed ranks (``value`` itself in a single process)."""
    from poslens.runtime import distributed

    if distributed.world_size() == 1:
        return value
    import torch.distributed as dist

    device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else torch.device("cpu")
    tensor = torch.tensor([value], dtype=torch.int64, device=device)
    dist.all_reduce(tensor, op=dist.ReduceOp.MIN)
    return int(tensor.item())
