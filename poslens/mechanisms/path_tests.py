"""The path-specific causal tests (methodology §12): does absolute position reach the residual stream through key 0's RoPE phase?

:func:`path_specific_tests` runs the corpus once unedited and once per edit,
each time a full forward pass that reads, on the same tokens and in the same
groups, the position content of the residual stream and the attention outputs
(probe R², η²), L(log a) with its numerator and SST, a_i0 in the sink-reading
heads by query bin and the next-token loss
(:func:`poslens.fit.path_figures.run_figures`). The edits:

- ``key0-phase:D=<D>`` (:class:`~poslens.mechanisms.key_phase.KeyPhaseFreeze`): every layer's key-0
  logits with their RoPE phase frozen at offset D, each layer measured before its own edit;
- ``key1-phase:D=<D>``: the sham, the same on key 1;
- ``sink-mask-only:<λ>`` (:class:`~poslens.mechanisms.mask_only_sink.MaskOnlySinkProfile`): the
  sink-reading heads' a_i0 moved λ of the way to the mask-only counterfactual's;
- ``sink-ablation`` (:class:`~poslens.mechanisms.interventions.SinkAblation`): their a_i0 fixed to its mean.

The table (a :class:`~poslens.measurement.result.Result`) has one row per
figure with its 95% interval: ``kind`` ``level`` (the run's own figure) or
``difference`` (the run minus its ``reference``, paired group by group: the
unedited run ``none``; for each D, the key-0 edit against the key-1 sham; the
ablation against the mask-only profile, which is the mask's channel through
the sink). Held-out figures (the probes) get their interval from the folds'
spread, the others from the delete-one-group jackknife.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
import torch

from poslens.capture.cell_sum_capture import CellSumCapture
from poslens.capture.residual_capture import DEFAULT_MAX_WIDTH, ResidualCapture
from poslens.errors import InputError, UnseenOffsetWarning
from poslens.fit.binning import Binning
from poslens.fit.paired_figures import Figures
from poslens.fit.path_figures import FIRST_LAYER, run_figures
from poslens.fit.residual_readout import PROBE_PENALTY
from poslens.measurement.arguments import as_interventions, warn_probe_size
from poslens.measurement.batching import batches, intervened_forward
from poslens.measurement.pipeline import measure
from poslens.measurement.provenance import run_metadata
from poslens.measurement.result import Result
from poslens.mechanisms import sinks
from poslens.mechanisms.interventions import SinkAblation
from poslens.mechanisms.key_phase import KeyPhaseFreeze, frozen_rows
from poslens.mechanisms.mask_only_sink import MaskOnlySinkProfile
from poslens.mechanisms.path_doses import dose_responses
from poslens.model.context import check_seq_len
from poslens.model.corpus import Corpus
from poslens.model.pos_model import PosModel
from poslens.options import DEFAULTS, check_integers, default_path_offsets
from poslens.progress import progress_bar
from poslens.runtime import distributed

__all__ = ["NONE", "default_offsets", "path_specific_tests", "run_once"]

#: The label of the unedited run.
NONE = "none"
#: The columns of the table, beyond the tidy ones.
EXTRA_COLUMNS = ["kind", "reference", "query_bin", "query_low", "query_high"]


def default_offsets(seq_len: int) -> tuple[int, ...]:
    """The offsets D the tests report by default (each once): :func:`poslens.options.default_path_offsets`, where the default is written.

    Args:
        seq_len: T.

    Returns:
        The sorted offsets.

    Example:
        >>> default_offsets(128), default_offsets(256)
        ((8, 64), (8, 64, 128))
    """
    return default_path_offsets(seq_len)


def _nll(logits: torch.Tensor, tokens: torch.Tensor) -> np.ndarray:
    logp = torch.log_softmax(logits.to(torch.float64), dim=-1)[:, :-1]
    target = tokens[:, 1:].to(logp.device)
    return (-logp.gather(-1, target[..., None])[..., 0]).cpu().numpy()


def run_once(
    model: PosModel,
    corpus: Corpus,
    interventions: Sequence[Any],
    groups: int,
    early: int,
    batch_size: int,
    max_width: int = DEFAULT_MAX_WIDTH,
    progress: bool = False,
    description: str = "path tests",
) -> tuple[Any, Any, np.ndarray]:
    """One full forward pass over the corpus with its interventions (none for the unedited run), reading everything the tests need.

    Each batch is one :func:`~poslens.measurement.batching.intervened_forward`: the interventions' own hooks
    (e.g. keeping the rotated q and k), the capture of the cell sums and the residual readouts, then the
    interventions' hooks after the capture (a key-phase freeze edits layer l's scores after they are measured).
    Under torchrun each rank runs every K-th batch and the sums and losses are summed over the ranks, so every
    rank returns the whole corpus's.

    Args:
        model: The loaded model.
        corpus: The corpus.
        interventions: The interventions of the run, in order (an edit, after any the whole study composes with).
        groups: Number of groups.
        early: Q of the early query window.
        batch_size: Sequences per forward pass.
        max_width: Residual vectors wider than this are projected (:mod:`poslens.capture.residual_capture`).
        progress: Whether to show a progress bar.
        description: The progress bar's label.

    Returns:
        ``(cell sums, residual readout sums, next-token losses [N, T − 1])``.

    Raises:
        InputError: When an integer setting is out of range, or the sequences are longer than the model's context.

    Example:
        >>> import tempfile, poslens
        >>> from poslens.testing import save_tiny_model
        >>> model = poslens.load_model(save_tiny_model(tempfile.mkdtemp(), "llama"))
        >>> corpus = poslens.make_corpus(model, "random", n_seqs=4, seq_len=12)
        >>> sums, residual, nll = run_once(model, corpus, [KeyPhaseFreeze(8)], groups=2, early=4, batch_size=2)
        >>> nll.shape, residual.rows.tolist()
        ((4, 11), [22.0, 22.0])
    """
    check_integers(groups=groups, early=early, batch_size=batch_size)
    check_seq_len(model, corpus.seq_len)
    interventions = as_interventions(interventions)
    binning = Binning(corpus.seq_len, early=early)
    capture = CellSumCapture(model, binning, groups, probe=False)
    residual = ResidualCapture(model.n_layers, int(model.bridge.cfg.d_model), corpus.seq_len, groups, max_width=max_width)
    nll = np.zeros((corpus.n_seqs, corpus.seq_len - 1))
    distributed.init_from_env()
    plan = batches(corpus.n_seqs, groups, batch_size)[distributed.rank() :: distributed.world_size()]  # under torchrun, every K-th batch
    show = progress and distributed.is_main()
    for index, sequence_groups in progress_bar(plan, desc=description, unit="batch", disable=not show, leave=False):
        tokens = corpus.tokens[index]
        capture.sequence_groups = residual.sequence_groups = sequence_groups  # a batch may span several groups
        capture.add_structure(len(index))
        logits = intervened_forward(model, tokens, interventions, capture.hooks() + residual.hooks(), logits=True)
        capture.flush()
        nll[index] = _nll(logits, tokens)
    readouts = residual.finish()
    if distributed.world_size() > 1:  # every rank ends with the whole corpus's sums, as poslens.measure does
        for name in ("gram", "design_x_target", "target", "target_sq", "rows", "position_sum", "position_rows", "square_total"):
            setattr(readouts, name, distributed.all_reduce_array(getattr(readouts, name)))
        nll = distributed.all_reduce_array(nll)
    return distributed.all_reduce_sums(capture.sums), readouts, nll


def _rows(model: PosModel, label: str, kind: str, reference: str, figures: Figures, binning: Binning) -> pd.DataFrame:
    frame = figures.frame()
    edges = binning.query_edges
    frame["query_low"] = [1 if c < 0 else int(edges[c]) for c in frame["query_bin"]]
    frame["query_high"] = [binning.seq_len if c < 0 else int(min(edges[c + 1], binning.seq_len)) for c in frame["query_bin"]]
    frame.insert(0, "intervention", label)
    frame.insert(0, "variant", model.variant_name)
    frame.insert(0, "model", model.label)
    frame["head"] = -1
    frame["kind"], frame["reference"] = kind, reference
    return frame[["model", "variant", "intervention", "layer", "head", "query_window", "metric", "value", "ci_low", "ci_high", *EXTRA_COLUMNS]]


def path_specific_tests(
    model: PosModel,
    corpus: Corpus,
    offsets: Sequence[int] | None = None,
    doses: Sequence[float] = (1.0,),
    sham: bool = True,
    ablation: bool = True,
    groups: int = DEFAULTS.groups,
    early: int = DEFAULTS.early,
    batch_size: int = DEFAULTS.batch_size,
    tau: float = DEFAULTS.tau,
    penalty: float = PROBE_PENALTY,
    baseline: Result | None = None,
    max_width: int = DEFAULT_MAX_WIDTH,
    interventions: Sequence[Any] = (),
    progress: bool = True,
) -> Result:
    """Run the path-specific tests: the key-0 phase freeze (and its sham), the mask-only sink profile and the ablation.

    The sink-reading heads (a_i0's mean ≥ ``tau``) and the cross-fitted absolute
    component of the mask-only profile come from ``baseline``, an unedited
    ``poslens.measure`` of the same corpus and groups (measured here when not given).

    Args:
        model: The loaded model.
        corpus: The corpus (with BOS at position 0 for the sink to mean anything).
        offsets: The frozen offsets D (default :func:`default_offsets`, from :func:`poslens.options.default_path_offsets`).
        doses: The mask-only profile's doses λ in (0, 1] (1 is the split's).
        sham: Whether to run the key-1 sham at each D.
        ablation: Whether to run the sink-path ablation.
        groups: Number of groups.
        early: Q of the early query window.
        batch_size: Sequences per forward pass.
        tau: The sink-reading threshold.
        penalty: The residual probe's ridge penalty.
        baseline: The unedited measurement of ``corpus`` (its sums are needed), or ``None``.
        max_width: Residual vectors wider than this are projected before their sums are kept.
        interventions: Other interventions in every run, the unedited one and the baseline included (e.g. a BOS
            replacement); each edit composes with them.
        progress: Whether to show progress bars.

    Returns:
        The tidy result: the columns of every table plus ``kind``, ``reference``, ``query_bin``, ``query_low`` and
        ``query_high``; the metadata record each edit, the sink-reading heads, the penalty and the timings.

    Raises:
        InputError: When an offset is negative, a dose is out of (0, 1], or the baseline is of another corpus.

    Example:
        >>> import tempfile, poslens
        >>> from poslens.testing import save_tiny_model
        >>> model = poslens.load_model(save_tiny_model(tempfile.mkdtemp(), "llama"))
        >>> corpus = poslens.make_corpus(model, "random", n_seqs=8, seq_len=16, seed=0)
        >>> result = path_specific_tests(model, corpus, offsets=[8], groups=2, early=4, tau=0.05, progress=False)
        >>> sorted(set(result.table["intervention"]))
        ['key0-phase:D=8', 'key1-phase:D=8', 'none', 'sink-ablation', 'sink-mask-only:1']
        >>> row = result.table.query("metric == 'resid_probe_r2_ge2' and kind == 'difference' and reference == 'none'")
        >>> len(row)   # one fall per edit, against the unedited run
        4
    """
    start = time.perf_counter()
    others = list(interventions)
    offsets = default_offsets(corpus.seq_len) if offsets is None else tuple(offsets)
    for offset in offsets:
        if isinstance(offset, bool) or not isinstance(offset, int | np.integer) or offset < 0:
            raise InputError(f"offsets D must be whole numbers ≥ 0, got {offset!r}")
    unseen = [int(d) for d in offsets if d >= corpus.seq_len]
    notes = []
    if unseen:
        notes.append(
            f"offsets D = {', '.join(map(str, unseen))} are not below the sequences' {corpus.seq_len} tokens: the freeze puts each "
            "query that far from key 0, an offset these sequences never show the model"
        )
        warnings.warn(notes[-1], UnseenOffsetWarning, stacklevel=2)
    for dose in doses:
        if not 0 < dose <= 1:
            raise InputError(f"doses λ must lie in (0, 1], got {dose}")
    warn_probe_size(corpus.n_seqs, corpus.seq_len, groups, min(int(model.bridge.cfg.d_model), max_width))
    if baseline is None:
        baseline = measure(model, corpus, groups=groups, early=early, batch_size=batch_size, interventions=others, probe=False, progress=progress)
    heads = sinks.sink_reading_heads(baseline, tau)
    edits: list[Any] = [KeyPhaseFreeze(int(d)) for d in offsets]
    if sham:
        edits += [KeyPhaseFreeze(int(d), key=1) for d in offsets]
    if heads:
        edits += [MaskOnlySinkProfile.from_baseline(baseline, corpus, heads, dose=float(dose)) for dose in doses]
        if ablation:
            edits.append(SinkAblation(sinks.key0_means(baseline, heads)))
    binning = Binning(corpus.seq_len, early=early)
    timings: dict[str, float] = {}
    figures: dict[str, Figures] = {}
    for edit in [None, *edits]:
        label = NONE if edit is None else edit.label
        began = time.perf_counter()
        runs = others if edit is None else [*others, edit]
        sums, residual, nll = run_once(model, corpus, runs, groups, early, batch_size, max_width, progress, f"path tests: {label}")
        show = progress and distributed.is_main()
        for _ in progress_bar([label], desc=f"path tests: probes and fits of {label}", unit="run", disable=not show, leave=False):
            figures[label] = run_figures(sums, residual, nll, heads, penalty)
        timings[label] = time.perf_counter() - began
    frames = [_rows(model, label, "level", "", f, binning) for label, f in figures.items()]
    pairs = [(label, NONE) for label in figures if label != NONE]
    if sham:
        pairs += [(KeyPhaseFreeze(int(d)).label, KeyPhaseFreeze(int(d), key=1).label) for d in offsets]
    if heads and ablation and 1.0 in [float(d) for d in doses]:
        pairs.append((SinkAblation({}).label, MaskOnlySinkProfile(heads, np.zeros((1,)), binning, {}, 1.0).label))
    frames += [_rows(model, label, "difference", reference, figures[label].minus(figures[reference]), binning) for label, reference in pairs]
    table = pd.concat(frames, ignore_index=True)
    settings = {
        "groups": groups,
        "early": early,
        "batch_size": batch_size,
        "offsets": list(offsets),
        "doses": [float(d) for d in doses],
        "sham": sham,
        "ablation": ablation,
        "tau": tau,
        "probe_penalty": penalty,
        "max_width": max_width,
        "first_layer": FIRST_LAYER,
        "edits": [edit.describe() for edit in edits],
        "interventions": [iv.describe() for iv in others],
    }
    meta = run_metadata(model, corpus, settings)
    meta["sink_heads"] = [list(h) for h in heads]
    meta["key0_rows"] = frozen_rows(model.sliding_windows)  # None without a sliding window
    meta["offset_notes"] = notes
    meta["dose_responses"] = dose_responses(table).to_dict(orient="records")
    meta["timings"] = {"per_run_seconds": timings, "total_seconds": time.perf_counter() - start}
    return Result(table, meta)
