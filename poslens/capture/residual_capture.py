"""The hooks that fill :class:`~poslens.fit.residual_readout.ResidualSums`: every layer's residual stream and attention output, reduced.

At ``hook_resid_pre`` and ``hook_attn_out`` of each read layer, the rows
1 ≤ i < T of the batch are reduced, in float64, to the probe's Gram matrix
and cross-products and to the per-position sums of η²; the hook changes
nothing. Vectors wider than ``max_width`` are first projected onto a fixed
seeded orthonormal basis of ``max_width`` directions (the same for every run
of one model), which bounds the memory at S·G·L·(max_width + 1)² floats.
"""

from __future__ import annotations

from typing import Any

import torch

from poslens.capture.batch_groups import GroupedBatches
from poslens.fit.residual_readout import SITES, ResidualSums
from poslens.model import hooks as hook_names

__all__ = ["DEFAULT_MAX_WIDTH", "ResidualCapture", "residual_sums_bytes"]

#: Vectors wider than this are projected to this many directions before their sums are kept.
DEFAULT_MAX_WIDTH = 1024


def residual_sums_bytes(groups: int, layers: int, width: int, seq_len: int, max_width: int = DEFAULT_MAX_WIDTH) -> int:
    """Bytes of the readout sums of one run: the Gram matrices and the per-position sums, both sites.

    Args:
        groups: Number of groups G.
        layers: Layers read.
        width: d_model.
        seq_len: T.
        max_width: The projection's width for wider vectors.

    Returns:
        The bytes (float64).

    Example:
        >>> round(residual_sums_bytes(8, 30, 576, 128) / 2**20)   # SmolLM2, T = 128: about 1.5 GB (MiB)
        1491
    """
    d = min(width, max_width)
    return 8 * len(SITES) * groups * layers * ((d + 1) ** 2 + (d + 1) + seq_len * d + 1)


