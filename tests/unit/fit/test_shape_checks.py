"""The jaxtyping shape annotations of poslens.fit and poslens.capture are checked during the test session.

tests/conftest.py installs jaxtyping's import hook (with beartype) before poslens
is imported; without it none of these calls would raise a type-check error.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from jaxtyping import TypeCheckError

from poslens.capture.cell_sum_capture import CellSumCapture
from poslens.fit.binning import Binning
from poslens.fit.counterfactual import fit_logits
from poslens.fit.mask_structure import structure
from poslens.fit.stats import weighted_inner
from poslens.fit.sums import SumFields


def test_sum_arrays_refuse_a_field_of_another_shape():
    arrays = SumFields.zeros(groups=2, layers=3, heads=4, binning=Binning(16)).as_dict()
    arrays["log_partition"] = np.zeros((2, 3, 5, 16, 16))  # 5 heads where the logit sums have 4
    with pytest.raises(TypeCheckError, match="poslens.fit.sums.SumFields"):
        SumFields(**arrays)


def test_sum_arrays_refuse_pooled_and_grouped_fields_together():
    arrays = SumFields.zeros(groups=2, layers=3, heads=4, binning=Binning(16)).as_dict()
    arrays["sequence_count"] = np.zeros(())  # pooled (no group axis) among per-group arrays
    with pytest.raises(TypeCheckError):
        SumFields(**arrays)


def test_fit_functions_check_their_arguments_shapes():
    with pytest.raises(TypeCheckError, match="weighted_inner"):
        weighted_inner(np.ones(3), np.ones(3), np.ones(4))  # 3 cells against 4 counts
    st = structure(Binning(8), rows=8, sliding_window=None)
    with pytest.raises(TypeCheckError, match="fit_logits"):
        fit_logits(st, np.zeros((2, 8)), np.zeros((3, 8)), np.zeros((2, 8)))  # 2 heads, then 3


def test_capture_checks_the_scores_shape():
    capture = CellSumCapture(SimpleNamespace(n_layers=1, n_heads=1, sliding_windows=[None]), Binning(8), groups=2)
    with pytest.raises(TypeCheckError, match="reduce"):
        capture.reduce(0, torch.zeros(1, 8, 8))  # no head axis
