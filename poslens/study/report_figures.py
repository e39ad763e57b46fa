"""The report's figures: which plotly figures each claim shows, with their captions, from the study parts present.

The figures are drawn by :mod:`poslens.measurement.plots` from the parts'
tidy tables; no statistics are computed here. Each caption says what the
figure shows, which of its figures the claim reads, and, for parts made from
4-bit quantized weights, that they were (:func:`poslens.measurement.display.quantized_note`).
:mod:`poslens.study.report` puts the figures on the page.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import plotly.graph_objects as go

from poslens.measurement import intervention_plots, path_plots, plots
from poslens.measurement.display import quantized_note
from poslens.measurement.result import Result
from poslens.mechanisms.comparisons import META_KEY as COMPARISONS_META
from poslens.mechanisms.comparisons import comparison_table
from poslens.study.claims import STATEMENTS


def _caption(*pieces: str) -> str:
    return " ".join(piece for piece in pieces if piece)


def _with_ablation(leakage: Result, ablation: Result) -> pd.DataFrame:
    """Per-layer C_res and C_mask before and after the sink-path ablation: sources_by_layer draws one panel per run."""
    after = ablation.table[ablation.table["metric"].isin(["c_res", "c_mask"])]
    before = leakage.table[leakage.table["metric"].isin(["c_res", "c_mask"]) & (leakage.table["intervention"] == "none")]
    return pd.concat([before, after], ignore_index=True)


def _key0_rows_note(attribution: Any) -> str:
    """The sentence on the rows a sliding window leaves the key-0 modes (:func:`poslens.mechanisms.attribution.key0_rows`), or ``""``."""
    rows = (getattr(attribution, "meta", None) or {}).get("key0_rows")
    return f"Note: {rows['note']}." if rows else ""


_REDUCTION_NOTE = "a reduction above 100% means C_res changed sign: the intervention reversed it rather than only removing it; below 0, C_res grew"


def leakage_figures(part: Result, settings: dict[str, Any], /, *, ablation: Result | None = None, **inputs: Any) -> list[tuple[str, go.Figure, str]]:
    """The leakage part's figures: C1's ΔR² heatmap, C2's sources by layer and C3's (after the ablation too, given ``ablation``).

    Args:
        part: The part.
        settings: The study's settings (quoted in the captions).
        ablation: The ablate-sinks part's claim input (``None``: not measured, or no sink-reading head).
        **inputs: The claim inputs of every part present (:func:`poslens.study.part_registry.claim_inputs`).

    Returns:
        ``[(claim, figure, caption)]``.

    Example:
        >>> figures = leakage_figures(part, {})  # doctest: +SKIP
    """
    figures: list[tuple[str, go.Figure, str]] = []
    leakage = part
    note = quantized_note(leakage)
    figures.append(
        (
            "C1",
            plots.leakage_heatmap(leakage.table),
            _caption(
                "Binned ΔR² of log attention weights on absolute query position beyond offset, per head (all queries). "
                "C1 reads its held-out version at the model aggregate, and the held-out R² of a probe of position from the "
                "layers' attention-row features (methodology §3.3). A negative held-out figure means the fit predicts held-out "
                "sequences worse than their mean (for ΔR²: than the offset alone): no decodable signal at this size.",
                note,
            ),
        )
    )
    figures.append(
        (
            "C2",
            plots.sources_by_layer(leakage.table, "all", "C_res and C_mask by layer (all queries)"),
            _caption(
                "C_mask is the part of the pattern's absolute-position leakage ΔR² that each head's mask-only "
                "counterfactual reproduces, C_res the rest, which the residual stream supplies (methodology §4). "
                "C2 reads C_mask at layer 0 and over layers ≥ 1, and the mask's share ρ_mask at layer 0.",
                note,
            ),
        )
    )
    if ablation is not None and not ablation.table.empty:
        figures.append(
            (
                "C3",
                plots.sources_by_layer(
                    _with_ablation(leakage, ablation),
                    "early",
                    "C_res and C_mask by layer at early queries, before and after the sink-path ablation",
                ),
                _caption(
                    f"Left: the baseline; right: with the sink path of the sink-reading heads ablated. Early queries 1 ≤ i < "
                    f"{settings.get('early')}. C3 reports C_res over layers ≥ 1 and its reduction, 1 − C_res(after)/C_res(before) "
                    f"({_REDUCTION_NOTE}); the ablation removes the mask's dilution and key 0's phase together, so it does "
                    "not decide C3.",
                    quantized_note(leakage, ablation),
                ),
            )
        )
    else:
        figures.append(
            (
                "C3",
                plots.sources_by_layer(leakage.table, "early", "C_res and C_mask by layer at early queries"),
                _caption(f"Early queries 1 ≤ i < {settings.get('early')}; the sink-path ablation C3 reports is not in this report.", note),
            )
        )
    return figures


def path_test_figures(path: Result, settings: dict[str, Any], /, **inputs: Any) -> list[tuple[str, go.Figure, str]]:
    """The path-specific tests' figures (C3): the residual probe, the split of the sink path, the dose-responses.

    Args:
        path: The part.
        settings: The study's settings (quoted in the captions).
        **inputs: The claim inputs of every part present (:func:`poslens.study.part_registry.claim_inputs`).

    Returns:
        ``[(claim, figure, caption)]``.

    Example:
        >>> figures = path_test_figures(part, {})  # doctest: +SKIP
    """
    figures: list[tuple[str, go.Figure, str]] = []
    table, note = path.table, quantized_note(path)
    offsets = sorted({str(iv).split("=")[1] for iv in table["intervention"] if str(iv).startswith("key0-phase:D=")}, key=int)
    sized = f"{settings.get('n_seqs')} sequences × {settings.get('seq_len')} tokens"
    figures.append(
        (
            "C3",
            path_plots.plot_path_probe(table, "resid_probe_r2"),
            _caption(
                "How much absolute position a ridge probe reads from the residual stream entering each layer (held-out R² "
                f"of log(i + 1), folds by group), unedited, with the RoPE phase of every key-0 logit frozen at offset D "
                f"({', '.join(offsets)}) in every layer, and under the sham that freezes key 1 instead (methodology §12). "
                "Each layer is read with the layers below it edited. C3 reads the fall of the mean over layers ≥ 2 at "
                f"D = 64, and that fall beyond the sham's. {sized}.",
                note,
            ),
        ),
    )
    figures.append(
        (
            "C3",
            path_plots.plot_path_split(table),
            _caption(
                "Paired changes of the residual probe R² and of L(log a), mean over layers ≥ 2: the key-0 phase freeze and "
                "its sham, and the sink path split in two by the mask-only profile (a_i0 replaced by what the mask alone "
                "gives the head): the mask's channel through the sink (ablation − mask-only profile) and everything else "
                "at key 0 (mask-only profile − unedited). Reported beside C3's verdict, not used by it.",
                note,
            ),
        ),
    )
    figures.append(
        (
            "C3",
            path_plots.plot_path_doses(table),
            _caption(
                "Dose-responses: the change of the residual probe R² (layers ≥ 2) over the frozen offset D, for key 0 and "
                "the key-1 sham, and over the mask-only profile's dose λ (λ = 0 is the unedited run). Where a response "
                "is not monotone, the report's table of dose-responses says between which doses it turns.",
                note,
            ),
        ),
    )
    return figures


def sink_figures(sinks: Result, settings: dict[str, Any], /, **inputs: Any) -> list[tuple[str, go.Figure, str]]:
    """The sinks part's figure (C3): sink scores and sink-reading heads per layer.

    Args:
        sinks: The part.
        settings: The study's settings (quoted in the captions).
        **inputs: The claim inputs of every part present (:func:`poslens.study.part_registry.claim_inputs`).

    Returns:
        ``[(claim, figure, caption)]``.

    Example:
        >>> figures = sink_figures(part, {})  # doctest: +SKIP
    """
    figures: list[tuple[str, go.Figure, str]] = []
    tau = settings.get("tau", 0.3)
    sink_figure = plots.sink_scores(sinks.table, tau)
    # in the claim's narrower column the colour bar between the panels would cover the count panel's axis
    sink_figure.update_traces(colorbar=dict(x=1.02), selector=dict(type="heatmap"))
    figures.append(
        (
            "C3",
            sink_figure,
            _caption(
                "Sink score (mean over queries i ≥ 1 of the weight on key 0) per head, "
                f"and the number of heads at or above τ = {tau} per layer: the sink-reading heads whose path the ablation and "
                "the mask-only profile edit "
                "(interval: heads whose score interval lies wholly above τ … heads whose interval reaches τ).",
                quantized_note(sinks),
            ),
        )
    )
    return figures


def compare_figures(c: Result, settings: dict[str, Any], /, **inputs: Any) -> list[tuple[str, go.Figure, str]]:
    """The compare part's figure (C4): C_res and C_mask by layer per case (and a table format 1 part's comparisons, from its meta).

    Args:
        c: The part.
        settings: The study's settings (quoted in the captions).
        **inputs: The claim inputs of every part present (:func:`poslens.study.part_registry.claim_inputs`).

    Returns:
        ``[(claim, figure, caption)]``.

    Example:
        >>> figures = compare_figures(part, {})  # doctest: +SKIP
    """
    figures: list[tuple[str, go.Figure, str]] = []
    compare_figure = plots.sources_by_layer(c.table, "all", "C_res and C_mask by layer across architectures (all queries)")
    compare_figure.update_annotations(font_size=11)  # one panel title per case, side by side in the claim's column
    figures.append(
        (
            "C4",
            compare_figure,
            _caption(
                "Each panel is one case: standard RoPE (smollm2-135m base), NTK-scaled RoPE and imposed windows "
                "(inference-time variants of smollm2-135m, labelled by their variant) and gemma3-270m's native sliding window. "
                "C_mask is the part of the pattern's absolute-position leakage ΔR² that each head's mask-only counterfactual "
                "(its relative kernel and a constant sink, renormalized over the visible keys, per sequence) reproduces; "
                "C_res the rest, which the residual stream supplies (methodology §4, version 2). "
                "All queries 1 ≤ i < T: a window of W changes nothing "
                "for queries i < W, so early queries cannot tell the cases apart. "
                f"{settings.get('compare_seqs')} sequences × {settings.get('compare_len')} tokens per case.",
                quantized_note(c),
            ),
        )
    )
    if COMPARISONS_META in c.meta:  # a compare part of table format 1 held its comparisons in its meta
        figures += comparison_figures(c, settings)
    return figures


def comparison_figures(compared: Result, settings: dict[str, Any], /, **inputs: Any) -> list[tuple[str, go.Figure, str]]:
    """The comparisons' figure (C4): each variant's C_res minus its base model's, with the slopes per doubling.

    Args:
        compared: The comparisons part, or a compare part of table format 1, whose meta held them.
        settings: The study's settings.
        **inputs: The claim inputs of every part present (not read).

    Returns:
        ``[("C4", figure, caption)]``, or ``[]`` where no variant has a dose.

    Example:
        >>> figures = comparison_figures(part, {})  # doctest: +SKIP
    """
    figures: list[tuple[str, go.Figure, str]] = []
    comparisons = comparison_table(compared)
    paired = comparisons[(comparisons["kind"] == "paired") & (comparisons["metric"] == "c_res")]
    if any(str(v).startswith(("ntk:", "window:")) for v in paired["variant"]):
        figures.append(
            (
                "C4",
                intervention_plots.plot_dose_response(comparisons, "c_res", "all"),
                _caption(
                    "Each variant's C_res (mean over layers ≥ 1, all queries) minus its base model's, on the same token "
                    "ids and groups, with the paired delete-one-group jackknife 95% interval; the panel titles give "
                    "the least-squares slope per doubling of α or W and its interval (methodology §9.1). C4 reads "
                    "these differences and slopes, not whether two cases' own intervals overlap.",
                    quantized_note(compared),
                ),
            )
        )
    return figures


def relativize_figures(attribution: Result, settings: dict[str, Any], /, **inputs: Any) -> list[tuple[str, go.Figure, str]]:
    """The relativize part's figures (C7): L(log a) by layer unedited and relativized, and the change in loss.

    Args:
        attribution: The part.
        settings: The study's settings (quoted in the captions).
        **inputs: The claim inputs of every part present (:func:`poslens.study.part_registry.claim_inputs`).

    Returns:
        ``[(claim, figure, caption)]``.

    Example:
        >>> figures = relativize_figures(part, {})  # doctest: +SKIP
    """
    figures: list[tuple[str, go.Figure, str]] = []
    record = settings.get("relativize_seqs"), settings.get("relativize_len")
    figures.append(
        (
            "C7",
            intervention_plots.plot_attribution(attribution.table, "all"),
            _caption(
                "L(log a) by layer, all queries, unedited and with every layer relativized (methodology §11): the edited "
                "curve at layer l is measured with layers < l edited and layer l as the model computes it, so layer 0 "
                "is the negative control. 'every column' removes each head's whole absolute logit component, 'key 0 "
                "only' its key-0 term per query bin, 'all but key 0' the rest; the placebo subtracts a purely relative "
                "kernel of the same norm. C7 reads r = 1 − mean over layers ≥ 2 of the edited L over the unedited one "
                "under 'every column'; C3 reports the same under 'key 0 only'. "
                f"{record[0]} sequences × {record[1]} tokens; paired delete-one-group jackknife 95% intervals.",
                _key0_rows_note(attribution),
                quantized_note(attribution),
            ),
        )
    )
    if (attribution.table["metric"] == "loss_change").any():
        figures.append(
            (
                "C7",
                intervention_plots.plot_loss_change(attribution.table),
                _caption(
                    "What each edit costs the model: the change in next-token loss (nats per token) per query bin, "
                    "beside the purely relative placebo of the same norm. An edit that costs far more than its "
                    "placebo runs the model off its distribution for reasons that are about position.",
                    quantized_note(attribution),
                ),
            )
        )
    return figures


def bos_swap_figures(swap: Result, settings: dict[str, Any], /, **inputs: Any) -> list[tuple[str, go.Figure, str]]:
    """The bos-swap part's figure (C5): the reduction of C_res per replacement.

    Args:
        swap: The part.
        settings: The study's settings (quoted in the captions).
        **inputs: The claim inputs of every part present (:func:`poslens.study.part_registry.claim_inputs`).

    Returns:
        ``[(claim, figure, caption)]``.

    Example:
        >>> figures = bos_swap_figures(part, {})  # doctest: +SKIP
    """
    figures: list[tuple[str, go.Figure, str]] = []
    figures.append(
        (
            "C5",
            plots.reductions(swap.table, "early"),
            _caption(
                "Reduction of C_res at early queries, 1 − C_res(after)/C_res(before), for each BOS-embedding replacement; "
                f"paired delete-one-group jackknife 95% intervals. {_REDUCTION_NOTE[:1].upper() + _REDUCTION_NOTE[1:]}. "
                "The dotted line marks the 40% of claim C5.",
                quantized_note(swap),
            ),
        )
    )
    return figures


def fingerprint_figures(part: Result, settings: dict[str, Any], /, **inputs: Any) -> list[tuple[str, go.Figure, str]]:
    """The fingerprint part's figure (C6): the dispersion of position 0 by layer.

    Args:
        part: The part.
        settings: The study's settings (quoted in the captions).
        **inputs: The claim inputs of every part present (:func:`poslens.study.part_registry.claim_inputs`).

    Returns:
        ``[(claim, figure, caption)]``.

    Example:
        >>> figures = fingerprint_figures(part, {})  # doctest: +SKIP
    """
    figures: list[tuple[str, go.Figure, str]] = []
    fingerprint = part
    meta = fingerprint.meta
    figures.append(
        (
            "C6",
            plots.dispersion(fingerprint.table),
            _caption(
                "Relative dispersion of the position-0 residual stream across inputs, by layer: with an auto-prepended BOS it is "
                "zero up to floating point; without BOS position 0 holds the first text token and the trajectory varies. "
                f"Settings: {meta.get('settings', {})}.",
                quantized_note(fingerprint),
            ),
        )
    )
    return figures


def claim_figures(parts: dict[str, Result], settings: dict[str, Any]) -> dict[str, list[tuple[go.Figure, str]]]:
    """The figures of each claim with their captions, from whichever parts are present.

    Each part draws its own (:attr:`poslens.study.part_registry.Part.figures`, given every present part's claim
    inputs); a claim's figures follow the parts' :attr:`~poslens.study.part_registry.Part.figure_order`.

    Args:
        parts: The study parts present, by name.
        settings: The study's settings (``early``, ``tau``, ``compare_seqs``, … are quoted in the captions).

    Returns:
        Claim → ``[(figure, caption)]``; a claim with no part present has an empty list.

    Example:
        >>> figures = claim_figures({}, {})
        >>> sorted(figures), figures["C1"]
        (['C1', 'C2', 'C3', 'C4', 'C5', 'C6', 'C7', 'C8'], [])
    """
    from poslens.study.part_registry import PARTS, claim_inputs

    inputs = claim_inputs(parts)
    figures: dict[str, list[tuple[go.Figure, str]]] = {claim: [] for claim in STATEMENTS}
    present = [(part, part.figures) for name, part in PARTS.items() if name in parts and part.figures is not None]
    for part, draw in sorted(present, key=lambda pair: pair[0].figure_order if pair[0].figure_order is not None else pair[0].order):
        for claim, figure, caption in draw(parts[part.name], settings, **inputs):
            figures.setdefault(claim, []).append((figure, caption))
    return figures
