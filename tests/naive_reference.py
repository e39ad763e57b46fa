"""A deliberately naive reference for poslens' leakage figures (methodology §3–§5).

Nothing here reuses poslens' own capture, sums or fits. The reference captures
every layer's full [batch, head, T, T] scores with plain recording hooks,
builds the pair-level dataset in numpy float64 (every sequence, every query in
the window, every visible key), writes the one-hot design matrices out
explicitly and fits them with ``scipy.linalg.lstsq`` (LAPACK gelsy). It is slow and uses O(N·T²)
memory, which is the point: it is the textbook definition, written once more.

The decomposition is methodology §4 version 2, written out pair by pair:

- the §4.1 fit (exact offset + key-0 indicator + exact row, one-hot, full
  column rank) by explicit least squares;
- the mean-field counterfactual log a' = (g + β[j=0]) − logsumexp over V_i;
- the per-sequence counterfactual, cross-fitted over the G groups: fit s on
  the other groups, A = cell mean (query bin × offset bin) of the residual,
  log a'(n) = log_softmax over V_i of s(n) − A;
- ρ_mask = ⟨P(log a), P(log a')⟩ / ‖P(log a)‖² with P of §3.1 (additive and saturated);
- version 1's logit split, kept as ``c_res_logit`` / ``c_mask_logit``.

Jackknife replicates (:func:`layer_replicates`) redo every fit without one
group g', the per-sequence counterfactual included: in replicate g' each
remaining group γ's sequences get log a'(n) from A^(−γ,−g'), the absolute
component fitted on the sequences outside both γ and g', and P is refit on
them. (The point estimate's A^(−γ) is fitted outside γ only.) With G = 2
nothing is left to refit A on, and a replicate keeps A^(−γ).

The bins are rebuilt here from methodology §3.1's words (:class:`ReferenceBins`).
Only hook names and the hooked forward pass (:mod:`poslens.model.hooks`) come from
poslens; ``test_leakage_reference`` checks the captured scores against the
native Hugging Face model's attention weights. :func:`reference_decomposition`
and :func:`reference_intervals` take synthetic scores and need no model.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import torch
from metric_table import PER_HEAD, PER_SEQUENCE, SATURATED, SHARES  # noqa: F401 (re-exported: nr.PER_HEAD, nr.SHARES)
from scipy import linalg, stats

from poslens.model.hooks import attn_scores, run_with_hooks

FMIN32 = float(torch.finfo(torch.float32).min)

# The metric names come from the tests' one copy of the metric table (metric_table.py, independent of poslens):
# PER_HEAD, the figures this reference computes per (layer, window, head); SHARES, the ratios of components;
# PER_SEQUENCE, NaN when layer_metrics gets neither groups nor log_ap; SATURATED, NaN under saturated=False.


def _openblas_thread_controls() -> list[tuple[Callable, Callable]]:
    """(set, get) thread-count functions of every OpenBLAS loaded in this process (numpy's and scipy's); [] if none found."""
    controls = []
    try:
        with open("/proc/self/maps") as maps:
            paths = sorted({line.split()[-1] for line in maps if "openblas" in line.lower() and line.split()[-1].startswith("/")})
    except OSError:
        return controls
    for path in paths:
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for name in ("scipy_openblas", "openblas"):
            for suffix in ("64_", ""):
                setter, getter = getattr(lib, f"{name}_set_num_threads{suffix}", None), getattr(lib, f"{name}_get_num_threads{suffix}", None)
                if setter is not None and getter is not None:
                    getter.restype = ctypes.c_int
                    controls.append((setter, getter))
                    break
            else:
                continue
            break
    return controls


@contextlib.contextmanager
def single_threaded_blas() -> Iterator[None]:
    """Run OpenBLAS on one thread inside the block, then restore its thread count.

    The reference's many small least-squares fits gain nothing from threads,
    and on a shared, loaded machine OpenBLAS's threads contend (measured: the
    reference for one tiny model took 105 s threaded, 4 s on one thread).
    Results do not depend on it beyond rounding (~1e-15).
    """
    controls = _openblas_thread_controls()
    saved = [get() for _, get in controls]
    for set_, _ in controls:
        set_(1)
    try:
        yield
    finally:
        for (set_, _), n in zip(controls, saved, strict=False):
            set_(n)


def blas_one_thread(fn: Callable) -> Callable:
    """Decorator: :func:`single_threaded_blas` around ``fn``."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with single_threaded_blas():
            return fn(*args, **kwargs)

    return wrapper


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

    Batches are cut as ``poslens.measure(..., batch_size=batch_size)`` cuts them, consecutive sequences
    ``batch_size`` at a time (default: N / G, a group's size when the groups are equal), so that the forward
    passes see the same batches.
    """
    n = tokens.shape[0]
    step = batch_size or -(-n // groups)
    store: list[list[np.ndarray]] = [[] for _ in range(model.n_layers)]

    def recorder(layer: int) -> Callable:
        def fn(scores: torch.Tensor, hook: Any) -> None:
            store[layer].append(scores.detach().to("cpu", torch.float64).numpy().copy())

        return fn

    for k in range(0, n, step):
        batch = tokens[k : k + step]
        extra = [h for iv in interventions for h in iv.hooks(model, batch)]
        rec = [(attn_scores(l), recorder(l)) for l in range(model.n_layers)]
        run_with_hooks(model, batch, extra + rec)
    return [np.concatenate(parts, axis=0) for parts in store]


class ReferenceBins:
    """methodology §3.1's bins, written out: one bin per value 0..15, then edges growing by 1.25, rounded up, until T.

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

    ``y_s``, ``y_loga``: [P, H]; ``y_c``: [P]; ``n``, ``i``, ``j``, ``delta`` (= i − j),
    ``row`` (an id of the row (n, i)): [P]. Every row in the window holds all
    of its visible keys, so a softmax over a row's pairs is the softmax over V_i.
    Also the row features per head, averaged over the rows (n, i) in the window.
    """

    def __init__(self, scores: np.ndarray, binning: ReferenceBins, window: str, count: Callable[[np.ndarray], np.ndarray] | None = None):
        n_seq, n_heads, t, _ = scores.shape
        if window not in ("early", "all"):
            raise ValueError(f"window must be 'early' or 'all', not {window!r}")
        if binning.seq_len != t:
            raise ValueError(f"bins for T = {binning.seq_len}, scores with T = {t}")
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

        q_hi = min(binning.early, t) if window == "early" else t
        in_window = np.zeros(t, bool)
        in_window[1:q_hi] = True
        pair = vis & in_window[None, :, None]
        nn, ii, jj = np.nonzero(pair)
        self.n, self.i, self.j = nn, ii, jj
        self.delta = ii - jj
        self.row = nn * t + ii
        self.n_seqs, self.seq_len, self.n_heads = n_seq, t, n_heads
        self.y_s = scores[nn, :, ii, jj]  # [P, H]
        self.y_loga = log_a[nn, :, ii, jj]
        self.y_c = c_row[nn, ii]
        self.offset_bin = binning.offset_bin[ii - jj]
        self.query_bin = binning.query_bin[ii]
        self.n_offset_bins = binning.n_offset_bins
        self.n_query_bins = binning.n_query_bins
        self.cell = self.query_bin * self.n_offset_bins + self.offset_bin
        self._exact: tuple | None = None

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
        _, code = np.unique(self.cell, return_inverse=True)
        return one_hot(code)

    def design_linear(self, full: bool) -> np.ndarray:
        """[1, i−j] or [1, i−j, i] (j = i − (i−j) adds nothing to the span)."""
        cols = [np.ones(self.i.size), (self.i - self.j).astype(float)]
        if full:
            cols.append(self.i.astype(float))
        return np.column_stack(cols)

    def design_exact(self) -> tuple[np.ndarray, np.ndarray, bool]:
        """methodology §4.1's design: [one-hot exact offset, [j = 0], one-hot exact row].

        Offsets and rows with no pair are left out, and so is the first row
        present (the one null direction: a constant shared by g and the row
        effects). Returns (X, the offsets of X's first columns, whether the
        key-0 column is there); X is checked to have full column rank.
        """
        if self._exact is None:
            offsets = one_hot(self.delta, self.seq_len)
            offset_values = np.nonzero(offsets.sum(0) > 0)[0]
            key0 = (self.j == 0).astype(float)[:, None]
            has_key0 = bool(key0.any())
            rows = present(one_hot(self.i, self.seq_len))[:, 1:]
            x = np.hstack([offsets[:, offset_values]] + ([key0] if has_key0 else []) + [rows])
            check_full_rank(x, self.i * self.seq_len + self.j)
            self._exact = (x, offset_values, has_key0)
        return self._exact


def present(x: np.ndarray) -> np.ndarray:
    """The columns of a one-hot design that have at least one pair."""
    return x[:, x.sum(0) > 0]


def sst(y: np.ndarray) -> np.ndarray:
    """Total sum of squares per column; NaN for a column that is constant up to rounding (its R² is undefined)."""
    total = ((y - y.mean(0)) ** 2).sum(0)
    return np.where(total > 1e-20 * (y**2).sum(0), total, np.nan)


def check_full_rank(x: np.ndarray, key: np.ndarray) -> None:
    """Assert full column rank; ``key`` [P] identifies (i, j), on which a pair's design row only depends."""
    _, first = np.unique(key, return_index=True)
    rank = np.linalg.matrix_rank(x[first])
    assert rank == x.shape[1], f"§4.1 design has rank {rank} < {x.shape[1]} columns"


def row_log_softmax(row: np.ndarray, x: np.ndarray) -> np.ndarray:
    """log_softmax of x [P, H] within each row id (every row's pairs are all of its visible keys)."""
    _, r = np.unique(row, return_inverse=True)
    peak = np.full((r.max() + 1, x.shape[1]), -np.inf)
    np.maximum.at(peak, r, x)
    total = np.zeros_like(peak)
    np.add.at(total, r, np.exp(x - peak[r]))
    return x - peak[r] - np.log(total[r])


def exact_fit(data: PairData, y: np.ndarray, train: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """methodology §4.1: OLS of y [P, H] on the exact design over the pairs ``train`` (default: all).

    Returns g [T, H] (NaN at offsets with no pair), β [H] (0 if no key-0 pair)
    and the full fitted values g + β[j=0] + h(i) on every pair [P, H]. g is
    fixed up to a constant shared with h by dropping the first row column.
    """
    x, offset_values, has_key0 = data.design_exact()
    xt, yt = (x, y) if train is None else (x[train], y[train])
    if train is not None:
        check_full_rank(xt, (data.i * data.seq_len + data.j)[train])
    coef = lstsq(xt, yt)
    scale = np.abs(xt).sum(0).max() * max(np.abs(yt).max(), 1.0)
    assert np.abs(xt.T @ (yt - xt @ coef)).max() <= 1e-10 * scale, "§4.1 least squares did not converge"
    k = len(offset_values)
    g = np.full((data.seq_len, y.shape[1]), np.nan)
    g[offset_values] = coef[:k]
    beta = coef[k] if has_key0 else np.zeros(y.shape[1])
    return g, beta, x @ coef


def relative_part(data: PairData, g: np.ndarray, beta: np.ndarray) -> np.ndarray:
    """g(i − j) + β·[j = 0] on every pair [P, H]."""
    out = g[data.delta] + beta[None, :] * (data.j == 0)[:, None]
    assert np.isfinite(out).all(), "a pair's offset has no fitted g"
    return out


def meanfield_log_ap(data: PairData) -> np.ndarray:
    """methodology §4.1's mean-field counterfactual: fit log a, then log a' = log_softmax over V_i of g + β[j=0]. [P, H]."""
    g, beta, _ = exact_fit(data, data.y_loga)
    return row_log_softmax(data.row, relative_part(data, g, beta))


def sequence_groups(n_seqs: int, groups: int | np.ndarray) -> np.ndarray:
    """The group label of each of ``n_seqs`` sequences: :func:`group_of` for a count, else the labels given."""
    if np.ndim(groups) == 0:
        return group_of(n_seqs, int(groups))
    labels = np.asarray(groups)
    if labels.shape != (n_seqs,):
        raise ValueError(f"{labels.shape[0] if labels.ndim else 0} group labels for {n_seqs} sequences")
    return labels


@blas_one_thread
def perseq_log_ap(data: PairData, groups: int | np.ndarray) -> np.ndarray:
    """The per-sequence counterfactual, cross-fitted over the groups of data's sequences. [P, H].

    ``groups`` is a count G (contiguous groups, :func:`group_of`) or one group
    label per sequence of ``data`` (a jackknife replicate passes the original
    labels of the sequences it keeps). For each group γ: fit s on the pairs
    of the other groups (g, β, h_s), take their residual
    r = s − g − β[j=0] − h_s(i), A_{c,b} = mean of r over those pairs in cell
    (query bin c, offset bin b); then each sequence n of γ gets
    log a'_ij(n) = log_softmax over V_i of s_ij(n) − A_{c(i), b(i−j)}.
    """
    labels = sequence_groups(data.n_seqs, groups)
    if len(np.unique(labels)) < 2:
        raise ValueError("cross-fitting needs at least 2 groups")
    g_pair = labels[data.n]
    n_cells = data.n_query_bins * data.n_offset_bins
    out = np.full_like(data.y_s, np.nan)
    for gamma in np.unique(labels):
        train, test = g_pair != gamma, g_pair == gamma
        _, _, fit = exact_fit(data, data.y_s, train)
        resid = data.y_s[train] - fit[train]
        sums = np.zeros((n_cells, data.n_heads))
        np.add.at(sums, data.cell[train], resid)
        counts = np.bincount(data.cell[train], minlength=n_cells)
        assert (counts[data.cell[test]] > 0).all(), "a held-out pair's cell has no training pair"
        a_abs = sums / np.maximum(counts, 1)[:, None]
        out[test] = row_log_softmax(data.row[test], data.y_s[test] - a_abs[data.cell[test]])
    assert np.isfinite(out).all()
    return out


@blas_one_thread
def layer_metrics(
    data: PairData, saturated: bool = True, groups: int | np.ndarray | None = None, log_ap: np.ndarray | None = None
) -> dict[str, np.ndarray]:
    """Every per-head figure of one layer and window, from explicit least squares.

    The per-sequence counterfactual is ``log_ap`` [P, H] if given, else
    cross-fitted here over ``groups`` (a count, or one label per sequence: see
    :func:`perseq_log_ap`); with neither, its figures are NaN.
    ``saturated=False`` skips the (largest) cell-one-hot fit; its figures are then NaN.
    """
    h = data.n_heads
    if log_ap is None and groups is not None:
        log_ap = perseq_log_ap(data, groups)
    has_perseq = log_ap is not None
    if not has_perseq:
        log_ap = data.y_loga  # a placeholder fitted alongside; its figures are set to NaN below
    assert log_ap.shape == data.y_s.shape
    log_ap_mf = meanfield_log_ap(data)
    # columns: s [H], log a [H], c [1], log a' per sequence [H], log a' mean-field [H]
    y = np.column_stack([data.y_s, data.y_loga, data.y_c, log_ap, log_ap_mf])
    s_, la_, c_, ap_, mf_ = slice(0, h), slice(h, 2 * h), 2 * h, slice(2 * h + 1, 3 * h + 1), slice(3 * h + 1, 4 * h + 1)
    f_r = fitted(data.design_r(), y)
    f_f = fitted(data.design_f(), y)
    f_s = fitted(data.design_s(), y) if saturated else np.full_like(y, np.nan)
    total = sst(y)
    p = f_f - f_r  # P(y), additive
    p_sat = f_s - f_r  # P(y), saturated
    leak = (p**2).sum(0) / total  # = R²_F − R²_R (NaN for a constant y, e.g. the logits of a constant head)
    leak_check = (((y - f_r) ** 2).sum(0) - ((y - f_f) ** 2).sum(0)) / total
    sat = (p_sat**2).sum(0) / total
    assert np.allclose(leak, leak_check, atol=1e-11, rtol=0, equal_nan=True), np.abs(leak - leak_check).max()

    def shares(pp: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """ρ_mask (per sequence), ρ_mask (mean-field), ρ_count, ρ_logit under projection pp."""
        pla = pp[:, la_]
        norm = (pla**2).sum(0)
        return (
            (pla * pp[:, ap_]).sum(0) / norm,
            (pla * pp[:, mf_]).sum(0) / norm,
            (pla * -pp[:, [c_]]).sum(0) / norm,
            (pla * pp[:, s_]).sum(0) / norm,
        )

    rho_mask, rho_mask_mf, rho_count, rho_logit = shares(p)
    rho_mask_sat, _, rho_count_sat, _ = shares(p_sat) if saturated else (np.full(h, np.nan),) * 4
    if not has_perseq:
        rho_mask = np.full(h, np.nan)
        rho_mask_sat = np.full(h, np.nan)
    l_pattern, l_sat = leak[la_], sat[la_]

    ys = data.y_s
    r2_full = 1 - ((ys - fitted(data.design_linear(True), ys)) ** 2).sum(0) / sst(ys)
    r2_rel = 1 - ((ys - fitted(data.design_linear(False), ys)) ** 2).sum(0) / sst(ys)

    return {
        "leakage_pattern": l_pattern,
        "leakage_logit": leak[s_],
        "leakage_pattern_saturated": l_sat,
        "leakage_logit_saturated": sat[s_],
        "leakage_linear": r2_full - r2_rel,
        "leakage_count": np.full(h, leak[c_]),
        "c_res": (1 - rho_mask) * l_pattern,
        "c_mask": rho_mask * l_pattern,
        "rho_res": 1 - rho_mask,
        "rho_mask": rho_mask,
        "c_count": rho_count * l_pattern,
        "count_share": (rho_count * l_pattern) / (rho_mask * l_pattern),
        "c_res_saturated": (1 - rho_mask_sat) * l_sat,
        "c_mask_saturated": rho_mask_sat * l_sat,
        "rho_res_saturated": 1 - rho_mask_sat,
        "rho_mask_saturated": rho_mask_sat,
        "c_count_saturated": rho_count_sat * l_sat,
        "count_share_saturated": (rho_count_sat * l_sat) / (rho_mask_sat * l_sat),
        "c_res_meanfield": (1 - rho_mask_mf) * l_pattern,
        "c_mask_meanfield": rho_mask_mf * l_pattern,
        "rho_res_meanfield": 1 - rho_mask_mf,
        "rho_mask_meanfield": rho_mask_mf,
        "c_res_logit": rho_logit * l_pattern,
        "c_mask_logit": (1 - rho_logit) * l_pattern,
        "key0_mass": data.key0_mass,
        "entropy": data.entropy,
        "self_mass": data.self_mass,
        "max_mass": data.max_mass,
    }


@blas_one_thread
def layer_replicates(
    scores: np.ndarray,
    binning: ReferenceBins,
    window: str,
    groups: int,
    count: Callable[[np.ndarray], np.ndarray] | None = None,
    saturated: bool = False,
) -> list[dict[str, np.ndarray]]:
    """The G leave-one-group-out replicates of :func:`layer_metrics` for one layer [N, H, T, T] and window.

    Replicate g' drops group g' and refits everything on the rest: P, the
    mean-field g and β, and the per-sequence counterfactual, whose cross-fit
    is redone inside the replicate over the original groups that remain, so
    group γ's sequences use A^(−γ,−g') (fitted on the sequences outside γ
    and g'). The interval thus carries the estimation noise of A.

    With G = 2 a replicate holds one group and nothing to refit A on: its
    sequences keep the full cross-fit's log a'(n) (A^(−γ)), and only P is refit.
    """
    seq_group = group_of(scores.shape[0], groups)
    full_ap = None
    if groups == 2:
        full = PairData(scores, binning, window, count)
        full_ap = perseq_log_ap(full, groups)
    reps = []
    for drop in range(groups):
        keep_seq = seq_group != drop
        sub = PairData(scores[keep_seq], binning, window, count)
        if full_ap is None:
            reps.append(layer_metrics(sub, saturated=saturated, groups=seq_group[keep_seq]))
        else:
            keep_pair = keep_seq[full.n]
            # the replicate's pairs are the full data's pairs of the kept sequences, in the same order
            assert np.array_equal(np.nonzero(keep_seq)[0][sub.n], full.n[keep_pair])
            assert np.array_equal(sub.i, full.i[keep_pair]) and np.array_equal(sub.j, full.j[keep_pair])
            reps.append(layer_metrics(sub, saturated=saturated, log_ap=full_ap[keep_pair]))
    return reps


@blas_one_thread
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
    """methodology §5 / methodology: θ̂ ± t_{0.975, G−1} · sqrt((G−1)/G · Σ (θ_(g) − mean θ_(·))²)."""
    g = len(replicates)
    se = np.sqrt((g - 1) / g * ((replicates - replicates.mean()) ** 2).sum())
    t = stats.t.ppf(0.975, g - 1)
    return estimate - t * se, estimate + t * se


@blas_one_thread
def naive_table(
    scores: list[np.ndarray],
    binning: ReferenceBins,
    groups: int,
    windows: Sequence[str] = ("early", "all"),
    count: Callable[[np.ndarray], np.ndarray] | None = None,
) -> dict:
    """{(layer, window): {metric: [H]}} for every layer of a captured model (per-sequence figures cross-fitted over ``groups``)."""
    return {(layer, w): layer_metrics(PairData(s, binning, w, count), groups=groups) for layer, s in enumerate(scores) for w in windows}


def intervals(
    full: dict[str, np.ndarray], reps: list[dict[str, np.ndarray]], metrics: Sequence[str] | None = None
) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """{metric: (estimate [H], low [H], high [H])}: per-head jackknife intervals from :func:`layer_replicates`."""
    out = {}
    for metric in metrics or full:
        est = np.asarray(full[metric], float)
        rep = np.array([r[metric] for r in reps])  # [G, H]
        bounds = [clip_to_bound(metric, *jackknife(est[k], rep[:, k])) for k in range(est.size)]
        out[metric] = (est, np.array([b[0] for b in bounds]), np.array([b[1] for b in bounds]))
    return out


def clip_to_bound(metric: str, low: float, high: float) -> tuple[float, float]:
    """An interval kept inside its figure's hard range, as the methodology states it for bounded figures (L, a mass,
    a held-out R²: the glossary's ranges, listed in ``poslens.fit.bounds.HARD_BOUNDS``); other figures unchanged."""
    from poslens.fit.bounds import HARD_BOUNDS

    if metric not in HARD_BOUNDS:
        return low, high
    lo, hi = HARD_BOUNDS[metric]
    return min(max(low, lo), hi), min(max(high, lo), hi)


@blas_one_thread
def naive_intervals(
    scores: list[np.ndarray],
    binning: ReferenceBins,
    groups: int,
    windows: Sequence[str] = ("early", "all"),
    count: Callable[[np.ndarray], np.ndarray] | None = None,
    saturated: bool = True,
) -> dict:
    """{(layer, window): {metric: (estimate [H], low [H], high [H])}} for every layer of a captured model."""
    out = {}
    for layer, s in enumerate(scores):
        for w in windows:
            full = layer_metrics(PairData(s, binning, w, count), saturated=saturated, groups=groups)
            reps = layer_replicates(s, binning, w, groups, count, saturated=saturated)
            out[(layer, w)] = intervals(full, reps)
    return out


@blas_one_thread
def reference_decomposition(
    scores: np.ndarray,
    early: int,
    groups: int,
    windows: Sequence[str] = ("early", "all"),
    count: Callable[[np.ndarray], np.ndarray] | None = None,
    saturated: bool = True,
) -> dict[str, dict[str, np.ndarray]]:
    """{window: {metric: [H]}} for one layer's scores [N, H, T, T] (masked entries at :data:`FMIN32`); no model needed."""
    binning = ReferenceBins(scores.shape[-1], early)
    return {w: layer_metrics(PairData(scores, binning, w, count), saturated=saturated, groups=groups) for w in windows}


@blas_one_thread
def reference_intervals(
    scores: np.ndarray,
    early: int,
    groups: int,
    windows: Sequence[str] = ("early", "all"),
    count: Callable[[np.ndarray], np.ndarray] | None = None,
    saturated: bool = True,
) -> dict[str, dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]]:
    """{window: {metric: (estimate [H], low [H], high [H])}} for one layer's scores [N, H, T, T]; no model needed."""
    return {w: v for (_, w), v in naive_intervals([scores], ReferenceBins(scores.shape[-1], early), groups, windows, count, saturated).items()}


def lookup(frame) -> dict:
    """(layer, head, window, metric) -> (value, ci_low, ci_high) from a measure table."""
    return {(int(r.layer), int(r.head), r.query_window, r.metric): (r.value, r.ci_low, r.ci_high) for r in frame.itertuples(index=False)}
