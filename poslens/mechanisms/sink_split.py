"""The sink path's split as a number (methodology §13): how much of the residual stream's position the sink path carries, and how it divides.

:func:`sink_path_split` runs the corpus unedited, then once per edit of
:mod:`poslens.mechanisms.sink_split_edits` in the sink-reading heads (m: the mask's count
removed; p: key 0's RoPE phase removed; mp: both; s: the whole sink path; and each
factor's sham), and once with the key-0 phase frozen in every head (§12's P0, for
comparison). Each run reads the residual stream entering every block and the
next-token loss; :mod:`poslens.fit.split_figures` turns them into two readouts,
V (position along the unedited code) and R² (position content), and the
two-factor Shapley split of each, with paired delete-one-group intervals.

The table (a :class:`~poslens.measurement.result.Result`) has the tidy columns
plus ``readout`` (``V``, ``R2`` or ``loss``) and ``kind``:

- ``level``: metric ``f``, per run (``intervention`` ``none``, ``m``, ``p``, ``mp``, ``s``, ``sham-m``,
  ``sham-p``, ``p0-every-head``), per layer and at layer −1 (the mean over layers ≥ 2, which
  every derived figure uses);
- ``difference``: metric ``f_change``, each run's f minus the unedited one's, paired;
- ``derived``: intervention ``split``, the metrics of :func:`~poslens.fit.split_figures.split_figures`;
- ``loss``: metric ``loss_change``, each run's mean next-token loss minus the unedited one's.

The metadata hold C8's verdict (``meta["c8"]``, read on V), each readout's
"no share" reason (``meta["split"][readout]["no_share"]``) and, per edit, where the
two readouts disagree (``meta["split"]["flags"]``).
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
import torch

from poslens.capture.residual_capture import DEFAULT_MAX_WIDTH, ResidualCapture
from poslens.errors import InputError, UnseenOffsetWarning
from poslens.fit import split_figures as fig
from poslens.fit.groups import group_of
from poslens.fit.residual_readout import PROBE_PENALTY, ResidualSums
from poslens.measurement.arguments import ProbeSizeWarning, as_interventions, warn_probe_size
from poslens.measurement.batching import batches, intervened_forward
from poslens.measurement.pipeline import measure
from poslens.measurement.provenance import run_metadata
from poslens.measurement.result import Result
from poslens.measurement.table import COLUMNS
from poslens.mechanisms import sinks
from poslens.mechanisms.key_phase import KeyPhaseFreeze
from poslens.mechanisms.sink_split_edits import SinkPathEdit, SinkRowStats, SplitStatistics
from poslens.model.context import check_seq_len
from poslens.model.corpus import Corpus
from poslens.model.pos_model import PosModel
from poslens.options import DEFAULTS, SPLIT_OFFSET, check_integers
from poslens.progress import progress_bar
from poslens.runtime import distributed

__all__ = ["NONE", "READOUTS", "ProbeSizeWarning", "default_split_offset", "sink_path_split", "split_offset_of"]

#: The label of the unedited run.
NONE = "none"
#: The readouts: V (the unedited code) and R² (the content).
READOUTS = ("V", "R2")
#: The columns of the table beyond the tidy ones.
EXTRA_COLUMNS = ["readout", "kind"]
#: The label of the every-head key-0 phase freeze run beside the split.
EVERY_HEAD = "p0-every-head"
#: A change of R² within this band counts as "no loss" (methodology §13.2).
R2_BAND = 0.01


def default_split_offset(windows: Sequence[int | None]) -> int:
    """D of the phase edit by default: :data:`poslens.options.SPLIT_OFFSET` (64), or half the narrowest sliding window if smaller.

    Args:
        windows: Each layer's sliding window (``None``: full causal).

    Returns:
        D.

    Example:
        >>> default_split_offset([None, None]), default_split_offset([32, None, 32]), default_split_offset([512])
        (64, 16, 64)
    """
    widths = [w for w in windows if w is not None]
    return min([SPLIT_OFFSET] + [w // 2 for w in widths])


def split_offset_of(result: Result) -> int:
    """D of a saved split's phase edit: as recorded, else the study's ``split_offset``, else its default for the model's windows.

    Args:
        result: A sink-split result (from :func:`sink_path_split`, or a study's ``sink-split`` part).

    Returns:
        D.

    Example:
        >>> split_offset_of(Result(pd.DataFrame(), {"split_settings": {"offset": 16}}))
        16
        >>> split_offset_of(Result(pd.DataFrame(), {"settings": {"split_offset": None}, "model": {"window": [None, 32]}}))
        16
    """
    recorded = result.meta.get("split_settings", {}).get("offset")
    if recorded is not None:
        return int(recorded)
    chosen = result.meta.get("settings", {}).get("split_offset")
    return int(chosen) if chosen is not None else default_split_offset(result.meta.get("model", {}).get("window") or [])


def _forward(
    model: PosModel,
    corpus: Corpus,
    interventions: list[Any],
    stats: SinkRowStats | None,
    groups: int,
    batch_size: int,
    max_width: int,
    progress: bool,
    label: str,
) -> tuple[ResidualSums, np.ndarray]:
    """One run over the corpus: the residual stream entering each block (summed per group) and the next-token losses [N]."""
    residual = ResidualCapture(model.n_layers, int(model.bridge.cfg.d_model), corpus.seq_len, groups, max_width=max_width)
    hooks = [h for h in residual.hooks() if h[0].endswith("hook_resid_pre")]  # the readouts read the residual stream alone
    losses = np.zeros(corpus.n_seqs)
    plan = batches(corpus.n_seqs, groups, batch_size)[distributed.rank() :: distributed.world_size()]
    show = progress and distributed.is_main()
    for index, sequence_groups in progress_bar(plan, desc=f"sink split: {label}", unit="batch", disable=not show, leave=False):
        tokens = corpus.tokens[index]
        residual.sequence_groups = sequence_groups
        extra = []
        if stats is not None:
            stats.sequence_groups = sequence_groups
            extra = stats.hooks()
        logits = intervened_forward(model, tokens, interventions, hooks + extra, logits=True)
        logp = torch.log_softmax(logits.to(torch.float64), dim=-1)[:, :-1]
        nll = -logp.gather(-1, tokens[:, 1:].to(logp.device)[..., None])[..., 0]
        losses[index] = nll.mean(-1).cpu().numpy()
    sums = residual.finish()
    if distributed.world_size() > 1:
        for name in ("gram", "design_x_target", "target", "target_sq", "rows", "position_sum", "position_rows", "square_total"):
            setattr(sums, name, distributed.all_reduce_array(getattr(sums, name)))
        losses = distributed.all_reduce_array(losses)
        if stats is not None:
            stats.sequences = distributed.all_reduce_array(stats.sequences)
            for layer in stats.ell:
                stats.ell[layer] = distributed.all_reduce_array(stats.ell[layer])
                stats.key0[layer] = distributed.all_reduce_array(stats.key0[layer])
    return sums, losses


def _loss(losses: np.ndarray, groups: int) -> fig.Figure:
    group = group_of(len(losses), groups)
    return fig.Figure(float(losses.mean()), np.array([losses[group != g].mean() for g in range(groups)]))


def _row(model: PosModel, intervention: str, layer: int, metric: str, figure: fig.Figure, readout: str, kind: str) -> dict[str, Any]:
    low, high = figure.interval()
    return {
        "model": model.label,
        "variant": model.variant_name,
        "intervention": intervention,
        "layer": layer,
        "head": -1,
        "query_window": "all",
        "metric": metric,
        "value": figure.estimate,
        "ci_low": low,
        "ci_high": high,
        "readout": readout,
        "kind": kind,
    }


def _flags(levels: dict[str, dict[str, fig.Figure]]) -> dict[str, str]:
    """Per edit, where V and R² disagree (methodology §13.2), in words."""
    out = {}
    for edit in levels["V"]:
        if edit == NONE:
            continue
        _, v_high = (levels["V"][edit] - levels["V"][NONE]).interval()
        r_low, r_high = (levels["R2"][edit] - levels["R2"][NONE]).interval()
        if not v_high < 0:
            continue
        if r_low >= -R2_BAND and r_high <= R2_BAND:
            out[edit] = "the code changed; position is still decodable"
        elif r_low <= 0 <= r_high:
            out[edit] = "the code changed; R² shows no loss, not shown equivalent at this size"
    return out


def sink_path_split(
    model: PosModel,
    corpus: Corpus,
    offset: int | None = None,
    groups: int = DEFAULTS.groups,
    early: int = DEFAULTS.early,
    batch_size: int = DEFAULTS.batch_size,
    tau: float = DEFAULTS.tau,
    penalty: float = PROBE_PENALTY,
    baseline: Result | None = None,
    heads: Sequence[tuple[int, int]] | None = None,
    shams: bool = True,
    every_head_phase: bool = True,
    seed: int = 0,
    max_width: int = DEFAULT_MAX_WIDTH,
    interventions: Sequence[Any] = (),
    progress: bool = True,
) -> Result:
    """Split the sink path's share of the residual stream's position into the mask's count and key 0's phase, on V and R².

    Args:
        model: The loaded model.
        corpus: The corpus (with BOS at position 0, for the sink to mean anything).
        offset: D of the phase edit (default :func:`default_split_offset`: 64, or half the narrowest window).
        groups: Number of groups G (intervals: t with G − 1 degrees of freedom).
        early: Q of the baseline's early query window (when the baseline is measured here).
        batch_size: Sequences per forward pass.
        tau: The sink-reading threshold (when ``heads`` is not given): a head is edited when its mean a_i0 reaches it, over
            the rows i ≥ 1 that see key 0 (under a sliding window shorter than the sequences, rows i < W; methodology §13.1).
        penalty: The residual probe's ridge penalty.
        baseline: An unedited ``poslens.measure`` of ``corpus`` to take the sink-reading heads from (measured when needed).
        heads: The edited heads ``[(layer, head)]``, in place of the sink-reading heads at ``tau``.
        shams: Whether to run each factor's sham (C8 needs them).
        every_head_phase: Whether to run §12's key-0 phase freeze in every head, for comparison.
        seed: Seed of the shams' permutations.
        max_width: Residual vectors wider than this are projected before their sums are kept.
        interventions: Other interventions in every run, the unedited one included; the edits come after them.
        progress: Whether to show progress bars.

    Returns:
        The tidy result (module docstring); its metadata record the heads, D, each edit, C8 and the timings.

    Raises:
        InputError: When an integer setting is out of range, D is negative, or the sequences are longer than the
            model's context.

    Example:
        >>> import tempfile, poslens
        >>> from poslens.testing import save_tiny_model
        >>> model = poslens.load_model(save_tiny_model(tempfile.mkdtemp(), "llama"))
        >>> corpus = poslens.make_corpus(model, "random", n_seqs=12, seq_len=16, seed=0)
        >>> result = sink_path_split(model, corpus, heads=[(0, 0), (1, 1)], offset=4, groups=4, progress=False)
        >>> sorted(set(result.table.query("kind == 'level'")["intervention"]))
        ['m', 'mp', 'none', 'p', 'p0-every-head', 's', 'sham-m', 'sham-p']
        >>> result.meta["c8"]["verdict"] in {"count", "phase", "undecided", "no share", "inconclusive"}
        True
    """
    start = time.perf_counter()
    check_integers(groups=groups, early=early, batch_size=batch_size)
    check_seq_len(model, corpus.seq_len)
    offset = default_split_offset(model.sliding_windows) if offset is None else offset
    if isinstance(offset, bool) or not isinstance(offset, int | np.integer) or offset < 0:
        raise InputError(f"offset D must be a whole number ≥ 0, got {offset!r}")
    offset = int(offset)
    if offset >= corpus.seq_len:
        unseen = f"D = {offset} is not an offset this corpus's sequences of {corpus.seq_len} tokens show the model"
        warnings.warn(unseen, UnseenOffsetWarning, stacklevel=2)
    others = as_interventions(list(interventions))
    width = min(int(model.bridge.cfg.d_model), max_width)
    warn_probe_size(corpus.n_seqs, corpus.seq_len, groups, width)
    distributed.init_from_env()
    if heads is None:
        if baseline is None:
            baseline = measure(model, corpus, groups=groups, early=early, batch_size=batch_size, interventions=others, probe=False, progress=progress)
        heads = sinks.sink_reading_heads(baseline, tau, rows="visible")  # under a window, the rows that see key 0 (§13.1)
    heads = sorted((int(layer), int(head)) for layer, head in heads)
    timings: dict[str, float] = {}

    began = time.perf_counter()
    stats = SinkRowStats(heads, groups, corpus.seq_len) if heads else None
    unedited, unedited_loss = _forward(model, corpus, others, stats, groups, batch_size, max_width, progress, NONE)
    timings[NONE] = time.perf_counter() - began
    for _ in progress_bar(
        [NONE], desc="sink split: the unedited fold probes", unit="fit", disable=not (progress and distributed.is_main()), leave=False
    ):
        theta = fig.fold_probes(unedited, penalty)
    statistics: SplitStatistics | None = stats.finish() if stats is not None else None

    runs: list[tuple[str, Any]] = []
    if statistics is not None:
        corpus_groups = group_of(corpus.n_seqs, groups)
        sequence_of = {row.tobytes(): (int(g), n) for n, (row, g) in enumerate(zip(corpus.tokens.cpu().numpy(), corpus_groups, strict=True))}
        kinds = [*fig.EDITS, *(fig.SHAMS.values() if shams else ())]
        runs += [(kind, SinkPathEdit(kind, heads, statistics, sequence_of, offset, seed)) for kind in kinds]
    if every_head_phase:
        runs.append((EVERY_HEAD, KeyPhaseFreeze(offset)))

    per_layer: dict[str, dict[str, tuple[np.ndarray, np.ndarray]]] = {readout: {} for readout in READOUTS}
    losses: dict[str, fig.Figure] = {NONE: _loss(unedited_loss, groups)}

    def read(label: str, sums: ResidualSums) -> None:
        show = progress and distributed.is_main()
        for _ in progress_bar([label], desc=f"sink split: probes of {label}", unit="run", disable=not show, leave=False):
            per_layer["V"][label] = fig.code_variance(theta, sums)
            per_layer["R2"][label] = fig.content_r2(sums, penalty)

    read(NONE, unedited)
    del unedited
    for label, edit in runs:
        began = time.perf_counter()
        sums, loss = _forward(model, corpus, [*others, edit], None, groups, batch_size, max_width, progress, label)
        read(label, sums)
        losses[label] = _loss(loss, groups)
        timings[label] = time.perf_counter() - began

    levels = {readout: {label: fig.layer_mean(*values) for label, values in per_layer[readout].items()} for readout in READOUTS}
    rows = []
    for readout in READOUTS:
        for label, (estimate, replicates) in per_layer[readout].items():
            rows += [
                _row(model, label, layer, "f", fig.Figure(float(estimate[layer]), replicates[:, layer]), readout, "level")
                for layer in range(len(estimate))
            ]
            rows.append(_row(model, label, -1, "f", levels[readout][label], readout, "level"))
            if label != NONE:
                rows.append(_row(model, label, -1, "f_change", levels[readout][label] - levels[readout][NONE], readout, "difference"))
    for label, loss in losses.items():
        if label != NONE:
            rows.append(_row(model, label, -1, "loss_change", loss - losses[NONE], "loss", "loss"))
    split: dict[str, Any] = {}
    c8 = {"verdict": "no share", "reason": f"no head is sink-reading at τ = {tau}: the sink path has no heads to split"}
    if statistics is not None:
        for readout in READOUTS:
            derived = fig.split_figures(levels[readout])
            rows += [_row(model, "split", -1, name, figure, readout, "derived") for name, figure in derived.items()]
            intervals = fig.split_intervals(levels[readout], derived)
            split[readout] = {"no_share": fig.no_share_reason(intervals)}
            if readout == "V":
                verdict, reason = fig.c8_verdict(intervals)
                c8 = {"verdict": verdict, "reason": reason}
        split["flags"] = _flags(levels)
    else:
        split = {readout: {"no_share": c8["reason"]} for readout in READOUTS} | {"flags": {}}
    table = pd.DataFrame(rows, columns=COLUMNS + EXTRA_COLUMNS)
    settings = {
        "groups": groups,
        "early": early,
        "batch_size": batch_size,
        "offset": offset,
        "tau": tau,
        "probe_penalty": penalty,
        "shams": shams,
        "every_head_phase": every_head_phase,
        "seed": seed,
        "max_width": max_width,
        "first_layer": fig.FIRST_LAYER,
        "edits": [edit.describe() for _, edit in runs],
        "interventions": [iv.describe() for iv in others],
    }
    meta = run_metadata(model, corpus, settings)
    meta["split_settings"] = settings  # kept apart: a study part records its own settings under "settings"
    meta["sink_heads"] = [list(h) for h in heads]
    meta["c8"] = c8
    meta["split"] = split
    meta["timings"] = {"per_run_seconds": timings, "total_seconds": time.perf_counter() - start}
    return Result(table, meta)
