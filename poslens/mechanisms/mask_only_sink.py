"""Edit M: give the sink-reading heads the key-0 mass the mask alone would give them (methodology §12).

In each sink-reading head, a_i0 is replaced by a'_i0, the key-0 weight of the
head's per-sequence mask-only counterfactual: the sequence's own logits with
the head's absolute component A removed, renormalized over the visible keys,

    a'_i0 = exp(s_i0 − A_i0) / Σ_{j ∈ V_i} exp(s_ij − A_ij),

with A cross-fitted as the decomposition fits it (each group's A fitted on the
other groups' sums of an unedited run of the same corpus, query window
``all``). The rest of the row is rebuilt from the logits, (1 − a) · softmax over
the other visible keys, in float64 (:mod:`poslens.mechanisms.exact_rows`), and
each edited row is checked to sum to 1. A dose λ moves a_i0 only part of the
way: a_i0 + λ·(a'_i0 − a_i0), with 1 − a_i0 written as (1 − λ)·σ(−x) + λ·σ(−x')
so that nothing is subtracted from 1.

Beside the sink-path ablation (a_i0 := its mean over i, which removes every
dependence of the sink's mass on i), it splits the sink path in two:
ablation − mask-only profile is the mask's channel through the sink, and
mask-only profile − unedited is everything else at key 0 (its RoPE phase among it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from poslens.errors import InputError
from poslens.fit.binning import Binning
from poslens.fit.cross_fit import CrossFit, cross_fitted_absolute_components
from poslens.fit.groups import group_of
from poslens.measurement.arguments import Intervention
from poslens.mechanisms.exact_rows import key_zero_rows, visible_keys, write_rows
from poslens.model import hooks as hook_names
from poslens.model.corpus import Corpus
from poslens.model.pos_model import PosModel

__all__ = ["MaskOnlySinkProfile", "own_group_components"]


def own_group_components(cross_fit: CrossFit, query_window: str = "all") -> np.ndarray:
    """Each group's absolute component fitted on the other groups, A^(−g), [G, L, H, C·B].

    Args:
        cross_fit: The per-group fits (:func:`~poslens.fit.cross_fit.cross_fitted_absolute_components`).
        query_window: The query window whose fit is used.

    Returns:
        A^(−g) for every group g.

    Example:
        >>> cross = CrossFit({"all": np.ones((3, 1, 1, 2))}, {"all": 3 * np.ones((1, 1, 2))}, np.array([1.0, 1.0, 2.0]))
        >>> own_group_components(cross)[:, 0, 0, 0].tolist()   # (3 − 1)/(4 − 1), (3 − 1)/(4 − 1), (3 − 1)/(4 − 2)
        [0.6666666666666666, 0.6666666666666666, 1.0]
    """
    fits, total, counts = cross_fit.fits[query_window], cross_fit.total[query_window], cross_fit.sequence_count
    return np.stack([(total - fits[g]) / (counts.sum() - counts[g]) for g in range(cross_fit.n_groups)])


@dataclass
class MaskOnlySinkProfile(Intervention):
    """Replace a_i0 in the given heads by the mask-only counterfactual's a'_i0 (times a dose), keeping each row's sum.

    Build it with :meth:`from_baseline` from an unedited measurement of the same corpus.

    Attributes:
        heads: The edited heads, ``[(layer, head)]`` (the sink-reading heads).
        absolute: Each group's absolute component A^(−g), [G, L, H, C·B] (:func:`own_group_components`).
        binning: The bins A is defined on (the baseline's).
        row_groups: The group of each sequence, by its token ids (``bytes`` of the row).
        dose: λ: a_i0 moves λ of the way to a'_i0 (1: all the way).

    Example:
        >>> profile = MaskOnlySinkProfile([(1, 0)], np.zeros((2, 2, 1, 4)), Binning(4, early=2), {}, dose=0.5)
        >>> profile.label, profile.describe()["heads"]
        ('sink-mask-only:0.5', [[1, 0]])
    """

    heads: list[tuple[int, int]]
    absolute: np.ndarray
    binning: Binning
    row_groups: dict[bytes, int]
    dose: float = 1.0
    _scores: dict[int, torch.Tensor] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if not 0 < self.dose <= 1:
            raise InputError(f"the dose λ must lie in (0, 1], got {self.dose}")
        self.heads = sorted((int(layer), int(head)) for layer, head in self.heads)

    @classmethod
    def from_baseline(cls, baseline: Any, corpus: Corpus, heads: list[tuple[int, int]], dose: float = 1.0) -> MaskOnlySinkProfile:
        """The edit for ``heads``, with A cross-fitted from ``baseline``, an unedited ``poslens.measure`` of ``corpus``.

        Args:
            baseline: The unedited :class:`~poslens.measurement.result.Result` of ``corpus`` (with its sums).
            corpus: The corpus the edit will run on (the baseline's: its groups give each sequence's A).
            heads: The edited heads, ``[(layer, head)]``.
            dose: λ in (0, 1].

        Returns:
            The edit.

        Raises:
            InputError: When the baseline has no sums, or was measured on another number of sequences.

        Example:
            >>> profile = MaskOnlySinkProfile.from_baseline(baseline, corpus, [(3, 1)])  # doctest: +SKIP
        """
        sums = getattr(baseline, "sums", None)
        if sums is None:
            raise InputError(
                "the mask-only sink profile needs the unedited run's cell sums: measure it in this session "
                "(a loaded table has them with its .sums.npz)"
            )
        if int(np.sum(sums.per_group.sequence_count)) != corpus.n_seqs or sums.binning.seq_len != corpus.seq_len:
            raise InputError(
                f"the unedited run holds {int(np.sum(sums.per_group.sequence_count))} sequences of {sums.binning.seq_len} tokens, "
                f"the corpus {corpus.n_seqs} of {corpus.seq_len}: build the edit from a measurement of this corpus"
            )
        absolute = own_group_components(cross_fitted_absolute_components(sums))
        groups = group_of(corpus.n_seqs, sums.n_groups)
        row_groups: dict[bytes, int] = {}
        for row, group in zip(corpus.tokens.cpu().numpy(), groups, strict=True):
            key = row.tobytes()
            if row_groups.get(key, group) != group:
                raise InputError("the corpus holds one sequence twice, in two groups: each sequence's group must be known from its tokens")
            row_groups[key] = int(group)
        return cls(list(heads), absolute, sums.binning, row_groups, dose)

    @property
    def label(self) -> str:
        """The table's ``intervention`` column: ``sink-mask-only:<dose>``.

        Example:
            >>> MaskOnlySinkProfile([], np.zeros((2, 1, 1, 4)), Binning(4, early=2), {}).label
            'sink-mask-only:1'
        """
        return f"sink-mask-only:{self.dose:g}"

    def describe(self) -> dict[str, Any]:
        """The settings recorded in a result's metadata.

        Returns:
            ``intervention`` (``"mask-only-sink-profile"``), ``dose`` and ``heads`` as ``[[layer, head], …]``.

        Example:
            >>> MaskOnlySinkProfile([(0, 1)], np.zeros((2, 1, 2, 4)), Binning(4, early=2), {}, 0.25).describe()
            {'intervention': 'mask-only-sink-profile', 'dose': 0.25, 'heads': [[0, 1]], 'query_window': 'all'}
        """
        return {"intervention": "mask-only-sink-profile", "dose": self.dose, "heads": [list(h) for h in self.heads], "query_window": "all"}

    def _groups(self, tokens: torch.Tensor) -> np.ndarray:
        rows = tokens.cpu().numpy()
        try:
            return np.array([self.row_groups[row.tobytes()] for row in rows])
        except KeyError:
            raise InputError(f"{self.label} runs only on the corpus it was built for: a batch holds a sequence that corpus does not") from None

    def hooks(self, model: PosModel, tokens: torch.Tensor) -> list[tuple[str, Any]]:
        """Per layer with an edited head: a hook keeping its scores, and one replacing a_i0 in its pattern.

        Args:
            model: The loaded model.
            tokens: The batch's token ids, [batch, T] (each sequence's group picks its A).

        Returns:
            ``[(hook name, hook function)]``.

        Raises:
            InputError: When the sequences are of another length, or not of the corpus the edit was built for.

        Example:
            >>> import tempfile, poslens
            >>> from poslens.testing import save_tiny_model
            >>> model = poslens.load_model(save_tiny_model(tempfile.mkdtemp(), "llama"))
            >>> rows = torch.tensor([[1, 70, 71, 72]])
            >>> profile = MaskOnlySinkProfile([(1, 0)], np.zeros((1, 3, 4, 64)), Binning(4, early=2), {rows[0].numpy().tobytes(): 0})
            >>> [name for name, _ in profile.hooks(model, rows)]
            ['blocks.1.attn.hook_attn_scores', 'blocks.1.attn.hook_pattern']
        """
        if tokens.shape[-1] != self.binning.seq_len:
            raise InputError(f"{self.label} was built for sequences of {self.binning.seq_len} tokens; these have {tokens.shape[-1]}")
        groups = self._groups(tokens)
        by_layer: dict[int, list[int]] = {}
        for layer, head in self.heads:
            by_layer.setdefault(layer, []).append(head)
        out = []
        for layer, heads in sorted(by_layer.items()):
            out += [(hook_names.attn_scores(layer), self._keep(layer, heads)), (hook_names.attn_pattern(layer), self._edit(layer, heads, groups))]
        return out

    def _keep(self, layer: int, heads: list[int]):
        def hook(scores: torch.Tensor, hook: Any) -> None:
            self._scores[layer] = scores[:, heads].detach()

        return hook

    def _absolute_pairs(self, groups: np.ndarray, layer: int, heads: list[int], device: torch.device) -> torch.Tensor:
        """A of every (query, key) pair for each sequence's group, [batch, heads, T, T]."""
        t = self.binning.seq_len
        i, j = np.arange(t)[:, None], np.arange(t)[None, :]
        cell = self.binning.query_bin[i] * self.binning.n_offset_bins + self.binning.offset_bin[np.clip(i - j, 0, None)]
        a = self.absolute[groups][:, layer][:, heads]  # [batch, heads, C·B]
        return torch.as_tensor(a[..., cell], dtype=torch.float64, device=device)

    def _edit(self, layer: int, heads: list[int], groups: np.ndarray):
        def hook(pattern: torch.Tensor, hook: Any) -> torch.Tensor:
            kept = self._scores.pop(layer)
            rows = key_zero_rows(kept)
            # x' = s_i0 − A_i0 − logsumexp over j ≥ 1 of (s_ij − A_ij): key 0's logit relative to the rest, A removed
            shifted = torch.where(visible_keys(kept), kept.to(torch.float64) - self._absolute_pairs(groups, layer, heads, kept.device), -torch.inf)
            x_new = shifted[..., 0] - torch.logsumexp(shifted[..., 1:], dim=-1)
            lam = self.dose
            key0 = (1 - lam) * torch.sigmoid(rows.x) + lam * torch.sigmoid(x_new)
            rest = (1 - lam) * torch.sigmoid(-rows.x) + lam * torch.sigmoid(-x_new)
            return write_rows(pattern, heads, rows.with_key0(key0, rest), rows.sees_key0, layer, self.label)

        return hook
