"""Cumulative causal attribution (methodology §11): every layer relativized, each measured before its own edit.

:func:`cumulative_attribution` calibrates each mode's edit on a calibration
corpus (:func:`poslens.mechanisms.relativization_fit.calibrate`), measures the
corpus once unedited, once per mode (and for mode ``all`` once more at the
smaller calibration size) with every layer relativized (:class:`~poslens.mechanisms.relativization.Relativization`, whose
edit runs after the capture), and reports per layer L(log a), C_res and C_mask,
edited against unedited on the same tokens with paired delete-one-group
jackknife intervals, and (mode ``all``, largest calibration size) the same under
a purely relative placebo of the edit's norm (mode ``placebo:all``). Layer 0 is the negative control: nothing below it is
edited. The figure the claims read is r = 1 − mean over layers ≥ 2 of the edited
L(log a) over that of the unedited one. With ``loss=True`` it also runs the full
forward to give the change in next-token loss per query bin under each edit and
under a placebo of the same norm that adds no absolute position: a random
purely relative kernel (:class:`~poslens.mechanisms.relativization.RelativePlacebo`),
or for the key-0 mode a constant key-0 shift
(:class:`~poslens.mechanisms.relativization.KeyZeroShiftPlacebo`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from poslens.errors import InputError
from poslens.fit.binning import Binning
from poslens.fit.relativize import MODES, check_mode
from poslens.fit.stats import jackknife_interval
from poslens.fit.sums import QUERY_WINDOWS
from poslens.measurement.pipeline import measure
from poslens.measurement.result import Result
from poslens.measurement.table import COLUMNS
from poslens.mechanisms.attribution_table import EXTRA_COLUMNS, LOSS_METRIC, R_METRIC, attribution_figure, edit_label, read_old_layout
from poslens.mechanisms.next_token_loss import loss_change, next_token_nll
from poslens.mechanisms.relativization import KeyZeroShiftPlacebo, RelativePlacebo, Relativization
from poslens.mechanisms.relativization_fit import calibrate
from poslens.model.corpus import Corpus
from poslens.model.pos_model import PosModel
from poslens.options import DEFAULTS

#: The per-layer figures of the part's level and difference rows: L(log a) and its split.
FIGURES = ("leakage_pattern", "c_res", "c_mask")
FIRST_LAYER = 2  # r averages layers ≥ 2: layer 1 has only layer 0's edit below it


def _replicated(result: Result) -> tuple[dict[str, np.ndarray], list[dict[str, np.ndarray]]]:
    """The figures on all groups and on each leave-one-group-out replicate: [query window, layer + 1, head + 1] arrays.

    Read from the fits :func:`poslens.measure` made for the result's intervals (:meth:`Result.replicates`), not refitted.
    """
    fits = result.replicates()
    return (
        {name: fits.estimate[name] for name in FIGURES},
        [{name: fits.replicates[name][g] for name in FIGURES} for g in range(fits.n_groups)],
    )


def _per_layer(x: np.ndarray) -> np.ndarray:
    """[query window, layer + 1, head + 1] → [query window, layer + 1] of the head aggregate (layer −1 last)."""
    return x[:, :, -1]


def _reduction(edited: np.ndarray, base: np.ndarray) -> np.ndarray:
    """r per query window from [query window, layer + 1] arrays of L: 1 − mean over layers ≥ 2 (edited) / (unedited)."""
    n_layers = edited.shape[1] - 1
    if n_layers <= FIRST_LAYER:
        return np.full(edited.shape[0], np.nan)
    return 1.0 - edited[:, FIRST_LAYER:n_layers].mean(-1) / base[:, FIRST_LAYER:n_layers].mean(-1)


def _row(
    model: PosModel, label: str, size: int, metric: str, query_window: str, layer: int, kind: str, value: float, low: float, high: float, seq_len: int
) -> dict[str, Any]:
    """One row of the part's table: the tidy columns, then :data:`EXTRA_COLUMNS` (query bin −1: every query ≥ 1)."""
    return {
        "model": model.label,
        "variant": model.variant_name,
        "intervention": label,
        "layer": layer,
        "head": -1,
        "query_window": query_window,
        "metric": metric,
        "value": value,
        "ci_low": low,
        "ci_high": high,
        "kind": kind,
        "calibration_size": size,
        "query_bin": -1,
        "query_low": 1,
        "query_high": seq_len,
    }


