"""Per-group sufficient statistics: the only thing a measurement keeps of the forward pass.

:class:`SumFields` holds every statistic as a named float64 array. In
:attr:`CellSums.per_group` each array has the group axis first and is a plain
sum over (sequence, query, key) pairs, so sums from batches, groups and
processes add; :meth:`CellSums.pooled`, :meth:`CellSums.leave_out`,
:meth:`CellSums.leave_out_groups` and :meth:`CellSums.group` return the same
type without the group axis. Cells are indexed ``[query_bin, offset_bin]``.
Shapes (G groups, L layers, H heads, C query bins, B offset bins, F = 4 row
features, W = 2 query windows, D = 4H + 1 probe features, T positions):

=========================== ================== ==========================================================
field                       shape              sum over pairs (or rows) of
=========================== ================== ==========================================================
pair_count                  G, L, C, B         1 (pair count; structural)
count_term                  G, L, C, B         count term c_i = log|V_i|
logit                       G, L, H, C, B      logit s_ij
log_partition               G, L, H, C, B      log Z_i
query_pair_count            G, L, C            1, per query bin
count_term_sq               G, L, C            c_i²
logit_sq                    G, L, H, C         s_ij²
log_partition_sq            G, L, H, C         (log Z_i)²
logit_x_log_partition       G, L, H, C         s_ij · log Z_i
logit_x_query_position      G, L, H, C         s_ij · i
logit_x_key_position        G, L, H, C         s_ij · j
query_position              G, L, C            i
key_position                G, L, C            j
query_position_sq           G, L, C            i²
key_position_sq             G, L, C            j²
query_x_key_position        G, L, C            i · j
query_row_count             G, C               1 per query row (not per pair)
features                    G, L, H, F, C      row features a_i0, entropy, a_ii, max_j a_ij
probe_gram                  G, L, W, D, D      x̃ x̃ᵀ of the probe design x̃ = [1, features of all heads]
probe_design_x_target       G, L, W, D         x̃ · y of the probe target y = log(i + 1)
probe_target                G, L, W            y
probe_target_sq             G, L, W            y²
probe_row_count             G, L, W            1 per probe row
sequence_count              G                  1 per sequence
logit_by_row                G, L, H, T         Σ_{j∈V_i} s_ij per exact row i (methodology §4.3)
key0_logit_by_row           G, L, H, T         s_i0 per exact row (0 where key 0 is not visible)
logit_by_offset_all         G, L, H, T         s_{i,i−Δ} per exact offset Δ, rows 1 ≤ i < T
logit_by_offset_early       G, L, H, Q         the same over the early rows 1 ≤ i < Q (Q capped at T)
=========================== ================== ==========================================================

The per-sequence counterfactual's cells are fitted values, not sums (each
group's use the absolute component fitted on the other groups): they live in
:class:`poslens.fit.counterfactual_cells.CounterfactualCells`, which
:attr:`CellSums.counterfactual_cells` carries beside the sums and
:func:`poslens.fit.sums_files.save_sums` writes into the same file.

Longer than 400 lines because it is one table of data: the 35 statistics are
listed three times side by side (the table above, :class:`SumFields`'s fields
and :func:`array_shapes`), and a new statistic is added to all three at once;
the saved-file format is :mod:`poslens.fit.sums_files`, the byte counts
:mod:`poslens.fit.sums_sizes`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, fields

import numpy as np
from jaxtyping import Float

from poslens.fit.binning import Binning
from poslens.fit.counterfactual_cells import CounterfactualCells

FEATURES = ("key0_mass", "entropy", "self_mass", "max_mass")
QUERY_WINDOWS = ("early", "all")


@dataclass
class SumFields:
    """One set of every statistic of the table above, each a named array.

    With the group axis first (``*groups`` = G) in :attr:`CellSums.per_group`;
    without it (``*groups`` empty) once pooled or reduced.

    Attributes:
        pair_count: Sum of 1 (pair count; structural). Shape (G, L, C, B).
        count_term: Sum of count term c_i = log|V_i|. Shape (G, L, C, B).
        logit: Sum of logit s_ij. Shape (G, L, H, C, B).
        log_partition: Sum of log Z_i. Shape (G, L, H, C, B).
        query_pair_count: Sum of 1, per query bin. Shape (G, L, C).
        count_term_sq: Sum of c_i². Shape (G, L, C).
        logit_sq: Sum of s_ij². Shape (G, L, H, C).
        log_partition_sq: Sum of (log Z_i)². Shape (G, L, H, C).
        logit_x_log_partition: Sum of s_ij · log Z_i. Shape (G, L, H, C).
        logit_x_query_position: Sum of s_ij · i. Shape (G, L, H, C).
        logit_x_key_position: Sum of s_ij · j. Shape (G, L, H, C).
        query_position: Sum of i. Shape (G, L, C).
        key_position: Sum of j. Shape (G, L, C).
        query_position_sq: Sum of i². Shape (G, L, C).
        key_position_sq: Sum of j². Shape (G, L, C).
        query_x_key_position: Sum of i · j. Shape (G, L, C).
        query_row_count: Sum of 1 per query row (not per pair). Shape (G, C).
        features: Sum of row features a_i0, entropy, a_ii, max_j a_ij. Shape (G, L, H, F, C).
        probe_gram: Sum of x̃ x̃ᵀ of the probe design x̃ = [1, features of all heads]. Shape (G, L, W, D, D).
        probe_design_x_target: Sum of x̃ · y of the probe target y = log(i + 1). Shape (G, L, W, D).
        probe_target: Sum of y. Shape (G, L, W).
        probe_target_sq: Sum of y². Shape (G, L, W).
        probe_row_count: Sum of 1 per probe row. Shape (G, L, W).
        sequence_count: Sum of 1 per sequence. Shape (G).
        logit_by_row: Sum of Σ_{j∈V_i} s_ij per exact row i (methodology §4.3). Shape (G, L, H, T).
        key0_logit_by_row: Sum of s_i0 per exact row (0 where key 0 is not visible). Shape (G, L, H, T).
        logit_by_offset_all: Sum of s_{i,i−Δ} per exact offset Δ, rows 1 ≤ i < T. Shape (G, L, H, T).
        logit_by_offset_early: Sum of s_{i,i−Δ} per exact offset Δ over the early rows 1 ≤ i < Q (Q capped at T). Shape (G, L, H, Q).

    Example:
        >>> a = SumFields.zeros(groups=2, layers=3, heads=4, binning=Binning(32))
        >>> a.logit.shape   # groups, layers, heads, query bins, offset bins
        (2, 3, 4, 19, 19)
    """

    pair_count: Float[np.ndarray, "*groups layers qbins obins"]
    count_term: Float[np.ndarray, "*groups layers qbins obins"]
    logit: Float[np.ndarray, "*groups layers heads qbins obins"]
    log_partition: Float[np.ndarray, "*groups layers heads qbins obins"]
    query_pair_count: Float[np.ndarray, "*groups layers qbins"]
    count_term_sq: Float[np.ndarray, "*groups layers qbins"]
    logit_sq: Float[np.ndarray, "*groups layers heads qbins"]
    log_partition_sq: Float[np.ndarray, "*groups layers heads qbins"]
    logit_x_log_partition: Float[np.ndarray, "*groups layers heads qbins"]
    logit_x_query_position: Float[np.ndarray, "*groups layers heads qbins"]
    logit_x_key_position: Float[np.ndarray, "*groups layers heads qbins"]
    query_position: Float[np.ndarray, "*groups layers qbins"]
    key_position: Float[np.ndarray, "*groups layers qbins"]
    query_position_sq: Float[np.ndarray, "*groups layers qbins"]
    key_position_sq: Float[np.ndarray, "*groups layers qbins"]
    query_x_key_position: Float[np.ndarray, "*groups layers qbins"]
    query_row_count: Float[np.ndarray, "*groups qbins"]
    features: Float[np.ndarray, "*groups layers heads features qbins"]
    probe_gram: Float[np.ndarray, "*groups layers query_windows probe probe"]
    probe_design_x_target: Float[np.ndarray, "*groups layers query_windows probe"]
    probe_target: Float[np.ndarray, "*groups layers query_windows"]
    probe_target_sq: Float[np.ndarray, "*groups layers query_windows"]
    probe_row_count: Float[np.ndarray, "*groups layers query_windows"]
    sequence_count: Float[np.ndarray, " *groups"]
    logit_by_row: Float[np.ndarray, "*groups layers heads seq"]
    key0_logit_by_row: Float[np.ndarray, "*groups layers heads seq"]
    logit_by_offset_all: Float[np.ndarray, "*groups layers heads seq"]
    logit_by_offset_early: Float[np.ndarray, "*groups layers heads early"]

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """The field names, in the order of the table above.

        Returns:
            The names of all fields.

        Example:
            >>> SumFields.names()[:3]
            ('pair_count', 'count_term', 'logit')
        """
        return tuple(f.name for f in fields(cls))

    @classmethod
    def zeros(cls, groups: int, layers: int, heads: int, binning: Binning) -> SumFields:
        """Zeroed arrays (with the group axis) for every statistic.

        Args:
            groups: Number of groups G (the jackknife's units).
            layers: Number of layers L.
            heads: Number of heads H per layer.
            binning: The query and offset bins, which fix the cell axes.

        Returns:
            Float64 zeros of the shapes :func:`array_shapes` gives.

        Example:
            >>> a = SumFields.zeros(groups=2, layers=3, heads=4, binning=Binning(32))
            >>> a.probe_gram.shape   # groups, layers, query windows, 4 features × 4 heads + 1
            (2, 3, 2, 17, 17)
        """
        return cls(**{name: np.zeros(shape, dtype=np.float64) for name, shape in array_shapes(groups, layers, heads, binning).items()})

    def as_dict(self) -> dict[str, Float[np.ndarray, ...]]:
        """``{field name: array}`` for every field.

        Returns:
            The arrays by field name, in the order of :meth:`names`.

        Example:
            >>> a = SumFields.zeros(groups=2, layers=1, heads=1, binning=Binning(8))
            >>> len(a.as_dict()) == len(SumFields.names())
            True
        """
        return {name: getattr(self, name) for name in self.names()}

    def logit_by_offset(self, query_window: str) -> Float[np.ndarray, "*groups layers heads offsets"]:
        """``logit_by_offset_early`` or ``logit_by_offset_all`` by query window name.

        Args:
            query_window: ``"early"`` or ``"all"``.

        Returns:
            The per-offset logit sums of that query window.

        Example:
            >>> a = SumFields.zeros(groups=2, layers=1, heads=1, binning=Binning(64, early=32))
            >>> a.logit_by_offset("early").shape, a.logit_by_offset("all").shape
            ((2, 1, 1, 32), (2, 1, 1, 64))
        """
        return {"early": self.logit_by_offset_early, "all": self.logit_by_offset_all}[_query_window(query_window)]


def _query_window(query_window: str) -> str:
    if query_window not in QUERY_WINDOWS:
        raise ValueError(f"unknown query window {query_window!r}; choose one of: {', '.join(QUERY_WINDOWS)}")
    return query_window


def array_shapes(groups: int, layers: int, heads: int, binning: Binning) -> dict[str, tuple[int, ...]]:
    """The shape of every statistic in the table above, by :class:`SumFields` field name.

    Args:
        groups: Number of groups G.
        layers: Number of layers L.
        heads: Number of heads H per layer.
        binning: The query and offset bins.

    Returns:
        ``{field name: shape}`` for every :class:`SumFields` field, with the group axis first.

    Example:
        >>> array_shapes(2, 3, 4, Binning(32))["logit"]   # groups, layers, heads, query bins, offset bins
        (2, 3, 4, 19, 19)
    """
    g, l, h, t = groups, layers, heads, binning.seq_len
    c, b, f, w, d = binning.n_query_bins, binning.n_offset_bins, len(FEATURES), len(QUERY_WINDOWS), len(FEATURES) * heads + 1
    q = min(binning.early, t)
    return {
        "pair_count": (g, l, c, b),
        "count_term": (g, l, c, b),
        "logit": (g, l, h, c, b),
        "log_partition": (g, l, h, c, b),
        "query_pair_count": (g, l, c),
        "count_term_sq": (g, l, c),
        "logit_sq": (g, l, h, c),
        "log_partition_sq": (g, l, h, c),
        "logit_x_log_partition": (g, l, h, c),
        "logit_x_query_position": (g, l, h, c),
        "logit_x_key_position": (g, l, h, c),
        "query_position": (g, l, c),
        "key_position": (g, l, c),
        "query_position_sq": (g, l, c),
        "key_position_sq": (g, l, c),
        "query_x_key_position": (g, l, c),
        "query_row_count": (g, c),
        "features": (g, l, h, f, c),
        "probe_gram": (g, l, w, d, d),
        "probe_design_x_target": (g, l, w, d),
        "probe_target": (g, l, w),
        "probe_target_sq": (g, l, w),
        "probe_row_count": (g, l, w),
        "sequence_count": (g,),
        "logit_by_row": (g, l, h, t),
        "key0_logit_by_row": (g, l, h, t),
        "logit_by_offset_all": (g, l, h, t),
        "logit_by_offset_early": (g, l, h, q),
    }


@dataclass
class CellSums:
    """Grouped sums of one measurement, with what is needed to fit them.

    ``per_group`` holds the :class:`SumFields` with the group axis first;
    ``row_features`` [L, H, F, T] holds per-query sums over all sequences (for
    curves); ``row_count`` [T] the number of sequences that contributed;
    ``layer_windows`` the sliding window of each layer (None: full causal), which
    the counterfactual fit of methodology §4.1 needs; ``counterfactual_cells``
    the per-sequence counterfactual's cells (fitted values, kept beside the sums:
    :mod:`poslens.fit.counterfactual_cells`), zero until the replay fills them.

    Attributes:
        binning: The query and offset bins the sums were taken over.
        per_group: The statistics, with the group axis first.
        row_features: Per-query feature sums over all sequences, [L, H, F, T].
        row_count: Number of sequences that contributed to each query position, [T].
        group_sizes: Number of sequences in each group, [G].
        layer_windows: Each layer's sliding window (``None``: full causal); empty when unknown.
        row_sums_route: How the row sums of the per-sequence counterfactual were got (the route), why, and the bytes kept on disk; empty until run.
        counterfactual_cells: The per-sequence counterfactual's cells, per group and per replicate; zeros until run.

    Example:
        >>> sums = CellSums.zeros(groups=2, layers=1, heads=1, binning=Binning(16))
        >>> sums.pooled().logit.shape
        (1, 1, 16, 16)
    """

    binning: Binning
    per_group: SumFields
    row_features: Float[np.ndarray, "layers heads features seq"]
    row_count: Float[np.ndarray, " seq"]
    group_sizes: Float[np.ndarray, " groups"] = field(default_factory=lambda: np.zeros(0))
    layer_windows: tuple[int | None, ...] = ()
    row_sums_route: dict = field(default_factory=dict)  # the route of the per-sequence counterfactual (poslens.runtime.disk), once run
    counterfactual_cells: CounterfactualCells | None = None  # None: zeros of the sums' shape (set in __post_init__)

    def __post_init__(self) -> None:
        if self.counterfactual_cells is None:
            groups, *shape = self.per_group.logit.shape
            self.counterfactual_cells = CounterfactualCells.zeros(QUERY_WINDOWS, groups, tuple(shape))

    @classmethod
    def zeros(cls, groups: int, layers: int, heads: int, binning: Binning, layer_windows: tuple[int | None, ...] | None = None) -> CellSums:
        """Empty sums (all zeros) for ``groups`` groups of a model with ``layers`` × ``heads``.

        Args:
            groups: Number of groups G.
            layers: Number of layers L.
            heads: Number of heads H per layer.
            binning: The query and offset bins.
            layer_windows: Each layer's sliding window (``None``: full causal); default all full causal.

        Returns:
            Zeroed sums, ready for :class:`~poslens.capture.cell_sum_capture.CellSumCapture` to add into.

        Example:
            >>> s = CellSums.zeros(groups=3, layers=2, heads=4, binning=Binning(16))
            >>> s.per_group.logit.shape, s.row_features.shape   # [G, L, H, C, B] and [L, H, F, T]
            ((3, 2, 4, 16, 16), (2, 4, 4, 16))
        """
        return cls(
            binning=binning,
            per_group=SumFields.zeros(groups, layers, heads, binning),
            row_features=np.zeros((layers, heads, len(FEATURES), binning.seq_len)),
            row_count=np.zeros(binning.seq_len),
            group_sizes=np.zeros(groups),
            layer_windows=tuple(layer_windows) if layer_windows is not None else (None,) * layers,
        )

    @property
    def n_groups(self) -> int:
        """Number of groups G (the jackknife's units).

        Example:
            >>> CellSums.zeros(groups=3, layers=2, heads=4, binning=Binning(16)).n_groups
            3
        """
        return int(self.per_group.pair_count.shape[0])

    @property
    def n_layers(self) -> int:
        """Number of layers L.

        Example:
            >>> CellSums.zeros(groups=3, layers=2, heads=4, binning=Binning(16)).n_layers
            2
        """
        return int(self.per_group.pair_count.shape[1])

    @property
    def n_heads(self) -> int:
        """Number of attention heads H per layer.

        Example:
            >>> CellSums.zeros(groups=3, layers=2, heads=4, binning=Binning(16)).n_heads
            4
        """
        return int(self.per_group.logit.shape[2])

    def _reduce_groups(self, take: Callable[[np.ndarray], np.ndarray]) -> SumFields:
        """``take`` (which removes the group axis) applied to every per-group array."""
        return SumFields(**{name: np.asarray(take(array)) for name, array in self.per_group.as_dict().items()})

    def pooled(self) -> SumFields:
        """Sums over all groups (the group axis removed).

        Returns:
            The sums of all groups together, without the group axis.

        Example:
            >>> s = CellSums.zeros(groups=3, layers=1, heads=1, binning=Binning(16))
            >>> s.per_group.pair_count[:, 0, 0, 0] = [1.0, 2.0, 3.0]   # pairs in cell (0, 0) of each group
            >>> float(s.pooled().pair_count[0, 0, 0]), s.pooled().pair_count.shape
            (6.0, (1, 16, 16))
        """
        return self._reduce_groups(lambda a: a.sum(axis=0))

    def leave_out(self, group: int) -> SumFields:
        """Sums over all groups but ``group`` (a jackknife replicate; its counterfactual cells: ``counterfactual_cells.leave_out``).

        Args:
            group: Index of the group to leave out.

        Returns:
            The sums of every other group, without the group axis.

        Example:
            >>> s = CellSums.zeros(groups=3, layers=1, heads=1, binning=Binning(16))
            >>> s.per_group.pair_count[:, 0, 0, 0] = [1.0, 2.0, 3.0]
            >>> float(s.leave_out(1).pair_count[0, 0, 0])   # 1 + 3
            4.0
        """
        return self._without(self.pooled(), group)

    def leave_out_each(self) -> Iterator[SumFields]:
        """:meth:`leave_out` of every group in turn (the jackknife replicates), pooling the groups once for all of them.

        Yields:
            For group 0, 1, …, G − 1 in turn, the sums of every other group.

        Example:
            >>> s = CellSums.zeros(groups=3, layers=1, heads=1, binning=Binning(16))
            >>> s.per_group.pair_count[:, 0, 0, 0] = [1.0, 2.0, 3.0]
            >>> [float(r.pair_count[0, 0, 0]) for r in s.leave_out_each()]
            [5.0, 4.0, 3.0]
        """
        pooled = self.pooled()
        for group in range(self.n_groups):
            yield self._without(pooled, group)

    def _without(self, pooled: SumFields, group: int) -> SumFields:
        """``pooled`` (from :meth:`pooled`) less the sums of ``group``."""
        return SumFields(**{name: np.asarray(total - getattr(self.per_group, name)[group]) for name, total in pooled.as_dict().items()})

    def leave_out_groups(self, groups: set[int]) -> SumFields:
        """Sums over all groups but those in ``groups``.

        Args:
            groups: Indices of the groups to leave out.

        Returns:
            The sums of the remaining groups, without the group axis.

        Example:
            >>> s = CellSums.zeros(groups=3, layers=1, heads=1, binning=Binning(16))
            >>> s.per_group.pair_count[:, 0, 0, 0] = [1.0, 2.0, 3.0]
            >>> float(s.leave_out_groups({0, 2}).pair_count[0, 0, 0])
            2.0
        """
        keep = [g for g in range(self.n_groups) if g not in groups]
        return self._reduce_groups(lambda a: a[keep].sum(axis=0))

    def group(self, group: int) -> SumFields:
        """Sums of one group.

        Args:
            group: Index of the group.

        Returns:
            That group's sums, without the group axis.

        Example:
            >>> s = CellSums.zeros(groups=3, layers=1, heads=1, binning=Binning(16))
            >>> s.per_group.pair_count[:, 0, 0, 0] = [1.0, 2.0, 3.0]
            >>> float(s.group(2).pair_count[0, 0, 0]), s.group(2).pair_count.shape
            (3.0, (1, 16, 16))
        """
        return self._reduce_groups(lambda a: a[group])

    def _cells(self) -> CounterfactualCells:
        assert self.counterfactual_cells is not None, "CellSums.__post_init__ always sets the counterfactual cells"
        return self.counterfactual_cells

    def __add__(self, other: CellSums) -> CellSums:
        if self.binning != other.binning or self.per_group.logit.shape != other.per_group.logit.shape:
            raise ValueError("cannot add sums of different shapes or binnings")
        if self.layer_windows != other.layer_windows:
            raise ValueError(f"cannot add sums of layers with different windows: {self.layer_windows} vs {other.layer_windows}")
        theirs = other.per_group.as_dict()
        return CellSums(
            self.binning,
            SumFields(**{name: array + theirs[name] for name, array in self.per_group.as_dict().items()}),
            self.row_features + other.row_features,
            self.row_count + other.row_count,
            self.group_sizes + other.group_sizes,
            self.layer_windows,
            counterfactual_cells=self._cells() + other._cells(),
        )
