"""A dense, independent reference for the sink-path split (methodology §13).

The definitions are those of the split's specification, written out once more with explicit arrays:

- one unedited forward keeps every layer's scores, patterns and the residual stream entering each block; for every
  edited head (l, h), sequence n and row i in R_l = {1 ≤ i < T, i < W_l} it gives ℓ_{n,i} (the logsumexp of the visible
  logits of keys j ≥ 1) and a_{n,i0}; cross-fitted over the other groups' sequences, ℓrow^(−g)(i), ℓbar^(−g), abar^(−g);
- the edits m, p, mp and s rebuild the rows R_l of every edited head, all at once in one forward, from that forward's
  own scores (an edit of an earlier layer reaches a later one): a_i0 = σ(x_i), a_ij = σ(−x_i)·softmax_{j ≥ 1}(s_ij), with
  x_i the key-0 logit less ℓ_i, shifted by the row's cross-fitted profile (m), by the phase change Δ_i of moving the
  query to position D (p, computed with this module's own RoPE of the un-rotated ``hook_q`` and the rotated key 0), or
  both (mp); s sets a_i0 = abar^(−g);
- the readouts V (the code: the unedited run's cross-fitted probe applied to the edited residual stream, its mean
  prediction's variance over positions) and R² (the content: a probe refitted on the edited run, cross-fitted), per
  layer, and f (their mean over layers ≥ 2), with the derived figures φ_m, φ_p, the interaction, share_m, r1, r2,
  sink_total, sink_share and coverage.

The forward is :class:`path_reference.ReferenceForward` (its own RoPE, checked against the model's scores at every
layer). With ``float64_softmax`` every head's pattern is replaced by the float64 softmax of its scores before the edit
(transformers' eager attention takes its softmax in float32 even for a float64 model). Nothing here comes from poslens'
rotary, key-phase, sink-split, capture, batching or fit code: only the loaded model object is shared.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).parent))
import path_reference as pr  # noqa: E402

EDITS = ("m", "p", "mp", "s")
READOUTS = ("V", "R2")
DERIVED = ("phi_m", "phi_p", "interaction", "share_m", "r1", "r2", "sink_total", "sink_share", "coverage")
FIRST_LAYER_OF_F = 2


def group_of(n_seqs: int, groups: int) -> np.ndarray:
    """The group of every sequence: contiguous near-equal blocks, k·G // N."""
    return (np.arange(n_seqs) * groups) // n_seqs


def key0_rows(seq_len: int, window: int | None) -> np.ndarray:
    """R_l as a mask [T]: the rows 1 ≤ i < T that see key 0 under a sliding window ``window`` (None: full causal)."""
    i = np.arange(seq_len)
    return (i >= 1) & ((i < window) if window is not None else True)


def visible(scores: np.ndarray | torch.Tensor):
    """The visible (unmasked) entries of pre-softmax scores: masked ones sit at a dtype's minimum or −inf."""
    return scores > pr.FMIN32 / 2


# ----- the unedited run's statistics -----------------------------------------------------------------------------


@dataclass
class HeadStatistics:
    """One edited head's statistics from the unedited run. ``ell`` and ``a0`` [N, T] (NaN off R_l); ``rows`` R_l [T];
    cross-fitted per group g: ``ellrow`` [G, T] (NaN off R_l), ``ellbar`` [G], ``abar`` [G]."""

    rows: np.ndarray
    ell: np.ndarray
    a0: np.ndarray
    ellrow: np.ndarray
    ellbar: np.ndarray
    abar: np.ndarray


