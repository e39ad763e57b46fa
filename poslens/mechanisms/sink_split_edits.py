"""The edits of the sink path's split (methodology §13.1), and the unedited run's row statistics they are cross-fitted from.

In the edited heads (the sink-reading ones), every row i ≥ 1 that sees key 0 is
rewritten from this forward's logits with key 0's logit relative to the rest of
the row, x_i = s_i0 − ℓ_i (ℓ_i: logsumexp over the visible keys j ≥ 1), as
[σ(x_i), σ(−x_i) · softmax_{j ≥ 1}(s_ij)] in float64
(:mod:`poslens.mechanisms.exact_rows`), each row checked to sum to 1:

- ``m``, the mask's count removed: x_i + ℓrow(i) − ℓ̄, with ℓrow(i) the head's mean of
  ℓ_i at row i and ℓ̄ its mean over the rows, both over the unedited run's sequences of
  the other groups. Only the growth of the competing mass with i goes; its variation
  with content and key 0's own logit stay.
- ``p``, key 0's RoPE phase removed: s_i0 as if the query sat at offset D from key 0
  (:func:`~poslens.mechanisms.key_phase.key_logit_change`: the model's own rotary tables, scale
  and soft-cap).
- ``mp``: both shifts.
- ``s``, the whole sink path: a_i0 := ā, the head's cross-fitted mean over the rows; the rest
  (1 − ā) · softmax_{j ≥ 1}.
- ``sham-m`` / ``sham-p``: the same shifts of key 0's logit as m / p, applied at rows
  permuted at random within each (layer, head, sequence), seeded by the sequence's index
  in the corpus: in logit space, so nothing leaves [0, 1].

Under a sliding window only the rows i < W see key 0; the statistics, the edits and
the permutations use those rows alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from poslens.capture.batch_groups import GroupedBatches
from poslens.errors import InputError
from poslens.measurement.arguments import Intervention
from poslens.mechanisms.exact_rows import key_zero_rows, write_rows
from poslens.mechanisms.key_phase import key_logit_change
from poslens.model import hooks as hook_names
from poslens.model.pos_model import PosModel
from poslens.model.rotary import LayerRotary, layer_rotary

__all__ = ["EDIT_KINDS", "SinkPathEdit", "SinkRowStats", "SplitStatistics"]

#: The kinds of :class:`SinkPathEdit`.
EDIT_KINDS = ("m", "p", "mp", "s", "sham-m", "sham-p")


def _heads_by_layer(heads: list[tuple[int, int]]) -> dict[int, list[int]]:
    by_layer: dict[int, list[int]] = {}
    for layer, head in sorted(heads):
        by_layer.setdefault(layer, []).append(head)
    return by_layer


@dataclass
class SplitStatistics:
    """Per group, the unedited run's sums that the edits are cross-fitted from, for each edited layer.

    Attributes:
        ell_sum: Σ over the group's sequences of ℓ_i, per layer ``{layer: [G, heads, T]}`` (rows that see key 0).
        key0_sum: Σ over the group's sequences of a_i0, ``{layer: [G, heads, T]}``.
        sequences: Sequences per group, [G].
        sees_key0: Whether row i sees key 0 in each layer, ``{layer: [T]}`` (row 0: no).

    Example:
        >>> stats = SplitStatistics({0: np.ones((2, 1, 3))}, {0: np.full((2, 1, 3), 0.5)}, np.array([1.0, 1.0]),
        ...                         {0: np.array([False, True, True])})
        >>> stats.cross_fitted(0)[0][:, 0].tolist()   # ℓrow^(−g)(i) at rows i = 1, 2 of each group
        [[1.0, 1.0], [1.0, 1.0]]
    """

    ell_sum: dict[int, np.ndarray]
    key0_sum: dict[int, np.ndarray]
    sequences: np.ndarray
    sees_key0: dict[int, np.ndarray]

    def cross_fitted(self, layer: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """ℓrow^(−g)(i) at the rows that see key 0, ℓ̄^(−g) and ā^(−g): each over the sequences of the other groups.

        Args:
            layer: An edited layer.

        Returns:
            ``(ell_row [G, heads, n], ell_bar [G, heads], key0_mean [G, heads])``, n the rows i ≥ 1 that see key 0.

        Raises:
            InputError: When a group holds every sequence (nothing is left to cross-fit from).

        Example:
            >>> stats = SplitStatistics({0: np.arange(6.0).reshape(2, 1, 3)}, {0: np.zeros((2, 1, 3))}, np.array([1.0, 1.0]),
            ...                         {0: np.array([False, True, True])})
            >>> [a.tolist() for a in stats.cross_fitted(0)[:2]]   # group 0 reads group 1's rows and vice versa
            [[[[4.0, 5.0]], [[1.0, 2.0]]], [[4.5], [1.5]]]
        """
        rows = self.sees_key0[layer]
        ell, key0 = self.ell_sum[layer][..., rows], self.key0_sum[layer][..., rows]
        others = (self.sequences.sum() - self.sequences)[:, None, None]
        if np.any(others <= 0):
            raise InputError("the split needs at least two groups with sequences, to cross-fit its edits")
        ell_row = (ell.sum(0) - ell) / others
        key0_mean = ((key0.sum(0) - key0) / others).mean(-1)
        return ell_row, ell_row.mean(-1), key0_mean


class SinkRowStats(GroupedBatches):
    """Capture hooks that add, per group, ℓ_i and a_i0 of the edited heads to :class:`SplitStatistics` (they change nothing).

    Set :attr:`sequence_groups` before each forward pass (:class:`~poslens.capture.batch_groups.GroupedBatches`).

    Args:
        heads: The edited heads, ``[(layer, head)]``.
        groups: Number of groups G.
        seq_len: T.

    Example:
        >>> stats = SinkRowStats([(1, 0)], groups=2, seq_len=4)
        >>> [name for name, _ in stats.hooks()]
        ['blocks.1.attn.hook_attn_scores']
    """

    def __init__(self, heads: list[tuple[int, int]], groups: int, seq_len: int) -> None:
        self.by_layer = _heads_by_layer(heads)
        self.n_groups, self.seq_len = groups, seq_len
        self.sequence_groups = None
        self._group = 0
        self.ell = {layer: np.zeros((groups, len(h), seq_len)) for layer, h in self.by_layer.items()}
        self.key0 = {layer: np.zeros((groups, len(h), seq_len)) for layer, h in self.by_layer.items()}
        self.sequences = np.zeros(groups)
        self.sees: dict[int, np.ndarray] = {}

    def hooks(self) -> list[tuple[str, Any]]:
        """One hook per edited layer on its scores.

        Returns:
            ``[(hook name, hook function)]``.

        Example:
            >>> len(SinkRowStats([(0, 1), (0, 2), (2, 0)], groups=2, seq_len=4).hooks())
            2
        """
        return [(hook_names.attn_scores(layer), self._hook(layer, heads)) for layer, heads in self.by_layer.items()]

    def _hook(self, layer: int, heads: list[int]):
        def hook(scores: torch.Tensor, hook: Any) -> None:
            rows = key_zero_rows(scores[:, heads].detach())
            sees = rows.sees_key0[0, 0].cpu().numpy()
            self.sees.setdefault(layer, sees)
            ell = torch.where(rows.sees_key0, rows.ell, 0.0).cpu().numpy()
            key0 = torch.where(rows.sees_key0, torch.sigmoid(rows.x), 0.0).cpu().numpy()
            first_layer = layer == min(self.by_layer)
            for g, start, end in self.batch_groups(scores.shape[0]).runs:
                self.ell[layer][g] += ell[start:end].sum(0)
                self.key0[layer][g] += key0[start:end].sum(0)
                if first_layer:
                    self.sequences[g] += end - start

        return hook

    def finish(self) -> SplitStatistics:
        """The statistics of the run.

        Returns:
            The :class:`SplitStatistics`.

        Example:
            >>> SinkRowStats([(0, 0)], groups=2, seq_len=3).finish().sequences.tolist()
            [0.0, 0.0]
        """
        return SplitStatistics(self.ell, self.key0, self.sequences, self.sees)


@dataclass
class SinkPathEdit(Intervention):
    """One edit of the split (``kind`` in :data:`EDIT_KINDS`) in the given heads of every layer, from the logits.

    Attributes:
        kind: ``m``, ``p``, ``mp``, ``s``, ``sham-m`` or ``sham-p`` (module docstring).
        heads: The edited heads, ``[(layer, head)]``.
        statistics: The unedited run's :class:`SplitStatistics` (the cross-fitted ℓrow, ℓ̄ and ā).
        sequence_of: Each corpus sequence's (group, index), by its token ids (``bytes`` of the row).
        offset: D of the phase edit.
        seed: Seed of the shams' permutations.

    Example:
        >>> stats = SplitStatistics({1: np.zeros((2, 1, 4))}, {1: np.zeros((2, 1, 4))}, np.ones(2),
        ...                         {1: np.array([False, True, True, True])})
        >>> edit = SinkPathEdit("mp", [(1, 0)], stats, {}, offset=64)
        >>> edit.label, edit.describe()["heads"]
        ('sink-split:mp', [[1, 0]])
    """

    kind: str
    heads: list[tuple[int, int]]
    statistics: SplitStatistics
    sequence_of: dict[bytes, tuple[int, int]]
    offset: int = 64
    seed: int = 0
    _scores: dict[int, torch.Tensor] = field(default_factory=dict, repr=False)
    _seen: dict[tuple[int, str], torch.Tensor] = field(default_factory=dict, repr=False)
    _facts: dict[int, LayerRotary] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if self.kind not in EDIT_KINDS:
            raise InputError(f"the split's edit must be one of {', '.join(EDIT_KINDS)}, got {self.kind!r}")
        if isinstance(self.offset, bool) or not isinstance(self.offset, int | np.integer) or self.offset < 0:
            raise InputError(f"offset D must be a whole number ≥ 0, got {self.offset!r}")
        self.heads = sorted((int(layer), int(head)) for layer, head in self.heads)

    @property
    def label(self) -> str:
        """The table's ``intervention`` column: ``sink-split:<kind>``.

        Example:
            >>> SinkPathEdit("s", [], SplitStatistics({}, {}, np.ones(2), {}), {}).label
            'sink-split:s'
        """
        return f"sink-split:{self.kind}"

    def describe(self) -> dict[str, Any]:
        """The settings recorded in a result's metadata.

        Returns:
            ``intervention`` (``"sink-path-split"``), ``kind``, ``offset``, ``seed`` and ``heads``.

        Example:
            >>> SinkPathEdit("p", [(0, 1)], SplitStatistics({}, {}, np.ones(2), {}), {}, offset=8).describe()
            {'intervention': 'sink-path-split', 'kind': 'p', 'offset': 8, 'seed': 0, 'heads': [[0, 1]]}
        """
        return {
            "intervention": "sink-path-split",
            "kind": self.kind,
            "offset": int(self.offset),
            "seed": self.seed,
            "heads": [list(h) for h in self.heads],
        }

    @property
    def _phase(self) -> bool:
        return self.kind in ("p", "mp", "sham-p")

    def hooks(self, model: PosModel, tokens: torch.Tensor) -> list[tuple[str, Any]]:
        """Per edited layer: hooks keeping the rotated q and k (phase kinds) and the scores, and one rewriting the pattern.

        Args:
            model: The loaded model.
            tokens: The batch's token ids, [batch, T] (each sequence's group picks its cross-fitted statistics).

        Returns:
            ``[(hook name, hook function)]``.

        Raises:
            InputError: When a sequence is not of the corpus the edit was built for.

        Example:
            >>> import tempfile, poslens
            >>> from poslens.testing import save_tiny_model
            >>> model = poslens.load_model(save_tiny_model(tempfile.mkdtemp(), "llama"))
            >>> rows = torch.tensor([[1, 70, 71, 72]])
            >>> stats = SplitStatistics({1: np.zeros((2, 1, 4))}, {1: np.zeros((2, 1, 4))}, np.ones(2), {1: np.arange(4) > 0})
            >>> edit = SinkPathEdit("p", [(1, 0)], stats, {rows[0].numpy().tobytes(): (0, 0)})
            >>> [name.split(".", 2)[-1] for name, _ in edit.hooks(model, rows)]
            ['attn.hook_rot_q', 'attn.hook_rot_k', 'attn.hook_attn_scores', 'attn.hook_pattern']
        """
        try:
            found = [self.sequence_of[row.tobytes()] for row in tokens.cpu().numpy()]
        except KeyError:
            raise InputError(f"{self.label} runs only on the corpus it was built for: a batch holds a sequence that corpus does not") from None
        groups, indices = np.array([g for g, _ in found], dtype=int), [i for _, i in found]
        self._seen.clear()
        out: list[tuple[str, Any]] = []
        for layer, heads in _heads_by_layer(self.heads).items():
            if self._phase:
                if layer not in self._facts:
                    self._facts[layer] = layer_rotary(model, layer)
                out += [
                    (hook_names.attn_qkv(layer, "q", rotated=True), self._keep_qk(layer, "q")),
                    (hook_names.attn_qkv(layer, "k", rotated=True), self._keep_qk(layer, "k")),
                ]
            out += [
                (hook_names.attn_scores(layer), self._keep(layer, heads)),
                (hook_names.attn_pattern(layer), self._edit(layer, heads, groups, indices)),
            ]
        return out

    def _keep_qk(self, layer: int, which: str):
        def hook(x: torch.Tensor, hook: Any) -> None:
            self._seen[(layer, which)] = x.detach()

        return hook

    def _keep(self, layer: int, heads: list[int]):
        def hook(scores: torch.Tensor, hook: Any) -> None:
            self._scores[layer] = scores[:, heads].detach()

        return hook

    def _permuted(self, shift: torch.Tensor, rows: np.ndarray, layer: int, heads: list[int], indices: list[int]) -> torch.Tensor:
        """``shift`` [batch, heads, T] with its values at the rows that see key 0 permuted per (layer, head, sequence)."""
        out = shift.clone()
        seen = torch.as_tensor(np.flatnonzero(rows), device=shift.device)
        for b, index in enumerate(indices):
            for k, head in enumerate(heads):
                generator = np.random.default_rng([self.seed, layer, head, index])
                order = torch.as_tensor(generator.permutation(len(seen)), device=shift.device)
                out[b, k, seen] = shift[b, k, seen[order]]
        return out

    def _edit(self, layer: int, heads: list[int], groups: np.ndarray, indices: list[int]):
        def hook(pattern: torch.Tensor, hook: Any) -> torch.Tensor:
            rows = key_zero_rows(self._scores.pop(layer))
            sees = self.statistics.sees_key0[layer]
            ell_row, ell_bar, key0_mean = (torch.as_tensor(a[groups], device=pattern.device) for a in self.statistics.cross_fitted(layer))
            if self.kind == "s":
                key0 = key0_mean[..., None].expand_as(rows.x)
                new = rows.with_key0(key0, 1.0 - key0)
            else:
                shift = torch.zeros_like(rows.x)
                if self.kind in ("m", "mp", "sham-m"):
                    shift[..., torch.as_tensor(sees, device=shift.device)] += ell_row - ell_bar[..., None]
                if self._phase:
                    q, k = self._seen.pop((layer, "q")), self._seen.pop((layer, "k"))
                    t = rows.x.shape[-1]
                    every = torch.arange(1, t, device=q.device)
                    change = key_logit_change(q, k, self._facts[layer], 0, int(self.offset), every)[:, heads]  # [batch, heads, T − 1]
                    shift[..., 1:] += change.to(shift.device)
                if self.kind.startswith("sham"):
                    shift = self._permuted(shift, sees, layer, heads, indices)
                new = rows.rebuild(rows.x + shift)
            return write_rows(pattern, heads, new, rows.sees_key0, layer, self.label)

        return hook
