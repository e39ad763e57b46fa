"""The compiled loops' own arithmetic: the vectorizable exponential of the capture loop against libm's."""

from __future__ import annotations

import math

import numpy as np
import pytest

from poslens.compiled import fused_available

pytestmark = pytest.mark.skipif(not fused_available(), reason="numba is not installed or POSLENS_FUSED=0")


def _exp_all(x: np.ndarray) -> np.ndarray:
    import numba

    from poslens.compiled_loops import exp_nonpositive

    @numba.njit
    def loop(x, out):
        for j in range(x.shape[0]):
            out[j] = exp_nonpositive(x[j])

    out = np.empty_like(x)
    loop(x, out)
    return out


def test_exp_nonpositive_is_within_one_ulp_of_libm_down_to_minus_708():
    rng = np.random.default_rng(0)
    edges = [0.0, -0.0, -1e-300, -math.log(2) / 2, -math.log(2) / 2 - 1e-16, -math.log(2), -1.0, -700.0, -708.0]
    x = np.concatenate([-rng.exponential(5.0, 1_000_000), -rng.uniform(0.0, 708.0, 1_000_000), edges])
    got = _exp_all(x)
    want = np.exp(x)  # libm's, correctly rounded to within 1 ulp itself
    ulps = np.abs(got - want) / np.spacing(want)
    assert ulps.max() <= 1.0, f"{ulps.max()} ulp at x = {x[ulps.argmax()]!r}"
    assert got[-len(edges)] == 1.0 and got[-len(edges) + 1] == 1.0  # exp(±0) exactly


def test_exp_nonpositive_underflows_to_zero_below_minus_708_and_at_minus_inf():
    x = np.array([-708.0001, -745.0, -746.0, -1e300, -np.inf])
    got = _exp_all(x)
    assert (got == 0.0).all()
    assert (np.exp(x) < 3.4e-308).all()  # what it leaves out is below every sum it enters, which hold a term of 1
