"""A deliberately naive reference for poslens' leakage figures (METHOD §3–§5).

Nothing here reuses poslens' own capture, sums or fits. The reference captures
every layer's full [batch, head, T, T] scores with plain recording hooks,
builds the pair-level dataset in numpy float64 (every sequence, every query in
the window, every visible key), writes the one-hot design matrices out
explicitly and fits them with ``scipy.linalg.lstsq`` (LAPACK gelsy). It is slow and uses O(N·T²)
memory, which is the point: it is the textbook definition, written once more.

The bins are rebuilt here from METHOD §3.1's words (:class:`ReferenceBins`).
Only hook names and the hooked forward pass (:mod:`poslens.hooks`) come from
poslens; ``test_leakage_reference`` checks the captured scores against the
native Hugging Face model's attention weights.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np
import torch
from scipy import linalg, stats

from poslens.hooks import attn_scores, run_with_hooks

FMIN32 = float(torch.finfo(torch.float32).min)

# Metrics this reference computes per (layer, window, head).
PER_HEAD = (
    "leakage_pattern",
    "leakage_logit",
    "leakage_pattern_saturated",
    "leakage_logit_saturated",
    "leakage_linear",
    "leakage_count",
    "c_res",
    "c_mask",
    "c_count",
    "rho_res",
    "rho_mask",
    "count_share",
    "c_res_centered",
    "c_mask_centered",
    "rho_res_centered",
    "key0_mass",
    "entropy",
    "self_mass",
    "max_mass",
)


def group_of(n_seqs: int, groups: int) -> np.ndarray:
    """Group of sequence k: k·G // N (contiguous, near-equal blocks)."""
    return (np.arange(n_seqs) * groups) // n_seqs


def capture_scores(
    model: Any,
    tokens: torch.Tensor,
    groups: int,
    batch_size: int | None = None,
    interventions: Sequence[Any] = (),
) -> list[np.ndarray]:
    """Every layer's scores as float64 arrays [N, H, T, T] (masked entries at the float32 minimum).

    Batches are cut inside group blocks so the forward passes see the same
    batches as ``poslens.measure(..., batch_size=batch_size)``.
    """
    n = tokens.shape[0]
    g_of = group_of(n, groups)
    store: list[list[np.ndarray]] = [[] for _ in range(model.n_layers)]

    def recorder(layer: int) -> Callable:
        def fn(scores: torch.Tensor, hook: Any) -> None:
            store[layer].append(scores.detach().to("cpu", torch.float64).numpy().copy())

        return fn

    for g in range(groups):
        members = np.nonzero(g_of == g)[0]
        step = batch_size or len(members)
        for k in range(0, len(members), step):
            idx = members[k : k + step]
            batch = tokens[idx]
            extra = [h for iv in interventions for h in iv.hooks(model, batch)]
            rec = [(attn_scores(l), recorder(l)) for l in range(model.n_layers)]
            run_with_hooks(model, batch, extra + rec)
    return [np.concatenate(parts, axis=0) for parts in store]


