"""The fingerprint part (methodology §8): what position 0's residual stream holds, with and without BOS.

Example:
    >>> DECLARES[0].name, DECLARES[0].file, DECLARES[0].method
    ('fingerprint', 'fingerprint.parquet', 'fingerprint')
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from poslens.study import part_printing
from poslens.study.part_registry import MEASURE_KEYS, MEASURED_OPTIONS, Part, lazy

if TYPE_CHECKING:
    from poslens.measurement.result import Result
    from poslens.study.parts import Study


def compute(study: Study) -> Result:
    """Position-0 fingerprint: dispersion, trajectory similarity, readout (methodology §8).

    Args:
        study: The study.

    Returns:
        The part's tidy result, reused from the folder when it matches.

    Example:
        >>> rows = study.fingerprint().select("dispersion", layer=-1)  # doctest: +SKIP
        >>> dict(zip(rows["intervention"], rows["value"].round(3).tolist()))  # doctest: +SKIP
        {'position0:bos': 0.0, 'position0:none': 0.138}
    """
    from poslens.mechanisms.fingerprint import fingerprint
    from poslens.model.guards import check_seq_len

    s = study.settings
    check_seq_len(
        study.model(),
        s.fingerprint_len,
        option="--fingerprint-len",  # before the leakage part is measured
        parameter="fingerprint_len= of Settings or Study.with_settings",
    )
    return study.cached(
        DECLARES[0].name,
        lambda: fingerprint(
            study.model(),
            n_seqs=s.fingerprint_seqs,
            seq_len=s.fingerprint_len,
            groups=s.groups,
            seed=s.seed,
            tau=s.tau,
            sink_result=study.leakage(),
        ),
    )


DECLARES = (
    Part(
        "fingerprint",
        "Position-0 fingerprint: dispersion with and without BOS, trajectory similarity, readout (methodology §8).\n\n"
        "The sink-reading heads come from the leakage part (--n-seqs × --seq-len), measured first if it is not in --out.\n\n"
        "Example: poslens fingerprint --model smollm2-135m --fingerprint-seqs 16 --fingerprint-len 48 --out results/quick",
        (*MEASURE_KEYS, "tau", "fingerprint_seqs", "fingerprint_len"),
        (*MEASURED_OPTIONS, "tau", "fingerprint_seqs", "fingerprint_len"),
        show=part_printing.show_fingerprint,
        fills=("n_seqs", "fingerprint_seqs"),
        figure_metrics=("dispersion",),
        tokens=lambda s: (2 * s.fingerprint_seqs + 256) * s.fingerprint_len,
        order=70,
        compute=compute,
        provides=("fingerprint",),
        figures=lazy("poslens.study.report_figures:fingerprint_figures"),
    ),
)
"""The part, for the registry."""
