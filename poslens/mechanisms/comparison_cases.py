"""One case of a comparison: its figures refitted from its cell sums, with their delete-one-group replicates, and the pairing check.

Cases are compared pairwise only when measured on the same token ids, groups
and bins (:func:`check_paired`); otherwise :class:`UnpairedCasesError`.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field

import numpy as np

from poslens.errors import InputError, PoslensError
from poslens.measurement.result import Result

#: The figures compared by default.
DEFAULT_METRICS = ("c_res", "c_mask", "leakage_pattern")


class UnpairedCasesError(PoslensError, ValueError):
    """Two cases to be compared pairwise were not measured on the same token ids, groups and bins.

    Example:
        >>> issubclass(UnpairedCasesError, ValueError)
        True
    """


@dataclass
class CaseFigures:
    """One case's figures (mean over heads) and their delete-one-group replicates.

    Attributes:
        model: The model's name.
        variant: The variant (``base``, ``ntk:4``, ``window:64``, …).
        estimate: ``{metric: [query window, layer + 1]}`` from the pooled sums; the last layer entry is the mean over layers ≥ 1.
        replicates: ``{metric: [group, query window, layer + 1]}``, replicate g refitted without group g.
        intervention: The intervention label of the run.
        tokens: The sha256 of the token ids measured (``""`` when unknown).
        group_sizes: The number of sequences in each group.
        seq_len: The sequence length T.
        binning: A description of the bins (sequence length and early query window), for the pairing check.

    Example:
        >>> f = CaseFigures("m", "base", {"c_res": np.zeros((2, 4))}, {"c_res": np.zeros((5, 2, 4))})
        >>> f.n_groups, f.n_layers
        (5, 3)
    """

    model: str
    variant: str
    estimate: dict[str, np.ndarray]
    replicates: dict[str, np.ndarray]
    intervention: str = "none"
    tokens: str = ""
    group_sizes: tuple[float, ...] = ()
    seq_len: int = 0
    binning: tuple[int, ...] = field(default_factory=tuple)

    @property
    def n_groups(self) -> int:
        """The number of groups G (replicates).

        Example:
            >>> CaseFigures("m", "base", {"c_res": np.zeros((2, 4))}, {"c_res": np.zeros((5, 2, 4))}).n_groups
            5
        """
        return int(next(iter(self.replicates.values())).shape[0])

    @property
    def n_layers(self) -> int:
        """The number of layers L.

        Example:
            >>> CaseFigures("m", "base", {"c_res": np.zeros((2, 4))}, {"c_res": np.zeros((5, 2, 4))}).n_layers
            3
        """
        return int(next(iter(self.estimate.values())).shape[-1]) - 1

    @property
    def label(self) -> str:
        """``model/variant``, for messages.

        Example:
            >>> CaseFigures("m", "ntk:2", {}, {}).label
            'm/ntk:2'
        """
        return f"{self.model}/{self.variant}"


def case_figures(result: Result, metrics: tuple[str, ...] = DEFAULT_METRICS) -> CaseFigures:
    """``metrics`` of one measured case, pooled and without each group in turn, from its fits (:meth:`~poslens.measurement.result.Result.replicates`).

    Args:
        result: One case's result, with its cell sums (:func:`poslens.measure` keeps them).
        metrics: Figures refitted from the sums (:func:`poslens.fit.metrics.all_metrics`).

    Returns:
        The case's figures (head mean) and their jackknife replicates.

    Raises:
        InputError: When the result lacks its sums or a metric is not refitted from them.

    Example:
        >>> import torch; from poslens.measurement.pipeline import measure_scores
        >>> t = 16; i, j = torch.arange(t)[:, None], torch.arange(t)[None, :]
        >>> scores = [(-0.1 * (i - j) + 0.01 * i * (j == 0)).float().masked_fill(j > i, torch.finfo(torch.float32).min).expand(4, 1, t, t)] * 3
        >>> f = case_figures(measure_scores(scores, groups=2, early=8, row_sums="second-pass"))
        >>> f.estimate["c_res"].shape, f.replicates["c_res"].shape
        ((2, 4), (2, 2, 4))
    """
    sums = result.sums
    if sums is None:
        raise InputError("a comparison needs each case's cell sums (measure() keeps them; reload a saved result with its .sums.npz)")
    fits = result.replicates()  # the fits measure() made for the table's intervals: not refitted here
    estimate = fits.estimate
    unknown = [m for m in metrics if m not in estimate]
    if unknown:
        close = difflib.get_close_matches(str(unknown[0]), sorted(estimate), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise InputError(f"metric {unknown[0]!r} is not refitted from the cell sums{hint}; comparisons can use: " + ", ".join(sorted(estimate)))
    model, variant, intervention = _identity(result)
    return CaseFigures(
        model=model,
        variant=variant,
        estimate={m: np.asarray(estimate[m][:, :, -1], dtype=float) for m in metrics},
        replicates={m: np.asarray(fits.replicates[m][:, :, :, -1], dtype=float) for m in metrics},
        intervention=intervention,
        tokens=str((result.meta.get("corpus") or {}).get("tokens_sha256", "")),
        group_sizes=tuple(float(x) for x in sums.group_sizes),
        seq_len=int(sums.binning.seq_len),
        binning=(int(sums.binning.seq_len), int(sums.binning.early)),
    )


def _identity(result: Result) -> tuple[str, str, str]:
    model = result.meta.get("model") or {}
    table = result.table
    name = model.get("model") or (str(table["model"].iloc[0]) if len(table) else "?")
    variant = model.get("variant") or (str(table["variant"].iloc[0]) if len(table) else "base")
    intervention = str(table["intervention"].iloc[0]) if len(table) and "intervention" in table else "none"
    return str(name), str(variant or "base"), intervention


def check_paired(a: CaseFigures, b: CaseFigures) -> None:
    """Raise :class:`UnpairedCasesError` unless ``a`` and ``b`` were measured on the same token ids, groups and bins.

    Args:
        a: One case.
        b: The other.

    Raises:
        UnpairedCasesError: Naming what differs.

    Example:
        >>> z = {"c_res": np.zeros((2, 4))}, {"c_res": np.zeros((2, 2, 4))}
        >>> check_paired(CaseFigures("m", "base", *z, tokens="aa"), CaseFigures("m", "ntk:2", *z, tokens="aa"))
        >>> check_paired(CaseFigures("m", "base", *z, tokens="aa"), CaseFigures("m", "ntk:2", *z, tokens="bb"))
        Traceback (most recent call last):
        poslens.mechanisms.comparison_cases.UnpairedCasesError: m/ntk:2 and m/base cannot be compared pairwise: ... different token ids ...
    """
    why = []
    if not a.tokens or not b.tokens:
        why.append("unknown token ids (a result's corpus metadata has no tokens_sha256)")
    elif a.tokens != b.tokens:
        why.append("different token ids (tokens_sha256 differs)")
    if a.n_groups != b.n_groups or tuple(a.group_sizes) != tuple(b.group_sizes):
        why.append(f"different groups ({a.n_groups} groups of {list(a.group_sizes)} vs {b.n_groups} of {list(b.group_sizes)})")
    if a.binning != b.binning:
        why.append(f"different bins (seq_len, early) {a.binning} vs {b.binning}")
    if why:
        raise UnpairedCasesError(
            f"{b.label} and {a.label} cannot be compared pairwise: they were measured on "
            + "; ".join(why)
            + ". Measure every variant of a model on the same corpus (source, seed, n_seqs, seq_len) and groups"
        )


__all__ = ["DEFAULT_METRICS", "CaseFigures", "UnpairedCasesError", "case_figures", "check_paired"]
