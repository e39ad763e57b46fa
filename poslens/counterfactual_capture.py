"""The second pass of a measurement: renormalize each sequence's own logits for the per-sequence counterfactual.

METHOD §4.4 (i): the mask-only counterfactual fitted to the mean pattern is
biased when logits vary between sequences (the mean of log Z_i is not log Z_i
of the mean logits). The per-sequence counterfactual removes the head's
absolute component A (per query-bin × offset-bin cell, fitted on the other
groups: :meth:`poslens.counterfactual.WindowFit.residual_cells`) from every
sequence's logits and renormalizes them over the visible keys:

    log a'_ij(n) = s_ij(n) − A_cb − log Z'_i(n),   log Z'_i(n) = logsumexp_{j∈V_i} (s_ij(n) − A_cb)

The cell sums of s and the counts are known from the first pass, so this pass
only needs Σ_n log Z'_i(n) per row, once per query window (each window has its
own fit). The hook walks the same row blocks as :mod:`poslens.capture` and
keeps nothing of size T².
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from poslens import hooks as hook_names
from poslens.capture import LayerStructure, default_block_elements
from poslens.sums import WINDOWS


class CounterfactualCapture:
    """Accumulates Σ_n log Z'_i(n) per group, layer, head and row, for each query window.

    ``residuals[window]`` is [G, L, H, C·B]: the absolute component A that
    sequences of group g remove from their logits (fitted without group g).
    Set :attr:`group` before each forward pass. :attr:`log_partition` holds the
    result: ``{window: [G, L, H, rows]}`` with rows = Q for ``early`` and T for ``all``.

    Example:
        >>> from types import SimpleNamespace
        >>> from poslens.binning import Binning
        >>> b = Binning(8, early=4)
        >>> zero = np.zeros((1, 1, 1, b.n_query_bins * b.n_offset_bins))
        >>> capture = CounterfactualCapture(SimpleNamespace(n_layers=1, n_heads=1, window=[None]), b, {"early": zero, "all": zero})
        >>> capture.reduce(0, torch.zeros(1, 1, 8, 8).masked_fill(torch.ones(8, 8).triu(1).bool(), torch.finfo(torch.float32).min))
        >>> np.round(np.exp(capture.log_partition["all"][0, 0, 0]), 6).tolist()   # A = 0, uniform logits: Z'_i = i + 1
        [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]
    """

    def __init__(self, model: Any, binning: Any, residuals: dict[str, np.ndarray], block_elements: int | None = None) -> None:
        self.model = model
        self.binning = binning
        self.block_elements = block_elements
        self.residuals = residuals
        self.group = 0
        t = binning.seq_len
        self.rows = {"early": min(binning.early, t), "all": t}
        groups = next(iter(residuals.values())).shape[0]
        self.log_partition = {w: np.zeros((groups, model.n_layers, model.n_heads, self.rows[w])) for w in WINDOWS}
        self._structures: dict[int | None, LayerStructure] = {}
        self._cell_index: dict[tuple, torch.Tensor] = {}

    def structure(self, layer: int) -> LayerStructure:
        """The :class:`poslens.capture.LayerStructure` of ``layer`` (a window ≥ T counts as causal).

        Example:
            >>> from types import SimpleNamespace
            >>> from poslens.binning import Binning
            >>> b = Binning(8); zero = np.zeros((1, 1, 1, b.n_query_bins * b.n_offset_bins))
            >>> capture = CounterfactualCapture(SimpleNamespace(n_layers=1, n_heads=1, window=[16]), b, {"early": zero, "all": zero})
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
            >>> from poslens.binning import Binning
            >>> b = Binning(8); zero = np.zeros((1, 2, 1, b.n_query_bins * b.n_offset_bins))
            >>> [n for n, _ in CounterfactualCapture(SimpleNamespace(n_layers=2, n_heads=1, window=[None, None]), b, {"early": zero, "all": zero}).hooks()]
            ['blocks.0.attn.hook_attn_scores', 'blocks.1.attn.hook_attn_scores']
        """
        def make(layer: int):
            def hook(scores: torch.Tensor, hook: Any) -> torch.Tensor:
                self.reduce(layer, scores)
                return scores

            return hook

        return [(hook_names.attn_scores(layer), make(layer)) for layer in range(self.model.n_layers)]

    def _cells(self, r0: int, r1: int, k0: int, device: torch.device) -> torch.Tensor:
        """Flat cell index c(i)·B + b(i − j) of the block's pairs [R, S] (invisible pairs: any valid index)."""
        key = (r0, r1, k0, str(device))
        if key not in self._cell_index:
            i = torch.arange(r0, r1)[:, None]
            j = torch.arange(k0, r1)[None, :]
            offset = torch.as_tensor(self.binning.offset_bin)[(i - j).clamp(min=0)]
            query = torch.as_tensor(self.binning.query_bin)[i]
            self._cell_index[key] = (query * self.binning.n_offset_bins + offset).to(device)
        return self._cell_index[key]

    def reduce(self, layer: int, scores: torch.Tensor) -> None:
        """Add Σ over the batch of log Z'_i per row of ``layer`` to the current group (see the class).

        Example:
            >>> # see the class example
        """
        batch, heads = scores.shape[:2]
        st = self.structure(layer)
        device = scores.device
        elements = self.block_elements or default_block_elements(device)
        residual = {w: torch.as_tensor(self.residuals[w][self.group, layer], device=device) for w in WINDOWS}  # [H, C·B]
        totals = {w: torch.zeros(heads, self.rows[w], dtype=torch.float64, device=device) for w in WINDOWS}
        for r0, r1 in st.row_blocks(max(1, elements // (batch * heads))):
            k0 = st.key_start(r0)
            invisible = ~st.valid[r0:r1, k0:r1].to(device)
            logits = scores[:, :, r0:r1, k0:r1].to(torch.float64)
            cells = self._cells(r0, r1, k0, device)
            for window in WINDOWS:
                last = min(r1, self.rows[window])
                if last <= r0:
                    continue
                n = last - r0
                shifted = logits[:, :, :n] - residual[window][:, cells[:n]]
                shifted.masked_fill_(invisible[:n], float("-inf"))
                totals[window][:, r0:last] = torch.logsumexp(shifted, dim=-1).sum(0)  # [H, n]
        for window in WINDOWS:  # one device-to-host copy per window and layer
            self.log_partition[window][self.group, layer] += totals[window].cpu().numpy()
