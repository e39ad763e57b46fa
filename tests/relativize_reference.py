"""A dense, independent reference for relativizing the forward pass (methodology §11).

Nothing here comes from poslens' fitting, capture, hook or mechanism code: the
reference captures full [batch, head, T, T] scores with its own hooks on the
TransformerLens bridge (``model.bridge.run_with_hooks`` with hook names written
out as strings), writes the one-hot design of the edit's fit out explicitly and
solves it with SVD least squares, edits the forward with its own hooks, and
computes the leakage figures of the edited forward with ``naive_reference``'s
textbook fits. Only the model object (loaded by ``poslens.load_model``) is
shared with the package.

The edit, per layer l and query head h, from the calibration sequences' scores
s_ij(n) at ``blocks.{l}.attn.hook_attn_scores`` (layers < l already edited in
the mode being calibrated): over the pairs of rows 1 ≤ i < T and visible keys j,
fit jointly by least squares

    s_ij ≈ g(i − j) + β·[j = 0] + h(i) + A[c(i), b(i − j)] + κ[c(i)]·[j = 0]

(g per exact offset, β for key 0, h per exact row: the span M; A per
(query bin, offset bin) cell holding at least one pair that is not a key-0
pair; κ per query bin holding a key-0 pair). The mean over the calibration
sequences of s has the same normal equations as every sequence stacked, so the
fit is made on the mean. The (A, κ) part of a least-squares solution is not
unique (span(A, κ) meets M): the edit E_ij = A[c(i), b(i − j)] + κ[c(i)]·[j = 0]
is the one of smallest Σ E_ij² over one sequence's pairs among all solutions,

    x_W = x0_W − N (Nᵀ G N)⁻¹ Nᵀ G x0_W,

with x0 any least-squares solution, N a basis of the null space of
(I − P_M) Z_W (the (A, κ) directions that M can absorb) and G = Z_Wᵀ Z_W.
Modes: ``all`` subtracts A + κ·[j = 0], ``key0`` κ·[j = 0], ``all-but-key0`` A.
Calibration is bottom-up, one forward pass per layer.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from scipy import linalg

sys.path.insert(0, str(Path(__file__).parent))
import naive_reference as nr  # noqa: E402

MODES = ("all", "key0", "all-but-key0")
FIT_EARLY = 32  # the query bins of the edit's fit: Binning(T)'s default early bound (an edge already for T > 32)
RCOND = 1e-10
FIXED_POINT_TOL = 1e-9


def scores_hook(layer: int) -> str:
    """The bridge's hook name for layer ``layer``'s pre-softmax scores [batch, head, query, key]."""
    return f"blocks.{layer}.attn.hook_attn_scores"


class Structure:
    """The pairs of one sequence that the edit is fitted on and applied to, and the fit's one-hot design.

    ``visible`` [T, T]: the keys each query sees (from the captured scores).
    Pairs: rows 1 ≤ i < T, keys j visible. Design columns (written out dense):
    Z_M = [one-hot exact offset (offsets with a pair), [j = 0], one-hot exact
    row (rows with a pair)] (rank-deficient: a constant shared by g and h),
    Z_W = [one-hot cell (query bin × offset bin) for the cells holding a
    pair with j > 0, one-hot query bin on key-0 pairs for the bins holding one].
    """

    def __init__(self, visible: np.ndarray, bins: nr.ReferenceBins):
        t = visible.shape[-1]
        if visible.shape != (t, t) or bins.seq_len != t:
            raise ValueError(f"visibility {visible.shape} and bins for T = {bins.seq_len} do not match")
        rows = np.zeros((t, t), bool)
        rows[1:] = True
        self.seq_len, self.bins, self.visible = t, bins, visible
        self.i, self.j = np.nonzero(visible & rows)
        self.delta = self.i - self.j
        self.qbin, self.obin = bins.query_bin[self.i], bins.offset_bin[self.delta]
        key0 = self.j == 0
        self.key0 = key0
        n_pairs = self.i.size

        def onehot(codes: np.ndarray, values: np.ndarray) -> np.ndarray:
            return (codes[:, None] == values[None, :]).astype(float)

        self.offsets = np.unique(self.delta)
        self.rows = np.unique(self.i)
        cell = self.qbin * bins.n_offset_bins + self.obin
        # cells with at least one pair that is not a key-0 pair get an A column; the others (only key-0 pairs) none
        self.cells = np.unique(cell[~key0])
        self.kappa_bins = np.unique(self.qbin[key0])
        self.z_m = np.hstack([onehot(self.delta, self.offsets), key0[:, None].astype(float), onehot(self.i, self.rows)])
        if not key0.any():
            self.z_m = np.delete(self.z_m, len(self.offsets), axis=1)
        self.z_w = np.hstack([onehot(cell, self.cells), onehot(self.qbin, self.kappa_bins) * key0[:, None]])
        assert self.z_w.shape[0] == self.z_m.shape[0] == n_pairs
        # every pair in a cell without an A column is a key-0 pair, hence carried by κ
        a_cover = np.isin(cell, self.cells)
        assert key0[~a_cover].all()
        rank_w = np.linalg.matrix_rank(self.z_w)
        assert rank_w == self.z_w.shape[1], f"[A, κ] columns have rank {rank_w} < {self.z_w.shape[1]}"
        self.z = np.hstack([self.z_m, self.z_w])
        # (I − P_M) Z_W and the null directions of (A, κ) that M absorbs
        u_m = linalg.orth(self.z_m, rcond=RCOND)
        q_zw = self.z_w - u_m @ (u_m.T @ self.z_w)
        self.null = linalg.null_space(q_zw, rcond=RCOND)
        self.gram_w = self.z_w.T @ self.z_w
        self.u_m = u_m

    @property
    def n_a(self) -> int:
        return len(self.cells)

    def values(self, scores: np.ndarray) -> np.ndarray:
        """The pair values of scores [H, T, T] as [P, H]."""
        return scores[:, self.i, self.j].T

    def min_norm_edit(self, y: np.ndarray) -> np.ndarray:
        """The (A, κ) coefficients [K_W, H] of the pair-weighted minimum-norm edit of y [P, H]."""
        x0 = linalg.lstsq(self.z, y, cond=RCOND, lapack_driver="gelsd")[0]
        scale = np.abs(self.z).sum(0).max() * max(np.abs(y).max(), 1.0)
        assert np.abs(self.z.T @ (y - self.z @ x0)).max() <= 1e-10 * scale, "the edit's least squares did not converge"
        x_w = x0[self.z_m.shape[1] :]
        n = self.null
        if n.shape[1]:
            gn = self.gram_w @ n
            x_w = x_w - n @ np.linalg.solve(n.T @ gn, gn.T @ x_w)
        # E is part of a least-squares solution: y − E has the LS residual of y on Z once M alone is fitted to it
        e = self.z_w @ x_w
        rest = y - e
        resid_m = rest - self.u_m @ (self.u_m.T @ rest)
        resid_z = y - self.z @ x0
        assert np.abs(resid_m - resid_z).max() <= 1e-9 * max(np.abs(y).max(), 1.0), "E is not part of a least-squares solution"
        # and no other solution has a smaller E: E is orthogonal to every E-direction M can absorb
        if n.shape[1]:
            assert np.abs((self.z_w @ n).T @ e).max() <= 1e-9 * max(np.abs(y).max(), 1.0) * len(y)
        return x_w

    def split(self, x_w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(A [H, C, B], κ [H, C]) from (A, κ) coefficients [K_W, H]; zero where there is no column."""
        h = x_w.shape[1]
        a = np.zeros((h, self.bins.n_query_bins * self.bins.n_offset_bins))
        a[:, self.cells] = x_w[: self.n_a].T
        kappa = np.zeros((h, self.bins.n_query_bins))
        kappa[:, self.kappa_bins] = x_w[self.n_a :].T
        return a.reshape(h, self.bins.n_query_bins, self.bins.n_offset_bins), kappa

    def edit(self, a: np.ndarray, kappa: np.ndarray, mode: str) -> np.ndarray:
        """E [H, T, T] of ``mode`` (zero off the pairs: row 0 and masked entries)."""
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
        h = a.shape[0]
        per_pair = np.zeros((self.i.size, h))
        if mode in ("all", "all-but-key0"):
            per_pair += a[:, self.qbin, self.obin].T
        if mode in ("all", "key0"):
            per_pair += kappa[:, self.qbin].T * self.key0[:, None]
        out = np.zeros((h, self.seq_len, self.seq_len))
        out[:, self.i, self.j] = per_pair.T
        return out