class ResidualCapture(GroupedBatches):
    """Hooks that add each batch's residual stream and attention output to the readout sums of its sequences' groups.

    Set :attr:`sequence_groups` before each forward pass (or :attr:`~poslens.capture.batch_groups.GroupedBatches.group` for a batch of one group:
    :class:`~poslens.capture.batch_groups.GroupedBatches`); each run of one group's sequences goes to that group.

    Args:
        n_layers: The model's layers (every one is read).
        width: d_model.
        seq_len: T.
        groups: Number of groups G.
        max_width: Wider vectors are projected to this many directions.
        seed: Seed of that projection.

    Example:
        >>> capture = ResidualCapture(n_layers=2, width=4, seq_len=5, groups=2)
        >>> [name for name, _ in capture.hooks()]
        ['blocks.0.hook_resid_pre', 'blocks.0.hook_attn_out', 'blocks.1.hook_resid_pre', 'blocks.1.hook_attn_out']
        >>> capture.add(0, 0, torch.ones(3, 5, 4)); capture.finish().rows.tolist()   # 3 sequences × rows 1..4
        [12.0, 0.0]
    """

    def __init__(self, n_layers: int, width: int, seq_len: int, groups: int, max_width: int = DEFAULT_MAX_WIDTH, seed: int = 0) -> None:
        self.n_layers, self.seq_len, self.groups = n_layers, seq_len, groups
        self.width = min(width, max_width)
        self.projection: torch.Tensor | None = None
        if width > max_width:
            generator = torch.Generator().manual_seed(seed)
            self.projection = torch.linalg.qr(torch.randn(width, max_width, generator=generator, dtype=torch.float64))[0]
        self.sequence_groups = None
        self._group = 0
        self.n_groups = groups
        self._tensors: dict[str, torch.Tensor] | None = None
        self._host = ResidualSums.zeros(groups, n_layers, self.width, seq_len)
        self._target = torch.log(torch.arange(1, seq_len, dtype=torch.float64) + 1.0)  # y = log(i + 1), rows i ≥ 1

    def _zeros(self, device: torch.device) -> dict[str, torch.Tensor]:
        if self._tensors is None:
            s, g, layers, d, t = len(SITES), self.groups, self.n_layers, self.width, self.seq_len
            make = lambda *shape: torch.zeros(shape, dtype=torch.float64, device=device)  # noqa: E731
            self._tensors = {
                "gram": make(s, g, layers, d + 1, d + 1),
                "design_x_target": make(s, g, layers, d + 1),
                "position_sum": make(s, g, layers, t, d),
                "square_total": make(s, g, layers),
            }
        return self._tensors

    def hooks(self) -> list[tuple[str, Any]]:
        """The hooks of one forward pass: both sites of every layer, in the order the forward reaches them.

        Returns:
            ``[(hook name, hook function)]``.

        Example:
            >>> len(ResidualCapture(n_layers=3, width=4, seq_len=5, groups=2).hooks())
            6
        """
        out = []
        for layer in range(self.n_layers):
            for s, name in ((0, hook_names.resid_pre(layer)), (1, hook_names.attn_out(layer))):
                out.append((name, self._hook(s, layer)))
        return out

    def _hook(self, site: int, layer: int):
        def hook(x: torch.Tensor, hook: Any) -> None:
            self.add(site, layer, x)

        return hook

    def add(self, site: int, layer: int, x: torch.Tensor) -> None:
        """Add one site's vectors of one layer, [batch, T, d], to the sums of their sequences' groups.

        The first call of a batch (site 0 of layer 0) also counts its rows and targets.

        Args:
            site: The index of the site in :data:`~poslens.fit.residual_readout.SITES`.
            layer: The layer.
            x: The vectors at that site, [batch, T, d].

        Example:
            >>> capture = ResidualCapture(n_layers=1, width=2, seq_len=3, groups=2)
            >>> capture.add(0, 0, torch.tensor([[[9.0, 9.0], [1.0, 2.0], [3.0, 4.0]]]))
            >>> capture.finish().position_sum[0, 0, 0].tolist()   # position 0 is not a row
            [[0.0, 0.0], [1.0, 2.0], [3.0, 4.0]]
            >>> import numpy as np
            >>> capture.sequence_groups = np.array([0, 1])   # a batch spanning both groups
            >>> capture.add(0, 0, torch.ones(2, 3, 2)); capture.finish().rows.tolist()
            [4.0, 2.0]
        """
        for g, first, end in self.batch_groups(x.shape[0]).runs:
            self._add_group(g, site, layer, x[first:end])

    def _add_group(self, g: int, site: int, layer: int, x: torch.Tensor) -> None:
        """:meth:`add` for vectors of sequences of one group ``g``."""
        tensors = self._zeros(x.device)
        rows = x[:, 1:].to(torch.float64)
        if self.projection is not None:
            self.projection = self.projection.to(x.device)
            rows = rows @ self.projection
        batch, n = rows.shape[0], rows.shape[1]
        flat = rows.reshape(batch * n, -1)
        design = torch.cat([torch.ones(batch * n, 1, dtype=torch.float64, device=x.device), flat], dim=1)
        target = self._target.to(x.device).repeat(batch)
        tensors["gram"][site, g, layer] += design.T @ design
        tensors["design_x_target"][site, g, layer] += design.T @ target
        tensors["position_sum"][site, g, layer, 1:] += rows.sum(0)
        tensors["square_total"][site, g, layer] += (flat**2).sum()
        if site == 0 and layer == 0:
            host = self._host
            host.rows[g] += batch * n
            host.target[g] += float(target.sum())
            host.target_sq[g] += float((target**2).sum())
            host.position_rows[g, 1:] += batch

    def finish(self) -> ResidualSums:
        """The sums so far, on the host as numpy arrays.

        Returns:
            The :class:`~poslens.fit.residual_readout.ResidualSums`.

        Example:
            >>> ResidualCapture(n_layers=1, width=2, seq_len=3, groups=2).finish().gram.shape
            (2, 2, 1, 3, 3)
        """
        host = self._host
        for name, tensor in (self._tensors or {}).items():
            setattr(host, name, tensor.cpu().numpy())
        return host
