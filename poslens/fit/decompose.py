"""Mask versus residual-stream shares of a head's leakage (methodology §4.2, version 2).

With P the projection of methodology §3.1 over the cells of one query window and
inner products weighted by cell pair counts, a head's pattern log a and its
mask-only counterfactual log a' (:mod:`poslens.fit.counterfactual`) give

    ρ_mask = ⟨P(log a), P(log a')⟩ / ‖P(log a)‖²,   ρ_res = 1 − ρ_mask,
    C_mask = ρ_mask · L(log a),                      C_res = ρ_res · L(log a).

The count term uses the same share with −P(c), c_i = log|V_i|. Version 1's
logit split, kept for comparison only (``c_res_logit``), is the share of P(s):
it is not invariant to per-query shifts of the logits, which the pattern ignores.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from jaxtyping import Float

from poslens.fit.stats import weighted_inner


def share(
    p_pattern: Float[np.ndarray, "*heads cells"], p_other: Float[np.ndarray, "*heads cells"], counts: Float[np.ndarray, " cells"]
) -> Float[np.ndarray, "*heads"] | float:
    """⟨P(log a), P(other)⟩ / ‖P(log a)‖² over cells (NaN where P(log a) = 0).

    Args:
        p_pattern: P(log a) over the cells, [..., K].
        p_other: P of the other term over the same cells, [..., K].
        counts: Number of pairs in each cell, [K].

    Returns:
        The share of each head.

    Example:
        >>> float(share(np.array([1.0, -1.0]), np.array([0.5, -0.5]), np.ones(2)))
        0.5
    """
    return share_of(weighted_inner(p_pattern, p_other, counts), weighted_inner(p_pattern, p_pattern, counts))


@dataclass
class Split:
    """A split of L(log a) into a mask part and a residual-stream part.

    Attributes:
        rho_mask: Share of L(log a) due to the mask (methodology §4.2).
        rho_res: Share due to the residual stream, 1 − ``rho_mask``.
        c_mask: The mask part of L(log a), ``rho_mask`` × L(log a).
        c_res: The residual-stream part, ``rho_res`` × L(log a).

    Example:
        >>> s = split(np.array([1.0, -1.0]), np.array([0.25, -0.25]), np.ones(2), leakage=0.2)
        >>> float(s.rho_mask), float(s.rho_res), round(float(s.c_res), 3)
        (0.25, 0.75, 0.15)
    """

    rho_mask: Float[np.ndarray, "*heads"] | float
    rho_res: Float[np.ndarray, "*heads"] | float
    c_mask: Float[np.ndarray, "*heads"] | float
    c_res: Float[np.ndarray, "*heads"] | float


def split(
    p_pattern: Float[np.ndarray, "*heads cells"],
    p_counterfactual: Float[np.ndarray, "*heads cells"],
    counts: Float[np.ndarray, " cells"],
    leakage: Float[np.ndarray, "*heads"] | float,
) -> Split:
    """methodology §4.2: the mask share is the part of P(log a) along P(log a') of the mask-only counterfactual.

    ``p_pattern``, ``p_counterfactual`` [..., K] over K cells with ``counts`` [K];
    ``leakage`` is L(log a) for the same projection.

    Args:
        p_pattern: P(log a) over the cells, [..., K].
        p_counterfactual: P(log a') of the mask-only counterfactual, [..., K].
        counts: Number of pairs in each cell, [K].
        leakage: L(log a), the leakage of the same projection.

    Returns:
        The shares and parts of each head.

    Example:
        >>> same = np.array([0.5, -0.5])
        >>> float(split(same, same, np.ones(2), leakage=0.3).c_res)   # the counterfactual explains everything
        0.0
    """
    return split_of(weighted_inner(p_pattern, p_counterfactual, counts), weighted_inner(p_pattern, p_pattern, counts), leakage)


def share_of(inner: Float[np.ndarray, "*heads"] | float, norm: Float[np.ndarray, "*heads"] | float) -> Float[np.ndarray, "*heads"] | float:
    """:func:`share` from its two inner products: ⟨P(log a), P(other)⟩ / ‖P(log a)‖² (NaN where ‖P(log a)‖² = 0).

    Args:
        inner: ⟨P(log a), P(other)⟩, as :func:`poslens.fit.stats.residual_grams` gives it.
        norm: ‖P(log a)‖².

    Returns:
        The share of each head.

    Example:
        >>> float(share_of(np.array(1.5), np.array(3.0)))
        0.5
    """
    with np.errstate(divide="ignore", invalid="ignore"):
        return inner / norm


def split_of(
    inner: Float[np.ndarray, "*heads"] | float, norm: Float[np.ndarray, "*heads"] | float, leakage: Float[np.ndarray, "*heads"] | float
) -> Split:
    """:func:`split` from its two inner products: ⟨P(log a), P(log a')⟩ and ‖P(log a)‖².

    Args:
        inner: ⟨P(log a), P(log a')⟩ of the pattern and the mask-only counterfactual.
        norm: ‖P(log a)‖².
        leakage: L(log a), the leakage of the same projection.

    Returns:
        The shares and parts of each head.

    Example:
        >>> parts = split_of(np.array(1.0), np.array(4.0), np.array(0.2))
        >>> float(parts.rho_mask), float(parts.rho_res), round(float(parts.c_res), 3)
        (0.25, 0.75, 0.15)
    """
    rho_mask = share_of(inner, norm)
    return Split(rho_mask=rho_mask, rho_res=1.0 - rho_mask, c_mask=rho_mask * leakage, c_res=(1.0 - rho_mask) * leakage)
