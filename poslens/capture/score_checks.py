"""The capture's two checks of the scores it reads, and their errors: the mask is the expected one, the visible scores are finite.

Scores a model masked sit at the dtype's minimum; a score below
``MASKED_BELOW`` × that minimum counts as masked. On a layer's first batch the
capture checks that exactly the keys its row geometry calls invisible are
masked (:class:`MaskMismatchError` otherwise), and on every batch that the
visible scores are finite (:class:`NonFiniteScoresError`, naming layer and head).
"""

from __future__ import annotations

import torch
from jaxtyping import Bool, Float

from poslens.errors import PoslensError

MASKED_BELOW = 0.5  # a score below this fraction of the dtype's minimum counts as masked


class MaskMismatchError(PoslensError, RuntimeError):
    """The scores' masked entries are not the ones poslens expects for this layer.

    Raised by :meth:`poslens.capture.cell_sum_capture.CellSumCapture.reduce` (on the
    sync-free path: by its ``flush``) on a layer's first batch when keys outside the
    causal (or sliding-window) mask carry finite scores, or visible keys are masked
    (e.g. padding).

    Example:
        >>> raise mask_error(0, sliding_window=None, hidden_unmasked=True)
        Traceback (most recent call last):
        ...
        poslens.capture.score_checks.MaskMismatchError: layer 0: keys poslens treats as invisible (window=None) carry finite scores; ...
    """


class NonFiniteScoresError(PoslensError, FloatingPointError):
    """NaN or inf among the visible attention scores (e.g. float16 overflow).

    Raised by :meth:`poslens.capture.cell_sum_capture.CellSumCapture.reduce` (on the
    sync-free path: by its ``flush``); the message names the layer and head.

    Example:
        >>> raise non_finite_error(0, 2)
        Traceback (most recent call last):
        ...
        poslens.capture.score_checks.NonFiniteScoresError: NaN or inf in the attention scores of layer 0, head 2 ...
    """


def at_most(x: torch.Tensor, threshold: float) -> bool:
    """Every entry of ``x`` is at most ``threshold`` (true for an empty ``x``; false where a NaN is).

    Args:
        x: Any tensor.
        threshold: The bound.

    Returns:
        Whether every entry is at most ``threshold``.

    Example:
        >>> at_most(torch.tensor([1.0, float("nan")]), 2.0), at_most(torch.zeros(0), 0.0)
        (False, True)
    """
    return x.numel() == 0 or bool(x.amax() <= threshold)


def non_finite_error(layer: int, head: int) -> NonFiniteScoresError:
    """The error for a NaN or inf among the visible scores of ``layer``, first found in ``head``.

    Args:
        layer: The layer index.
        head: The first head found with a non-finite score.

    Returns:
        The error, to raise.

    Example:
        >>> str(non_finite_error(1, 2)).split(" (")[0]
        'NaN or inf in the attention scores of layer 1, head 2'
    """
    return NonFiniteScoresError(
        f"NaN or inf in the attention scores of layer {layer}, head {head} (in float16 this is usually overflow: use --dtype float32 or bfloat16)"
    )


def mask_error(layer: int, sliding_window: int | None, hidden_unmasked: bool) -> MaskMismatchError:
    """The mask check's error: invisible keys carry finite scores (``hidden_unmasked``), else visible keys are masked.

    Args:
        layer: The layer index.
        sliding_window: The layer's sliding window as the model records it (``None``: full causal).
        hidden_unmasked: Whether keys poslens treats as invisible carry finite scores.

    Returns:
        The error, to raise.

    Example:
        >>> str(mask_error(0, 4, hidden_unmasked=False)).split(";")[0]
        'layer 0: keys poslens treats as visible are masked in the scores (window=4)'
    """
    if hidden_unmasked:
        return MaskMismatchError(
            f"layer {layer}: keys poslens treats as invisible (window={sliding_window}) carry finite "
            "scores; the model's mask differs from the one recorded on the model"
        )
    return MaskMismatchError(
        f"layer {layer}: keys poslens treats as visible are masked in the scores "
        f"(window={sliding_window}); padding is not supported, use equal-length sequences"
    )


def explain_mask_failure(
    layer: int, sliding_window: int | None, scores: Float[torch.Tensor, "1 heads seq seq"], valid: Bool[torch.Tensor, "seq seq"]
) -> None:
    """Raise the error that explains why a layer's mask check failed on its first sequence's ``scores``.

    NaN or +inf anywhere (an overflowed score plus the mask stays +inf), or −inf on a
    visible key, is reported as the overflow itself rather than as a mask mismatch.

    Args:
        layer: The layer index.
        sliding_window: The layer's sliding window as the model records it.
        scores: The first sequence's scores, [1, H, T, T].
        valid: The visible (query, key) pairs, [T, T].

    Raises:
        NonFiniteScoresError: When a score is NaN or +inf, or a visible one −inf.
        MaskMismatchError: Otherwise.

    Example:
        >>> explain_mask_failure(0, None, torch.zeros(1, 1, 2, 2), torch.ones(2, 2).tril().bool())
        Traceback (most recent call last):
        ...
        poslens.capture.score_checks.MaskMismatchError: layer 0: keys poslens treats as invisible (window=None) carry finite scores; ...
    """
    bad = torch.isnan(scores) | torch.isposinf(scores) | (torch.isneginf(scores) & valid)
    if bad.any():
        raise non_finite_error(layer, int(torch.nonzero(bad)[0, 1]))
    unmasked = scores > MASKED_BELOW * torch.finfo(scores.dtype).min
    raise mask_error(layer, sliding_window, bool((unmasked & ~valid).any()))
