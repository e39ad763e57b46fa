"""The second pass of a measurement: renormalize each sequence's own logits for the per-sequence counterfactual.

METHOD §4.4 (i): the mask-only counterfactual fitted to the mean pattern is
biased when logits vary between sequences (the mean of log Z_i is not log Z_i
of the mean logits). The per-sequence counterfactual removes the head's
absolute component A (per query-bin × offset-bin cell, fitted on the other
groups: :meth:`poslens.fit.counterfactual.WindowFit.residual_cells`) from every
sequence's logits and renormalizes them over the visible keys:

    log a'_ij(n) = s_ij(n) − A_cb − log Z'_i(n),   log Z'_i(n) = logsumexp_{j∈V_i} (s_ij(n) − A_cb)

The cell sums of s and the counts are known from the first pass, so this pass
only needs Σ_n log Z'_i(n) per row, once per query window (each window has its
own fit) and per residual variant: the estimate's A, and one A per jackknife
replicate, refitted without the replicate's group too, so that the intervals
carry the noise of A. The hook walks the same row blocks as
:mod:`poslens.capture.leakage_capture` and keeps nothing of size T².
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from einops import einsum
from jaxtyping import Float, Int

from poslens.capture.leakage_capture import LayerStructure, RowBlock, default_block_elements
from poslens.fit.sums import WINDOWS
from poslens.model import hooks as hook_names


class CounterfactualCapture:
    """Accumulates Σ_n log Z'_i(n) per group, residual variant, layer, head and row, for each query window.

    ``residuals_of(g)`` gives, for the sequences of group g, ``{window: [G, L, H, C·B]}``:
    variant v = g is A^(−g), fitted without group g (the estimate); variant
    v ≠ g is A^(−g,−v), fitted without groups g and v (for the jackknife
    replicate that deletes group v). A is constant over each (query bin, offset
    bin) cell, so per row the hook needs only the sums of exp(s_ij − max_j s_ij)
    over each offset bin (one cumulative sum along keys and two gathers, as in
    :mod:`poslens.capture.leakage_capture`); every variant's log Z'_i then costs O(bins).
    Set :attr:`group` before each forward pass. :attr:`log_partition` holds
    ``{window: [G, G, L, H, rows]}`` (group, variant, …) with rows = Q for
    ``early`` and T for ``all``.

    Example:
        >>> from types import SimpleNamespace
        >>> from poslens.fit.binning import Binning
        >>> b = Binning(8, early=4)
        >>> zero = np.zeros((1, 1, 1, b.n_query_bins * b.n_offset_bins))
        >>> model = SimpleNamespace(n_layers=1, n_heads=1, window=[None])
        >>> capture = CounterfactualCapture(model, b, lambda g: {"early": zero, "all": zero}, groups=1)
        >>> capture.reduce(0, torch.zeros(1, 1, 8, 8).masked_fill(torch.ones(8, 8).triu(1).bool(), torch.finfo(torch.float32).min))
        >>> np.round(np.exp(capture.log_partition["all"][0, 0, 0, 0]), 6).tolist()   # A = 0, uniform logits: Z'_i = i + 1
        [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]
    """

    def __init__(
        self, model: Any, binning: Any, residuals_of: Callable[[int], dict[str, np.ndarray]], groups: int,
        block_elements: int | None = None,
    ) -> None:
        self.model = model
        self.binning = binning
        self.block_elements = block_elements
        self.residuals_of = residuals_of
        self.group = 0
        t = binning.seq_len
        self.rows = {"early": min(binning.early, t), "all": t}
        self.log_partition = {w: np.zeros((groups, groups, model.n_layers, model.n_heads, self.rows[w])) for w in WINDOWS}
        self._structures: dict[int | None, LayerStructure] = {}
        self._blocks: dict[tuple, list[tuple[RowBlock, torch.Tensor]]] = {}
        self._weights: tuple[int, str, dict[str, torch.Tensor]] | None = None

    def structure(self, layer: int) -> LayerStructure:
        """The :class:`poslens.capture.leakage_capture.LayerStructure` of ``layer`` (a window ≥ T counts as causal).

        Example:
            >>> from types import SimpleNamespace
            >>> from poslens.fit.binning import Binning
            >>> b = Binning(8); zero = np.zeros((1, 1, 1, b.n_query_bins * b.n_offset_bins))
            >>> capture = CounterfactualCapture(SimpleNamespace(n_layers=1, n_heads=1, window=[16]), b, lambda g: {"early": zero, "all": zero}, 1)
            >>> capture.structure(0).window is None
            True
        """
        window = self.model.window[layer]
        if window is not None and window >= self.binning.seq_len:
            window = None
        if window not in self._structures:
            self._structures[window] = LayerStructure.build(self.binning, window)
        return self._structures[window]

    def hooks(self) -> list[tuple[str, Any]]:
        """One hook per layer on ``blocks.{l}.attn.hook_attn_scores``; each passes the scores on unchanged.

        Example:
            >>> from types import SimpleNamespace
            >>> from poslens.fit.binning import Binning
            >>> b = Binning(8); zero = np.zeros((1, 2, 1, b.n_query_bins * b.n_offset_bins))
            >>> model = SimpleNamespace(n_layers=2, n_heads=1, window=[None, None])
            >>> [n for n, _ in CounterfactualCapture(model, b, lambda g: {"early": zero, "all": zero}, 1).hooks()]
            ['blocks.0.attn.hook_attn_scores', 'blocks.1.attn.hook_attn_scores']
        """
        def make(layer: int):
            def hook(scores: torch.Tensor, hook: Any) -> torch.Tensor:
                self.reduce(layer, scores)
                return scores

            return hook

        return [(hook_names.attn_scores(layer), make(layer)) for layer in range(self.model.n_layers)]

    def _row_blocks(
        self, st: LayerStructure, rows_per_query: int, device: torch.device
    ) -> list[tuple[RowBlock, Int[torch.Tensor, "rows obins"]]]:
        """The row blocks of ``st`` with, per block, the flat cell index c(i)·B + b of each row's offset bins [R, B]."""
        key = (st.window, rows_per_query, str(device))
        if key not in self._blocks:
            elements = self.block_elements or default_block_elements(device)
            n_b = self.binning.n_offset_bins
            query = torch.as_tensor(self.binning.query_bin)
            self._blocks[key] = [
                (RowBlock.build(st, r0, r1, device), (query[r0:r1, None] * n_b + torch.arange(n_b)[None, :]).to(device))
                for r0, r1 in st.row_blocks(max(1, elements // rows_per_query))
            ]
        return self._blocks[key]

    def _cell_weights(self, layer: int, device: torch.device) -> dict[str, Float[torch.Tensor, "variants heads cells"]]:
        """exp(−A) of the current group's variants for ``layer``, [G, H, C·B] per window, on ``device``."""
        if self._weights is None or self._weights[:2] != (self.group, str(device)):
            residuals = self.residuals_of(self.group)
            self._weights = (self.group, str(device), {w: torch.as_tensor(np.exp(-residuals[w]), device=device) for w in WINDOWS})
        return {w: x[:, layer] for w, x in self._weights[2].items()}

    def reduce(self, layer: int, scores: Float[torch.Tensor, "batch heads query key"]) -> None:
        """Add Σ over the batch of log Z'_i per row and variant of ``layer`` to the current group (see the class).

        Example:
            >>> # see the class example
        """
        batch, heads = scores.shape[:2]
        st = self.structure(layer)
        device = scores.device
        weights = self._cell_weights(layer, device)
        variants = next(iter(weights.values())).shape[0]
        totals = {w: torch.zeros(variants, heads, self.rows[w], dtype=torch.float64, device=device) for w in WINDOWS}
        n_b = self.binning.n_offset_bins
        for block, cells in self._row_blocks(st, batch * heads, device):
            r0, r1, k0 = block.r0, block.r1, block.k0
            logits = scores[:, :, r0:r1, k0:r1].to(torch.float64).masked_fill_(block.invisible, float("-inf"))
            row_max = logits.amax(-1, keepdim=True)
            running = logits.sub_(row_max).exp_().cumsum_(-1)  # masked keys add exp(−inf) = 0
            index_shape = (batch, heads, r1 - r0, n_b)
            upper = running.gather(-1, block.hi_at.expand(index_shape)) * block.hi_used
            lower = running.gather(-1, block.lo_at.expand(index_shape)) * block.lo_used
            per_bin = upper - lower  # Σ over each offset bin of exp(s_ij − max_j s_ij), [batch, H, R, B]
            for window in WINDOWS:
                last = min(r1, self.rows[window])
                if last <= r0:
                    continue
                n = last - r0
                rows_weights = weights[window][:, :, cells[:n]]  # [variants, H, n, B]
                z = einsum(per_bin[:, :, :n], rows_weights, "batch head row obin, variant head row obin -> batch variant head row")
                totals[window][:, :, r0:last] = (torch.log(z) + row_max[:, None, :, :n, 0]).sum(0)
        for window in WINDOWS:  # one device-to-host copy per window and layer
            self.log_partition[window][self.group, :, layer] += totals[window].cpu().numpy()
