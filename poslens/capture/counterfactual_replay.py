"""The per-sequence counterfactual of a measurement, replayed from the first pass's row-bin sums.

methodology §4.4 (i): the mask-only counterfactual fitted to the mean pattern is
biased when logits vary between sequences (the mean of log Z_i is not log Z_i
of the mean logits). The per-sequence counterfactual removes the head's
absolute component A (per query-bin × offset-bin cell, fitted on the other
groups: :meth:`poslens.fit.counterfactual.WindowFit.absolute_component_cells`) from every
sequence's logits and renormalizes them over the visible keys:

    log a'_ij(n) = s_ij(n) − A_cb − log Z'_i(n),   log Z'_i(n) = logsumexp_{j∈V_i} (s_ij(n) − A_cb)

The cell sums of s and the counts are known from the first pass, so only
Σ_n log Z'_i(n) per row is left, once per query window (each query window has its
own fit) and per variant of A: the estimate's A, and one A per jackknife
replicate, refitted without the replicate's group too, so that the intervals
carry the noise of A. A is constant over each (query bin, offset bin) cell, so
per row it needs only the row's maximum m_i and its sums S_ib of exp(s_ij − m_i)
over each offset bin b, which the first pass wrote to a
:class:`poslens.capture.row_bin_store.RowBinStore`:

    log Z'_i(n) = m_i + log Σ_b exp(−A_{c(i)b}) · S_ib

so every variant costs O(bins) per row, and no second forward pass is needed.
"""

from __future__ import annotations

import numpy as np
import torch
from jaxtyping import Float

from poslens.capture.attention_layout import HeadCounts
from poslens.capture.fused_rows import replay_log_partition
from poslens.capture.row_bin_store import RowBinStore
from poslens.compiled import fused_available
from poslens.fit.binning import Binning
from poslens.fit.cross_fit import CrossFit
from poslens.fit.sums import QUERY_WINDOWS
from poslens.progress import progress_bar

WEIGHTS_BYTES = 64 * 2**20
"""The most that one group's exp(−A) of every variant and layer may take for :meth:`CounterfactualReplay.replay` to form
it once for the group rather than once per stored entry (the same numbers either way)."""

PRODUCT_BYTES = 32 * 2**20
"""The most that one product of row bins and weights may take when :meth:`CounterfactualReplay.replay` gives
:meth:`CounterfactualReplay.add` several variants of A at once; a single variant's product is made whatever its size."""


