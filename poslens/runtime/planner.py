"""The batch size a run uses: the largest whose estimated peak fits the memory budget.

:func:`plan_batch` picks the largest batch whose estimate
(:func:`poslens.runtime.estimate.estimate_peak_bytes`) fits a budget (by
default a share of what is free now, :func:`poslens.runtime.system.free_memory_bytes`),
or raises :class:`InsufficientMemoryError` with the numbers and the longest
sequence that would fit; :func:`choose_batch_size` is what a run calls, and
agrees on one batch size over torchrun ranks. How good the estimate is:
docs/benchmarks.md, section "Memory estimate calibration".

Example:
    >>> import tempfile, poslens
    >>> from poslens.testing import save_tiny_model
    >>> model = poslens.load_model(save_tiny_model(tempfile.mkdtemp(), "llama"), device="cpu")
    >>> plan_batch(model, seq_len=128, n_seqs=64, budget_bytes="4GiB", runtime=0)
    64
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from poslens.capture.row_blocks import default_block_elements
from poslens.errors import InputError, PoslensError
from poslens.model.pos_model import PosModel
from poslens.runtime.estimate import (
    DEFAULT_GROUPS,
    MemoryEstimate,
    MiB,
    allocator_slack,
    estimate_from_shape,
    estimate_peak_bytes,
    model_device,
    model_shape,
)
from poslens.runtime.system import free_memory_bytes, runtime_bytes

#: Share of the free memory that the default budget (no --max-memory) plans for.
FREE_SHARE = 0.8


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

    def __init__(self, message: str, estimate: MemoryEstimate, need: int, budget: int, max_seq_len: int) -> None:
        super().__init__(message)
        self.estimate = estimate
        self.need = need
        self.budget = budget
        self.max_seq_len = max_seq_len


_UNITS = {
    "": 1,
    "b": 1,
    "k": 1 << 10,
    "kib": 1 << 10,
    "kb": 10**3,
    "m": 1 << 20,
    "mib": 1 << 20,
    "mb": 10**6,
    "g": 1 << 30,
    "gib": 1 << 30,
    "gb": 10**9,
    "t": 1 << 40,
    "tib": 1 << 40,
    "tb": 10**12,
}


def parse_bytes(text: str | int, what: str = "memory") -> int:
    """A size: ``"8GB"``, ``"512MiB"``, ``"1.5G"``, ``"123456"`` (bytes) or an int.

    kB, MB, GB, TB are powers of 1000; KiB, MiB, GiB, TiB and the bare letters
    K, M, G, T powers of 1024.

    Args:
        text: The size, as text or a number of bytes.
        what: What the size is a budget of, as the messages name it (``"memory"``, ``"disk"``).

    Returns:
        The size in bytes.

    Raises:
        InputError: When ``text`` is not a size, or not a positive finite one.

    Example:
        >>> parse_bytes("512MiB"), parse_bytes("2G"), parse_bytes("1.5GB"), parse_bytes(1024)
        (536870912, 2147483648, 1500000000, 1024)
        >>> parse_bytes("0", what="disk")
        Traceback (most recent call last):
        poslens.errors.InputError: a disk budget must be positive and finite, got '0' (examples: 8GB, 512MiB, 1.5G)
    """
    if isinstance(text, int) and not isinstance(text, bool):
        value = float(text)
    else:
        s = str(text).strip().replace(" ", "").replace("_", "")
        number = s.rstrip("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
        unit = s[len(number) :].lower()
        try:
            value = float(number) * _UNITS[unit]
        except (KeyError, ValueError):
            raise InputError(f"not a {what} size: {text!r} (examples: 8GB, 512MiB, 1.5G)") from None
    if not 0 < value < float("inf"):  # also refuses nan, and a size like 1e400GB that overflows to inf
        raise InputError(f"a {what} budget must be positive and finite, got {text!r} (examples: 8GB, 512MiB, 1.5G)")
    return int(value)


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
    model: PosModel,
    seq_len: int,
    n_seqs: int,
    budget_bytes: int | str | None = None,
    device: str | torch.device | None = None,
    *,
    dtype: torch.dtype | None = None,
    block_elements: int | None = None,
    runtime: int | None = None,
    groups: int = DEFAULT_GROUPS,
    logit_positions: int = 1,
) -> int:
    """The largest batch size ≤ ``n_seqs`` whose estimated peak fits the memory budget.

    ``budget_bytes`` (bytes, or a size such as ``"8GB"``) bounds the whole
    process on ``device`` (default: the model's): runtime + weights + the
    forward's increase must fit; ``runtime`` is then measured
    (:func:`~poslens.runtime.system.runtime_bytes`) unless given. Without a budget, the forward's
    increase over the loaded model must fit in :data:`FREE_SHARE` (80%) of
    what is free now (:func:`~poslens.runtime.system.free_memory_bytes`): the weights are already
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
        logit_positions: Positions whose logits the pass keeps (the loss pass: every one; :func:`estimate_from_shape`).

    Returns:
        The batch size.

    Raises:
        InsufficientMemoryError: When one sequence does not fit.
        InputError: When ``n_seqs`` or ``seq_len`` is below 1 (a ``ValueError``).

    Example:
        >>> import tempfile, poslens
        >>> from poslens.testing import save_tiny_model
        >>> model = poslens.load_model(save_tiny_model(tempfile.mkdtemp(), "llama"))
        >>> need4 = estimate_peak_bytes(model, 4, 128).total
        >>> plan_batch(model, 128, n_seqs=64, budget_bytes=need4, runtime=0)
        4
        >>> plan_batch(model, 128, n_seqs=2, budget_bytes=need4, runtime=0)
        2
        >>> plan_batch(model, 512, n_seqs=64, budget_bytes="1MiB", runtime=0)
        Traceback (most recent call last):
        ...
        poslens.runtime.planner.InsufficientMemoryError: not enough memory for one sequence of 512 tokens: ...
    """
    if n_seqs < 1:
        raise InputError(f"n_seqs must be ≥ 1, got {n_seqs}")
    if seq_len < 1:
        raise InputError(f"seq_len must be ≥ 1, got {seq_len}")
    device = torch.device(device or model_device(model))
    shape = model_shape(model, dtype)
    slack = allocator_slack(device)
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
        est = estimate_from_shape(shape, b, t, block, base, slack, groups, logit_positions)
        return est.total if whole else est.increase

    def necessary(b: int, t: int) -> bool:
        # the estimate without the capture's term: monotone in b and t, and never above need
        est = estimate_from_shape(shape, b, t, block, base, slack, groups, logit_positions)
        floor = est.activations + est.sums + int(max(slack * est.attention, est.logits))
        return (est.total - est.increase if whole else 0) + floor <= budget

    best = _largest(lambda b: need(b, seq_len) <= budget, lambda b: necessary(b, seq_len), n_seqs)
    if best:
        return best
    one = estimate_from_shape(shape, 1, seq_len, block, base, slack, groups, logit_positions)
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
    model: PosModel,
    seq_len: int,
    n_seqs: int,
    groups: int,
    batch_size: int | None = None,
    max_memory: int | str | None = None,
    device: str | torch.device | None = None,
    logit_positions: int = 1,
) -> int:
    """The batch size a run uses: ``batch_size`` as given, or the largest that fits ``max_memory``.

    - ``max_memory=None`` and a ``batch_size``: that batch size, unchecked (as before planning existed);
    - ``max_memory="free"`` (or None with ``batch_size=None``): plan against the free memory;
    - ``max_memory`` a size (``"8GB"``, bytes): plan against that budget for the whole process.

    When planning, ``batch_size`` (if given) is an upper bound, and so is the
    number of sequences (a batch may span several groups: :func:`poslens.measurement.batching.batches`).
    Under torchrun every rank plans and all take the smallest result,
    so that they shard the same list of batches; if one rank cannot fit one
    sequence, every rank raises :class:`InsufficientMemoryError`. ``batch_size`` was checked (≥ 1) where
    the run entered (:func:`poslens.options.check_integers`).

    Args:
        model: The loaded model.
        seq_len: Tokens per sequence.
        n_seqs: Number of sequences to measure.
        groups: Number of groups the sequences are split into.
        batch_size: The batch size asked for (an upper bound when planning).
        max_memory: ``None``, ``"free"``, or a memory budget.
        device: The device to plan for; default the model's.
        logit_positions: Positions whose logits the pass keeps: 1 for a capture pass, T for the next-token loss.

    Returns:
        The batch size, the same on every rank.

    Raises:
        InsufficientMemoryError: When this rank, or another rank, cannot fit one sequence.

    Example:
        >>> choose_batch_size(model, 128, n_seqs=32, groups=8, batch_size=6)  # doctest: +SKIP
        6
        >>> choose_batch_size(model, 128, n_seqs=32, groups=8, max_memory="free")  # all 32 if they fit  # doctest: +SKIP
        32
    """
    if max_memory is None and batch_size is not None:
        return batch_size
    cap = n_seqs if batch_size is None else min(batch_size, n_seqs)
    budget = None if max_memory is None or (isinstance(max_memory, str) and max_memory.lower() in ("free", "auto")) else max_memory
    error: InsufficientMemoryError | None = None
    try:
        chosen = plan_batch(model, seq_len, cap, budget, device, groups=groups, logit_positions=logit_positions)
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
