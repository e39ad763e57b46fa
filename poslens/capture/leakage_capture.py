"""Hooks that reduce each layer's attention scores to cell sums while the forward runs.

For one layer the hook sees scores s [batch, head, T, T] (masked entries at the
dtype minimum). It works through blocks of query rows, each with only the key
span its rows can see (keys up to the block's last row, and from the window's
start on a sliding-window layer), so that on CPU a block's float64 copies stay
in cache across the passes over them. Per row it computes, in float64: log Z_i
(logsumexp over the visible keys), row sums of s, s² and j·s, and the row
features of methodology §3.3. The block is laid out so that a skewed strided view of
it walks the offset diagonals: summed over the rows of each query bin, that
gives the sum of s over each (query bin, offset bin) cell, and over the rows of
each query window, the sum of s_{i,i−Δ} per exact offset Δ that the
counterfactual fit of methodology §4.1 needs (with Σ_j s_ij and s_i0 per exact row).
The per-row pieces are folded into query bins with a one-hot matrix and added to
:class:`poslens.fit.sums.CellSums`; nothing of size T² outlives the hook. Given a
:class:`poslens.capture.row_bin_store.RowBinStore`, it also writes each row's
maximum and, from one cumulative sum of exp(s − max) along keys, its sums per
offset bin, for the per-sequence counterfactual
(:mod:`poslens.capture.counterfactual_replay`).

There are two paths, chosen by ``LeakageCapture(sync_free=...)`` (default: the
sync-free path when the scores are on CUDA):

- the host path (CPU default): each layer's pieces are copied to the host once
  per layer and added to the sums there; a mask mismatch or a non-finite score
  raises from :meth:`LeakageCapture.reduce` itself.
- the sync-free path: :meth:`LeakageCapture.reduce` issues no host
  synchronization (no ``.item()``, ``bool(tensor)``, ``.cpu()``, ``nonzero``, no
  branch on data). Each layer's pieces go into one flat device tensor, the mask
  and finite checks become device flags in it, the row-bin arrays are copied to
  pinned host memory without blocking, and the offset diagonals of a row block are
  folded into cells by one matrix product and one ``index_add_`` instead of a loop
  over its query bins. :meth:`LeakageCapture.flush`, called after each forward
  pass, copies all of it to the host in one transfer, adds it to the sums, writes
  the row-bin store and raises the deferred errors (same messages, naming layer
  and head). On CPU the two paths agree to rounding (≈1e-15 relative).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from einops import einsum, rearrange
from jaxtyping import Bool, Float, Int

from poslens.capture.row_bin_store import RowBinStore
from poslens.errors import PoslensError
from poslens.fit.binning import Binning
from poslens.fit.sums import FEATURES, WINDOWS, CellSums
from poslens.model import hooks as hook_names

CPU_BLOCK_ELEMENTS = 1 << 19  # float64 elements per work buffer on CPU: 4 MiB, blocks stay in the last-level cache
CUDA_BLOCK_ELEMENTS = 1 << 25  # on CUDA: 256 MiB, few large launches


MASKED_BELOW = 0.5  # a score below this fraction of the dtype's minimum counts as masked
# Floor of s − max before exp. On CPU torch's exp takes a slow path for arguments far below float64's range
# (masked keys: half of an early row block, which then took 3× as long; benchmarks/exp_floor.py). exp(−700) ≈ 1e-304 is below the
# rounding of Z ≥ 1 and of every sum it enters, so the floor changes no figure; masked keys are set to 0 after.
EXP_FLOOR = -700.0


def default_block_elements(device: str | torch.device) -> int:
    """Float64 elements per row-block work buffer on ``device``.

    On CPU a block small enough to stay in cache while the ~10 passes over it
    run; on CUDA a large one, so that a layer takes few kernel launches.

    Args:
        device: The device the scores are on.

    Returns:
        The number of float64 elements of one work buffer.

    Example:
        >>> default_block_elements("cpu") == CPU_BLOCK_ELEMENTS
        True
    """
    return CUDA_BLOCK_ELEMENTS if torch.device(device).type == "cuda" else CPU_BLOCK_ELEMENTS


class MaskMismatchError(PoslensError, RuntimeError):
    """The scores' masked entries are not the ones poslens expects for this layer.

    Raised by :meth:`LeakageCapture.reduce` (on the sync-free path: by
    :meth:`LeakageCapture.flush`) on a layer's first batch when keys
    outside the causal (or sliding-window) mask carry finite scores, or visible
    keys are masked (e.g. padding).

    Example:
        >>> from types import SimpleNamespace
        >>> capture = LeakageCapture(SimpleNamespace(n_layers=1, n_heads=1, window=[None]), Binning(8), groups=2)
        >>> capture.reduce(0, torch.zeros(1, 1, 8, 8))  # no causal mask at all
        Traceback (most recent call last):
        ...
        poslens.capture.leakage_capture.MaskMismatchError: layer 0: keys poslens treats as invisible (window=None) carry finite scores; ...
    """


class NonFiniteScoresError(PoslensError, FloatingPointError):
    """NaN or inf among the visible attention scores (e.g. float16 overflow).

    Raised by :meth:`LeakageCapture.reduce` (on the sync-free path: by
    :meth:`LeakageCapture.flush`); the message names the layer and head.

    Example:
        >>> from types import SimpleNamespace
        >>> capture = LeakageCapture(SimpleNamespace(n_layers=1, n_heads=1, window=[None]), Binning(8), groups=2)
        >>> capture.reduce(0, torch.full((1, 1, 8, 8), float("nan")))
        Traceback (most recent call last):
        ...
        poslens.capture.leakage_capture.NonFiniteScoresError: NaN or inf in the attention scores of layer 0, head 0 ...
    """


def _at_most(x: torch.Tensor, threshold: float) -> bool:
    """Every entry of ``x`` is at most ``threshold`` (true for an empty ``x``; false where a NaN is)."""
    return x.numel() == 0 or bool(x.amax() <= threshold)


def _non_finite(layer: int, head: int) -> NonFiniteScoresError:
    return NonFiniteScoresError(
        f"NaN or inf in the attention scores of layer {layer}, head {head} "
        "(in float16 this is usually overflow: use --dtype float32 or bfloat16)"
    )


@dataclass
class _Pending:
    """One sync-free :meth:`LeakageCapture.reduce` call whose pieces wait on the device for :meth:`LeakageCapture.flush`."""

    group: int
    layer: int
    batch: int
    checking: bool  # the mask flags are in ``flat``
    parts: list[tuple[str, tuple[int, ...]]]  # (name, shape) of the pieces at the start of ``flat``
    flat: Float[torch.Tensor, " values"]  # the pieces, then the flags (as 0.0 / 1.0): bad rows [B·H], then mask ok, hidden unmasked, bad heads [H]
    row_bins: Float[torch.Tensor, "batch heads seq bins"] | None  # on the host (pinned on CUDA, copied without blocking)


@dataclass
class LayerStructure:
    """What is fixed about a layer's visible pairs at length T (causal, maybe windowed).

    Attributes:
        window: The layer's sliding window, or ``None`` for full causal attention.
        valid: Which (query, key) pairs are visible, [T, T].
        n_visible: Number of visible keys of each query row, [T].
        per_bin: Number of visible pairs of each row in each offset bin, [T, B].
        key_sum: Σ j over the visible keys of each row, [T].
        key_sq_sum: Σ j² over the visible keys of each row, [T].
        query_edges: Edges of the query bins.
        offset_edges: Edges of the offset bins.
        offset_bin: The offset bin of each offset Δ, [T].

    Example:
        >>> st = LayerStructure.build(Binning(8), window=None)
        >>> st.n_visible.tolist()
        [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]
    """

    window: int | None
    valid: Bool[torch.Tensor, "seq seq"]
    n_visible: Float[torch.Tensor, " seq"]  # |V_i|
    per_bin: Float[torch.Tensor, "seq obins"]  # visible pairs of row i in offset bin b
    key_sum: Float[torch.Tensor, " seq"]  # Σ_{j∈V_i} j
    key_sq_sum: Float[torch.Tensor, " seq"]  # Σ_{j∈V_i} j²
    query_edges: tuple[int, ...]  # the query bins' row edges
    offset_edges: tuple[int, ...]  # the offset bins' edges e_0 = 0 < … < e_B = T
    offset_bin: Int[torch.Tensor, " seq"]  # offset bin of Δ = 0..T − 1

    @classmethod
    def build(cls, binning: Binning, window: int | None) -> "LayerStructure":
        """The visible pairs and their counts, per row and per offset bin, at ``binning``'s length.

        Args:
            binning: The query and offset bins of the measurement.
            window: The layer's sliding window, or ``None`` for full causal attention.

        Returns:
            The structure, its tensors on the CPU.

        Example:
            >>> LayerStructure.build(Binning(8), window=3).n_visible.tolist()
            [1.0, 2.0, 3.0, 3.0, 3.0, 3.0, 3.0, 3.0]
        """
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
        per_bin = torch.where(empty, 0, j_hi + 1 - j_lo).double()
        valid_d = valid.double()
        jj = torch.arange(t, dtype=torch.float64)
        return cls(
            window=window,
            valid=valid,
            n_visible=valid_d.sum(-1),
            per_bin=per_bin,
            key_sum=valid_d @ jj,
            key_sq_sum=valid_d @ (jj * jj),
            query_edges=tuple(binning.query_edges),
            offset_edges=tuple(binning.offset_edges),
            offset_bin=torch.as_tensor(binning.offset_bin),
        )

    def key_start(self, row: int) -> int:
        """The first key visible from query ``row``.

        Args:
            row: A query position.

        Returns:
            ``0`` for full causal attention, else ``max(0, row − window + 1)``.

        Example:
            >>> LayerStructure.build(Binning(8), window=3).key_start(5)
            3
        """
        return 0 if self.window is None else max(0, row - self.window + 1)

    def row_blocks(self, elements: int) -> list[tuple[int, int]]:
        """Split the query rows into blocks [r0, r1) whose visible key span × rows stays within ``elements``.

        A block holds the keys from ``key_start(r0)`` to ``r1 − 1``; every block has at least one row.

        Args:
            elements: The most (rows × keys) one block may span.

        Returns:
            The blocks ``[(r0, r1)]``, covering every row in order.

        Example:
            >>> LayerStructure.build(Binning(8), window=None).row_blocks(12)
            [(0, 3), (3, 5), (5, 6), (6, 7), (7, 8)]
        """
        t, blocks, r0 = self.valid.shape[0], [], 0
        while r0 < t:
            offset = r0 - self.key_start(r0)  # keys before the block's first row
            rows = 1
            while r0 + rows < t and (rows + 1) * (offset + rows + 1) <= elements:
                rows += 1
            blocks.append((r0, r0 + rows))
            r0 += rows
        return blocks


def cached_structure(structures: dict[int | None, LayerStructure], binning: Binning, window: int | None) -> LayerStructure:
    """The :class:`LayerStructure` of a layer with sliding window ``window``, built once per width into ``structures``.

    A window at least as wide as the sequence counts as full causal attention.

    Args:
        structures: The cache, by effective window (``None``: full causal).
        binning: The query and offset bins of the measurement.
        window: The layer's sliding window, or ``None``.

    Returns:
        The structure, shared by every layer of the same effective window.

    Example:
        >>> cache = {}
        >>> cached_structure(cache, Binning(8), 64).window is None, list(cache)   # width 64 ≥ T = 8: full
        (True, [None])
    """
    if window is not None and window >= binning.seq_len:
        window = None  # a window wider than the sequence changes nothing
    if window not in structures:
        structures[window] = LayerStructure.build(binning, window)
    return structures[window]


@dataclass
class RowBlock:
    """Query rows [r0, r1) of one layer with their key span [k0, r1), the columns to mask, and the indices of their bins.

    Attributes:
        r0: First query row of the block.
        r1: One past the last query row.
        k0: First key visible from any row of the block.
        edge_at: Index of the running sum at key i − e_b, for the offset edges e_0..e_B, [rows, edges].
        edge_used: 0 where that key is before the span (nothing summed yet), else 1, [rows, edges].
        masked_columns: ``(c0, c1, invisible[:, c0:c1])`` of the column ranges where any key is invisible.
        query_segments: ``(query bin, first row, end row)`` of the block's rows, relative to ``r0``.
        offset_bin_of_column: The offset bin of the diagonal read at column c (Δ = span − 1 − c), [span].

    Example:
        >>> st = LayerStructure.build(Binning(8), window=4)
        >>> block = RowBlock.build(st, 4, 6, torch.device("cpu"))
        >>> block.k0, block.size
        (1, 10)
        >>> [(c0, c1) for c0, c1, _ in block.masked_columns]   # key 1 is out of row 5's window, key 5 after row 4
        [(0, 1), (4, 5)]
    """

    r0: int
    r1: int
    k0: int
    edge_at: Int[torch.Tensor, "rows edges"]  # index of the running sum at key i − e_b, for offset edges e_0..e_B
    edge_used: Float[torch.Tensor, "rows edges"]  # 0 where that key is before the span (nothing summed yet)
    masked_columns: list[tuple[int, int, Bool[torch.Tensor, "rows cols"]]]  # (c0, c1, invisible[:, c0:c1]) where any key is invisible
    query_segments: list[tuple[int, int, int]]  # (query bin, first row, end row) of the block's rows, relative to r0
    offset_bin_of_column: Int[torch.Tensor, " span"]  # offset bin of the diagonal read at column c: Δ = span − 1 − c

    @property
    def size(self) -> int:
        """Elements of one head's block of scores: rows × key span.

        Example:
            >>> RowBlock.build(LayerStructure.build(Binning(8), window=None), 4, 6, torch.device("cpu")).size
            12
        """
        return (self.r1 - self.r0) * (self.r1 - self.k0)

    @property
    def padded_size(self) -> int:
        """Elements of one head's block laid out for the diagonal sums: rows × (span + rows), plus rows of zeros
        (shared by the heads) in front.

        Example:
            >>> RowBlock.build(LayerStructure.build(Binning(8), window=None), 4, 6, torch.device("cpu")).padded_size
            18
        """
        rows = self.r1 - self.r0
        return rows * (self.r1 - self.k0 + rows) + rows

    @classmethod
    def build(cls, st: LayerStructure, r0: int, r1: int, device: torch.device) -> "RowBlock":
        """The block of rows [r0, r1) of a layer with structure ``st``, its index tensors on ``device``.

        Args:
            st: The layer's structure.
            r0: First query row.
            r1: One past the last query row.
            device: Where the index tensors go (the scores' device).

        Returns:
            The block.

        Example:
            >>> block = RowBlock.build(LayerStructure.build(Binning(8), window=None), 0, 2, torch.device("cpu"))
            >>> [(c0, c1, invisible.tolist()) for c0, c1, invisible in block.masked_columns]   # key 1 is after row 0
            [(1, 2, [[True], [False]])]
        """
        k0 = st.key_start(r0)
        # offset bin b of row i holds the keys (i − e_{b+1}, i − e_b]: its sum is the running sum at
        # key i − e_b less the one at i − e_{b+1} (0 before the span; keys masked by a window add exact zeros)
        edge_key = torch.arange(r0, r1)[:, None] - torch.tensor(st.offset_edges)[None, :] - k0
        visible = st.valid[r0:r1, k0:r1].to(device)
        # masked_fill only the columns that hold an invisible key: the block's last rows' triangle
        # (and, under a window, the first rows' one), not the whole span
        has_invisible = (~st.valid[r0:r1, k0:r1]).any(0).tolist() + [False]
        masked_columns, c0 = [], None
        for c, flag in enumerate(has_invisible):
            if flag and c0 is None:
                c0 = c
            elif not flag and c0 is not None:
                masked_columns.append((c0, c, (~visible[:, c0:c])))
                c0 = None
        edges = st.query_edges
        query_segments = [
            (c, max(edges[c], r0) - r0, min(edges[c + 1], r1) - r0)
            for c in range(len(edges) - 1)
            if edges[c] < r1 and edges[c + 1] > r0
        ]
        span = r1 - k0
        return cls(
            r0=r0,
            r1=r1,
            k0=k0,
            edge_at=edge_key.clamp(min=0).to(device),
            edge_used=(edge_key >= 0).double().to(device),
            masked_columns=masked_columns,
            query_segments=query_segments,
            offset_bin_of_column=st.offset_bin[span - 1 - torch.arange(span)].to(device),
        )


class LeakageCapture:
    """Accumulates :class:`CellSums` for a model from hooks on every layer's scores.

    Set :attr:`group` before each forward pass; every sequence of one pass
    belongs to that group.

    Args:
        model: The hooked model (a :class:`~poslens.model.loading.PosModel` or a bridge).
        binning: The query and offset bins of the measurement.
        groups: Number of groups G the sequences are assigned to.
        probe: Whether to accumulate the probe's sums.
        check_mask: Whether to check that masked scores sit at the dtype minimum.
        block_elements: Size of a row-block work buffer; default :func:`default_block_elements`.
        store: Where to keep each sequence's row-bin sums for the counterfactual replay; ``None``: not kept.
        sync_free: Whether :meth:`reduce` defers every host synchronization to :meth:`flush` (see the module
            docstring); ``None``: when the scores are on CUDA. Call :meth:`flush` after each forward pass.

    Example:
        >>> capture = LeakageCapture(model, Binning(64), groups=4)  # doctest: +SKIP
        >>> capture.group = 0  # doctest: +SKIP
        >>> run_with_hooks(model, tokens, capture.hooks())  # doctest: +SKIP
        >>> capture.flush()  # doctest: +SKIP
    """

    def __init__(
        self,
        model: Any,
        binning: Binning,
        groups: int,
        probe: bool = True,
        check_mask: bool = True,
        block_elements: int | None = None,
        store: RowBinStore | None = None,
        sync_free: bool | None = None,
    ) -> None:
        self.model = model
        self.sync_free = sync_free  # None: on when the scores are on CUDA
        self._pending: list[_Pending] = []  # sync-free reduce() calls not yet flushed
        self.store = store  # where each sequence's row-bin sums go for the counterfactual replay (None: not kept)
        self.block_elements = block_elements  # float64 elements per work buffer; None: by device
        self.binning = binning
        self.probe = probe
        self.check_mask = check_mask
        self.group = 0
        self._structures: dict[int | None, LayerStructure] = {}
        self._checked: set[int] = set()
        self._buffers: tuple[torch.Tensor, torch.Tensor] | None = None
        self._block_cache: dict[tuple, list[RowBlock]] = {}
        self._device_cache: dict[tuple, tuple[torch.Tensor, ...]] = {}
        self._structure_cache: dict[int | None, dict[str, np.ndarray]] = {}
        self._diagonal_cache: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = {}
        t = binning.seq_len
        qbin = torch.as_tensor(binning.query_bin)
        self._fold = torch.zeros(binning.n_query_bins, t, dtype=torch.float64)
        self._fold[qbin, torch.arange(t)] = 1.0  # one-hot query bins, [C, T]
        self._positions = torch.arange(t, dtype=torch.float64)
        windows = binning.windows
        self._bin_windows = {w: windows[w].tolist() for w in WINDOWS}  # [C] bool: query bin in window w
        q_of_row = binning.query_bin
        self._window_rows = {
            w: torch.as_tensor(windows[w][q_of_row]) for w in WINDOWS
        }  # [T] bool: row i in window w
        self._window_row_counts = np.array([float(self._window_rows[w].sum()) for w in WINDOWS])  # probe rows per sequence
        self.early_rows = min(binning.early, t)  # rows 1 ≤ i < early_rows form the early window
        layer_windows = tuple(self.structure(layer).window for layer in range(model.n_layers))
        self.sums = CellSums.zeros(groups, model.n_layers, model.n_heads, binning, layer_windows)

    def _work_buffers(self, size: int, device: torch.device) -> tuple[Float[torch.Tensor, " buffer"], Float[torch.Tensor, " buffer"]]:
        # two reused flat float64 buffers; fresh allocations would cost page faults on every call
        if self._buffers is None or self._buffers[0].device != device or self._buffers[0].numel() < size:
            self._buffers = tuple(torch.empty(size, dtype=torch.float64, device=device) for _ in range(2))
        return self._buffers

    def _block_elements(self, device: torch.device) -> int:
        return self.block_elements or default_block_elements(device)

    def _key_positions(self, device: torch.device) -> Float[torch.Tensor, " seq"]:
        key = ("key_positions", str(device))
        if key not in self._device_cache:
            self._device_cache[key] = (self._positions.to(device),)
        return self._device_cache[key][0]

    def _blocks(self, st: "LayerStructure", rows_per_query: int, device: torch.device) -> list["RowBlock"]:
        key = (st.window, rows_per_query, str(device))
        if key not in self._block_cache:
            self._block_cache[key] = [
                RowBlock.build(st, r0, r1, device)
                for r0, r1 in st.row_blocks(max(1, self._block_elements(device) // rows_per_query))
            ]
        return self._block_cache[key]

    def structure(self, layer: int) -> LayerStructure:
        """The :class:`LayerStructure` of ``layer``, built once per window width and shared.

        A window at least as wide as the sequence counts as full causal attention.

        Args:
            layer: A layer index.

        Returns:
            The layer's structure.

        Example:
            >>> from types import SimpleNamespace
            >>> capture = LeakageCapture(SimpleNamespace(n_layers=3, n_heads=1, window=[None, 3, 64]), Binning(8), groups=2)
            >>> [capture.structure(layer).window for layer in range(3)]   # width 64 ≥ T = 8: full
            [None, 3, None]
            >>> capture.structure(1).n_visible.tolist()
            [1.0, 2.0, 3.0, 3.0, 3.0, 3.0, 3.0, 3.0]
        """
        return cached_structure(self._structures, self.binning, self.model.window[layer])

    def hooks(self) -> list[tuple[str, Any]]:
        """One hook per layer on ``blocks.{l}.attn.hook_attn_scores``.

        Each hook calls :meth:`reduce` and passes the scores on unchanged.

        Returns:
            ``[(hook name, hook function)]``, as ``run_with_hooks`` takes them.

        Example:
            >>> from types import SimpleNamespace
            >>> capture = LeakageCapture(SimpleNamespace(n_layers=2, n_heads=1, window=[None, None]), Binning(8), groups=2)
            >>> [name for name, _ in capture.hooks()]
            ['blocks.0.attn.hook_attn_scores', 'blocks.1.attn.hook_attn_scores']
        """
        return [(hook_names.attn_scores(layer), self._make_hook(layer)) for layer in range(self.model.n_layers)]

    def _make_hook(self, layer: int):
        def hook(scores: torch.Tensor, hook: Any) -> torch.Tensor:
            self.reduce(layer, scores)
            return scores

        return hook

    def add_structure(self, batch: int) -> None:
        """Add the structural (data-free) sums of ``batch`` sequences to the current group.

        Call it once per forward pass, with the batch size; it also counts the sequences.

        Args:
            batch: Number of sequences in the forward pass.

        Example:
            >>> from types import SimpleNamespace
            >>> capture = LeakageCapture(SimpleNamespace(n_layers=1, n_heads=1, window=[None]), Binning(8), groups=2)
            >>> capture.group = 1
            >>> capture.add_structure(batch=4)
            >>> capture.sums.group_sizes.tolist()
            [0.0, 4.0]
        """
        a, g = self.sums.per_group, self.group
        for layer in range(self.model.n_layers):
            for name, per_sequence in self._structure_sums(self.structure(layer)).items():
                getattr(a, name)[g, layer] += batch * per_sequence
        a.query_row_count[g] += batch * self._fold.sum(-1).numpy()
        a.sequence_count[g] += batch
        self.sums.group_sizes[g] += batch
        self.sums.row_count += batch

    def _structure_sums(self, st: LayerStructure) -> dict[str, Float[np.ndarray, " qbins *obins"]]:
        """One sequence's structural sums for a layer of structure ``st``, by :class:`~poslens.fit.sums.SumArrays` field, once per structure."""
        if st.window not in self._structure_cache:
            fold, pos = self._fold, self._positions
            count = torch.log(st.n_visible)
            sums = {
                "pair_count": fold @ st.per_bin,
                "count_term": fold @ (count[:, None] * st.per_bin),
                "query_pair_count": fold @ st.n_visible,
                "count_term_sq": fold @ (count**2 * st.n_visible),
                "query_position": fold @ (pos * st.n_visible),
                "query_position_sq": fold @ (pos**2 * st.n_visible),
                "key_position": fold @ st.key_sum,
                "key_position_sq": fold @ st.key_sq_sum,
                "query_x_key_position": fold @ (pos * st.key_sum),
            }
            self._structure_cache[st.window] = {name: value.numpy() for name, value in sums.items()}
        return self._structure_cache[st.window]

    def reduce(self, layer: int, scores: Float[torch.Tensor, "batch heads query key"]) -> None:
        """Fold one layer's scores [batch, head, T, T] into the sums of the current group.

        Masked entries must be at the dtype minimum, as in ``hook_attn_scores``. On the
        sync-free path (see :class:`LeakageCapture`) the pieces wait on the device and the
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
            >>> capture = LeakageCapture(SimpleNamespace(n_layers=1, n_heads=1, window=[None]), Binning(8), groups=2)
            >>> scores = torch.zeros(1, 1, 8, 8).masked_fill(torch.ones(8, 8).triu(1).bool(), torch.finfo(torch.float32).min)
            >>> capture.reduce(0, scores)
            >>> capture.sums.row_features[0, 0, 0].round(3).tolist()   # key-0 mass of uniform attention: 1/(i+1)
            [1.0, 0.5, 0.333, 0.25, 0.2, 0.167, 0.143, 0.125]
        """
        batch, heads, t_q, t_k = scores.shape
        t = self.binning.seq_len
        if t_q != t_k or t_q != t:
            raise ValueError(f"expected scores of {t}×{t}, got {t_q}×{t_k}")
        st = self.structure(layer)
        device = scores.device
        deferred = self.sync_free if self.sync_free is not None else device.type == "cuda"
        if deferred and self._pending and self._pending[0].group != self.group:
            self.flush()  # a batch never spans two groups: the pieces pending are another group's
        checking = self.check_mask and layer not in self._checked  # the first sequence of the layer's first batch
        threshold = MASKED_BELOW * torch.finfo(scores.dtype).min
        f64 = {"dtype": torch.float64, "device": device}
        mask_ok = torch.ones((), dtype=torch.bool, device=device) if deferred and checking else None  # the device flag
        log_z, row_sum, row_js, row_sq = (torch.empty(batch, heads, t, **f64) for _ in range(4))
        features = torch.empty(batch, heads, t, len(FEATURES), **f64)
        n_b = self.binning.n_offset_bins
        logit_cells = torch.zeros(heads, self.binning.n_query_bins, n_b, **f64)  # Σ over the batch of s per cell
        key0_logits = torch.zeros(heads, t, **f64)  # Σ over the batch of s_i0
        row_bins = torch.empty(batch, heads, t, 1 + n_b, **f64) if self.store is not None else None  # max, then Σ exp per bin
        offset_sums = torch.zeros(2, heads, t, **f64)  # Σ of s_{i,i−Δ} over the all / early rows
        blocks = self._blocks(st, batch * heads, device)
        work_s, work_e = self._work_buffers(max(batch * heads * b.padded_size for b in blocks), device)
        key_positions = self._key_positions(device)
        for block in blocks:
            r0, r1, k0 = block.r0, block.r1, block.k0
            n_rows, span = r1 - r0, r1 - k0
            rows, shape = slice(r0, r1), (batch, heads, n_rows, span)
            # s lives in rows of width span + n_rows whose tail is zero, after n_rows zeros: the layout
            # that _add_diagonal_sums reads the offset diagonals from without a copy
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
                    mask_holds &= _at_most(s[:1, ..., c0:c1].masked_fill(~invisible, threshold), threshold)
                s[..., c0:c1].masked_fill_(invisible, 0.0)
                exp_s[..., c0:c1].masked_fill_(invisible, 0.0)
            visible = s  # masked entries are 0 from here on
            if checking and mask_ok is not None:  # as below, as a device flag (all() of an empty part is true)
                mask_ok &= (s[:1] > threshold).all()
                for part in (scores[:1, :, r0:r1, r1:], scores[:1, :, r0:r1, :k0]):
                    mask_ok &= (part <= threshold).all()
            elif checking:  # the visible keys are not masked, and the keys outside the span are
                outside = (scores[:1, :, r0:r1, r1:], scores[:1, :, r0:r1, :k0])
                mask_holds &= bool(s[:1].amin() > threshold) and all(_at_most(part, threshold) for part in outside)
                if not mask_holds:
                    self._explain_mask_failure(layer, scores[:1], st.valid.to(device))
            row_sum[:, :, rows] = visible.sum(-1)
            row_js[:, :, rows] = visible @ key_positions[k0:r1]  # a matrix-vector product: faster than [1, j] as two columns
            row_sq[:, :, rows] = torch.einsum("...j,...j->...", visible, visible)  # einsum: no full-size temporary
            weighted = torch.einsum("...j,...j->...", exp_s, visible)  # Σ_j exp(s_ij − max) s_ij
            key0_weight = exp_s[..., 0].clone() if k0 == 0 else None
            self_weight = torch.diagonal(exp_s, offset=r0 - k0, dim1=-2, dim2=-1).clone()
            if k0 == 0:
                key0_logits[:, rows] = visible[..., 0].sum(0)
            if deferred:
                self._add_diagonal_sums_at_once(flat, (batch, heads, n_rows, span), block, logit_cells, offset_sums)
            else:
                self._add_diagonal_sums(flat, (batch, heads, n_rows, span), block, logit_cells, offset_sums)
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
            features[:, :, rows, 0] = key0_weight / partition if k0 == 0 else 0.0
            features[:, :, rows, 1] = block_log_z - weighted / partition  # entropy: log Z − Σ_j a_ij s_ij
            features[:, :, rows, 2] = self_weight / partition
            features[:, :, rows, 3] = 1.0 / partition  # the row maximum has exp_s = 1
        finite = torch.isfinite(row_sum) & torch.isfinite(log_z)
        if deferred:
            self._checked.add(layer)  # checked in flush()
            flags = [~finite.all(-1)]  # [B, H]: a non-finite row of sequence b, head h
            if mask_ok is not None:  # what _explain_mask_failure reads, for flush() to explain a failed check
                valid = self._valid_on_device(st, device)
                first = scores[:1]
                bad = torch.isnan(first) | torch.isposinf(first) | (torch.isneginf(first) & valid)
                flags += [mask_ok, ((first > threshold) & ~valid).any(), bad.flatten(2).any(-1)[0]]
            self._defer(layer, st, checking, log_z, row_sum, row_js, row_sq, logit_cells, features, key0_logits, offset_sums, flags, row_bins)
            return
        if not finite.all():
            raise _non_finite(layer, int(torch.nonzero(~finite)[0, 1]))
        self._checked.add(layer)
        self._accumulate(layer, st, log_z, row_sum, row_js, row_sq, logit_cells, features, key0_logits, offset_sums)
        if row_bins is not None:
            self.store.write(self.group, layer, row_bins.cpu().numpy())

    def _add_diagonal_sums(
        self,
        flat: Float[torch.Tensor, " buffer"],
        shape: tuple[int, int, int, int],
        block: "RowBlock",
        logit_cells: Float[torch.Tensor, "heads qbins obins"],
        offset_sums: Float[torch.Tensor, "2 heads seq"],
    ) -> None:
        """Add one block's visible logits, summed along each offset diagonal, to the cell sums and the per-offset sums.

        ``flat`` holds R zeros, then the block [B, H, R, S] in rows of width S + R whose
        last R entries are zero. Read with row stride S + R + 1, column c of that view
        walks the diagonal of offset Δ = S − 1 − c (entries left of a row's start fall in
        the previous row's zeros). Summed over the rows of each query bin c and folded
        into offset bins, that is the bin's share of the ``logit`` cells; over the rows of
        the all / early windows, it is ``offset_sums`` [2, H, T] (index 0: rows i ≥ 1,
        index 1: the early rows 1 ≤ i < Q).
        """
        batch, heads, n_rows, span = shape
        width = span + n_rows
        diagonals = flat.as_strided(
            (batch, heads, span, n_rows), (heads * n_rows * width, n_rows * width, 1, width + 1), flat.storage_offset() + 1
        )
        windows = self._bin_windows
        for query_bin, first, end in block.query_segments:
            by_column = diagonals[..., first:end].sum(-1).sum(0)  # [H, S]
            logit_cells[:, query_bin].index_add_(1, block.offset_bin_of_column, by_column)
            if windows["all"][query_bin]:
                by_offset = by_column.flip(-1)
                offset_sums[0, :, :span] += by_offset
                if windows["early"][query_bin]:
                    offset_sums[1, :, :span] += by_offset

    def _add_diagonal_sums_at_once(
        self,
        flat: Float[torch.Tensor, " buffer"],
        shape: tuple[int, int, int, int],
        block: "RowBlock",
        logit_cells: Float[torch.Tensor, "heads qbins obins"],
        offset_sums: Float[torch.Tensor, "2 heads seq"],
    ) -> None:
        """:meth:`_add_diagonal_sums` without the loop over the block's query bins (the sync-free path).

        The diagonals, summed over the batch, are folded over the rows by one matrix
        [R, query bins of the block + 2] (one-hot query bins, then the all / early windows)
        and added to the cells by one ``index_add_`` over (query bin, offset bin).
        """
        batch, heads, n_rows, span = shape
        width = span + n_rows
        diagonals = flat.as_strided(
            (batch, heads, span, n_rows), (heads * n_rows * width, n_rows * width, 1, width + 1), flat.storage_offset() + 1
        )
        rows_to_columns, cell_index = self._diagonal_tables(block, flat.device)
        n_segments = rows_to_columns.shape[1] - 2
        folded = diagonals.sum(0) @ rows_to_columns  # [H, S, segments + 2]
        logit_cells.view(heads, -1).index_add_(1, cell_index, folded[..., :n_segments].reshape(heads, -1))
        offset_sums[:, :, :span] += rearrange(folded[..., n_segments:], "head col window -> window head col").flip(-1)

    def _diagonal_tables(self, block: "RowBlock", device: torch.device) -> tuple[Float[torch.Tensor, "rows columns"], Int[torch.Tensor, " cells"]]:
        """For :meth:`_add_diagonal_sums_at_once`: the rows' fold matrix and each (column, query bin)'s cell index, once per block."""
        key = (block.r0, block.r1, block.k0, str(device))
        if key not in self._diagonal_cache:
            windows, segments = self._bin_windows, block.query_segments
            matrix = torch.zeros(block.r1 - block.r0, len(segments) + 2, dtype=torch.float64)
            for k, (query_bin, first, end) in enumerate(segments):
                matrix[first:end, k] = 1.0
                if windows["all"][query_bin]:
                    matrix[first:end, -2] = 1.0
                    if windows["early"][query_bin]:
                        matrix[first:end, -1] = 1.0
            query_bins = torch.tensor([query_bin for query_bin, _, _ in segments], device=device)
            index = block.offset_bin_of_column[:, None] + self.binning.n_offset_bins * query_bins[None, :]  # [S, segments]
            self._diagonal_cache[key] = (matrix.to(device), index.reshape(-1))
        return self._diagonal_cache[key]

    def _cell_parts(
        self,
        st: LayerStructure,
        log_z: Float[torch.Tensor, "batch heads seq"],
        row_sum: Float[torch.Tensor, "batch heads seq"],
        row_js: Float[torch.Tensor, "batch heads seq"],
        row_sq: Float[torch.Tensor, "batch heads seq"],
        logit_cells: Float[torch.Tensor, "heads qbins obins"],
        key0_logits: Float[torch.Tensor, "heads seq"],
        offset_sums: Float[torch.Tensor, "2 heads seq"],
    ) -> dict[str, torch.Tensor]:
        """One layer's pieces by :class:`~poslens.fit.sums.SumArrays` field, folded into query bins, on the scores' device."""
        fold, keys, per_bin, n_visible = self._on_device(st, log_z.device)
        z_sum = log_z.sum(0)  # [H, T]
        return {
            "logit": logit_cells,
            "log_partition": einsum(fold, z_sum, per_bin, "qbin seq, head seq, seq obin -> head qbin obin"),
            "logit_sq": row_sq.sum(0) @ fold.T,
            "log_partition_sq": ((log_z**2).sum(0) * n_visible) @ fold.T,
            "logit_x_log_partition": (log_z * row_sum).sum(0) @ fold.T,
            "logit_x_query_position": (row_sum.sum(0) * keys) @ fold.T,
            "logit_x_key_position": row_js.sum(0) @ fold.T,
            "logit_by_row": row_sum.sum(0),
            "key0_logit_by_row": key0_logits,
            "logit_by_offset_all": offset_sums[0],
            "logit_by_offset_early": offset_sums[1, :, : self.early_rows],
        }

    def _accumulate(
        self,
        layer: int,
        st: LayerStructure,
        log_z: Float[torch.Tensor, "batch heads seq"],
        row_sum: Float[torch.Tensor, "batch heads seq"],
        row_js: Float[torch.Tensor, "batch heads seq"],
        row_sq: Float[torch.Tensor, "batch heads seq"],
        logit_cells: Float[torch.Tensor, "heads qbins obins"],
        features: Float[torch.Tensor, "batch heads seq features"],
        key0_logits: Float[torch.Tensor, "heads seq"],
        offset_sums: Float[torch.Tensor, "2 heads seq"],
    ) -> None:
        """Fold one layer's per-row pieces into query bins and add them to the current group (the host path)."""
        a, g = self.sums.per_group, self.group
        parts = self._cell_parts(st, log_z, row_sum, row_js, row_sq, logit_cells, key0_logits, offset_sums)
        parts["features"] = rearrange(features, "batch head seq feature -> batch seq head feature")  # folded on the host
        # one device-to-host copy per layer: on a GPU each copy waits for the queue to drain
        flat = torch.cat([part.reshape(-1) for part in parts.values()]).cpu()
        pieces = dict(zip(parts, flat.split([part.numel() for part in parts.values()])))
        for name, part in parts.items():
            if name != "features":
                getattr(a, name)[g, layer] += pieces[name].view(part.shape).numpy()
        features = pieces["features"].view(parts["features"].shape)
        per_row = features.sum(0)  # [T, H, F]
        a.features[g, layer] += einsum(self._fold, per_row, "qbin seq, seq head feature -> head feature qbin").numpy()
        self.sums.row_features[layer] += rearrange(per_row, "seq head feature -> head feature seq").numpy()
        if self.probe:
            self._add_probe(layer, features)

    def _defer(
        self,
        layer: int,
        st: LayerStructure,
        checking: bool,
        log_z: Float[torch.Tensor, "batch heads seq"],
        row_sum: Float[torch.Tensor, "batch heads seq"],
        row_js: Float[torch.Tensor, "batch heads seq"],
        row_sq: Float[torch.Tensor, "batch heads seq"],
        logit_cells: Float[torch.Tensor, "heads qbins obins"],
        features: Float[torch.Tensor, "batch heads seq features"],
        key0_logits: Float[torch.Tensor, "heads seq"],
        offset_sums: Float[torch.Tensor, "2 heads seq"],
        flags: list[torch.Tensor],
        row_bins: Float[torch.Tensor, "batch heads seq bins"] | None,
    ) -> None:
        """The sync-free path's end of :meth:`reduce`: every piece, folded on the device, in one flat tensor for :meth:`flush`."""
        batch, heads, t = log_z.shape
        parts = self._cell_parts(st, log_z, row_sum, row_js, row_sq, logit_cells, key0_logits, offset_sums)
        per_row = rearrange(features, "batch head seq feature -> batch seq head feature").sum(0)  # [T, H, F]
        parts["features"] = einsum(self._on_device(st, log_z.device)[0], per_row, "qbin seq, seq head feature -> head feature qbin")
        parts["row_features"] = rearrange(per_row, "seq head feature -> head feature seq")
        if self.probe:  # the probe's design sums, as _add_probe forms them on the host
            ones = torch.ones(batch, t, 1, dtype=torch.float64, device=log_z.device)
            x = torch.cat([ones, rearrange(features, "batch head seq feature -> batch seq (head feature)")], -1)
            y = torch.log1p(self._key_positions(log_z.device))[None, :].expand(batch, t)
            per_window: dict[str, list[torch.Tensor]] = {"probe_gram": [], "probe_design_x_target": [], "probe_target": [], "probe_target_sq": []}
            for window in WINDOWS:
                rows = self._window_index(window, log_z.device)
                xs = rearrange(x.index_select(1, rows), "batch row probe -> (batch row) probe")
                ys = y.index_select(1, rows).reshape(-1)
                for name, value in zip(per_window, (xs.T @ xs, xs.T @ ys, ys.sum(), (ys * ys).sum())):
                    per_window[name].append(value)
            parts.update({name: torch.stack(values) for name, values in per_window.items()})
        if row_bins is not None and row_bins.is_cuda:  # to pinned host memory, without waiting; flush() writes it
            host = torch.empty(row_bins.shape, dtype=row_bins.dtype, pin_memory=True)
            row_bins = host.copy_(row_bins, non_blocking=True)
        flat = torch.cat([part.reshape(-1) for part in parts.values()] + [flag.reshape(-1).double() for flag in flags])
        shapes = [(name, tuple(part.shape)) for name, part in parts.items()]
        self._pending.append(_Pending(self.group, layer, batch, checking, shapes, flat, row_bins))

    def flush(self) -> None:
        """Add the pieces the sync-free :meth:`reduce` calls left on the device to the sums, in one device-to-host copy.

        Call it after each forward pass (and before reading :attr:`sums`). It also
        writes their row-bin arrays to the store, and raises the checks' errors that
        :meth:`reduce` deferred, for the first call (in order) that failed; the
        calls before it are added, as on the host path. Nothing pending (the host
        path, or a second call): nothing happens.

        Raises:
            MaskMismatchError: When a layer's first batch had scores masked other than as the layer's mask.
            NonFiniteScoresError: When a visible score was NaN or infinite; names the layer and head.

        Example:
            >>> from types import SimpleNamespace
            >>> capture = LeakageCapture(SimpleNamespace(n_layers=1, n_heads=1, window=[None]), Binning(8), groups=2, sync_free=True)
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
            poslens.capture.leakage_capture.NonFiniteScoresError: NaN or inf in the attention scores of layer 0, head 0 ...
        """
        pending, self._pending = self._pending, []
        if not pending:
            return
        # the one device-to-host copy of the pass: it waits for the queue once, and for the pinned row-bin copies too
        host = torch.cat([call.flat for call in pending]).cpu()
        a = self.sums.per_group
        for call, flat in zip(pending, host.split([call.flat.numel() for call in pending])):
            heads = self.model.n_heads
            sizes = [math.prod(shape) for _, shape in call.parts]
            values = flat.split(sizes + [flat.numel() - sum(sizes)])
            flags = values[-1]
            bad_rows = flags[: call.batch * heads].view(call.batch, heads) > 0
            if call.checking and not flags[call.batch * heads] > 0:  # the mask check failed: explain it as reduce() would
                hidden_unmasked, bad_heads = bool(flags[call.batch * heads + 1] > 0), flags[call.batch * heads + 2 :] > 0
                if bad_heads.any():
                    raise _non_finite(call.layer, int(torch.nonzero(bad_heads)[0, 0]))
                raise self._mask_error(call.layer, hidden_unmasked)
            if bad_rows.any():
                raise _non_finite(call.layer, int(torch.nonzero(bad_rows)[0, 1]))
            g, layer = call.group, call.layer
            for (name, shape), value in zip(call.parts, values):
                if name == "row_features":
                    self.sums.row_features[layer] += value.view(shape).numpy()
                else:
                    getattr(a, name)[g, layer] += value.view(shape).numpy()
            if self.probe:
                a.probe_row_count[g, layer] += call.batch * self._window_row_counts
            if call.row_bins is not None:
                self.store.write(g, layer, call.row_bins.numpy())

    def _window_index(self, window: str, device: torch.device) -> Int[torch.Tensor, " rows"]:
        """The rows of probe window ``window`` as indices on ``device`` (a boolean index would synchronize)."""
        key = (f"window_rows_{window}", str(device))
        if key not in self._device_cache:
            self._device_cache[key] = (torch.nonzero(self._window_rows[window])[:, 0].to(device),)
        return self._device_cache[key][0]

    def _valid_on_device(self, st: LayerStructure, device: torch.device) -> Bool[torch.Tensor, "seq seq"]:
        key = ("valid", st.window, str(device))
        if key not in self._device_cache:
            self._device_cache[key] = (st.valid.to(device),)
        return self._device_cache[key][0]

    def _on_device(self, st: LayerStructure, device: torch.device) -> tuple[
        Float[torch.Tensor, "qbins seq"], Float[torch.Tensor, " seq"], Float[torch.Tensor, "seq obins"], Float[torch.Tensor, " seq"]
    ]:
        """The fold matrix, key positions, per-bin and visible counts of ``st``, copied to ``device`` once."""
        key = (st.window, str(device))
        if key not in self._device_cache:
            self._device_cache[key] = tuple(
                x.to(device) for x in (self._fold, self._positions, st.per_bin, st.n_visible)
            )
        return self._device_cache[key]

    def _add_probe(self, layer: int, features: Float[torch.Tensor, "batch seq heads features"]) -> None:
        """Add the probe's design sums x̃ x̃ᵀ, x̃ y, y, y² and row count of one layer's rows, per window."""
        a, g = self.sums.per_group, self.group
        batch, t = features.shape[:2]
        x = torch.cat([torch.ones(batch, t, 1, dtype=torch.float64), rearrange(features, "batch seq head feature -> batch seq (head feature)")], -1)
        y = torch.log1p(self._positions)[None, :].expand(batch, t)
        for w_index, window in enumerate(WINDOWS):
            rows = self._window_rows[window]
            xs, ys = rearrange(x[:, rows], "batch row probe -> (batch row) probe"), y[:, rows].reshape(-1)
            a.probe_gram[g, layer, w_index] += (xs.T @ xs).numpy()
            a.probe_design_x_target[g, layer, w_index] += (xs.T @ ys).numpy()
            a.probe_target[g, layer, w_index] += float(ys.sum())
            a.probe_target_sq[g, layer, w_index] += float((ys * ys).sum())
            a.probe_row_count[g, layer, w_index] += ys.numel()

    def _explain_mask_failure(self, layer: int, scores: Float[torch.Tensor, "1 heads seq seq"], valid: Bool[torch.Tensor, "seq seq"]) -> None:
        # NaN or +inf anywhere (an overflowed score plus the mask stays +inf), or −inf on a visible key:
        # report the overflow itself rather than a mask mismatch.
        bad = torch.isnan(scores) | torch.isposinf(scores) | (torch.isneginf(scores) & valid)
        if bad.any():
            raise _non_finite(layer, int(torch.nonzero(bad)[0, 1]))
        unmasked = scores > MASKED_BELOW * torch.finfo(scores.dtype).min
        raise self._mask_error(layer, bool((unmasked & ~valid).any()))

    def _mask_error(self, layer: int, hidden_unmasked: bool) -> MaskMismatchError:
        """The mask check's error: invisible keys carry finite scores (``hidden_unmasked``), else visible keys are masked."""
        if hidden_unmasked:
            return MaskMismatchError(
                f"layer {layer}: keys poslens treats as invisible (window={self.model.window[layer]}) carry finite "
                "scores; the model's mask differs from the one recorded on the model"
            )
        return MaskMismatchError(
            f"layer {layer}: keys poslens treats as visible are masked in the scores "
            f"(window={self.model.window[layer]}); padding is not supported, use equal-length sequences"
        )
