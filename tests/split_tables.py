"""A sink-split table built by hand for the claims' tests: the rows C8 reads and reports, on both readouts."""

from __future__ import annotations

import pandas as pd

from poslens.study.claims.lookup import figure_row


def split_table(r1=(0.9, 0.85, 0.95), r2=(0.92, 0.88, 0.96), model: str = "m") -> pd.DataFrame:
    """A sink-split table whose split is mostly the mask's count (the figures C8 reads and reports, both readouts)."""

    def split_row(metric, value, low, high, readout="V", kind="derived", intervention="split"):
        return dict(figure_row(metric, value, low, high, intervention=intervention, query_window="all", model=model), readout=readout, kind=kind)

    rows = []
    for readout in ("V", "R2"):
        derived = {
            "r1": r1,
            "r2": r2,
            "share_m": (0.9, 0.85, 0.95),
            "phi_m": (0.1, 0.08, 0.12),
            "phi_p": (0.01, 0.005, 0.015),
            "phi_sum": (0.11, 0.09, 0.13),
            "interaction": (0.0, -0.01, 0.01),
            "sink_total": (0.16, 0.13, 0.19),
            "sink_share": (0.4, 0.35, 0.45),
            "coverage": (0.7, 0.6, 0.8),
            "phi_m_beyond_sham": (0.08, 0.06, 0.1),
            "phi_p_beyond_sham": (-0.01, -0.02, -0.005),
            "p0_every_head_change": (-0.1, -0.15, -0.05),
        }
        rows += [split_row(metric, *values, readout=readout) for metric, values in derived.items()]
        rows.append(split_row("f", 0.4, 0.36, 0.44, readout=readout, kind="level", intervention="none"))
        rows += [split_row("f_change", -0.1, -0.12, -0.08, readout=readout, kind="difference", intervention=e) for e in ("m", "p", "mp", "s")]
    return pd.DataFrame(rows)