@dataclass
class LayerFit:
    """One layer's edit: A [H, C, B], κ [H, C], and E [H, T, T] of every mode."""

    cells: np.ndarray
    key0: np.ndarray
    edits: dict[str, np.ndarray]


def visibility(scores: np.ndarray) -> np.ndarray:
    """The visible keys [T, T] of scores [N, H, T, T] (masked entries at a dtype minimum), checked equal across sequences and heads."""
    visible = scores > nr.FMIN32 / 2
    if not (visible == visible[:1, :1]).all():
        raise AssertionError("sequences or heads of one layer see different keys")
    return visible[0, 0]


@nr.blas_one_thread
def fit_layer(scores: np.ndarray, early: int = FIT_EARLY) -> tuple[LayerFit, Structure]:
    """Fit one layer's edit from its calibration scores [N, H, T, T] (float64), with the query bins of
    bound ``early``; checks the fixed point.

    Refitting g, β, h, A and κ to the edited mean scores s − E (mode ``all``) gives A = κ = 0 to 1e-9.
    """
    t = scores.shape[-1]
    bins = nr.ReferenceBins(t, early)
    st = Structure(visibility(scores), bins)
    mean = np.where(st.visible, scores, 0.0).mean(0)  # [H, T, T]; masked entries set to 0, never read
    y = st.values(mean)
    a, kappa = st.split(st.min_norm_edit(y))
    edits = {mode: st.edit(a, kappa, mode) for mode in MODES}
    again = st.min_norm_edit(y - st.values(edits["all"]))
    assert np.abs(again).max() <= FIXED_POINT_TOL, f"refit on s − E leaves |A|, |κ| up to {np.abs(again).max():.3g}"
    return LayerFit(a, kappa, edits), st


