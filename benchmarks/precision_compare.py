"""Figures of a bf16 (and fp16) model against float32, within a tolerance fixed before the run.

Usage:
    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/precision_compare.py [--model smollm2-135m] [--n-seqs 8] [--seq-len 256]

Loads the model in float32 and in each reduced dtype, measures the same corpus
with each (:func:`poslens.measure`), and compares, per layer (head = −1, query
window ``all``), L(log a) (``leakage_pattern``), C_res and C_mask. The
tolerance is the bound of docs/precision.md (methodology §3.1 for L, §4.2 for
the components), computed from the float32 scores' size before any reduced
dtype is measured:

- a per-score perturbation with |δ_ij| ≤ ε|s_ij| (ε = 2⁻⁸ for bf16, 2⁻¹¹ for
  fp16: :data:`EPSILON`) moves log a by at most r = ε·(rms(s) + rms_w(max_j |s_ij|))
  in rms over the pairs (:func:`a_priori_rms`);
- that moves each head's figures by at most :func:`figure_bounds` (a proof for
  L, an assumption for the counterfactual's normalization, see the docs);
- the tolerance is :data:`SAFETY` times that bound, and a layer's tolerance is
  the mean of its heads' (the aggregate is their mean).

The same bound is also evaluated with the scores' actual difference δ between
the two models (:func:`measured_rms`), which a reduced-precision *forward*
makes larger than one rounding of the scores; it is printed beside the
tolerance and is not used to decide ``within``.

The tolerance functions are imported by tests/unit/capture/test_precision.py.
"""

from __future__ import annotations

import argparse
import datetime
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

#: The relative size of one score's perturbation assumed per dtype: 8 (bf16) and 11 (fp16) significant bits;
#: round-to-nearest errs by at most half a unit in the last place (2⁻⁹, 2⁻¹²), taken twice as large to cover
#: the rounding within the matmul that produced the score.
EPSILON = {"bfloat16": 2.0**-8, "float16": 2.0**-11}
#: Fixed before any run: the tolerance is this many times the bound of :func:`figure_bounds`.
SAFETY = 2.0
#: The counterfactual pattern log a' is assumed to move by at most this many times as much as log a (rms):
#: proved for its logits s' = s − A (A a composition of two orthogonal projections of s), assumed for its
#: normalization log Z' (docs/precision.md).
COUNTERFACTUAL_FACTOR = 2.0
#: The figures compared, as the result table names them.
METRICS = ("leakage_pattern", "c_res", "c_mask")


@dataclass
class ScoreStats:
    """Second moments of scores (or of score differences) over the pairs of the query window ``all``.

    Per layer and head, over rows 1 ≤ i < T and visible keys j ≤ i (causal layers only) of every sequence.

    Attributes:
        n: Number of pairs per layer and head (the same for every head), [layers, heads].
        sq: Σ x_ij², [layers, heads].
        rowmax_sq: Σ_i |V_i| · (max_{j ∈ V_i} |x_ij|)², [layers, heads].

    Example:
        >>> st = ScoreStats.zeros(1, 1)
        >>> st.add(0, torch.tensor([[[[1.0, -9.0], [3.0, -4.0]]]]))   # row 1 only: keys 0 and 1
        >>> st.n.tolist(), st.sq.tolist(), st.rowmax_sq.tolist()
        ([[2.0]], [[25.0]], [[32.0]])
    """

    n: np.ndarray
    sq: np.ndarray
    rowmax_sq: np.ndarray

    @classmethod
    def zeros(cls, layers: int, heads: int) -> ScoreStats:
        """Empty sums.

        Args:
            layers: Number of layers.
            heads: Number of query heads.

        Returns:
            Sums of nothing.

        Example:
            >>> ScoreStats.zeros(2, 3).sq.shape
            (2, 3)
        """
        return cls(*(np.zeros((layers, heads)) for _ in range(3)))

    def add(self, layer: int, x: torch.Tensor) -> None:
        """Add one layer's scores (or differences) [batch, head, T, T]; entries above the diagonal are ignored.

        Args:
            layer: The layer.
            x: The values, [batch, head, T, T].

        Example:
            >>> st = ScoreStats.zeros(1, 1); st.add(0, torch.ones(2, 1, 3, 3)); st.n.tolist()   # 2 × (2 + 3)
            [[10.0]]
        """
        t = x.shape[-1]
        visible = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()[1:]  # rows 1..T−1
        a = x[:, :, 1:, :].double().abs().masked_fill(~visible, 0.0)
        n_row = visible.sum(-1).double()  # |V_i| = i + 1
        self.n[layer] += float(n_row.sum()) * x.shape[0]
        self.sq[layer] += (a * a).sum((0, 2, 3)).cpu().numpy()
        self.rowmax_sq[layer] += (a.amax(-1) ** 2 * n_row).sum((0, 2)).cpu().numpy()

    @property
    def rms(self) -> np.ndarray:
        """rms(x) over the pairs, [layers, heads].

        Example:
            >>> st = ScoreStats.zeros(1, 1); st.add(0, torch.full((1, 1, 2, 2), 3.0)); st.rms.tolist()
            [[3.0]]
        """
        return np.sqrt(self.sq / self.n)

    @property
    def rowmax_rms(self) -> np.ndarray:
        """rms over the pairs of each row's largest |x|, [layers, heads].

        Example:
            >>> st = ScoreStats.zeros(1, 1); st.add(0, torch.tensor([[[[0.0, 0.0], [1.0, 7.0]]]])); st.rowmax_rms.tolist()
            [[7.0]]
        """
        return np.sqrt(self.rowmax_sq / self.n)


