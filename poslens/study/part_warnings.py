"""What a part's figures cannot show by themselves: settings that measure nothing, and figures that are not finite.

:func:`part_warnings` looks at a part just computed, with its settings, and
words each such case: an offset D of the key-phase freeze (``--offsets``) at or
beyond the sequence length (no key lies that far back, so the freeze edits
nothing and its rows repeat the unedited forward), and a figure (``value``,
``ci_low``, ``ci_high``, the loss rows included) that is NaN or infinite. The
study's cache (:func:`poslens.study.part_cache.cached_part`) records them in the
part's metadata (``meta["warnings"]``) and prints them, when the part is
computed and each time it is reused, so that no such part is saved or shown in
silence.

Example:
    >>> import pandas as pd
    >>> from poslens.measurement.result import Result
    >>> from poslens.study.settings import Settings
    >>> part = Result(pd.DataFrame({"metric": ["loss"], "value": [float("nan")]}), {})
    >>> print(*part_warnings("relativize", Settings(seq_len=32), part))  # doctest: +ELLIPSIS
    1 figure of the relativize part is not finite (NaN or ±inf): loss (value); a weight or activation ...
"""

from __future__ import annotations

import numpy as np

from poslens.measurement.result import Result
from poslens.study.settings import Settings

#: The columns of a part's table that hold figures.
FIGURE_COLUMNS = ("value", "ci_low", "ci_high")


def part_warnings(name: str, settings: Settings, result: Result) -> list[str]:
    """The warnings a part just computed carries: offsets that measure nothing, figures that are not finite.

    Args:
        name: The part's name (``"path-tests"``).
        settings: The settings it was computed with.
        result: The part.

    Returns:
        One sentence per case, each naming the option or the figures and what to do; empty when there is none.

    Example:
        >>> import pandas as pd
        >>> part = Result(pd.DataFrame({"metric": ["c_res"], "value": [0.5]}), {})
        >>> print(*part_warnings("path-tests", Settings(seq_len=32, path_offsets=(8, 64)), part))  # doctest: +ELLIPSIS
        --offsets 64 is not below --seq-len 32: the freeze puts each query 64 tokens from key 0, an offset ...
    """
    from poslens.study.part_registry import PARTS

    notes = list(PARTS[name].warnings(settings, result)) if name in PARTS else []
    bad = nonfinite_figures(result)
    if bad:
        count = sum(bad.values())
        shown = ", ".join(bad)
        notes.append(
            f"{count} figure{'s' if count != 1 else ''} of the {name} part {'are' if count != 1 else 'is'} not finite "
            f"(NaN or ±inf): {shown}; a weight or activation of the model overflows or is NaN: check the model, "
            "or measure in float32 (--dtype float32)"
        )
    return notes


def nonfinite_figures(result: Result) -> dict[str, int]:
    """How many figures of each metric (and column) are NaN or infinite.

    Args:
        result: A part or any result with a tidy table.

    Returns:
        ``{"metric (column)": count}``, in the table's order; empty when every figure is finite.

    Example:
        >>> import pandas as pd
        >>> table = pd.DataFrame({"metric": ["a", "b"], "value": [1.0, float("inf")], "ci_low": [0.0, 0.0]})
        >>> nonfinite_figures(Result(table, {}))
        {'b (value)': 1}
    """
    table = result.table
    counts: dict[str, int] = {}
    metrics = table["metric"].astype(str) if "metric" in table else None
    for column in FIGURE_COLUMNS:
        if column not in table:
            continue
        values = np.asarray(table[column], dtype=float)
        bad = ~np.isfinite(values)
        if not bad.any():
            continue
        names = metrics[bad] if metrics is not None else ["(no metric)"] * int(bad.sum())
        for metric in names:
            counts[f"{metric} ({column})"] = counts.get(f"{metric} ({column})", 0) + 1
    return counts