def head_statistics(scores: np.ndarray, window: int | None, seq_groups: np.ndarray, n_groups: int) -> HeadStatistics:
    """ℓ_{n,i} = logsumexp_{j ≥ 1 visible} s_ij and a_{n,i0} = softmax(s_i)_0 on R_l, and their cross-fitted means.

    ``scores``: one head's unedited scores [N, T, T], float64."""
    n, t, _ = scores.shape
    rows = key0_rows(t, window)
    seen = visible(scores)
    assert np.array_equal(seen[:, :, 0], np.broadcast_to(rows | (np.arange(t) == 0), (n, t))), "key 0's visibility is not R_l"
    ell = np.full((n, t), np.nan)
    a0 = np.full((n, t), np.nan)
    for k in range(n):
        for i in np.flatnonzero(rows):
            rest = scores[k, i, 1:][seen[k, i, 1:]]
            top = rest.max()
            ell[k, i] = top + np.log(np.exp(rest - top).sum())
            row = scores[k, i][seen[k, i]]
            peak = row.max()
            a0[k, i] = np.exp(scores[k, i, 0] - peak) / np.exp(row - peak).sum()
    ellrow = np.full((n_groups, t), np.nan)
    ellbar = np.zeros(n_groups)
    abar = np.zeros(n_groups)
    for g in range(n_groups):
        others = seq_groups != g
        ellrow[g, rows] = ell[others][:, rows].mean(0)
        ellbar[g] = ellrow[g, rows].mean()
        abar[g] = a0[others][:, rows].mean()
    return HeadStatistics(rows, ell, a0, ellrow, ellbar, abar)


# ----- the edits --------------------------------------------------------------------------------------------------


def rebuild_row(scores: torch.Tensor, a_key0: torch.Tensor, a_rest: torch.Tensor) -> torch.Tensor:
    """One row rebuilt: [a_key0, a_rest · softmax_{j ≥ 1 visible}(s_j)]; ``scores`` [T] float64."""
    rest = scores[1:].masked_fill(~visible(scores[1:]), float("-inf"))
    return torch.cat([a_key0.reshape(1), a_rest * torch.softmax(rest, 0)])


class SplitEdit:
    """The hooks of one run of the split for :meth:`path_reference.ReferenceForward.run`.

    ``kind`` is ``"none"``, ``"m"``, ``"p"``, ``"mp"`` or ``"s"``. ``phase_positions`` [T] is the position each row's
    query is moved to by p (default: D at every row; the rows' own positions give Δ = 0, a check). ``profile`` False
    drops the m shift ℓrow^(−g)(i) − ℓbar^(−g) (x_i = s_i0 − ℓ_i: the identity, a check)."""

    def __init__(
        self,
        ref: pr.ReferenceForward,
        kind: str,
        stats: dict[tuple[int, int], HeadStatistics],
        seq_groups: np.ndarray,
        windows: Sequence[int | None],
        offset: int,
        seq_len: int,
        float64_softmax: bool = True,
        phase_positions: torch.Tensor | None = None,
        profile: bool = True,
    ):
        assert kind in ("none", *EDITS), kind
        self.ref, self.kind, self.stats, self.seq_groups, self.windows = ref, kind, stats, seq_groups, windows
        self.float64_softmax, self.profile = float64_softmax, profile
        self.phase_positions = torch.full((seq_len,), offset) if phase_positions is None else phase_positions
        self.heads_of: dict[int, list[int]] = {}
        for layer, head in stats:
            self.heads_of.setdefault(layer, []).append(head)
        self.qk: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def edit_scores(self, layer: int, scores: torch.Tensor, q_raw: torch.Tensor, k_rot: torch.Tensor, rows: np.ndarray) -> None:
        """Keeps the un-rotated queries and the reference's rotated keys (every query head's), [B, T, H, d]; no edit."""
        self.qk[layer] = (q_raw, k_rot)
        return None

    def phase_shift(self, layer: int, head: int) -> torch.Tensor:
        """Δ_i = scale·⟨R_D q_i, R_0 k_0⟩ − scale·⟨R_i q_i, R_0 k_0⟩ for every row of the batch, [B, T]."""
        q_raw, k_rot = self.qk[layer]
        q = q_raw[:, :, head].to(torch.float64)  # [B, T, d], un-rotated
        t = q.shape[1]
        k0 = k_rot[:, 0, head].to(torch.float64)  # [B, d], R_0 k_0
        moved = pr.rope(q, self.phase_positions, self.ref.freqs)
        own = pr.rope(q, torch.arange(t), self.ref.freqs)
        return self.ref.scale * (moved * k0[:, None]).sum(-1) - self.ref.scale * (own * k0[:, None]).sum(-1)

    def edit_pattern(self, layer: int, pattern: torch.Tensor, scores: torch.Tensor, rows: np.ndarray) -> torch.Tensor | None:
        """Every head's pattern as the float64 softmax of its scores (if asked), then the edited heads' rows R_l rebuilt."""
        if self.float64_softmax:
            pattern = torch.softmax(scores.masked_fill(~visible(scores), float("-inf")), -1)
        if self.kind == "none" or layer not in self.heads_of:
            return pattern if self.float64_softmax else None
        for head in self.heads_of[layer]:
            st = self.stats[(layer, head)]
            delta = self.phase_shift(layer, head) if "p" in self.kind else None
            for b, n in enumerate(rows):
                g = self.seq_groups[n]
                for i in np.flatnonzero(st.rows):
                    s = scores[b, head, i]
                    if self.kind == "s":
                        a_key0 = torch.tensor(st.abar[g], dtype=torch.float64)
                        pattern[b, head, i] = rebuild_row(s, a_key0, 1 - a_key0)
                        continue
                    ell = torch.logsumexp(s[1:][visible(s[1:])], 0)
                    x = s[0] + delta[b, i] - ell if "p" in self.kind else s[0] - ell
                    if "m" in self.kind and self.profile:
                        x = x + (st.ellrow[g, i] - st.ellbar[g])
                    pattern[b, head, i] = rebuild_row(s, torch.sigmoid(x), torch.sigmoid(-x))
        return pattern


