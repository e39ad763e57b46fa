"""How many digits the fits keep: every in-sample figure against the same figure computed in extended precision.

Usage:
    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/grams_precision.py [--model smollm2-135m] [--n-seqs 8] [--seq-len 128]

Measures the corpus once (``poslens.measure`` at its defaults: random tokens, BOS
first), then fits the estimate and every leave-one-group-out replicate
(``Replicates.of``) three times, changing only how the heads' inner products
⟨P(y_u), P(y_v)⟩ and ⟨ȳ_u − f_R, ȳ_v − f_R⟩ are formed:

- ``residual``: the package's route (:func:`poslens.fit.stats.residual_grams`);
- ``explicit``: the fitted values of models R and F over the cells, then their weighted
  inner products, in float64 (the route of poslens 0.7.5 and earlier);
- ``extended``: the explicit route in numpy's long double (80-bit on x86), model F's
  inverse refined by Newton steps in that precision: the reference.

For each figure it prints the largest relative error over layers, heads, query windows
and replicates of the first two routes against the reference (figures where the
reference is 0 or NaN are left out), worst figures first, and the median over figures.

The held-out figures (``leakage_pattern_heldout``, ``leakage_logit_heldout``: fitted without
group g, scored on g) are compared the same way, fold by fold and head by head: the
package's (:func:`poslens.fit.metrics.held_out_metrics`), the former route's (f_R and f_F
over the cells in float64, SSE_R − SSE_F as −2 Σ (f_R − f_F) Y + Σ n (f_R² − f_F²)), and
that route in extended precision (:func:`held_out_ratios`).

:func:`explicit_grams` is also the reference of tests/unit/fit/test_residual_grams.py.
"""

from __future__ import annotations

import argparse
import warnings

import numpy as np

from poslens.fit import metrics, stats

#: numpy's extended precision: 64 significant bits on x86 (the reference's), 53 where long double is double.
EXTENDED = np.longdouble


def explicit_fits(sums: np.ndarray, counts: np.ndarray, dtype: type = np.float64) -> tuple[np.ndarray, np.ndarray]:
    """f_R and f_F over the non-empty cells, [..., K] each, computed in ``dtype``.

    Model F is fitted by its normal equations, the float64 inverse refined by Newton steps in ``dtype``.

    Args:
        sums: Cell sums of the response, [..., C, B].
        counts: Number of pairs in each cell, [C, B].
        dtype: The precision of every step.

    Returns:
        ``(relative, additive)`` in ``dtype``.

    Example:
        >>> relative, additive = explicit_fits(np.array([[2.0, 3.0], [1.0, 4.0]]), np.array([[2.0, 1.0], [1.0, 2.0]]))
        >>> np.round(relative, 3).tolist(), np.round(additive, 3).tolist()
        ([1.0, 2.333, 1.0, 2.333], [1.167, 2.667, 0.667, 2.167])
    """
    mask, a = stats.design(counts)
    n, y = counts[mask].astype(dtype), sums[..., mask].astype(dtype)
    a = a[:, a.any(axis=0)].astype(dtype)
    _, b_idx = np.nonzero(mask)
    onehot = np.zeros((len(b_idx), counts.shape[1]), dtype=dtype)
    onehot[np.arange(len(b_idx)), b_idx] = 1
    bin_n = n @ onehot
    relative = ((y @ onehot) / np.where(bin_n > 0, bin_n, 1))[..., b_idx]
    gram = a.T @ (a * n[:, None])
    inverse = np.linalg.inv(gram.astype(np.float64)).astype(dtype)
    for _ in range(4):
        inverse = inverse @ (2 * np.eye(len(gram), dtype=dtype) - gram @ inverse)
    return relative, (y @ a) @ inverse @ a.T


def explicit_grams(sums: np.ndarray, counts: np.ndarray, dtype: type = np.float64) -> tuple[np.ndarray, np.ndarray]:
    """⟨P(y_u), P(y_v)⟩ and ⟨ȳ_u − f_R, ȳ_v − f_R⟩ from the fitted values over the cells, computed in ``dtype``.

    Model F is fitted by :func:`explicit_fits`.

    Args:
        sums: Cell sums of F responses, [..., F, C, B].
        counts: Number of pairs in each cell, [C, B].
        dtype: The precision of every step.

    Returns:
        ``(absolute, saturated)``, [..., F, F] each, as float64.

    Example:
        >>> counts = np.array([[2.0, 1.0], [1.0, 2.0]])
        >>> absolute, _ = explicit_grams(np.array([[[2.0, 3.0], [1.0, 4.0]]]), counts, EXTENDED)
        >>> round(float(absolute[0, 0]), 6)
        0.333333
    """
    mask = counts > 0
    n, y = counts[mask].astype(dtype), sums[..., mask].astype(dtype)
    relative, additive = explicit_fits(sums, counts, dtype)
    absolute = additive - relative
    saturated = y / n - relative
    inner = "...uk,...vk,k->...uv"
    return np.einsum(inner, absolute, absolute, n).astype(np.float64), np.einsum(inner, saturated, saturated, n).astype(np.float64)


