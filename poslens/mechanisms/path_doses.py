"""Dose-responses of the path-specific edits: is each readout monotone in the edit's dose, and where not (methodology §12.5).

The doses are the key-phase freeze's offsets D (per key: edit P0 and its sham)
and the mask-only profile's λ (with λ = 0, the unedited run, as its origin). For
each readout the change against the unedited run is read at every dose, and
:func:`dose_responses` says whether it rises, falls or neither, naming the
first pair of doses where the direction turns.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

__all__ = ["DOSE_READOUTS", "dose_responses", "monotone"]

#: The readouts whose dose-responses are checked: (metric, query window, layer, query bin).
DOSE_READOUTS = (
    ("resid_probe_r2_ge2", "all", -1, -1),
    ("attn_out_probe_r2_ge2", "all", -1, -1),
    ("resid_eta2_ge2", "all", -1, -1),
    ("leakage_pattern_ge2", "all", -1, -1),
    ("next_token_loss", "all", -1, -1),
)
_FAMILIES = (
    ("key0-phase", re.compile(r"^key0-phase:D=(\d+)$"), "D", False),
    ("key1-phase", re.compile(r"^key1-phase:D=(\d+)$"), "D", False),
    ("sink-mask-only", re.compile(r"^sink-mask-only:([0-9.]+)$"), "λ", True),
)


def monotone(doses: list[float], values: list[float]) -> tuple[str, str]:
    """Whether ``values`` rise, fall or neither along the sorted ``doses``, and where the direction first turns.

    Args:
        doses: The doses, ascending.
        values: The readout at each dose.

    Returns:
        ``(direction, where_not)``: direction ``"rises"``, ``"falls"``, ``"flat"`` or ``"not monotone"``;
        ``where_not`` names the first step against the direction of the first change (empty when monotone).

    Example:
        >>> monotone([0.0, 0.25, 0.5, 1.0], [0.0, -0.1, -0.2, -0.3])
        ('falls', '')
        >>> monotone([8, 64, 128], [0.1, 0.3, 0.2])
        ('not monotone', 'from 64 to 128')
    """
    steps = np.sign(np.diff(np.asarray(values, dtype=float)))
    steps = steps[np.isfinite(steps)]
    moving = steps[steps != 0]
    if not len(moving):
        return "flat", ""
    first = moving[0]
    for k, step in enumerate(np.sign(np.diff(np.asarray(values, dtype=float)))):
        if step == -first:
            return "not monotone", f"from {doses[k]:g} to {doses[k + 1]:g}"
    return ("rises" if first > 0 else "falls"), ""


def dose_responses(table: pd.DataFrame) -> pd.DataFrame:
    """The dose-response of each edit family and readout, from a path-specific tests table.

    Args:
        table: The table of :func:`poslens.mechanisms.path_tests.path_specific_tests` (its ``difference`` rows
            against ``none`` are read).

    Returns:
        One row per family and readout: ``edit``, ``dose_name``, ``metric``, ``doses``, ``changes`` (the change
        against the unedited run at each dose), ``direction`` and ``where_not``. Families with fewer than two
        doses are left out.

    Example:
        >>> rows = [dict(intervention=f"sink-mask-only:{d}", kind="difference", reference="none", metric="next_token_loss",
        ...              query_window="all", layer=-1, query_bin=-1, value=v) for d, v in ((0.5, 0.1), (1, 0.05))]
        >>> dose_responses(pd.DataFrame(rows))[["edit", "doses", "direction", "where_not"]].values.tolist()
        [['sink-mask-only', '0, 0.5, 1', 'not monotone', 'from 0.5 to 1']]
    """
    diffs = table[(table["kind"] == "difference") & (table["reference"] == "none")]
    out = []
    for family, pattern, dose_name, origin in _FAMILIES:
        members = {}
        for label in sorted(set(diffs["intervention"])):
            match = pattern.match(str(label))
            if match:
                members[float(match.group(1))] = label
        if len(members) + int(origin) < 2:
            continue
        doses = ([0.0] if origin else []) + sorted(members)
        for metric, window, layer, qbin in DOSE_READOUTS:
            values = [0.0] if origin else []
            for dose in sorted(members):
                row = diffs[
                    (diffs["intervention"] == members[dose])
                    & (diffs["metric"] == metric)
                    & (diffs["query_window"] == window)
                    & (diffs["layer"] == layer)
                    & (diffs["query_bin"] == qbin)
                ]
                values.append(float(row["value"].iloc[0]) if len(row) else np.nan)
            if np.isnan(values).any():
                continue
            direction, where_not = monotone(doses, values)
            out.append(
                {
                    "edit": family,
                    "dose_name": dose_name,
                    "metric": metric,
                    "doses": ", ".join(f"{d:g}" for d in doses),
                    "changes": ", ".join(f"{v:.4g}" for v in values),
                    "direction": direction,
                    "where_not": where_not,
                }
            )
    return pd.DataFrame(out, columns=["edit", "dose_name", "metric", "doses", "changes", "direction", "where_not"])
