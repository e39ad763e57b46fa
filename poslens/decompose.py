"""Mask versus residual-stream decomposition of a head's leakage (METHOD §4).

P is linear and log a = s − log Z, so P(log a) = P(s) − P(log Z). With
inner products weighted by cell counts:

    ρ_res  = ⟨P(log a), P(s)⟩ / ‖P(log a)‖²
    ρ_mask = ⟨P(log a), −P(log Z)⟩ / ‖P(log a)‖²        (ρ_res + ρ_mask = 1)
    ρ_count = ⟨P(log a), −P(c)⟩ / ‖P(log a)‖²,  c_i = log|V_i| (the count term)

and the components in ΔR² units are C = ρ · L(log a).

The row-centred variant replaces s by s̃_ij = s_ij − m_i and log Z by
log Z̃_i = log Z_i − m_i, with m_i the mean visible logit of row i. Since
log a = s̃ − log Z̃ as well, the shares still add to 1, but a per-query offset
of the logits (which leaves the pattern unchanged) no longer moves them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from poslens.stats import weighted_inner


@dataclass
class Decomposition:
    """Shares and components of one or more heads (arrays broadcast over heads).

    Example:
        >>> counts = np.ones(3)
        >>> d = decompose(np.array([1.0, 0.0, -1.0]), np.array([0.0, 0.0, 0.0]), np.array([0.5, 0.0, -0.5]), counts, 0.2)
        >>> float(d.rho_res), float(d.rho_mask), float(d.c_mask)
        (1.0, 0.0, 0.0)
    """

    rho_res: np.ndarray
    rho_mask: np.ndarray
    rho_count: np.ndarray
    c_res: np.ndarray
    c_mask: np.ndarray
    c_count: np.ndarray
    rho_res_centered: np.ndarray | None = None
    c_res_centered: np.ndarray | None = None
    c_mask_centered: np.ndarray | None = None

    @property
    def count_share(self) -> np.ndarray:
        """The count term's part of the mask component, C_count / C_mask.

        Example:
            >>> d = decompose(np.array([0.5, -0.5]), np.array([1.0, -1.0]), np.array([0.5, -0.5]), np.ones(2), 0.3)
            >>> float(d.rho_mask), float(d.rho_count), float(d.count_share)   # half the mask part is the count term
            (2.0, 1.0, 0.5)
        """
        with np.errstate(divide="ignore", invalid="ignore"):
            return self.c_count / self.c_mask


def decompose(
    p_logit: np.ndarray,
    p_log_z: np.ndarray,
    p_count: np.ndarray,
    counts: np.ndarray,
    leakage_pattern: np.ndarray,
    p_row_mean: np.ndarray | None = None,
) -> Decomposition:
    """Split L(log a) into residual-stream and mask parts from the cell projections.

    ``p_logit``, ``p_log_z`` [..., K] and ``p_count`` [K] are P(s), P(log Z) and
    P(c) over K cells with ``counts`` [K]; ``leakage_pattern`` is L(log a).
    ``p_row_mean`` is P(m), m_i the row's mean visible logit, for the
    row-centred shares.

    Example:
        >>> d = decompose(np.array([0.0, 0.0]), np.array([1.0, -1.0]), np.array([1.0, -1.0]), np.ones(2), 0.3)
        >>> float(d.rho_mask), float(d.count_share)  # constant logits: all mask, all count term
        (1.0, 1.0)
    """
    p_pattern = p_logit - p_log_z
    norm = weighted_inner(p_pattern, p_pattern, counts)
    with np.errstate(divide="ignore", invalid="ignore"):
        rho_res = weighted_inner(p_pattern, p_logit, counts) / norm
        rho_mask = weighted_inner(p_pattern, -p_log_z, counts) / norm
        rho_count = weighted_inner(p_pattern, -np.broadcast_to(p_count, p_pattern.shape), counts) / norm
    centred = {}
    if p_row_mean is not None:
        with np.errstate(divide="ignore", invalid="ignore"):
            rho_centred = weighted_inner(p_pattern, p_logit - p_row_mean, counts) / norm
        centred = dict(
            rho_res_centered=rho_centred,
            c_res_centered=rho_centred * leakage_pattern,
            c_mask_centered=(1.0 - rho_centred) * leakage_pattern,
        )
    return Decomposition(
        **centred,
        rho_res=rho_res,
        rho_mask=rho_mask,
        rho_count=rho_count,
        c_res=rho_res * leakage_pattern,
        c_mask=rho_mask * leakage_pattern,
        c_count=rho_count * leakage_pattern,
    )