# ----- the readouts -----------------------------------------------------------------------------------------------


def fit_probe(x: np.ndarray, y: np.ndarray, penalty: float) -> np.ndarray:
    """θ = [intercept, w] of ridge on standardized features, written as the spec writes it.

    Population means μ_x, μ_y, covariance C = cov(x), c = cov(x, y), v = diag(C); features with v ≤ 1e-12·max(v) get
    weight 0; (C + penalty·diag(v)) w = c on the kept ones; intercept = μ_y − μ_x·w."""
    m = x.shape[0]
    mu_x, mu_y = x.mean(0), y.mean()
    xc = x - mu_x
    cov = xc.T @ xc / m
    c = xc.T @ (y - mu_y) / m
    v = np.diag(cov)
    keep = v > 1e-12 * v.max()
    w = np.zeros(x.shape[1])
    w[keep] = np.linalg.solve(cov[np.ix_(keep, keep)] + penalty * np.diag(v[keep]), c[keep])
    return np.concatenate([[mu_y - mu_x @ w], w])


def design(features: np.ndarray) -> np.ndarray:
    """The design matrix [1, x] of rows i = 1..T − 1 of every sequence: [N, T − 1, 1 + d]."""
    x = features[:, 1:]
    return np.concatenate([np.ones(x.shape[:-1] + (1,)), x], -1)


def target(seq_len: int) -> np.ndarray:
    """y_i = log(i + 1) for i = 1..T − 1."""
    return np.log(np.arange(1, seq_len) + 1.0)


def code_readout(unedited: np.ndarray, edited: np.ndarray, seq_groups: np.ndarray, n_groups: int, penalty: float) -> float:
    """V of one layer: θ0^(−g) fitted on the unedited run's other groups, applied to the edited run's rows of group g's
    sequences; the mean prediction over all sequences per position; its variance (ddof 0) over positions 1..T − 1."""
    n, t, _ = unedited.shape
    x0, xe, y = design(unedited), design(edited), target(t)
    yhat = np.zeros((n, t - 1))
    for g in range(n_groups):
        train = seq_groups != g
        theta = fit_probe(x0[train].reshape(-1, x0.shape[-1])[:, 1:], np.tile(y, train.sum()), penalty)
        yhat[seq_groups == g] = xe[seq_groups == g] @ theta
    return float(np.var(yhat.mean(0)))


def content_readout(edited: np.ndarray, seq_groups: np.ndarray, n_groups: int, penalty: float) -> float:
    """R² of one layer: θ_e^(−g) refitted on the edited run's other groups; 1 − Σ_g SSE_g / Σ_g SST_g."""
    n, t, _ = edited.shape
    xe, y = design(edited), target(t)
    sse = sst = 0.0
    for g in range(n_groups):
        train, test = seq_groups != g, seq_groups == g
        theta = fit_probe(xe[train].reshape(-1, xe.shape[-1])[:, 1:], np.tile(y, train.sum()), penalty)
        y_test = np.tile(y, test.sum())
        sse += ((y_test - xe[test].reshape(-1, xe.shape[-1]) @ theta) ** 2).sum()
        sst += ((y_test - y_test.mean()) ** 2).sum()
    return float(1 - sse / sst)


