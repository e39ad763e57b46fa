"""Attention rows rebuilt at key 0 from the logits, exactly, and the check every pattern edit runs.

An edit of the sink path sets key 0's weight in a row and must keep the row a
probability distribution. Rescaling the rest of the row by (1 − a'_i0)/(1 − a_i0),
with a_i0 read from a float32 pattern, breaks where a strong sink rounds a_i0 to
1.0: the division then multiplies the row by about 1e30. Here every row is written
from the logits instead, with x_i = s_i0 − ℓ_i and ℓ_i = logsumexp over the
visible keys j ≥ 1 of s_ij:

    a_i0 = σ(x_i),   a_ij = σ(−x_i) · softmax_{j ≥ 1}(s_ij),

in float64, σ(−x) computed as such (never 1 − a). An edit changes x_i (or sets
a_i0 outright) and keeps the softmax over the other keys. :func:`check_rows`
stops the forward pass with :class:`~poslens.errors.EditInvariantError` when an
edited row is not finite or does not sum to 1 within :data:`ROW_SUM_TOLERANCE`.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from poslens.errors import EditInvariantError

__all__ = ["ROW_SUM_TOLERANCE", "KeyZeroRows", "check_rows", "key_zero_rows", "visible_keys", "write_rows"]

#: How far an edited row's sum may be from 1 before the edit stops the run.
ROW_SUM_TOLERANCE = 1e-5


def visible_keys(scores: torch.Tensor) -> torch.Tensor:
    """Which keys each row sees: masked scores hold the dtype's minimum (the bridge) or −inf (``HookedTransformer``).

    A NaN score counts as visible, so that it reaches the row and :func:`check_rows` stops the run.

    Args:
        scores: Pre-softmax scores, [..., T, T].

    Returns:
        A boolean tensor of the same shape.

    Example:
        >>> s = torch.tensor([[0.0, torch.finfo(torch.float32).min], [1.0, 2.0]])
        >>> visible_keys(s).tolist()
        [[True, False], [True, True]]
    """
    return ~(scores <= torch.finfo(scores.dtype).min / 2)


class KeyZeroRows:
    """The rows of some heads split at key 0: x_i = s_i0 − ℓ_i and the softmax over the other visible keys, float64.

    Build it with :func:`key_zero_rows`.

    Attributes:
        x: s_i0 − ℓ_i, [batch, heads, T] (−inf where key 0 is hidden).
        other: softmax over the visible keys j ≥ 1 of s_ij, [batch, heads, T, T] (column 0 is 0).
        ell: ℓ_i, logsumexp over the visible keys j ≥ 1, [batch, heads, T].
        sees_key0: whether row i sees key 0, [batch, heads, T] (row 0 excluded: it is never edited).

    Example:
        >>> rows = key_zero_rows(torch.zeros(1, 1, 3, 3).tril() + torch.triu(torch.full((3, 3), -torch.inf), 1))
        >>> rows.rebuild(rows.x)[0, 0].tolist()   # unedited: the softmax of equal logits
        [[1.0, 0.0, 0.0], [0.5, 0.5, 0.0], [0.3333333333333333, 0.3333333333333333, 0.3333333333333333]]
    """

    def __init__(self, x: torch.Tensor, other: torch.Tensor, ell: torch.Tensor, sees_key0: torch.Tensor) -> None:
        self.x, self.other, self.ell, self.sees_key0 = x, other, ell, sees_key0

    def rebuild(self, x: torch.Tensor) -> torch.Tensor:
        """Rows with key 0's logit relative to the rest set to ``x``: [σ(x), σ(−x) · softmax_{j ≥ 1}], float64.

        Rows that do not see key 0, and row 0, are the unedited softmax.

        Args:
            x: The new x_i, [batch, heads, T].

        Returns:
            The rows, [batch, heads, T, T], float64.

        Example:
            >>> rows = key_zero_rows(torch.tensor([[[[0.0, -torch.inf], [50.0, 0.0]]]]))
            >>> rows.rebuild(rows.x - 100.0)[0, 0, 1].tolist()   # x = 50 moved to −50: a_i0 = σ(−50), the rest σ(50)
            [1.928749847963918e-22, 1.0]
        """
        x = torch.where(self.sees_key0, x, self.x)
        return self.with_key0(torch.sigmoid(x), torch.sigmoid(-x))

    def with_key0(self, key0: torch.Tensor, rest: torch.Tensor) -> torch.Tensor:
        """Rows whose key 0 gets weight ``key0`` and whose other keys share ``rest`` as the unedited softmax does.

        Args:
            key0: a_i0, [batch, heads, T].
            rest: 1 − a_i0, computed by the caller without subtracting (e.g. σ(−x)), [batch, heads, T].

        Returns:
            The rows, [batch, heads, T, T], float64; rows that do not see key 0 (and row 0) keep the unedited softmax.

        Example:
            >>> rows = key_zero_rows(torch.tensor([[[[0.0, -torch.inf], [0.0, 0.0]]]]))
            >>> rows.with_key0(torch.full((1, 1, 2), 0.25), torch.full((1, 1, 2), 0.75))[0, 0].tolist()
            [[1.0, 0.0], [0.25, 0.75]]
        """
        unedited_key0, unedited_rest = torch.sigmoid(self.x), torch.sigmoid(-self.x)
        key0 = torch.where(self.sees_key0, key0.to(torch.float64), unedited_key0)
        rest = torch.where(self.sees_key0, rest.to(torch.float64), unedited_rest)
        hidden = torch.isneginf(self.x)  # key 0 out of view (a window): the row is the softmax over j ≥ 1 alone
        key0, rest = torch.where(hidden, 0.0, key0), torch.where(hidden, 1.0, rest)
        out = rest[..., None] * self.other
        out[..., 0] = key0
        return out


def key_zero_rows(scores: torch.Tensor) -> KeyZeroRows:
    """Split each row of ``scores`` at key 0 (see :class:`KeyZeroRows`), in float64.

    Args:
        scores: Pre-softmax scores of the edited heads, [batch, heads, T, T], masked entries at the dtype's minimum or −inf.

    Returns:
        The split rows.

    Example:
        >>> rows = key_zero_rows(torch.tensor([[[[1.0, -torch.inf], [2.0, 0.0]]]]))
        >>> rows.x[0, 0].tolist(), rows.sees_key0[0, 0].tolist()   # row 0 has no key j ≥ 1, and is never edited
        ([inf, 2.0], [False, True])
    """
    visible = visible_keys(scores)
    s = torch.where(visible, scores.to(torch.float64), -torch.inf)
    rest = s.clone()
    rest[..., 0] = -torch.inf
    ell = torch.logsumexp(rest, dim=-1)  # −inf for row 0, which sees key 0 alone
    other = torch.where(torch.isfinite(ell)[..., None], torch.exp(rest - ell[..., None]), 0.0)
    x = s[..., 0] - ell
    sees_key0 = visible[..., 0].clone()
    sees_key0[..., 0] = False
    return KeyZeroRows(x, other, ell, sees_key0)


def check_rows(rows: torch.Tensor, edited: torch.Tensor, layer: int, heads: Sequence[int], label: str, tolerance: float = ROW_SUM_TOLERANCE) -> None:
    """Stop the run where an edited attention row is not finite or does not sum to 1 within ``tolerance``.

    Args:
        rows: The rows written into the pattern, [batch, heads, T, T] (``heads`` of them, in order).
        edited: Which rows the edit wrote, [batch, heads, T].
        layer: The layer (for the message).
        heads: The heads of ``rows``' second axis (for the message).
        label: The edit's name (for the message).
        tolerance: The largest |row sum − 1| allowed.

    Raises:
        EditInvariantError: Naming the edit, layer, head, sequence of the batch and row of the first bad row.

    Example:
        >>> rows = torch.tensor([[[[1.0, 0.0], [0.4, 0.4]]]])
        >>> check_rows(rows, torch.tensor([[[False, True]]]), 3, [5], "sink-ablation")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        poslens.errors.EditInvariantError: sink-ablation broke attention rows: layer 3, head 5, sequence 0 of the batch, row 1 ...
    """
    sums = rows.sum(-1)
    bad = edited & ~(torch.isfinite(sums) & ((sums - 1).abs() <= tolerance) & torch.isfinite(rows).all(-1))
    if not bool(bad.any()):
        return
    b, k, i = (int(v) for v in bad.nonzero()[0])
    count = int(bad.sum())
    raise EditInvariantError(
        f"{label} broke attention rows: layer {layer}, head {heads[k]}, sequence {b} of the batch, row {i} sums to "
        f"{float(sums[b, k, i]):.6g} (more than {tolerance:g} from 1); {count} edited row{'s are' if count > 1 else ' is'} off"
    )


def write_rows(pattern: torch.Tensor, heads: Sequence[int], rows: torch.Tensor, edited: torch.Tensor, layer: int, label: str) -> torch.Tensor:
    """The pattern with the edited rows of ``heads`` replaced by ``rows`` (in the pattern's dtype), each checked first.

    Rows the edit did not write (row 0, rows that do not see key 0) keep the model's own values.

    Args:
        pattern: The layer's pattern, [batch, all heads, T, T].
        heads: The edited heads, in the order of ``rows``' second axis.
        rows: The rebuilt rows, [batch, heads, T, T], float64.
        edited: Which rows the edit wrote, [batch, heads, T].
        layer: The layer (for the message).
        label: The edit's name (for the message).

    Returns:
        A new pattern.

    Raises:
        EditInvariantError: Where an edited row, in the pattern's dtype, is not finite or does not sum to 1 (:func:`check_rows`).

    Example:
        >>> pattern = torch.tensor([[[[1.0, 0.0], [0.5, 0.5]], [[1.0, 0.0], [0.9, 0.1]]]])
        >>> rows = torch.tensor([[[[0.0, 0.0], [0.2, 0.8]]]], dtype=torch.float64)   # row 0 not written
        >>> write_rows(pattern, [1], rows, torch.tensor([[[False, True]]]), 0, "edit")[0, 1].tolist()
        [[1.0, 0.0], [0.20000000298023224, 0.800000011920929]]
    """
    new = rows.to(pattern.dtype)
    check_rows(new.to(torch.float64), edited, layer, heads, label)
    out = pattern.clone()
    index = list(heads)
    out[:, index] = torch.where(edited[..., None], new, pattern[:, index])
    return out
