"""Relativizing the forward pass (methodology §11): an edit that leaves every head's logits no absolute component.

:func:`poslens.mechanisms.relativization_fit.calibrate` fits each layer's
absolute terms bottom up on a calibration corpus (A per cell, κ per query bin
on key 0). :class:`Relativization` is the intervention that subtracts them
inside a measured forward. Its edit runs **after** the capture at each layer, so
layer l is measured with exactly the layers below it edited: one forward gives
the cumulative curve. :class:`RelativePlacebo` subtracts a random purely
relative kernel of the same norm instead, for the cost to the model; for the
key-0 mode, :class:`KeyZeroShiftPlacebo` subtracts a constant from the key-0
logits of the same norm (a change of the sink bias β, which carries no position).

The edit changes the per-query-head scores (``hook_attn_scores``), never the
keys a GQA group shares, and only the visible pairs of rows i ≥ 1.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np  # noqa: F401 (the docstring examples build their fits with it)
import torch

from poslens.errors import InputError
from poslens.measurement.arguments import Intervention
from poslens.mechanisms.relativization_fit import RelativizationFit, edit_scores, edit_tensor, visible_pairs
from poslens.model import hooks as hook_names
from poslens.model.pos_model import PosModel

__all__ = ["KeyZeroShiftPlacebo", "Relativization", "RelativePlacebo"]


def _check_length(expected: int, scores: torch.Tensor, what: str) -> None:
    if scores.shape[-1] != expected or scores.shape[-2] != expected:
        raise InputError(
            f"{what} was calibrated for sequences of {expected} tokens; these have {scores.shape[-1]}: calibrate on a corpus of the measured length"
        )


class _ScoreEdit(Intervention):
    """Shared hook plumbing: subtract a per-layer edit [H, T, T] from the scores after the capture has read them."""

    label: str
    layers: tuple[int, ...] | None

    def _seq_len(self) -> int:
        raise NotImplementedError

    def _n_layers(self) -> int:
        raise NotImplementedError

    def hooks(self, model: PosModel, tokens: torch.Tensor) -> list[tuple[str, Any]]:
        """No hooks before the capture: the edit runs after it (:meth:`hooks_after_capture`).

        Args:
            model: The loaded model.
            tokens: The batch's token ids.

        Returns:
            ``[]``.

        Example:
            >>> fit = RelativizationFit("all", np.zeros((1, 1, 5, 5)), np.zeros((1, 1, 5)), 5, 32, (None,), {})
            >>> Relativization(fit).hooks(None, torch.zeros(1, 5))
            []
        """
        return []

    def hooks_after_capture(self, model: PosModel, tokens: torch.Tensor) -> list[tuple[str, Any]]:
        """One hook per edited layer on its scores, added after the capture's hooks.

        Args:
            model: The loaded model.
            tokens: The batch's token ids, [batch, T]; T must be the calibrated length.

        Returns:
            ``[(hook name, hook function)]``.

        Raises:
            InputError: When the model's layers or the sequences' length differ from the fit's.

        Example:
            >>> fit = RelativizationFit("all", np.zeros((2, 1, 5, 5)), np.zeros((2, 1, 5)), 5, 32, (None, None), {})
            >>> class Two: n_layers = 2
            >>> [name for name, _ in Relativization(fit).hooks_after_capture(Two(), torch.zeros(1, 5))]
            ['blocks.0.attn.hook_attn_scores', 'blocks.1.attn.hook_attn_scores']
        """
        if model.n_layers != self._n_layers():
            raise InputError(f"{self.label} was calibrated on a model of {self._n_layers()} layers, not {model.n_layers}")
        if tokens.shape[-1] != self._seq_len():
            raise InputError(
                f"{self.label} was calibrated for sequences of {self._seq_len()} tokens; "
                f"these have {tokens.shape[-1]}: calibrate on a corpus of the measured length"
            )
        layers = range(self._n_layers()) if self.layers is None else self.layers
        return [(hook_names.attn_scores(layer), self._hook(layer)) for layer in layers]

    def _hook(self, layer: int):
        cache: dict[tuple[Any, Any], torch.Tensor] = {}

        def hook(scores: torch.Tensor, hook: Any) -> torch.Tensor:
            key = (scores.device, scores.dtype)
            if key not in cache:
                cache[key] = self._edit_on(layer, scores.device, scores.dtype)
            _check_length(self._seq_len(), scores, self.label)
            return scores - cache[key][None]

        return hook

    def _edit_on(self, layer: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
        raise NotImplementedError


@dataclass
class Relativization(_ScoreEdit):
    """The intervention that relativizes the chosen layers with a calibrated fit (methodology §11).

    Its hooks subtract each layer's edit from the scores **after** the capture has
    read them, so in ``poslens.measure`` layer l's figures are those of the model
    with the edited layers below l, and its own scores unedited.

    Attributes:
        fit: The calibrated fit (:func:`~poslens.mechanisms.relativization_fit.calibrate`); its mode says what is subtracted.
        layers: The layers to edit (default: all).

    Example:
        >>> fit = RelativizationFit("key0", np.zeros((1, 1, 5, 5)), np.zeros((1, 1, 5)), 5, 32, (None,), {"n_seqs": 8})
        >>> iv = Relativization(fit)
        >>> iv.label, iv.describe()["intervention"]
        ('relativize:key0', 'relativization')
    """

    fit: RelativizationFit
    layers: tuple[int, ...] | None = None

    @property
    def label(self) -> str:  # type: ignore[override]
        """The table's ``intervention`` column: ``relativize:<mode>``, with the layers when not all.

        Example:
            >>> fit = RelativizationFit("all", np.zeros((3, 1, 5, 5)), np.zeros((3, 1, 5)), 5, 32, (None,) * 3, {})
            >>> Relativization(fit).label, Relativization(fit, layers=(0, 2)).label
            ('relativize:all', 'relativize:all@0,2')
        """
        where = "" if self.layers is None else "@" + ",".join(str(layer) for layer in self.layers)
        return f"relativize:{self.fit.mode}{where}"

    def describe(self) -> dict[str, Any]:
        """The settings recorded in a result's metadata: mode, layers, T and the calibration corpus.

        Returns:
            ``intervention`` (``"relativization"``), ``layers`` and the fit's :meth:`RelativizationFit.describe`.

        Example:
            >>> fit = RelativizationFit("all", np.zeros((1, 1, 5, 5)), np.zeros((1, 1, 5)), 5, 32, (None,), {"seed": 1})
            >>> Relativization(fit).describe()["calibration"]
            {'seed': 1}
        """
        return {"intervention": "relativization", "layers": None if self.layers is None else list(self.layers), **self.fit.describe()}

    def _seq_len(self) -> int:
        return self.fit.seq_len

    def _n_layers(self) -> int:
        return self.fit.n_layers

    def _edit_on(self, layer: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
        return edit_scores(self.fit.structure(layer), self.fit.terms(layer), device, dtype)


@dataclass
class RelativePlacebo(_ScoreEdit):
    """A purely relative edit of the same size as a fit's: the placebo for the cost to the model.

    Each layer and head gets a seeded random kernel r(i − j) over its visible
    offsets, scaled so that its sum of squares over one sequence's visible pairs
    equals that of the fit's edit for that head. It carries no absolute position,
    so any loss it costs is the cost of moving the logits that far.

    Attributes:
        fit: The fit whose edit's norm is matched.
        seed: The seed of the kernels.
        layers: The layers to edit (default: all).

    Example:
        >>> fit = RelativizationFit("all", np.ones((1, 2, 5, 5)), np.zeros((1, 2, 5)), 5, 32, (None,), {})
        >>> placebo = RelativePlacebo(fit, seed=0)
        >>> e, target = placebo.edit(0), edit_tensor(fit, 0)
        >>> bool(torch.allclose((e ** 2).sum((-2, -1)), (target ** 2).sum((-2, -1)))), placebo.label
        (True, 'placebo:all')
    """

    fit: RelativizationFit
    seed: int = 0
    layers: tuple[int, ...] | None = None

    @property
    def label(self) -> str:  # type: ignore[override]
        """``placebo:<mode of the matched fit>``.

        Example:
            >>> fit = RelativizationFit("key0", np.zeros((1, 1, 5, 5)), np.zeros((1, 1, 5)), 5, 32, (None,), {})
            >>> RelativePlacebo(fit).label
            'placebo:key0'
        """
        return f"placebo:{self.fit.mode}"

    def describe(self) -> dict[str, Any]:
        """The settings recorded in a result's metadata.

        Returns:
            ``intervention`` (``"relative-placebo"``), ``seed``, ``layers`` and the matched fit's description.

        Example:
            >>> fit = RelativizationFit("all", np.zeros((1, 1, 5, 5)), np.zeros((1, 1, 5)), 5, 32, (None,), {})
            >>> RelativePlacebo(fit, seed=3).describe()["seed"]
            3
        """
        return {
            "intervention": "relative-placebo",
            "seed": self.seed,
            "layers": None if self.layers is None else list(self.layers),
            "matched": self.fit.describe(),
        }

    def edit(self, layer: int) -> torch.Tensor:
        """The placebo's edit of ``layer``, [H, T, T] float64 on the CPU.

        Args:
            layer: The layer.

        Returns:
            r(i − j) on the visible pairs of rows i ≥ 1, 0 elsewhere, per head.

        Example:
            >>> fit = RelativizationFit("all", np.ones((1, 1, 5, 5)), np.zeros((1, 1, 5)), 5, 32, (None,), {})
            >>> e = RelativePlacebo(fit).edit(0)[0]
            >>> bool(e[2, 1] == e[3, 2] == e[4, 3])   # the same value at every pair of one offset
            True
        """
        st = self.fit.structure(layer)
        target = edit_tensor(self.fit, layer)
        visible, offset, _ = visible_pairs(st, torch.device("cpu"))
        generator = torch.Generator().manual_seed(self.seed * 100_003 + layer)
        kernel = torch.randn(target.shape[0], st.n_offsets, generator=generator, dtype=torch.float64)
        e = torch.where(visible, kernel[:, offset], 0.0)
        norm = (e**2).sum((-2, -1)).sqrt()
        wanted = (target**2).sum((-2, -1)).sqrt()
        return e * (wanted / norm.clamp_min(1e-300))[:, None, None]

    def _seq_len(self) -> int:
        return self.fit.seq_len

    def _n_layers(self) -> int:
        return self.fit.n_layers

    def _edit_on(self, layer: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
        return self.edit(layer).to(device=device, dtype=dtype)


@dataclass
class KeyZeroShiftPlacebo(_ScoreEdit):
    """The key-0 mode's placebo: a constant shift of every head's visible key-0 logits, of the same norm as the fit's edit.

    A constant on key 0 is a change of the sink bias β: relative by §4's decomposition,
    it moves the sink's mass but carries no absolute position. Each head's shift is the
    root mean square of the fit's edit over one sequence's visible key-0 pairs (rows
    i ≥ 1), so the two have the same sum of squares there, with the sign of the edit's
    mean (the placebo moves the sink the same way on average).

    Attributes:
        fit: The fit whose edit's norm is matched (mode ``key0``).
        layers: The layers to edit (default: all).

    Example:
        >>> fit = RelativizationFit("key0", np.zeros((1, 1, 5, 5)), np.array([[[0.0, 1.0, 1.0, 3.0, 3.0]]]), 5, 32, (None,), {})
        >>> placebo = KeyZeroShiftPlacebo(fit)
        >>> e, target = placebo.edit(0), edit_tensor(fit, 0)
        >>> [round(v, 4) for v in e[0, :, 0].tolist()], placebo.label   # one value on rows 1..4: the edit's rms there
        ([0.0, 2.2361, 2.2361, 2.2361, 2.2361], 'placebo:key0-shift')
        >>> bool(torch.allclose((e ** 2).sum(), (target ** 2).sum()))
        True
    """

    fit: RelativizationFit
    layers: tuple[int, ...] | None = None

    @property
    def label(self) -> str:  # type: ignore[override]
        """``placebo:key0-shift``.

        Example:
            >>> fit = RelativizationFit("key0", np.zeros((1, 1, 5, 5)), np.zeros((1, 1, 5)), 5, 32, (None,), {})
            >>> KeyZeroShiftPlacebo(fit).label
            'placebo:key0-shift'
        """
        return "placebo:key0-shift"

    def describe(self) -> dict[str, Any]:
        """The settings recorded in a result's metadata.

        Returns:
            ``intervention`` (``"key0-shift-placebo"``), ``layers`` and the matched fit's description.

        Example:
            >>> fit = RelativizationFit("key0", np.zeros((1, 1, 5, 5)), np.zeros((1, 1, 5)), 5, 32, (None,), {})
            >>> KeyZeroShiftPlacebo(fit).describe()["intervention"]
            'key0-shift-placebo'
        """
        return {"intervention": "key0-shift-placebo", "layers": None if self.layers is None else list(self.layers), "matched": self.fit.describe()}

    def edit(self, layer: int) -> torch.Tensor:
        """The placebo's edit of ``layer``, [H, T, T] float64 on the CPU: one constant per head on the visible key-0 pairs.

        Args:
            layer: The layer.

        Returns:
            The constant on key 0 of rows i ≥ 1 that see it, 0 elsewhere, per head.

        Example:
            >>> fit = RelativizationFit("key0", np.zeros((1, 1, 5, 5)), -np.ones((1, 1, 5)), 5, 32, (None,), {})
            >>> KeyZeroShiftPlacebo(fit).edit(0)[0, :, 0].tolist()   # the edit is −1 there: so is the shift
            [0.0, -1.0, -1.0, -1.0, -1.0]
        """
        target = edit_tensor(self.fit, layer)
        visible = visible_pairs(self.fit.structure(layer), torch.device("cpu"))[0]
        key0 = visible.clone()
        key0[:, 1:] = False  # the visible key-0 pairs of rows i ≥ 1
        values = target[:, key0]  # [H, pairs]
        if values.shape[1] == 0:
            return torch.zeros_like(target)
        rms = values.pow(2).mean(-1).sqrt()
        sign = torch.where(values.mean(-1) < 0, -1.0, 1.0).to(torch.float64)
        return torch.where(key0[None], (sign * rms)[:, None, None], 0.0)

    def _seq_len(self) -> int:
        return self.fit.seq_len

    def _n_layers(self) -> int:
        return self.fit.n_layers

    def _edit_on(self, layer: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
        return self.edit(layer).to(device=device, dtype=dtype)
