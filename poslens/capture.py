"""Hooks that reduce each layer's attention scores to cell sums while the forward runs.

For one layer the hook sees scores s [batch, head, T, T] (masked entries at the
dtype minimum). Per head it computes, in float64: log Z_i (logsumexp over the
visible keys), row sums of s, s² and j·s, the row features of METHOD §3.3 and,
from one cumulative sum along keys, the sum of s over each row's offset bins.
Those O(T × bins) pieces are folded into query bins with a one-hot matrix and
added to :class:`poslens.sums.CellSums`; nothing of size T² outlives the hook.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from poslens import hooks as hook_names
from poslens.binning import Binning
from poslens.sums import CellSums, FEATURES, WINDOWS


class MaskMismatchError(RuntimeError):
    """The scores' masked entries are not the ones poslens expects for this layer."""


class NonFiniteScoresError(FloatingPointError):
    """NaN or inf among the visible attention scores (e.g. float16 overflow)."""


def _non_finite(layer: int, head: int) -> NonFiniteScoresError:
    return NonFiniteScoresError(
        f"NaN or inf in the attention scores of layer {layer}, head {head} "
        "(in float16 this is usually overflow: use --dtype float32 or bfloat16)"
    )


@dataclass
class LayerStructure:
    """What is fixed about a layer's visible pairs at length T (causal, maybe windowed).

    Example:
        >>> st = LayerStructure.build(Binning(8), window=None)
        >>> st.n_visible.tolist()
        [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]
    """

    valid: torch.Tensor  # [T, T] bool
    n_visible: torch.Tensor  # [T] |V_i|
    per_bin: torch.Tensor  # [T, B] visible pairs of row i in offset bin b
    lo: torch.Tensor  # [T, B] gather index into the zero-padded cumsum
    hi: torch.Tensor  # [T, B]
    key_sum: torch.Tensor  # [T] Σ_{j∈V_i} j
    key_sq_sum: torch.Tensor  # [T] Σ_{j∈V_i} j²

    @classmethod
    def build(cls, binning: Binning, window: int | None) -> "LayerStructure":
        t = binning.seq_len
        i = torch.arange(t)[:, None]
        j = torch.arange(t)[None, :]
        valid = j <= i
        if window is not None:
            valid &= (i - j) < window
        first = torch.clamp(i[:, 0] - (window - 1), min=0) if window is not None else torch.zeros(t, dtype=torch.long)
        edges = torch.tensor(binning.offset_edges)
        # offsets Δ in [e_b, e_{b+1}) are keys j in (i − e_{b+1}, i − e_b]
        j_hi = i - edges[None, :-1]  # inclusive
        j_lo = i - edges[None, 1:] + 1
        j_lo = torch.maximum(j_lo, first[:, None])
        empty = j_hi < j_lo
        hi = torch.where(empty, 0, j_hi + 1)
        lo = torch.where(empty, 0, j_lo)
        per_bin = (hi - lo).double()
        valid_d = valid.double()
        jj = torch.arange(t, dtype=torch.float64)
        return cls(
            valid=valid,
            n_visible=valid_d.sum(-1),
            per_bin=per_bin,
            lo=lo,
            hi=hi,
            key_sum=valid_d @ jj,
            key_sq_sum=valid_d @ (jj * jj),
        )


