"""One measurement's in-sample figures and their delete-one-group replicates, fitted once and reused.

:func:`poslens.measure` fits every in-sample figure on all groups and on each
leave-one-group-out replicate to form its jackknife interval
(:func:`poslens.fit.metric_intervals.metrics_with_intervals`). :class:`Replicates`
keeps those fits, so that everything else built on the same measurement reads
them instead of refitting the sums: the reductions and paired differences of
:mod:`poslens.mechanisms.effects`, a comparison's cases
(:mod:`poslens.mechanisms.comparison_cases`) and the cumulative attribution. A
result loaded from disk fits them once, from its sums, on first use
(:meth:`poslens.measurement.result.Result.replicates`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from jaxtyping import Float

from poslens.fit.metrics import all_metrics
from poslens.fit.stats import jackknife_interval
from poslens.fit.sums import CellSums


@dataclass(frozen=True)
class Replicates:
    """The in-sample figures of one measurement on all groups, and without each group in turn.

    Attributes:
        estimate: ``{metric: [query_window, layer + 1, head + 1]}`` fitted on every group.
        replicates: ``{metric: [group, query_window, layer + 1, head + 1]}``; entry g is fitted without group g.

    Example:
        >>> import torch
        >>> from poslens.measurement.pipeline import measure_scores
        >>> t = 16; i, j = torch.arange(t)[:, None], torch.arange(t)[None, :]
        >>> scores = [(-0.1 * (i - j) + 0.01 * i * (j == 0)).float().masked_fill(j > i, torch.finfo(torch.float32).min).expand(4, 1, t, t)] * 3
        >>> fits = Replicates.of(measure_scores(scores, groups=2, early=8, row_sums="second-pass").sums)
        >>> fits.estimate["c_res"].shape, fits.replicates["c_res"].shape, fits.n_groups
        ((2, 4, 2), (2, 2, 4, 2), 2)
    """

    estimate: dict[str, Float[np.ndarray, "query_windows layers_and_mean heads_and_mean"]]
    replicates: dict[str, Float[np.ndarray, "groups query_windows layers_and_mean heads_and_mean"]]

    @classmethod
    def of(cls, sums: CellSums) -> Replicates:
        """Fit every in-sample figure of ``sums`` on all groups and on each leave-one-group-out replicate.

        Each replicate refits P and the mean-field counterfactual's g and β without
        group g, with the per-sequence counterfactual's cells of the same replicate
        (:meth:`~poslens.fit.counterfactual_cells.CounterfactualCells.leave_out`).

        Args:
            sums: Grouped sums of one measurement.

        Returns:
            The fits.

        Example:
            >>> Replicates.of(result.sums).estimate["c_res"][0, -1, -1]   # doctest: +SKIP
        """
        cells = sums.counterfactual_cells
        assert cells is not None, "CellSums.__post_init__ always sets the counterfactual cells"
        estimate = all_metrics(sums.pooled(), cells.pooled(), sums.binning, sums.layer_windows)
        fits = [
            all_metrics(replicate, replicate_cells, sums.binning, sums.layer_windows)
            for replicate, replicate_cells in zip(sums.leave_out_each(), cells.leave_out_each(), strict=False)
        ]
        return cls(estimate=estimate, replicates={name: np.stack([fit[name] for fit in fits]) for name in estimate})

    @property
    def n_groups(self) -> int:
        """The number of groups G: one replicate each."""
        return int(next(iter(self.replicates.values())).shape[0])

    def interval(self, metric: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``metric`` with its delete-one-group jackknife interval.

        Args:
            metric: An in-sample metric (a key of :attr:`estimate`).

        Returns:
            ``(value, ci_low, ci_high)``, each [query_window, layer + 1, head + 1].

        Example:
            >>> value, low, high = fits.interval("c_res")   # doctest: +SKIP
        """
        low, high = jackknife_interval(self.estimate[metric], self.replicates[metric])
        return self.estimate[metric], np.asarray(low), np.asarray(high)

    def paired(
        self, after: Replicates, metric: str, combine: Callable[[np.ndarray, np.ndarray], np.ndarray], window: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``combine(self, after)`` of ``metric`` in query window ``window``, with the paired jackknife's interval.

        Both runs must share their corpus and grouping: replicate g of each leaves out the same sequences,
        so their shared sequence-to-sequence noise cancels in ``combine``.

        Args:
            after: The other run's fits, on the same groups.
            metric: An in-sample metric.
            combine: ``combine(before, after)`` of two [layer + 1, head + 1] arrays (a reduction, a difference).
            window: Index of the query window.

        Returns:
            ``(estimate, ci_low, ci_high)``, each [layer + 1, head + 1].

        Example:
            >>> fits.paired(edited, "c_res", lambda b, a: a - b, window=0)   # doctest: +SKIP
        """
        estimate = combine(self.estimate[metric][window], after.estimate[metric][window])
        replicates = np.stack([combine(b[window], a[window]) for b, a in zip(self.replicates[metric], after.replicates[metric], strict=True)])
        low, high = jackknife_interval(estimate, replicates)
        return estimate, np.asarray(low), np.asarray(high)
