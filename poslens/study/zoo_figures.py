"""A zoo run's figures, per part: what ``poslens zoo-measure`` keeps of each part's table for every run of a family.

Each function takes the run's :class:`~poslens.study.parts.Study` and returns rows of :data:`FIGURE_COLUMNS`
(model level and per layer); a part's declaration names its function (:attr:`poslens.study.part_registry.Part.zoo`),
and :mod:`poslens.study.zoo_measure` writes them into ``figures.csv``.

Example:
    >>> FIGURE_COLUMNS[:3]
    ['metric', 'layer', 'query_window']
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from poslens.mechanisms.comparisons import compare_results

if TYPE_CHECKING:
    from poslens.study.parts import Study

#: The columns of a part's figures (and, with member, seed and part in front, of ``figures.csv``).
FIGURE_COLUMNS = ["metric", "layer", "query_window", "intervention", "value", "ci_low", "ci_high"]
#: The leakage part's figures: C_res, C_mask and their sum, the held-out ΔR², the probe and C_mask's share.
LEAKAGE_METRICS = ("c_res", "c_mask", "leakage_pattern", "leakage_pattern_heldout", "probe_r2", "rho_mask")


def _tidy(table: pd.DataFrame, intervention: str | None = None) -> pd.DataFrame:
    """Rows of a part's tidy table as figures (:data:`FIGURE_COLUMNS`), mean over heads (head −1)."""
    rows = table[table["head"] == -1] if "head" in table.columns else table
    out = rows.reindex(columns=FIGURE_COLUMNS).copy()
    if intervention is not None:
        out["intervention"] = intervention
    out["intervention"] = out["intervention"].fillna("none")
    return out.reset_index(drop=True)


def leakage_figures(study: Study) -> pd.DataFrame:
    """C_res, C_mask, L(log a) and the probe per layer and for the model; the depth slopes of C_res and C_mask.

    Args:
        study: The run's study.

    Returns:
        Figures (:data:`FIGURE_COLUMNS`): the leakage part's rows of :data:`LEAKAGE_METRICS`, and ``c_res_depth_slope`` /
        ``c_mask_depth_slope`` (layer −1: the slope over the fraction of depth, layers ≥ 1, as ``poslens compare`` takes it).

    Example:
        >>> leakage_figures(study).query("metric == 'c_res' and layer == -1")  # doctest: +SKIP
    """
    result = study.leakage()
    figures = _tidy(result.table[result.table["metric"].isin(LEAKAGE_METRICS)])
    slopes = compare_results([result])
    slopes = slopes[slopes["kind"] == "depth-slope"]
    return pd.concat([figures, _tidy(slopes)], ignore_index=True)


def sinks_figures(study: Study) -> pd.DataFrame:
    """The sink-reading heads at τ (per layer and for the model), the key-0 mass over all heads and the largest sink score.

    Args:
        study: The run's study.

    Returns:
        Figures: ``sink_heads`` (its interval: the heads wholly above τ / reaching τ), ``key0_mass`` (mean sink score
        over every head, layer −1) and ``max_sink_score`` (layer −1).

    Example:
        >>> sinks_figures(study).query("metric == 'sink_heads' and layer == -1")["value"]  # doctest: +SKIP
    """
    table = study.sinks().table
    counts = _tidy(table[table["metric"] == "sink_heads"])
    scores = table[table["metric"] == "sink_score"]["value"].astype(float)
    extra = pd.DataFrame(
        [
            dict(metric="key0_mass", layer=-1, query_window="all", intervention="none", value=float(scores.mean()), ci_low=np.nan, ci_high=np.nan),
            dict(
                metric="max_sink_score", layer=-1, query_window="all", intervention="none", value=float(scores.max()), ci_low=np.nan, ci_high=np.nan
            ),
        ]
    )
    return pd.concat([counts, extra], ignore_index=True)


