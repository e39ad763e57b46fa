"""The sink path's split as numbers (methodology §13): two readouts of position, the two-factor Shapley split, C8's rule.

**Readouts**, from each run's residual sums (:class:`~poslens.fit.residual_readout.ResidualSums`,
site ``resid``: the residual stream entering each block, rows 1 ≤ i < T, target y = log(i + 1)):

- **V, position along the unedited code.** The ridge probe of y fitted on the *unedited* run's
  residuals of every group but g (θ₀^(−g), :func:`fold_probes`) is applied to the residuals of
  group g's sequences in the run being read; ŷ(i) is the mean of that projection over every
  sequence, V_l the variance over the rows i of ŷ(i) (:func:`code_variance`). V says how much
  of the position signal, as the unedited model writes it, survives an edit. It is unbounded:
  an edit that disturbs the residual stream can raise it.
- **R², position content.** The probe refitted on the run's own residuals of the other groups,
  held-out R² pooled over the folds (:func:`content_r2`): whether position can still be read
  at all, in any direction.

Each readout's figure f is the mean over layers ≥ 2. Its G replicates leave one
group's sequences out of the aggregate (the fold probes stay as fitted), so that
every derived figure is computed inside each replicate and paired across runs.

**The split** (:func:`split_figures`), per readout, from f of the unedited run (0),
of m (the mask's count removed), p (key 0's phase removed), mp (both) and s (the
whole sink path removed):
φ_m = ½[(f₀ − f_m) + (f_p − f_mp)], φ_p = ½[(f₀ − f_p) + (f_m − f_mp)],
interaction = f₀ − f_m − f_p + f_mp, share_m = φ_m/(φ_m + φ_p),
r₁ = (f₀ − f_m)/(f₀ − f_mp), r₂ = (f_p − f_mp)/(f₀ − f_mp),
sink_total = f₀ − f_s, sink_share = (f₀ − f_s)/f₀, coverage = (φ_m + φ_p)/(f₀ − f_s);
beside them each sham's effect f₀ − f_sham and how far each φ exceeds it.

**No share** (:func:`no_share_reason`) where the interval of φ_m + φ_p holds 0, where φ_m and
φ_p have intervals of opposite sign, where share_m's interval leaves [0, 1], or where an edit
raises f above f₀ beyond its interval. **C8** (:func:`c8_verdict`) reads V.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
from jaxtyping import Float

from poslens.fit.residual_readout import ResidualSums, probe_r2, ridge_weights
from poslens.fit.stats import jackknife_interval

__all__ = [
    "EDITS",
    "SHAMS",
    "Figure",
    "c8_verdict",
    "code_variance",
    "content_r2",
    "fold_probes",
    "layer_mean",
    "no_share_reason",
    "split_figures",
    "split_intervals",
]

#: The four edits of the Shapley split, then the whole path's: the unedited run is ``none``.
EDITS = ("m", "p", "mp", "s")
#: Each factor's sham: the same shifts of key 0's logit at rows permuted within each sequence.
SHAMS = {"m": "sham-m", "p": "sham-p"}
#: The readouts' figures average the layers from this one on.
FIRST_LAYER = 2
#: A verdict needs its factor's φ to exceed its sham's effect by this share of φ_m + φ_p.
SHAM_MARGIN = 0.1
#: Rounding, not position: a rise of f smaller than this share of |f₀|, or a share_m this far outside [0, 1], does not
#: make "no share". A float64 model still builds its RoPE tables in float32 in transformers; in the phase-only control
#: that rounding let edit m raise f by 3.5e-7 on f₀ = 0.39 (9e-7 of f₀) with an interval as narrow, which the rule
#: without this margin read as "position added".
NUMERICAL_MARGIN = 1e-5


@dataclass
class Figure:
    """One figure with its G delete-one-group replicates, and its 95% jackknife interval.

    Attributes:
        estimate: The figure on all groups.
        replicates: The figure with each group left out, [G].

    Example:
        >>> f = Figure(1.0, np.array([0.9, 1.0, 1.1, 1.0]))
        >>> [round(v, 3) for v in f.interval()]
        [0.61, 1.39]
    """

    estimate: float
    replicates: Float[np.ndarray, " groups"]

    def interval(self) -> tuple[float, float]:
        """The 95% interval: estimate ± t(G − 1)·se, se² = (G − 1)/G · Σ (replicate − their mean)².

        Returns:
            ``(low, high)``; NaN where the estimate or a replicate is not finite.

        Example:
            >>> Figure(2.0, np.array([2.0, 2.0])).interval()
            (2.0, 2.0)
        """
        if not np.isfinite(self.estimate) or not np.all(np.isfinite(self.replicates)):
            return float("nan"), float("nan")
        low, high = jackknife_interval(np.asarray(self.estimate), self.replicates)
        return float(low), float(high)

    def __sub__(self, other: Figure) -> Figure:
        return Figure(self.estimate - other.estimate, self.replicates - other.replicates)


def _site(sums: ResidualSums, site: int) -> ResidualSums:
    """The sums of one site alone (a view with a site axis of length 1)."""
    pick = slice(site, site + 1)
    return ResidualSums(
        sums.gram[pick],
        sums.design_x_target[pick],
        sums.target,
        sums.target_sq,
        sums.rows,
        sums.position_sum[pick],
        sums.position_rows,
        sums.square_total[pick],
    )


def fold_probes(unedited: ResidualSums, penalty: float, site: int = 0) -> Float[np.ndarray, "groups layers design"]:
    """θ₀^(−g): the ridge probe of log(i + 1) fitted on the unedited run's residuals of every group but g, per layer.

    Args:
        unedited: The unedited run's residual sums.
        penalty: The probe's ridge penalty (:func:`~poslens.fit.residual_readout.ridge_weights`).
        site: The readout site (0: the residual stream entering each block).

    Returns:
        θ = [intercept, weights] per fold and layer, [G, L, D + 1].

    Example:
        >>> fold_probes(ResidualSums.zeros(groups=2, layers=1, width=3, seq_len=4), penalty=0.1).shape
        (2, 1, 4)
    """
    gram, xy = unedited.gram[site], unedited.design_x_target[site]  # [G, L, D+1, D+1], [G, L, D+1]
    n_groups, n_layers = gram.shape[:2]
    total_gram, total_xy = gram.sum(0), xy.sum(0)
    theta = np.zeros((n_groups, n_layers, gram.shape[-1]))
    for g in range(n_groups):
        rows = unedited.rows.sum() - unedited.rows[g]
        if rows < 2:
            theta[g] = np.nan
            continue
        target = unedited.target.sum() - unedited.target[g]
        for layer in range(n_layers):
            theta[g, layer] = ridge_weights(total_gram[layer] - gram[g, layer], total_xy[layer] - xy[g, layer], target, rows, penalty)
    return theta


def _row_variance(projection_sum: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Variance over the rows i ≥ 1 of ŷ(i) = projection_sum[..., i] / rows[i], [..., T] → [...]."""
    mean = projection_sum[..., 1:] / rows[1:]
    return mean.var(axis=-1)


