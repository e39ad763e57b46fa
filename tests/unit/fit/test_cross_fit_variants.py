"""CrossFit.variants keeps each group's variants once formed (within a byte budget), read-only, and gives the same numbers."""

from __future__ import annotations

import numpy as np
import pytest

from poslens.fit import cross_fit
from poslens.fit.cross_fit import CrossFit


def _cross(seed: int = 0) -> CrossFit:
    rng = np.random.default_rng(seed)
    fits = {w: rng.normal(size=(4, 3, 2, 10)) for w in ("early", "all")}
    return CrossFit(fits, {w: x.sum(axis=0) for w, x in fits.items()}, rng.uniform(1.0, 3.0, size=4))


def test_kept_variants_are_the_formed_ones_and_cannot_be_written():
    cross, fresh = _cross(), _cross()
    first = cross.variants(2)
    again = cross.variants(2)
    for w in ("early", "all"):
        # A^(−g) = (total − own) / (N − N_g), and A^(−g,−v) drops v too: written out for variant 1 of group 2
        want = (fresh.total[w] - fresh.fits[w][2] - fresh.fits[w][1]) / (fresh.sequence_count.sum() - fresh.sequence_count[[1, 2]].sum())
        np.testing.assert_allclose(again[w][1], want, rtol=1e-14)
        assert again[w] is first[w] and not again[w].flags.writeable
        with pytest.raises(ValueError, match="read-only"):
            again[w][0, 0, 0, 0] = 1.0
        np.testing.assert_array_equal(cross.variants(2, layer=1)[w], again[w][:, 1])


def test_above_the_budget_nothing_is_kept(monkeypatch):
    monkeypatch.setattr(cross_fit, "KEPT_VARIANTS_BYTES", 0)
    cross = _cross()
    first, again = cross.variants(0), cross.variants(0)
    assert first["all"] is not again["all"] and first["all"].flags.writeable
    np.testing.assert_array_equal(first["all"], again["all"])