def bos_swap_figures(study: Study) -> pd.DataFrame:
    """The reduction of C_res under each BOS replacement, per layer and for the model, early and all queries.

    Args:
        study: The run's study.

    Returns:
        Figures: metric ``reduction``, intervention ``bos:<kind>``.

    Example:
        >>> bos_swap_figures(study).query("layer == -1")  # doctest: +SKIP
    """
    table = study.bos_swap().table
    return _tidy(table[table["metric"] == "reduction"])


def ablation_figures(study: Study) -> pd.DataFrame:
    """The reduction of C_res when the sink path of the sink-reading heads is ablated (none when no head reads a sink).

    Args:
        study: The run's study.

    Returns:
        Figures: metric ``reduction``, intervention as the part records it; no rows for a run without sink-reading heads.

    Example:
        >>> ablation_figures(study).query("layer == -1")  # doctest: +SKIP
    """
    table = study.ablate_sinks().table
    return _tidy(table[table["metric"] == "reduction"])


def relativize_figures(study: Study) -> pd.DataFrame:
    """r = 1 − L(edited)/L(unedited) over layers ≥ 2 per relativization mode, and the change in next-token loss.

    Args:
        study: The run's study.

    Returns:
        Figures: ``reduction_ge2`` (intervention ``relativize:<mode>`` at the largest calibration size, layer −1)
        and ``loss_change`` (intervention: the edit, all positions).

    Example:
        >>> relativize_figures(study).query("metric == 'reduction_ge2'")  # doctest: +SKIP
    """
    table = study.relativize().table
    s = table[table["metric"] == "reduction_ge2"]
    rows = []
    for edit, part in s.groupby("intervention", sort=False):
        largest = part[part["calibration_size"] == part["calibration_size"].max()]
        mode = str(edit).removeprefix("relativize:")  # the family's tables name the placebo relativize:placebo:all
        for _, r in largest.iterrows():
            rows.append(
                dict(
                    metric=str(r["metric"]),
                    layer=-1,
                    query_window=r["query_window"],
                    intervention=f"relativize:{mode}",
                    value=r["value"],
                    ci_low=r["ci_low"],
                    ci_high=r["ci_high"],
                )
            )
    loss = table[(table["metric"] == "loss_change") & (table["query_bin"] == -1)]
    for _, r in loss.iterrows():
        rows.append(
            dict(
                metric="loss_change",
                layer=-1,
                query_window="all",
                intervention=str(r["intervention"]),
                value=r["value"],
                ci_low=r["ci_low"],
                ci_high=r["ci_high"],
            )
        )
    return pd.DataFrame(rows, columns=FIGURE_COLUMNS)


#: The path-specific tests' readouts the family's tables keep: (metric, query bin).
PATH_READOUTS = (("resid_probe_r2_ge2", -1), ("attn_out_probe_r2_ge2", -1), ("leakage_pattern_ge2", -1), ("next_token_loss", -1))


def path_edit_figures(study: Study) -> pd.DataFrame:
    """The path-specific tests' changes (methodology §12): each edit against the unedited run, and key 0's freeze against the sham.

    Args:
        study: The run's study.

    Returns:
        Figures: the readouts of :data:`PATH_READOUTS` at layer −1, all queries; ``intervention`` is ``<edit>`` for a
        change against the unedited run and ``<edit> − <reference>`` against another reference (the key-1 sham at the
        same D, or the mask-only profile for the ablation). A run without sink-reading heads has no mask-only or
        ablation rows.

    Example:
        >>> path_edit_figures(study).query("intervention == 'key0-phase:D=64'")  # doctest: +SKIP
    """
    table = study.path_tests().table
    rows = table[(table["kind"] == "difference") & (table["layer"] == -1) & (table["query_window"] == "all")]
    picked = []
    for metric, qbin in PATH_READOUTS:
        part = rows[(rows["metric"] == metric) & (rows["query_bin"] == qbin)].copy()
        part["intervention"] = [iv if ref == "none" else f"{iv} − {ref}" for iv, ref in zip(part["intervention"], part["reference"], strict=True)]
        picked.append(part)
    return _tidy(pd.concat(picked, ignore_index=True))
