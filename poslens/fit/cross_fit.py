"""The cross-fit of the per-sequence counterfactual (methodology §4.1): each group's absolute component A, fitted once, and its cells.

Each group's A is fitted on the other groups, and each jackknife replicate
refits it without its group too. :func:`cross_fitted_absolute_components` fits
each group once (:class:`CrossFit`, arrays), the replay
(:mod:`poslens.capture.counterfactual_replay`) takes those arrays, and
:func:`counterfactual_cells` turns the replay's Σ log Z' into the
:class:`~poslens.fit.counterfactual_cells.CounterfactualCells` the metrics read.

All arrays are float64 numpy; nothing here touches torch or a model.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from einops import rearrange
from jaxtyping import Float, Int

from poslens.fit.binning import Binning
from poslens.fit.counterfactual import layer_fits, layers_by_structure
from poslens.fit.counterfactual_cells import CounterfactualCells
from poslens.fit.mask_structure import MaskStructure, apply_operator
from poslens.fit.sums import QUERY_WINDOWS, CellSums, SumFields


def per_sequence_cells(
    st: MaskStructure,
    logit_cells: Float[np.ndarray, "*heads cells"],
    absolute: Float[np.ndarray, "*heads cells"],
    n_seqs: float,
    log_partition_rows: Float[np.ndarray, "*heads seq"],
    cells: Int[np.ndarray, " picked"] | None = None,
) -> Float[np.ndarray, "*heads cells"]:
    """Cell sums of the per-sequence log a'(n) = s − A − log Z'(n) over ``n_seqs`` sequences, [..., C·B].

    ``logit_cells``: cell sums of s; ``absolute``: A [..., C·B] (per pair);
    ``log_partition_rows``: Σ_n log Z'_i(n) per row [..., rows] from the replay.
    With ``cells``, only those cells are formed: ``logit_cells`` and ``absolute`` then hold
    those cells only, and so does the result (each cell the same number as without ``cells``).

    Args:
        st: The structure of the layer and query window.
        logit_cells: Cell sums of s, [..., C·B] (or [..., len(cells)]).
        absolute: The absolute component A of every cell, [..., C·B] (or [..., len(cells)]).
        n_seqs: Number of sequences the sums are over.
        log_partition_rows: Σ_n log Z'_i(n) of each row, [..., rows].
        cells: Flat indices of the cells to form; default all.

    Returns:
        The cell sums of the per-sequence log a'(n), [..., C·B] (or [..., len(cells)]).

    Example:
        >>> from poslens.fit.mask_structure import structure
        >>> st = structure(Binning(4), rows=4, sliding_window=None)
        >>> cells = per_sequence_cells(st, np.zeros(st.pair_cells.shape), np.zeros(st.pair_cells.shape), 1.0,
        ...                            np.log([1.0, 2.0, 3.0, 4.0]))
        >>> round(float(cells.sum()), 6) == round(-float(2 * np.log(2) + 3 * np.log(3) + 4 * np.log(4)), 6)
        True
        >>> some = np.array([0, 2])   # two cells only: the same numbers as those cells of all
        >>> part = per_sequence_cells(st, np.zeros(2), np.zeros(2), 1.0, np.log([1.0, 2.0, 3.0, 4.0]), cells=some)
        >>> bool(np.array_equal(part, cells[some]))
        True
    """
    pair_cells, to_cells = (st.pair_cells, st.to_cells) if cells is None else (st.pair_cells[cells], st.to_cells[cells])
    return logit_cells - n_seqs * pair_cells * absolute - apply_operator(to_cells, log_partition_rows[..., : st.rows])


def absolute_component(
    p: SumFields, binning: Binning, layer_windows: tuple[int | None, ...], query_window: str, per_sequence: bool = True
) -> Float[np.ndarray, "layers heads cells"]:
    """The absolute component A per cell of every head, fitted on ``p``, [L, H, C·B] (0 outside the query window).

    The fit is linear in the sums, so with ``per_sequence=False`` this returns
    N·A in units of the sums: those of several groups add up, and dividing by
    their sequence count gives A fitted on all of them (how
    :func:`cross_fitted_absolute_components` gets every variant from one fit per group).

    Args:
        p: Pooled sums to fit on (no group axis).
        binning: The query and offset bins of the measurement.
        layer_windows: Each layer's sliding window (``None``: full causal).
        query_window: ``"early"`` or ``"all"``.
        per_sequence: Whether to return A (default) or N·A in units of the sums.

    Returns:
        A (or N·A) of every cell of every head, [L, H, C·B].

    Example:
        >>> absolute_component(sums.leave_out(0), sums.binning, sums.layer_windows, "all").shape  # doctest: +SKIP
        (3, 4, 361)
    """
    n_layers, n_heads = p.logit_by_row.shape[:2]
    out = np.zeros((n_layers, n_heads, binning.n_query_bins * binning.n_offset_bins))
    n_seqs = float(np.sum(p.sequence_count)) if per_sequence else 1.0
    logit_cells = rearrange(p.logit, "layer head qbin obin -> layer head (qbin obin)")
    for layers, fit in layer_fits(p, binning, layer_windows, query_window, n_seqs):
        out[layers] = fit.absolute_component_cells(logit_cells[layers], n_seqs)
    return out


KEPT_VARIANTS_BYTES = 64 * 2**20
"""The most that :meth:`CrossFit.variants` keeps of the groups' variants (all layers), so that the replay and the
counterfactual's cells, which both ask for every group's, form each once; above it they are formed at each call."""


@dataclass(frozen=True, eq=False)
class CrossFit:
    """Each group's fit of the absolute component, from which every cross-fitted A of the per-sequence counterfactual follows.

    The fit is linear in the sums, so one fit per group and query window (in units of
    the group's sums) gives them all by addition: for the sequences of group g,
    variant v = g is A^(−g), fitted without group g (the estimate's), and
    variant v ≠ g is A^(−g,−v), fitted without groups g and v (the jackknife
    replicate that deletes v refits A too). With two groups nothing is left to
    refit on, so the replicate keeps A^(−g). :meth:`variants` forms a group's G
    variants from these arrays (sums only, no fitting); a group's variants of every
    layer are kept (read-only) while all groups' together take at most
    :data:`KEPT_VARIANTS_BYTES`, since G² of them would take G times the memory of the fits.

    Attributes:
        fits: ``{query_window: [G, L, H, C·B]}``: group g's N_g·A_g, fitted on its own sums.
        total: ``{query_window: [L, H, C·B]}``: the sum of ``fits`` over the groups.
        sequence_count: Sequences per group N_g, [G].

    Example:
        >>> one = {"all": np.ones((3, 1, 1, 2))}
        >>> cross = CrossFit(one, {"all": one["all"].sum(axis=0)}, np.array([1.0, 1.0, 2.0]))
        >>> cross.variants(0)["all"][:, 0, 0, 0].tolist()   # v = 0: (1 + 1)/(1 + 2); v ≠ 0: 1/2, 1/1
        [0.6666666666666666, 0.5, 1.0]
    """

    fits: dict[str, Float[np.ndarray, "groups layers heads cells"]]
    total: dict[str, Float[np.ndarray, "layers heads cells"]]
    sequence_count: Float[np.ndarray, " groups"]
    _kept: dict[int, dict[str, np.ndarray]] = field(default_factory=dict, repr=False)

    @property
    def n_groups(self) -> int:
        """Number of groups G.

        Example:
            >>> CrossFit({"all": np.zeros((3, 1, 1, 2))}, {"all": np.zeros((1, 1, 2))}, np.ones(3)).n_groups
            3
        """
        return len(self.sequence_count)

    def variants(self, group: int, layer: int | None = None) -> dict[str, Float[np.ndarray, "variants *layers heads cells"]]:
        """The absolute components the sequences of ``group`` remove, ``{query_window: [G, L, H, C·B]}`` (variant first).

        Args:
            group: The group g whose sequences are renormalized.
            layer: One layer only (its arrays are [G, H, C·B], the same numbers as that layer's of all layers);
                default every layer.

        Returns:
            Per query window, variant v = g: A^(−g); variant v ≠ g: A^(−g,−v) (A^(−g) again with two groups).
            Every layer's arrays may be the kept, read-only ones (see :class:`CrossFit`).

        Example:
            >>> cross = CrossFit({"all": np.ones((2, 1, 1, 1))}, {"all": 2 * np.ones((1, 1, 1))}, np.ones(2))
            >>> cross.variants(1)["all"].ravel().tolist()   # two groups: both variants fitted on group 0 alone
            [1.0, 1.0]
            >>> cross.variants(1, layer=0)["all"].shape
            (2, 1, 1)
        """
        if layer is None and group in self._kept:
            return dict(self._kept[group])
        n_groups, n_seqs = self.n_groups, self.sequence_count
        at = slice(None) if layer is None else layer
        # what each variant drops: groups g and v (g alone for v = g, and always with two groups), as sums
        dropped_count = n_seqs[group] + n_seqs if n_groups > 2 else np.full(n_groups, n_seqs[group])
        dropped_count[group] = n_seqs[group]
        out = {}
        for query_window, fits in self.fits.items():
            fits_at, own = fits[:, at], fits[group, at]
            # in one buffer, the same operations as (total − dropped) / count: fresh arrays of G times a group's
            # fits cost more in page faults than in arithmetic
            buffer = np.add(own[None], fits_at) if n_groups > 2 else np.broadcast_to(own, fits_at.shape).copy()
            buffer[group] = own  # dropped
            np.subtract(self.total[query_window][at][None], buffer, out=buffer)  # kept
            out[query_window] = np.divide(buffer, (n_seqs.sum() - dropped_count).reshape(-1, *[1] * own.ndim), out=buffer)
        if layer is None and (len(self._kept) + 1) * sum(x.nbytes for x in out.values()) <= KEPT_VARIANTS_BYTES:
            for x in out.values():
                x.setflags(write=False)  # shared by every caller from now on
            self._kept[group] = dict(out)
        return out


def cross_fitted_absolute_components(sums: CellSums) -> CrossFit:
    """Fit the absolute component of every group once, per query window: the arrays every cross-fitted A comes from.

    Args:
        sums: The grouped first-pass sums.

    Returns:
        The :class:`CrossFit`; :meth:`CrossFit.variants` gives A for the sequences of each group.

    Example:
        >>> cross = cross_fitted_absolute_components(sums)  # doctest: +SKIP
        >>> cross.variants(0)["all"].shape[0] == sums.n_groups  # doctest: +SKIP
        True
    """
    fits = {
        query_window: np.stack(
            [absolute_component(sums.group(g), sums.binning, sums.layer_windows, query_window, per_sequence=False) for g in range(sums.n_groups)]
        )
        for query_window in QUERY_WINDOWS
    }
    total = {query_window: x.sum(axis=0) for query_window, x in fits.items()}
    return CrossFit(fits, total, np.asarray(sums.per_group.sequence_count, dtype=np.float64))


def group_counterfactual_cells(
    group_sums: SumFields,
    binning: Binning,
    layer_windows: tuple[int | None, ...],
    query_window: str,
    absolute: Float[np.ndarray, "*variants layers heads cells"],
    log_partition: Float[np.ndarray, "*variants layers heads rows"],
) -> Float[np.ndarray, "*variants layers heads qbins obins"]:
    """Cell sums of the per-sequence log a'(n) of one group, [..., L, H, C, B], from its first-pass sums,
    the absolute component A it removed ([..., L, H, C·B]) and its Σ_n log Z'_i(n) from the replay ([..., L, H, rows]).

    Leading axes (several variants of A at once) give the same numbers as one call per variant.

    Args:
        group_sums: The group's first-pass sums (no group axis).
        binning: The query and offset bins of the measurement.
        layer_windows: Each layer's sliding window (``None``: full causal).
        query_window: ``"early"`` or ``"all"``.
        absolute: The cross-fitted absolute component A removed from the group, [..., L, H, C·B].
        log_partition: The group's Σ_n log Z'_i(n) from the replay, [..., L, H, rows].

    Returns:
        The cell sums of the group's per-sequence log a'(n), [..., L, H, C, B].

    Example:
        >>> group_counterfactual_cells(sums.group(0), sums.binning, sums.layer_windows, "all", a[0], log_z[0])  # doctest: +SKIP
    """
    n_layers, n_heads = group_sums.logit_by_row.shape[:2]
    n_seqs = float(np.sum(group_sums.sequence_count))
    logit_cells = rearrange(group_sums.logit, "layer head qbin obin -> layer head (qbin obin)")
    lead = absolute.shape[:-3]
    out = np.zeros((*lead, n_layers, n_heads, binning.n_query_bins * binning.n_offset_bins))
    for st, layers in layers_by_structure(binning, layer_windows, query_window):
        held = np.flatnonzero(st.pair_cells > 0)  # only the cells that hold pairs: the others are 0
        at = np.asarray(layers)
        picked = absolute[..., at, :, :][..., held]
        logits = np.broadcast_to(logit_cells[at][..., held], picked.shape)  # the same for every variant
        cells = per_sequence_cells(st, logits, picked, n_seqs, log_partition[..., at, :, :], cells=held)
        where: tuple[Any, ...] = (Ellipsis, *np.ix_(at, np.arange(n_heads), held))
        out[where] = cells
    return out.reshape(*lead, n_layers, n_heads, binning.n_query_bins, binning.n_offset_bins)


#: At most this many bytes of one group's counterfactual cells are formed at once (several variants together).
CELLS_CHUNK_BYTES = 32 * 2**20


def counterfactual_cells(
    sums: CellSums, cross_fit: CrossFit, log_partition: dict[str, Float[np.ndarray, "groups variants layers heads rows"]]
) -> CounterfactualCells:
    """The per-sequence counterfactual's cells of every group and every jackknife replicate, from a finished replay.

    Group g's cells remove variant g of its A (:meth:`CrossFit.variants`);
    replicate v's cells add up, over the groups g ≠ v, those that remove variant v.

    Args:
        sums: The grouped first-pass sums.
        cross_fit: Each group's fit (:func:`cross_fitted_absolute_components`), the one the replay used.
        log_partition: The replay's Σ_n log Z'_i(n), ``{query_window: [G, G, L, H, rows]}`` (group, variant, …), over all ranks.

    Returns:
        The cells, per group and per replicate.

    Example:
        >>> sums.counterfactual_cells = counterfactual_cells(sums, cross_fit, replay.log_partition)  # doctest: +SKIP
    """
    cells = CounterfactualCells.zeros(QUERY_WINDOWS, sums.n_groups, sums.per_group.logit.shape[1:])
    # several variants per call (as many as CELLS_CHUNK_BYTES allows): the same numbers as one call per variant
    step = max(1, CELLS_CHUNK_BYTES // (8 * int(np.prod(sums.per_group.logit.shape[1:]))))
    for group in range(sums.n_groups):
        absolute = cross_fit.variants(group)
        own = sums.group(group)
        for w in QUERY_WINDOWS:
            for start in range(0, sums.n_groups, step):
                chunk = slice(start, min(start + step, sums.n_groups))
                formed = group_counterfactual_cells(own, sums.binning, sums.layer_windows, w, absolute[w][chunk], log_partition[w][group, chunk])
                for variant, group_cells in zip(range(chunk.start, chunk.stop), formed, strict=True):
                    if variant == group:
                        cells.per_group[w][group] = group_cells
                    else:
                        cells.replicates[w][variant] += group_cells
    return cells
