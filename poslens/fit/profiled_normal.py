"""The profiled normal equations of the mask-only fit (methodology §4.1), factored once per structure and solved in O(D).

:class:`ProfiledNormal` is the linear algebra behind
:func:`poslens.fit.counterfactual.fit_logits`: with the row effects profiled
out, the normal matrix over (g_1..g_{D−1}, β) depends only on the structure of
the layer and query window (:func:`poslens.fit.mask_structure.structure`), and
in the prefix sums of the g's its g block is tridiagonal, so one banded
Cholesky factor solves every head, layer and jackknife replicate.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import scipy.linalg
from jaxtyping import Float

SINGULAR_PIVOT = 1e-12  # a Cholesky pivot (or β's Schur complement) below this fraction of the largest diagonal entry counts as zero


@dataclass(frozen=True, eq=False)
class ProfiledNormal:
    """The normal equations N θ = r of the fit with the row effects profiled out, over θ = (g_1..g_{D−1}, β).

    N = Σ_{i ≥ 1} X_iᵀ(I − 11ᵀ/n_i)X_i, where X_i has one row per visible pair
    of row i: a one-hot of its offset (g_0 dropped: it is the null direction
    shared with the row effects) and [j = 0]. Offsets a, b are both visible
    from row i exactly when i ≥ max(a, b), so the g block is
    diag(c) − M with c_a = rows − a and M_ab = T(max(a, b)), T(k) = Σ_{i ≥ k} 1/n_i;
    β borders it. In the prefix sums P_a = g_1 + … + g_a of the g's, the g block
    becomes tridiagonal (its differences are: M's rows differ by
    (1/n_a)·P_a), so one banded Cholesky factor per structure solves every head
    in O(D), with β by block elimination and one step of iterative refinement
    (the change of variables costs conditioning; the residual is taken with N
    itself, also in O(D)). A structure whose matrix is singular (e.g. rows = 2,
    where offset 1 only ever meets key 0) keeps the dense pseudo-inverse instead.

    Attributes:
        size: D: the D − 1 offsets and β.
        counts: c_a, a = 1..D−1.
        tail: T(a).
        border: N's β column over the g's.
        beta_beta: N's β diagonal entry.
        factor: Upper banded Cholesky factor of J, the g block in the prefix sums P.
        border_solved: J⁻¹ Eᵀ border.
        schur: β's Schur complement.
        pseudo_inverse: The dense pseudo-inverse, only for a singular structure.

    Example:
        >>> normal = ProfiledNormal.build(np.array([1.0, 2.0, 3.0, 4.0]), np.array([0.0, 1.0, 1.0, 1.0]), 4)
        >>> theta = normal.solve(np.array([1.0, 0.0, -1.0, 2.0]))
        >>> np.allclose(normal.matvec(theta), [1.0, 0.0, -1.0, 2.0])
        True
    """

    size: int  # D: D − 1 offsets and β
    counts: Float[np.ndarray, " offsets"]  # c_a, a = 1..D−1
    tail: Float[np.ndarray, " offsets"]  # T(a)
    border: Float[np.ndarray, " offsets"]  # N's β column over the g's
    beta_beta: float  # N's β diagonal entry
    factor: Float[np.ndarray, "2 offsets"] | None = None  # upper banded Cholesky factor of J, the g block in P
    border_solved: Float[np.ndarray, " offsets"] | None = None  # J⁻¹ Eᵀ border
    schur: float = 0.0  # β's Schur complement
    pseudo_inverse: Float[np.ndarray, "size size"] | None = None  # only for a singular structure

    @classmethod
    def build(cls, n_visible: Float[np.ndarray, " rows"], key0: Float[np.ndarray, " rows"], d: int) -> ProfiledNormal:
        """The normal equations of rows 1..len(n_visible)−1 with offsets 0..d−1 visible (``key0``: key 0 visible from row i).

        Args:
            n_visible: Number of visible keys of each row.
            key0: 1 where key 0 is visible from row i, else 0.
            d: Number of offsets D.

        Returns:
            The factored normal equations.

        Example:
            >>> ProfiledNormal.build(np.array([1.0, 2.0]), np.array([0.0, 1.0]), 2).pseudo_inverse is not None   # rows = 2
            True
        """
        t = len(n_visible)
        weight = np.zeros(t)
        weight[1:] = 1.0 / n_visible[1:]
        tail = np.cumsum(weight[::-1])[::-1]  # Σ_{i ≥ k} 1/n_i
        tail_key0 = np.cumsum((weight * key0)[::-1])[::-1]  # the same over the rows that see key 0
        offsets = np.arange(1, d)
        counts = (t - offsets).astype(np.float64)  # rows 1..t−1 with i ≥ a
        border = key0[offsets] - tail_key0[offsets]  # the key-0 pair of row i has offset i: g_i and β meet there (d ≤ t)
        beta_beta = float(key0.sum() - (tail_key0[1] if t > 1 else 0.0))
        if d == 1 or not key0.any():
            border, beta_beta = np.zeros(d - 1), 1.0  # no key-0 pair: β is not a parameter (its solution is 0)
        normal = cls(d, counts, tail[offsets], border, beta_beta)
        factor = _tridiagonal_factor(counts, weight[offsets], tail[offsets]) if d > 1 else None
        if factor is not None:
            border_up = _differences_up(border)
            solved = _banded_solve(factor, border_up[None])[0]
            schur = beta_beta - float(border_up @ solved)
            # an exactly singular matrix can factor with a pivot that is only rounding (rows = 2 does): its
            # solution would be ~1e16 and the fit's determined combinations would cancel to noise
            if schur > SINGULAR_PIVOT * max(beta_beta, 1.0):
                return dataclasses.replace(normal, factor=factor, border_solved=solved, schur=schur)
        return dataclasses.replace(normal, pseudo_inverse=np.linalg.pinv(normal.matvec(np.eye(d)), hermitian=True))

    def matvec(self, theta: Float[np.ndarray, "*batch size"]) -> Float[np.ndarray, "*batch size"]:
        """N θ, in O(D) per θ.

        Args:
            theta: Parameters (g_1..g_{D−1}, β), with any leading axes.

        Returns:
            N θ, with the same shape as ``theta``.

        Example:
            >>> normal = ProfiledNormal.build(np.array([1.0, 2.0, 3.0]), np.array([0.0, 1.0, 1.0]), 3)
            >>> normal.matvec(np.eye(3)).round(4).tolist()   # N itself
            [[1.1667, -0.3333, 0.1667], [-0.3333, 0.6667, 0.6667], [0.1667, 0.6667, 1.1667]]
        """
        g, beta = theta[..., :-1], theta[..., -1]
        prefix = np.cumsum(g, axis=-1)
        later = np.cumsum((self.tail * g)[..., ::-1], axis=-1)[..., ::-1]  # Σ_{b ≥ a} T(b) g_b
        mg = self.tail * prefix + later - self.tail * g  # (M g)_a = T(a)·P_a + Σ_{b > a} T(b) g_b
        out = np.empty_like(theta)
        out[..., :-1] = self.counts * g - mg + self.border * beta[..., None]
        out[..., -1] = g @ self.border + self.beta_beta * beta
        return out

    def solve(self, rhs: Float[np.ndarray, "*batch size"]) -> Float[np.ndarray, "*batch size"]:
        """θ with N θ = rhs, for any leading axes (the pseudo-inverse's θ for a singular structure).

        Args:
            rhs: Right-hand sides r, with any leading axes.

        Returns:
            θ, with the same shape as ``rhs``.

        Example:
            >>> normal = ProfiledNormal.build(np.array([1.0, 2.0, 3.0]), np.array([0.0, 1.0, 1.0]), 3)
            >>> normal.solve(normal.matvec(np.array([0.5, -1.0, 2.0]))).round(12).tolist()
            [0.5, -1.0, 2.0]
        """
        flat = rhs.reshape(-1, self.size)
        if self.factor is None:
            return (flat @ self.pseudo_inverse).reshape(rhs.shape)
        theta = self._solve_once(flat)
        theta += self._solve_once(flat - self.matvec(theta))  # one step of refinement
        return theta.reshape(rhs.shape)

    def _solve_once(self, rhs: Float[np.ndarray, "batch size"]) -> Float[np.ndarray, "batch size"]:
        assert self.factor is not None and self.border_solved is not None, "a factored structure has its factor and border solve"
        border = _differences_up(self.border)
        prefix = _banded_solve(self.factor, _differences_up(rhs[:, :-1]))
        beta = (rhs[:, -1] - prefix @ border) / self.schur
        prefix -= beta[:, None] * self.border_solved[None]
        g = np.diff(prefix, axis=1, prepend=0.0)  # E P: the g's back from their prefix sums
        return np.concatenate([g, beta[:, None]], axis=1)


def _tridiagonal_factor(
    counts: Float[np.ndarray, " offsets"], weight: Float[np.ndarray, " offsets"], tail: Float[np.ndarray, " offsets"]
) -> Float[np.ndarray, "2 offsets"] | None:
    """Upper banded Cholesky factor of J = Eᵀ N_gg E, None where J is not numerically positive definite.

    J's diagonal is c_a + c_{a+1} − 1/n_a (a < D − 1) and c_{D−1} − T(D − 1); its off-diagonal is −c_{a+1}.
    """
    diagonal = np.empty(len(counts))
    diagonal[:-1] = counts[:-1] + counts[1:] - weight[:-1]
    diagonal[-1] = counts[-1] - tail[-1]
    banded = np.zeros((2, len(counts)))
    banded[0, 1:] = -counts[1:]
    banded[1] = diagonal
    try:
        factor = scipy.linalg.cholesky_banded(banded)
    except np.linalg.LinAlgError:
        return None
    if (factor[1] ** 2).min() <= SINGULAR_PIVOT * np.abs(diagonal).max():
        return None
    return factor


def _banded_solve(factor: Float[np.ndarray, "2 offsets"], rhs: Float[np.ndarray, "batch offsets"]) -> Float[np.ndarray, "batch offsets"]:
    """J⁻¹ x for each row x of ``rhs``."""
    return scipy.linalg.cho_solve_banded((factor, False), rhs.T, check_finite=False).T


def _differences_up(x: Float[np.ndarray, "*batch n"]) -> Float[np.ndarray, "*batch n"]:
    """Eᵀ x: x_a − x_{a+1}, and x_n last (E maps prefix sums back to their terms)."""
    out = x.copy()
    out[..., :-1] -= x[..., 1:]
    return out
