"""``poslens.measure``: one streaming pass over a corpus, the counterfactual replay, then the fits, as a tidy result."""

from __future__ import annotations

import hashlib
import platform
import time
import warnings
from datetime import datetime, timezone
from types import SimpleNamespace
from typing import Any, Callable, Protocol, Sequence

import numpy as np
import pandas as pd
import torch

from poslens.capture.counterfactual_replay import CounterfactualReplay
from poslens.capture.leakage_capture import LeakageCapture
from poslens.capture.row_bin_store import RowBinStore, check_disk_space, store_bytes
from poslens.capture.second_pass import SecondPass
from poslens.errors import InputError, ParameterTypeError
from poslens.fit.binning import Binning
from poslens.fit.counterfactual import counterfactual_sums, residuals
from poslens.fit.metrics import metrics_with_intervals
from poslens.fit.sums import WINDOWS, CellSums
from poslens.measurement.result import COLUMNS, Result
from poslens.model.corpus import Corpus, check_corpus_fits
from poslens.model.hooks import Hook, attn_scores, run_with_hooks
from poslens.model.loading import require_pos_model
from poslens.progress import progress_bar
from poslens.runtime import distributed
from poslens.runtime.disk import check_route, choose_route
from poslens.runtime.memory import choose_batch_size, release_free_heap
from poslens.version import __version__


class Intervention(Protocol):
    """What ``measure`` needs of an intervention: a label, hooks and a description.

    The classes in :mod:`poslens.mechanisms.interventions` implement it; ``measure`` joins
    the labels of several interventions with ``+`` in the ``intervention`` column.

    Example:
        >>> from poslens.mechanisms.interventions import BosReplacement, Position0Transplant
        >>> "+".join(iv.label for iv in [BosReplacement("mean"), Position0Transplant("token:42")])
        'bos:mean+transplant:42'
    """

    label: str

    def hooks(self, model: Any, tokens: torch.Tensor) -> list[Hook]:
        """Forward hooks for one batch ``tokens`` [batch, pos], added before the capture's own hooks.

        Args:
            model: The loaded model.
            tokens: The batch's token ids, [batch, pos].

        Returns:
            ``[(hook name, hook function)]``, as ``run_with_hooks`` takes them.

        Example:
            >>> import tempfile, poslens
            >>> from poslens.model.tiny import save_tiny_model
            >>> model = poslens.load_model(save_tiny_model(tempfile.mkdtemp(), "llama"))
            >>> from poslens.mechanisms.interventions import Position0Transplant
            >>> hooks = Position0Transplant("token:42").hooks(model, torch.tensor([[1, 70, 71]]))
            >>> [name for name, _ in hooks]   # one per block
            ['blocks.0.hook_resid_pre', 'blocks.1.hook_resid_pre', 'blocks.2.hook_resid_pre']
        """
        ...

    def describe(self) -> dict[str, Any]:
        """The intervention's settings, stored under ``settings["interventions"]`` in the result's metadata.

        Returns:
            The settings, JSON-ready.

        Example:
            >>> from poslens.mechanisms.interventions import BosReplacement
            >>> BosReplacement("zero").describe()
            {'intervention': 'bos-replacement', 'kind': 'zero', 'seed': 0, 'token_id': None}
        """
        ...


def group_of(n_seqs: int, groups: int) -> np.ndarray:
    """Group index of each sequence: contiguous, near-equal blocks.

    Args:
        n_seqs: Number of sequences.
        groups: Number of groups, at least 2.

    Returns:
        The group of each sequence, [n_seqs].

    Raises:
        ValueError: When ``groups`` is below 2, or exceeds ``n_seqs``.

    Example:
        >>> group_of(10, 4).tolist()
        [0, 0, 0, 1, 1, 2, 2, 2, 3, 3]
    """
    if groups < 2:
        raise ValueError(f"groups must be ≥ 2 for intervals, got {groups}")
    if n_seqs < groups:
        raise ValueError(f"{n_seqs} sequences cannot fill {groups} groups; use at least {groups} sequences or fewer groups")
    return (np.arange(n_seqs) * groups) // n_seqs


