"""The closed-form estimate of a capture run's peak memory, by component.

A capture run holds the model's weights and, one forward pass at a time, the
transient tensors of that pass plus poslens's reductions of the attention
scores. :func:`estimate_peak_bytes` predicts the peak as a
:class:`MemoryEstimate`; :mod:`poslens.runtime.planner` chooses the batch size
from it. The formula, its allocator factors and their calibration against
measured peaks are in docs/benchmarks.md, section "Memory estimate calibration".
Longer than 400 lines because it is one job, the one formula: the facts of the
model it reads (shape, weights, device, dtype) and the estimate by component.

Example:
    >>> import tempfile, poslens
    >>> from poslens.testing import save_tiny_model
    >>> model = poslens.load_model(save_tiny_model(tempfile.mkdtemp(), "llama"), device="cpu")
    >>> estimate_peak_bytes(model, 2, 128).total > weight_bytes(model)
    True
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import torch

from poslens.capture.row_blocks import default_block_elements
from poslens.errors import InputError
from poslens.fit.binning import Binning
from poslens.fit.sums_sizes import counterfactual_bytes, sums_bytes
from poslens.model.pos_model import PosModel
from poslens.options import DEFAULTS

MiB = 1 << 20

#: Allocator factor on the attention-phase terms for CPU runs (glibc heap retention), measured.
CPU_SLACK = 1.45
#: Allocator factor for CUDA runs: max_memory_allocated counts live tensors only (not yet measured on a GPU).
CUDA_SLACK = 1.0
#: First-pass allocations that do not scale with the shapes (measured at B=1, T=64 on a tiny model).
FIXED_OVERHEAD = 8 * MiB
#: Groups a run accumulates when none are given (as poslens.measurement.pipeline.measure's default).
DEFAULT_GROUPS = DEFAULTS.groups


@dataclass(frozen=True)
class MemoryEstimate:
    """Estimated peak memory of one capture forward pass, in bytes, by component.

    ``total = runtime + weights + activations + sums + max(slack·attention, slack·(scores + capture), logits)``
    (docs/benchmarks.md, "Memory estimate calibration", explains each term); ``increase`` is the part above
    the loaded model, ``total - runtime - weights``.

    Attributes:
        batch_size: Sequences per forward pass.
        seq_len: Tokens per sequence.
        weights: Bytes of the model's parameters and buffers.
        runtime: Bytes the process holds besides the weights (:func:`poslens.runtime.system.runtime_bytes`).
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
class ModelShape:
    """What the estimate reads of a model: its sizes, its weights' bytes and the dtype planned for.

    Attributes:
        n_layers: Layers.
        n_heads: Query heads per layer.
        n_kv_heads: Key/value heads per layer.
        d_head: Width of one head.
        d_model: Width of the residual stream.
        d_mlp: Width of the MLP.
        vocab: Rows of the output embedding.
        mask_kinds: Distinct attention masks (one per sliding-window width, one for full attention).
        weights: Bytes of the parameters and buffers (:func:`weight_bytes`).
        dtype: The model dtype planned for.

    Example:
        >>> shape = ModelShape(2, 4, 2, 8, 32, 64, 256, 1, weights=MiB, dtype=torch.float32)
        >>> estimate_from_shape(shape, 1, 16, block_elements=1 << 19, runtime=0, slack=1.0, groups=1).weights == MiB
        True
    """

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


def model_tensors(model: PosModel) -> list[torch.Tensor]:
    """The model's parameters and buffers (hf_model's, or a HookedTransformer's), each storage once (tied embeddings).

    Args:
        model: The loaded model.

    Returns:
        The tensors, each once.

    Example:
        >>> import tempfile, poslens
        >>> from poslens.testing import save_tiny_model
        >>> model = poslens.load_model(save_tiny_model(tempfile.mkdtemp(), "llama"), device="cpu")
        >>> sum(t.numel() for t in model_tensors(model)) >= sum(p.numel() for p in model.hf_model.parameters())
        True
    """
    hf = getattr(model, "module", None) or model.hf_model
    seen: dict[int, torch.Tensor] = {}
    for t in list(hf.parameters()) + list(hf.buffers()):
        seen.setdefault(id(t), t)
    return list(seen.values())


