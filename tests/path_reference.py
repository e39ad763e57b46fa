"""A dense, independent reference for the path-specific tests (methodology §12).

Nothing here comes from poslens' rotary, key-phase, mask-only, capture, batching or
fit code. The reference

- computes RoPE itself from the model's config (θ from ``rope_parameters`` or ``rope_theta``,
  the rotated width from ``partial_rotary_factor`` for the classes that honour it, rotate-half
  pairing, angles in float64) and checks, at every layer, that its own rotation of the
  un-rotated ``hook_q`` / ``hook_k`` reproduces the model's scores;
- edits the forward with its own hooks: edit P0 *replaces* each visible logit of key p by
  scale·⟨R_{p+D} q_i, R_p k_p⟩ (rows i > p); edit M replaces a_i0 by a'_i0 computed from the
  sequence's scores minus a cross-fitted absolute component written out as in
  ``naive_reference.perseq_log_ap`` (fit g, β, h on the other groups' pairs, the residual's
  cell means), and rescales the rest of the row;
- keeps every tensor whole (scores before each layer's own edit, patterns, the residual stream
  entering each block, each attention output, the logits) and computes the readouts from them with
  explicit arrays: L(log a) and its parts by one-hot least squares (``naive_reference``), the ridge
  probe on standardized features fold by fold, η² from per-position means, the next-token loss.

Only the model object (``poslens.load_model``) and the hook names of the bridge are shared.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).parent))
import naive_reference as nr  # noqa: E402

#: Model types whose transformers classes rotate only partial_rotary_factor of each head.
HONOURS_PARTIAL = {"stablelm", "phi", "gpt_neox", "persimmon"}
FMIN32 = float(np.finfo(np.float32).min)


def rope_frequencies(config: Any) -> torch.Tensor:
    """θ^(−2k/r) for k < r/2 from the config alone, in float32 as transformers computes them (its RoPE tables are
    float32: a float64 RoPE misses a float64 model's own logits by ~5e-8, above this reference's tolerance)."""
    params = getattr(config, "rope_parameters", None) or {}
    theta = float(params.get("rope_theta", getattr(config, "rope_theta", 10000.0)))
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    factor = params.get("partial_rotary_factor", getattr(config, "partial_rotary_factor", 1.0)) if config.model_type in HONOURS_PARTIAL else 1.0
    rotated = int(head_dim * float(factor or 1.0))
    return 1.0 / (theta ** (torch.arange(0, rotated, 2, dtype=torch.int64).float() / rotated))


def rope(x: torch.Tensor, positions: torch.Tensor, freqs: torch.Tensor) -> torch.Tensor:
    """R_p x for x [..., n, d] at positions [n]: the first 2·len(freqs) dimensions rotated in halves, float64
    (the angles and their cos/sin in float32, then float64, as the model's tables)."""
    half = len(freqs)
    angle = positions.float()[:, None] * freqs[None, :]  # [n, half], float32
    cos, sin = torch.cos(angle).to(torch.float64), torch.sin(angle).to(torch.float64)
    x = x.to(torch.float64)
    x1, x2, rest = x[..., :half], x[..., half : 2 * half], x[..., 2 * half :]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin, rest], dim=-1)


@dataclass
class Forward:
    """Everything one reference forward kept, float64 numpy: per layer scores [N, H, T, T] (before the layer's own
    edit), patterns [N, H, T, T] (after it), resid [N, T, d] (entering the block), attn_out [N, T, d]; logits [N, T, V]."""

    scores: list[np.ndarray]
    patterns: list[np.ndarray]
    resid: list[np.ndarray]
    attn_out: list[np.ndarray]
    logits: np.ndarray


