"""The per-sequence counterfactual's cell sums (methodology §4.4 (i)): fitted values, kept beside the sums, not among them.

Each group's cells Σ_n log a'_ij(n) use the absolute component A fitted on the
other groups (cross-fitting, :func:`poslens.fit.cross_fit.cross_fitted_absolute_components`),
so they are not sums over pairs that add across groups the way
:class:`poslens.fit.sums.SumFields` do, and a jackknife replicate is not the sum
over the groups it keeps: deleting group g refits A too. :class:`CounterfactualCells`
therefore holds, per query window, both

- ``per_group`` [G, L, H, C, B]: group g's cells with A fitted without g (their sum over groups is the estimate's), and
- ``replicates`` [G, L, H, C, B]: row g, the whole replicate that deletes group g (A refitted without g as well),

and reduces them the way the fits need: :meth:`~CounterfactualCells.pooled`
and :meth:`~CounterfactualCells.leave_out` give ``{query_window: [L, H, C, B]}``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import numpy as np
from jaxtyping import Float

#: Prefixes of the arrays in a saved sums file (:func:`poslens.fit.sums_files.save_sums`): ``cf_<query window>`` and ``cf_<query window>_replicate``.
SAVED_PREFIX = "cf_"
#: The names sums format 1 (poslens 0.1.0) gave the same arrays, among the sums.
OLD_SAVED_PREFIX = "a_counterfactual_"


@dataclass
class CounterfactualCells:
    """The per-sequence counterfactual's cell sums of one measurement, per query window.

    Attributes:
        per_group: ``{query_window: [G, L, H, C, B]}``: group g's Σ_n log a'_ij(n), with A fitted without g.
        replicates: ``{query_window: [G, L, H, C, B]}``: row g, the cells of the replicate that deletes group g, whole.

    Example:
        >>> cells = CounterfactualCells.zeros(("early", "all"), groups=2, shape=(3, 4, 19, 19))
        >>> cells.per_group["all"].shape, cells.pooled()["early"].shape   # groups, layers, heads, query bins, offset bins
        ((2, 3, 4, 19, 19), (3, 4, 19, 19))
    """

    per_group: dict[str, Float[np.ndarray, "groups layers heads qbins obins"]]
    replicates: dict[str, Float[np.ndarray, "groups layers heads qbins obins"]]

    @classmethod
    def zeros(cls, query_windows: tuple[str, ...], groups: int, shape: tuple[int, ...]) -> CounterfactualCells:
        """Zeroed cells for ``groups`` groups, each query window's arrays of shape (``groups``, *``shape``).

        Args:
            query_windows: The query windows, e.g. ``("early", "all")``.
            groups: Number of groups G.
            shape: (L, H, C, B): layers, heads, query bins and offset bins.

        Returns:
            Float64 zeros, per group and per replicate.

        Example:
            >>> CounterfactualCells.zeros(("all",), groups=3, shape=(1, 1, 4, 4)).replicates["all"].shape
            (3, 1, 1, 4, 4)
        """

        def zero() -> dict[str, np.ndarray]:
            return {w: np.zeros((groups, *shape), dtype=np.float64) for w in query_windows}

        return cls(zero(), zero())

    @property
    def n_groups(self) -> int:
        """Number of groups G.

        Example:
            >>> CounterfactualCells.zeros(("all",), groups=3, shape=(1, 1, 4, 4)).n_groups
            3
        """
        return int(next(iter(self.per_group.values())).shape[0])

    def pooled(self) -> dict[str, Float[np.ndarray, "layers heads qbins obins"]]:
        """The estimate's cells, ``{query_window: [L, H, C, B]}``: the sum over the groups of each group's cross-fitted cells.

        Returns:
            The cells of every query window, without the group axis.

        Example:
            >>> cells = CounterfactualCells.zeros(("all",), groups=2, shape=(1, 1, 2, 2))
            >>> cells.per_group["all"][:, 0, 0, 0, 0] = [1.0, 2.0]
            >>> float(cells.pooled()["all"][0, 0, 0, 0])
            3.0
        """
        return {w: x.sum(axis=0) for w, x in self.per_group.items()}

    def leave_out(self, group: int) -> dict[str, Float[np.ndarray, "layers heads qbins obins"]]:
        """The cells of the jackknife replicate that deletes ``group``, ``{query_window: [L, H, C, B]}`` (refitted, taken whole).

        Args:
            group: Index of the deleted group.

        Returns:
            The replicate's cells of every query window (views of :attr:`replicates`, not copies).

        Example:
            >>> cells = CounterfactualCells.zeros(("all",), groups=2, shape=(1, 1, 2, 2))
            >>> cells.leave_out(1)["all"].shape
            (1, 1, 2, 2)
        """
        return {w: x[group] for w, x in self.replicates.items()}

    def leave_out_each(self) -> Iterator[dict[str, Float[np.ndarray, "layers heads qbins obins"]]]:
        """:meth:`leave_out` of every group in turn.

        Yields:
            For group 0, 1, …, G − 1, the cells of the replicate that deletes it.

        Example:
            >>> len(list(CounterfactualCells.zeros(("all",), groups=3, shape=(1, 1, 2, 2)).leave_out_each()))
            3
        """
        for group in range(self.n_groups):
            yield self.leave_out(group)

    def __add__(self, other: CounterfactualCells) -> CounterfactualCells:
        return CounterfactualCells(
            {w: x + other.per_group[w] for w, x in self.per_group.items()}, {w: x + other.replicates[w] for w, x in self.replicates.items()}
        )

    def saved_arrays(self) -> dict[str, Float[np.ndarray, "groups layers heads qbins obins"]]:
        """The arrays :func:`poslens.fit.sums_files.save_sums` writes: ``cf_<query window>`` and ``cf_<query window>_replicate``.

        Returns:
            ``{name in the .npz file: array}``.

        Example:
            >>> sorted(CounterfactualCells.zeros(("early", "all"), groups=2, shape=(1, 1, 2, 2)).saved_arrays())
            ['cf_all', 'cf_all_replicate', 'cf_early', 'cf_early_replicate']
        """
        return {
            **{f"{SAVED_PREFIX}{w}": x for w, x in self.per_group.items()},
            **{f"{SAVED_PREFIX}{w}_replicate": x for w, x in self.replicates.items()},
        }

    @classmethod
    def from_saved(cls, data: Mapping[str, np.ndarray], query_windows: tuple[str, ...]) -> CounterfactualCells | None:
        """The cells in a saved sums file's arrays: this version's ``cf_*`` names, or the ``a_counterfactual_*`` an older one wrote.

        Args:
            data: The arrays of the ``.npz`` file, by name (an open ``np.load``).
            query_windows: The query windows to read.

        Returns:
            The cells, or ``None`` when the file holds neither set of names.

        Example:
            >>> cells = CounterfactualCells.zeros(("all",), groups=2, shape=(1, 1, 2, 2))
            >>> old = {"a_counterfactual_all": cells.per_group["all"], "a_counterfactual_all_replicate": cells.replicates["all"]}
            >>> CounterfactualCells.from_saved(old, ("all",)).n_groups
            2
        """
        names = data.files if hasattr(data, "files") else list(data)
        for prefix in (SAVED_PREFIX, OLD_SAVED_PREFIX):
            wanted = [f"{prefix}{w}{tail}" for w in query_windows for tail in ("", "_replicate")]
            if all(name in names for name in wanted):
                return cls(
                    {w: np.asarray(data[f"{prefix}{w}"]) for w in query_windows},
                    {w: np.asarray(data[f"{prefix}{w}_replicate"]) for w in query_windows},
                )
        return None