def _rows(
    model: PosModel, label: str, size: int, estimate: np.ndarray, low: np.ndarray, high: np.ndarray, metric: str, kind: str, seq_len: int
) -> list[dict[str, Any]]:
    n_layers = estimate.shape[1] - 1
    rows = []
    for w, query_window in enumerate(QUERY_WINDOWS):
        for index in range(n_layers + 1):
            layer = -1 if index == n_layers else index
            value, lo, hi = float(estimate[w, index]), float(low[w, index]), float(high[w, index])
            rows.append(_row(model, label, size, metric, query_window, layer, kind, value, lo, hi, seq_len))
    return rows


def _loss_rows(model: PosModel, label: str, size: int, frame: pd.DataFrame, seq_len: int) -> list[dict[str, Any]]:
    """The rows of one edit's change in next-token loss per query bin (:func:`~poslens.mechanisms.next_token_loss.loss_change`)."""
    return [
        _row(model, label, size, LOSS_METRIC, "all", -1, "difference", float(r.value), float(r.ci_low), float(r.ci_high), seq_len)
        | {"query_bin": int(r.query_bin), "query_low": int(r.query_low), "query_high": int(r.query_high)}
        for r in frame.itertuples(index=False)
    ]


def _check_disjoint(corpus: Corpus, calibration: Corpus) -> None:
    if calibration.seq_len != corpus.seq_len:
        raise InputError(
            f"the calibration corpus has sequences of {calibration.seq_len} tokens and the measured one "
            f"{corpus.seq_len}: the edit is fitted per position, so they must be of one length"
        )
    measured = {tuple(row) for row in corpus.tokens.tolist()}
    shared = sum(tuple(row) in measured for row in calibration.tokens.tolist())
    if shared:
        raise InputError(
            f"{shared} calibration sequence(s) also appear in the measured corpus: calibrate on a disjoint "
            "corpus (the same source with another seed, without the measured sequences: draw N_cal + N "
            "sequences and keep calibration.excluding(corpus, N_cal))"
        )


def _paired_rows(
    model: PosModel,
    label: str,
    size: int,
    edited: Result,
    base_all: dict[str, np.ndarray],
    base_reps: list[dict[str, np.ndarray]],
    table: list[dict[str, Any]],
    summary: list[dict[str, Any]],
    seq_len: int,
):
    """Add an edited measurement's levels and paired differences to the layer rows, and r to the summary rows."""
    ed_all, ed_reps = _replicated(edited)
    for metric in FIGURES:
        est = _per_layer(ed_all[metric])
        reps = np.stack([_per_layer(r[metric]) for r in ed_reps])
        low, high = jackknife_interval(est, reps)
        table += _rows(model, label, size, est, low, high, metric, "level", seq_len)
        base_reps_metric = np.stack([_per_layer(r[metric]) for r in base_reps])
        d_est = est - _per_layer(base_all[metric])
        d_low, d_high = jackknife_interval(d_est, reps - base_reps_metric)
        table += _rows(model, label, size, d_est, d_low, d_high, metric, "difference", seq_len)
    r_est = _reduction(_per_layer(ed_all["leakage_pattern"]), _per_layer(base_all["leakage_pattern"]))
    r_reps = np.stack(
        [_reduction(_per_layer(e["leakage_pattern"]), _per_layer(b["leakage_pattern"])) for e, b in zip(ed_reps, base_reps, strict=False)]
    )
    r_low, r_high = jackknife_interval(r_est, r_reps)
    for w, query_window in enumerate(QUERY_WINDOWS):
        summary.append(_row(model, label, size, R_METRIC, query_window, -1, "reduction", float(r_est[w]), float(r_low[w]), float(r_high[w]), seq_len))
    return table, summary


#: The modes whose edit holds the key-0 term κ (``all``: A and κ; ``key0``: κ alone).
KEY0_MODES = ("all", "key0")


