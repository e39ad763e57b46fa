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

:func:`explicit_grams` is also the reference of tests/unit/fit/test_residual_grams.py.
"""

from __future__ import annotations

import argparse
import warnings

import numpy as np

from poslens.fit import metrics, stats

#: numpy's extended precision: 64 significant bits on x86 (the reference's), 53 where long double is double.
EXTENDED = np.longdouble


def explicit_grams(sums: np.ndarray, counts: np.ndarray, dtype: type = np.float64) -> tuple[np.ndarray, np.ndarray]:
    """⟨P(y_u), P(y_v)⟩ and ⟨ȳ_u − f_R, ȳ_v − f_R⟩ from the fitted values over the cells, computed in ``dtype``.

    Model F is fitted by its normal equations, the float64 inverse refined by Newton steps in ``dtype``.

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
    absolute = (y @ a) @ inverse @ a.T - relative
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


if __name__ == "__main__":
    main()
