"""Relativizing the forward pass (methodology §11): an edit that leaves every head's logits no absolute component.

:func:`calibrate` fits, bottom up on a calibration corpus, each layer's absolute
terms (A per cell, κ per query bin on key 0; :mod:`poslens.fit.relativize`) with
the layers below it already edited, in one forward pass: the calibration
corpus runs as one batch, and the hook at layer l's scores sums them over every
calibration sequence, fits layer l's terms and edits the scores before layer
l + 1 sees them. :class:`Relativization` is the intervention that subtracts them
inside a measured forward. Its edit runs **after** the capture at each layer, so
layer l is measured with exactly the layers below it edited: one forward gives
the cumulative curve. :class:`RelativePlacebo` subtracts a random purely
relative kernel of the same norm instead, for the cost to the model.

The edit changes the per-query-head scores (``hook_attn_scores``), never the
keys a GQA group shares, and only the visible pairs of rows i ≥ 1.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import torch

from poslens.errors import InputError
from poslens.fit.binning import Binning
from poslens.fit.counterfactual import Structure, structure
from poslens.fit.relativize import MODES, AbsoluteTerms, check_mode, edit_solver
from poslens.model import hooks as hook_names
from poslens.model.corpus import Corpus
from poslens.progress import progress_bar

__all__ = ["MODES", "RelativizationFit", "calibrate", "edit_tensor", "edit_rms", "Relativization", "RelativePlacebo", "score_sums"]


def _visible_index(st: Structure, device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(visible [T, T] bool, offset index [T, T], cell index [T, T]) of a structure's pairs (rows i ≥ 1)."""
    t = st.rows
    i = torch.arange(t, device=device)[:, None]
    j = torch.arange(t, device=device)[None, :]
    delta = i - j
    visible = (delta >= 0) & (delta < st.n_offsets) & (i >= 1)
    offset = delta.clamp(0, st.n_offsets - 1)
    qbin = torch.as_tensor(st.query_bin[:t], device=device)[:, None].expand(t, t)
    obin = torch.as_tensor(st.offset_bin, device=device)[offset]
    return visible, offset, qbin * st.n_offset_bins + obin


def score_sums(scores: torch.Tensor, st: Structure) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Row, key-0, offset and cell sums of a batch's scores [batch, H, T, T] over the structure's pairs, in float64.

    Args:
        scores: Pre-softmax scores of one layer, [batch, heads, T, T] (masked entries are ignored).
        st: The layer's structure in the query window "all" (rows = T).

    Returns:
        ``(row_sums [H, T], key0_sums [H, T], offset_sums [H, D], cell_sums [H, C·B])``, summed over the batch.

    Example:
        >>> st = structure(Binning(4), rows=4, window=None)
        >>> rows, key0, offsets, cells = score_sums(torch.ones(2, 1, 4, 4), st)
        >>> rows.tolist(), offsets.tolist(), float(cells.sum())   # two sequences of ones
        ([[0.0, 4.0, 6.0, 8.0]], [[6.0, 6.0, 4.0, 2.0]], 18.0)
    """
    visible, offset, cell = _visible_index(st, scores.device)
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

    def structure(self, layer: int) -> Structure:
        """The structure of ``layer`` in the query window "all".

        Args:
            layer: The layer.

        Returns:
            Its :class:`~poslens.fit.counterfactual.Structure`.

        Example:
            >>> fit = RelativizationFit("all", np.zeros((2, 1, 5, 5)), np.zeros((2, 1, 5)), 5, 32, (None, 2), {})
            >>> fit.structure(0).window, fit.structure(1).window
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
        return {"mode": self.mode, "seq_len": self.seq_len, "early": self.early,
                "calibration": dict(self.calibration), "model": dict(self.model),
                "edit_rms": [float(x) for x in edit_rms(self)]}


@functools.lru_cache(maxsize=32)
def _structure(seq_len: int, early: int, window: int | None) -> Structure:
    return structure(Binning(seq_len, early), rows=seq_len, window=window)


@functools.lru_cache(maxsize=32)
def _solver(seq_len: int, early: int, window: int | None) -> Any:
    return edit_solver(_structure(seq_len, early, window))


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
        visible = _visible_index(fit.structure(layer), torch.device("cpu"))[0]
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
    return _edit(fit.structure(layer), fit.terms(layer), torch.device("cpu"), torch.float64)