def weight_bytes(model: PosModel, dtype: torch.dtype | None = None, device: str | torch.device | None = None) -> int:
    """Bytes of hf_model's parameters and buffers (floating ones counted in ``dtype`` if given).

    ``device`` restricts the count to tensors on that kind of device.

    Args:
        model: The loaded model.
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
    for t in model_tensors(model):
        if kind is not None and t.device.type != kind:
            continue
        size = _element_size(dtype) if dtype is not None and t.is_floating_point() else t.element_size()
        total += t.numel() * size
    return total


def model_device(model: PosModel) -> torch.device:
    """The device of the model's first parameter.

    Args:
        model: The loaded model.

    Returns:
        The device.

    Example:
        >>> import tempfile, poslens
        >>> from poslens.testing import save_tiny_model
        >>> model_device(poslens.load_model(save_tiny_model(tempfile.mkdtemp(), "llama"), device="cpu"))
        device(type='cpu')
    """
    return next((getattr(model, "module", None) or model.hf_model).parameters()).device


def _model_dtype(model: PosModel) -> torch.dtype:
    for t in (getattr(model, "module", None) or model.hf_model).parameters():
        if t.is_floating_point():
            return t.dtype
    return torch.float32


def model_shape(model: PosModel, dtype: torch.dtype | None = None) -> ModelShape:
    """The sizes of ``model`` that the estimate uses, read from its config (a bridge's or a HookedTransformer's).

    Args:
        model: A :class:`~poslens.model.pos_model.PosModel`.
        dtype: The model dtype to plan for; default its weights' dtype.

    Returns:
        The shape.

    Example:
        >>> import tempfile, poslens
        >>> from poslens.testing import save_tiny_model
        >>> model = poslens.load_model(save_tiny_model(tempfile.mkdtemp(), "llama"), device="cpu")
        >>> shape = model_shape(model)
        >>> (shape.n_layers, shape.n_heads, shape.dtype) == (model.n_layers, model.n_heads, torch.float32)
        True
    """
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
    windows = list(getattr(model, "sliding_windows", None) or [None])
    return ModelShape(
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


def estimate_from_shape(
    shape: ModelShape, batch: int, t: int, block_elements: int, runtime: int, slack: float, groups: int, logit_positions: int = 1
) -> MemoryEstimate:
    """The estimate of one capture forward pass, from a model's shape (the formula of docs/benchmarks.md).

    Args:
        shape: The model's sizes (:func:`model_shape`).
        batch: Sequences per forward pass.
        t: Tokens per sequence.
        block_elements: The capture's float64 row-block buffer, in elements.
        runtime: Resident memory besides the weights, added to the total.
        slack: The allocator factor on the attention-phase terms (:func:`allocator_slack`).
        groups: Number of groups the run accumulates.
        logit_positions: Positions whose logits the pass keeps: 1 for a capture pass (the last position's); T for
            the next-token loss, which also holds them as float64 log-probabilities.

    Returns:
        The estimate, by component.

    Example:
        >>> shape = ModelShape(2, 4, 2, 8, 32, 64, 256, 1, weights=0, dtype=torch.float32)
        >>> one = estimate_from_shape(shape, 1, 64, block_elements=1 << 19, runtime=0, slack=1.0, groups=8)
        >>> two = estimate_from_shape(shape, 2, 64, block_elements=1 << 19, runtime=0, slack=1.0, groups=8)
        >>> two.scores == 2 * one.scores, two.sums == one.sums
        (True, True)
    """
    e = _element_size(shape.dtype)
    b, h, k, d = batch, shape.n_heads, shape.n_kv_heads, shape.d_head
    activations = (
        e * (4 * b * t * shape.d_model + b * t * d * (5 * h + 8 * k) + 3 * b * t * shape.d_mlp + shape.mask_kinds * b * t * t) + FIXED_OVERHEAD
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
        # a capture pass keeps the last position's logits only; the loss pass every position's, and their float64 log-softmax
        logits=e * b * shape.vocab if logit_positions == 1 else (e + 16) * b * shape.vocab * logit_positions,
        sums=sums_bytes(groups, shape.n_layers, shape.n_heads, Binning(t)) + counterfactual_bytes(groups, shape.n_layers, shape.n_heads, Binning(t)),
        slack=slack,
    )


def allocator_slack(device: str | torch.device | None) -> float:
    """The allocator factor for ``device``: :data:`CUDA_SLACK` on CUDA, else :data:`CPU_SLACK`.

    Args:
        device: The device the run uses; None counts as the CPU.

    Returns:
        The factor.

    Example:
        >>> allocator_slack("cpu"), allocator_slack("cuda:0")
        (1.45, 1.0)
    """
    return CUDA_SLACK if device is not None and torch.device(device).type == "cuda" else CPU_SLACK


def estimate_peak_bytes(
    model: PosModel,
    batch_size: int,
    seq_len: int,
    dtype: torch.dtype | None = None,
    block_elements: int | None = None,
    runtime_overhead_bytes: int = 0,
    device: str | torch.device | None = None,
    groups: int = DEFAULT_GROUPS,
) -> MemoryEstimate:
    """Estimate the peak memory of one capture forward pass of ``batch_size`` × ``seq_len`` tokens.

    ``model`` is a :class:`poslens.model.pos_model.PosModel`. ``dtype`` is the model
    dtype to plan for (default: the dtype its weights have); ``block_elements``
    the capture's float64 row-block buffer (default: the device's, see
    :class:`poslens.capture.cell_sum_capture.CellSumCapture`);
    ``runtime_overhead_bytes`` the resident memory besides the weights (see
    :func:`poslens.runtime.system.runtime_bytes`), added to the total; ``device`` picks the allocator
    slack (default: the model's device); ``groups`` the number of groups the
    run accumulates (its sums are held for the whole run). The formula is in
    docs/benchmarks.md, section "Memory estimate calibration".

    Args:
        model: The model to plan for.
        batch_size: Sequences per forward pass.
        seq_len: Tokens per sequence.
        dtype: The model dtype to plan for; default its weights' dtype.
        block_elements: The capture's row-block buffer size; default the device's.
        runtime_overhead_bytes: Resident memory besides the weights, added to the total.
        device: The device whose allocator slack applies; default the model's.
        groups: Number of groups the run accumulates.

    Returns:
        The estimate, by component.

    Raises:
        InputError: When ``batch_size``, ``seq_len`` or ``groups`` is below 1 (a ``ValueError``).

    Example:
        >>> import tempfile, poslens
        >>> from poslens.testing import save_tiny_model
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
        raise InputError(f"batch_size and seq_len must be ≥ 1, got {batch_size} and {seq_len}")
    device = torch.device(device if device is not None else model_device(model))
    block = block_elements or default_block_elements(device)
    if groups < 1:
        raise InputError(f"groups must be ≥ 1, got {groups}")
    return estimate_from_shape(model_shape(model, dtype), batch_size, seq_len, block, runtime_overhead_bytes, allocator_slack(device), groups)
