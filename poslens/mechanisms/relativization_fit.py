"""Calibrating the relativizing edit (methodology §11): every layer's absolute terms, fitted bottom up, and the edit they make.

:func:`calibrate` fits, bottom up on a calibration corpus, each layer's absolute
terms (A per cell, κ per query bin on key 0; :mod:`poslens.fit.relativize`) with
the layers below it already edited: layer l's scores are summed over every
calibration sequence (:func:`score_sums`), in batches chosen as ``poslens.measure``
chooses them, its terms fitted, and the scores edited before layer l + 1 sees them. :class:`RelativizationFit` holds the
terms; :func:`edit_scores` and :func:`edit_tensor` turn them into the edit E
that :mod:`poslens.mechanisms.relativization` subtracts in a measured forward.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from poslens.errors import InputError
from poslens.fit.binning import Binning
from poslens.fit.mask_structure import MaskStructure, structure
from poslens.fit.relativize import MODES, AbsoluteTerms, check_mode, edit_solver
from poslens.model import hooks as hook_names
from poslens.model.context import check_seq_len
from poslens.model.corpus import Corpus
from poslens.model.pos_model import PosModel
from poslens.options import DEFAULTS, check_integers
from poslens.progress import progress_bar
from poslens.runtime.planner import choose_batch_size

__all__ = ["MODES", "RelativizationFit", "calibrate", "edit_rms", "edit_scores", "edit_tensor", "score_sums", "visible_pairs"]


def visible_pairs(st: MaskStructure, device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Which pairs (i, j) of a structure's rows i ≥ 1 the edit touches, with each pair's offset index and cell index.

    Args:
        st: The layer's structure in the query window "all" (rows = T).
        device: Where the tensors are made.

    Returns:
        (visible [T, T] bool, offset index [T, T], cell index [T, T]).

    Example:
        >>> from poslens.fit.binning import Binning
        >>> visible, offset, cell = visible_pairs(structure(Binning(4), rows=4, sliding_window=None), torch.device("cpu"))
        >>> visible.int().tolist()   # row 0 is never edited
        [[0, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1]]
    """
    t = st.rows
    i = torch.arange(t, device=device)[:, None]
    j = torch.arange(t, device=device)[None, :]
    delta = i - j
    visible = (delta >= 0) & (delta < st.n_offsets) & (i >= 1)
    offset = delta.clamp(0, st.n_offsets - 1)
    qbin = torch.as_tensor(st.query_bin[:t], device=device)[:, None].expand(t, t)
    obin = torch.as_tensor(st.offset_bin, device=device)[offset]
    return visible, offset, qbin * st.n_offset_bins + obin


