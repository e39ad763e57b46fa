"""Figures with their group replicates, kept so that two runs of the same tokens can be compared pairwise.

A :class:`Figures` holds, for one run, a table of figure keys (metric, layer,
query window, query bin) with each figure's estimate and its G group
replicates: the leave-one-group-out estimates for an in-sample figure
(``method="jackknife"``), the per-fold values for a held-out one
(``method="fold"``). :meth:`Figures.minus` pairs two runs of the same corpus
and groups figure by figure, replicate by replicate, so the content shared
by the two runs cancels in the difference's interval; :meth:`Figures.frame`
turns either into rows with 95% intervals (delete-one-group jackknife, or the
folds' spread: :mod:`poslens.fit.stats`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from jaxtyping import Float

from poslens.fit.bounds import clip_interval
from poslens.fit.stats import fold_interval, jackknife_interval

__all__ = ["KEY_COLUMNS", "Figures"]

#: The columns that identify a figure.
KEY_COLUMNS = ["metric", "layer", "query_window", "query_bin"]


@dataclass
class Figures:
    """Estimates and group replicates of a run's figures.

    Attributes:
        keys: One row per figure, the columns of :data:`KEY_COLUMNS` (and any others, carried along).
        estimate: The estimate on all groups (pooled over the folds for a held-out figure), [n].
        replicates: The G replicates of each figure, [n, G].
        method: ``"jackknife"`` or ``"fold"`` per figure, [n].
        difference: Whether the figures are differences of two runs (:meth:`minus`): a level's interval is kept
            inside its metric's hard bound (:func:`~poslens.fit.bounds.clip_interval`), a difference's is not.

    Example:
        >>> keys = pd.DataFrame({"metric": ["m"], "layer": [0], "query_window": ["all"], "query_bin": [-1]})
        >>> a = Figures(keys, np.array([1.0]), np.array([[1.0, 1.1, 0.9, 1.0]]), np.array(["jackknife"]))
        >>> b = Figures(keys, np.array([0.5]), np.array([[0.5, 0.6, 0.4, 0.5]]), np.array(["jackknife"]))
        >>> a.minus(b).frame()[["value", "ci_low", "ci_high"]].round(6).values.tolist()   # the shared noise cancels
        [[0.5, 0.5, 0.5]]
    """

    keys: pd.DataFrame
    estimate: Float[np.ndarray, " figures"]
    replicates: Float[np.ndarray, "figures groups"]
    method: np.ndarray
    difference: bool = False

    def __post_init__(self) -> None:
        self.keys = self.keys.reset_index(drop=True)
        n = len(self.keys)
        if self.estimate.shape != (n,) or self.replicates.shape[0] != n or self.method.shape != (n,):
            raise ValueError(f"{n} keys but estimates {self.estimate.shape}, replicates {self.replicates.shape}, methods {self.method.shape}")

    @classmethod
    def concat(cls, parts: list[Figures]) -> Figures:
        """Join figures of one run.

        Args:
            parts: Figures with the same number of groups.

        Returns:
            All their figures, in order.

        Raises:
            ValueError: When levels and differences are mixed.

        Example:
            >>> keys = pd.DataFrame({"metric": ["m"], "layer": [0], "query_window": ["all"], "query_bin": [-1]})
            >>> one = Figures(keys, np.zeros(1), np.zeros((1, 2)), np.array(["fold"]))
            >>> len(Figures.concat([one, one]).keys)
            2
        """
        if len({p.difference for p in parts}) > 1:
            raise ValueError("levels and differences cannot be joined into one set of figures")
        return cls(
            pd.concat([p.keys for p in parts], ignore_index=True),
            np.concatenate([p.estimate for p in parts]),
            np.concatenate([p.replicates for p in parts]),
            np.concatenate([p.method for p in parts]),
            difference=parts[0].difference,
        )

    def minus(self, other: Figures) -> Figures:
        """Figure-by-figure difference self − other, replicate by replicate (the paired comparison).

        Args:
            other: The reference run's figures: the same keys in the same order, the same groups.

        Returns:
            The differences.

        Raises:
            ValueError: When the keys or the number of groups differ.

        Example:
            >>> keys = pd.DataFrame({"metric": ["m"], "layer": [0], "query_window": ["all"], "query_bin": [-1]})
            >>> a = Figures(keys, np.array([2.0]), np.array([[2.0, 2.0]]), np.array(["fold"]))
            >>> float(a.minus(a).estimate[0])
            0.0
        """
        if not self.keys[KEY_COLUMNS].equals(other.keys[KEY_COLUMNS]) or self.replicates.shape != other.replicates.shape:
            raise ValueError("two runs can be paired only figure by figure: their keys or groups differ")
        if not np.array_equal(self.method, other.method):
            raise ValueError("paired figures must have the same interval method")
        return Figures(self.keys.copy(), self.estimate - other.estimate, self.replicates - other.replicates, self.method.copy(), difference=True)

    def frame(self) -> pd.DataFrame:
        """The figures as rows: the keys, then value, ci_low and ci_high (95%).

        Returns:
            The table.

        Example:
            >>> keys = pd.DataFrame({"metric": ["m"], "layer": [0], "query_window": ["all"], "query_bin": [-1]})
            >>> Figures(keys, np.array([0.5]), np.array([[0.4, 0.5, 0.6]]), np.array(["fold"])).frame()["ci_high"].round(3).tolist()
            [0.748]
        """
        low = np.full(len(self.estimate), np.nan)
        high = low.copy()
        for method, interval in (("jackknife", jackknife_interval), ("fold", fold_interval)):
            chosen = self.method == method
            if chosen.any():
                low[chosen], high[chosen] = interval(self.estimate[chosen], self.replicates[chosen].T)
        if not self.difference:
            for metric in set(self.keys["metric"]):
                rows = (self.keys["metric"] == metric).to_numpy()
                low[rows], high[rows] = clip_interval(metric, self.estimate[rows], low[rows], high[rows])
        out = self.keys.copy()
        out["value"], out["ci_low"], out["ci_high"] = self.estimate, low, high
        return out