def fitted(sums, route: str) -> dict[str, np.ndarray]:
    """Every in-sample figure of ``sums``, estimate and replicates, with the inner products of ``route``.

    Args:
        sums: The measurement's grouped sums.
        route: ``residual``, ``explicit`` or ``extended``.

    Returns:
        ``{"estimate/<figure>": array, "replicates/<figure>": array}``.

    Example:
        >>> fitted(result.sums, "extended")["estimate/c_res"].shape  # doctest: +SKIP
        (2, 31, 10)
    """
    from poslens.fit.replicates import Replicates

    def explicit(dtype):
        def grams(sums_, counts):
            absolute, saturated = explicit_grams(sums_, counts, dtype)
            return stats.ResidualGrams(absolute=absolute, saturated=saturated)

        return grams

    routes = {"residual": stats.residual_grams, "explicit": explicit(np.float64), "extended": explicit(EXTENDED)}
    original = metrics.residual_grams
    metrics.residual_grams = routes[route]
    try:
        fits = Replicates.of(sums)
    finally:
        metrics.residual_grams = original
    return {**{f"estimate/{k}": v for k, v in fits.estimate.items()}, **{f"replicates/{k}": v for k, v in fits.replicates.items()}}


def held_out_ratios(sums, dtype: type = np.float64) -> dict[str, np.ndarray]:
    """The held-out figures of every fold and head by the former route, its arithmetic in ``dtype``: ``{name: [G, W, L, H]}``.

    SSE_R − SSE_F of group g under the fits of models R and F on the other groups (the fitted values over the
    cells, :func:`explicit_fits`), as −2 Σ (f_R − f_F) Y + Σ n (f_R² − f_F²), over the SST of group g in float64.

    Args:
        sums: The measurement's grouped sums.
        dtype: The precision of the fits and of SSE_R − SSE_F.

    Returns:
        ``{"leakage_logit_heldout": ..., "leakage_pattern_heldout": ...}``, [group, query window, layer, head].

    Example:
        >>> held_out_ratios(result.sums, EXTENDED)["leakage_pattern_heldout"].shape  # doctest: +SKIP
        (4, 2, 30, 9)
    """
    from poslens.fit.sums import QUERY_WINDOWS

    shape = (sums.n_groups, len(QUERY_WINDOWS), sums.n_layers, sums.n_heads)
    out = {name: np.full(shape, np.nan) for name in ("leakage_logit_heldout", "leakage_pattern_heldout")}
    for g, train in enumerate(sums.leave_out_each()):
        test = sums.group(g)
        for w, query_window in enumerate(QUERY_WINDOWS):
            mask = sums.binning.query_windows[query_window]
            for layer in range(sums.n_layers):
                counts, t_counts = train.pair_count[layer][mask], test.pair_count[layer][mask]
                if counts.sum() == 0 or t_counts.sum() == 0:
                    continue
                cells = counts > 0
                n_test, total = t_counts[cells].astype(dtype), t_counts.sum()
                s2, z2 = test.logit_sq[layer][:, mask].sum(-1), test.log_partition_sq[layer][:, mask].sum(-1)
                sz = test.logit_x_log_partition[layer][:, mask].sum(-1)
                t_s, t_z = test.logit[layer][:, mask], test.log_partition[layer][:, mask]
                y_s, y_a = train.logit[layer][:, mask], train.logit[layer][:, mask] - train.log_partition[layer][:, mask]
                for name, y_train, y_test, sq, tot in (
                    ("leakage_logit_heldout", y_s, t_s, s2, t_s.sum((-2, -1))),
                    ("leakage_pattern_heldout", y_a, t_s - t_z, s2 - 2 * sz + z2, (t_s - t_z).sum((-2, -1))),
                ):
                    relative, additive = explicit_fits(y_train, counts, dtype)
                    y = y_test[:, cells].astype(dtype)
                    gap = -2 * ((relative - additive) * y).sum(-1) + (n_test * (relative**2 - additive**2)).sum(-1)
                    out[name][g, w, layer] = gap.astype(np.float64) / stats.total_sum_of_squares(sq, tot, total)
    return out


def largest_relative_error(got: np.ndarray, want: np.ndarray) -> float:
    """max |got − want| / |want| where the reference is finite and non-zero (0 if there is no such entry).

    Example:
        >>> round(largest_relative_error(np.array([1.0, 2.0, np.nan]), np.array([1.0, 2.5, np.nan])), 6)
        0.2
    """
    kept = np.isfinite(want) & (want != 0)
    return float((np.abs(got[kept] - want[kept]) / np.abs(want[kept])).max(initial=0.0))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--n-seqs", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=128)
    args = parser.parse_args()
    import poslens

    model = poslens.load_model(args.model)
    corpus = poslens.make_corpus(model, "random", n_seqs=args.n_seqs, seq_len=args.seq_len, position0="bos", seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sums = poslens.measure(model, corpus, progress=False).sums
    figures = {route: fitted(sums, route) for route in ("residual", "explicit", "extended")}
    rows = sorted(
        (
            (
                largest_relative_error(figures["explicit"][name], want),
                largest_relative_error(figures["residual"][name], want),
                name,
            )
            for name, want in figures["extended"].items()
        ),
        reverse=True,
    )
    print(f"{args.model}, {args.n_seqs} x {args.seq_len} tokens: largest relative error against extended precision")
    print(f"{'explicit (<= 0.7.5)':>20} {'residual (now)':>15}  figure")
    for explicit, residual, name in rows[:15]:
        print(f"{explicit:20.2e} {residual:15.2e}  {name}")
    print(f"{np.median([r[0] for r in rows]):20.2e} {np.median([r[1] for r in rows]):15.2e}  median over {len(rows)} figures")
    from poslens.fit.metrics import held_out_metrics

    _, folds = held_out_metrics(sums)
    former, reference = held_out_ratios(sums), held_out_ratios(sums, EXTENDED)
    print("held-out figures, every fold and head:")
    for name, want in reference.items():
        package = folds[name][:, :, :-1, :-1]  # without the means over heads and layers
        print(f"{largest_relative_error(former[name], want):20.2e} {largest_relative_error(package, want):15.2e}  {name}")


if __name__ == "__main__":
    main()