def derived_figures(f: dict[str, float]) -> dict[str, float]:
    """φ_m, φ_p, the interaction, share_m, r1, r2, sink_total, sink_share and coverage from f of none, m, p, mp, s."""
    f0, fm, fp, fmp, fs = (f[e] for e in ("none", "m", "p", "mp", "s"))
    phi_m = 0.5 * ((f0 - fm) + (fp - fmp))
    phi_p = 0.5 * ((f0 - fp) + (fm - fmp))
    return {
        "phi_m": phi_m,
        "phi_p": phi_p,
        "interaction": f0 - fm - fp + fmp,
        "share_m": phi_m / (phi_m + phi_p),
        "r1": (f0 - fm) / (f0 - fmp),
        "r2": (fp - fmp) / (f0 - fmp),
        "sink_total": f0 - fs,
        "sink_share": (f0 - fs) / f0,
        "coverage": (phi_m + phi_p) / (f0 - fs),
    }


# ----- the whole split --------------------------------------------------------------------------------------------


@dataclass
class SplitReference:
    """The reference's split. ``levels[(readout, run)]`` [L] per layer, ``f[(readout, run)]`` the mean over layers ≥ 2,
    ``derived[(readout, metric)]``; ``forwards[run]`` every tensor of each run, ``stats`` the edited heads' statistics."""

    levels: dict[tuple[str, str], np.ndarray] = field(default_factory=dict)
    f: dict[tuple[str, str], float] = field(default_factory=dict)
    derived: dict[tuple[str, str], float] = field(default_factory=dict)
    forwards: dict[str, pr.Forward] = field(default_factory=dict)
    stats: dict[tuple[int, int], HeadStatistics] = field(default_factory=dict)


def levels_of(resid: Sequence[np.ndarray], unedited: Sequence[np.ndarray], seq_groups: np.ndarray, n_groups: int, penalty: float):
    """V and R² of every layer, [L] each, from a run's residual streams and the unedited run's."""
    v = np.array([code_readout(unedited[l], resid[l], seq_groups, n_groups, penalty) for l in range(len(resid))])
    r2 = np.array([content_readout(resid[l], seq_groups, n_groups, penalty) for l in range(len(resid))])
    return {"V": v, "R2": r2}


def sink_split_reference(
    model: Any,
    tokens: torch.Tensor,
    heads: Sequence[tuple[int, int]],
    groups: int,
    offset: int,
    penalty: float = 0.1,
    batch_size: int = 4,
    float64_softmax: bool = True,
) -> SplitReference:
    """The split of ``model`` on ``tokens`` [N, T]: the unedited run, the runs m, p, mp and s, their levels and figures."""
    ref = pr.ReferenceForward(model)
    n, t = tokens.shape
    seq_groups = group_of(n, groups)
    windows = list(model.sliding_windows)
    out = SplitReference()
    plain = SplitEdit(ref, "none", {}, seq_groups, windows, offset, t, float64_softmax)
    out.forwards["none"] = ref.run(tokens, edit_scores=plain.edit_scores, edit_pattern=plain.edit_pattern, batch_size=batch_size)
    unedited = out.forwards["none"]
    for layer, head in heads:
        out.stats[(layer, head)] = head_statistics(unedited.scores[layer][:, head], windows[layer], seq_groups, groups)
    for kind in EDITS:
        edit = SplitEdit(ref, kind, out.stats, seq_groups, windows, offset, t, float64_softmax)
        out.forwards[kind] = ref.run(tokens, edit_scores=edit.edit_scores, edit_pattern=edit.edit_pattern, batch_size=batch_size)
    for run, forward in out.forwards.items():
        for readout, per_layer in levels_of(forward.resid, unedited.resid, seq_groups, groups, penalty).items():
            out.levels[(readout, run)] = per_layer
            out.f[(readout, run)] = float(per_layer[FIRST_LAYER_OF_F:].mean())
    for readout in READOUTS:
        for metric, value in derived_figures({run: out.f[(readout, run)] for run in ("none", *EDITS)}).items():
            out.derived[(readout, metric)] = value
    return out