def score_sums(scores: torch.Tensor, st: MaskStructure) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Row, key-0, offset and cell sums of a batch's scores [batch, H, T, T] over the structure's pairs, in float64.

    Args:
        scores: Pre-softmax scores of one layer, [batch, heads, T, T] (masked entries are ignored).
        st: The layer's structure in the query window "all" (rows = T).

    Returns:
        ``(row_sums [H, T], key0_sums [H, T], offset_sums [H, D], cell_sums [H, C·B])``, summed over the batch.

    Example:
        >>> st = structure(Binning(4), rows=4, sliding_window=None)
        >>> rows, key0, offsets, cells = score_sums(torch.ones(2, 1, 4, 4), st)
        >>> rows.tolist(), offsets.tolist(), float(cells.sum())   # two sequences of ones
        ([[0.0, 4.0, 6.0, 8.0]], [[6.0, 6.0, 4.0, 2.0]], 18.0)
    """
    visible, offset, cell = visible_pairs(st, scores.device)
    x = torch.where(visible, scores.to(torch.float64), 0.0).sum(0)  # [H, T, T]
    n_heads = x.shape[0]
    flat = x.reshape(n_heads, -1)
    keep = visible.reshape(-1)
    by_offset = torch.zeros(n_heads, st.n_offsets, dtype=torch.float64, device=x.device)
    by_offset.index_add_(1, offset.reshape(-1)[keep], flat[:, keep])
    by_cell = torch.zeros(n_heads, len(st.pair_cells), dtype=torch.float64, device=x.device)
    by_cell.index_add_(1, cell.reshape(-1)[keep], flat[:, keep])
    key0 = x[..., 0] * torch.as_tensor(st.key0, device=x.device)
    return tuple(a.cpu().numpy() for a in (x.sum(-1), key0, by_offset, by_cell))  # type: ignore[return-value]


@dataclass
class RelativizationFit:
    """Every layer's absolute terms, fitted bottom up on a calibration corpus in one mode.

    Attributes:
        mode: What the edit subtracts: ``"all"``, ``"key0"`` or ``"all-but-key0"``.
        cells: A per (layer, head, query bin, offset bin), [L, H, C, B].
        key0: κ per (layer, head, query bin), [L, H, C].
        seq_len: T; the edit applies to sequences of exactly this length.
        early: Q of the binning the cells use.
        layer_windows: Each layer's sliding window (``None``: full causal).
        calibration: The calibration corpus's provenance: source, seed, n_seqs, seq_len, position0, tokens_sha256.
        model: The name and variant of the model it was fitted on.

    Example:
        >>> fit = RelativizationFit("all", np.zeros((1, 2, 23, 23)), np.zeros((1, 2, 23)), 64, 32, (None,), {"n_seqs": 8})
        >>> fit.n_layers, fit.binning.n_query_bins
        (1, 23)
    """

    mode: str
    cells: np.ndarray
    key0: np.ndarray
    seq_len: int
    early: int
    layer_windows: tuple[int | None, ...]
    calibration: dict[str, Any]
    model: dict[str, Any] = field(default_factory=dict)

    @property
    def n_layers(self) -> int:
        """Number of layers L.

        Example:
            >>> RelativizationFit("key0", np.zeros((3, 1, 5, 5)), np.zeros((3, 1, 5)), 5, 32, (None,) * 3, {}).n_layers
            3
        """
        return int(self.cells.shape[0])

    @property
    def binning(self) -> Binning:
        """The bins of the cells: ``Binning(seq_len, early)``.

        Example:
            >>> RelativizationFit("all", np.zeros((1, 1, 5, 5)), np.zeros((1, 1, 5)), 5, 32, (None,), {}).binning.seq_len
            5
        """
        return Binning(self.seq_len, self.early)

    def structure(self, layer: int) -> MaskStructure:
        """The structure of ``layer`` in the query window "all".

        Args:
            layer: The layer.

        Returns:
            Its :class:`~poslens.fit.mask_structure.MaskStructure`.

        Example:
            >>> fit = RelativizationFit("all", np.zeros((2, 1, 5, 5)), np.zeros((2, 1, 5)), 5, 32, (None, 2), {})
            >>> fit.structure(0).sliding_window, fit.structure(1).sliding_window
            (None, 2)
        """
        return _structure(self.seq_len, self.early, self.layer_windows[layer])

    def terms(self, layer: int) -> AbsoluteTerms:
        """What the edit subtracts at ``layer`` in this fit's mode.

        Args:
            layer: The layer.

        Returns:
            A [H, C, B] and κ [H, C], with the part the mode keeps set to 0.

        Example:
            >>> fit = RelativizationFit("key0", np.ones((1, 1, 5, 5)), np.ones((1, 1, 5)), 5, 32, (None,), {})
            >>> float(fit.terms(0).cells.sum()), float(fit.terms(0).key0.sum())
            (0.0, 5.0)
        """
        return AbsoluteTerms(self.cells[layer], self.key0[layer]).for_mode(self.mode)

    def describe(self) -> dict[str, Any]:
        """The fit's provenance, JSON-ready: mode, T, Q, the calibration corpus and the edit's size per layer.

        Returns:
            ``mode``, ``seq_len``, ``early``, ``calibration`` and ``edit_rms`` (per layer, over heads and visible pairs).

        Example:
            >>> fit = RelativizationFit("all", np.zeros((1, 1, 5, 5)), np.zeros((1, 1, 5)), 5, 32, (None,), {"n_seqs": 4})
            >>> fit.describe()["calibration"], fit.describe()["edit_rms"]
            ({'n_seqs': 4}, [0.0])
        """
        return {
            "mode": self.mode,
            "seq_len": self.seq_len,
            "early": self.early,
            "calibration": dict(self.calibration),
            "model": dict(self.model),
            "edit_rms": [float(x) for x in edit_rms(self)],
        }


@functools.lru_cache(maxsize=32)
def _structure(seq_len: int, early: int, sliding_window: int | None) -> MaskStructure:
    return structure(Binning(seq_len, early), rows=seq_len, sliding_window=sliding_window)


@functools.lru_cache(maxsize=32)
def _solver(seq_len: int, early: int, sliding_window: int | None) -> Any:
    return edit_solver(_structure(seq_len, early, sliding_window))


def edit_rms(fit: RelativizationFit) -> np.ndarray:
    """Root mean square of each layer's edit over its heads and one sequence's visible pairs, [L].

    Args:
        fit: The calibrated fit.

    Returns:
        The RMS of E per layer.

    Example:
        >>> fit = RelativizationFit("all", np.ones((1, 1, 5, 5)), np.zeros((1, 1, 5)), 5, 32, (None,), {})
        >>> edit_rms(fit).tolist()
        [1.0]
    """
    out = []
    for layer in range(fit.n_layers):
        e = edit_tensor(fit, layer)
        visible = visible_pairs(fit.structure(layer), torch.device("cpu"))[0]
        out.append(float(torch.sqrt((e[:, visible] ** 2).mean())) if visible.any() else 0.0)
    return np.array(out)


def edit_tensor(fit: RelativizationFit, layer: int) -> torch.Tensor:
    """E of ``layer``: A[c(i), b(i − j)] + κ[c(i)]·[j = 0] on the visible pairs of rows i ≥ 1 (0 elsewhere), [H, T, T].

    The parts the fit's mode does not subtract are 0 (:meth:`RelativizationFit.terms`).

    Args:
        fit: The calibrated fit.
        layer: The layer.

    Returns:
        The edit in float64 on the CPU, [H, T, T].

    Example:
        >>> fit = RelativizationFit("key0", np.zeros((1, 1, 5, 5)), np.ones((1, 1, 5)), 5, 32, (None,), {})
        >>> edit_tensor(fit, 0)[0, :, 0].tolist()   # κ at key 0 of rows 1..4; row 0 untouched
        [0.0, 1.0, 1.0, 1.0, 1.0]
    """
    return edit_scores(fit.structure(layer), fit.terms(layer), torch.device("cpu"), torch.float64)


def edit_scores(st: MaskStructure, terms: AbsoluteTerms, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """E of one layer's terms on its structure: A[c(i), b(i − j)] + κ[c(i)]·[j = 0] on the visible pairs, 0 elsewhere, [H, T, T].

    Args:
        st: The layer's structure in the query window "all" (rows = T).
        terms: The layer's absolute terms (already restricted to the mode's parts).
        device: Where the edit is made.
        dtype: Its dtype (that of the scores it is subtracted from).

    Returns:
        The edit, [H, T, T].

    Example:
        >>> fit = RelativizationFit("key0", np.zeros((1, 1, 5, 5)), np.ones((1, 1, 5)), 5, 32, (None,), {})
        >>> edit_scores(fit.structure(0), fit.terms(0), torch.device("cpu"), torch.float64)[0, :, 0].tolist()
        [0.0, 1.0, 1.0, 1.0, 1.0]
    """
    visible, _, cell = visible_pairs(st, device)
    cells = torch.as_tensor(terms.cells, dtype=torch.float64, device=device).reshape(terms.cells.shape[0], -1)
    key0 = torch.as_tensor(terms.key0, dtype=torch.float64, device=device)
    qbin = torch.as_tensor(st.query_bin[: st.rows], device=device)
    e = cells[:, cell] + key0[:, qbin][:, :, None] * (torch.arange(st.rows, device=device) == 0)[None, None, :]
    return torch.where(visible, e, 0.0).to(dtype)


def calibrate(
    model: PosModel,
    corpus: Corpus,
    mode: str = "all",
    early: int = DEFAULTS.early,
    interventions: Sequence[Any] = (),
    progress: bool = False,
    batch_size: int | None = None,
    max_memory: int | str | None = None,
) -> RelativizationFit:
    """Fit every layer's absolute terms bottom up on ``corpus``, with the layers below edited in ``mode``.

    Layer l's A and κ (:func:`poslens.fit.relativize.edit_solver`) are fitted on the scores of every
    calibration sequence, summed in float64 (:func:`score_sums`), with the layers below already edited;
    what ``mode`` edits is subtracted before layer l + 1 sees the scores. The batch size is chosen as
    ``poslens.measure`` chooses it (:func:`poslens.runtime.planner.choose_batch_size`: ``batch_size`` as
    given, or at most ``batch_size`` and as many as ``max_memory`` allows; with neither, as many as the free
    memory allows, up to the whole corpus). When the corpus runs as one batch, one forward pass fits every
    layer in turn; with several batches, each layer takes a pass over every batch up to that layer
    (L passes, about L/2 forwards of the corpus). The fit is the same either way, up to the last bits of a
    float32 forward. The corpus must be disjoint from the one measured: use the same source with another
    seed. Other ``interventions`` (a BOS replacement, a sink ablation) run in the same forward, as they will
    in the measurement (:func:`poslens.measurement.batching.intervened_forward`): their hooks before the
    fit's, and their ``hooks_after_capture`` after it.

    Args:
        model: The loaded model (:func:`poslens.load_model`).
        corpus: The calibration corpus (:func:`poslens.make_corpus`), of the length to be measured.
        mode: ``"all"``, ``"key0"`` or ``"all-but-key0"``.
        early: Q of the binning (the measurement's ``early``).
        interventions: Interventions the edit is to compose with, run in the calibration forward too.
        progress: Whether to show a progress bar over layers.
        batch_size: Sequences per forward pass (an upper bound with ``max_memory``); ``None``: planned.
        max_memory: ``"free"`` or a memory budget to plan the batch size against.

    Returns:
        The fit, with the calibration corpus's provenance and the batch size used (``calibration["batch_size"]``).

    Raises:
        ValueError: When ``mode`` is unknown.
        InputError: When the corpus has fewer than 2 sequences, an integer setting is out of range, or the
            sequences are longer than the model's context.
        InsufficientMemoryError: When one sequence per forward pass does not fit the memory budget.

    Example:
        >>> import tempfile, poslens
        >>> from poslens.testing import save_tiny_model
        >>> model = poslens.load_model(save_tiny_model(tempfile.mkdtemp(), "llama"))
        >>> fit = calibrate(model, poslens.make_corpus(model, "random", n_seqs=4, seq_len=16, seed=1), batch_size=2, max_memory="free")
        >>> fit.cells.shape, fit.calibration["n_seqs"], fit.calibration["batch_size"]
        ((3, 4, 16, 16), 4, 2)
    """
    from poslens.measurement.arguments import as_interventions  # the measurement's own interventions,
    from poslens.measurement.batching import intervened_forward  # forward pass
    from poslens.measurement.provenance import tokens_sha256  # and hash

    check_mode(mode)
    if not isinstance(corpus, Corpus):
        raise InputError(f"calibrate() takes a poslens Corpus (poslens.make_corpus), not a {type(corpus).__name__}")
    if corpus.n_seqs < 2:
        raise InputError(f"a calibration corpus needs at least 2 sequences, got {corpus.n_seqs}")
    check_integers(early=early, batch_size=batch_size)
    check_seq_len(model, corpus.seq_len)
    interventions = as_interventions(interventions)
    t = corpus.seq_len
    n_layers, n_heads = model.n_layers, model.n_heads
    binning = Binning(t, early)
    cells = np.zeros((n_layers, n_heads, binning.n_query_bins, binning.n_offset_bins))
    key0 = np.zeros((n_layers, n_heads, binning.n_query_bins))
    sliding_windows = tuple(model.sliding_windows)
    size = choose_batch_size(model, t, corpus.n_seqs, 1, batch_size, max_memory)
    parts = [corpus.tokens[k : k + size] for k in range(0, corpus.n_seqs, size)]
    bar = progress_bar(None, total=n_layers, desc=f"calibrating ({mode})", unit="layer", disable=not progress, leave=False)

    def fit(layer: int, sums: Sequence[np.ndarray]) -> torch.Tensor:
        """Fit ``layer``'s terms from the sums over every calibration sequence; returns what ``mode`` edits, [H, T, T]."""
        terms = _solver(t, early, sliding_windows[layer]).terms(*sums, float(corpus.n_seqs))
        cells[layer], key0[layer] = terms.cells, terms.key0
        bar.update(1)
        return edit_scores(_structure(t, early, sliding_windows[layer]), terms.for_mode(mode), torch.device("cpu"), torch.float64)

    edits: list[torch.Tensor] = []

    def edit(layer: int) -> Any:
        def hook(scores: torch.Tensor, hook: Any) -> torch.Tensor:
            return scores - edits[layer].to(scores.device, scores.dtype)[None]

        return hook

    def fit_and_edit(layer: int) -> Any:
        def hook(scores: torch.Tensor, hook: Any) -> torch.Tensor:
            edits.append(fit(layer, score_sums(scores, _structure(t, early, sliding_windows[layer]))))
            return edit(layer)(scores, hook)

        return hook

    def summed_over_batches(layer: int) -> list[np.ndarray]:
        """``layer``'s score sums over every batch, in float64, with the layers below edited."""
        totals: list[np.ndarray] = []

        def add(scores: torch.Tensor, hook: Any) -> None:
            sums = score_sums(scores, _structure(t, early, sliding_windows[layer]))
            totals[:] = sums if not totals else [a + b for a, b in zip(totals, sums, strict=True)]

        capture = [(hook_names.attn_scores(k), edit(k)) for k in range(layer)] + [(hook_names.attn_scores(layer), add)]
        for tokens in parts:
            intervened_forward(model, tokens, interventions, capture, stop_after=hook_names.attn_scores(layer))
        return totals

    try:
        if len(parts) == 1:  # every sequence in the pass: each layer is fitted in its hook, and edited before the next
            capture = [(hook_names.attn_scores(layer), fit_and_edit(layer)) for layer in range(n_layers)]
            intervened_forward(model, corpus.tokens, interventions, capture, stop_after=hook_names.attn_scores(n_layers - 1))
        else:  # layer l's sums need every batch: one pass over the batches per layer
            for layer in range(n_layers):
                edits.append(fit(layer, summed_over_batches(layer)))
    finally:
        bar.close()
    record = {
        "source": corpus.source,
        "seed": corpus.seed,
        "n_seqs": corpus.n_seqs,
        "seq_len": t,
        "position0": corpus.position0,
        "tokens_sha256": tokens_sha256(corpus.tokens),
        "interventions": [iv.describe() for iv in interventions],
        "batch_size": size,
    }
    return RelativizationFit(mode, cells, key0, t, early, sliding_windows, record, {"model": model.label, "variant": model.variant_name})