def code_variance(theta: Float[np.ndarray, "groups layers design"], run: ResidualSums, site: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """V per layer: the variance over rows of ŷ(i), the unedited code's fold probes applied to the run's residuals.

    Args:
        theta: The unedited run's fold probes (:func:`fold_probes`).
        run: The residual sums of the run being read (the unedited one included).
        site: The readout site.

    Returns:
        ``(V [L], replicates [G, L])``: on every sequence, and with each group's sequences left out.

    Example:
        >>> sums = ResidualSums.zeros(groups=2, layers=1, width=1, seq_len=3)
        >>> sums.position_sum[0, :, 0, 1:, 0] = [[1.0, 3.0], [1.0, 3.0]]; sums.position_rows[:, 1:] = 1.0
        >>> theta = np.array([[[0.0, 1.0]], [[0.0, 1.0]]])   # ŷ = x
        >>> v, reps = code_variance(theta, sums)
        >>> float(v[0]), reps[:, 0].tolist()   # ŷ(1) = 1, ŷ(2) = 3: variance 1
        (1.0, [1.0, 1.0])
    """
    position_sum = run.position_sum[site]  # [G, L, T, D]
    # Σ over group g's sequences of θ^(−g)·[1, x_i]: the intercept once per sequence at each row
    projected = np.einsum("gltd,gld->glt", position_sum, theta[..., 1:]) + theta[..., :1] * run.position_rows[:, None, :]
    total, rows = projected.sum(0), run.position_rows.sum(0)
    estimate = _row_variance(total, rows)
    replicates = np.stack([_row_variance(total - projected[g], rows - run.position_rows[g]) for g in range(run.n_groups)])
    return estimate, replicates


def content_r2(run: ResidualSums, penalty: float, site: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """R² per layer: the probe refitted on the run's own residuals, held out by group and pooled over the folds.

    Args:
        run: The run's residual sums.
        penalty: The probe's ridge penalty.
        site: The readout site.

    Returns:
        ``(R² [L], replicates [G, L])``: 1 − ΣSSE/ΣSST over every fold, and over every fold but one.

    Example:
        >>> r2, reps = content_r2(ResidualSums.zeros(groups=2, layers=1, width=2, seq_len=4), penalty=0.1)
        >>> r2.shape, reps.shape
        ((1,), (2, 1))
    """
    _, _, sse, sst = probe_r2(_site(run, site), penalty)
    sse, total_sse, total_sst = sse[:, 0], sse[:, 0].sum(0), sst.sum()  # [G, L], [L]
    with np.errstate(divide="ignore", invalid="ignore"):
        estimate = 1 - total_sse / total_sst
        replicates = np.stack([1 - (total_sse - sse[g]) / (total_sst - sst[g]) for g in range(len(sst))])
    return estimate, replicates


def layer_mean(estimate: np.ndarray, replicates: np.ndarray, first: int = FIRST_LAYER) -> Figure:
    """The mean over layers ≥ ``first`` of a per-layer figure, replicate by replicate.

    Args:
        estimate: Per layer, [L].
        replicates: Per group left out and layer, [G, L].
        first: The first layer averaged.

    Returns:
        The :class:`Figure`.

    Example:
        >>> layer_mean(np.array([9.0, 9.0, 1.0, 3.0]), np.ones((2, 4))).estimate
        2.0
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return Figure(float(np.nanmean(estimate[first:])), np.nanmean(replicates[:, first:], axis=1))


def _ratio(numerator: Figure, denominator: Figure) -> Figure:
    with np.errstate(divide="ignore", invalid="ignore"):
        return Figure(float(np.float64(numerator.estimate) / np.float64(denominator.estimate)), numerator.replicates / denominator.replicates)


def split_figures(levels: Mapping[str, Figure]) -> dict[str, Figure]:
    """Every derived figure of the split of one readout, each computed inside each replicate (see the module docstring).

    Args:
        levels: f of ``none``, ``m``, ``p``, ``mp`` and ``s``, and of any of ``sham-m``, ``sham-p``, ``p0-every-head``.

    Returns:
        ``{name: Figure}``: ``phi_m``, ``phi_p``, ``phi_sum`` (φ_m + φ_p), ``interaction``, ``share_m``, ``r1``, ``r2``, ``sink_total``,
        ``sink_share``, ``coverage``; with the shams, ``sham_m_effect``, ``sham_p_effect``, ``phi_m_beyond_sham`` and
        ``phi_p_beyond_sham`` (φ minus its sham's effect minus 0.1·(φ_m + φ_p): above 0 where C8 may use the factor);
        with ``p0-every-head``, ``p0_every_head_change`` (its f minus f₀).

    Example:
        >>> flat = lambda v: Figure(v, np.full(4, v))
        >>> out = split_figures({"none": flat(1.0), "m": flat(0.4), "p": flat(0.9), "mp": flat(0.3), "s": flat(0.2)})
        >>> round(out["phi_m"].estimate, 3), round(out["phi_p"].estimate, 3), round(out["share_m"].estimate, 3)
        (0.6, 0.1, 0.857)
    """
    f0, fm, fp, fmp, fs = (levels[name] for name in ("none", "m", "p", "mp", "s"))
    phi_m = Figure(0.5 * ((f0 - fm).estimate + (fp - fmp).estimate), 0.5 * ((f0 - fm).replicates + (fp - fmp).replicates))
    phi_p = Figure(0.5 * ((f0 - fp).estimate + (fm - fmp).estimate), 0.5 * ((f0 - fp).replicates + (fm - fmp).replicates))
    both = Figure(phi_m.estimate + phi_p.estimate, phi_m.replicates + phi_p.replicates)
    out = {
        "phi_m": phi_m,
        "phi_p": phi_p,
        "phi_sum": both,
        "interaction": (f0 - fm) - (fp - fmp),
        "share_m": _ratio(phi_m, both),
        "r1": _ratio(f0 - fm, f0 - fmp),
        "r2": _ratio(fp - fmp, f0 - fmp),
        "sink_total": f0 - fs,
        "sink_share": _ratio(f0 - fs, f0),
        "coverage": _ratio(both, f0 - fs),
    }
    for factor, sham in SHAMS.items():
        if sham in levels:
            effect = f0 - levels[sham]
            phi = out[f"phi_{factor}"]
            margin = Figure(SHAM_MARGIN * both.estimate, SHAM_MARGIN * both.replicates)
            out[f"sham_{factor}_effect"] = effect
            out[f"phi_{factor}_beyond_sham"] = (phi - effect) - margin
    if "p0-every-head" in levels:
        out["p0_every_head_change"] = levels["p0-every-head"] - f0
    return out


def split_intervals(levels: Mapping[str, Figure], derived: Mapping[str, Figure]) -> dict[str, tuple[float, float]]:
    """The 95% intervals the no-share rules and C8 read: every derived figure's, and each edit's change of f as ``change_<edit>``.

    Args:
        levels: f of each run (:func:`split_figures`'s input).
        derived: :func:`split_figures`'s output.

    Returns:
        ``{name: (low, high)}``.

    Example:
        >>> flat = lambda v: Figure(v, np.full(4, v))
        >>> levels = {"none": flat(1.0), "m": flat(0.5), "p": flat(0.9), "mp": flat(0.4), "s": flat(0.3)}
        >>> split_intervals(levels, split_figures(levels))["change_m"]
        (-0.5, -0.5)
    """
    out = {name: figure.interval() for name, figure in derived.items()}
    out |= {f"change_{edit}": (levels[edit] - levels["none"]).interval() for edit in EDITS}
    out["f0"] = levels["none"].interval()
    return out


def no_share_reason(intervals: Mapping[str, tuple[float, float]]) -> str | None:
    """Why the split has no share on this readout (methodology §13.3), or ``None`` where it has one.

    Args:
        intervals: The figures' 95% intervals (:func:`split_intervals`: ``phi_sum``, ``phi_m``, ``phi_p``, ``share_m``,
            ``change_<edit>`` for m, p, mp and s, and ``f0``). Intervals are read with
            :data:`NUMERICAL_MARGIN` (times |f₀| for the φ and the changes of f): a rise, a sign or an excursion of
            share_m within it is rounding and does not count.

    Returns:
        The reason, in words, or ``None``.

    Example:
        >>> flat = lambda v: Figure(v, np.full(4, v))
        >>> levels = {"none": flat(1.0), "m": flat(1.2), "p": flat(0.9), "mp": flat(1.0), "s": flat(0.5)}
        >>> no_share_reason(split_intervals(levels, split_figures(levels)))
        'edit m raises f above the unedited run beyond its interval (position added, not removed)'
    """
    low, high = intervals["phi_sum"]
    if not (np.isfinite(low) and np.isfinite(high)):
        return "the figures are not finite"
    margin = NUMERICAL_MARGIN * max(abs(intervals["f0"][0]), abs(intervals["f0"][1]))
    for edit in EDITS:
        if intervals[f"change_{edit}"][0] > margin:
            return f"edit {edit} raises f above the unedited run beyond its interval (position added, not removed)"
    if low <= margin and high >= -margin:
        return f"the interval of φ_m + φ_p [{low:.4g}, {high:.4g}] holds 0: the two channels remove no position that can be told from none"
    (m_low, m_high), (p_low, p_high) = intervals["phi_m"], intervals["phi_p"]
    if (m_low > margin and p_high < -margin) or (m_high < -margin and p_low > margin):
        return f"φ_m [{m_low:.4g}, {m_high:.4g}] and φ_p [{p_low:.4g}, {p_high:.4g}] have intervals of opposite sign"
    share_low, share_high = intervals["share_m"]
    if not (share_low >= -NUMERICAL_MARGIN and share_high <= 1 + NUMERICAL_MARGIN):
        return f"share_m's interval [{share_low:.4g}, {share_high:.4g}] leaves [0, 1]"
    return None


def c8_verdict(intervals: Mapping[str, tuple[float, float]]) -> tuple[str, str]:
    """C8 (methodology §13.5), read on V: mostly the mask's count, mostly key 0's phase, undecided, no share or inconclusive.

    - ``count``: r₁ and r₂ both have intervals above 0.5; ``phase``: both below 0.5; ``undecided`` otherwise;
    - ``no share``: for :func:`no_share_reason`'s reasons;
    - ``inconclusive``: a count or phase reading whose factor's φ does not exceed its sham's effect by an interval
      above 0.1·(φ_m + φ_p) (``phi_…_beyond_sham``), or whose sham was not run.

    Args:
        intervals: The 95% intervals of V's figures (:func:`split_intervals`).

    Returns:
        ``(verdict, reason)``.

    Example:
        >>> flat = lambda v: Figure(v, np.array([v - 0.01, v, v + 0.01, v]))
        >>> levels = {"none": flat(1.0), "m": flat(0.3), "p": flat(0.95), "mp": flat(0.25), "s": flat(0.2),
        ...           "sham-m": flat(1.0), "sham-p": flat(1.0)}
        >>> c8_verdict(split_intervals(levels, split_figures(levels)))[0]
        'count'
    """
    reason = no_share_reason(intervals)
    if reason is not None:
        return "no share", reason
    (r1_low, r1_high), (r2_low, r2_high) = intervals["r1"], intervals["r2"]
    shown = f"r₁ [{r1_low:.4g}, {r1_high:.4g}], r₂ [{r2_low:.4g}, {r2_high:.4g}]"
    if r1_low > 0.5 and r2_low > 0.5:
        verdict, factor = "count", "m"
    elif r1_high < 0.5 and r2_high < 0.5:
        verdict, factor = "phase", "p"
    else:
        return "undecided", f"the order-specific shares do not both lie on one side of 0.5: {shown}"
    beyond = intervals.get(f"phi_{factor}_beyond_sham")
    if beyond is None:
        return "inconclusive", f"{shown} say {verdict}, but the {SHAMS[factor]} sham was not run"
    low, high = beyond
    if not low > 0:
        return (
            "inconclusive",
            f"{shown} say {verdict}, but φ_{factor} does not exceed the {SHAMS[factor]} sham's effect by 0.1·(φ_m + φ_p): "
            f"the excess's interval is [{low:.4g}, {high:.4g}]",
        )
    return verdict, f"{shown}; φ_{factor} exceeds the {SHAMS[factor]} sham's effect by more than 0.1·(φ_m + φ_p)"
