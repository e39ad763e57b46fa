"""The hard bounds of the bounded figures, and their 95% intervals kept inside them.

A figure such as L(log a) (a ΔR²), a mass of attention or a held-out R² cannot
leave its range: L(log a) lies in [0, 1] by construction, a held-out R² is at
most 1. Its interval, θ̂ ± t·se from the jackknife or from the folds' spread, is
symmetric and can reach past the bound when the figure sits near it (a probe R²
of 0.68 with an interval [0.13, 1.23]). Such an interval is clipped to the
bound: every value it loses is one the figure cannot take, so the clipped
interval holds the true value whenever the unclipped one does (the same
coverage), and it no longer claims values that cannot occur. The point
estimate is never changed (it lies inside its range already).

:data:`HARD_BOUNDS` lists every metric with a hard bound; the others are not
clipped, because the figure itself can leave its usual range: a share
(``rho_*``, ``count_share``) is a ratio of components of either sign, C_res
and C_mask are differences, a reduction is 1 − a ratio. The metric glossary
states for each metric which holds (:func:`interval_note`).
"""

from __future__ import annotations

import math

import numpy as np
from jaxtyping import Float

__all__ = ["HARD_BOUNDS", "clip_interval", "interval_note"]

_UNIT = (0.0, 1.0)
_AT_MOST_ONE = (-math.inf, 1.0)
_NON_NEGATIVE = (0.0, math.inf)

HARD_BOUNDS: dict[str, tuple[float, float]] = {
    **dict.fromkeys(
        (
            "leakage_pattern",
            "leakage_logit",
            "leakage_pattern_saturated",
            "leakage_logit_saturated",
            "leakage_count",
            "leakage_linear",
            "leakage_pattern_ge2",
            "key0_mass",
            "self_mass",
            "max_mass",
            "key0_mass_sink_heads",
            "sink_score",
            "resid_eta2",
            "resid_eta2_ge2",
            "attn_out_eta2",
            "attn_out_eta2_ge2",
            "readout_accuracy",
        ),
        _UNIT,
    ),
    **dict.fromkeys(
        (
            "leakage_pattern_heldout",
            "leakage_logit_heldout",
            "probe_r2",
            "resid_probe_r2",
            "resid_probe_r2_ge2",
            "attn_out_probe_r2",
            "attn_out_probe_r2_ge2",
        ),
        _AT_MOST_ONE,
    ),
    **dict.fromkeys(
        (
            "entropy",
            "leakage_pattern_numerator",
            "leakage_pattern_numerator_ge2",
            "leakage_pattern_sst",
            "leakage_pattern_sst_ge2",
            "next_token_loss",
            "dispersion",
        ),
        _NON_NEGATIVE,
    ),
    "trajectory_cosine": (-1.0, 1.0),
}
"""``{metric: (lower, upper)}``: the range each bounded figure cannot leave, and its interval is clipped to."""


def clip_interval(
    metric: str,
    value: Float[np.ndarray, "*shape"] | float,
    low: Float[np.ndarray, "*shape"] | float,
    high: Float[np.ndarray, "*shape"] | float,
) -> tuple[Float[np.ndarray, "*shape"], Float[np.ndarray, "*shape"]]:
    """The interval ``[low, high]`` of ``metric`` kept inside its hard bound; unchanged for a metric without one.

    An end is never moved past the value itself (a value at its bound, give or take rounding, keeps an
    interval that holds it). NaN ends stay NaN (no interval).

    Args:
        metric: The metric's name, as in the table.
        value: The figures' values.
        low: The interval's lower ends.
        high: The interval's upper ends.

    Returns:
        ``(low, high)``, clipped to :data:`HARD_BOUNDS` [metric].

    Example:
        >>> [x.tolist() for x in clip_interval("probe_r2", 0.68, np.array([0.13]), np.array([1.23]))]
        [[0.13], [1.0]]
        >>> [x.tolist() for x in clip_interval("key0_mass", np.array([0.1, 0.2]), np.array([-0.01, np.nan]), np.array([0.2, np.nan]))]
        [[0.0, nan], [0.2, nan]]
        >>> [x.tolist() for x in clip_interval("leakage_pattern", -1e-18, -0.02, 0.03)]   # a value at 0 up to rounding
        [-1e-18, 0.03]
        >>> [x.tolist() for x in clip_interval("c_res", 0.5, np.array([-0.3]), np.array([1.5]))]   # no hard bound
        [[-0.3], [1.5]]
    """
    low, high = np.asarray(low, dtype=np.float64), np.asarray(high, dtype=np.float64)
    if metric not in HARD_BOUNDS:
        return low, high
    lower, upper = HARD_BOUNDS[metric]
    value = np.asarray(value, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        clipped_low = np.where(np.isnan(low), low, np.minimum(np.clip(low, lower, upper), value))
        clipped_high = np.where(np.isnan(high), high, np.maximum(np.clip(high, lower, upper), value))
    return clipped_low, clipped_high


def interval_note(metric: str, range_text: str) -> str:
    """How the interval of ``metric`` treats the figure's range, in words (the metric glossary's range column).

    Args:
        metric: The metric's name.
        range_text: The metric's range as the glossary states it.

    Returns:
        For a metric of :data:`HARD_BOUNDS`, ``"interval clipped to [a, b]"``; for a range the figure only
        usually keeps to (``"usually …"``), why its interval is not clipped; otherwise ``""``.

    Example:
        >>> interval_note("probe_r2", "(−∞, 1]")
        'interval clipped to (−∞, 1]'
        >>> interval_note("rho_res", "usually [0, 1]")
        'interval not clipped: the figure itself can leave this range'
        >>> interval_note("c_res_logit", "unbounded")
        ''
    """
    if metric in HARD_BOUNDS:
        lower, upper = HARD_BOUNDS[metric]
        left = "(−∞" if lower == -math.inf else "[" + f"{lower:g}".replace("-", "−")
        right = "∞)" if upper == math.inf else f"{upper:g}]"
        return f"interval clipped to {left}, {right}"
    if range_text.startswith("usually"):
        return "interval not clipped: the figure itself can leave this range"
    return ""