class CounterfactualReplay:
    """Accumulates Σ_n log Z'_i(n) per group, variant of A, layer, head and row, for each query window.

    ``cross_fit`` holds each group's fit of A (:func:`poslens.fit.cross_fit.cross_fitted_absolute_components`);
    for the sequences of group g, :meth:`~poslens.fit.cross_fit.CrossFit.variants` gives
    ``{query_window: [G, L, H, C·B]}``: variant v = g is A^(−g), fitted without
    group g (the estimate); variant v ≠ g is A^(−g,−v), fitted without groups
    g and v (for the jackknife replicate that deletes group v). :attr:`log_partition` holds
    ``{query_window: [G, G, L, H, rows]}`` (group, variant, …) with rows = Q for
    ``early`` and T for ``all``.

    Args:
        model: The hooked model the scores come from.
        binning: The query and offset bins of the measurement.
        cross_fit: Each group's fit of the absolute component A.
        groups: Number of groups G.
        fused: Whether :meth:`add` sums CPU row bins with the compiled loop of :mod:`poslens.capture.fused_rows`
            (the same sums to rounding) rather than with torch operations; ``None``: where
            :func:`~poslens.compiled.fused_available`.

    Example:
        >>> from types import SimpleNamespace
        >>> b = Binning(8, early=4)
        >>> zero = {w: np.zeros((2, 1, 1, b.n_query_bins * b.n_offset_bins)) for w in ("early", "all")}
        >>> cross = CrossFit(zero, {w: x[0] for w, x in zero.items()}, np.ones(2))   # A = 0 for every group
        >>> replay = CounterfactualReplay(SimpleNamespace(n_layers=1, n_heads=1), b, cross, groups=2)
        >>> row_bins = np.zeros((1, 1, 8, 1 + b.n_offset_bins))   # row maxima 0, and uniform logits:
        >>> row_bins[0, 0, :, 1] = np.arange(1, 9)                 # row i's i + 1 keys each add exp(0)
        >>> replay.add(0, 0, row_bins)
        >>> np.round(np.exp(replay.log_partition["all"][0, 0, 0, 0]), 6).tolist()   # A = 0: Z'_i = i + 1
        [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]
    """

    def __init__(self, model: HeadCounts, binning: Binning, cross_fit: CrossFit, groups: int, fused: bool | None = None) -> None:
        self.fused = fused_available() if fused is None else fused
        self.binning = binning
        self.cross_fit = cross_fit
        t = binning.seq_len
        self.rows = {"early": min(binning.early, t), "all": t}
        self.log_partition = {w: np.zeros((groups, groups, model.n_layers, model.n_heads, self.rows[w])) for w in QUERY_WINDOWS}
        self.n_query_bins, self.n_offset_bins = binning.n_query_bins, binning.n_offset_bins
        self._row_query_bin = torch.as_tensor(binning.query_bin[:t], dtype=torch.long)  # c(i)
        self._row_query_bin_np = self._row_query_bin.numpy()  # the same, for the compiled loop
        # on an accelerator: exp(−A) cells of each group of the batch [variant, L, H, C, B] per query window, and the
        # rows' query bins, copied once per group and batch; Σ log Z' of the batch per group [variant, L, H, rows]
        self._device_weights: dict[tuple[int, str], dict[str, torch.Tensor]] = {}
        self._pending: dict[int, dict[str, torch.Tensor]] = {}

    def _cell_weights(self, variants: dict[str, Float[np.ndarray, "variants *layers heads cells"]]) -> dict[str, torch.Tensor]:
        """exp(−A) of every cell of ``variants`` (:meth:`~poslens.fit.cross_fit.CrossFit.variants`), [variant, (L,) H, C, B] per query window.

        With torch's exp (several times as fast as numpy's here); ``variants`` may be read-only (kept by the cross fit).
        """
        return {w: torch.from_numpy(np.negative(x)).exp_().unflatten(-1, (self.n_query_bins, self.n_offset_bins)) for w, x in variants.items()}

    def _rows_of(
        self, cells: dict[str, Float[torch.Tensor, "variants heads qbins bins"]]
    ) -> dict[str, Float[torch.Tensor, "variants heads rows bins"]]:
        """Each row's cells (its query bin's) of one layer's exp(−A), per query window: [variant, H, rows, B]."""
        return {w: x.index_select(2, self._row_query_bin[: self.rows[w]]) for w, x in cells.items()}

    def add(
        self,
        group: int,
        layer: int,
        row_bins: Float[np.ndarray, "batch heads seq bins"] | Float[torch.Tensor, "batch heads seq bins"],
        product_bytes: int = 0,
        cells: dict[str, Float[torch.Tensor, "variants heads qbins offset_bins"]] | None = None,
    ) -> None:
        """Add Σ over the sequences of ``row_bins`` (all of ``group``) of log Z'_i per row and variant of ``layer`` to ``group``.

        ``row_bins`` is [batch, H, T, 1 + bins]: each row's maximum, then its sums of exp(s − max) per offset bin,
        from the store (numpy) or from the second pass (a tensor; on an accelerator the sums stay there until :meth:`flush`).

        Args:
            group: The group of the batch's sequences.
            layer: The layer index.
            row_bins: Each row's maximum, then its sums of exp(s − max) per offset bin, [batch, H, T, 1 + bins].
            product_bytes: How much one product of row bins and weights may take, to weigh several variants of A
                at once (never fewer than one). 0, the default, takes one variant at a time, as the second pass
                needs inside the forward, where the product adds to the peak; :meth:`replay`, after the forward,
                passes :data:`PRODUCT_BYTES`. The sums are the same to the bit.
            cells: exp(−A) of ``group``'s variants for ``layer`` per query bin and offset bin, [V, H, C, B] per query
                window (what :meth:`replay` forms once per group); default formed here. The same numbers either way.

        Example:
            >>> # see the class example
        """
        bins = torch.as_tensor(row_bins)
        if bins.device.type != "cpu":
            self._add_on_device(group, layer, bins)
            return
        if cells is None:
            cells = self._cell_weights(self.cross_fit.variants(group, layer))
        if self.fused and bins.dtype == torch.float64:
            on_host = np.ascontiguousarray(bins.numpy())
            for query_window, weights in cells.items():
                sums = replay_log_partition(on_host, np.ascontiguousarray(weights.numpy()), self._row_query_bin_np, self.rows[query_window])
                self.log_partition[query_window][group, :, layer] += sums
            return
        row_max, per_bin = bins[..., 0], bins[..., 1:]
        for query_window, row_weights in self._rows_of(cells).items():
            n = self.rows[query_window]
            # each row's bins weighted by its query bin's exp(−A), summed over bins: elementwise products and a
            # sum, not a matmul (einsum), whose other order of summation changes the rounding, which the
            # figures amplify beyond 1e-12
            # one variant's product is [batch, head, row, bin]; as many variants go together as product_bytes
            # allows, so that a notebook-sized replay pays one pass per layer and not one per variant
            target = self.log_partition[query_window][group, :, layer]  # [variant, head, row]
            rows_bins = per_bin[:, :, :n]
            step = max(1, product_bytes // (rows_bins.numel() * rows_bins.element_size()))
            for start in range(0, row_weights.shape[0], step):
                z = (rows_bins[None] * row_weights[start : start + step, None]).sum(-1)  # [variants, batch, head, row]
                target[start : start + step] += (torch.log(z) + row_max[None, :, :, :n]).sum(1).numpy()

    def _add_on_device(self, group: int, layer: int, bins: Float[torch.Tensor, "batch heads seq bins"]) -> None:
        """:meth:`add` for row-bin sums on an accelerator: the same arithmetic, summed on the device until :meth:`flush`.

        No host synchronization but one copy of each group's weights per batch: the weights of the group's
        variants go to the device at its first layer of the batch, and the sums stay there until the end of the batch.
        """
        device = bins.device
        row_max, per_bin = bins[..., 0], bins[..., 1:]
        key = (group, str(device))
        if key not in self._device_weights:
            # the per-cell weights [variant, L, H, C, B] (small), and each row's query bin, once per group and batch
            exp_minus_a = self._cell_weights(self.cross_fit.variants(group))
            self._device_weights[key] = {w: x.to(device) for w, x in exp_minus_a.items()}
            self._device_weights[key]["row_query_bin"] = self._row_query_bin.to(device)
        on_device = self._device_weights[key]
        pending = self._pending.setdefault(group, {})
        for query_window in QUERY_WINDOWS:
            n = self.rows[query_window]
            cells = on_device[query_window][:, layer]  # [variant, head, C, B]
            weights = cells.index_select(2, on_device["row_query_bin"][:n])
            if query_window not in pending:
                shape = self.log_partition[query_window].shape[1:]  # [variant, layer, head, row]
                pending[query_window] = torch.zeros(shape, dtype=torch.float64, device=device)
            for variant in range(weights.shape[0]):
                z = (per_bin[:, :, :n] * weights[variant][None]).sum(-1)  # [batch, head, row]
                pending[query_window][variant, layer] += (torch.log(z) + row_max[:, :, :n]).sum(0)

    def flush(self) -> None:
        """Add the sums held on the device (by :meth:`add` on accelerator tensors) to :attr:`log_partition`.

        One copy to the host per group of the batch and query window; call it at the end of each batch.
        Nothing to do on the CPU.

        Example:
            >>> from types import SimpleNamespace
            >>> from poslens.fit.binning import Binning
            >>> b = Binning(8, early=4); zero = {w: np.zeros((2, 1, 1, b.n_query_bins * b.n_offset_bins)) for w in ("early", "all")}
            >>> cross_fit = CrossFit(zero, {w: x[0] for w, x in zero.items()}, np.ones(2))
            >>> replay = CounterfactualReplay(SimpleNamespace(n_layers=1, n_heads=1), b, cross_fit, groups=2)
            >>> replay.flush()   # nothing was added on a device: nothing to hand over
            >>> float(replay.log_partition["all"].sum())
            0.0
        """
        for group, held in self._pending.items():
            for query_window, sums in held.items():
                self.log_partition[query_window][group] += sums.cpu().numpy()
        self._pending, self._device_weights = {}, {}

    def replay(self, store: RowBinStore, progress: bool = False, description: str = "counterfactual") -> None:
        """:meth:`add` every entry of ``store``, group by group (in the order written within a group).

        Each group's exp(−A) is formed once for all its layers when that takes at most :data:`WEIGHTS_BYTES`,
        else once per entry. Within a group the entries keep the order they were written in, so every
        (group, layer) sums its batches in the same order as :meth:`add` in write order would: the same
        numbers, to the bit.

        Args:
            store: The row-bin sums kept by the first pass.
            progress: Whether to show a progress bar.
            description: The progress bar's label.

        Example:
            >>> replay.replay(store)  # doctest: +SKIP
        """
        order = sorted(range(len(store.entries)), key=lambda k: store.entries[k][0])  # stable: write order within a group
        one_group = sum(x.size for x in self.cross_fit.fits.values()) * 8  # G variants × L × H × cells, float64
        cells, cells_of = None, -1
        for group, layer, row_bins in progress_bar(
            store.read(order), total=len(order), desc=description, unit="layer", disable=not progress, leave=False
        ):
            layer_cells = None
            if one_group <= WEIGHTS_BYTES:
                if group != cells_of:
                    cells, cells_of = self._cell_weights(self.cross_fit.variants(group)), group
                assert cells is not None
                layer_cells = {w: x[:, layer] for w, x in cells.items()}
            self.add(group, layer, row_bins, product_bytes=PRODUCT_BYTES, cells=layer_cells)  # after the forward: larger products are fine
