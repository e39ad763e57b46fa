"""The sinks part (methodology §6): the sink score of every head, from the leakage part.

Example:
    >>> DECLARES[0].name, DECLARES[0].file, DECLARES[0].method
    ('sinks', 'sinks.parquet', 'sinks')
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from poslens.study import part_printing
from poslens.study.part_registry import MEASURE_KEYS, MEASURED_OPTIONS, Part, lazy

if TYPE_CHECKING:
    from poslens.measurement.result import Result
    from poslens.study.parts import Study


def compute(study: Study) -> Result:
    """Sink scores and sink-reading head counts (methodology §6).

    Args:
        study: The study.

    Returns:
        The part's tidy result, reused from the folder when it matches.

    Example:
        >>> study.sinks().value("sink_heads")  # sink-reading heads over all layers  # doctest: +SKIP
        164.0
    """
    from poslens.measurement.result import Result
    from poslens.mechanisms import sinks

    base = study.leakage()
    return study.cached(DECLARES[0].name, lambda: Result(sinks.sink_table(base, study.settings.tau), dict(base.meta)))


DECLARES = (
    Part(
        "sinks",
        "Sink score of every head and sink-reading head counts per layer (methodology §6), from the leakage part.\n\n"
        "Example: poslens sinks --model smollm2-135m --n-seqs 16 --seq-len 128 --tau 0.3 --out results/quick",
        (*MEASURE_KEYS, "tau"),
        (*MEASURED_OPTIONS, "tau"),
        show=part_printing.show_sinks,
        figure_metrics=("sink_score", "sink_heads"),
        order=20,
        compute=compute,
        figures=lazy("poslens.study.report_figures:sink_figures"),
        zoo=lazy("poslens.study.zoo_figures:sinks_figures"),
        zoo_order=2,
    ),
)
"""The part, for the registry."""