def batches(n_seqs: int, groups: int, batch_size: int) -> list[tuple[int, np.ndarray]]:
    """(group, sequence indices) for each forward pass; a batch never spans two groups.

    Args:
        n_seqs: Number of sequences.
        groups: Number of groups.
        batch_size: The most sequences per forward pass.

    Returns:
        ``[(group, sequence indices)]``, in order.

    Raises:
        ValueError: When ``batch_size`` is below 1 (or the groups cannot be filled, as in :func:`group_of`).

    Example:
        >>> [(g, idx.tolist()) for g, idx in batches(6, 2, 2)]
        [(0, [0, 1]), (0, [2]), (1, [3, 4]), (1, [5])]
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be ≥ 1, got {batch_size}")
    assignment = group_of(n_seqs, groups)
    out = []
    for g in range(groups):
        members = np.nonzero(assignment == g)[0]
        out.extend((g, members[k : k + batch_size]) for k in range(0, len(members), batch_size))
    return out


def collect_sums(
    model: Any,
    corpus: Corpus,
    groups: int = 8,
    early: int = 32,
    batch_size: int | None = 4,
    interventions: Sequence[Intervention] = (),
    probe: bool = True,
    progress: bool = True,
    description: str = "measuring",
    max_memory: int | str | None = None,
    counterfactual: str = "auto",
    disk_budget: int | str | None = None,
) -> CellSums:
    """Run the model over the corpus with capture hooks and return the grouped cell sums.

    One forward pass over the corpus streams every cell sum of methodology §3 and
    the sums the counterfactual fit needs. The per-sequence counterfactual of
    methodology §4.4 (i) then renormalizes each sequence's logits
    (:mod:`poslens.capture.counterfactual_replay`), with each group's absolute
    component fitted on the other groups, by one of two routes that give the
    same figures (:mod:`poslens.runtime.disk`): ``counterfactual="store"`` keeps
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
    ``batch_size`` is then an upper bound. See :func:`poslens.runtime.memory.choose_batch_size`.

    Args:
        model: A :class:`~poslens.model.loading.PosModel`.
        corpus: The token corpus (:func:`~poslens.model.corpus.make_corpus`).
        groups: Number of groups of the delete-one-group jackknife, at least 2.
        early: Q, the bound of the early query window 1 ≤ i < Q.
        batch_size: Sequences per forward pass (an upper bound with ``max_memory``).
        interventions: Interventions whose hooks run in the same forward pass.
        probe: Whether to accumulate the position probe's sums.
        progress: Whether to show a progress bar.
        description: The progress bar's label.
        max_memory: ``"free"`` or a memory budget to plan the batch size against.
        counterfactual: ``"auto"``, ``"store"`` or ``"second-pass"``: the route of the per-sequence counterfactual.
        disk_budget: The most temporary disk ``"auto"`` lets the store take (bytes or ``"2GB"``).

    Returns:
        The grouped cell sums, with the counterfactual's and, as ``.counterfactual``, the route taken.

    Raises:
        TypeError: When ``model`` is not a :class:`~poslens.model.loading.PosModel`.
        ParameterTypeError: When an argument has the wrong type.
        InputError: When an argument is out of range, or the sequences are longer than the model's context.
        InsufficientMemoryError: When one sequence per forward pass does not fit the memory budget.
        InsufficientDiskError: When the temporary folder lacks the room for the per-sequence sums.
        NonFiniteScoresError: When an attention score is NaN or infinite.

    Example:
        >>> sums = collect_sums(model, corpus, groups=4)  # doctest: +SKIP
    """
    require_pos_model(model, "collect_sums()")
    interventions = check_arguments(corpus, interventions, groups=groups, early=early, batch_size=batch_size)
    check_route(counterfactual)
    check_corpus_fits(model, corpus)
    if corpus.seq_len > (model.max_context or corpus.seq_len):
        raise InputError(
            f"sequence length {corpus.seq_len} exceeds {model.name}'s context of {model.max_context} tokens; "
            f"use sequences of at most {model.max_context} tokens"
        )
    binning = Binning(corpus.seq_len, early=early)
    distributed.init_from_env()
    batch_size = choose_batch_size(model, corpus.seq_len, corpus.n_seqs, groups, batch_size, max_memory)
    plan = batches(corpus.n_seqs, groups, batch_size)[distributed.rank() :: distributed.world_size()]
    estimate = store_bytes(sum(len(index) for _, index in plan), model.n_layers, model.n_heads, corpus.seq_len, binning.n_offset_bins)
    # the ranks of one node share its temporary folder, and so the budget
    route = choose_route(counterfactual, estimate, disk_budget, processes=distributed.local_world_size())
    if route.route == "store":
        check_disk_space(estimate)
    store = RowBinStore() if route.route == "store" else None
    capture = LeakageCapture(model, binning, groups, probe=probe, store=store)
    show = progress and distributed.is_main()
    try:
        forward_passes(model, corpus, plan, interventions, capture, show, description, before_each=capture.add_structure)
        sums = distributed.all_reduce_sums(capture.sums)
        replay = CounterfactualReplay(model, sums.binning, cross_fitted_residuals(sums), groups)
        if store is not None:
            stored = store.nbytes
            replay.replay(store, progress=show, description=f"{description} (counterfactual)")
        else:
            stored = 0
            block_elements = capture.block_elements
            # the first pass's row-block caches and work buffers would sit beside the second pass's own, inside
            # the forward's peak: drop them, and hand the freed heap back
            del capture
            release_free_heap()
            second = SecondPass(model, binning, replay, block_elements=block_elements)
            forward_passes(model, corpus, plan, interventions, second, show, f"{description} (counterfactual, second pass)")
    finally:
        if store is not None:
            store.close()
    add_counterfactual(sums, replay)
    sums.counterfactual = {**route.describe(), "stored_bytes": stored}
    release_free_heap()  # the hooks' freed arrays, so that the next forward pass finds an unfragmented heap
    return sums


def hooks_after_capture(model: Any, tokens: torch.Tensor, interventions: Sequence[Intervention]) -> list[Hook]:
    """The hooks interventions ask to run after the capture's (``hooks_after_capture``, e.g. a relativizing edit).

    An intervention that edits a layer's scores after they are measured (methodology §11) defines
    ``hooks_after_capture(model, tokens)``; the others add nothing here.

    Args:
        model: The loaded model.
        tokens: The batch's token ids, [batch, pos].
        interventions: The run's interventions.

    Returns:
        ``[(hook name, hook function)]`` in the interventions' order.

    Example:
        >>> from poslens.mechanisms.interventions import BosReplacement
        >>> hooks_after_capture(None, torch.zeros(1, 4), [BosReplacement("mean")])
        []
    """
    return [h for iv in interventions if hasattr(iv, "hooks_after_capture") for h in iv.hooks_after_capture(model, tokens)]


def forward_passes(
    model: Any, corpus: Corpus, plan: Sequence[tuple[int, np.ndarray]], interventions: Sequence[Intervention], owner: Any,
    progress: bool, description: str, before_each: Callable[[int], None] | None = None,
) -> None:
    """Run one forward pass per batch of ``plan`` with the interventions' hooks, then ``owner``'s, up to the last layer's scores.

    Hooks an intervention asks to run after the capture (:func:`hooks_after_capture`) come last.

    ``owner`` is a :class:`~poslens.capture.leakage_capture.LeakageCapture` (the
    first pass) or a :class:`~poslens.capture.second_pass.SecondPass`: its
    ``group`` is set before each pass and its ``flush()`` called after it. The
    second pass runs this with the first pass's plan, so that both see the same
    batches with the same interventions.

    Args:
        model: The loaded model.
        corpus: The token corpus.
        plan: ``[(group, sequence indices)]`` of this process (:func:`batches`).
        interventions: Interventions whose hooks run before ``owner``'s.
        owner: What the hooks fill: its ``group``, ``hooks()`` and ``flush()``.
        progress: Whether to show a progress bar.
        description: The progress bar's label.
        before_each: Called with the batch size before each pass (the first pass's structural sums).

    Example:
        >>> forward_passes(model, corpus, batches(16, 8, 4), (), capture, False, "measuring")  # doctest: +SKIP
    """
    for group, index in progress_bar(plan, desc=description, unit="batch", disable=not progress, leave=False):
        tokens = corpus.tokens[index]
        extra: list[Hook] = [h for iv in interventions for h in iv.hooks(model, tokens)]
        after = hooks_after_capture(model, tokens, interventions)
        owner.group = group
        if before_each is not None:
            before_each(len(index))
        # nothing after the last layer's scores is measured: the pass ends there
        run_with_hooks(model, tokens, extra + owner.hooks() + after, stop_after=attn_scores(model.n_layers - 1))
        owner.flush()


def cross_fitted_residuals(sums: CellSums) -> Callable[[int], dict[str, np.ndarray]]:
    """For the sequences of group g, the absolute components A they remove, per window: [G, L, H, C·B].

    Variant v = g is fitted without group g (the estimate); variant v ≠ g without
    groups g and v (the jackknife replicate that deletes v refits it). With two
    groups nothing is left to refit on, so the replicate keeps A fitted without g.
    One fit per group and window: the fit is linear in the sums.

    Args:
        sums: The grouped first-pass sums.

    Returns:
        ``residuals_of(g)``: ``{window: [G, L, H, C·B]}`` for the sequences of group g.

    Example:
        >>> a = cross_fitted_residuals(sums)(0)  # doctest: +SKIP
        >>> a["all"].shape[0] == sums.n_groups  # doctest: +SKIP
        True
    """
    n_groups = sums.n_groups
    # A is linear in the sums: fit each group once (in units of its sums), then add groups up
    per_group = {
        w: np.stack([residuals(sums.group(g), sums.binning, sums.layer_windows, w, per_sequence=False) for g in range(n_groups)])
        for w in WINDOWS
    }
    total = {w: x.sum(axis=0) for w, x in per_group.items()}
    n_seqs = np.asarray(sums.per_group.sequence_count, dtype=np.float64)

    def of(group: int) -> dict[str, np.ndarray]:
        out = {}
        for w in WINDOWS:
            variants = []
            for variant in range(n_groups):
                drop = {group, variant} if n_groups > 2 else {group}
                kept = total[w] - sum(per_group[w][g] for g in drop)
                variants.append(kept / (n_seqs.sum() - sum(n_seqs[g] for g in drop)))
            out[w] = np.stack(variants)
        return out

    return of


def add_counterfactual(sums: CellSums, replay: CounterfactualReplay) -> None:
    """Fill ``sums``' ``counterfactual_*`` (per group) and ``counterfactual_*_replicate`` arrays from a finished replay.

    The replay's row sums are all-reduced across ranks first.

    Args:
        sums: The grouped sums, filled in place.
        replay: The finished replay.

    Example:
        >>> add_counterfactual(sums, replay)  # doctest: +SKIP
    """
    log_z = {w: distributed.all_reduce_array(replay.log_partition[w]) for w in WINDOWS}
    for w in WINDOWS:
        sums.per_group.counterfactual_replicate(w)[:] = 0.0
    for group in range(sums.n_groups):
        residual = replay.residuals_of(group)
        own = sums.group(group)
        for w in WINDOWS:
            for variant in range(sums.n_groups):
                cells = counterfactual_sums(own, sums.binning, sums.layer_windows, w, residual[w][variant], log_z[w][group, variant])
                if variant == group:
                    sums.per_group.counterfactual(w)[group] = cells
                else:
                    sums.per_group.counterfactual_replicate(w)[variant] += cells


def measure_scores(
    layer_scores: Sequence[torch.Tensor], groups: int = 8, early: int = 32, layer_windows: Sequence[int | None] | None = None,
    name: str = "synthetic", counterfactual: str = "store",
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
        counterfactual: ``"store"`` (the row-bin store) or ``"second-pass"`` (the sums recomputed from the scores
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
    windows = list(layer_windows) if layer_windows is not None else [None] * len(scores)
    model = SimpleNamespace(n_layers=len(scores), n_heads=n_heads, window=windows)
    if check_route(counterfactual) == "auto":
        raise InputError("measure_scores takes counterfactual='store' or 'second-pass', not 'auto'")
    store = RowBinStore() if counterfactual == "store" else None
    capture = LeakageCapture(model, Binning(t, early=early), groups, probe=False, store=store)
    assignment = group_of(n_seqs, groups)
    indices = [np.nonzero(assignment == g)[0] for g in range(groups)]
    for g, index in enumerate(indices):
        capture.group = g
        capture.add_structure(len(index))
        for layer, x in enumerate(scores):
            capture.reduce(layer, x[index])
        capture.flush()
    sums = capture.sums
    replay = CounterfactualReplay(model, sums.binning, cross_fitted_residuals(sums), groups)
    if store is not None:
        replay.replay(store)
        store.close()
    else:
        second = SecondPass(model, sums.binning, replay)
        for g, index in enumerate(indices):
            for layer, x in enumerate(scores):
                replay.add(g, layer, second.row_bins(layer, x[index]))
            replay.flush()
    add_counterfactual(sums, replay)
    table = tidy(metrics_with_intervals(sums, probe=False), name, "base", "none")
    meta = {"model": {"model": name}, "settings": {"groups": groups, "early": early, "layer_windows": windows, "n_seqs": n_seqs}}
    return Result(table, meta, sums)


def tidy(values: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]], model: str, variant: str, intervention: str) -> pd.DataFrame:
    """Turn metric arrays [window, layer + 1, head + 1] into the tidy table (NaN cells dropped).

    Args:
        values: ``{metric: (value, ci_low, ci_high)}``, each [window, layer + 1, head + 1].
        model: The ``model`` column.
        variant: The ``variant`` column.
        intervention: The ``intervention`` column.

    Returns:
        The table, with the columns of :data:`~poslens.measurement.result.COLUMNS`.

    Example:
        >>> v = np.zeros((2, 2, 2)); t = tidy({"c_res": (v, v, v)}, "m", "base", "none")
        >>> len(t), sorted(t["layer"].unique().tolist())
        (8, [-1, 0])
    """
    frames = []
    for metric, (value, low, high) in values.items():
        w_idx, l_idx, h_idx = np.nonzero(~np.isnan(value))
        n_layers, n_heads = value.shape[1] - 1, value.shape[2] - 1
        frames.append(
            pd.DataFrame(
                {
                    "layer": np.where(l_idx == n_layers, -1, l_idx),
                    "head": np.where(h_idx == n_heads, -1, h_idx),
                    "query_window": np.array(WINDOWS)[w_idx],
                    "metric": metric,
                    "value": value[w_idx, l_idx, h_idx],
                    "ci_low": low[w_idx, l_idx, h_idx],
                    "ci_high": high[w_idx, l_idx, h_idx],
                }
            )
        )
    table = pd.concat(frames, ignore_index=True)
    table.insert(0, "intervention", intervention)
    table.insert(0, "variant", variant)
    table.insert(0, "model", model)
    return table[COLUMNS]


def tokens_sha256(tokens: torch.Tensor) -> str:
    """sha256 of token ids as little-endian int64: the provenance of exactly what was measured.

    Args:
        tokens: token ids [n_seqs, seq_len].

    Returns:
        64 hex digits.

    Example:
        >>> tokens_sha256(torch.tensor([[1, 2, 3]])) == tokens_sha256(torch.tensor([[1, 2, 3]], dtype=torch.int32))
        True
        >>> tokens_sha256(torch.tensor([[1, 2, 3]])) == tokens_sha256(torch.tensor([[1, 2, 4]]))
        False
    """
    data = tokens.detach().to("cpu", torch.int64).contiguous().numpy().astype("<i8").tobytes()
    return hashlib.sha256(data).hexdigest()


class EarlyWindowWarning(UserWarning):
    """``early`` is not below the sequence length, so the early window holds every query.

    Example:
        >>> issubclass(EarlyWindowWarning, UserWarning)
        True
    """


def check_arguments(corpus: Any, interventions: Any, warn: bool = True, **integers: Any) -> tuple[Any, ...]:
    """Check the arguments of :func:`measure` and :func:`collect_sums` at the boundary; returns the interventions as a tuple.

    ``corpus`` must be a :class:`~poslens.model.corpus.Corpus` (a tensor of ids
    is refused with the call that makes one); each of ``integers`` (``groups=``,
    ``early=``, ``batch_size=``) must be an int (``batch_size`` may be None),
    with ``groups ≥ 2`` and ``early ≥ 2``; an ``early`` not below the corpus's
    length warns (:class:`EarlyWindowWarning`: the early rows then repeat the
    'all' rows); a single intervention is accepted as well as a list.

    Args:
        corpus: the corpus argument.
        interventions: one intervention, or a sequence of them.
        warn: warn about an early window that holds every query (``measure`` leaves that to ``collect_sums``).
        **integers: the integer arguments by name.

    Returns:
        The interventions, as a tuple.

    Raises:
        ParameterTypeError: a wrong type, naming the parameter.
        InputError: a value out of range, naming the parameter.

    Example:
        >>> check_arguments(torch.zeros(2, 8), (), groups=2)
        Traceback (most recent call last):
        poslens.errors.ParameterTypeError: corpus must be a poslens Corpus, not a Tensor: make one with poslens.make_corpus(model, ...) ...
        >>> c = Corpus(torch.zeros(4, 8, dtype=torch.long), "random", 0, "none", [0] * 4, ["a"] * 4)
        >>> check_arguments(c, (), groups="2")
        Traceback (most recent call last):
        poslens.errors.ParameterTypeError: groups must be an int, got str '2'
        >>> check_arguments(c, (), groups=2, early=1)
        Traceback (most recent call last):
        poslens.errors.InputError: early must be ≥ 2 (the early window is 1 ≤ i < early), got 1
    """
    if not isinstance(corpus, Corpus):
        hint = " (its .tokens alone carry no provenance)" if isinstance(corpus, torch.Tensor) else ""
        raise ParameterTypeError(
            f"corpus must be a poslens Corpus, not a {type(corpus).__name__}: make one with poslens.make_corpus(model, ...) "
            f"from a source name, a file or a folder{hint}")
    for name, value in integers.items():
        if value is None and name == "batch_size":
            continue
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise ParameterTypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    groups, early = integers.get("groups"), integers.get("early")
    if groups is not None and groups < 2:
        raise InputError(f"groups must be ≥ 2 (the intervals need two groups at least), got {groups}")
    if early is not None and early < 2:
        raise InputError(f"early must be ≥ 2 (the early window is 1 ≤ i < early), got {early}")
    if warn and early is not None and early >= corpus.seq_len:
        warnings.warn(f"early = {early} is not below the corpus's seq_len {corpus.seq_len}: the early window 1 ≤ i < early "
                      "holds every query, so the 'early' rows repeat 'all'; pass early < seq_len for an early window",
                      EarlyWindowWarning, stacklevel=3)
    if integers.get("batch_size") is not None and integers["batch_size"] < 1:
        raise InputError(f"batch_size must be ≥ 1, got {integers['batch_size']}")
    if _is_intervention(interventions):
        return (interventions,)
    try:
        listed = tuple(interventions)
    except TypeError:
        raise ParameterTypeError(
            f"interventions must be an intervention or a list of them, got {type(interventions).__name__}") from None
    for item in listed:
        if not _is_intervention(item):
            raise ParameterTypeError(
                f"interventions holds a {type(item).__name__}; give poslens interventions such as BosReplacement('mean')")
    return listed


def _memory_hash(model: Any) -> dict[str, str]:
    """For a model measured from memory: the sha256 of its state dict now, as its source hash (taken at each measurement)."""
    if model.source != "memory":
        return {}
    from poslens.model.in_memory import state_dict_sha256

    return {"source_sha256": state_dict_sha256(model.module), "state_dict_sha256_at": "measurement"}


def _is_intervention(value: Any) -> bool:
    return all(hasattr(value, name) for name in ("label", "hooks", "describe")) and not isinstance(value, type)


def run_metadata(model: Any, corpus: Corpus, settings: dict[str, Any]) -> dict[str, Any]:
    """Provenance of a run: model (with its RoPE type and scaling), corpus, settings and software versions.

    Args:
        model: The loaded model.
        corpus: The corpus.
        settings: The run's settings.

    Returns:
        The metadata, JSON-ready.

    Example:
        >>> run_metadata(model, corpus, {"groups": 8})["settings"]["groups"]  # doctest: +SKIP
        8
    """
    import transformer_lens
    import transformers

    return {
        "poslens_version": __version__,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "model": {**model.describe(), **model.rope_record(), **_memory_hash(model)},
        "corpus": {**corpus.describe(), "tokens_sha256": tokens_sha256(corpus.tokens)},
        "settings": settings,
        "versions": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "transformer_lens": getattr(transformer_lens, "__version__", "?"),
            "numpy": np.__version__,
        },
    }


def measure(
    model: Any,
    corpus: Corpus,
    groups: int = 8,
    early: int = 32,
    batch_size: int | None = 4,
    interventions: Sequence[Intervention] = (),
    probe: bool = True,
    progress: bool = True,
    max_memory: int | str | None = None,
    counterfactual: str = "auto",
    disk_budget: int | str | None = None,
) -> Result:
    """Measure absolute-position leakage and its mask / residual-stream decomposition.

    Runs ``model`` over ``corpus`` once (:func:`collect_sums`), reducing every
    layer's attention scores to cell sums as the forward goes, then fits methodology §3–§5 with 95%
    intervals over ``groups`` groups of sequences. ``early`` is Q, the bound of
    the early query window 1 ≤ i < Q. ``interventions`` add hooks to the same
    forward pass and are recorded in the ``intervention`` column.

    Args:
        model: A :class:`~poslens.model.loading.PosModel` (:func:`~poslens.model.loading.load_model`).
        corpus: The token corpus (:func:`~poslens.model.corpus.make_corpus`).
        groups: Number of groups of the delete-one-group jackknife, at least 2.
        early: Q, the bound of the early query window 1 ≤ i < Q.
        batch_size: Sequences per forward pass (an upper bound with ``max_memory``).
        interventions: Interventions whose hooks run in the same forward pass.
        probe: Whether to fit the position probe (``probe_r2``).
        progress: Whether to show a progress bar.
        max_memory: ``"free"`` or a memory budget to plan the batch size against (:func:`collect_sums`).
        counterfactual: ``"auto"``, ``"store"`` or ``"second-pass"``: how the per-sequence counterfactual gets each
            sequence's row sums, from temporary disk or from a second forward pass (:func:`collect_sums`); the
            figures are the same, and ``meta["counterfactual"]`` records the route and why.
        disk_budget: The most temporary disk ``"auto"`` lets the store take (bytes or ``"2GB"``).

    Returns:
        The tidy table of every metric with its 95% interval, the run's metadata and the cell sums.

    Raises:
        TypeError: When ``model`` is not a :class:`~poslens.model.loading.PosModel`.
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
    require_pos_model(model, "measure()")  # before the planner reads the model; collect_sums checks the corpus
    interventions = check_arguments(corpus, interventions, warn=False, groups=groups, early=early, batch_size=batch_size)
    start = time.perf_counter()
    distributed.init_from_env()
    batch_size = choose_batch_size(model, corpus.seq_len, corpus.n_seqs, groups, batch_size, max_memory)
    check_route(counterfactual)
    sums = collect_sums(model, corpus, groups, early, batch_size, interventions, probe, progress,
                        counterfactual=counterfactual, disk_budget=disk_budget)
    forward_seconds = time.perf_counter() - start
    label = "+".join(iv.label for iv in interventions) or "none"
    table = tidy(metrics_with_intervals(sums, probe=probe), model.name, model.variant_name, label)
    release_free_heap()  # and the fits' replicate copies
    settings = {
        "groups": groups,
        "early": early,
        "batch_size": batch_size,
        "max_memory": None if max_memory is None else str(max_memory),
        "probe": probe,
        "interventions": [iv.describe() for iv in interventions],
        "counterfactual": counterfactual,
        "disk_budget": None if disk_budget is None else str(disk_budget),
    }
    settings["world_size"] = distributed.world_size()
    meta = run_metadata(model, corpus, settings)
    meta["counterfactual"] = sums.counterfactual
    meta["timings"] = {"forward_seconds": forward_seconds, "total_seconds": time.perf_counter() - start}
    return Result(table, meta, sums)
