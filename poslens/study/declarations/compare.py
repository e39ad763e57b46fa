"""The compare part and its comparisons part (C4): C_res and C_mask across RoPE schemes, and their differences.

The two parts are made together by ``poslens compare``: the comparisons among the cases need the cases' cell
sums, which are at hand only while they are measured.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from poslens.study import part_printing
from poslens.study.part_registry import RUNTIME, Part, lazy, measured_tokens

if TYPE_CHECKING:
    from poslens.measurement.result import Result
    from poslens.study.parts import Study
    from poslens.study.settings import Settings


def _case_count(s: Settings) -> int:
    from poslens.mechanisms.architectures import default_cases

    return len(s.cases) or len(default_cases(quick=s.compare_quick))


def _compare_parts(study: Study) -> tuple[Result, Result]:
    """The compare part and its comparisons part, each reused from the folder or made (the two together)."""
    from poslens.measurement.result import Result
    from poslens.mechanisms.architectures import compare_cases, default_cases
    from poslens.mechanisms.comparisons import META_KEY, comparison_table
    from poslens.study.inputs import corpus_inputs, model_inputs

    s = study.settings
    cases = list(s.cases) or default_cases(quick=s.compare_quick)
    inputs = corpus_inputs(s.corpus, s.text_field)
    for case in cases:
        inputs.update(model_inputs(case.model))

    def measured() -> tuple[Result, Result]:
        return compare_cases(
            cases,
            n_seqs=s.compare_seqs,
            seq_len=s.compare_len,
            groups=s.groups,
            early=s.early,
            seed=s.seed,
            source=s.corpus,
            batch_size=s.batch_size,
            max_memory=s.max_memory,
            text_field=s.text_field,
            row_sums=s.row_sums,
            disk_budget=s.disk_budget,
        )

    made: list[Result] = []

    def compute_cases() -> Result:
        result, comparisons = measured()
        made.append(comparisons)
        return result

    result = study.cached(COMPARE.name, compute_cases, inputs)

    def compute_comparisons() -> Result:
        if made:  # measured just now
            return made[0]
        if META_KEY in result.meta:  # a compare part of table format 1: its comparisons were kept in its meta
            meta = {k: v for k, v in result.meta.items() if k != META_KEY}
            return Result(comparison_table(result), meta)
        study.log(f"[{COMPARISONS.name}] the compare part was saved without its comparisons: measuring the cases again")
        return measured()[1]

    return result, study.cached(COMPARISONS.name, compute_comparisons, inputs)


def compare_inputs(result: Result) -> dict[str, Any]:
    """C4's inputs from the compare part: the cases, and the comparisons a compare part of table format 1 kept in its meta.

    A compare part of table format 2 keeps its comparisons in a part of their own (:data:`COMPARISONS`), which
    provides ``c4_comparisons`` itself.

    Args:
        result: The compare part.

    Returns:
        ``{"comparison": result}``, with ``"c4_comparisons"`` for a part of table format 1.

    Example:
        >>> import pandas as pd
        >>> from poslens.measurement.result import Result
        >>> from poslens.mechanisms.comparisons import META_KEY
        >>> sorted(compare_inputs(Result(pd.DataFrame(), {"cases": []})))
        ['comparison']
        >>> sorted(compare_inputs(Result(pd.DataFrame(), {"cases": [], META_KEY: {}})))
        ['c4_comparisons', 'comparison']
    """
    from poslens.mechanisms.comparisons import META_KEY, comparison_table

    if META_KEY in result.meta:  # table format 1: the comparisons in the cases' meta
        return {"comparison": result, "c4_comparisons": comparison_table(result)}
    return {"comparison": result}


def comparisons_inputs(result: Result) -> dict[str, Any]:
    """C4's comparison table, from the comparisons part (:func:`poslens.mechanisms.comparisons.comparison_table`).

    Args:
        result: The comparisons part.

    Returns:
        ``{"c4_comparisons": table}``.

    Example:
        >>> comparisons_inputs(study.comparisons())  # doctest: +SKIP
    """
    from poslens.mechanisms.comparisons import comparison_table

    return {"c4_comparisons": comparison_table(result)}


COMPARE = Part(
    "compare",
    "C_res and C_mask by layer for standard RoPE, NTK and sliding-window cases (C4).\n\n"
    "Example: poslens compare --n-seqs 8 --seq-len 640 --out results/quick",
    ("compare_seqs", "compare_len", "compare_quick", "cases", "groups", "early", "seed", "corpus", "text_field", "batch_size"),
    (
        "compare_seqs",
        "compare_len",
        "groups",
        "early",
        "seed",
        "corpus",
        "text_field",
        "batch_size",
        *RUNTIME,
        "compare_quick",
    ),
    show=part_printing.show_compare,
    flags={"compare_seqs": "--n-seqs", "compare_len": "--seq-len"},
    fills=("compare_seqs",),
    lengths=("compare_len",),
    figure_metrics=("c_res", "c_mask"),
    tokens=lambda s: (_case_count(s) + 1) * measured_tokens(s.compare_seqs, s.compare_len),  # gemma3-270m: about twice
    order=90,
    compute=lambda study: _compare_parts(study)[0],
    provides=("comparison", "c4_comparisons"),
    claim_inputs=compare_inputs,
    figures=lazy("poslens.study.report_figures:compare_figures"),
)
"""The compare part: the cases."""

COMPARISONS = Part(
    "comparisons",
    "The comparisons among compare's cases by the interval of their difference (C4): paired differences of each "
    "variant against its model's base, trends, depth slopes and independent differences between models.",
    ("compare_seqs", "compare_len", "compare_quick", "cases", "groups", "early", "seed", "corpus", "text_field", "batch_size"),
    (),
    show=part_printing.show_compare,
    made_by="compare",  # measured with the cases, whose sums it needs: compare's command writes both
    order=91,
    compute=lambda study: _compare_parts(study)[1],
    provides=("c4_comparisons",),
    claim_inputs=comparisons_inputs,
    figures=lazy("poslens.study.report_figures:comparison_figures"),
)
"""The comparisons part, made with the cases."""

DECLARES = (COMPARE, COMPARISONS)
"""The two parts, for the registry."""