class ReferenceForward:
    """Runs the bridge with the reference's own hooks and keeps every tensor (see :class:`Forward`)."""

    def __init__(self, model: Any):
        self.model = model
        self.config = model.hf_model.config.get_text_config()
        self.freqs = rope_frequencies(self.config)
        head_dim = getattr(self.config, "head_dim", None) or self.config.hidden_size // self.config.num_attention_heads
        self.scale = head_dim**-0.5
        self.n_layers = self.config.num_hidden_layers

    def run(self, tokens: torch.Tensor, edit_scores=None, edit_pattern=None, batch_size: int = 4) -> Forward:
        """``edit_scores(layer, scores, q_raw, k_rot, batch_rows)`` and ``edit_pattern(layer, pattern, scores, batch_rows)``
        return replacements (or None); q_raw is ``hook_q`` (un-rotated), k_rot the reference's own rotated keys
        repeated to every query head, [B, T, H, d]."""
        parts: dict[str, list] = {name: [[] for _ in range(self.n_layers)] for name in ("scores", "patterns", "resid", "attn_out")}
        logits = []
        t = tokens.shape[1]
        positions = torch.arange(t)
        for start in range(0, tokens.shape[0], batch_size):
            batch = tokens[start : start + batch_size]
            rows = np.arange(start, start + len(batch))
            stash: dict[tuple[int, str], torch.Tensor] = {}
            kept: dict[int, torch.Tensor] = {}

            def hooks_of(layer: int, stash: dict = stash, kept: dict = kept, rows: np.ndarray = rows) -> list:
                def keep_qk(which: str):
                    def fn(x: torch.Tensor, hook: Any) -> None:
                        stash[(layer, f"{which}_raw")] = x.detach().to(torch.float64)  # [B, T, heads, d], un-rotated
                        stash[(layer, which)] = rope(x.transpose(1, 2), positions, self.freqs).transpose(1, 2)  # rotated

                    return fn

                def on_scores(scores: torch.Tensor, hook: Any) -> torch.Tensor | None:
                    q, k = stash[(layer, "q")], stash[(layer, "k")]
                    k = k.repeat_interleave(q.shape[2] // k.shape[2], dim=2)  # every query head's key
                    own = torch.einsum("bihd,bjhd->bhij", q, k) * self.scale
                    visible = scores > FMIN32 / 2
                    gap = (own - scores.to(torch.float64))[visible].abs().max()
                    assert gap < 1e-9, f"the reference's own RoPE misses the model's scores at layer {layer} by {gap:.2e}"
                    parts["scores"][layer].append(scores.detach().to(torch.float64).cpu().numpy().copy())
                    kept[layer] = scores.detach().to(torch.float64)
                    if edit_scores is None:
                        return None
                    new = edit_scores(layer, scores.detach().to(torch.float64).clone(), stash[(layer, "q_raw")], k, rows)
                    return None if new is None else new.to(scores.dtype)

                def on_pattern(pattern: torch.Tensor, hook: Any) -> torch.Tensor | None:
                    out = None
                    if edit_pattern is not None:
                        new = edit_pattern(layer, pattern.detach().to(torch.float64).clone(), kept[layer], rows)
                        out = None if new is None else new.to(pattern.dtype)
                    parts["patterns"][layer].append((pattern if out is None else out).detach().to(torch.float64).cpu().numpy().copy())
                    return out

                def keep(name: str):
                    def fn(x: torch.Tensor, hook: Any) -> None:
                        parts[name][layer].append(x.detach().to(torch.float64).cpu().numpy().copy())

                    return fn

                return [
                    (f"blocks.{layer}.hook_resid_pre", keep("resid")),
                    (f"blocks.{layer}.attn.hook_q", keep_qk("q")),
                    (f"blocks.{layer}.attn.hook_k", keep_qk("k")),
                    (f"blocks.{layer}.attn.hook_attn_scores", on_scores),
                    (f"blocks.{layer}.attn.hook_pattern", on_pattern),
                    (f"blocks.{layer}.hook_attn_out", keep("attn_out")),
                ]

            hooks = [h for layer in range(self.n_layers) for h in hooks_of(layer)]
            with torch.inference_mode():
                out = self.model.bridge.run_with_hooks(batch, fwd_hooks=list(self.model.variant_hooks()) + hooks, return_type="logits")
            logits.append(out.to(torch.float64).cpu().numpy())
        cat = {name: [np.concatenate(x) for x in per_layer] for name, per_layer in parts.items()}
        return Forward(cat["scores"], cat["patterns"], cat["resid"], cat["attn_out"], np.concatenate(logits))

    def key_phase_edit(self, key: int, offset: int, window_of):
        """The P0 edit (key 0) or its sham (key 1): visible logits of key ``key`` at rows i > key replaced, written out."""

        def edit(layer: int, scores: torch.Tensor, q_raw: torch.Tensor, k: torch.Tensor, rows: np.ndarray) -> torch.Tensor:
            t = scores.shape[-1]
            window = window_of(layer)
            for i in range(key + 1, t):
                if window is not None and i - key >= window:
                    continue
                # the query as it would be at position key + D: its un-rotated vector rotated there
                q_frozen = rope(q_raw[:, i : i + 1].transpose(1, 2), torch.tensor([key + offset]), self.freqs)[:, :, 0]  # [B, H, d]
                k_key = k[:, key]  # [B, H, d], already R_key k_key
                scores[:, :, i, key] = self.scale * (q_frozen * k_key).sum(-1)
            return scores

        return edit


# ----- readouts, written out -------------------------------------------------------------------------------------


def pattern_parts(scores: np.ndarray, early: int, window: str) -> dict[str, np.ndarray]:
    """L(log a), ‖P(log a)‖² per pair and SST(log a) per pair of each head [H], by one-hot least squares."""
    data = nr.PairData(scores, nr.ReferenceBins(scores.shape[-1], early), window)
    y = data.y_loga
    f_r = nr.fitted(data.design_r(), y)
    f_f = nr.fitted(data.design_f(), y)
    numerator = ((f_f - f_r) ** 2).sum(0)
    total = nr.sst(y)
    return {
        "leakage_pattern": numerator / total,
        "leakage_pattern_numerator": numerator / y.shape[0],
        "leakage_pattern_sst": total / y.shape[0],
    }


def probe(features: np.ndarray, groups: int, penalty: float) -> tuple[float, np.ndarray]:
    """Held-out R² of ridge on standardized features, rows 1 ≤ i < T of every sequence, target log(i + 1).

    ``features``: [N, T, d]. Returns (pooled R² = 1 − ΣSSE/ΣSST, per-fold R² [G])."""
    n, t, _ = features.shape
    x = features[:, 1:].reshape(n * (t - 1), -1)
    y = np.tile(np.log(np.arange(1, t) + 1.0), n)
    label = np.repeat(nr.group_of(n, groups), t - 1)
    sse, sst = np.zeros(groups), np.zeros(groups)
    for g in range(groups):
        train, test = label != g, label == g
        mu, sd = x[train].mean(0), x[train].std(0)
        keep = sd > 1e-6 * max(sd.max(), 1e-300)
        xs = (x[train][:, keep] - mu[keep]) / sd[keep]
        yc = y[train] - y[train].mean()
        m = train.sum()
        w = np.linalg.solve(xs.T @ xs / m + penalty * np.eye(keep.sum()), xs.T @ yc / m)
        pred = y[train].mean() + ((x[test][:, keep] - mu[keep]) / sd[keep]) @ w
        sse[g] = ((y[test] - pred) ** 2).sum()
        sst[g] = ((y[test] - y[test].mean()) ** 2).sum()
    return 1 - sse.sum() / sst.sum(), 1 - sse / sst


def eta_squared(features: np.ndarray) -> float:
    """Share of the variance of x (rows 1 ≤ i < T, summed over dimensions) explained by the exact position."""
    x = features[:, 1:]  # [N, T − 1, d]
    grand = x.reshape(-1, x.shape[-1]).mean(0)
    between = x.shape[0] * ((x.mean(0) - grand) ** 2).sum()
    total = ((x - grand) ** 2).sum()
    return between / total


def next_token_loss(logits: np.ndarray, tokens: np.ndarray) -> np.ndarray:
    """−log p(token i + 1 | ≤ i), [N, T − 1]."""
    z = logits[:, :-1]
    log_z = np.log(np.exp(z - z.max(-1, keepdims=True)).sum(-1)) + z.max(-1)
    return log_z - np.take_along_axis(z, tokens[:, 1:, None], -1)[..., 0]


def absolute_cells(scores: np.ndarray, groups: int, early: int) -> np.ndarray:
    """Each group's absolute component per cell, fitted on the other groups (query window ``all``): [G, H, C·B].

    As ``naive_reference.perseq_log_ap`` writes it: fit s ≈ g(i − j) + β[j = 0] + h(i) on the other groups' pairs,
    A_{c,b} = the mean of the residual over those pairs in cell (query bin c, offset bin b)."""
    data = nr.PairData(scores, nr.ReferenceBins(scores.shape[-1], early), "all")
    labels = nr.group_of(data.n_seqs, groups)
    g_pair = labels[data.n]
    n_cells = data.n_query_bins * data.n_offset_bins
    out = np.zeros((groups, data.n_heads, n_cells))
    for gamma in range(groups):
        train = g_pair != gamma
        _, _, fit = nr.exact_fit(data, data.y_s, train)
        resid = data.y_s[train] - fit[train]
        sums = np.zeros((n_cells, data.n_heads))
        np.add.at(sums, data.cell[train], resid)
        counts = np.bincount(data.cell[train], minlength=n_cells)
        out[gamma] = (sums / np.maximum(counts, 1)[:, None]).T
    return out


def mask_only_edit(absolute: dict[int, np.ndarray], heads: Sequence[tuple[int, int]], groups: np.ndarray, early: int, t: int, dose: float):
    """Edit M, written out: ``absolute[layer]`` [G, H, C·B]; ``groups`` the group of every sequence of the corpus.

    Each edited row is rebuilt from the logits (methodology §12.3): a_i0 and a'_i0 from the scores, the rest of the
    row (1 − wanted) · softmax over the other visible keys, in float64."""
    bins = nr.ReferenceBins(t, early)
    cell = np.zeros((t, t), int)
    for i in range(t):
        for j in range(i + 1):
            cell[i, j] = bins.query_bin[i] * bins.n_offset_bins + bins.offset_bin[i - j]
    chosen: dict[int, list[int]] = {}
    for layer, head in heads:
        chosen.setdefault(layer, []).append(head)

    def edit(layer: int, pattern: torch.Tensor, scores: torch.Tensor, rows: np.ndarray) -> torch.Tensor | None:
        if layer not in chosen:
            return None
        for b, n in enumerate(rows):
            for h in chosen[layer]:
                a_pairs = absolute[layer][groups[n], h][cell]  # [T, T]
                for i in range(1, t):
                    visible = scores[b, h, i] > FMIN32 / 2
                    if not visible[0]:
                        continue
                    s_row = scores[b, h, i][visible].to(torch.float64)
                    z = s_row - torch.as_tensor(a_pairs[i])[visible]
                    a0_new = torch.exp(z[0] - torch.logsumexp(z, 0))
                    a0 = torch.exp(s_row[0] - torch.logsumexp(s_row, 0))  # from the logits, not the float32 pattern
                    wanted = a0 + dose * (a0_new - a0)
                    rest = torch.softmax(s_row[1:], 0)  # the other visible keys, as the logits weigh them
                    keys = torch.nonzero(visible)[:, 0]
                    pattern[b, h, i, keys[1:]] = ((1 - wanted) * rest).to(pattern.dtype)
                    pattern[b, h, i, 0] = wanted
        return pattern

    return edit
