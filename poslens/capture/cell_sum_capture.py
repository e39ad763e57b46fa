"""The hook that reduces each layer's attention scores to the cell sums of :class:`poslens.fit.sums.CellSums` while the forward runs.

For one layer the hook sees scores s [batch, head, T, T] (masked entries at the
dtype minimum). It works through blocks of query rows
(:mod:`poslens.capture.row_blocks`), each with only the key span its rows can
see (keys up to the block's last row, and from the sliding window's start on a
sliding-window layer), so that on CPU a block's float64 copies stay in cache
across the passes over them. Per row it computes, in float64: log Z_i
(logsumexp over the visible keys), row sums of s, s² and j·s, and the row
features of methodology §3.3. The block is laid out so that a skewed strided
view of it walks the offset diagonals (:mod:`poslens.capture.cell_folding`):
summed over the rows of each query bin, that gives the sum of s over each
(query bin, offset bin) cell, and over the rows of each query window, the sum of
s_{i,i−Δ} per exact offset Δ that the counterfactual fit of methodology §4.1
needs (with Σ_j s_ij and s_i0 per exact row). The per-row pieces are folded into
query bins with a one-hot matrix and added to :class:`~poslens.fit.sums.CellSums`;
nothing of size T² outlives the hook. A batch may hold sequences of several
groups: every sum over the batch is taken per run of one group
(:class:`~poslens.capture.batch_groups.BatchGroups`, set by :attr:`CellSumCapture.sequence_groups`)
and added to that group's sums. Everything fixed by the geometry is built
once per sliding window in a :class:`~poslens.capture.capture_plan.CapturePlan`.
Given a :class:`poslens.capture.row_bin_store.RowBinStore`, it also writes each
row's maximum and, from one cumulative sum of exp(s − max) along keys, its sums
per offset bin, for the per-sequence counterfactual
(:mod:`poslens.capture.counterfactual_replay`).

There are two paths, chosen by ``CellSumCapture(sync_free=...)`` (default: the
sync-free path when the scores are on CUDA):

- the host path (CPU default): a mask mismatch or a non-finite score raises from
  :meth:`CellSumCapture.reduce` itself (:mod:`poslens.capture.score_checks`); each
  layer's pieces are held, and the layers of a batch folded into query bins, copied to
  the host and added to the sums together, when the forward pass ends or the sums are
  read (:mod:`poslens.capture.host_sums`).
- the sync-free path: :meth:`CellSumCapture.reduce` issues no host
  synchronization (no ``.item()``, ``bool(tensor)``, ``.cpu()``, ``nonzero``, no
  branch on data). Each layer's pieces go into one flat device tensor, the mask
  and finite checks become device flags in it, and the row-bin arrays are copied
  to pinned host memory without blocking. :meth:`CellSumCapture.flush`, called
  after each forward pass, copies all of it to the host in one transfer, adds it to the sums, writes
  the row-bin store and raises the deferred errors (same messages, naming layer
  and head; :mod:`poslens.capture.deferred_sums`). On CPU the two paths agree to
  rounding (≈1e-15 relative).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from einops import einsum, rearrange
from jaxtyping import Float

from poslens.capture.attention_layout import AttentionLayout
from poslens.capture.batch_groups import BatchGroups, GroupedBatches
from poslens.capture.capture_plan import CapturePlan, lookup_plan
from poslens.capture.cell_folding import add_diagonal_sums, cell_parts
from poslens.capture.deferred_sums import PendingLayer, flush_pending, pack_layer
from poslens.capture.fused_rows import row_pieces
from poslens.capture.host_sums import HELD_BYTES, HostLayer, add_layers_on_host
from poslens.capture.probe_sums import probe_parts_on_device
from poslens.capture.row_bin_store import RowBinStore
from poslens.capture.row_blocks import EXP_FLOOR, LayerRowGeometry
from poslens.capture.score_checks import MASKED_BELOW, at_most, explain_mask_failure, non_finite_error
from poslens.compiled import fused_available
from poslens.fit.binning import Binning
from poslens.fit.sums import FEATURES, CellSums
from poslens.model import hooks as hook_names
from poslens.model.hooks import Hook


class CellSumCapture(GroupedBatches):
    """Accumulates the :class:`~poslens.fit.sums.CellSums` of a model from hooks on every layer's scores.

    Set :attr:`sequence_groups` before each forward pass to the group of each of
    its sequences (a batch may span several groups; each group's sums get its own
    sequences'), or :attr:`~poslens.capture.batch_groups.GroupedBatches.group` when every sequence of the pass belongs to one group
    (:class:`~poslens.capture.batch_groups.GroupedBatches`).

    Args:
        model: The hooked model, or what the capture reads of it (:class:`~poslens.capture.attention_layout.AttentionLayout`).
        binning: The query and offset bins of the measurement.
        groups: Number of groups G the sequences are assigned to.
        probe: Whether to accumulate the probe's sums.
        check_mask: Whether to check that masked scores sit at the dtype minimum.
        block_elements: Size of a row-block work buffer; default :func:`~poslens.capture.row_blocks.default_block_elements`.
        store: Where to keep each sequence's row-bin sums for the counterfactual replay; ``None``: not kept.
        sync_free: Whether :meth:`reduce` defers every host synchronization to :meth:`flush` (see the module
            docstring); ``None``: when the scores are on CUDA. Call :meth:`flush` after each forward pass.
        fused: Whether the host path reduces CPU scores with the compiled loop of :mod:`poslens.capture.fused_rows`
            (the same figures to rounding, in one pass over each row) rather than with torch operations;
            ``None``: where :func:`~poslens.compiled.fused_available`.

    Example:
        >>> capture = CellSumCapture(model, Binning(64), groups=4)  # doctest: +SKIP
        >>> capture.sequence_groups = np.array([0, 0, 1])  # doctest: +SKIP
        >>> run_with_hooks(model, tokens, capture.hooks())  # doctest: +SKIP
        >>> capture.flush()  # doctest: +SKIP
    """

    def __init__(
        self,
        model: AttentionLayout,
        binning: Binning,
        groups: int,
        probe: bool = True,
        check_mask: bool = True,
        block_elements: int | None = None,
        store: RowBinStore | None = None,
        sync_free: bool | None = None,
        fused: bool | None = None,
    ) -> None:
        self.model = model
        self.fused = fused  # None: the compiled loop where fused_available()
        self.sync_free = sync_free  # None: on when the scores are on CUDA
        self._pending: list[PendingLayer] = []  # sync-free reduce() calls not yet flushed
        self.store = store  # where each sequence's row-bin sums go for the counterfactual replay (None: not kept)
        self.block_elements = block_elements  # float64 elements per work buffer; None: by device
        self.binning = binning
        self.probe = probe
        self.check_mask = check_mask
        self.sequence_groups = None  # the group of each sequence of the next batch; None: all in group self.group
        self._group = 0
        self.n_groups = groups
        self._plans: dict[int | None, CapturePlan] = {}  # by effective sliding window (None: full causal)
        self._checked: set[int] = set()
        self._buffers: tuple[torch.Tensor, torch.Tensor] | None = None
        self.early_rows = min(binning.early, binning.seq_len)  # rows 1 ≤ i < early_rows form the early query window
        sliding_windows = tuple(self.plan(layer).geometry.sliding_window for layer in range(model.n_layers))
        self._sums = CellSums.zeros(groups, model.n_layers, model.n_heads, binning, sliding_windows)
        self._held: list[HostLayer] = []  # host path: layers reduced but not yet added to the sums
        self._held_bytes = 0

    @property
    def sums(self) -> CellSums:
        """The sums so far: every layer reduced on the host path is in them; on the sync-free path, those flushed.

        Example:
            >>> from types import SimpleNamespace
            >>> CellSumCapture(SimpleNamespace(n_layers=1, n_heads=1, sliding_windows=[None]), Binning(8), groups=2).sums.n_groups
            2
        """
        self._add_held()
        return self._sums

    def _add_held(self) -> None:
        """Add the layers the host path holds to the sums (:func:`~poslens.capture.host_sums.add_layers_on_host`)."""
        held, self._held, self._held_bytes = self._held, [], 0
        add_layers_on_host(self._sums, held, self.probe)

    def _hold(self, held: HostLayer) -> None:
        """Keep a layer's pieces for the next fold; first add those held when they are of another batch or hold its layer."""
        if self._held and (self._held[0].runs != held.runs or any(other.layer == held.layer for other in self._held)):
            self._add_held()
        self._held.append(held)
        self._held_bytes += held.nbytes
        if self._held_bytes >= HELD_BYTES:
            self._add_held()

    def _work_buffers(self, size: int, device: torch.device) -> tuple[Float[torch.Tensor, " buffer"], Float[torch.Tensor, " buffer"]]:
        # two reused flat float64 buffers; fresh allocations would cost page faults on every call
        buffers = self._buffers
        if buffers is None or buffers[0].device != device or buffers[0].numel() < size:
            buffers = (torch.empty(size, dtype=torch.float64, device=device), torch.empty(size, dtype=torch.float64, device=device))
            self._buffers = buffers
        return buffers

    def plan(self, layer: int) -> CapturePlan:
        """The :class:`~poslens.capture.capture_plan.CapturePlan` of ``layer``, built once per sliding window width and shared.

        A sliding window at least as wide as the sequence counts as full causal attention.

        Args:
            layer: A layer index.

        Returns:
            The layer's plan.

        Example:
            >>> from types import SimpleNamespace
            >>> capture = CellSumCapture(SimpleNamespace(n_layers=3, n_heads=1, sliding_windows=[None, 3, 64]), Binning(8), groups=2)
            >>> [capture.plan(layer).geometry.sliding_window for layer in range(3)]   # width 64 ≥ T = 8: full
            [None, 3, None]
            >>> capture.plan(0) is capture.plan(2)
            True
        """
        return lookup_plan(self._plans, self.binning, self.model.sliding_windows[layer])

    def geometry(self, layer: int) -> LayerRowGeometry:
        """The :class:`~poslens.capture.row_blocks.LayerRowGeometry` of ``layer`` (its plan's).

        Args:
            layer: A layer index.

        Returns:
            The layer's visible pairs and their counts.

        Example:
            >>> from types import SimpleNamespace
            >>> capture = CellSumCapture(SimpleNamespace(n_layers=2, n_heads=1, sliding_windows=[None, 3]), Binning(8), groups=2)
            >>> capture.geometry(1).n_visible.tolist()
            [1.0, 2.0, 3.0, 3.0, 3.0, 3.0, 3.0, 3.0]
        """
        return self.plan(layer).geometry

    def hooks(self) -> list[Hook]:
        """One hook per layer on ``blocks.{l}.attn.hook_attn_scores``.

        Each hook calls :meth:`reduce` and passes the scores on unchanged.

        Returns:
            ``[(hook name, hook function)]``, as ``run_with_hooks`` takes them.

        Example:
            >>> from types import SimpleNamespace
            >>> capture = CellSumCapture(SimpleNamespace(n_layers=2, n_heads=1, sliding_windows=[None, None]), Binning(8), groups=2)
            >>> [name for name, _ in capture.hooks()]
            ['blocks.0.attn.hook_attn_scores', 'blocks.1.attn.hook_attn_scores']
        """
        return [(hook_names.attn_scores(layer), self._make_hook(layer)) for layer in range(self.model.n_layers)]

    def _make_hook(self, layer: int) -> Callable[[torch.Tensor, Any], torch.Tensor]:
        def hook(scores: torch.Tensor, hook: Any) -> torch.Tensor:
            self.reduce(layer, scores)
            return scores

        return hook

    def add_structure(self, batch: int) -> None:
        """Add the structural (data-free) sums of ``batch`` sequences to their groups (:meth:`batch_groups`).

        Call it once per forward pass, with the batch size; it also counts the sequences.

        Args:
            batch: Number of sequences in the forward pass.

        Example:
            >>> from types import SimpleNamespace
            >>> capture = CellSumCapture(SimpleNamespace(n_layers=1, n_heads=1, sliding_windows=[None]), Binning(8), groups=2)
            >>> capture.group = 1
            >>> capture.add_structure(batch=4)
            >>> capture.sums.group_sizes.tolist()
            [0.0, 4.0]
            >>> import numpy as np
            >>> capture.sequence_groups = np.array([0, 1, 1])   # a batch spanning both groups
            >>> capture.add_structure(batch=3)
            >>> capture.sums.group_sizes.tolist()
            [1.0, 6.0]
        """
        a = self._sums.per_group
        runs = self.batch_groups(batch)
        for g, size in zip(runs.groups, runs.counts, strict=True):
            for layer in range(self.model.n_layers):
                for name, per_sequence in self.plan(layer).structure_sums.items():
                    getattr(a, name)[g, layer] += size * per_sequence
            a.query_row_count[g] += size * self.plan(0).query_fold.sum(-1).numpy()
            a.sequence_count[g] += size
            self._sums.group_sizes[g] += size
        self._sums.row_count += batch

    def reduce(self, layer: int, scores: Float[torch.Tensor, "batch heads query key"]) -> None:
        """Fold one layer's scores [batch, head, T, T] into the sums of their sequences' groups (:meth:`batch_groups`).

        Masked entries must be at the dtype minimum, as in ``hook_attn_scores``. On the
        sync-free path (see :class:`CellSumCapture`) the pieces wait on the device and the
        two checks below raise from :meth:`flush` instead.

        Args:
            layer: The layer index.
            scores: The pre-softmax scores, [batch, head, T, T].

        Raises:
            ValueError: When the scores are not T × T for the binning's length T.
            NonFiniteScoresError: When a visible score is NaN or infinite.
            MaskMismatchError: On a layer's first batch, when the masked entries are not the layer's invisible keys.

        Example:
            >>> from types import SimpleNamespace
            >>> capture = CellSumCapture(SimpleNamespace(n_layers=1, n_heads=1, sliding_windows=[None]), Binning(8), groups=2)
            >>> scores = torch.zeros(1, 1, 8, 8).masked_fill(torch.ones(8, 8).triu(1).bool(), torch.finfo(torch.float32).min)
            >>> capture.reduce(0, scores)
            >>> capture.sums.row_features[0, 0, 0].round(3).tolist()   # key-0 mass of uniform attention: 1/(i+1)
            [1.0, 0.5, 0.333, 0.25, 0.2, 0.167, 0.143, 0.125]
            >>> fresh = CellSumCapture(SimpleNamespace(n_layers=1, n_heads=1, sliding_windows=[None]), Binning(8), groups=2)
            >>> fresh.reduce(0, torch.zeros(1, 1, 8, 8))  # no causal mask at all, on the layer's first batch
            Traceback (most recent call last):
            ...
            poslens.capture.score_checks.MaskMismatchError: layer 0: keys poslens treats as invisible (window=None) carry finite scores; ...
        """
        batch, heads, t_q, t_k = scores.shape
        t = self.binning.seq_len
        if t_q != t_k or t_q != t:
            raise ValueError(f"expected scores of {t}×{t}, got {t_q}×{t_k}")
        plan = self.plan(layer)
        runs = self.batch_groups(batch)
        n_runs = len(runs.runs)
        device = scores.device
        deferred = self.sync_free if self.sync_free is not None else device.type == "cuda"
        checking = self.check_mask and layer not in self._checked  # the first sequence of the layer's first batch
        threshold = MASKED_BELOW * torch.finfo(scores.dtype).min
        if not deferred and device.type == "cpu" and (self.fused if self.fused is not None else fused_available()):
            self._reduce_fused(layer, scores, plan, runs, checking, threshold)
            return
        f64 = torch.float64
        mask_ok = torch.ones((), dtype=torch.bool, device=device) if deferred and checking else None  # the device flag
        log_z, row_sum, row_js, row_sq = (torch.empty(batch, heads, t, dtype=f64, device=device) for _ in range(4))
        features = torch.empty(batch, heads, t, len(FEATURES), dtype=f64, device=device)
        n_b = self.binning.n_offset_bins
        logit_cells = torch.zeros(n_runs, heads, self.binning.n_query_bins, n_b, dtype=f64, device=device)  # Σ over each run of s per cell
        key0_logits = torch.zeros(n_runs, heads, t, dtype=f64, device=device)  # Σ over each run of s_i0
        row_bins = torch.empty(batch, heads, t, 1 + n_b, dtype=f64, device=device) if self.store is not None else None  # max, then Σ exp per bin
        offset_sums = torch.zeros(n_runs, 2, heads, t, dtype=f64, device=device)  # Σ of s_{i,i−Δ} over the all / early rows
        blocks = plan.blocks(batch * heads, device, self.block_elements)
        work_s, work_e = self._work_buffers(max(batch * heads * b.padded_size for b in blocks), device)
        key_positions = plan.on(device).key_positions
        for block in blocks:
            r0, r1, k0 = block.r0, block.r1, block.k0
            n_rows, span = r1 - r0, r1 - k0
            rows, shape = slice(r0, r1), (batch, heads, n_rows, span)
            # s lives in rows of width span + n_rows whose tail is zero, after n_rows zeros: the layout
            # that add_diagonal_sums reads the offset diagonals from without a copy
            flat = work_s[: n_rows + batch * heads * n_rows * (span + n_rows)]
            flat[:n_rows].zero_()
            padded = flat[n_rows:].view(batch, heads, n_rows, span + n_rows)
            padded[..., span:].zero_()
            s, exp_s = padded[..., :span], work_e[: batch * heads * block.size].view(shape)
            s.copy_(scores[:, :, r0:r1, k0:r1])  # keys beyond r1 or before k0 are masked for every row here
            row_max = s.amax(-1, keepdim=True)
            # one exp pass gives log Z, the weights and the entropy; the floor keeps torch's exp off its slow
            # path for arguments far below the float64 range (masked keys), and masked keys are zeroed after
            torch.sub(s, row_max, out=exp_s).clamp_(min=EXP_FLOOR).exp_()
            mask_holds = True
            for c0, c1, invisible in block.masked_columns:
                if checking and mask_ok is not None:  # as below, as a device flag
                    mask_ok &= (s[:1, ..., c0:c1].masked_fill(~invisible, threshold) <= threshold).all()
                elif checking:  # the invisible keys of the block's span are masked
                    mask_holds &= at_most(s[:1, ..., c0:c1].masked_fill(~invisible, threshold), threshold)
                s[..., c0:c1].masked_fill_(invisible, 0.0)
                exp_s[..., c0:c1].masked_fill_(invisible, 0.0)
            visible = s  # masked entries are 0 from here on
            if checking and mask_ok is not None:  # as below, as a device flag (all() of an empty part is true)
                mask_ok &= (s[:1] > threshold).all()
                for part in (scores[:1, :, r0:r1, r1:], scores[:1, :, r0:r1, :k0]):
                    mask_ok &= (part <= threshold).all()
            elif checking:  # the visible keys are not masked, and the keys outside the span are
                outside = (scores[:1, :, r0:r1, r1:], scores[:1, :, r0:r1, :k0])
                mask_holds &= bool(s[:1].amin() > threshold) and all(at_most(part, threshold) for part in outside)
                if not mask_holds:
                    self._add_held()  # the layers before this one are in the sums, as on the sync-free path
                    explain_mask_failure(layer, self.model.sliding_windows[layer], scores[:1], plan.geometry.valid.to(device))
            row_sum[:, :, rows] = visible.sum(-1)
            row_js[:, :, rows] = visible @ key_positions[k0:r1]  # a matrix-vector product: faster than [1, j] as two columns
            row_sq[:, :, rows] = torch.einsum("...j,...j->...", visible, visible)  # einsum: no full-size temporary
            weighted = torch.einsum("...j,...j->...", exp_s, visible)  # Σ_j exp(s_ij − max) s_ij
            key0_weight = exp_s[..., 0].clone() if k0 == 0 else None
            self_weight = torch.diagonal(exp_s, offset=r0 - k0, dim1=-2, dim2=-1).clone()
            if k0 == 0:
                key0_logits[:, :, rows] = runs.sum(visible[..., 0])
            add_diagonal_sums(flat, (batch, heads, n_rows, span), block, plan, logit_cells, offset_sums, runs)
            if row_bins is not None:
                # one running sum of exp(s − max) gives the partition function (its last entry) and each
                # offset bin's sum for the counterfactual replay (differences at the bins' edges)
                running = exp_s.cumsum_(-1)  # in place: exp_s is not needed any more
                partition = running[..., -1]
                at_edges = running.gather(-1, block.edge_at.expand(batch, heads, n_rows, n_b + 1)) * block.edge_used
                row_bins[:, :, rows, 0] = row_max[..., 0]
                row_bins[:, :, rows, 1:] = at_edges[..., :-1] - at_edges[..., 1:]
            else:
                partition = exp_s.sum(-1)
            block_log_z = row_max[..., 0] + torch.log(partition)
            log_z[:, :, rows] = block_log_z
            features[:, :, rows, 0] = key0_weight / partition if key0_weight is not None else 0.0  # None exactly when k0 > 0
            features[:, :, rows, 1] = block_log_z - weighted / partition  # entropy: log Z − Σ_j a_ij s_ij
            features[:, :, rows, 2] = self_weight / partition
            features[:, :, rows, 3] = 1.0 / partition  # the row maximum has exp_s = 1
        finite = torch.isfinite(row_sum) & torch.isfinite(log_z)
        if deferred:
            parts = cell_parts(plan, runs, log_z, row_sum, row_js, row_sq, logit_cells, key0_logits, offset_sums)
            self._checked.add(layer)  # checked in flush()
            flags = [~finite.all(-1)]  # [B, H]: a non-finite row of sequence b, head h
            if mask_ok is not None:  # what explain_mask_failure reads, for flush() to explain a failed check
                valid = plan.on(device).valid
                first = scores[:1]
                bad = torch.isnan(first) | torch.isposinf(first) | (torch.isneginf(first) & valid)
                flags += [mask_ok, ((first > threshold) & ~valid).any(), bad.flatten(2).any(-1)[0]]
            self._defer(layer, plan, runs, checking, parts, features, flags, row_bins)
            return
        if not finite.all():
            self._add_held()  # the layers before this one are in the sums, as on the sync-free path
            raise non_finite_error(layer, int(torch.nonzero(~finite)[0, 1]))
        self._checked.add(layer)
        pieces = {"log_z": log_z, "row_sum": row_sum, "row_js": row_js, "row_sq": row_sq, "features": features}
        pieces.update(logit_cells=logit_cells, key0_logits=key0_logits, offset_sums=offset_sums)
        self._hold(HostLayer(layer, plan, runs, pieces))
        if row_bins is not None and self.store is not None:  # row_bins exist exactly when a store is kept
            on_host = row_bins.cpu().numpy()
            for g, start, end in runs.runs:
                self.store.write(g, layer, on_host[start:end])

    def _reduce_fused(
        self, layer: int, scores: Float[torch.Tensor, "batch heads query key"], plan: CapturePlan, runs: BatchGroups, checking: bool, threshold: float
    ) -> None:
        """The host path of :meth:`reduce` by the compiled loop (:func:`~poslens.capture.fused_rows.row_pieces`).

        The same pieces, checks and errors as the torch route.
        """
        if checking:  # the first sequence: its invisible keys masked, its visible keys not
            first, valid = scores[:1], plan.geometry.valid
            # above the threshold exactly where visible, and no NaN (a NaN is never above, visible or not)
            if not torch.equal(first[0] > threshold, valid.expand(first.shape[1], -1, -1)) or bool(first.isnan().any()):
                self._add_held()  # the layers before this one are in the sums, as on the sync-free path
                explain_mask_failure(layer, self.model.sliding_windows[layer], first, valid)
        pieces = row_pieces(scores, plan.row_tables(), row_bins=self.store is not None)
        finite = torch.isfinite(pieces.row_sum) & torch.isfinite(pieces.log_z)
        if not finite.all():
            self._add_held()
            raise non_finite_error(layer, int(torch.nonzero(~finite)[0, 1]))
        self._checked.add(layer)
        held = {"log_z": pieces.log_z, "row_sum": pieces.row_sum, "row_js": pieces.row_js, "row_sq": pieces.row_sq, "features": pieces.features}
        held.update(logit_cells=runs.sum(pieces.logit_cells), key0_logits=runs.sum(pieces.key0_logits), offset_sums=runs.sum(pieces.offset_sums))
        self._hold(HostLayer(layer, plan, runs, held))
        if pieces.row_bins is not None and self.store is not None:
            on_host = pieces.row_bins.numpy()
            for g, start, end in runs.runs:
                self.store.write(g, layer, on_host[start:end])

    def _defer(
        self,
        layer: int,
        plan: CapturePlan,
        runs: BatchGroups,
        checking: bool,
        parts: dict[str, torch.Tensor],
        features: Float[torch.Tensor, "batch heads seq features"],
        flags: list[torch.Tensor],
        row_bins: Float[torch.Tensor, "batch heads seq bins"] | None,
    ) -> None:
        """The sync-free path's end of :meth:`reduce`: every piece, folded on the device, in one flat tensor for :meth:`flush`."""
        per_row = runs.sum(rearrange(features, "batch head seq feature -> batch seq head feature"))  # [runs, T, H, F]
        parts["features"] = einsum(plan.on(features.device).query_fold, per_row, "qbin seq, run seq head feature -> run head feature qbin")
        parts["row_features"] = rearrange(per_row.sum(0), "seq head feature -> head feature seq")
        if self.probe:  # the probe's design sums, as add_probe_on_host forms them on the host
            parts.update(probe_parts_on_device(features, plan, runs))
        self._pending.append(pack_layer(runs, layer, checking, parts, flags, row_bins))

    def flush(self) -> None:
        """Add the pieces the :meth:`reduce` calls left to the sums: those the host path holds, and those the sync-free
        path left on the device, in one device-to-host copy.

        Call it after each forward pass (and, on the sync-free path, before reading :attr:`sums`). It also
        writes their row-bin arrays to the store, and raises the checks' errors that
        :meth:`reduce` deferred, for the first call (in order) that failed; the
        calls before it are added, as on the host path. Nothing pending (the host
        path, or a second call): nothing happens.

        Raises:
            MaskMismatchError: When a layer's first batch had scores masked other than as the layer's mask.
            NonFiniteScoresError: When a visible score was NaN or infinite; names the layer and head.

        Example:
            >>> from types import SimpleNamespace
            >>> capture = CellSumCapture(SimpleNamespace(n_layers=1, n_heads=1, sliding_windows=[None]), Binning(8), groups=2, sync_free=True)
            >>> scores = torch.zeros(1, 1, 8, 8).masked_fill(torch.ones(8, 8).triu(1).bool(), torch.finfo(torch.float32).min)
            >>> capture.reduce(0, scores)
            >>> float(capture.sums.row_features.sum())   # still on the device
            0.0
            >>> capture.flush()
            >>> capture.sums.row_features[0, 0, 0].round(3).tolist()   # key-0 mass of uniform attention: 1/(i+1)
            [1.0, 0.5, 0.333, 0.25, 0.2, 0.167, 0.143, 0.125]
            >>> capture.reduce(0, torch.full((1, 1, 8, 8), float("nan")))   # nothing raised yet
            >>> capture.flush()
            Traceback (most recent call last):
            ...
            poslens.capture.score_checks.NonFiniteScoresError: NaN or inf in the attention scores of layer 0, head 0 ...
        """
        self._add_held()
        pending, self._pending = self._pending, []
        probe_row_counts = self.plan(0).query_window_row_counts if self.probe else None
        flush_pending(pending, self._sums, self.store, self.model.n_heads, self.model.sliding_windows, probe_row_counts)
