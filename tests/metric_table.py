"""The metric table as the tests know it: one copy of the names and relations the references and checks restate.

Written from methodology §3–§5 in the tests' own words, and deliberately not read
from poslens (nothing here imports the package): a test compares poslens's own
lists (:data:`poslens.fit.metrics.RATIOS`, the glossary) with these, so a metric
renamed or dropped on one side shows as a difference instead of passing unseen.

- :data:`PER_HEAD`: every figure the naive reference computes per (layer, query window, head);
- :data:`SHARES`: the ratios of components, ``{share: (numerator, denominator)}``; a layer or
  model aggregate of a share is the ratio of the aggregated components, not a mean of ratios;
- :data:`ADDITIVE`: every other per-head figure, which aggregates as the mean over heads (then layers);
- :data:`PER_SEQUENCE`: the figures that need the per-sequence (cross-fitted) counterfactual;
- :data:`SATURATED`: the figures of the saturated (cell one-hot) fit;
- :data:`DECOMPOSITION`: the methodology §4 version 2 figures (components, shares, count share).

Example:
    >>> SHARES["rho_mask"]
    ('c_mask', 'leakage_pattern')
    >>> set(SHARES) | set(ADDITIVE) == set(PER_HEAD)
    True
"""

from __future__ import annotations

PER_HEAD = (
    "leakage_pattern",
    "leakage_logit",
    "leakage_pattern_saturated",
    "leakage_logit_saturated",
    "leakage_linear",
    "leakage_count",
    # methodology §4 version 2 with the per-sequence, cross-fitted counterfactual (the headline)
    "c_res",
    "c_mask",
    "rho_res",
    "rho_mask",
    "c_count",
    "count_share",
    "c_res_saturated",
    "c_mask_saturated",
    "rho_res_saturated",
    "rho_mask_saturated",
    "c_count_saturated",
    "count_share_saturated",
    # methodology §4 version 2 with the mean-field counterfactual (additive P)
    "c_res_meanfield",
    "c_mask_meanfield",
    "rho_res_meanfield",
    "rho_mask_meanfield",
    # methodology §4.5: version 1's logit split, for comparison only
    "c_res_logit",
    "c_mask_logit",
    "key0_mass",
    "entropy",
    "self_mass",
    "max_mass",
)
SHARES = {
    "rho_res": ("c_res", "leakage_pattern"),
    "rho_mask": ("c_mask", "leakage_pattern"),
    "count_share": ("c_count", "c_mask"),
    "rho_res_saturated": ("c_res_saturated", "leakage_pattern_saturated"),
    "rho_mask_saturated": ("c_mask_saturated", "leakage_pattern_saturated"),
    "count_share_saturated": ("c_count_saturated", "c_mask_saturated"),
    "rho_res_meanfield": ("c_res_meanfield", "leakage_pattern"),
    "rho_mask_meanfield": ("c_mask_meanfield", "leakage_pattern"),
}
ADDITIVE = tuple(metric for metric in PER_HEAD if metric not in SHARES)
PER_SEQUENCE = (
    "c_res",
    "c_mask",
    "rho_res",
    "rho_mask",
    "count_share",
    "c_res_saturated",
    "c_mask_saturated",
    "rho_res_saturated",
    "rho_mask_saturated",
    "count_share_saturated",
)
SATURATED = tuple(metric for metric in PER_HEAD if metric.endswith("_saturated"))
DECOMPOSITION = tuple(metric for metric in PER_HEAD if metric.startswith(("c_", "rho_", "count_share")))
