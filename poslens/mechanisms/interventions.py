"""Interventions on the forward pass (methodology §7), as hooks that ``poslens.measure`` composes.

Each intervention has a ``label`` (the table's ``intervention`` column),
``hooks(model, tokens)`` returning TransformerLens forward hooks for one batch,
and ``describe()`` for the result's metadata:

- :class:`BosReplacement` replaces the embedding output at position 0 with the
  mean embedding row, another token's embedding, zeros or seeded norm-matched
  noise, always computed by the model's own embedding module (so Gemma's √d
  scaling is respected);
- :class:`SinkAblation` replaces a_i0 in sink-reading heads by the head's
  baseline mean and rebuilds the rest of each row from the logits, exactly;
- :class:`Position0Transplant` overwrites the position-0 residual stream
  entering every block with the trajectory of another position-0 token.

Longer than 400 lines because it is one class per intervention of the
``intervention`` column, each with its hooks, label and ``describe()``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from poslens.errors import InputError
from poslens.measurement.arguments import Intervention
from poslens.mechanisms.exact_rows import key_zero_rows, write_rows
from poslens.model import hooks as hook_names
from poslens.model.pos_model import PosModel

REPLACEMENTS = ("mean", "zero", "noise", "token:<id or string>")


def _embedding_module(model: PosModel) -> torch.nn.Module:
    return model.embedding_module()  # called directly, so that no hook fires (a hook calling it would recurse)


def embed_tokens(model: PosModel, token_ids: torch.Tensor) -> torch.Tensor:
    """Embeddings of ``token_ids`` [batch, pos] through the model's own input-embedding module.

    Args:
        model: The loaded model.
        token_ids: Token ids, [batch, pos].

    Returns:
        The embeddings, [batch, pos, d].

    Example:
        >>> embed_tokens(model, torch.tensor([[1]])).shape  # doctest: +SKIP
        torch.Size([1, 1, 576])
    """
    module = _embedding_module(model)
    device = next(module.parameters()).device
    with torch.inference_mode():
        return module(token_ids.to(device))


def mean_embedding(model: PosModel, chunk: int = 8192) -> torch.Tensor:
    """Mean over the whole vocabulary of the embedding module's output rows.

    Args:
        model: The loaded model.
        chunk: Tokens embedded per step.

    Returns:
        The mean embedding, [d].

    Example:
        >>> mean_embedding(model).shape  # doctest: +SKIP
        torch.Size([576])
    """
    module = _embedding_module(model)
    vocab = module.weight.shape[0]
    total = None
    for start in range(0, vocab, chunk):
        ids = torch.arange(start, min(vocab, start + chunk))[None]
        part = embed_tokens(model, ids)[0].double().sum(0)
        total = part if total is None else total + part
    return (total / vocab).to(module.weight.dtype)


def _token_id(model: PosModel, spec: str) -> int:
    if spec.lstrip("-").isdigit():
        token_id = int(spec)
    else:
        ids = model.tokenizer(spec, add_special_tokens=False).input_ids
        if len(ids) != 1:
            raise InputError(f"token {spec!r} encodes to {len(ids)} tokens, not one; give a token id instead")
        token_id = ids[0]
    vocab = _embedding_module(model).weight.shape[0]
    if not 0 <= token_id < vocab:
        raise InputError(f"token id {token_id} is outside the vocabulary (0..{vocab - 1})")
    return token_id


@dataclass
class BosReplacement(Intervention):
    """Replace the embedding at position 0 before the first block.

    ``kind`` is ``mean``, ``zero``, ``noise`` (one seeded Gaussian direction,
    scaled to the norm of the embedding it replaces) or ``token:<id or string>``.

    Attributes:
        kind: ``mean``, ``zero``, ``noise`` or ``token:<id or string>``.
        seed: The seed of the ``noise`` direction.

    Example:
        >>> swap = BosReplacement("mean")
        >>> swap.label
        'bos:mean'
        >>> result = poslens.measure(model, corpus, interventions=[swap])  # doctest: +SKIP
    """

    kind: str
    seed: int = 0
    _vector: torch.Tensor | None = field(default=None, repr=False)
    _token: int | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.kind not in ("mean", "zero", "noise") and not self.kind.startswith("token:"):
            raise InputError(f"unknown BOS replacement {self.kind!r}; choose from {', '.join(REPLACEMENTS)}")

    @property
    def label(self) -> str:
        """The ``intervention`` column's value: ``bos:`` and the kind.

        Example:
            >>> BosReplacement("token:<s>").label
            'bos:token:<s>'
        """
        return f"bos:{self.kind}"

    def describe(self) -> dict[str, Any]:
        """The settings recorded in a result's metadata; ``token_id`` is filled once the token is resolved.

        Returns:
            ``intervention`` (``"bos-replacement"``), ``kind``, ``seed`` and ``token_id``.

        Example:
            >>> BosReplacement("noise", seed=3).describe()
            {'intervention': 'bos-replacement', 'kind': 'noise', 'seed': 3, 'token_id': None}
        """
        return {"intervention": "bos-replacement", "kind": self.kind, "seed": self.seed, "token_id": self._token}

    def replacement(self, model: PosModel, original: torch.Tensor) -> torch.Tensor:
        """The vectors [batch, d] that take the place of ``original`` [batch, d].

        ``mean`` and ``token:`` are computed once from ``model`` and cached;
        ``zero`` and ``noise`` do not use it. ``noise`` is one seeded Gaussian
        direction, the same for every row, scaled to the norm of each row of ``original``.

        Args:
            model: The loaded model.
            original: The embeddings at position 0, [batch, d].

        Returns:
            The replacement vectors, [batch, d].

        Example:
            >>> noise = BosReplacement("noise", seed=1).replacement(None, torch.ones(2, 4))
            >>> noise.norm(dim=-1).round(decimals=4)   # the norms of the rows it replaces
            tensor([2., 2.])
            >>> bool(torch.equal(noise[0], noise[1]))    # the same direction in every row
            True
        """
        if self.kind == "zero":
            return torch.zeros_like(original)
        if self.kind == "noise":
            # one seeded direction for every sequence: a draw per row of the batch would make the
            # replacement, and so the figures, depend on how sequences are batched
            generator = torch.Generator().manual_seed(self.seed)
            direction = torch.randn(original.shape[-1], generator=generator, dtype=torch.float64)
            scale = original.double().norm(dim=-1, keepdim=True).cpu() / direction.norm()
            return (direction * scale).to(original.dtype).to(original.device)
        if self._vector is None:
            if self.kind == "mean":
                self._vector = mean_embedding(model)
            else:
                self._token = _token_id(model, self.kind[len("token:") :])
                self._vector = embed_tokens(model, torch.tensor([[self._token]]))[0, 0]
        return self._vector.to(original.device, original.dtype).expand_as(original)

    def hooks(self, model: PosModel, tokens: torch.Tensor) -> list[tuple[str, Any]]:
        """A hook on ``hook_embed`` that replaces position 0 of every sequence in the batch.

        The replacement vector is computed before the forward pass, which also resolves a ``token:`` spec.

        Args:
            model: The loaded model.
            tokens: The batch's token ids, [batch, pos].

        Returns:
            ``[(hook name, hook function)]``, as ``run_with_hooks`` takes them.

        Example:
            >>> import tempfile, poslens
            >>> from poslens.testing import save_tiny_model
            >>> model = poslens.load_model(save_tiny_model(tempfile.mkdtemp(), "llama"))
            >>> swap = BosReplacement("token:<s>")
            >>> [name for name, _ in swap.hooks(model, torch.tensor([[70, 71, 72]]))]
            ['hook_embed']
            >>> swap.describe()["token_id"]
            1
        """
        if self.kind in ("mean",) or self.kind.startswith("token:"):
            self.replacement(model, torch.zeros(1, model.bridge.cfg.d_model))  # computed before the forward

        def hook(embedded: torch.Tensor, hook: Any) -> torch.Tensor:
            out = embedded.clone()
            out[:, 0] = self.replacement(model, embedded[:, 0])
            return out

        return [(hook_names.embed(), hook)]


@dataclass
class SinkAblation(Intervention):
    """Remove the dependence of a_i0 on i in the given heads, keeping their sink mass.

    ``key0_mean[(layer, head)]`` is the head's baseline mean of a_i0 (see
    :func:`poslens.mechanisms.sinks.key0_means`). For every query i ≥ 1 that can see key 0,
    a_i0 becomes that mean ā and the rest of the row is rebuilt from the logits as
    (1 − ā) · softmax over the other visible keys, in float64
    (:mod:`poslens.mechanisms.exact_rows`): never by dividing by 1 − a_i0, which a
    strong sink rounds to 0 in float32. Each edited row is checked to sum to 1.
    Other heads are untouched.

    Attributes:
        key0_mean: ``{(layer, head): baseline mean of a_i0}`` of every ablated head.
        label: The table's ``intervention`` column for this ablation.

    Example:
        >>> heads = poslens.mechanisms.sinks.sink_reading_heads(baseline)                       # doctest: +SKIP
        >>> ablate = SinkAblation(poslens.mechanisms.sinks.key0_means(baseline, heads))          # doctest: +SKIP
        >>> poslens.measure(model, corpus, interventions=[ablate])                     # doctest: +SKIP
    """

    key0_mean: dict[tuple[int, int], float]
    label: str = "sink-ablation"
    _scores: dict[int, torch.Tensor] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        for (layer, head), mean in self.key0_mean.items():
            if not 0.0 <= float(mean) <= 1.0:
                raise InputError(f"{self.label}: the mean a_i0 of head ({layer}, {head}) must lie between 0 and 1, got {mean}")

    def describe(self) -> dict[str, Any]:
        """The settings recorded in a result's metadata: each head as [layer, head, mean], sorted.

        Returns:
            ``intervention`` (``"sink-path-ablation"``) and ``heads``, ``[[layer, head, mean], …]``.

        Example:
            >>> SinkAblation({(2, 0): 0.5, (0, 1): 0.3}).describe()
            {'intervention': 'sink-path-ablation', 'heads': [[0, 1, 0.3], [2, 0, 0.5]]}
        """
        return {
            "intervention": "sink-path-ablation",
            "heads": [[layer, head, mean] for (layer, head), mean in sorted(self.key0_mean.items())],
        }

    def hooks(self, model: PosModel, tokens: torch.Tensor) -> list[tuple[str, Any]]:
        """Per layer with an ablated head: a hook keeping its scores, and one rewriting its rows in ``hook_pattern``.

        Args:
            model: The loaded model.
            tokens: The batch's token ids (unused: the ablation depends on the scores only).

        Returns:
            ``[(hook name, hook function)]``, as ``run_with_hooks`` takes them.

        Example:
            >>> import tempfile, poslens
            >>> from poslens.testing import save_tiny_model
            >>> model = poslens.load_model(save_tiny_model(tempfile.mkdtemp(), "llama"))
            >>> ablate, seen = SinkAblation({(0, 1): 0.3}), []
            >>> record = (hook_names.attn_pattern(0), lambda pattern, hook: seen.append(pattern[0, 1]))
            >>> hook_names.run_with_hooks(model, torch.tensor([[1, 70, 71, 72]]), ablate.hooks(model, None) + [record])
            >>> seen[0][:, 0], seen[0].sum(-1)   # layer 0, head 1: a_i0 = 0.3 for i ≥ 1, rows still sum to 1
            (tensor([1.0000, 0.3000, 0.3000, 0.3000]), tensor([1., 1., 1., 1.]))
        """
        by_layer: dict[int, dict[int, float]] = {}
        for (layer, head), mean in self.key0_mean.items():
            by_layer.setdefault(layer, {})[head] = mean
        out = []
        for layer, heads in sorted(by_layer.items()):
            out += [(hook_names.attn_scores(layer), self._keep(layer, sorted(heads))), (hook_names.attn_pattern(layer), self._edit(layer, heads))]
        return out

    def _keep(self, layer: int, heads: list[int]):
        def hook(scores: torch.Tensor, hook: Any) -> None:
            self._scores[layer] = scores[:, heads].detach()

        return hook

    def _edit(self, layer: int, heads: dict[int, float]):
        order = sorted(heads)

        def hook(pattern: torch.Tensor, hook: Any) -> torch.Tensor:
            rows = key_zero_rows(self._scores.pop(layer))
            mean = torch.tensor([heads[h] for h in order], dtype=torch.float64, device=pattern.device)[None, :, None]
            new = rows.with_key0(mean.expand_as(rows.x), (1.0 - mean).expand_as(rows.x))
            return write_rows(pattern, order, new, rows.sees_key0, layer, self.label)

        return hook


@dataclass
class Position0Transplant(Intervention):
    """Overwrite the residual stream at position 0, entering every block, with another token's trajectory.

    Under causal attention position 0 sees only itself, so its trajectory is
    that of a one-token forward pass of ``token`` (computed once per model).

    Attributes:
        token: The token whose position-0 trajectory is transplanted: a string, or ``token:<id or string>``.

    Example:
        >>> transplant = Position0Transplant("token:42")
        >>> transplant.label
        'transplant:42'
    """

    token: str
    _trajectory: list[torch.Tensor] | None = field(default=None, repr=False)
    _token_id: int | None = field(default=None, repr=False)

    @property
    def label(self) -> str:
        """The ``intervention`` column's value: ``transplant:`` and the token, without a ``token:`` prefix.

        Example:
            >>> Position0Transplant("<s>").label
            'transplant:<s>'
        """
        return f"transplant:{self.token.removeprefix('token:')}"

    def describe(self) -> dict[str, Any]:
        """The settings recorded in a result's metadata; ``token_id`` is filled by :meth:`trajectory`.

        Returns:
            ``intervention`` (``"position0-transplant"``), ``token`` and ``token_id``.

        Example:
            >>> Position0Transplant("token:42").describe()
            {'intervention': 'position0-transplant', 'token': 'token:42', 'token_id': None}
        """
        return {"intervention": "position0-transplant", "token": self.token, "token_id": self._token_id}

    def trajectory(self, model: PosModel) -> list[torch.Tensor]:
        """The position-0 residual entering each block for a one-token input.

        Computed by one forward pass on first use, then cached.

        Args:
            model: The loaded model.

        Returns:
            The residual entering each block, one [d] vector per block.

        Example:
            >>> import tempfile, poslens
            >>> from poslens.testing import save_tiny_model
            >>> model = poslens.load_model(save_tiny_model(tempfile.mkdtemp(), "llama"))
            >>> path = Position0Transplant("token:42").trajectory(model)
            >>> len(path), path[0].shape   # one d_model vector per block
            (3, torch.Size([64]))
        """
        if self._trajectory is None:
            self._token_id = _token_id(model, self.token.removeprefix("token:"))
            seen: dict[int, torch.Tensor] = {}

            def record(layer: int):
                def hook(resid: torch.Tensor, hook: Any) -> torch.Tensor:
                    seen[layer] = resid[0, 0].detach().clone()
                    return resid

                return hook

            hook_names.run_with_hooks(
                model,
                torch.tensor([[self._token_id]]),
                [(hook_names.resid_pre(layer), record(layer)) for layer in range(model.n_layers)],
            )
            self._trajectory = [seen[layer] for layer in range(model.n_layers)]
        return self._trajectory

    def hooks(self, model: PosModel, tokens: torch.Tensor) -> list[tuple[str, Any]]:
        """One hook per block on ``hook_resid_pre`` that writes the trajectory into position 0.

        Args:
            model: The loaded model.
            tokens: The batch's token ids, [batch, pos].

        Returns:
            ``[(hook name, hook function)]``, as ``run_with_hooks`` takes them.

        Example:
            >>> import tempfile, poslens
            >>> from poslens.testing import save_tiny_model
            >>> model = poslens.load_model(save_tiny_model(tempfile.mkdtemp(), "llama"))
            >>> transplant = Position0Transplant("token:42")
            >>> [name for name, _ in transplant.hooks(model, torch.tensor([[1, 70, 71]]))]
            ['blocks.0.hook_resid_pre', 'blocks.1.hook_resid_pre', 'blocks.2.hook_resid_pre']
        """
        path = self.trajectory(model)

        def overwrite(layer: int):
            def hook(resid: torch.Tensor, hook: Any) -> torch.Tensor:
                out = resid.clone()
                out[:, 0] = path[layer].to(resid.dtype)
                return out

            return hook

        return [(hook_names.resid_pre(layer), overwrite(layer)) for layer in range(model.n_layers)]
