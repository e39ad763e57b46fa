"""The command line prints a reduction above 1 as a change of sign, in the same words as the notebook display."""

from __future__ import annotations

import pandas as pd
from rich.console import Console

from poslens.measurement.result import Result
from poslens.study.part_printing import show_bos_swap


def _reductions(values: dict[int, float]) -> Result:
    rows = [
        dict(
            model="m",
            variant="base",
            intervention="bos:zero",
            layer=layer,
            head=-1,
            query_window=window,
            metric="reduction",
            value=value,
            ci_low=value - 0.2,
            ci_high=value + 0.2,
        )
        for layer, value in values.items()
        for window in ("early", "all")
    ]
    return Result(pd.DataFrame(rows), {})


def test_a_reduction_above_one_is_printed_as_a_change_of_sign(capsys):
    show_bos_swap(_reductions({1: 0.4, 2: 3.34, -1: 2.47}), Console())
    out = " ".join(capsys.readouterr().out.split())
    assert "3.34" in out
    for window in ("early", "all"):
        assert f"{window} queries: reduction above 1 (layer 2, mean of layers ≥ 1): C_res changed sign" in out
    assert "C_res changed sign" in out and "not a removal of more than 100%" in out


def test_reductions_within_zero_and_one_get_no_note(capsys):
    show_bos_swap(_reductions({1: 0.4, -1: 0.3}), Console())
    out = capsys.readouterr().out
    assert "0.4" in out and "changed sign" not in out