def a_priori_rms(scores: ScoreStats, epsilon: float) -> np.ndarray:
    """Bound on rms(Δ log a) for a perturbation |δ_ij| ≤ ε|s_ij| of the scores: ε·(rms(s) + rms_w(max_j |s_ij|)).

    Δ log a_ij = δ_ij − Δ log Z_i and |Δ log Z_i| ≤ max_{j ∈ V_i} |δ_ij| (log-sum-exp is 1-Lipschitz in the
    maximum norm); the triangle inequality in the pair-weighted norm gives the sum.

    Args:
        scores: The float32 model's score statistics.
        epsilon: The relative perturbation of one score (:data:`EPSILON`).

    Returns:
        The bound r, [layers, heads].

    Example:
        >>> st = ScoreStats.zeros(1, 1); st.add(0, torch.full((1, 1, 2, 2), 4.0))
        >>> a_priori_rms(st, 2.0**-8).tolist()   # 2⁻⁸ · (4 + 4)
        [[0.03125]]
    """
    return epsilon * (scores.rms + scores.rowmax_rms)


def measured_rms(difference: ScoreStats) -> np.ndarray:
    """The same bound from the scores' actual difference δ: rms(δ) + rms_w(max_j |δ_ij|).

    Args:
        difference: Statistics of δ = s(reduced dtype) − s(float32).

    Returns:
        The bound r, [layers, heads].

    Example:
        >>> st = ScoreStats.zeros(1, 1); st.add(0, torch.tensor([[[[0.0, 0.0], [0.0, 0.2]]]]))
        >>> np.round(measured_rms(st), 4).tolist()   # √(0.04/2) + 0.2
        [[0.3414]]
    """
    return difference.rms + difference.rowmax_rms


@dataclass
class HeadScales:
    """What the bound needs of each head, from the float32 run's sums (query window ``all``).

    Attributes:
        sigma: sd(log a) = √(SST(log a) / n), [layers, heads].
        leakage: L(log a) = ‖P(log a)‖² / SST, [layers, heads].
        c_mask: ⟨P(log a), P(log a')⟩ / SST, [layers, heads].
        w: ‖P(log a')‖ / √SST, [layers, heads].
        n: Number of pairs, [layers].

    Example:
        >>> HeadScales(*(np.ones((1, 1)) for _ in range(4)), np.ones(1)).w.shape
        (1, 1)
    """

    sigma: np.ndarray
    leakage: np.ndarray
    c_mask: np.ndarray
    w: np.ndarray
    n: np.ndarray


