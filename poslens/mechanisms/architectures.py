"""The same measurement across standard-RoPE, NTK-scaled and sliding-window cases (methodology §9, C4).

A case is a (model, variant) pair. Inference-time variants (``ntk:*``,
``window:*``, ``rope-base:*``) are labelled as such in the ``kind`` column
of :func:`case_table`; a natively windowed model (gemma3-270m) is not.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pandas as pd

from poslens.measurement.pipeline import measure
from poslens.measurement.result import Result, concat
from poslens.mechanisms.comparison_cases import DEFAULT_METRICS, case_figures, check_paired
from poslens.mechanisms.comparisons import comparisons_result
from poslens.model.corpus import make_corpus
from poslens.model.guards import require_pos_model
from poslens.model.loading import load_model
from poslens.model.pos_model import PosModel
from poslens.options import DEFAULTS
from poslens.progress import progress_bar


@dataclass(frozen=True)
class Case:
    """One model under one variant, with the architecture class it stands for.

    Attributes:
        model: The model name (:func:`~poslens.model.loading.load_model`).
        variant: The inference-time variant (:mod:`poslens.model.variants`), ``base`` for none, or e.g. ``ntk:4``.
        case: The architecture class it stands for: ``standard``, ``ntk`` or ``sliding``.

    Example:
        >>> Case("smollm2-135m", "ntk:4", "ntk").inference_time
        True
    """

    model: str
    variant: str
    case: str  # standard | ntk | sliding

    @property
    def inference_time(self) -> bool:
        """Whether the case is an inference-time variant rather than the model as trained.

        Example:
            >>> Case("smollm2-135m", "ntk:4", "ntk").inference_time, Case("gemma3-270m", "base", "sliding").inference_time
            (True, False)
        """
        return self.variant not in ("", "base")


def default_cases(quick: bool = False) -> list[Case]:
    """The study's cases: smollm2-135m standard, NTK α ∈ {2, 4, 8}, sliding windows W ∈ {32, 64, 128, 256}, and gemma3-270m.

    ``quick`` keeps one NTK and one imposed sliding window.

    Args:
        quick: Keep one NTK and one imposed sliding window only.

    Returns:
        The cases, in the order of the tables.

    Example:
        >>> [c.variant for c in default_cases(quick=True)]
        ['base', 'ntk:4', 'window:64', 'base']
    """
    ntk = [4] if quick else [2, 4, 8]
    sliding_windows = [64] if quick else [32, 64, 128, 256]  # the sliding-window dose-response of methodology §9.1
    return (
        [Case("smollm2-135m", "base", "standard")]
        + [Case("smollm2-135m", f"ntk:{a}", "ntk") for a in ntk]
        + [Case("smollm2-135m", f"window:{w}", "sliding") for w in sliding_windows]
        + [Case("gemma3-270m", "base", "sliding")]
    )


def compare(cases: list[Case], **options: Any) -> Result:
    """Measure every case on the same text and return one stacked result: the cases of :func:`compare_cases`.

    The comparisons between the cases (paired differences, trends, depth slopes, independent differences) are the
    second result of :func:`compare_cases`, which takes the same arguments.

    Args:
        cases: The cases to measure.
        **options: The other arguments of :func:`compare_cases` (``n_seqs``, ``seq_len``, ``groups``, ...).

    Returns:
        One result with every case's rows and the cases in ``meta["cases"]``.

    Raises:
        UnpairedCasesError: When two variants of one model were measured on different token ids or groups.

    Example:
        >>> result = compare(default_cases(quick=True), n_seqs=8, seq_len=128)  # doctest: +SKIP
        >>> case_table(result)  # doctest: +SKIP
    """
    return compare_cases(cases, **options)[0]


def compare_cases(
    cases: list[Case],
    n_seqs: int = 16,
    seq_len: int = 640,
    groups: int = DEFAULTS.groups,
    early: int = DEFAULTS.early,
    seed: int = 0,
    source: str = "docs",
    batch_size: int = 2,
    max_memory: int | str | None = None,
    loader: Callable[[str, str], PosModel] = lambda name, variant: load_model(name, variant=variant),
    progress: bool = True,
    text_field: str = "text",
    row_sums: str = "auto",
    disk_budget: int | str | None = None,
    comparison_metrics: tuple[str, ...] = DEFAULT_METRICS,
) -> tuple[Result, Result]:
    """Measure every case on the same text: one stacked result of the cases, and one of the comparisons between them.

    Each model gets its own tokenization of the same source with the same seed;
    position 0 is each model's BOS. The default length (640) is beyond
    gemma3-270m's 512-token window, so its windowed layers differ from full attention.
    ``batch_size`` and ``max_memory`` go to :func:`poslens.measure`, which plans
    the batch size of each case. ``text_field`` names the text field of a
    JSONL or Parquet ``source``.

    While each case's cell sums are at hand, the comparisons of methodology
    §9.1 are computed (:func:`poslens.mechanisms.comparisons.compare_figures`:
    paired differences of each variant against its model's ``base``, trends
    over ``ntk:α`` and ``window:W``, depth slopes, and independent differences
    between models), the second result (:func:`poslens.mechanisms.comparisons.comparisons_result`;
    :func:`poslens.mechanisms.comparisons.comparison_table` reads it). Variants of one
    model must get the same token ids (a loader whose variants tokenize
    differently is refused with
    :class:`~poslens.mechanisms.comparison_cases.UnpairedCasesError` as soon as
    the second such case is measured). The stacked result keeps no cell sums.

    Args:
        cases: The cases to measure.
        n_seqs: Sequences per case.
        seq_len: Tokens per sequence.
        groups: Number of groups.
        early: Query positions of the ``early`` query window.
        seed: Seed of the text windows.
        source: The text source (:func:`~poslens.model.corpus.make_corpus`).
        batch_size: Sequences per forward pass (an upper bound with ``max_memory``).
        max_memory: Memory budget for the batch plan.
        loader: ``loader(name, variant)`` loads a case's model.
        progress: Whether to show progress bars.
        text_field: The text field of a JSONL or Parquet ``source``.
        row_sums: The per-sequence counterfactual's route (:func:`poslens.measure`).
        disk_budget: The most temporary disk the store may take under ``"auto"``.
        comparison_metrics: The figures the comparisons compare (refitted from the cell sums).

    Returns:
        ``(cases, comparisons)``: one result with every case's rows and the cases in ``meta["cases"]``, and one with
        the comparison table's rows (:data:`~poslens.mechanisms.comparison_rows.COMPARISON_COLUMNS`) and the same meta.

    Raises:
        UnpairedCasesError: When two variants of one model were measured on different token ids or groups.

    Example:
        >>> result, comparisons = compare_cases(default_cases(quick=True), n_seqs=8, seq_len=128)  # doctest: +SKIP
        >>> case_table(result)  # doctest: +SKIP
        >>> comparisons.table.query("kind == 'paired' and metric == 'c_res' and layer == -1")  # doctest: +SKIP
    """
    results, figures = [], []
    for case in progress_bar(cases, desc="architectures", unit="case", disable=not progress):
        model = loader(case.model, case.variant)
        require_pos_model(model, "compare() (the model its loader returned)")
        corpus = make_corpus(model, source, n_seqs=n_seqs, seq_len=seq_len, position0="bos", seed=seed, text_field=text_field)
        result = measure(
            model,
            corpus,
            groups=groups,
            early=early,
            batch_size=batch_size,
            max_memory=max_memory,
            probe=False,
            progress=progress,
            row_sums=row_sums,
            disk_budget=disk_budget,
        )
        result.meta["case"] = {"case": case.case, "inference_time": case.inference_time}
        # the paired comparisons refit each case without each group: take what they need while the sums are here
        figures.append(case_figures(result, comparison_metrics))
        same_model = next((f for f in figures[:-1] if (f.model, f.intervention) == (figures[-1].model, figures[-1].intervention)), None)
        if same_model is not None:
            check_paired(figures[-1], same_model)  # before the next case is measured, not after all of them
        result.sums = None  # the stacked result keeps no sums
        results.append(result)
    out = concat(results)
    out.meta["cases"] = [c.__dict__ | {"inference_time": c.inference_time} for c in cases]
    return out, comparisons_result(figures, out.meta)


def case_table(result: Result, metrics: tuple[str, ...] = ("c_res", "c_mask", "leakage_pattern")) -> pd.DataFrame:
    """The comparison's per-layer rows (head = −1) with ``case`` and ``kind`` columns.

    ``kind`` is ``native`` or ``inference-time variant``.

    Args:
        result: The result of :func:`compare`.
        metrics: The metrics to keep.

    Returns:
        The per-layer rows of those metrics.

    Example:
        >>> case_table(result).query("layer == -1 and metric == 'c_res'")  # doctest: +SKIP
    """
    cases = {(c["model"], c["variant"]): c for c in result.meta.get("cases", [])}
    table = result.table[(result.table["head"] == -1) & result.table["metric"].isin(metrics)].copy()
    table["case"] = [cases.get((m, v), {}).get("case", "?") for m, v in zip(table["model"], table["variant"], strict=False)]
    table["kind"] = ["inference-time variant" if v not in ("base", "") else "native" for v in table["variant"]]
    return table
