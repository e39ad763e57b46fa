"""Edit P0: freeze the RoPE phase of the key-0 logits (methodology §12), and its key-1 sham.

RoPE makes the logit of query i and key 0 ⟨R_i q_i, R_0 k_0⟩: the offset to key 0
*is* the query's absolute position, so the phase of every key-0 logit carries
position whatever the query's content. :class:`KeyPhaseFreeze` removes exactly
that: in the chosen layers it replaces, in every head, each visible key-0 logit
of rows i ≥ 1 by ⟨R_D q_i, R_0 k_0⟩, the query rotated as if it sat at a fixed
offset D from key 0, through the model's own rotary frequencies (partial rotary
dimension, NTK / llama3 / yarn scaling and per-layer bases: :mod:`poslens.model.rotary`),
then the model's own scale and soft-cap. Nothing is fitted.

The edit is made on the logits the model computed, as a difference: the model's
own logit of the RoPE dot product is taken out and that of the frozen one put
in, so anything else in the logit (an added bias, an injected term) stays. With
the rotated vectors the hooks see, R_D q_i = R_{D−i}(R_i q_i).

- ``offset=None`` keeps every row at its own offset (D = i): the identity, whose
  tables must equal the unedited ones (a free check of the plumbing).
- ``key=1`` is the sham: the same freeze on key 1 (rows i ≥ 2, offset D from key
  1), a key whose offset also tracks i but that is not the sink.
- Under a sliding window of W only rows i < W + key see the key; the others are left as they are.

Like the relativizing edit, the edit of layer l runs after the measurement's
capture of that layer (``hooks_after_capture``): in ``poslens.measure`` layer l
is measured with the layers below it edited, so one forward gives the
cumulative curve.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from poslens.errors import InputError
from poslens.measurement.arguments import Intervention
from poslens.model import hooks as hook_names
from poslens.model.pos_model import PosModel
from poslens.model.rotary import LayerRotary, layer_rotary, move

__all__ = ["KeyPhaseFreeze", "frozen_rows", "key_logit_change"]


def key_logit_change(
    rotated_q: torch.Tensor, rotated_k: torch.Tensor, facts: LayerRotary, key: int, offset: int | None, rows: torch.Tensor
) -> torch.Tensor:
    """How much each logit of key ``key`` changes when the query rows are rotated as if at ``offset`` from it.

    The new logit is the model's logit of ⟨R_{key+D} q_i, R_key k_key⟩, the old one
    that of ⟨R_i q_i, R_key k_key⟩ (both through :meth:`LayerRotary.logit`); the change is their difference.

    Args:
        rotated_q: The rotated queries, [batch, pos, heads, d] (``hook_rot_q``).
        rotated_k: The rotated keys, [batch, pos, kv_heads, d] (``hook_rot_k``).
        facts: The layer's rotary facts (:func:`~poslens.model.rotary.layer_rotary`).
        key: The key position p.
        offset: The frozen offset D, or ``None``: every row at its own offset (D = i, the identity).
        rows: The query rows to edit, [n] (each > ``key``).

    Returns:
        The change of each edited logit, [batch, heads, n], float64.

    Example:
        >>> from poslens.model.rotary import LayerRotary
        >>> def tables(p):
        ...     angle = p.to(torch.float64)[:, None] * torch.tensor([0.1, 0.1], dtype=torch.float64)
        ...     return torch.cos(angle), torch.sin(angle)
        >>> facts = LayerRotary(0, 2, "half", 1.0, None, tables)
        >>> rows = torch.arange(1, 4)
        >>> q = torch.stack([torch.cos(0.1 * rows), torch.sin(0.1 * rows)], -1).double()[None, :, None]  # R_i q, q = (1, 0)
        >>> k = torch.tensor([1.0, 0.0], dtype=torch.float64).expand(1, 4, 1, 2)                           # R_0 k_0 = (1, 0)
        >>> q = torch.cat([q[:, :1], q], dim=1)                                                            # position 0 too
        >>> change = key_logit_change(q, k, facts, 0, 0, rows)   # D = 0: every row as if at offset 0
        >>> [round(v, 4) for v in change[0, 0].tolist()]        # cos(0) − cos(0.1·i)
        [0.005, 0.0199, 0.0447]
    """
    n_heads, n_kv = rotated_q.shape[2], rotated_k.shape[2]
    x = rotated_q[:, rows].to(torch.float64).transpose(1, 2)  # [batch, heads, n, d]
    y = rotated_k[:, key].to(torch.float64).repeat_interleave(n_heads // n_kv, dim=1)[:, :, None, :]  # [batch, heads, 1, d]
    target = rows if offset is None else torch.full_like(rows, key + offset)
    before = (x * y).sum(-1)
    after = (move(x, rows, target, facts) * y).sum(-1)
    return facts.logit(after) - facts.logit(before)


@dataclass
class KeyPhaseFreeze(Intervention):
    """Freeze the RoPE phase of the key-``key`` logits at offset D in the chosen layers (edit P0; ``key=1``: its sham).

    Attributes:
        offset: The frozen offset D ≥ 0, or ``None`` for the identity (every row at its own offset).
        key: 0 for edit P0, 1 for the sham.
        layers: The layers to edit (default: all).

    Example:
        >>> KeyPhaseFreeze(8).label, KeyPhaseFreeze(8, key=1).label, KeyPhaseFreeze(None).label
        ('key0-phase:D=8', 'key1-phase:D=8', 'key0-phase:D=i')
        >>> KeyPhaseFreeze(64, layers=(2, 3)).label
        'key0-phase:D=64@2,3'
    """

    offset: int | None
    key: int = 0
    layers: tuple[int, ...] | None = None
    _seen: dict[tuple[int, str], torch.Tensor] = field(default_factory=dict, repr=False)
    _facts: dict[int, LayerRotary] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if self.key not in (0, 1):
            raise InputError(f"key must be 0 (edit P0) or 1 (its sham), got {self.key}")
        if self.offset is not None and (isinstance(self.offset, bool) or not isinstance(self.offset, int) or self.offset < 0):
            raise InputError(f"offset D must be a whole number ≥ 0 (or None for the identity), got {self.offset!r}")
        if self.layers is not None:
            self.layers = tuple(int(layer) for layer in self.layers)

    @property
    def label(self) -> str:
        """The table's ``intervention`` column: ``key<p>-phase:D=<D>`` (``D=i`` for the identity), with the layers when not all.

        Example:
            >>> KeyPhaseFreeze(32, key=1).label
            'key1-phase:D=32'
        """
        where = "" if self.layers is None else "@" + ",".join(str(layer) for layer in self.layers)
        return f"key{self.key}-phase:D={'i' if self.offset is None else self.offset}{where}"

    def describe(self) -> dict[str, Any]:
        """The settings recorded in a result's metadata.

        Returns:
            ``intervention`` (``"key-phase-freeze"``), ``key``, ``offset`` (``None``: the identity) and ``layers``.

        Example:
            >>> KeyPhaseFreeze(8, key=1).describe()
            {'intervention': 'key-phase-freeze', 'key': 1, 'offset': 8, 'layers': None, 'sham': True}
        """
        return {
            "intervention": "key-phase-freeze",
            "key": self.key,
            "offset": self.offset,
            "layers": None if self.layers is None else list(self.layers),
            "sham": self.key != 0,
        }

    def _layers(self, model: PosModel) -> list[int]:
        layers = list(range(model.n_layers)) if self.layers is None else list(self.layers)
        bad = [layer for layer in layers if not 0 <= layer < model.n_layers]
        if bad:
            raise InputError(f"{self.label}: layer {bad[0]} is not a layer of {model.name} (0..{model.n_layers - 1})")
        return layers

    def _rotary(self, model: PosModel, layer: int) -> LayerRotary:
        if layer not in self._facts:
            self._facts[layer] = layer_rotary(model, layer)
        return self._facts[layer]

    def hooks(self, model: PosModel, tokens: torch.Tensor) -> list[tuple[str, Any]]:
        """Hooks that keep each edited layer's rotated queries and keys for the edit (they change nothing).

        Args:
            model: The loaded model.
            tokens: The batch's token ids, [batch, T].

        Returns:
            ``[(hook name, hook function)]`` on ``hook_rot_q`` and ``hook_rot_k`` of each edited layer.

        Example:
            >>> import tempfile, poslens
            >>> from poslens.testing import save_tiny_model
            >>> model = poslens.load_model(save_tiny_model(tempfile.mkdtemp(), "llama"))
            >>> [name for name, _ in KeyPhaseFreeze(8, layers=(1,)).hooks(model, torch.zeros(1, 6, dtype=torch.long))]
            ['blocks.1.attn.hook_rot_q', 'blocks.1.attn.hook_rot_k']
        """
        self._seen.clear()

        def keep(layer: int, which: str):
            def hook(x: torch.Tensor, hook: Any) -> None:
                self._seen[(layer, which)] = x.detach()

            return hook

        out = []
        for layer in self._layers(model):
            self._rotary(model, layer)  # read the tables (and refuse an unreadable model) before the forward
            out += [
                (hook_names.attn_qkv(layer, "q", rotated=True), keep(layer, "q")),
                (hook_names.attn_qkv(layer, "k", rotated=True), keep(layer, "k")),
            ]
        return out

    def hooks_after_capture(self, model: PosModel, tokens: torch.Tensor) -> list[tuple[str, Any]]:
        """One hook per edited layer on its scores that replaces the key's logits, after the capture has read them.

        Args:
            model: The loaded model.
            tokens: The batch's token ids, [batch, T].

        Returns:
            ``[(hook name, hook function)]`` on ``hook_attn_scores`` of each edited layer.

        Example:
            >>> import tempfile, poslens
            >>> from poslens.testing import save_tiny_model
            >>> model = poslens.load_model(save_tiny_model(tempfile.mkdtemp(), "llama"))
            >>> [name for name, _ in KeyPhaseFreeze(8).hooks_after_capture(model, torch.zeros(1, 6, dtype=torch.long))]
            ['blocks.0.attn.hook_attn_scores', 'blocks.1.attn.hook_attn_scores', 'blocks.2.attn.hook_attn_scores']
        """
        return [(hook_names.attn_scores(layer), self._edit(model, layer)) for layer in self._layers(model)]

    def _edit(self, model: PosModel, layer: int):
        window = model.sliding_windows[layer]

        def hook(scores: torch.Tensor, hook: Any) -> torch.Tensor:
            q, k = self._seen.pop((layer, "q"), None), self._seen.pop((layer, "k"), None)
            if q is None or k is None:
                raise RuntimeError(f"{self.label}: the rotated queries and keys of layer {layer} were not seen before its scores")
            t = scores.shape[-1]
            last = t if window is None else min(t, self.key + window)  # rows that see the key: i − key < W
            rows = torch.arange(self.key + 1, last, device=scores.device)
            if rows.numel() == 0:
                return scores  # no row of this layer sees the key
            change = key_logit_change(q, k, self._rotary(model, layer), self.key, self.offset, rows)
            out = scores.clone()
            out[:, :, rows, self.key] += change.to(out.dtype)
            return out

        return hook


def frozen_rows(windows: Sequence[int | None]) -> dict[str, Any] | None:
    """Where the phase freeze acts in a model with sliding windows: only on the rows that still see the frozen key.

    Under a sliding window of W tokens, key 0 is out of view from row W on and key 1 from row W + 1 on, so the
    freeze of key 0 (edit P0) and its key-1 sham edit those layers' rows i < W (and i < W + 1) only. The path-tests
    part records this (``meta["key0_rows"]``) and the command prints it.

    Args:
        windows: each layer's sliding window (``None``: full causal).

    Returns:
        ``{"windows": {W: layers}, "note"}``, or ``None`` when no layer is windowed.

    Example:
        >>> rows = frozen_rows([None, 8, 8, None])
        >>> rows["windows"]
        {'8': [1, 2]}
        >>> rows["note"][rows["note"].index("acts"):]
        'acts only on rows i < 8 in layers 1, 2 (its key-1 sham on rows i < W + 1)'
        >>> frozen_rows([None, None]) is None
        True
    """
    widths = sorted({w for w in windows if w is not None})
    if not widths:
        return None
    layers = {str(w): [layer for layer, width in enumerate(windows) if width == w] for w in widths}
    where = "; ".join(f"rows i < {w} in layers {', '.join(str(layer) for layer in found)}" for w, found in layers.items())
    return {
        "windows": layers,
        "note": f"key 0 is visible only to rows i < W under a sliding window, so the key-0 phase freeze acts only on {where} "
        "(its key-1 sham on rows i < W + 1)",
    }
