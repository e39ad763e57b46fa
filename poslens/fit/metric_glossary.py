"""What every metric of a result table means: the single source of the metric glossary (docs/glossary.md).

:data:`GLOSSARY` maps each name that the ``metric`` column of
:meth:`poslens.measurement.result.Result.to_frame` can hold, from any producer
(a measurement, the sink table, a reduction, the fingerprint), to a
:class:`MetricEntry`: a definition in words, its formula in TeX, its range, its
sign convention, the section of the methodology page that defines it, and which
rows carry it. :func:`glossary_markdown` renders the entries as the glossary
page's list; ``tests/unit/fit/test_glossary.py`` checks that the page holds exactly that
list, and that a real measurement by every producer emits exactly these names.

Rewrite the page's list after editing an entry with::

    .venv/bin/python -m poslens.fit.metric_glossary docs/glossary.md

Longer than 400 lines because it is one table of data: one entry per metric
name, each with its definition, formula, range, sign and rows.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from poslens.fit.bounds import interval_note


@dataclass(frozen=True)
class MetricEntry:
    """One metric of the tidy table, as the glossary states it.

    Attributes:
        group: the heading the glossary lists it under.
        definition: what it is, in words (the first sentence is :meth:`short`).
        formula: its formula in TeX, without the surrounding ``$``.
        range: the values it can take.
        sign: its sign convention: what a negative value, or one above 1, means.
        section: the methodology section that defines it ("methodology §N").
        rows: which windows, layers and heads carry it, and which producer writes it.

    Example:
        >>> e = GLOSSARY["c_res"]
        >>> e.section, e.group
        ('methodology §4.2', 'Decomposition: mask versus residual stream')
    """

    group: str
    definition: str
    formula: str  # TeX, without the surrounding $...$
    range: str
    sign: str  # sign convention: what a negative value, or one above 1, means
    section: str  # "methodology §N"
    rows: str  # which windows, layers and heads carry it, and which producer writes it

    def short(self) -> str:
        """The definition's first sentence, for tables and the report.

        Returns:
            The sentence, ending in a full stop.

        Example:
            >>> GLOSSARY["self_mass"].short()
            "Mean over the window's query rows of a_ii, the weight a query puts on its own position."
        """
        return self.definition.split(". ")[0].rstrip(".") + "."


MEASURE = "every measurement (`poslens.measure`, `poslens leakage`, the baseline and intervention runs, `compare`)"
_PER_HEAD = "windows `early` and `all`; every layer and head, head −1 (mean over heads) and layer −1 (mean over layers ≥ 1)"
_NaN_SST = (
    " A head whose fitted quantity has no variance in the window gets no row (missing, not a number); its aggregates "
    "average the heads where it is defined."
)
_LEAK = "ΔR² of nested least-squares fits: 0 when absolute query position explains nothing beyond the offset"

_decomposition_sign = (
    "Usually between 0 and L(log a), but either component may be negative, and the other then exceeds L: the residual "
    "stream's absolute term and the mask's then act against each other. C_res + C_mask = L(log a) exactly, per head and "
    "at every aggregate."
)
_share_sign = (
    "Usually in [0, 1]; below 0 or above 1 when the residual stream's absolute term and the mask act against each other "
    "(one share above 1 forces the other below 0, since ρ_res + ρ_mask = 1). Aggregate shares are ratios of aggregated "
    "components, not means of per-head shares."
)

_PATH = "Path-specific tests: position in the residual stream, and the key-0 edits"
_PATH_ROWS = (
    "the path-specific tests' table (`poslens path-tests`, `path_specific_tests`): head −1; window `all` (`early` too for "
    "the leakage figures); `kind` `level` (the run's own figure, one per `intervention`: `none`, each key-phase freeze, "
    "each sham, each mask-only dose, the sink-path ablation) or `difference` (the run minus its `reference`, paired over "
    "the same groups)"
)
_GE2 = (
    " The `_ge2` name is the same figure averaged over layers ≥ 2 (layer −1 rows only): layer 1 has only layer 0's edit "
    "below it. Claim C3 reads `resid_probe_r2_ge2`."
)
_PROBE_SIGN = (
    "Negative when the probe predicts the held-out sequences' log(i + 1) worse than their own mean: no decodable position "
    "at this size. Its interval comes from the folds' spread (pooled value ± t · sd / √G), so it is wide when the folds "
    "disagree; a level's interval is clipped at 1, which no R² exceeds. A `difference` row is edited minus reference, "
    "fold by fold: a negative value is a fall of the position content under the edit."
)


def _path_entries() -> dict[str, MetricEntry]:
    """The entries of the path-specific tests' readouts, each per layer and over layers ≥ 2 (``_ge2``)."""
    sites = {
        "resid": ("the residual stream entering the block (`hook_resid_pre`)", "the residual stream"),
        "attn_out": ("the block's attention output (`hook_attn_out`)", "the attention output"),
    }
    out: dict[str, MetricEntry] = {}
    for site, (where, short) in sites.items():
        probe = MetricEntry(
            _PATH,
            f"Held-out R² of a ridge probe that predicts log(i + 1) from {where}, over the query rows 1 ≤ i < T. Features are "
            "standardized on the training groups with a fixed ridge penalty (0.1 of each feature's variance, fixed before any "
            "edit ran); fold g trains on the other groups and is scored on group g against its own mean; pooled over the "
            f"folds. It measures how much absolute position {short} carries, which is what later layers read.",
            r"R^2 = 1 - \sum_g SSE_g / \sum_g SST_g",
            "(−∞, 1]",
            _PROBE_SIGN,
            "methodology §12.4",
            f"{_PATH_ROWS}; every layer, layer −1 (mean over layers ≥ 1)",
        )
        eta = MetricEntry(
            _PATH,
            f"η², the share of the variance of {where} (summed over its dimensions, rows 1 ≤ i < T) that the exact position "
            "explains: the between-position sum of squares over the total. In-sample, with delete-one-group jackknife intervals.",
            r"\eta^2 = \sum_i n_i \lVert \bar x_i - \bar x \rVert^2 / \sum_{n,i} \lVert x_{n,i} - \bar x \rVert^2",
            "[0, 1]",
            "Not negative as a level; it carries a small upward bias from estimating each position's mean from N sequences, "
            "the same in an edited and an unedited run of the same corpus. A `difference` row may be negative: the edit "
            "lowered it.",
            "methodology §12.4",
            f"{_PATH_ROWS}; every layer, layer −1 (mean over layers ≥ 1)",
        )
        out[f"{site}_probe_r2"] = probe
        out[f"{site}_probe_r2_ge2"] = _ge2(probe)
        out[f"{site}_eta2"] = eta
        out[f"{site}_eta2_ge2"] = _ge2(eta)
    leak = MetricEntry(
        _PATH,
        "L(log a) as every measurement defines it (`leakage_pattern`), in the path-specific tests' runs: each layer read "
        "with the layers below it edited.",
        r"L(\log a) = \lVert P(\log a) \rVert^2 / SST(\log a)",
        "[0, 1]",
        "As `leakage_pattern`. A `difference` row may be negative.",
        "methodology §12.4",
        f"{_PATH_ROWS}; layer −1 only",
    )
    numerator = MetricEntry(
        _PATH,
        "‖P(log a)‖² per pair, the numerator of L(log a): the variance of log a that the absolute query position explains "
        "beyond the offset, divided by the number of pairs. Beside `leakage_pattern_sst` it says whether a change of L is "
        "a change of position signal or of the variance it is a share of.",
        r"\lVert P(\log a) \rVert^2 / n_{pairs}",
        "[0, ∞)",
        "Not negative as a level; a `difference` row may be negative.",
        "methodology §12.4",
        f"{_PATH_ROWS}; every layer (the mean over heads), layer −1 (mean over layers ≥ 1)",
    )
    sst = MetricEntry(
        _PATH,
        "SST(log a) per pair, the denominator of L(log a): the total variance of the log attention weights over the "
        "window's pairs, divided by the number of pairs.",
        r"SST(\log a) / n_{pairs}",
        "[0, ∞)",
        "Not negative as a level; a `difference` row may be negative.",
        "methodology §12.4",
        f"{_PATH_ROWS}; every layer (the mean over heads), layer −1 (mean over layers ≥ 1)",
    )
    out["leakage_pattern_ge2"] = _ge2(leak)
    out["leakage_pattern_numerator"] = numerator
    out["leakage_pattern_numerator_ge2"] = _ge2(numerator)
    out["leakage_pattern_sst"] = sst
    out["leakage_pattern_sst_ge2"] = _ge2(sst)
    out["key0_mass_sink_heads"] = MetricEntry(
        _PATH,
        "Mean a_i0, the weight on key 0, in the sink-reading heads of the unedited run (sink score ≥ τ): per layer over "
        "its sink-reading heads and the rows i ≥ 1, and over all of them per query bin (layer −1, `query_bin`). A layer's "
        "own pattern edit (the mask-only profile, the ablation) is after its measurement, so it shows at later layers only.",
        r"\overline{a_{i0}}",
        "[0, 1]",
        "As a level in [0, 1]; a `difference` row may be negative.",
        "methodology §12.4",
        f"{_PATH_ROWS}; layers with a sink-reading head (`query_bin` −1) and layer −1 per query bin",
    )
    out["next_token_loss"] = MetricEntry(
        _PATH,
        "Mean next-token loss, −log p(token i + 1 | tokens ≤ i) in nats, over the positions i ≥ 1 of each query bin "
        "(`query_bin` −1: every position ≥ 1), from the full forward of the run.",
        r"-\overline{\log p(t_{i+1} \mid t_{\le i})}",
        "[0, ∞)",
        "A `difference` row above 0 is what the edit costs the model; compare it with the sham's.",
        "methodology §12.4",
        f"{_PATH_ROWS}; layer −1, per query bin",
    )
    return out