class ReferenceBins:
    """METHOD §3.1's bins, written out: one bin per value 0..15, then edges growing by 1.25, rounded up, until T.

    Query bins add the early bound Q as an edge, so the early window is whole bins.
    Integer arithmetic only: ⌈1.25·e⌉ = ⌈5e/4⌉ = (5e + 3) // 4.
    """

    def __init__(self, seq_len: int, early: int):
        self.seq_len, self.early = seq_len, early
        edges = list(range(0, min(16, seq_len) + 1))
        while edges[-1] < seq_len:
            edges.append(min(seq_len, (5 * edges[-1] + 3) // 4))
        query_edges = sorted(set(edges) | ({early} if early < seq_len else set()))
        self.offset_edges, self.query_edges = edges, query_edges
        self.n_offset_bins, self.n_query_bins = len(edges) - 1, len(query_edges) - 1
        self.offset_bin = np.array([self._bin(edges, v) for v in range(seq_len)])
        self.query_bin = np.array([self._bin(query_edges, v) for v in range(seq_len)])

    @staticmethod
    def _bin(edges: list[int], value: int) -> int:
        for k in range(len(edges) - 1):
            if edges[k] <= value < edges[k + 1]:
                return k
        raise ValueError(f"{value} is outside the edges {edges[0]}..{edges[-1]}")


def one_hot(codes: np.ndarray, n: int | None = None) -> np.ndarray:
    n = int(codes.max()) + 1 if n is None else n
    out = np.zeros((codes.size, n))
    out[np.arange(codes.size), codes] = 1.0
    return out


def lstsq(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Least-squares coefficients (pivoted QR: rank-deficient one-hot designs are fine)."""
    return linalg.lstsq(x, y, lapack_driver="gelsy")[0]


def fitted(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Least-squares fitted values; checks the normal equations X'(y − ŷ) = 0 hold."""
    f = x @ lstsq(x, y)
    scale = np.abs(x).sum(0).max() * max(np.abs(y).max(), 1.0)
    assert np.abs(x.T @ (y - f)).max() <= 1e-10 * scale, "least-squares fit did not converge"
    return f


class PairData:
    """The pair-level dataset of one layer and one query window.

    ``y_s``, ``y_loga``: [P, H]; ``y_c``: [P]; ``n``, ``i``, ``j``: [P];
    ``rows``: (sequence, query) of every row in the window, with the row
    features per head.
    """

    def __init__(self, scores: np.ndarray, binning: ReferenceBins, window: str, count: Callable[[np.ndarray], np.ndarray] | None = None):
        n_seq, n_heads, t, _ = scores.shape
        visible = scores > FMIN32 / 2  # [N, H, T, T]
        if not (visible == visible[:, :1]).all():
            raise AssertionError("heads of one layer see different keys")
        vis = visible[:, 0]  # [N, T, T]
        masked = np.where(visible, scores, -np.inf)
        row_max = masked.max(-1, keepdims=True)
        log_z = (row_max + np.log(np.exp(masked - row_max).sum(-1, keepdims=True)))[..., 0]  # [N, H, T]
        log_a = masked - log_z[..., None]  # -inf where masked
        n_visible = vis.sum(-1)  # [N, T]
        c_row = np.log(n_visible) if count is None else count(np.arange(t))[None, :].repeat(n_seq, 0)

        q_hi = binning.early if window == "early" else t
        in_window = np.zeros(t, bool)
        in_window[1:q_hi] = True
        pair = vis & in_window[None, :, None]
        nn, ii, jj = np.nonzero(pair)
        self.n, self.i, self.j = nn, ii, jj
        self.y_s = scores[nn, :, ii, jj]  # [P, H]
        self.y_loga = log_a[nn, :, ii, jj]
        self.y_c = c_row[nn, ii]
        row_mean = np.where(visible, scores, 0.0).sum(-1) / visible.sum(-1)  # [N, H, T]
        self.y_m = row_mean[nn, :, ii]  # mean visible logit of the pair's row
        self.offset_bin = binning.offset_bin[ii - jj]
        self.query_bin = binning.query_bin[ii]
        self.n_offset_bins = binning.n_offset_bins
        self.n_query_bins = binning.n_query_bins

        # Row features: rows (n, i) with i in the window.
        a = np.exp(log_a)  # 0 where masked
        rows = a[:, :, in_window, :]  # [N, H, R, T]
        with np.errstate(divide="ignore", invalid="ignore"):
            plogp = np.where(rows > 0, rows * np.log(rows), 0.0)
        q_idx = np.nonzero(in_window)[0]
        self.key0_mass = rows[..., 0].mean(axis=(0, 2))
        self.entropy = (-plogp.sum(-1)).mean(axis=(0, 2))
        self.self_mass = rows[:, :, np.arange(len(q_idx)), q_idx].mean(axis=(0, 2))
        self.max_mass = rows.max(-1).mean(axis=(0, 2))
        self.n_heads = n_heads

    # Design matrices, written out with full column rank: bins with no pair in
    # the window are left out, and model F drops the first query bin present
    # (its offset one-hot already spans the intercept). A rank-deficient
    # one-hot design makes LAPACK's least squares unstable (its null direction
    # sits at the rcond threshold), so the reference never asks for one.
    def design_r(self) -> np.ndarray:
        return present(one_hot(self.offset_bin, self.n_offset_bins))

    def design_f(self) -> np.ndarray:
        return np.hstack([self.design_r(), present(one_hot(self.query_bin, self.n_query_bins))[:, 1:]])

    def design_s(self) -> np.ndarray:
        cell = self.query_bin * self.n_offset_bins + self.offset_bin
        _, code = np.unique(cell, return_inverse=True)
        return one_hot(code)

    def design_linear(self, full: bool) -> np.ndarray:
        """[1, i−j] or [1, i−j, i] (j = i − (i−j) adds nothing to the span)."""
        cols = [np.ones(self.i.size), (self.i - self.j).astype(float)]
        if full:
            cols.append(self.i.astype(float))
        return np.column_stack(cols)


def present(x: np.ndarray) -> np.ndarray:
    """The columns of a one-hot design that have at least one pair."""
    return x[:, x.sum(0) > 0]


def sst(y: np.ndarray) -> np.ndarray:
    return ((y - y.mean(0)) ** 2).sum(0)


def layer_metrics(data: PairData, saturated: bool = True) -> dict[str, np.ndarray]:
    """Every per-head figure of one layer and window, from explicit least squares.

    ``saturated=False`` skips the (largest) cell-one-hot fit; its figures are then NaN.
    """
    h = data.n_heads
    y = np.column_stack([data.y_s, data.y_loga, data.y_c, data.y_m])  # [P, 3H + 1]
    f_r = fitted(data.design_r(), y)
    f_f = fitted(data.design_f(), y)
    f_s = fitted(data.design_s(), y) if saturated else np.full_like(y, np.nan)
    total = sst(y)
    p = f_f - f_r
    leak = (p**2).sum(0) / total  # = R²_F − R²_R
    leak_check = (((y - f_r) ** 2).sum(0) - ((y - f_f) ** 2).sum(0)) / total
    assert np.allclose(leak, leak_check, atol=1e-11, rtol=0), np.abs(leak - leak_check).max()
    sat = ((f_s - f_r) ** 2).sum(0) / total
    p_s, p_la, p_c, p_m = p[:, :h], p[:, h : 2 * h], p[:, 2 * h], p[:, 2 * h + 1 :]
    p_logz = p_s - p_la
    norm = (p_la**2).sum(0)
    rho_res = (p_la * p_s).sum(0) / norm
    rho_mask = (p_la * -p_logz).sum(0) / norm
    rho_count = (p_la * -p_c[:, None]).sum(0) / norm
    rho_centred = (p_la * (p_s - p_m)).sum(0) / norm
    l_pattern = leak[h : 2 * h]

    ys = data.y_s
    r2_full = 1 - ((ys - fitted(data.design_linear(True), ys)) ** 2).sum(0) / sst(ys)
    r2_rel = 1 - ((ys - fitted(data.design_linear(False), ys)) ** 2).sum(0) / sst(ys)

    return {
        "leakage_pattern": l_pattern,
        "leakage_logit": leak[:h],
        "leakage_pattern_saturated": sat[h : 2 * h],
        "leakage_logit_saturated": sat[:h],
        "leakage_linear": r2_full - r2_rel,
        "leakage_count": np.full(h, leak[2 * h]),
        "c_res": rho_res * l_pattern,
        "c_mask": rho_mask * l_pattern,
        "c_count": rho_count * l_pattern,
        "rho_res": rho_res,
        "c_res_centered": rho_centred * l_pattern,
        "c_mask_centered": (1 - rho_centred) * l_pattern,
        "rho_res_centered": rho_centred,
        "rho_mask": rho_mask,
        "count_share": (rho_count * l_pattern) / (rho_mask * l_pattern),
        "key0_mass": data.key0_mass,
        "entropy": data.entropy,
        "self_mass": data.self_mass,
        "max_mass": data.max_mass,
    }


def heldout_leakage(data: PairData, groups: int, n_seqs: int, head: int, which: str = "loga") -> tuple[float, np.ndarray]:
    """Cross-fitted ΔR² of one head: fit R and F on all groups but g, score on g.

    Returns the pooled value Σ_g (SSE_R,g − SSE_F,g) / Σ_g SST_g (SST_g about
    group g's own mean) and the per-fold values.
    """
    y = (data.y_loga if which == "loga" else data.y_s)[:, head]
    g_pair = group_of(n_seqs, groups)[data.n]
    x_r, x_f = data.design_r(), data.design_f()
    num, den, folds = 0.0, 0.0, []
    for g in range(groups):
        train, test = g_pair != g, g_pair == g
        pred_r = x_r[test] @ lstsq(x_r[train], y[train])
        pred_f = x_f[test] @ lstsq(x_f[train], y[train])
        gain = ((y[test] - pred_r) ** 2).sum() - ((y[test] - pred_f) ** 2).sum()
        total = ((y[test] - y[test].mean()) ** 2).sum()
        num, den = num + gain, den + total
        folds.append(gain / total)
    return num / den, np.array(folds)


def jackknife(estimate: float, replicates: np.ndarray) -> tuple[float, float]:
    """METHOD §5 / methodology: θ̂ ± t_{0.975, G−1} · sqrt((G−1)/G · Σ (θ_(g) − mean θ_(·))²)."""
    g = len(replicates)
    se = np.sqrt((g - 1) / g * ((replicates - replicates.mean()) ** 2).sum())
    t = stats.t.ppf(0.975, g - 1)
    return estimate - t * se, estimate + t * se


def naive_table(scores: list[np.ndarray], binning: ReferenceBins, windows: Sequence[str] = ("early", "all"), count=None) -> dict:
    """{(layer, window): {metric: [H]}} for every layer of a captured model."""
    return {
        (layer, w): layer_metrics(PairData(s, binning, w, count))
        for layer, s in enumerate(scores)
        for w in windows
    }


def lookup(frame) -> dict:
    """(layer, head, window, metric) -> (value, ci_low, ci_high) from a measure table."""
    return {
        (int(r.layer), int(r.head), r.query_window, r.metric): (r.value, r.ci_low, r.ci_high)
        for r in frame.itertuples(index=False)
    }