class LeakageCapture:
    """Accumulates :class:`CellSums` for a model from hooks on every layer's scores.

    Set :attr:`group` before each forward pass; every sequence of one pass
    belongs to that group.

    Example:
        >>> capture = LeakageCapture(model, Binning(64), groups=4)  # doctest: +SKIP
        >>> capture.group = 0  # doctest: +SKIP
        >>> run_with_hooks(model, tokens, capture.hooks())  # doctest: +SKIP
    """

    def __init__(
        self, model: Any, binning: Binning, groups: int, probe: bool = True, check_mask: bool = True, chunk_elements: int = 1 << 22
    ) -> None:
        self.model = model
        self.chunk_elements = chunk_elements  # float64 elements per head step (32 MiB per copy)
        self.binning = binning
        self.probe = probe
        self.check_mask = check_mask
        self.sums = CellSums.zeros(groups, model.n_layers, model.n_heads, binning)
        self.group = 0
        self._structures: dict[int | None, LayerStructure] = {}
        self._checked: set[int] = set()
        self._buffers: tuple[torch.Tensor, torch.Tensor] | None = None
        t = binning.seq_len
        qbin = torch.as_tensor(binning.query_bin)
        self._fold = torch.zeros(binning.n_query_bins, t, dtype=torch.float64)
        self._fold[qbin, torch.arange(t)] = 1.0  # one-hot query bins, [C, T]
        self._positions = torch.arange(t, dtype=torch.float64)
        windows = binning.windows
        q_of_row = binning.query_bin
        self._window_rows = {
            w: torch.as_tensor(windows[w][q_of_row]) for w in WINDOWS
        }  # [T] bool: row i in window w

    def _workspace(self, batch: int, heads: int, t_q: int, t_k: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        shape = (batch, heads, t_q, t_k)
        if self._buffers is None or self._buffers[0].shape != shape or self._buffers[0].device != device:
            self._buffers = tuple(torch.empty(shape, dtype=torch.float64, device=device) for _ in range(2))
        return self._buffers

    def structure(self, layer: int) -> LayerStructure:
        window = self.model.window[layer]
        if window is not None and window >= self.binning.seq_len:
            window = None  # a window wider than the sequence changes nothing
        if window not in self._structures:
            self._structures[window] = LayerStructure.build(self.binning, window)
        return self._structures[window]

    def hooks(self) -> list[tuple[str, Any]]:
        """One hook per layer on ``blocks.{l}.attn.hook_attn_scores``."""
        return [(hook_names.attn_scores(layer), self._make_hook(layer)) for layer in range(self.model.n_layers)]

    def _make_hook(self, layer: int):
        def hook(scores: torch.Tensor, hook: Any) -> torch.Tensor:
            self.reduce(layer, scores)
            return scores

        return hook

    def add_structure(self, batch: int) -> None:
        """Add the structural (data-free) sums of ``batch`` sequences to the current group."""
        a, g, fold = self.sums.arrays, self.group, self._fold
        pos = self._positions
        for layer in range(self.model.n_layers):
            st = self.structure(layer)
            count = torch.log(st.n_visible)
            a["n"][g, layer] += batch * (fold @ st.per_bin).numpy()
            a["c1"][g, layer] += batch * (fold @ (count[:, None] * st.per_bin)).numpy()
            a["nq"][g, layer] += batch * (fold @ st.n_visible).numpy()
            a["c2"][g, layer] += batch * (fold @ (count**2 * st.n_visible)).numpy()
            a["i1"][g, layer] += batch * (fold @ (pos * st.n_visible)).numpy()
            a["ii"][g, layer] += batch * (fold @ (pos**2 * st.n_visible)).numpy()
            a["j1"][g, layer] += batch * (fold @ st.key_sum).numpy()
            a["jj"][g, layer] += batch * (fold @ st.key_sq_sum).numpy()
            a["ij"][g, layer] += batch * (fold @ (pos * st.key_sum)).numpy()
        a["rows"][g] += batch * fold.sum(-1).numpy()
        self.sums.group_sizes[g] += batch
        self.sums.row_count += batch

    def reduce(self, layer: int, scores: torch.Tensor) -> None:
        """Fold one layer's scores [batch, head, T, T] into the sums of the current group."""
        batch, heads, t_q, t_k = scores.shape
        if t_q != t_k or t_q != self.binning.seq_len:
            raise ValueError(f"expected scores of {self.binning.seq_len}×{self.binning.seq_len}, got {t_q}×{t_k}")
        st = self.structure(layer)
        valid = st.valid.to(scores.device)
        if self.check_mask and layer not in self._checked:
            self._check_mask(layer, scores[:1], valid)  # the first sequence; later NaNs are caught per chunk
            self._checked.add(layer)
        a, g, fold = self.sums.arrays, self.group, self._fold
        pos = self._positions
        b_count = self.binning.n_offset_bins
        lo = st.lo.to(scores.device)[None].expand(batch, t_q, b_count)
        hi = st.hi.to(scores.device)[None].expand(batch, t_q, b_count)
        keys = pos.to(scores.device)
        features = torch.empty(batch, heads, t_q, len(FEATURES), dtype=torch.float64, device=scores.device)
        key_weights = torch.stack([torch.ones_like(keys), keys], dim=-1)  # [T, 2]
        lo_used, hi_used = lo > 0, hi > 0
        lo_at, hi_at = (lo - 1).clamp(min=0), (hi - 1).clamp(min=0)
        invisible = ~valid
        fold_d = fold.to(scores.device)
        per_bin, n_visible = st.per_bin.to(scores.device), st.n_visible.to(scores.device)
        chunk = max(1, self.chunk_elements // (batch * t_q * t_k))  # heads per step, bounding float64 copies
        for h0 in range(0, heads, chunk):
            h1 = min(heads, h0 + chunk)
            # two reused float64 work buffers: fresh 32 MiB allocations cost page faults on every call
            s, exp_s = self._workspace(scores.shape[0], h1 - h0, t_q, t_k, scores.device)
            s.copy_(scores[:, h0:h1])  # [batch, h, T, T], ours to modify
            row_max = s.amax(-1, keepdim=True)
            # one exp pass gives log Z, the weights and the entropy; masked entries underflow to 0
            torch.sub(s, row_max, out=exp_s).exp_()
            partition = exp_s.sum(-1)
            log_z = row_max[..., 0] + torch.log(partition)
            visible = s.masked_fill_(invisible, 0.0)  # reuses s's memory
            moments = visible @ key_weights  # row sums of s and of j·s
            row_sum, row_js = moments[..., 0], moments[..., 1]
            if not torch.isfinite(row_sum).all() or not torch.isfinite(log_z).all():
                bad = h0 + int(torch.nonzero(~(torch.isfinite(row_sum) & torch.isfinite(log_z)))[0, 1])
                raise _non_finite(layer, bad)
            row_sq = torch.einsum("...j,...j->...", visible, visible)  # einsum: no full-size temporary
            mean_logit = torch.einsum("...j,...j->...", exp_s, visible) / partition  # Σ_j a_ij s_ij
            features[:, h0:h1, :, 0] = exp_s[..., 0] / partition
            features[:, h0:h1, :, 1] = log_z - mean_logit
            features[:, h0:h1, :, 2] = torch.diagonal(exp_s, dim1=-2, dim2=-1) / partition
            features[:, h0:h1, :, 3] = 1.0 / partition  # the row maximum has exp_s = 1
            del exp_s
            running = visible.cumsum_(-1)  # in place: visible is not needed any more
            n = h1 - h0
            hi_i, lo_i = hi_at[:, None].expand(batch, n, t_q, b_count), lo_at[:, None].expand(batch, n, t_q, b_count)
            bin_sums = (running.gather(-1, hi_i) * hi_used[:, None] - running.gather(-1, lo_i) * lo_used[:, None]).sum(0)
            del visible, running
            z_sum = log_z.sum(0)  # [h, T]
            a["s1"][g, layer, h0:h1] += torch.einsum("ct,htb->hcb", fold_d, bin_sums).cpu().numpy()
            a["z1"][g, layer, h0:h1] += torch.einsum("ct,ht,tb->hcb", fold_d, z_sum, per_bin).cpu().numpy()
            mean_sum = (row_sum / n_visible).sum(0)  # Σ over sequences of m_i, [h, T]
            a["m1"][g, layer, h0:h1] += torch.einsum("ct,ht,tb->hcb", fold_d, mean_sum, per_bin).cpu().numpy()
            a["s2"][g, layer, h0:h1] += (row_sq.sum(0) @ fold_d.T).cpu().numpy()
            a["z2"][g, layer, h0:h1] += (((log_z**2).sum(0) * n_visible) @ fold_d.T).cpu().numpy()
            a["sz"][g, layer, h0:h1] += ((log_z * row_sum).sum(0) @ fold_d.T).cpu().numpy()
            a["si"][g, layer, h0:h1] += ((row_sum.sum(0) * keys) @ fold_d.T).cpu().numpy()
            a["sj"][g, layer, h0:h1] += (row_js.sum(0) @ fold_d.T).cpu().numpy()
        features = features.permute(0, 2, 1, 3).cpu()  # [batch, T, H, F]
        per_row = features.sum(0)  # [T, H, F]
        a["feat"][g, layer] += torch.einsum("ct,thf->hfc", fold, per_row).numpy()
        self.sums.row_features[layer] += per_row.permute(1, 2, 0).numpy()
        if self.probe:
            self._add_probe(layer, features)

    def _add_probe(self, layer: int, features: torch.Tensor) -> None:
        a, g = self.sums.arrays, self.group
        batch, t, heads, n_feat = features.shape
        x = torch.cat([torch.ones(batch, t, 1, dtype=torch.float64), features.reshape(batch, t, heads * n_feat)], -1)
        y = torch.log1p(self._positions)[None, :].expand(batch, t)
        for w_index, window in enumerate(WINDOWS):
            rows = self._window_rows[window]
            xs, ys = x[:, rows].reshape(-1, x.shape[-1]), y[:, rows].reshape(-1)
            a["xtx"][g, layer, w_index] += (xs.T @ xs).numpy()
            a["xty"][g, layer, w_index] += (xs.T @ ys).numpy()
            a["y1"][g, layer, w_index] += float(ys.sum())
            a["yy"][g, layer, w_index] += float((ys * ys).sum())
            a["pn"][g, layer, w_index] += ys.numel()

    def _check_mask(self, layer: int, scores: torch.Tensor, valid: torch.Tensor) -> None:
        # NaN or +inf anywhere (an overflowed score plus the mask stays +inf), or −inf on a visible key:
        # report the overflow itself rather than a mask mismatch.
        bad = torch.isnan(scores) | torch.isposinf(scores) | (torch.isneginf(scores) & valid)
        if bad.any():
            raise _non_finite(layer, int(torch.nonzero(bad)[0, 1]))
        lowest = torch.finfo(scores.dtype).min
        finite = scores > lowest / 2
        if (finite & ~valid).any():
            raise MaskMismatchError(
                f"layer {layer}: keys poslens treats as invisible (window={self.model.window[layer]}) carry finite "
                "scores; the model's mask differs from the one recorded on the model"
            )
        if (valid & ~finite).any():
            raise MaskMismatchError(
                f"layer {layer}: keys poslens treats as visible are masked in the scores "
                f"(window={self.model.window[layer]}); padding is not supported, use equal-length sequences"
            )

