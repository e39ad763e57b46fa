"""The per-sequence counterfactual's second forward pass: each row's offset-bin sums of exp(s), folded in as they come.

The route without temporary disk (:mod:`poslens.runtime.disk`). Once the first
pass's sums have fixed the absolute component A, a second forward pass over the
same batches, with the same interventions, recomputes on every layer what the
row-bin store would have kept, each row's maximum m_i and its sums
S_ib = Σ_{j∈b} exp(s_ij − m_i) per offset bin b, and hands them at once to
:meth:`poslens.capture.counterfactual_replay.CounterfactualReplay.add`, so
nothing of size N outlives a layer. The arithmetic is the first pass's, step for
step, on the same row blocks (:class:`poslens.capture.row_blocks.RowBlock`) of the same
:class:`~poslens.capture.capture_plan.CapturePlan`, so both routes give the same figures.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from jaxtyping import Float

from poslens.capture.attention_layout import AttentionLayout
from poslens.capture.batch_groups import GroupedBatches
from poslens.capture.capture_plan import CapturePlan, lookup_plan
from poslens.capture.counterfactual_replay import CounterfactualReplay
from poslens.capture.row_blocks import EXP_FLOOR, RowBlock
from poslens.fit.binning import Binning
from poslens.model import hooks as hook_names
from poslens.model.hooks import Hook


def row_bin_sums(
    scores: Float[torch.Tensor, "batch heads seq seq"],
    blocks: list[RowBlock],
    n_offset_bins: int,
    work: Float[torch.Tensor, " buffer"] | None = None,
) -> Float[torch.Tensor, "batch heads seq bins"]:
    """Each row's maximum, then its sums of exp(s − max) per offset bin, from one layer's scores, block by block.

    The same steps as the first pass's (:meth:`poslens.capture.cell_sum_capture.CellSumCapture.reduce`):
    a float64 copy of the block's visible key span, its row maxima, exp of s − max
    floored at ``EXP_FLOOR``, the invisible
    keys zeroed, one running sum along keys, and differences at the offset bins' edges.

    Args:
        scores: A layer's pre-softmax scores, [batch, H, T, T], masked entries at the dtype minimum.
        blocks: The layer's row blocks (:meth:`poslens.capture.capture_plan.CapturePlan.blocks`).
        n_offset_bins: Number of offset bins B.
        work: A float64 buffer of at least batch·H·(largest block size) elements to reuse; default a fresh one.

    Returns:
        ``[batch, H, T, 1 + B]`` float64 on the scores' device: the maximum first, then the B bin sums.

    Example:
        >>> b = Binning(8)
        >>> blocks = CapturePlan.build(b, sliding_window=None).blocks(1, torch.device("cpu"), block_elements=64)
        >>> uniform = torch.zeros(1, 1, 8, 8).masked_fill(torch.ones(8, 8).triu(1).bool(), torch.finfo(torch.float32).min)
        >>> out = row_bin_sums(uniform, blocks, b.n_offset_bins)
        >>> out[0, 0, :, 1:].sum(-1).tolist()   # row i sees i + 1 keys, each exp(0 − 0) = 1
        [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]
    """
    batch, heads, t, _ = scores.shape
    device = scores.device
    out = torch.empty(batch, heads, t, 1 + n_offset_bins, dtype=torch.float64, device=device)
    largest = max(batch * heads * block.size for block in blocks)
    if work is None or work.numel() < largest:
        work = torch.empty(largest, dtype=torch.float64, device=device)
    for block in blocks:
        r0, r1, k0 = block.r0, block.r1, block.k0
        n_rows, span = r1 - r0, r1 - k0
        exp_s = work[: batch * heads * block.size].view(batch, heads, n_rows, span)
        exp_s.copy_(scores[:, :, r0:r1, k0:r1])
        row_max = exp_s.amax(-1, keepdim=True)
        exp_s.sub_(row_max).clamp_(min=EXP_FLOOR).exp_()
        for c0, c1, invisible in block.masked_columns:
            exp_s[..., c0:c1].masked_fill_(invisible, 0.0)
        running = exp_s.cumsum_(-1)
        at_edges = running.gather(-1, block.edge_at.expand(batch, heads, n_rows, n_offset_bins + 1)) * block.edge_used
        out[:, :, r0:r1, 0] = row_max[..., 0]
        out[:, :, r0:r1, 1:] = at_edges[..., :-1] - at_edges[..., 1:]
    return out


class SecondPass(GroupedBatches):
    """Hooks that fold every layer's row-bin sums into a :class:`CounterfactualReplay` during a second forward pass.

    Set :attr:`sequence_groups` (or :attr:`~poslens.capture.batch_groups.GroupedBatches.group`, :class:`~poslens.capture.batch_groups.GroupedBatches`)
    before each forward pass, run it with :meth:`hooks`, then call :meth:`flush` (which hands the
    replay's device-side sums to the host once per batch). Each run of one group's sequences in a
    batch goes to the replay under its group.

    Args:
        model: The hooked model (its ``n_layers``, ``n_heads`` and ``sliding_windows``, each layer's sliding window).
        binning: The query and offset bins of the measurement.
        replay: The replay to fold the sums into; its absolute components come from the first pass (``None``: :meth:`row_bins` only).
        block_elements: Size of a row-block work buffer; default :func:`~poslens.capture.row_blocks.default_block_elements`
            (the first pass's: the same blocks give the same rounding).

    Example:
        >>> second = SecondPass(model, sums.binning, replay)   # doctest: +SKIP
        >>> second.sequence_groups = np.array([0, 1]); run_with_hooks(model, tokens, second.hooks()); second.flush()   # doctest: +SKIP
    """

    def __init__(self, model: AttentionLayout, binning: Binning, replay: CounterfactualReplay | None, block_elements: int | None = None) -> None:
        self.model = model
        self.binning = binning
        self.replay = replay
        self.block_elements = block_elements
        self.sequence_groups = None
        self._group = 0
        self._plans: dict[int | None, CapturePlan] = {}  # by effective sliding window, as the first pass keeps them
        self._work: torch.Tensor | None = None

    def plan(self, layer: int) -> CapturePlan:
        """The layer's plan, as the first pass builds it (a sliding window at least T wide counts as none).

        Args:
            layer: A layer index.

        Returns:
            The layer's plan.

        Example:
            >>> from types import SimpleNamespace
            >>> second = SecondPass(SimpleNamespace(n_layers=2, n_heads=1, sliding_windows=[None, 64]), Binning(8), replay=None)
            >>> second.plan(1).geometry.sliding_window is None
            True
        """
        return lookup_plan(self._plans, self.binning, self.model.sliding_windows[layer])

    def row_bins(self, layer: int, scores: Float[torch.Tensor, "batch heads seq seq"]) -> Float[torch.Tensor, "batch heads seq bins"]:
        """One layer's row maxima and offset-bin sums of exp(s − max), on the first pass's row blocks.

        Args:
            layer: The layer index.
            scores: The layer's pre-softmax scores, [batch, H, T, T].

        Returns:
            ``[batch, H, T, 1 + B]`` float64 on the scores' device.

        Example:
            >>> from types import SimpleNamespace
            >>> second = SecondPass(SimpleNamespace(n_layers=1, n_heads=1, sliding_windows=[None]), Binning(8), replay=None)
            >>> s = torch.zeros(2, 1, 8, 8).masked_fill(torch.ones(8, 8).triu(1).bool(), torch.finfo(torch.float32).min)
            >>> second.row_bins(0, s).shape[-1] == 1 + Binning(8).n_offset_bins
            True
        """
        batch, heads = scores.shape[:2]
        device = scores.device
        blocks = self.plan(layer).blocks(batch * heads, device, self.block_elements)
        largest = max(batch * heads * block.size for block in blocks)
        if self._work is None or self._work.device != device or self._work.numel() < largest:
            self._work = torch.empty(largest, dtype=torch.float64, device=device)
        return row_bin_sums(scores, blocks, self.binning.n_offset_bins, self._work)

    def hooks(self) -> list[Hook]:
        """One hook per layer on ``blocks.{l}.attn.hook_attn_scores``; each passes the scores on unchanged.

        Returns:
            ``[(hook name, hook function)]``, as ``run_with_hooks`` takes them.

        Example:
            >>> from types import SimpleNamespace
            >>> [n for n, _ in SecondPass(SimpleNamespace(n_layers=2, n_heads=1, sliding_windows=[None, None]), Binning(8), None).hooks()]
            ['blocks.0.attn.hook_attn_scores', 'blocks.1.attn.hook_attn_scores']
        """
        return [(hook_names.attn_scores(layer), self._make_hook(layer)) for layer in range(self.model.n_layers)]

    def _make_hook(self, layer: int) -> Callable[[torch.Tensor, Any], torch.Tensor]:
        def hook(scores: torch.Tensor, hook: Any) -> torch.Tensor:
            if self.replay is None:
                raise ValueError("this SecondPass has no replay to fold the row-bin sums into: build it with one to run its hooks")
            bins = self.row_bins(layer, scores)
            for group, first, end in self.batch_groups(scores.shape[0]).runs:
                self.replay.add(group, layer, bins[first:end])
            return scores

        return hook

    def flush(self) -> None:
        """Hand the replay's device-side sums of the batch to the host (nothing to do on the CPU).

        Example:
            >>> second.flush()   # doctest: +SKIP
        """
        if self.replay is not None:
            self.replay.flush()