def key0_rows(windows: Sequence[int | None], modes: Sequence[str]) -> dict[str, Any] | None:
    """Where the key-0 term acts in a model with sliding windows: only on the rows i < W, the queries that still see key 0.

    Under a sliding window of W tokens key 0 is out of view from row W on, so κ exists only for the query bins of the
    rows i < W, and the modes that subtract it (:data:`KEY0_MODES`) edit key 0 only there. The relativize part
    records this (``meta["key0_rows"]``), and the command and the report say it.

    Args:
        windows: each layer's sliding window (``None``: full causal).
        modes: the relativization modes run.

    Returns:
        ``{"modes", "windows": {W: layers}, "note"}``, or ``None`` when no layer is windowed or no mode holds κ.

    Example:
        >>> key0_rows([None, 8, 8, None], ["all", "all-but-key0"])["note"]
        "key 0 is visible only to rows i < W under a sliding window, so the key-0 term of mode 'all' acts only on rows i < 8 in layers 1, 2"
        >>> key0_rows([None, None], ["key0"]) is None
        True
    """
    acting = [mode for mode in modes if mode in KEY0_MODES]
    widths = sorted({w for w in windows if w is not None})
    if not acting or not widths:
        return None
    layers = {str(w): [layer for layer, width in enumerate(windows) if width == w] for w in widths}
    where = "; ".join(f"rows i < {w} in layers {', '.join(str(layer) for layer in found)}" for w, found in layers.items())
    named = " and ".join(f"'{mode}'" for mode in acting)
    return {
        "modes": acting,
        "windows": layers,
        "note": f"key 0 is visible only to rows i < W under a sliding window, so the key-0 term of mode{'s' if len(acting) > 1 else ''} "
        f"{named} acts only on {where}",
    }