class _Done(Exception):
    """Raised by the last capture hook to end a forward pass early."""


def forward(model: Any, tokens: torch.Tensor, edits: dict[int, np.ndarray], capture: Sequence[int]) -> dict[int, np.ndarray]:
    """One forward pass with layer l's scores edited by ``edits[l]`` [H, T, T]; each layer in ``capture``
    is recorded before its own edit; the pass ends after the last captured layer's scores (later layers'
    edits change nothing captured). Returns {layer: scores [N, H, T, T] float64}."""
    store: dict[int, np.ndarray] = {}
    last = max(capture)

    def recorder(layer: int) -> Callable:
        def fn(scores: torch.Tensor, hook: Any) -> None:
            store[layer] = scores.detach().to("cpu", torch.float64).numpy().copy()
            if layer == last:  # nothing after the last captured scores is needed
                raise _Done

        return fn

    def editor(e: np.ndarray) -> Callable:
        def fn(scores: torch.Tensor, hook: Any) -> torch.Tensor:
            edit = torch.from_numpy(e).to(scores.device)
            return (scores.to(torch.float64) - edit[None]).to(scores.dtype)

        return fn

    hooks = list(model.variant_hooks())
    for layer in range(model.n_layers):
        if layer in capture:
            hooks.append((scores_hook(layer), recorder(layer)))
        if layer in edits:
            hooks.append((scores_hook(layer), editor(edits[layer])))
    try:
        with torch.inference_mode():
            model.bridge.run_with_hooks(tokens.to(model.device), fwd_hooks=hooks, return_type=None)
    except _Done:
        pass
    assert set(store) == set(capture)
    return store


@dataclass
class Calibration:
    """A bottom-up calibration in one mode: A [L, H, C, B], κ [L, H, C], E [L, H, T, T] of the mode."""

    mode: str
    cells: np.ndarray
    key0: np.ndarray
    edits: np.ndarray


@nr.blas_one_thread
def calibrate(model: Any, tokens: torch.Tensor, mode: str, early: int = FIT_EARLY) -> Calibration:
    """Fit every layer bottom-up: layer l on the forward with layers < l edited in ``mode`` (one forward per layer).

    ``early`` is the bound whose edge the fit's query bins gain (as in the measurement's bins)."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
    fits: list[LayerFit] = []
    for layer in range(model.n_layers):
        below = {k: f.edits[mode] for k, f in enumerate(fits)}
        scores = forward(model, tokens, below, [layer])[layer]
        fits.append(fit_layer(scores, early)[0])
    return Calibration(
        mode,
        np.stack([f.cells for f in fits]),
        np.stack([f.key0 for f in fits]),
        np.stack([f.edits[mode] for f in fits]),
    )


def edited_scores(model: Any, tokens: torch.Tensor, edits: np.ndarray | None) -> list[np.ndarray]:
    """Every layer's scores [N, H, T, T] with every layer edited (``edits`` [L, H, T, T]; None: unedited), each captured before its own edit."""
    layers = range(model.n_layers)
    store = forward(model, tokens, {} if edits is None else {l: edits[l] for l in layers}, list(layers))
    return [store[l] for l in layers]


@nr.blas_one_thread
def edited_figures(
    model: Any,
    tokens: torch.Tensor,
    edits: np.ndarray | None,
    early: int,
    groups: int,
    windows: Sequence[str] = ("early", "all"),
    metrics: Sequence[str] = ("leakage_pattern", "c_res", "c_mask"),
) -> dict[tuple[int, str], dict[str, np.ndarray]]:
    """{(layer, window): {metric: [H]}} of the edited forward, by ``naive_reference``'s explicit fits
    (per-sequence counterfactual cross-fitted over ``groups``; the saturated fit is skipped)."""
    scores = edited_scores(model, tokens, edits)
    bins = nr.ReferenceBins(tokens.shape[1], early)
    out = {}
    for layer, s in enumerate(scores):
        for w in windows:
            figures = nr.layer_metrics(nr.PairData(s, bins, w), saturated=False, groups=groups)
            out[(layer, w)] = {m: figures[m] for m in metrics}
    return out
