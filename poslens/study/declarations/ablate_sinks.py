"""The ablate-sinks part (methodology §7): C_res with the sink path of the sink-reading heads ablated."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from poslens.study import part_printing
from poslens.study.part_registry import MEASURE_KEYS, MEASURED_OPTIONS, Part, lazy, measured_tokens

if TYPE_CHECKING:
    from poslens.measurement.result import Result
    from poslens.study.parts import Study


def compute(study: Study) -> Result:
    """Sink-path ablation of the sink-reading heads and the reduction of C_res (methodology §7).

    Args:
        study: The study.

    Returns:
        The part's tidy result, reused from the folder when it matches.

    Example:
        >>> result = study.ablate_sinks()  # doctest: +SKIP
        >>> len(result.meta["ablation"]["heads"]), round(result.value("reduction", "early"), 3)  # doctest: +SKIP
        (164, 0.433)
    """
    import pandas as pd

    from poslens.measurement.result import Result
    from poslens.mechanisms import sinks
    from poslens.mechanisms.effects import reduction
    from poslens.mechanisms.interventions import SinkAblation

    name = DECLARES[0].name
    base = study.leakage()  # first, as in bos-swap

    def measured() -> Result:
        heads = sinks.sink_reading_heads(base, study.settings.tau)
        if not heads:
            study.log(f"[{name}] no head has sink score ≥ τ = {study.settings.tau}: nothing to ablate")
            return Result(base.table.iloc[0:0], {**base.meta, "ablation": {"heads": [], "note": "no sink-reading head"}})
        ablation = SinkAblation(sinks.key0_means(base, heads))
        after = study.measured([ablation], probe=False)
        tables = [reduction(base, after, "c_res", w) for w in ("early", "all")]
        tables.append(after.table[after.table["metric"].isin(["c_res", "c_mask"]) & (after.table["head"] == -1)])
        return Result(pd.concat(tables, ignore_index=True), {**base.meta, "ablation": ablation.describe()})

    return study.cached(name, measured)


def claim_inputs(result: Result) -> dict[str, Any]:
    """The claim input ``ablation`` (reported beside C3): the part, or ``None`` where no head reads the sink.

    Args:
        result: The part.

    Returns:
        ``{"ablation": result or None}``.

    Example:
        >>> import pandas as pd
        >>> from poslens.measurement.result import Result
        >>> claim_inputs(Result(pd.DataFrame(), {}))
        {'ablation': None}
    """
    return {"ablation": None if result.table.empty else result}


DECLARES = (
    Part(
        "ablate-sinks",
        "Ablate the sink path of sink-reading heads and report the reduction of C_res (methodology §7).\n\n"
        "Example: poslens ablate-sinks --model smollm2-135m --tau 0.3 --out results/quick",
        (*MEASURE_KEYS, "tau"),
        (*MEASURED_OPTIONS, "tau"),
        show=part_printing.show_ablate_sinks,
        figure_metrics=("c_res", "c_mask", "reduction"),
        tokens=lambda s: measured_tokens(s.n_seqs, s.seq_len),
        order=40,
        compute=compute,
        provides=("ablation",),
        claim_inputs=claim_inputs,
        zoo=lazy("poslens.study.zoo_figures:ablation_figures"),
        zoo_order=4,
    ),
)
"""The part, for the registry."""
