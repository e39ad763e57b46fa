"""``poslens.measure``: one streaming pass over a corpus, the counterfactual replay, then the fits, as a tidy result."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from types import SimpleNamespace

import numpy as np
import torch

from poslens.capture.attention_layout import AttentionLayout
from poslens.capture.cell_sum_capture import CellSumCapture
from poslens.capture.counterfactual_replay import CounterfactualReplay
from poslens.capture.row_bin_store import RowBinStore, check_disk_space, store_bytes
from poslens.capture.second_pass import SecondPass
from poslens.errors import InputError
from poslens.fit.binning import Binning
from poslens.fit.cross_fit import counterfactual_cells, cross_fitted_absolute_components
from poslens.fit.groups import default_groups, group_of
from poslens.fit.metric_intervals import metrics_with_intervals
from poslens.fit.replicates import Replicates
from poslens.fit.sums import QUERY_WINDOWS, CellSums
from poslens.measurement.arguments import Intervention, check_arguments
from poslens.measurement.batching import batches, forward_passes
from poslens.measurement.provenance import run_metadata, weights_record_in_background
from poslens.measurement.result import Result
from poslens.measurement.table import tidy
from poslens.model.corpus import Corpus
from poslens.model.guards import check_corpus_fits, check_seq_len, require_pos_model
from poslens.model.pos_model import PosModel
from poslens.options import DEFAULTS
from poslens.runtime import distributed
from poslens.runtime.disk import check_route, choose_route
from poslens.runtime.planner import choose_batch_size
from poslens.runtime.system import release_free_heap


def collect_sums(
    model: PosModel,
    corpus: Corpus,
    *,
    groups: int | None = None,
    early: int = DEFAULTS.early,
    batch_size: int | None = DEFAULTS.batch_size,
    interventions: Sequence[Intervention] = (),
    probe: bool = DEFAULTS.probe,
    progress: bool = True,
    description: str = "measuring",
    max_memory: int | str | None = DEFAULTS.max_memory,
    row_sums: str = "auto",
    disk_budget: int | str | None = None,
) -> CellSums:
    """Run the model over the corpus with capture hooks and return the grouped cell sums.

    One forward pass over the corpus streams every cell sum of methodology §3 and
    the sums the counterfactual fit needs. The per-sequence counterfactual of
    methodology §4.4 (i) then renormalizes each sequence's logits
    (:mod:`poslens.capture.counterfactual_replay`), with each group's absolute
    component fitted on the other groups, by one of two routes that give the
    same figures (:mod:`poslens.runtime.disk`): ``row_sums="store"`` keeps
    each sequence's per-row offset-bin sums of exp(s) in a temporary file
    between the pass and the replay (:mod:`poslens.capture.row_bin_store`,
    8·L·H·T·(1 + bins) bytes per sequence;
    :class:`poslens.capture.row_bin_store.InsufficientDiskError` before anything
    runs if ``TMPDIR`` lacks the room); ``"second-pass"`` keeps nothing and runs
    the same batches through the model again (:mod:`poslens.capture.second_pass`);
    ``"auto"`` keeps the store when its size, known before the run starts, fits
    ``disk_budget`` (default the smaller of 4 GB and half the free space), and
    makes the second pass otherwise. The returned sums' ``counterfactual``
    attribute says which route ran, why, and how many bytes went to disk. Under torchrun each rank runs every
    K-th batch and the sums are all-reduced after the pass and after the replay (see
    :mod:`poslens.runtime.distributed`), so every rank returns the whole corpus's sums.
    ``max_memory`` picks the batch size: ``"free"`` plans against the memory free
    now, a size such as ``"8GB"`` against that budget for the whole process;
    ``batch_size`` is then an upper bound. See :func:`poslens.runtime.planner.choose_batch_size`.
    Every option after ``corpus`` is keyword-only, as in :func:`measure`.

    Args:
        model: A :class:`~poslens.model.loading.PosModel`.
        corpus: The token corpus (:func:`~poslens.model.corpus.make_corpus`).
        groups: Number of groups of the delete-one-group jackknife, at least 2; ``None`` (the default):
            ``min(8, N // 2)`` and 2 at least (:func:`~poslens.fit.groups.default_groups`), so that every group holds
            two sequences or more from N = 4 on.
        early: Q, the bound of the early query window 1 ≤ i < Q.
        batch_size: Sequences per forward pass, which may belong to several groups (an upper bound with ``max_memory``).
        interventions: Interventions whose hooks run in the same forward pass.
        probe: Whether to accumulate the position probe's sums.
        progress: Whether to show a progress bar.
        description: The progress bar's label.
        max_memory: ``"free"`` or a memory budget to plan the batch size against.
        row_sums: ``"auto"``, ``"store"`` or ``"second-pass"``: the route of the per-sequence counterfactual.
        disk_budget: The most temporary disk ``"auto"`` lets the store take (bytes or ``"2GB"``).

    Returns:
        The grouped cell sums, with the counterfactual's and, as ``.row_sums_route``, the route taken.

    Raises:
        TypeError: When ``model`` is not a :class:`~poslens.model.loading.PosModel`, or an option is given by
            position (the options are keyword-only since 0.4.0).
        ParameterTypeError: When an argument has the wrong type.
        InputError: When an argument is out of range, or the sequences are longer than the model's context.
        InsufficientMemoryError: When one sequence per forward pass does not fit the memory budget.
        InsufficientDiskError: When the temporary folder lacks the room for the per-sequence sums.
        NonFiniteScoresError: When an attention score is NaN or infinite.

    Example:
        >>> sums = collect_sums(model, corpus, groups=4)  # doctest: +SKIP
    """
    groups, interventions, batch_size = _checked_run(model, corpus, "collect_sums()", groups, early, batch_size, interventions, max_memory, row_sums)
    sums = _collect_checked(model, corpus, groups, early, batch_size, interventions, probe, progress, description, row_sums, disk_budget)
    release_free_heap()  # the hooks' freed arrays, so that the next forward pass finds an unfragmented heap
    return sums


def _checked_run(
    model: PosModel,
    corpus: Corpus,
    caller: str,
    groups: int | None,
    early: int,
    batch_size: int | None,
    interventions: object,
    max_memory: int | str | None,
    row_sums: str,
) -> tuple[int, tuple[Intervention, ...], int]:
    """The one validation of :func:`measure` and :func:`collect_sums`: arguments, route, corpus and context; then the
    process group and the batch size. Returns the number of groups (``None``: :func:`~poslens.fit.groups.default_groups`
    of the corpus's size), the interventions as a tuple and the batch size to run."""
    require_pos_model(model, caller)  # before the planner reads the model
    if groups is None:
        groups = default_groups(corpus.n_seqs, DEFAULTS.groups) if isinstance(corpus, Corpus) else DEFAULTS.groups
    checked = check_arguments(corpus, interventions, groups=groups, early=early, batch_size=batch_size)
    check_route(row_sums)
    check_corpus_fits(model, corpus)
    check_seq_len(model, corpus.seq_len)
    distributed.init_from_env()
    return groups, checked, choose_batch_size(model, corpus.seq_len, corpus.n_seqs, groups, batch_size, max_memory)


def _collect_checked(
    model: PosModel,
    corpus: Corpus,
    groups: int,
    early: int,
    batch_size: int,
    interventions: tuple[Intervention, ...],
    probe: bool,
    progress: bool,
    description: str,
    row_sums: str,
    disk_budget: int | str | None,
) -> CellSums:
    """:func:`collect_sums` once its arguments are checked (:func:`_checked_run`) and its batch size is planned."""
    binning = Binning(corpus.seq_len, early=early)
    plan = batches(corpus.n_seqs, groups, batch_size)[distributed.rank() :: distributed.world_size()]
    estimate = store_bytes(sum(len(batch.sequences) for batch in plan), model.n_layers, model.n_heads, corpus.seq_len, binning.n_offset_bins)
    # the ranks of one node share its temporary folder, and so the budget
    route = choose_route(row_sums, estimate, disk_budget, processes=distributed.local_world_size())
    if route.route == "store":
        check_disk_space(estimate)
    store = RowBinStore() if route.route == "store" else None
    capture = CellSumCapture(model, binning, groups, probe=probe, store=store)
    show = progress and distributed.is_main()
    try:
        forward_passes(model, corpus, plan, interventions, capture, show, description, before_each=capture.add_structure)
        sums = distributed.all_reduce_sums(capture.sums)
        block_elements = capture.block_elements
        stored = 0 if store is None else store.nbytes
        # the first pass's row-block caches and work buffers would sit beside the second pass's own, inside
        # the forward's peak: drop them, and hand the freed heap back
        del capture
        if store is None:
            release_free_heap()

        def second_pass(replay: CounterfactualReplay) -> None:
            second = SecondPass(model, binning, replay, block_elements=block_elements)
            forward_passes(model, corpus, plan, interventions, second, show, f"{description} (counterfactual, second pass)")

        _add_counterfactual(model, sums, store, second_pass, show, description, across_ranks=True)
    finally:
        if store is not None:
            store.close()
    sums.row_sums_route = {**route.describe(), "stored_bytes": stored}
    return sums


def _add_counterfactual(
    model: AttentionLayout,
    sums: CellSums,
    store: RowBinStore | None,
    second_pass: Callable[[CounterfactualReplay], None],
    progress: bool,
    description: str,
    across_ranks: bool,
) -> None:
    """The ending :func:`collect_sums` and :func:`measure_scores` share: the per-sequence counterfactual's cells.

    Fits each group's absolute component once (:func:`~poslens.fit.cross_fit.cross_fitted_absolute_components`),
    replays the row-bin ``store`` or, without one, lets ``second_pass`` feed the replay, sums Σ log Z' over the
    ranks (``across_ranks``) and sets ``sums.counterfactual_cells``.
    """
    cross_fit = cross_fitted_absolute_components(sums)
    replay = CounterfactualReplay(model, sums.binning, cross_fit, sums.n_groups)
    if store is not None:
        replay.replay(store, progress=progress, description=f"{description} (counterfactual)")
    else:
        second_pass(replay)
    reduce = distributed.all_reduce_array if across_ranks else np.asarray
    log_partition = {w: reduce(replay.log_partition[w]) for w in QUERY_WINDOWS}
    sums.counterfactual_cells = counterfactual_cells(sums, cross_fit, log_partition)


def measure_scores(
    layer_scores: Sequence[torch.Tensor],
    groups: int = DEFAULTS.groups,
    early: int = DEFAULTS.early,
    layer_windows: Sequence[int | None] | None = None,
    name: str = "synthetic",
    row_sums: str = "store",
) -> Result:
    """:func:`measure` on attention scores given directly, one [N, H, T, T] tensor per layer (no model).

    Masked entries must hold the dtype's minimum, as in ``hook_attn_scores``;
    ``layer_windows`` gives each layer's sliding window (None: causal). For
    synthetic heads, the controls of methodology §4.4 and the version 1 / version 2
    comparison (``docs/make_synthetic_comparison.py``).

    Args:
        layer_scores: One [N, H, T, T] tensor of pre-softmax scores per layer.
        groups: Number of groups of the delete-one-group jackknife.
        early: Q, the bound of the early query window 1 ≤ i < Q.
        layer_windows: Each layer's sliding window (``None``: full causal); default all full causal.
        name: The ``model`` column of the table.
        row_sums: ``"store"`` (the row-bin store) or ``"second-pass"`` (the sums recomputed from the scores
            once the absolute component is fitted); the figures are the same.

    Returns:
        The tidy result, with its sums.

    Raises:
        InputError: When ``counterfactual`` is not ``"store"`` or ``"second-pass"``.

    Example:
        >>> t = 24; i, j = torch.arange(t)[:, None], torch.arange(t)[None, :]
        >>> logits = (-0.1 * (i - j)).float().masked_fill(j > i, torch.finfo(torch.float32).min)
        >>> scores = logits.expand(4, 1, t, t)                      # 4 sequences, 1 head: purely relative
        >>> r = measure_scores([scores], groups=2, early=8)
        >>> abs(r.value("c_res", "all", layer=0, head=0)) < 1e-10   # the mask explains all of it
        True
    """
    scores = [torch.as_tensor(x) for x in layer_scores]
    n_seqs, n_heads, t, _ = scores[0].shape
    sliding_windows = list(layer_windows) if layer_windows is not None else [None] * len(scores)
    layout: AttentionLayout = SimpleNamespace(n_layers=len(scores), n_heads=n_heads, sliding_windows=sliding_windows)
    if check_route(row_sums) == "auto":
        raise InputError("measure_scores takes row_sums='store' or 'second-pass', not 'auto'")
    store = RowBinStore() if row_sums == "store" else None
    capture = CellSumCapture(layout, Binning(t, early=early), groups, probe=False, store=store)
    assignment = group_of(n_seqs, groups)
    indices = [np.nonzero(assignment == g)[0] for g in range(groups)]
    for g, index in enumerate(indices):
        capture.group = g
        capture.add_structure(len(index))
        for layer, x in enumerate(scores):
            capture.reduce(layer, x[index])
        capture.flush()
    sums = capture.sums

    def second_pass(replay: CounterfactualReplay) -> None:
        second = SecondPass(layout, sums.binning, replay)
        for g, index in enumerate(indices):
            for layer, x in enumerate(scores):
                replay.add(g, layer, second.row_bins(layer, x[index]))
            replay.flush()

    try:
        _add_counterfactual(layout, sums, store, second_pass, False, "counterfactual", across_ranks=False)
    finally:
        if store is not None:
            store.close()
    fits = Replicates.of(sums)
    table = tidy(metrics_with_intervals(sums, probe=False, replicates=fits), name, "base", "none")
    meta = {"model": {"model": name}, "settings": {"groups": groups, "early": early, "layer_windows": sliding_windows, "n_seqs": n_seqs}}
    return Result(table, meta, sums, fits)


def measure(
    model: PosModel,
    corpus: Corpus,
    *,
    groups: int | None = None,
    early: int = DEFAULTS.early,
    batch_size: int | None = DEFAULTS.batch_size,
    interventions: Sequence[Intervention] = (),
    probe: bool = DEFAULTS.probe,
    progress: bool = True,
    max_memory: int | str | None = DEFAULTS.max_memory,
    row_sums: str = "auto",
    disk_budget: int | str | None = None,
) -> Result:
    """Measure absolute-position leakage and its mask / residual-stream decomposition.

    Runs ``model`` over ``corpus`` once (:func:`collect_sums`), reducing every
    layer's attention scores to cell sums as the forward goes, then fits methodology §3–§5 with 95%
    intervals over ``groups`` groups of sequences (by default 8, fewer below 16 sequences so that a group
    holds two sequences; ``meta["settings"]`` records the number and how it was chosen). ``early`` is Q, the bound of
    the early query window 1 ≤ i < Q. ``interventions`` add hooks to the same
    forward pass and are recorded in the ``intervention`` column. Every option after ``corpus`` is keyword-only.

    The corpus runs ``batch_size`` consecutive sequences per forward pass, whatever
    their groups: a batch may hold sequences of several groups, and the capture
    adds each sequence's sums to its own group's, so 8 groups in batches of 4
    run 2 passes over 8 sequences, not 8. The figures do not depend
    on the batch size beyond the last bits of a float32 forward.

    Args:
        model: A :class:`~poslens.model.loading.PosModel` (:func:`~poslens.model.loading.load_model`).
        corpus: The token corpus (:func:`~poslens.model.corpus.make_corpus`).
        groups: Number of groups of the delete-one-group jackknife, at least 2; ``None`` (the default):
            ``min(8, N // 2)`` and 2 at least (:func:`~poslens.fit.groups.default_groups`), so that every group holds
            two sequences or more from N = 4 on.
        early: Q, the bound of the early query window 1 ≤ i < Q.
        batch_size: Sequences per forward pass, which may belong to several groups (an upper bound with ``max_memory``).
        interventions: Interventions whose hooks run in the same forward pass.
        probe: Whether to fit the position probe (``probe_r2``).
        progress: Whether to show a progress bar.
        max_memory: ``"free"`` or a memory budget to plan the batch size against (:func:`collect_sums`).
        row_sums: ``"auto"``, ``"store"`` or ``"second-pass"``: how the per-sequence counterfactual gets each
            sequence's row sums, from temporary disk or from a second forward pass (:func:`collect_sums`); the
            figures are the same, and ``meta["row_sums"]`` records the route and why.
        disk_budget: The most temporary disk ``"auto"`` lets the store take (bytes or ``"2GB"``).

    Returns:
        The tidy table of every metric with its 95% interval, the run's metadata and the cell sums.

    Raises:
        TypeError: When ``model`` is not a :class:`~poslens.model.loading.PosModel`, or an option is given by
            position (the options are keyword-only since 0.4.0).
        ParameterTypeError: When an argument has the wrong type.
        InputError: When an argument is out of range, or the sequences are longer than the model's context.
        InsufficientMemoryError: When one sequence per forward pass does not fit the memory budget.
        InsufficientDiskError: When the temporary folder lacks the room for the per-sequence sums.
        NonFiniteScoresError: When an attention score is NaN or infinite.

    Example:
        >>> import poslens
        >>> model = poslens.load_model("smollm2-135m")                              # doctest: +SKIP
        >>> corpus = poslens.make_corpus(model, "docs", n_seqs=16, seq_len=128)     # doctest: +SKIP
        >>> result = poslens.measure(model, corpus)                                  # doctest: +SKIP
        >>> result.select("c_res", "early", head=-1)[["layer", "value", "ci_low", "ci_high"]]  # doctest: +SKIP
    """
    start = time.perf_counter()
    given_groups = groups
    groups, interventions, batch_size = _checked_run(model, corpus, "measure()", groups, early, batch_size, interventions, max_memory, row_sums)
    sums = _collect_checked(model, corpus, groups, early, batch_size, interventions, probe, progress, "measuring", row_sums, disk_budget)
    forward_seconds = time.perf_counter() - start
    weights = weights_record_in_background(model)  # read as measured, on the core the fits below leave idle
    label = "+".join(iv.label for iv in interventions) or "none"
    fits = Replicates.of(sums)  # fitted once: the intervals here, and every reduction or comparison of this result
    table = tidy(metrics_with_intervals(sums, probe=probe, replicates=fits), model.label, model.variant_name, label)
    # the hooks' and the fits' freed arrays, handed back once, here: handed back before the fits, their pages would
    # only be faulted back in by the fits' arrays (at 8 x 128 a few thousand pages)
    release_free_heap()
    settings = {
        "groups": groups,
        "groups_chosen": "given" if given_groups is not None else f"default: min({DEFAULTS.groups}, n_seqs // 2), 2 at least",
        "early": early,
        "batch_size": batch_size,
        "max_memory": None if max_memory is None else str(max_memory),
        "probe": probe,
        "interventions": [iv.describe() for iv in interventions],
        "row_sums": row_sums,
        "disk_budget": None if disk_budget is None else str(disk_budget),
    }
    settings["world_size"] = distributed.world_size()
    meta = run_metadata(model, corpus, settings, weights=weights.result())
    meta["row_sums"] = sums.row_sums_route
    meta["timings"] = {"forward_seconds": forward_seconds, "total_seconds": time.perf_counter() - start}
    return Result(table, meta, sums, fits)