def head_scales(sums: Any) -> HeadScales:
    """σ, L, C_mask and ‖P(log a')‖/√SST per head from a result's cell sums, as :func:`poslens.fit.metrics.head_metrics` computes them.

    Args:
        sums: The :class:`poslens.fit.sums.CellSums` of a measurement.

    Returns:
        The scales.

    Example:
        >>> scales = head_scales(result.sums)  # doctest: +SKIP
    """
    from poslens.fit.stats import project, total_sum_of_squares, weighted_inner

    p, mask = sums.pooled(), sums.binning.query_windows["all"]
    n_layers, n_heads = p.logit.shape[:2]
    out = {k: np.full((n_layers, n_heads), np.nan) for k in ("sigma", "leakage", "c_mask", "w")}
    n_pairs = np.zeros(n_layers)
    cf = sums.counterfactual_cells.pooled()["all"]
    for layer in range(n_layers):
        counts = p.pair_count[layer][mask]
        total = counts.sum()
        proj = project(np.stack([x[layer][:, mask] for x in (p.logit, p.log_partition, cf)]), counts)
        p_a, p_cf = proj.absolute[0] - proj.absolute[1], proj.absolute[2]
        s2, z2 = p.logit_sq[layer][:, mask].sum(-1), p.log_partition_sq[layer][:, mask].sum(-1)
        sz = p.logit_x_log_partition[layer][:, mask].sum(-1)
        s_tot, z_tot = p.logit[layer][:, mask].sum((-2, -1)), p.log_partition[layer][:, mask].sum((-2, -1))
        sst = total_sum_of_squares(s2 - 2 * sz + z2, s_tot - z_tot, total)
        out["sigma"][layer] = np.sqrt(sst / total)
        out["leakage"][layer] = weighted_inner(p_a, p_a, proj.counts) / sst
        out["c_mask"][layer] = weighted_inner(p_a, p_cf, proj.counts) / sst
        out["w"][layer] = np.sqrt(weighted_inner(p_cf, p_cf, proj.counts) / sst)
        n_pairs[layer] = total
    return HeadScales(n=n_pairs, **out)


def figure_bounds(scales: HeadScales, r: np.ndarray, r_counterfactual: np.ndarray) -> dict[str, np.ndarray]:
    """Per head, how far L(log a), C_mask and C_res can move when log a moves by r and log a' by r' (rms).

    With a = r/σ, b = r'/σ and k = 1/(1 − a)²:
    |ΔL| ≤ k(2√L·a + a²) + L(k − 1), |ΔC_mask| ≤ k(a·w + √L·b + a·b) + |C_mask|(k − 1),
    |ΔC_res| ≤ |ΔL| + |ΔC_mask|; infinite where a ≥ 1 (docs/precision.md derives them).

    Args:
        scales: The heads' scales (:func:`head_scales`).
        r: Bound on rms(Δ log a), [layers, heads].
        r_counterfactual: Bound on rms(Δ log a'), [layers, heads].

    Returns:
        ``{metric: bound}``, [layers, heads], for the names of :data:`METRICS`.

    Example:
        >>> sc = HeadScales(np.array([[2.0]]), np.array([[0.25]]), np.array([[0.2]]), np.array([[0.5]]), np.array([64.0]))
        >>> {k: round(float(v[0, 0]), 5) for k, v in figure_bounds(sc, np.array([[0.02]]), np.array([[0.04]])).items()}
        {'leakage_pattern': 0.01538, 'c_mask': 0.01957, 'c_res': 0.03495}
    """
    a, b = r / scales.sigma, r_counterfactual / scales.sigma
    with np.errstate(divide="ignore", invalid="ignore"):
        k = np.where(a < 1, 1.0 / (1.0 - np.minimum(a, 1 - 1e-12)) ** 2, np.inf)
    root = np.sqrt(scales.leakage)
    d_l = k * (2 * root * a + a * a) + scales.leakage * (k - 1)
    d_c = k * (a * scales.w + root * b + a * b) + np.abs(scales.c_mask) * (k - 1)
    return {"leakage_pattern": d_l, "c_mask": d_c, "c_res": d_l + d_c}


def layer_tolerances(per_head: dict[str, np.ndarray], factor: float = SAFETY) -> dict[str, np.ndarray]:
    """``factor`` × the mean over heads (where finite figures exist) of per-head bounds: the tolerance of a layer's aggregate.

    Args:
        per_head: ``{metric: [layers, heads]}`` bounds (:func:`figure_bounds`).
        factor: The safety factor (:data:`SAFETY`).

    Returns:
        ``{metric: [layers]}``.

    Example:
        >>> layer_tolerances({"c_res": np.array([[0.01, 0.03]])})["c_res"].tolist()
        [0.04]
    """
    return {k: factor * np.nanmean(v, axis=-1) for k, v in per_head.items()}


