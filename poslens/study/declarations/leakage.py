"""The leakage part (methodology §3–§5): the baseline measurement every other measured part reads.

Example:
    >>> DECLARES[0].name, DECLARES[0].file, DECLARES[0].method
    ('leakage', 'leakage.parquet', 'leakage')
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from poslens.study import part_printing
from poslens.study.part_registry import MEASURE_KEYS, MEASURED_OPTIONS, Part, lazy, measured_tokens

if TYPE_CHECKING:
    from poslens.measurement.result import Result
    from poslens.study.parts import Study


def compute(study: Study) -> Result:
    """Baseline leakage, decomposition and probe (methodology §3–§5).

    Args:
        study: The study.

    Returns:
        The part's tidy result, reused from the folder when it matches.

    Example:
        >>> result = study.leakage()  # doctest: +SKIP
        >>> round(result.value("c_res", "early"), 4), round(result.value("c_mask", "early"), 4)  # doctest: +SKIP
        (0.0436, 0.0158)
    """
    return study.cached(DECLARES[0].name, study.measured)


DECLARES = (
    Part(
        "leakage",
        "Measure position leakage and its mask / residual-stream decomposition (methodology §3–§5).\n\n"
        "Runs unchanged under `torchrun --nproc_per_node=K` (sequences sharded, sums all-reduced, rank 0 writes).\n\n"
        "Example: poslens leakage --model smollm2-135m --n-seqs 16 --seq-len 128 --max-memory 4GB --out results/leak",
        MEASURE_KEYS,
        MEASURED_OPTIONS,
        show=part_printing.show_leakage,
        figure_metrics=("leakage_pattern", "c_res", "c_mask"),
        tokens=lambda s: measured_tokens(s.n_seqs, s.seq_len),
        order=10,
        compute=compute,
        provides=("leakage",),
        figures=lazy("poslens.study.report_figures:leakage_figures"),
        zoo=lazy("poslens.study.zoo_figures:leakage_figures"),
        zoo_order=1,
    ),
)
"""The part, for the registry."""