def _ge2(entry: MetricEntry) -> MetricEntry:
    return MetricEntry(entry.group, entry.definition + _GE2, entry.formula, entry.range, entry.sign, entry.section, f"{_PATH_ROWS}; layer −1 only")


GLOSSARY: dict[str, MetricEntry] = {
    # ----------------------------------------------------------------- leakage (methodology §3)
    "leakage_pattern": MetricEntry(
        "Leakage: how much absolute position the attention pattern carries",
        "L(log a), the primary leakage of a head. The share of variance of the log attention weights log a_ij, over the "
        "window's query rows i ≥ 1 and visible keys j, explained by the absolute query position beyond the offset i − j: "
        "R² of the additive model (offset bin + query bin) minus R² of the relative model (offset bin alone)." + _NaN_SST,
        r"L(\log a) = R^2_F - R^2_R = \lVert P(\log a) \rVert^2 / SST(\log a)",
        "[0, 1]",
        f"Never negative in-sample ({_LEAK}). It carries a small positive bias from the fitted query-bin parameters: see "
        "`leakage_pattern_bias` and the held-out `leakage_pattern_heldout`.",
        "methodology §3.1",
        f"{_PER_HEAD}; {MEASURE}",
    ),
    "leakage_logit": MetricEntry(
        "Leakage: how much absolute position the attention pattern carries",
        "L(s): the same binned ΔR² for the attention logits s_ij (after RoPE and scaling, before the mask) instead of "
        "log a_ij. The softmax ignores any per-query shift of the logits, so absolute position in the logits need not "
        "reach the pattern." + _NaN_SST,
        r"L(s) = \lVert P(s) \rVert^2 / SST(s)",
        "[0, 1]",
        f"Never negative in-sample ({_LEAK}).",
        "methodology §3.1",
        f"{_PER_HEAD}; {MEASURE}",
    ),
    "leakage_pattern_saturated": MetricEntry(
        "Leakage: how much absolute position the attention pattern carries",
        "L(log a) with the saturated model: the cell means over (offset bin, query bin) in place of the additive fit, "
        "so interactions between offset and query position count too." + _NaN_SST,
        r"L_{sat}(\log a) = \lVert f_S - f_R \rVert^2 / SST(\log a)",
        "[0, 1], at least `leakage_pattern`",
        f"Never negative in-sample ({_LEAK}).",
        "methodology §3.1",
        f"{_PER_HEAD}; {MEASURE}",
    ),
    "leakage_logit_saturated": MetricEntry(
        "Leakage: how much absolute position the attention pattern carries",
        "L(s) with the saturated model (cell means over offset bin × query bin)." + _NaN_SST,
        r"L_{sat}(s) = \lVert f_S - f_R \rVert^2 / SST(s)",
        "[0, 1], at least `leakage_logit`",
        f"Never negative in-sample ({_LEAK}).",
        "methodology §3.1",
        f"{_PER_HEAD}; {MEASURE}",
    ),
    "leakage_count": MetricEntry(
        "Leakage: how much absolute position the attention pattern carries",
        "L(c), the binned ΔR² of the count term c_i = log |V_i| over the same pairs. c_i is the log of the number of keys "
        "query i sees: log(i + 1) under the causal mask, log W once a window of W is full. For a head with constant logits "
        "log a = −c − const, so its `leakage_pattern` equals this." + _NaN_SST,
        r"L(c) = \lVert P(c) \rVert^2 / SST(c), \quad c_i = \log \lvert V_i \rvert",
        "[0, 1]",
        f"Never negative ({_LEAK}).",
        "methodology §3.1",
        f"{_PER_HEAD}; {MEASURE}",
    ),
    "leakage_linear": MetricEntry(
        "Leakage: how much absolute position the attention pattern carries",
        "The linear ΔR² of earlier work, for comparison only. R² of the logits s on [i − j, i, j] minus R² on [i − j], by "
        "ordinary least squares with an intercept (the first model is the regression on [i − j, i], as i − j, i and j "
        "are collinear). It misses non-linear dependence such as log(i + 1), which is why the binned L is primary.",
        r"R^2(s \sim i - j, i, j) - R^2(s \sim i - j)",
        "[0, 1]",
        "Not negative (nested least squares); a plain division, so a head with constant logits gives NaN.",
        "methodology §3.2",
        f"{_PER_HEAD}; {MEASURE}",
    ),
    "leakage_pattern_heldout": MetricEntry(
        "Leakage: how much absolute position the attention pattern carries",
        "Cross-fitted L(log a): the relative and additive models are fitted on all groups of sequences but g and scored "
        "on group g; the value pools the folds. Fitting the query-bin parameters to noise does not raise it in "
        "expectation, so it has none of the in-sample figure's optimism. Claim C1 reads it.",
        r"L_{heldout} = \sum_g (SSE_{R,g} - SSE_{F,g}) / \sum_g SST_g",
        "(−∞, 1]",
        "Negative when the query-bin terms fitted on the other groups predict the held-out group worse than the offset "
        "alone does: no absolute position beyond the offset is detectable at this sample size (the in-sample fit was "
        "fitting noise). Its interval comes from the spread of the per-fold values (mean ± t · sd / √G over G folds), "
        "so it is wide when each group holds few sequences or G is small.",
        "methodology §5",
        f"{_PER_HEAD}; {MEASURE}",
    ),
    "leakage_logit_heldout": MetricEntry(
        "Leakage: how much absolute position the attention pattern carries",
        "Cross-fitted L(s), as `leakage_pattern_heldout` for the logits.",
        r"\sum_g (SSE_{R,g} - SSE_{F,g}) / \sum_g SST_g \text{ for } y = s",
        "(−∞, 1]",
        "Negative when the fitted query-bin terms predict the held-out group worse than the offset alone: no detectable "
        "absolute position in the logits at this size. Interval from the per-fold spread, wide with few sequences.",
        "methodology §5",
        f"{_PER_HEAD}; {MEASURE}",
    ),
    "leakage_pattern_bias": MetricEntry(
        "Leakage: how much absolute position the attention pattern carries",
        "The estimated optimism of the in-sample leakage: `leakage_pattern` minus `leakage_pattern_heldout`. Small and "
        "positive when the extra query-bin parameters fit a little noise.",
        r"L(\log a) - L_{heldout}(\log a)",
        "[−1, ∞) in principle; near 0 in practice",
        "Positive: the in-sample figure overstates the leakage by about this much. Negative only by noise (the held-out "
        "fit happened to score better). Its interval comes from the per-fold values.",
        "methodology §5",
        f"{_PER_HEAD}; {MEASURE}",
    ),
    # ----------------------------------------------------------------- decodability (methodology §3.3)
    "key0_mass": MetricEntry(
        "Decodability: row features of the attention pattern",
        "Mean over the window's query rows i ≥ 1 of a_i0, the weight on key 0 (the position-0 token). Over the `all` "
        "window it is the head's sink score. Under a sliding window a_i0 = 0 once key 0 is out of view, and those rows count.",
        r"\frac{1}{n} \sum_{i \ge 1} a_{i0}",
        "[0, 1]",
        "Not negative.",
        "methodology §3.3",
        f"{_PER_HEAD}; {MEASURE}",
    ),
    "entropy": MetricEntry(
        "Decodability: row features of the attention pattern",
        "Mean over the window's query rows of the entropy of row i of the pattern, in nats.",
        r"\frac{1}{n} \sum_{i \ge 1} \left( - \sum_{j \in V_i} a_{ij} \log a_{ij} \right)",
        "[0, log T] (row i can reach log |V_i|: uniform attention)",
        "Not negative.",
        "methodology §3.3",
        f"{_PER_HEAD}; {MEASURE}",
    ),
    "self_mass": MetricEntry(
        "Decodability: row features of the attention pattern",
        "Mean over the window's query rows of a_ii, the weight a query puts on its own position.",
        r"\frac{1}{n} \sum_{i \ge 1} a_{ii}",
        "[0, 1]",
        "Not negative.",
        "methodology §3.3",
        f"{_PER_HEAD}; {MEASURE}",
    ),
    "max_mass": MetricEntry(
        "Decodability: row features of the attention pattern",
        "Mean over the window's query rows of the largest weight in the row.",
        r"\frac{1}{n} \sum_{i \ge 1} \max_j a_{ij}",
        "(0, 1]; row i's maximum is at least 1/|V_i|",
        "Not negative.",
        "methodology §3.3",
        f"{_PER_HEAD}; {MEASURE}",
    ),
    "probe_r2": MetricEntry(
        "Decodability: row features of the attention pattern",
        "Held-out R² of a ridge probe that predicts log(i + 1) from one layer's attention-row features. The features "
        "are the four row features (`key0_mass`, `entropy`, `self_mass`, `max_mass`) of every head of the layer, per "
        "query row; the probe is fitted on all groups but g, scored on group g against group g's own mean, and pooled "
        "over the folds. It asks whether absolute position can be read from the "
        "layer's attention pattern at all. Claim C1 reads it.",
        r"R^2_{probe} = 1 - \sum_g SSE_g / \sum_g SST_g",
        "(−∞, 1]",
        "Negative when the probe predicts the held-out sequences' log(i + 1) worse than their own mean does: no decodable "
        "position signal at this sample size (the probe fitted noise in the training groups). Its interval is the "
        "pooled value ± t · sd / √G of the per-fold R², so it is wide when the folds disagree: each fold is scored on "
        "one group's few sequences, a fold with little spread in log(i + 1) can score far below 0, and t(0.975, G − 1) "
        "is large for small G (3.18 at G = 4).",
        "methodology §3.3",
        "windows `early` and `all`; head −1 only (one probe per layer, over all its heads), every layer and layer −1 "
        "(mean of the per-layer R² over layers ≥ 1); only from `poslens.measure(..., probe=True)` (the default; "
        "`poslens leakage`). Intervention and comparison runs are measured without it.",
    ),
    # ----------------------------------------------------------------- decomposition (methodology §4)
    "c_res": MetricEntry(
        "Decomposition: mask versus residual stream",
        "C_res, the residual-stream component of L(log a): the part of the pattern's absolute-position leakage that the "
        "head's mask-only counterfactual a' (its relative kernel and a constant key-0 sink, renormalized over the "
        "visible keys, built per sequence) does not reproduce. It counts the absolute component of the logits, "
        "whatever its origin; claims C3–C5 read it.",
        r"C_{res} = \rho_{res} \, L(\log a)",
        "usually [0, L(log a)]",
        _decomposition_sign,
        "methodology §4.2",
        f"{_PER_HEAD}; {MEASURE}",
    ),
    "c_mask": MetricEntry(
        "Decomposition: mask versus residual stream",
        "C_mask, the mask component of L(log a): the part of the leakage that the mask-only counterfactual a' reproduces. "
        "It is what the causal mask's softmax normalization makes of relative logits and a constant sink. Claim C2 reads it.",
        r"C_{mask} = \rho_{mask} \, L(\log a)",
        "usually [0, L(log a)]",
        _decomposition_sign,
        "methodology §4.2",
        f"{_PER_HEAD}; {MEASURE}",
    ),
    "rho_mask": MetricEntry(
        "Decomposition: mask versus residual stream",
        "ρ_mask, the mask's share of the leakage: the projection of the pattern's absolute part P(log a) on the "
        "counterfactual's P(log a'), as a fraction of ‖P(log a)‖². Inner products are weighted by pair counts.",
        r"\rho_{mask} = \langle P(\log a), P(\log a') \rangle / \lVert P(\log a) \rVert^2",
        "usually [0, 1]",
        _share_sign,
        "methodology §4.2",
        f"{_PER_HEAD} (aggregate: `c_mask` / `leakage_pattern` of the aggregates); {MEASURE}",
    ),
    "rho_res": MetricEntry(
        "Decomposition: mask versus residual stream",
        "ρ_res, the residual stream's share of the leakage: 1 − ρ_mask.",
        r"\rho_{res} = 1 - \rho_{mask}",
        "usually [0, 1]",
        _share_sign,
        "methodology §4.2",
        f"{_PER_HEAD} (aggregate: `c_res` / `leakage_pattern` of the aggregates); {MEASURE}",
    ),
    "c_count": MetricEntry(
        "Decomposition: mask versus residual stream",
        "C_count, the part of the leakage carried by the count term alone: the share of P(log a) along −P(c), "
        "c_i = log |V_i|, times L(log a). It is the simplest mask effect: dividing by the number of visible keys.",
        r"C_{count} = \frac{\langle P(\log a), -P(c) \rangle}{\lVert P(\log a) \rVert^2} \, L(\log a)",
        "usually [0, L(log a)]",
        "Negative when the pattern's absolute part runs against the count term (attention sharpening, not flattening, as i grows).",
        "methodology §4.2",
        f"{_PER_HEAD}; {MEASURE}",
    ),
    "count_share": MetricEntry(
        "Decomposition: mask versus residual stream",
        "The count term's share of the mask component: C_count / C_mask. 1 for a head with constant logits, whose whole leakage is the count term.",
        r"C_{count} / C_{mask}",
        "usually [0, 1]; unbounded",
        "Above 1 when the rest of the mask effect (the relative kernel and the sink, renormalized) works against the "
        "count term; negative when C_count and C_mask have opposite signs. Unstable where C_mask is near 0. Aggregates "
        "are ratios of the aggregated components.",
        "methodology §4.2",
        f"{_PER_HEAD}; {MEASURE}",
    ),
    "c_res_saturated": MetricEntry(
        "Decomposition: mask versus residual stream",
        "C_res with the saturated projection (cell means minus the relative fit) and L = `leakage_pattern_saturated`.",
        r"\rho_{res,sat} \, L_{sat}(\log a)",
        "usually [0, L_sat]",
        _decomposition_sign.replace("L(log a)", "L_sat(log a)"),
        "methodology §4.2",
        f"{_PER_HEAD}; {MEASURE}",
    ),
    "c_mask_saturated": MetricEntry(
        "Decomposition: mask versus residual stream",
        "C_mask with the saturated projection and L = `leakage_pattern_saturated`.",
        r"\rho_{mask,sat} \, L_{sat}(\log a)",
        "usually [0, L_sat]",
        _decomposition_sign.replace("L(log a)", "L_sat(log a)"),
        "methodology §4.2",
        f"{_PER_HEAD}; {MEASURE}",
    ),
    "c_count_saturated": MetricEntry(
        "Decomposition: mask versus residual stream",
        "C_count with the saturated projection and L = `leakage_pattern_saturated`.",
        r"\frac{\langle P_{sat}(\log a), -P_{sat}(c) \rangle}{\lVert P_{sat}(\log a) \rVert^2} \, L_{sat}(\log a)",
        "usually [0, L_sat]",
        "Negative when the pattern's absolute part runs against the count term.",
        "methodology §4.2",
        f"{_PER_HEAD}; {MEASURE}",
    ),
    "rho_res_saturated": MetricEntry(
        "Decomposition: mask versus residual stream",
        "ρ_res with the saturated projection.",
        r"1 - \rho_{mask,sat}",
        "usually [0, 1]",
        _share_sign,
        "methodology §4.2",
        f"{_PER_HEAD}; {MEASURE}",
    ),
    "rho_mask_saturated": MetricEntry(
        "Decomposition: mask versus residual stream",
        "ρ_mask with the saturated projection.",
        r"\langle P_{sat}(\log a), P_{sat}(\log a') \rangle / \lVert P_{sat}(\log a) \rVert^2",
        "usually [0, 1]",
        _share_sign,
        "methodology §4.2",
        f"{_PER_HEAD}; {MEASURE}",
    ),
    "count_share_saturated": MetricEntry(
        "Decomposition: mask versus residual stream",
        "count_share with the saturated projection: C_count_saturated / C_mask_saturated.",
        r"C_{count,sat} / C_{mask,sat}",
        "usually [0, 1]; unbounded",
        "As `count_share`: above 1 or negative when the rest of the mask effect works "
        "against the count term; unstable where C_mask_saturated is near 0.",
        "methodology §4.2",
        f"{_PER_HEAD}; {MEASURE}",
    ),
    "c_res_meanfield": MetricEntry(
        "Decomposition: mask versus residual stream",
        "C_res with the mean-field counterfactual: a' fitted to the head's mean pattern over sequences rather than built "
        "per sequence. Reported beside `c_res` for comparison; it is biased upward on heads with content-dependent "
        "(noisy) logits, because the mean of log Z_i is not log Z_i of the mean logits, so claims do not use it.",
        r"(1 - \rho_{mask}^{mf}) \, L(\log a)",
        "usually [0, L(log a)]",
        _decomposition_sign + " Its noise-floor bias does not shrink with more sequences.",
        "methodology §4.1; methodology §4.4",
        f"{_PER_HEAD}; {MEASURE}",
    ),
    "c_mask_meanfield": MetricEntry(
        "Decomposition: mask versus residual stream",
        "C_mask with the mean-field counterfactual (see `c_res_meanfield`).",
        r"\rho_{mask}^{mf} \, L(\log a)",
        "usually [0, L(log a)]",
        _decomposition_sign,
        "methodology §4.1; methodology §4.4",
        f"{_PER_HEAD}; {MEASURE}",
    ),
    "rho_res_meanfield": MetricEntry(
        "Decomposition: mask versus residual stream",
        "ρ_res with the mean-field counterfactual.",
        r"1 - \rho_{mask}^{mf}",
        "usually [0, 1]",
        _share_sign,
        "methodology §4.1; methodology §4.4",
        f"{_PER_HEAD}; {MEASURE}",
    ),
    "rho_mask_meanfield": MetricEntry(
        "Decomposition: mask versus residual stream",
        "ρ_mask with the mean-field counterfactual.",
        r"\langle P(\log a), P(\log a'^{(mf)}) \rangle / \lVert P(\log a) \rVert^2",
        "usually [0, 1]",
        _share_sign,
        "methodology §4.1; methodology §4.4",
        f"{_PER_HEAD}; {MEASURE}",
    ),
    "c_res_logit": MetricEntry(
        "Decomposition: mask versus residual stream",
        'Version 1\'s residual component, kept for comparison only ("logit split, not invariant to per-query shifts"): '
        "the share of P(log a) along P(s), times L(log a). A per-query shift of the logits, which leaves the pattern "
        "unchanged, moves it; no claim uses it.",
        r"\frac{\langle P(\log a), P(s) \rangle}{\lVert P(\log a) \rVert^2} \, L(\log a)",
        "unbounded",
        "Any sign, and far outside [0, L] on heads whose logits carry a per-query shift.",
        "methodology §4",
        f"{_PER_HEAD}; {MEASURE}",
    ),
    "c_mask_logit": MetricEntry(
        "Decomposition: mask versus residual stream",
        "Version 1's mask component, kept for comparison only: L(log a) − `c_res_logit`.",
        r"L(\log a) - C_{res}^{logit}",
        "unbounded",
        "Any sign; not invariant to per-query shifts of the logits.",
        "methodology §4",
        f"{_PER_HEAD}; {MEASURE}",
    ),
    # ----------------------------------------------------------------- sinks (methodology §6)
    "sink_score": MetricEntry(
        "Sinks",
        "A head's sink score: the mean over queries i ≥ 1 of a_i0 (its `key0_mass` over the `all` window). A head is "
        "sink-reading if its score is at least τ (default 0.3).",
        r"\frac{1}{T - 1} \sum_{i \ge 1} a_{i0}",
        "[0, 1]",
        "Not negative.",
        "methodology §6",
        "window `all`; every layer and head (no aggregate rows); `sink_table`, `poslens sinks`",
    ),
    "sink_heads": MetricEntry(
        "Sinks",
        "The number of sink-reading heads (sink score ≥ τ). Its interval runs from the heads whose score interval lies "
        "wholly at or above τ to the heads whose interval reaches τ.",
        r"\lvert \lbrace h : \text{score}(h) \ge \tau \rbrace \rvert",
        "0 … number of heads (per layer: H; model: layers × H)",
        "A count: never negative.",
        "methodology §6",
        "window `all`; head −1: per layer, and layer −1 = the count over every layer, layer 0 included (unlike the other "
        "layer −1 rows); `sink_table`, `poslens sinks`",
    ),
    # ----------------------------------------------------------------- interventions (methodology §7)
    "reduction": MetricEntry(
        "Interventions",
        "The fraction of C_res (the residual-stream component) that an intervention removes, against a paired baseline "
        "run on the same corpus and groups: 1 − C_res(after) / C_res(before). Its interval is a paired delete-one-group "
        "jackknife (each replicate refits both runs without group g). Claims C3 and C5 read it at layer −1.",
        r"1 - C_{res}^{after} / C_{res}^{before}",
        "(−∞, ∞)",
        "0: C_res unchanged; between 0 and 1: that fraction removed; 1: all of it removed. Negative: the intervention "
        "increased C_res (−0.2 means 20% more). Above 1: C_res changed sign, the intervention did more than remove it, "
        "it reversed it: 3.34 means C_res(after) = −2.34 × C_res(before), not that 334% of it was removed. "
        "Per-layer values are unstable where the baseline C_res is near 0.",
        "methodology §7",
        "the window asked for (`bos-swap` and `ablate-sinks` write `early` and `all`); head −1; layers ≥ 1 and layer −1, "
        "the ratio of the aggregates (1 − mean C_res after / mean C_res before), not a mean of per-layer ratios; no "
        "layer 0 row (C_res ≈ 0 there by construction); `intervention` is the after run's; `reduction`, "
        "`poslens bos-swap`, `poslens ablate-sinks`",
    ),
    # ----------------------------------------------------------------- path-specific tests (methodology §12)
    **_path_entries(),
    # ----------------------------------------------------------------- fingerprint (methodology §8)
    "dispersion": MetricEntry(
        "Fingerprint of position 0",
        "Relative dispersion of the position-0 residual stream across inputs: the mean distance of each input's vector "
        "from their mean, relative to the mean's norm. With an auto-prepended BOS position 0 sees only itself, so it must "
        "be 0 to floating point (the built-in check: at most 1e-5 over layers).",
        r"\frac{1}{N} \sum_n \lVert x_n - \bar x \rVert / \lVert \bar x \rVert",
        "[0, ∞)",
        "Not negative; 0 means the same vector for every input.",
        "methodology §8",
        "window `all`, head −1; layer l = the residual entering block l (0: the embedding), l = L the residual leaving "
        "the last block, −1 = the mean over 1 … L; `intervention` `position0:bos` or `position0:none`; `fingerprint`",
    ),
    "trajectory_cosine": MetricEntry(
        "Fingerprint of position 0",
        "Mean pairwise cosine similarity of the position-0 trajectories of K distinct first tokens, each run as a "
        "one-token input. Interval: delete-one-token jackknife.",
        r"\frac{2}{K(K-1)} \sum_{k < k'} \cos(x_k, x_{k'})",
        "[−1, 1]",
        "1: the trajectories point the same way; 0: orthogonal; negative: opposed.",
        "methodology §8",
        "window `all`, head −1; layers as for `dispersion`; intervention `position0:varied`; `fingerprint`",
    ),
    "readout_accuracy": MetricEntry(
        "Fingerprint of position 0",
        "Held-out accuracy of a readout of the position-0 token's identity (one of K tokens) from the sink-reading heads. "
        "The features are the heads' outputs (hook_z, mean over positions i ≥ 1), standardized on the training folds; "
        "the classifier is the nearest class centroid, trained on all groups but g, tested on g, pooled over the folds.",
        r"\frac{1}{N} \sum_n [\hat y_n = y_n]",
        "[0, 1]; chance is 1/K (`readout_chance`)",
        "Not negative; the fold interval is clipped to [0, 1].",
        "methodology §8",
        "window `all`, head −1; layer l reads only the heads of layer l; layer −1 is no aggregate over layers (unlike "
        "the other layer −1 rows) but one readout of all read heads of every layer together; intervention "
        "`position0:varied`; `fingerprint`",
    ),
    "readout_chance": MetricEntry(
        "Fingerprint of position 0",
        "Chance accuracy of the readout: 1/K for K balanced classes. A point value: its interval is the value.",
        r"1 / K",
        "(0, 1]",
        "Not negative.",
        "methodology §8",
        "as `readout_accuracy`",
    ),
    "readout_chance_permuted": MetricEntry(
        "Fingerprint of position 0",
        "The label-permutation null of the readout. The same folds and classifier run on seeded permutations of the "
        "labels within each group (default 200); the value is the null's mean, the interval its 2.5% and 97.5% quantiles.",
        r"E_\pi \, acc(\pi(y))",
        "[0, 1]",
        "Not negative; near `readout_chance` for a balanced design.",
        "methodology §8",
        "as `readout_accuracy`",
    ),
    "readout_p_value": MetricEntry(
        "Fingerprint of position 0",
        "Permutation p-value of the readout accuracy against the null: the share of permutations (counting the "
        "observed labels once) that score at least the observed accuracy. A point value: its interval is the value.",
        r"p = (1 + \lvert \lbrace \pi : acc(\pi) \ge acc \rbrace \rvert) / (1 + n_{perm})",
        "[1/(1 + n_perm), 1]",
        "Not negative; small values mean the readout beats the null.",
        "methodology §8",
        "as `readout_accuracy`",
    ),
}
"""Every metric a result table can hold, by name, in the order the glossary page lists them."""