def cumulative_attribution(
    model: PosModel,
    corpus: Corpus,
    calibration: Corpus,
    modes: Sequence[str] = MODES,
    groups: int = DEFAULTS.groups,
    early: int = DEFAULTS.early,
    batch_size: int | None = 4,
    calibration_sizes: Sequence[int] | None = None,
    loss: bool = True,
    placebo_seed: int = 0,
    progress: bool = True,
    row_sums: str = "auto",
    disk_budget: int | str | None = None,
    interventions: Sequence[Any] = (),
    max_memory: int | str | None = None,
) -> Result:
    """Relativize every layer in each mode and measure each layer before its own edit (methodology §11).

    Each mode's edit is calibrated on the whole calibration corpus and the corpus
    measured with every layer edited. The smaller calibration sizes (default:
    half the calibration corpus) are run for mode ``all`` only (or the first mode
    when ``all`` is not asked), on the first n calibration sequences, so that the
    calibration's own noise shows as the difference between the sizes. The
    figures are paired with the unedited measurement of the same tokens and groups.

    Args:
        model: The loaded model.
        corpus: The measured corpus.
        calibration: The calibration corpus: same length, no sequence in common with ``corpus``.
        modes: The modes to run (default all three).
        groups: Number of jackknife groups.
        early: Q of the early query window.
        batch_size: Sequences per forward pass of the measurements.
        calibration_sizes: Calibration sizes to run (default: half and all of ``calibration``); the largest is used
            for every mode, the others for mode ``all`` only.
        loss: Whether to measure the change in next-token loss (edits and placebos; at the largest size only).
        placebo_seed: Seed of the placebos' relative kernels.
        progress: Whether to show progress bars.
        row_sums: The measurements' counterfactual route (``poslens.measure``).
        disk_budget: The measurements' disk budget (``poslens.measure``).
        interventions: Other interventions (e.g. a BOS replacement) in every forward: the unedited run, the
            calibrations, the edited runs and the loss; the edit composes with them.
        max_memory: The memory budget the next-token loss passes plan their batches against (``"free"``, a size,
            or ``None``: ``batch_size`` as given); they keep every position's logits.

    Returns:
        The tidy result: the columns of every table plus :data:`EXTRA_COLUMNS`. Per layer (``kind`` ``level``, and
        ``difference`` edited − unedited) the figures of :data:`FIGURES` of the unedited run (intervention ``none``,
        calibration size 0) and of each edit (``relativize:<mode>``, ``placebo:<mode>``) at its calibration size;
        r (metric :data:`R_METRIC`, layer −1, kind ``reduction``) per edit, size and window; the change in
        next-token loss (metric :data:`LOSS_METRIC`, kind ``difference``, window ``all``) per edit and query bin
        (−1: every position ≥ 1), at the largest size. The provenance is in ``meta``.

    Raises:
        InputError: When the corpora differ in length or share a sequence, or a size is out of range.
        ValueError: When a mode is unknown.

    Example:
        >>> import tempfile, poslens
        >>> from poslens.testing import save_tiny_model
        >>> model = poslens.load_model(save_tiny_model(tempfile.mkdtemp(), "llama"))
        >>> corpus = poslens.make_corpus(model, "random", n_seqs=8, seq_len=24, seed=0)
        >>> calibration = poslens.make_corpus(model, "random", n_seqs=8, seq_len=24, seed=1)
        >>> a = cumulative_attribution(model, corpus, calibration, modes=["key0"], groups=2, early=8, progress=False)
        >>> r = a.table[a.table["metric"] == R_METRIC]
        >>> sorted(set(a.table["intervention"])), sorted(set(r["calibration_size"]))   # key0 alone: its noise at 4 too
        (['none', 'placebo:key0-shift', 'relativize:key0'], [4, 8])
        >>> attribution_figure(a, "key0")[["value", "ci_low", "ci_high"]].notna().all()
        np.True_
    """
    start = time.perf_counter()
    for mode in modes:
        check_mode(mode)
    _check_disjoint(corpus, calibration)
    sizes = sorted(set(calibration_sizes)) if calibration_sizes is not None else sorted({max(2, calibration.n_seqs // 2), calibration.n_seqs})
    for size in sizes:
        if not 2 <= size <= calibration.n_seqs:
            raise InputError(f"calibration sizes must lie in 2..{calibration.n_seqs} (the calibration corpus), got {size}")
    options = dict(groups=groups, early=early, batch_size=batch_size, probe=False, progress=progress, row_sums=row_sums, disk_budget=disk_budget)
    others = list(interventions)
    base = measure(model, corpus, interventions=others, **options)
    base_all, base_reps = _replicated(base)
    table: list[dict[str, Any]] = []
    for metric in FIGURES:
        est = _per_layer(base_all[metric])
        low, high = jackknife_interval(est, np.stack([_per_layer(r[metric]) for r in base_reps]))
        table += _rows(model, "none", 0, est, low, high, metric, "level", corpus.seq_len)
    summary: list[dict[str, Any]] = []
    loss_rows: list[dict[str, Any]] = []
    calibrations: dict[str, Any] = {}
    binning = Binning(corpus.seq_len, early)
    base_nll = next_token_nll(model, corpus, others, batch_size or 4, max_memory) if loss else None
    for size in sizes:
        subset = calibration.subset(list(range(size)))
        # the smaller sizes show the calibration's own noise: once, on the mode that edits most
        for mode in modes if size == sizes[-1] else [m for m in modes if m == "all"] or list(modes[:1]):
            fit = calibrate(model, subset, mode, early, interventions=others, progress=progress)
            calibrations[f"{mode}@{size}"] = fit.describe()
            edits = [Relativization(fit)]
            if mode == "all" and size == sizes[-1]:
                edits.append(RelativePlacebo(fit, seed=placebo_seed))  # the figure's placebo curve
            for edit in edits:
                edited = measure(model, corpus, interventions=[*others, edit], **options)
                table, summary = _paired_rows(model, edit.label, size, edited, base_all, base_reps, table, summary, corpus.seq_len)
            if loss and size == sizes[-1]:
                # the key-0 mode's placebo is a constant key-0 shift of the same norm (a sink bias), the others' a
                # random relative kernel: each moves the logits as far as its edit without adding absolute position
                placebo = KeyZeroShiftPlacebo(fit) if mode == "key0" else RelativePlacebo(fit, seed=placebo_seed)
                for edit in (Relativization(fit), placebo):
                    frame = loss_change(next_token_nll(model, corpus, [*others, edit], batch_size or 4, max_memory), base_nll, groups, binning)
                    loss_rows += _loss_rows(model, edit.label, size, frame, corpus.seq_len)
    meta = {
        "model": base.meta.get("model"),
        "corpus": base.meta.get("corpus"),
        "versions": base.meta.get("versions"),
        "key0_rows": key0_rows(model.sliding_windows, modes),
        "calibration": calibrations,
        "settings": {
            "modes": list(modes),
            "groups": groups,
            "early": early,
            "batch_size": batch_size,
            "calibration_sizes": sizes,
            "loss": loss,
            "placebo_seed": placebo_seed,
            "row_sums": row_sums,
            "first_layer": FIRST_LAYER,
            "interventions": [iv.describe() for iv in others],
        },
        "timings": {"total_seconds": time.perf_counter() - start},
    }
    return Result(pd.DataFrame(table + summary + loss_rows, columns=[*COLUMNS, *EXTRA_COLUMNS]), meta)


__all__ = [
    "EXTRA_COLUMNS",
    "FIGURES",
    "KEY0_MODES",
    "LOSS_METRIC",
    "R_METRIC",
    "attribution_figure",
    "cumulative_attribution",
    "edit_label",
    "key0_rows",
    "read_old_layout",
]