def _edit(st: Structure, terms: AbsoluteTerms, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    visible, _, cell = _visible_index(st, device)
    cells = torch.as_tensor(terms.cells, dtype=torch.float64, device=device).reshape(terms.cells.shape[0], -1)
    key0 = torch.as_tensor(terms.key0, dtype=torch.float64, device=device)
    qbin = torch.as_tensor(st.query_bin[: st.rows], device=device)
    e = cells[:, cell] + key0[:, qbin][:, :, None] * (torch.arange(st.rows, device=device) == 0)[None, None, :]
    return torch.where(visible, e, 0.0).to(dtype)


def _check_length(expected: int, scores: torch.Tensor, what: str) -> None:
    if scores.shape[-1] != expected or scores.shape[-2] != expected:
        raise InputError(f"{what} was calibrated for sequences of {expected} tokens; these have {scores.shape[-1]}: "
                         f"calibrate on a corpus of the measured length")


def calibrate(model: Any, corpus: Corpus, mode: str = "all", early: int = 32, interventions: Sequence[Any] = (),
              progress: bool = False) -> RelativizationFit:
    """Fit every layer's absolute terms bottom up on ``corpus``, with the layers below edited in ``mode``.

    The corpus runs as one batch in one forward pass: at each layer the hook sums
    the scores over every calibration sequence (with the layers below already
    edited), fits that layer's A and κ (:func:`poslens.fit.relativize.edit_solver`)
    and subtracts what ``mode`` edits before the next layer. The corpus must be
    disjoint from the one measured: use the same source with another seed.
    Memory grows with the corpus like that of a batch of its size. Other
    ``interventions`` (a BOS replacement, a sink ablation) run in the same
    forward, as they will in the measurement: their hooks before the fit's, and
    their ``hooks_after_capture`` after it.

    Args:
        model: The loaded model (:func:`poslens.load_model`).
        corpus: The calibration corpus (:func:`poslens.make_corpus`), of the length to be measured.
        mode: ``"all"``, ``"key0"`` or ``"all-but-key0"``.
        early: Q of the binning (the measurement's ``early``).
        interventions: Interventions the edit is to compose with, run in the calibration forward too.
        progress: Whether to show a progress bar over layers.

    Returns:
        The fit, with the calibration corpus's provenance.

    Raises:
        ValueError: When ``mode`` is unknown.
        InputError: When the corpus has fewer than 2 sequences.

    Example:
        >>> import tempfile, poslens
        >>> from poslens.model.tiny import save_tiny_model
        >>> model = poslens.load_model(save_tiny_model(tempfile.mkdtemp(), "llama"))
        >>> fit = calibrate(model, poslens.make_corpus(model, "random", n_seqs=4, seq_len=16, seed=1))
        >>> fit.cells.shape, fit.calibration["n_seqs"]
        ((3, 4, 16, 16), 4)
    """
    from poslens.measurement.pipeline import hooks_after_capture, tokens_sha256  # the pipeline's own hook order and hash

    check_mode(mode)
    if not isinstance(corpus, Corpus):
        raise InputError(f"calibrate() takes a poslens Corpus (poslens.make_corpus), not a {type(corpus).__name__}")
    if corpus.n_seqs < 2:
        raise InputError(f"a calibration corpus needs at least 2 sequences, got {corpus.n_seqs}")
    t = corpus.seq_len
    binning = Binning(t, early)
    n_layers, n_heads = model.n_layers, model.n_heads
    cells = np.zeros((n_layers, n_heads, binning.n_query_bins, binning.n_offset_bins))
    key0 = np.zeros((n_layers, n_heads, binning.n_query_bins))
    windows = tuple(model.window)
    bar = progress_bar(None, total=n_layers, desc=f"calibrating ({mode})", unit="layer", disable=not progress, leave=False)

    def fit_and_edit(layer: int):
        def hook(scores: torch.Tensor, hook: Any) -> torch.Tensor:
            st = _structure(t, early, windows[layer])
            sums = score_sums(scores, st)
            terms = _solver(t, early, windows[layer]).terms(*sums, float(scores.shape[0]))
            cells[layer], key0[layer] = terms.cells, terms.key0
            bar.update(1)
            return scores - _edit(st, terms.for_mode(mode), scores.device, scores.dtype)[None]
        return hook

    hooks = [h for iv in interventions for h in iv.hooks(model, corpus.tokens)]
    hooks += [(hook_names.attn_scores(layer), fit_and_edit(layer)) for layer in range(n_layers)]
    hooks += hooks_after_capture(model, corpus.tokens, interventions)
    try:
        hook_names.run_with_hooks(model, corpus.tokens, hooks, stop_after=hook_names.attn_scores(n_layers - 1))
    finally:
        bar.close()
    record = {"source": corpus.source, "seed": corpus.seed, "n_seqs": corpus.n_seqs, "seq_len": t,
              "position0": corpus.position0, "tokens_sha256": tokens_sha256(corpus.tokens),
              "interventions": [iv.describe() for iv in interventions]}
    return RelativizationFit(mode, cells, key0, t, early, windows, record,
                             {"model": model.name, "variant": model.variant_name})


class _ScoreEdit:
    """Shared hook plumbing: subtract a per-layer edit [H, T, T] from the scores after the capture has read them."""

    label: str
    layers: tuple[int, ...] | None

    def _seq_len(self) -> int:
        raise NotImplementedError

    def _n_layers(self) -> int:
        raise NotImplementedError

    def hooks(self, model: Any, tokens: torch.Tensor) -> list[tuple[str, Any]]:
        """No hooks before the capture: the edit runs after it (:meth:`hooks_after_capture`).

        Args:
            model: The loaded model.
            tokens: The batch's token ids.

        Returns:
            ``[]``.

        Example:
            >>> fit = RelativizationFit("all", np.zeros((1, 1, 5, 5)), np.zeros((1, 1, 5)), 5, 32, (None,), {})
            >>> Relativization(fit).hooks(None, torch.zeros(1, 5))
            []
        """
        return []

    def hooks_after_capture(self, model: Any, tokens: torch.Tensor) -> list[tuple[str, Any]]:
        """One hook per edited layer on its scores, added after the capture's hooks.

        Args:
            model: The loaded model.
            tokens: The batch's token ids, [batch, T]; T must be the calibrated length.

        Returns:
            ``[(hook name, hook function)]``.

        Raises:
            InputError: When the model's layers or the sequences' length differ from the fit's.

        Example:
            >>> fit = RelativizationFit("all", np.zeros((2, 1, 5, 5)), np.zeros((2, 1, 5)), 5, 32, (None, None), {})
            >>> class Two: n_layers = 2
            >>> [name for name, _ in Relativization(fit).hooks_after_capture(Two(), torch.zeros(1, 5))]
            ['blocks.0.attn.hook_attn_scores', 'blocks.1.attn.hook_attn_scores']
        """
        if model.n_layers != self._n_layers():
            raise InputError(f"{self.label} was calibrated on a model of {self._n_layers()} layers, not {model.n_layers}")
        if tokens.shape[-1] != self._seq_len():
            raise InputError(f"{self.label} was calibrated for sequences of {self._seq_len()} tokens; "
                             f"these have {tokens.shape[-1]}: calibrate on a corpus of the measured length")
        layers = range(self._n_layers()) if self.layers is None else self.layers
        return [(hook_names.attn_scores(layer), self._hook(layer)) for layer in layers]

    def _hook(self, layer: int):
        cache: dict[tuple[Any, Any], torch.Tensor] = {}

        def hook(scores: torch.Tensor, hook: Any) -> torch.Tensor:
            key = (scores.device, scores.dtype)
            if key not in cache:
                cache[key] = self._edit_on(layer, scores.device, scores.dtype)
            _check_length(self._seq_len(), scores, self.label)
            return scores - cache[key][None]
        return hook

    def _edit_on(self, layer: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
        raise NotImplementedError


@dataclass
class Relativization(_ScoreEdit):
    """The intervention that relativizes the chosen layers with a calibrated fit (methodology §11).

    Its hooks subtract each layer's edit from the scores **after** the capture has
    read them, so in ``poslens.measure`` layer l's figures are those of the model
    with the edited layers below l, and its own scores unedited.

    Attributes:
        fit: The calibrated fit (:func:`calibrate`); its mode says what is subtracted.
        layers: The layers to edit (default: all).

    Example:
        >>> fit = RelativizationFit("key0", np.zeros((1, 1, 5, 5)), np.zeros((1, 1, 5)), 5, 32, (None,), {"n_seqs": 8})
        >>> iv = Relativization(fit)
        >>> iv.label, iv.describe()["intervention"]
        ('relativize:key0', 'relativization')
    """

    fit: RelativizationFit
    layers: tuple[int, ...] | None = None

    @property
    def label(self) -> str:  # type: ignore[override]
        """The table's ``intervention`` column: ``relativize:<mode>``, with the layers when not all.

        Example:
            >>> fit = RelativizationFit("all", np.zeros((3, 1, 5, 5)), np.zeros((3, 1, 5)), 5, 32, (None,) * 3, {})
            >>> Relativization(fit).label, Relativization(fit, layers=(0, 2)).label
            ('relativize:all', 'relativize:all@0,2')
        """
        where = "" if self.layers is None else "@" + ",".join(str(layer) for layer in self.layers)
        return f"relativize:{self.fit.mode}{where}"

    def describe(self) -> dict[str, Any]:
        """The settings recorded in a result's metadata: mode, layers, T and the calibration corpus.

        Returns:
            ``intervention`` (``"relativization"``), ``layers`` and the fit's :meth:`RelativizationFit.describe`.

        Example:
            >>> fit = RelativizationFit("all", np.zeros((1, 1, 5, 5)), np.zeros((1, 1, 5)), 5, 32, (None,), {"seed": 1})
            >>> Relativization(fit).describe()["calibration"]
            {'seed': 1}
        """
        return {"intervention": "relativization", "layers": None if self.layers is None else list(self.layers),
                **self.fit.describe()}

    def _seq_len(self) -> int:
        return self.fit.seq_len

    def _n_layers(self) -> int:
        return self.fit.n_layers

    def _edit_on(self, layer: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
        return _edit(self.fit.structure(layer), self.fit.terms(layer), device, dtype)


@dataclass
class RelativePlacebo(_ScoreEdit):
    """A purely relative edit of the same size as a fit's: the placebo for the cost to the model.

    Each layer and head gets a seeded random kernel r(i − j) over its visible
    offsets, scaled so that its sum of squares over one sequence's visible pairs
    equals that of the fit's edit for that head. It carries no absolute position,
    so any loss it costs is the cost of moving the logits that far.

    Attributes:
        fit: The fit whose edit's norm is matched.
        seed: The seed of the kernels.
        layers: The layers to edit (default: all).

    Example:
        >>> fit = RelativizationFit("all", np.ones((1, 2, 5, 5)), np.zeros((1, 2, 5)), 5, 32, (None,), {})
        >>> placebo = RelativePlacebo(fit, seed=0)
        >>> e, target = placebo.edit(0), edit_tensor(fit, 0)
        >>> bool(torch.allclose((e ** 2).sum((-2, -1)), (target ** 2).sum((-2, -1)))), placebo.label
        (True, 'placebo:all')
    """

    fit: RelativizationFit
    seed: int = 0
    layers: tuple[int, ...] | None = None

    @property
    def label(self) -> str:  # type: ignore[override]
        """``placebo:<mode of the matched fit>``.

        Example:
            >>> fit = RelativizationFit("key0", np.zeros((1, 1, 5, 5)), np.zeros((1, 1, 5)), 5, 32, (None,), {})
            >>> RelativePlacebo(fit).label
            'placebo:key0'
        """
        return f"placebo:{self.fit.mode}"

    def describe(self) -> dict[str, Any]:
        """The settings recorded in a result's metadata.

        Returns:
            ``intervention`` (``"relative-placebo"``), ``seed``, ``layers`` and the matched fit's description.

        Example:
            >>> fit = RelativizationFit("all", np.zeros((1, 1, 5, 5)), np.zeros((1, 1, 5)), 5, 32, (None,), {})
            >>> RelativePlacebo(fit, seed=3).describe()["seed"]
            3
        """
        return {"intervention": "relative-placebo", "seed": self.seed,
                "layers": None if self.layers is None else list(self.layers), "matched": self.fit.describe()}

    def edit(self, layer: int) -> torch.Tensor:
        """The placebo's edit of ``layer``, [H, T, T] float64 on the CPU.

        Args:
            layer: The layer.

        Returns:
            r(i − j) on the visible pairs of rows i ≥ 1, 0 elsewhere, per head.

        Example:
            >>> fit = RelativizationFit("all", np.ones((1, 1, 5, 5)), np.zeros((1, 1, 5)), 5, 32, (None,), {})
            >>> e = RelativePlacebo(fit).edit(0)[0]
            >>> bool(e[2, 1] == e[3, 2] == e[4, 3])   # the same value at every pair of one offset
            True
        """
        st = self.fit.structure(layer)
        target = edit_tensor(self.fit, layer)
        visible, offset, _ = _visible_index(st, torch.device("cpu"))
        generator = torch.Generator().manual_seed(self.seed * 100_003 + layer)
        kernel = torch.randn(target.shape[0], st.n_offsets, generator=generator, dtype=torch.float64)
        e = torch.where(visible, kernel[:, offset], 0.0)
        norm = (e ** 2).sum((-2, -1)).sqrt()
        wanted = (target ** 2).sum((-2, -1)).sqrt()
        return e * (wanted / norm.clamp_min(1e-300))[:, None, None]

    def _seq_len(self) -> int:
        return self.fit.seq_len

    def _n_layers(self) -> int:
        return self.fit.n_layers

    def _edit_on(self, layer: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
        return self.edit(layer).to(device=device, dtype=dtype)

