"""The sink-path split as a study part (methodology §13): the worked example of a part that is one declaration.

Everything about the ``sink-split`` part is here: how it is computed from the study (:func:`compute`), the
setting only it takes (``--split-offset``, :data:`SPLIT_OFFSET_OPTION`), what its command prints (:func:`show`),
its figures in the report (:func:`figures`), its warnings (:func:`warnings`), the claim input it provides
(``split``, which decides C8 in :mod:`poslens.study.claims.c8_split`) and its cost. The registry
(:mod:`poslens.study.part_registry`) finds it by this module's ``DECLARES``; the command, the report's plan,
``run.json``, the reuse key and the estimate follow from it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from poslens.options import SPLIT_OFFSET
from poslens.study import part_printing
from poslens.study.part_registry import MEASURE_KEYS, MEASURED_OPTIONS, Option, Part, measured_tokens

if TYPE_CHECKING:
    import pandas as pd
    from rich.console import Console

    from poslens.measurement.result import Result
    from poslens.study.parts import Study
    from poslens.study.settings import Settings

NAME = "sink-split"
"""The part's one spelling: its command, its file stem and ``Study.sink_split``."""

SPLIT_OFFSET_OPTION = Option(
    "--split-offset",
    None,
    "D of the split's phase edit: key 0's logit as if the query sat D tokens from it.",
    int | None,
    checks={"min": 0, "show_default": f"{SPLIT_OFFSET}, or half the narrowest sliding window"},
)
"""``--split-offset``: the setting ``split_offset``, declared here and nowhere else (default ``None``: :data:`poslens.options.SPLIT_OFFSET`,
or half the narrowest sliding window); :class:`~poslens.study.settings.Settings` takes it as a keyword and reads it as an attribute."""


def compute(study: Study) -> Result:
    """The sink path's split (methodology §13): its share of the residual stream's position, mask count versus key-0 phase.

    Runs on the leakage part's corpus and groups, in its sink-reading heads at τ, one full forward pass per edit
    (:func:`~poslens.mechanisms.sink_split.sink_path_split`): m, p at D = ``split_offset``, mp, s, each factor's sham,
    and the key-0 phase frozen in every head.

    Args:
        study: The study (its settings, model, corpus and folder).

    Returns:
        The part's tidy result, reused from the folder when it matches; ``meta["c8"]`` holds C8's verdict.

    Example:
        >>> study.sink_split().meta["c8"]["verdict"]  # doctest: +SKIP
        'undecided'
    """
    from poslens.mechanisms.sink_split import sink_path_split

    base = study.leakage()  # first: its sink-reading heads, reused when saved

    def measured() -> Result:
        s = study.settings
        return sink_path_split(
            study.model(),
            study.corpus(),
            offset=s.split_offset,
            groups=s.groups,
            early=s.early,
            batch_size=int(base.meta.get("settings", {}).get("batch_size") or s.batch_size),  # the leakage part's batches
            tau=s.tau,
            baseline=base,
            progress=True,
        )

    return study.cached(NAME, measured)


def show(result: Result, console: Console) -> None:
    """Print the sink-split part: each run's f on both readouts, the split's figures, C8 and where the readouts disagree.

    Args:
        result: The part.
        console: Where to print.

    Example:
        >>> show(result, Console())  # doctest: +SKIP
    """
    from rich.markup import escape
    from rich.table import Table

    t = result.table
    out = part_printing.wide(console)

    def cell(rows: pd.DataFrame) -> str:
        if rows.empty:
            return ""
        row = rows.iloc[0]
        return f"{row['value']:.4g} [{row['ci_low']:.4g}, {row['ci_high']:.4g}]"

    runs = Table(title="position in the residual stream, layers ≥ 2: each run's f and its change from the unedited run, 95% CI")
    for column in ("run", "V (unedited code)", "ΔV", "R² (content)", "ΔR²", "Δ loss (nats)"):
        runs.add_column(column)
    levels = t[(t["layer"] == -1) & (t["kind"].isin(["level", "difference", "loss"]))]
    for run in levels["intervention"].drop_duplicates():
        r = levels[levels["intervention"] == run]
        wanted = [("f", "V"), ("f_change", "V"), ("f", "R2"), ("f_change", "R2"), ("loss_change", "loss")]
        runs.add_row(escape(str(run)), *(cell(r[(r["metric"] == metric) & (r["readout"] == readout)]) for metric, readout in wanted))
    out.print(runs)
    derived = t[t["kind"] == "derived"]
    if not derived.empty:
        split = Table(title="the split, per readout (paired group jackknife, 95% CI)")
        split.add_column("figure")
        for readout in ("V", "R2"):
            split.add_column(readout)
        for metric in derived["metric"].drop_duplicates():
            m = derived[derived["metric"] == metric]
            split.add_row(metric, cell(m[m["readout"] == "V"]), cell(m[m["readout"] == "R2"]))
        out.print(split)
    for readout, said in result.meta.get("split", {}).items():
        if readout in ("V", "R2") and said.get("no_share"):
            out.print(escape(f"no share on {readout}: {said['no_share']}"), soft_wrap=True)
    for edit, flag in result.meta.get("split", {}).get("flags", {}).items():
        out.print(escape(f"{edit}: {flag}"), soft_wrap=True)
    c8 = result.meta.get("c8", {})
    out.print(escape(f"C8 (read on V): {c8.get('verdict')}: {c8.get('reason')}"), soft_wrap=True)
    part_printing.print_notes(result, out)


