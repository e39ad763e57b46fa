"""The bos-swap part (methodology §7): C_res with the BOS embedding replaced.

Example:
    >>> DECLARES[0].name, DECLARES[0].file, DECLARES[0].method
    ('bos-swap', 'bos-swap.parquet', 'bos_swap')
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from poslens.study import part_printing
from poslens.study.part_registry import MEASURE_KEYS, MEASURED_OPTIONS, Part, lazy, measured_tokens

if TYPE_CHECKING:
    from poslens.measurement.result import Result
    from poslens.study.parts import Study


def compute(study: Study) -> Result:
    """Reduction of C_res for each BOS-embedding replacement (methodology §7).

    Args:
        study: The study.

    Returns:
        The part's tidy result, reused from the folder when it matches.

    Example:
        >>> rows = study.bos_swap().select("reduction", "early", layer=-1)  # doctest: +SKIP
        >>> dict(zip(rows["intervention"], rows["value"].round(3).tolist()))  # doctest: +SKIP
        {'bos:mean': -0.012, 'bos:zero': 0.226, 'bos:noise': 0.06, 'bos:token:2': -0.036}
    """
    import pandas as pd

    from poslens.measurement.result import Result
    from poslens.mechanisms.effects import reduction
    from poslens.mechanisms.interventions import BosReplacement

    base = study.leakage()  # first: a leakage part that cannot be used stops the command before any swap runs

    def measured() -> Result:
        tables, described = [], []
        for kind in study.settings.replacements:
            if kind == "token:eos":
                kind = f"token:{study.model().tokenizer.eos_token_id}"
            swap = BosReplacement(kind, seed=study.settings.seed)
            after = study.measured([swap], probe=False)
            described.append(swap.describe())
            tables += [reduction(base, after, "c_res", w) for w in ("early", "all")]
            tables.append(after.table[after.table["metric"].isin(["c_res", "c_mask"]) & (after.table["head"] == -1)])
        return Result(pd.concat(tables, ignore_index=True), {**base.meta, "replacements": described})

    return study.cached(DECLARES[0].name, measured)


DECLARES = (
    Part(
        "bos-swap",
        "Replace the BOS embedding and report the reduction of C_res (methodology §7).\n\n"
        "Example: poslens bos-swap --model smollm2-135m --replacement mean --replacement zero --out results/quick",
        (*MEASURE_KEYS, "replacements"),
        (*MEASURED_OPTIONS, "replacements"),
        show=part_printing.show_bos_swap,
        defaults={"replacements": ["mean"]},
        figure_metrics=("reduction",),
        tokens=lambda s: len(s.replacements) * measured_tokens(s.n_seqs, s.seq_len),
        order=30,
        compute=compute,
        provides=("bos_swap",),
        figures=lazy("poslens.study.report_figures:bos_swap_figures"),
        zoo=lazy("poslens.study.zoo_figures:bos_swap_figures"),
        zoo_order=3,
    ),
)
"""The part, for the registry."""