def tolerances(scores: ScoreStats, scales: HeadScales, epsilon: float, factor: float = SAFETY) -> dict[str, np.ndarray]:
    """The a priori tolerance per layer: :data:`SAFETY` × the bound for |δ| ≤ ε|s|, from the float32 run alone.

    Args:
        scores: The float32 model's score statistics.
        scales: The float32 run's head scales.
        epsilon: :data:`EPSILON` of the reduced dtype.
        factor: The safety factor.

    Returns:
        ``{metric: [layers]}``.

    Example:
        >>> st = ScoreStats.zeros(1, 1); st.add(0, torch.full((1, 1, 2, 2), 4.0))
        >>> sc = HeadScales(np.array([[2.0]]), np.array([[0.25]]), np.array([[0.2]]), np.array([[0.5]]), np.array([2.0]))
        >>> round(float(tolerances(st, sc, 2.0**-8)["leakage_pattern"][0]), 4)
        0.0488
    """
    r = a_priori_rms(scores, epsilon)
    return layer_tolerances(figure_bounds(scales, r, COUNTERFACTUAL_FACTOR * r), factor)


def _layer_hooks(model: Any, fn: Any) -> list[tuple[str, Any]]:
    from poslens.model.hooks import attn_scores

    return [(attn_scores(layer), (lambda x, hook, layer=layer: fn(layer, x))) for layer in range(model.n_layers)]


def score_differences(reference: Any, others: dict[str, Any], tokens: torch.Tensor, batch_size: int = 1) -> tuple[ScoreStats, dict[str, Any]]:
    """Statistics of the reference model's scores, and of each other model's difference from them, on ``tokens``.

    Args:
        reference: The float32 model.
        others: ``{dtype name: model}``.
        tokens: Token ids [N, T].
        batch_size: Sequences per forward pass.

    Returns:
        ``(scores, {name: {"diff": ScoreStats, "above": [layers] share of pairs with |δ| > ε|s|}})``.

    Example:
        >>> stats, diffs = score_differences(model32, {"bfloat16": model16}, corpus.tokens)  # doctest: +SKIP
    """
    from poslens.model.hooks import attn_scores, run_with_hooks

    n_layers, n_heads = reference.n_layers, reference.n_heads
    stats = ScoreStats.zeros(n_layers, n_heads)
    out = {name: {"diff": ScoreStats.zeros(n_layers, n_heads), "above": np.zeros(n_layers), "pairs": np.zeros(n_layers)} for name in others}
    last = attn_scores(n_layers - 1)
    for start in range(0, tokens.shape[0], batch_size):
        batch = tokens[start : start + batch_size]
        kept: dict[int, torch.Tensor] = {}

        def keep(layer: int, x: torch.Tensor, kept: dict[int, torch.Tensor] = kept) -> None:
            kept[layer] = x.double()
            stats.add(layer, kept[layer])

        run_with_hooks(reference, batch, _layer_hooks(reference, keep), stop_after=last)
        for name, model in others.items():
            eps, entry = EPSILON[name], out[name]

            def compare(layer: int, x: torch.Tensor, eps: float = eps, entry: dict = entry, kept: dict[int, torch.Tensor] = kept) -> None:
                s = kept[layer]
                d = x.double() - s
                entry["diff"].add(layer, d)
                t = s.shape[-1]
                visible = torch.ones(t, t, dtype=torch.bool).tril()[1:]
                above = (d[:, :, 1:].abs() > eps * s[:, :, 1:].abs()) & visible
                entry["above"][layer] += float(above.sum())
                entry["pairs"][layer] += float(visible.sum()) * s.shape[0] * s.shape[1]

            run_with_hooks(model, batch, _layer_hooks(model, compare), stop_after=last)
    for entry in out.values():
        entry["above"] = entry["above"] / entry["pairs"]
    return stats, out


def layer_figures(result: Any, metric: str, n_layers: int) -> np.ndarray:
    """A metric's layer aggregates (head = −1, window ``all``), [layers].

    Args:
        result: A :class:`poslens.Result`.
        metric: The metric.
        n_layers: Number of layers.

    Returns:
        The values.

    Example:
        >>> layer_figures(result, "c_res", 30).shape  # doctest: +SKIP
        (30,)
    """
    return np.array([result.value(metric, "all", layer=layer, head=-1) for layer in range(n_layers)])