_START, _END = "<!-- glossary:start -->", "<!-- glossary:end -->"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _range(name: str, e: MetricEntry) -> str:
    """The range as the page states it: the entry's, then how the 95% interval treats it (:func:`~poslens.fit.bounds.interval_note`)."""
    note = interval_note(name, e.range)
    if note == f"interval clipped to {e.range}":
        note = "interval clipped to it"
    return f"{e.range}; {note}" if note else e.range


def glossary_markdown() -> str:
    """The glossary page's list: a table of every metric, then one section per metric, grouped as :data:`GLOSSARY` is.

    Returns:
        Markdown: the table, then a ``## group`` heading per group and a ``### `name` {#name}`` section per metric.

    Example:
        >>> text = glossary_markdown()
        >>> "### `c_res` {#c_res}" in text, text.count("\\n### `")
        (True, 56)
    """
    lines = ["| metric | what it is | range | defined in |", "|---|---|---|---|"]
    lines += [f"| [`{name}`](#{name}) | {_cell(e.short())} | {_cell(_range(name, e))} | {e.section} |" for name, e in GLOSSARY.items()]
    group = None
    for name, e in GLOSSARY.items():
        if e.group != group:
            group = e.group
            lines += ["", f"## {group}"]
        lines += [
            "",
            f"### `{name}` {{#{name}}}",
            "",
            e.definition,
            "",
            f"- **Formula:** ${e.formula}$",
            f"- **Range:** {_range(name, e)}",
            f"- **Sign and extremes:** {e.sign}",
            f"- **Rows:** {e.rows}",
            f"- **Defined in:** {e.section}",
        ]
    return "\n".join(lines) + "\n"


def with_glossary(page: str) -> str:
    """``page`` with the text between its glossary markers replaced by :func:`glossary_markdown`.

    Args:
        page: the glossary page's Markdown, holding the ``<!-- glossary:start -->`` and ``<!-- glossary:end -->`` markers.

    Returns:
        The page with a fresh list between the markers; the rest as it was.

    Raises:
        ValueError: the page lacks either marker.

    Example:
        >>> with_glossary("intro\\n<!-- glossary:start -->\\nold\\n<!-- glossary:end -->\\n").count("### `")
        56
    """
    head, found, rest = page.partition(_START)
    _, found_end, tail = rest.partition(_END)
    if not found or not found_end:
        raise ValueError(f"the page has no {_START} … {_END} markers")
    return f"{head}{_START}\n{glossary_markdown()}{_END}{tail}"


if __name__ == "__main__":  # rewrite the list of docs/glossary.md (or the page named)
    target = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/glossary.md")
    target.write_text(with_glossary(target.read_text(encoding="utf-8")), encoding="utf-8")