def figures(split: Result, settings: dict[str, Any], /, **inputs: Any) -> list[tuple[str, Any, str]]:
    """C8's figure: the sink path's total and its two-factor Shapley parts, on both readouts (none where nothing was split).

    Args:
        split: The part.
        settings: The study's settings.
        **inputs: The other parts' claim inputs (not read).

    Returns:
        ``[("C8", figure, caption)]``, or ``[]``.

    Example:
        >>> figures(result, {})[0][0]  # doctest: +SKIP
        'C8'
    """
    from poslens.measurement import split_plots
    from poslens.measurement.display import quantized_note
    from poslens.mechanisms.sink_split import split_offset_of

    figures: list[tuple[str, Any, str]] = []
    if (split.table["kind"] == "derived").any():
        c8 = split.meta.get("c8", {})
        figures.append(
            (
                "C8",
                split_plots.plot_sink_split(split.table),
                " ".join(
                    piece
                    for piece in (
                        "The sink path's split in the sink-reading heads (methodology §13), mean over layers ≥ 2: the sink "
                        "path's total (the unedited run minus the run with a_i0 held at its cross-fitted mean) and its two-factor "
                        "Shapley parts through the mask's count (edit m) and key 0's RoPE phase (edit p, D = "
                        f"{split_offset_of(split)}), on V (the unedited probe applied to the edited runs: "
                        "the position code) and on R² (the probe refitted: position content). C8 (read on V): "
                        f"{c8.get('verdict')}, {c8.get('reason')}.",
                        quantized_note(split),
                    )
                    if piece
                ),
            )
        )
    return figures


def warnings(settings: Settings, result: Result) -> list[str]:
    """The warning of a split measured at a D its sequences never show the model.

    Args:
        settings: The settings it was computed with.
        result: The part.

    Returns:
        One sentence naming ``--split-offset``, or none.

    Example:
        >>> from poslens.study.settings import Settings
        >>> warnings(Settings(seq_len=32, split_offset=40), None)[0].split(":")[0]
        '--split-offset 40 is not below --seq-len 32'
    """
    if settings.split_offset is None or settings.split_offset < settings.seq_len:
        return []
    return [
        f"--split-offset {settings.split_offset} is not below --seq-len {settings.seq_len}: the phase edit puts each query "
        f"{settings.split_offset} tokens from key 0, an offset these sequences never show the model; give one below {settings.seq_len}"
    ]


def claim_inputs(result: Result) -> dict[str, Any]:
    """The claim input ``split`` (C8): the part, or ``None`` where no head reads the sink (nothing was split).

    Args:
        result: The part.

    Returns:
        ``{"split": result or None}``.

    Example:
        >>> import pandas as pd
        >>> from poslens.measurement.result import Result
        >>> claim_inputs(Result(pd.DataFrame({"kind": ["level"]}), {}))
        {'split': None}
    """
    import pandas as pd

    kinds = result.table.get("kind", pd.Series(dtype=str)) if result is not None else pd.Series(dtype=str)
    return {"split": result if (kinds == "derived").any() else None}


DECLARES = (
    Part(
        NAME,
        "The sink path's split as a number (methodology §13): how much of the residual stream's position the sink path "
        "carries, and how much of it runs through the mask's count and through key 0's RoPE phase.\n\n"
        "In the sink-reading heads of the leakage part (measured first if it is not in --out), one full forward pass per "
        "edit: m (the mask's count removed), p (key 0's phase frozen at --split-offset), mp (both), s (the whole sink "
        "path), each factor's sham, and the phase frozen in every head. Two readouts of the residual stream over layers "
        "≥ 2: V (the unedited probe on the edited run: position along the unedited code) and R² (the probe refitted: "
        "position content); the two-factor Shapley split of each, with paired group-jackknife intervals, and C8's verdict.\n\n"
        "Example: poslens sink-split --model smollm2-135m --n-seqs 16 --seq-len 128 --out results/quick",
        (*MEASURE_KEYS, "tau", "split_offset"),
        (*MEASURED_OPTIONS, "tau", "split_offset"),
        show=show,
        order=60,
        compute=compute,
        provides=("split",),
        claim_inputs=claim_inputs,
        figures=figures,
        warnings=warnings,
        new_options={"split_offset": SPLIT_OFFSET_OPTION},
        figure_metrics=("f", "share_m", "sink_share"),
        # the unedited run, four edits, two shams and the every-head freeze, each a full forward with the residual readout
        tokens=lambda s: 1.5 * 8 * measured_tokens(s.n_seqs, s.seq_len),
    ),
)
"""The part, for the registry."""