def check_scales(scales: HeadScales, result: Any) -> float:
    """Largest difference between :func:`head_scales`' L and C_mask and the result table's per-head figures.

    Args:
        scales: :func:`head_scales` of ``result.sums``.
        result: The result.

    Returns:
        The largest absolute difference.

    Example:
        >>> check_scales(head_scales(result.sums), result) < 1e-10  # doctest: +SKIP
        True
    """
    worst = 0.0
    for metric, mine in (("leakage_pattern", scales.leakage), ("c_mask", scales.c_mask)):
        rows = result.select(metric, "all")
        rows = rows[(rows["layer"] >= 0) & (rows["head"] >= 0)]
        theirs = np.full_like(mine, np.nan)
        theirs[rows["layer"].to_numpy(), rows["head"].to_numpy()] = rows["value"].to_numpy()
        worst = max(worst, float(np.nanmax(np.abs(theirs - mine))))
    return worst


def main() -> None:
    import poslens
    from poslens.capture.score_checks import NonFiniteScoresError

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--n-seqs", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=256)
    parser.add_argument("--groups", type=int, default=4)
    parser.add_argument("--dtypes", default="bfloat16,float16")
    args = parser.parse_args()
    started = time.perf_counter()
    print(
        f"{args.model}, {args.n_seqs} × T={args.seq_len} (docs corpus), groups {args.groups}, torch {torch.__version__}, "
        f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC; safety factor {SAFETY:g}, "
        f"counterfactual factor {COUNTERFACTUAL_FACTOR:g}\n"
    )
    model32 = poslens.load_model(args.model)
    corpus = poslens.make_corpus(model32, "docs", n_seqs=args.n_seqs, seq_len=args.seq_len)
    result32 = poslens.measure(model32, corpus, groups=args.groups, batch_size=2, progress=False)
    scales = head_scales(result32.sums)
    print(f"head scales reproduce the table's L and C_mask within {check_scales(scales, result32):.1e}")
    n_layers = model32.n_layers
    for name in args.dtypes.split(","):
        model = poslens.load_model(args.model, dtype=name)
        stats, diffs = score_differences(model32, {name: model}, corpus.tokens)
        assert np.allclose(stats.n[:, 0], scales.n), "score statistics and sums count different pairs"
        tol = tolerances(stats, scales, EPSILON[name])  # fixed from the float32 run before this dtype is measured
        d = diffs[name]["diff"]
        post = layer_tolerances(figure_bounds(scales, measured_rms(d), COUNTERFACTUAL_FACTOR * measured_rms(d)), 1.0)
        print(f"\n## {name} (ε = 2^{int(np.log2(EPSILON[name]))})\n")
        print("Scores:\n\n| layer | rms(s) | rms(δ)/rms(s) | share abs(δ) > ε·abs(s) | rms_w(max abs δ)/rms_w(max abs s) |\n|---|---|---|---|---|")
        for layer in range(n_layers):
            print(
                f"| {layer} | {stats.rms[layer].mean():.3g} | {(d.rms[layer] / stats.rms[layer]).mean():.2e} | "
                f"{diffs[name]['above'][layer]:.1%} | {(d.rowmax_rms[layer] / stats.rowmax_rms[layer]).mean():.2e} |"
            )
        try:
            result = poslens.measure(model, corpus, groups=args.groups, batch_size=2, progress=False)
        except NonFiniteScoresError as error:
            print(f"\n{name}: not measured: {error}")
            continue
        print(f"\n| layer | metric | float32 | {name} | abs diff | tolerance | bound from measured δ | within |\n|---|---|---|---|---|---|---|---|")
        inside = 0
        for metric in METRICS:
            f32, low = layer_figures(result32, metric, n_layers), layer_figures(result, metric, n_layers)
            for layer in range(n_layers):
                diff = abs(low[layer] - f32[layer])
                ok = bool(diff <= tol[metric][layer])
                inside += ok
                print(
                    f"| {layer} | {metric} | {f32[layer]:.5f} | {low[layer]:.5f} | {diff:.2e} | {tol[metric][layer]:.2e} | "
                    f"{post[metric][layer]:.2e} | {'yes' if ok else '**no**'} |"
                )
        print(f"\n{name}: {inside} of {len(METRICS) * n_layers} figures within the tolerance")
        print(f"\n({time.perf_counter() - started:.0f} s so far)", flush=True)


if __name__ == "__main__":
    main()
