"""The loaded model and what every measurement records of it: :class:`PosModel`, and the refusal of models poslens cannot read.

:func:`poslens.model.loading.load_model` makes a PosModel from a name or a
folder, :func:`poslens.model.wrapping.from_memory` from an object already in
memory. Both are re-exported from :mod:`poslens.model.loading`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from poslens.errors import PoslensError
from poslens.model.variants import Variant, rope_summary, window_hook


class ModelNotSupportedError(PoslensError, ValueError):
    """The model loads but is not a causal RoPE decoder, which poslens studies.

    Raised by :func:`load_model` for encoders, encoder-decoders, models
    without rotary position embeddings or with layers that skip it (NoPE), and
    models with layers that are not plain causal softmax attention (state-space
    or linear-attention hybrids, chunked or sparse attention, recurrent cycles),
    before any weights are read; and for models with attention sinks,
    architectures TransformerLens has no adapter for, and adapters that do not
    expose the pre-softmax scores. The message names what is missing.

    Example:
        >>> import tempfile, poslens
        >>> from transformers import BertConfig
        >>> folder = tempfile.mkdtemp(); BertConfig().save_pretrained(folder)
        >>> poslens.load_model(folder)
        Traceback (most recent call last):
        ...
        poslens.model.pos_model.ModelNotSupportedError: ... (bert) is not a causal decoder: ...
    """


@dataclass
class PosModel:
    """A bridged model and the facts about it that every measurement records.

    Attributes are plain values; ``bridge`` is the TransformerLens
    ``TransformerBridge`` and ``hf_model``/``tokenizer`` the objects under it.
    ``sliding_windows[l]`` is the sliding-window width of layer l (None = full causal);
    ``rope_base[l]`` its RoPE base after any variant.

    Attributes:
        bridge: The TransformerLens ``TransformerBridge`` (or ``HookedTransformer``, for ``kind="hooked"``).
        hf_model: The transformers model under it.
        tokenizer: Its tokenizer.
        name: The name results record (a registry name, a folder, or the model's own).
        source: Where the weights came from.
        source_sha256: SHA-256 of the weights, where known.
        architecture: The transformers model class.
        n_layers: Number of layers L.
        n_heads: Number of query heads H per layer.
        n_kv_heads: Number of key/value heads.
        d_head: Dimension of a head.
        rotary_dim: Number of dimensions RoPE rotates.
        rope_base: The RoPE base of each layer, after any variant.
        sliding_windows: The sliding window of each layer (``None``: full causal).
        max_context: The longest sequence the model takes.
        bos_token_id: The BOS token's id, or ``None``.
        bos_token: The BOS token, or ``None``.
        tokenizer_prepends_bos: Whether the tokenizer adds BOS by itself.
        quantized: The quantization the weights were dequantized from, or ``None``.
        variant: The inference-time variant applied.
        load_seconds: Seconds the loading took.
        kind: ``"bridge"`` (a ``TransformerBridge`` over ``hf_model``) or ``"hooked"`` (a TransformerLens 3.x ``HookedTransformer``).
        use: How poslens runs the model and gives it back as it was (:class:`poslens.model.user_model.ModelUse`);
            ``None`` for a model built by hand, run as it is.

    Example:
        >>> import poslens
        >>> model = poslens.load_model("smollm2-135m")  # doctest: +SKIP
        >>> model.n_layers, model.n_heads, model.bos_token  # doctest: +SKIP
        (30, 9, '<|im_start|>')
    """

    bridge: Any
    hf_model: Any
    tokenizer: Any
    name: str
    source: str
    source_sha256: str | None
    architecture: str
    n_layers: int
    n_heads: int
    n_kv_heads: int
    d_head: int
    rotary_dim: int
    rope_base: list[float]
    sliding_windows: list[int | None]
    max_context: int
    bos_token_id: int | None
    bos_token: str | None
    tokenizer_prepends_bos: bool
    quantized: str | None
    variant: Variant = field(default_factory=Variant)
    load_seconds: float = 0.0
    kind: str = "bridge"  # "bridge": a TransformerBridge over hf_model; "hooked": a TransformerLens 3.x HookedTransformer
    use: Any = field(default=None, repr=False, compare=False)

    @property
    def module(self) -> Any:
        """The torch module that holds the weights: ``hf_model``, or the HookedTransformer itself.

        Example:
            >>> import tempfile, poslens
            >>> from poslens.testing import save_tiny_model
            >>> model = poslens.load_model(save_tiny_model(tempfile.mkdtemp(), "llama"))
            >>> model.module is model.hf_model
            True
        """
        return self.bridge if self.kind == "hooked" else self.hf_model

    @property
    def device(self) -> torch.device:
        """The device of the model's first parameter (where token ids go).

        Example:
            >>> import tempfile, poslens
            >>> from poslens.testing import save_tiny_model
            >>> poslens.load_model(save_tiny_model(tempfile.mkdtemp(), "llama"), device="cpu").device
            device(type='cpu')
        """
        return next(self.module.parameters()).device

    def embedding_module(self) -> torch.nn.Module:
        """The input-embedding module, called directly (token ids -> embeddings) without firing any hook.

        Returns:
            The module.

        Example:
            >>> import tempfile, torch, poslens
            >>> from poslens.testing import save_tiny_model
            >>> model = poslens.load_model(save_tiny_model(tempfile.mkdtemp(), "llama"))
            >>> model.embedding_module()(torch.tensor([[1, 2]])).shape
            torch.Size([1, 2, 64])
        """
        if self.kind == "hooked":
            return self.bridge.embed
        module = self.hf_model.get_input_embeddings()
        # The bridge wraps the HF embedding in place; its wrapper fires hooks, so
        # calling it from inside a hook would recurse. Use the module it wraps.
        return getattr(module, "original_component", module)

    def vocab_size(self) -> int:
        """Number of token ids the input embedding holds.

        Returns:
            The number of rows of the input embedding.

        Example:
            >>> import tempfile, poslens
            >>> from poslens.testing import save_tiny_model
            >>> poslens.load_model(save_tiny_model(tempfile.mkdtemp(), "llama")).vocab_size()
            260
        """
        if self.kind == "hooked":
            return int(self.bridge.cfg.d_vocab)
        return int(self.embedding_module().num_embeddings)

    def rope_record(self) -> dict[str, Any]:
        """The RoPE type and scaling, as run metadata records them (:func:`poslens.model.variants.rope_summary`).

        Returns:
            ``{"rope_type": …, "rope_scaling": …}``.

        Example:
            >>> import tempfile, poslens
            >>> from poslens.testing import save_tiny_model
            >>> poslens.load_model(save_tiny_model(tempfile.mkdtemp(), "llama")).rope_record()
            {'rope_type': 'default', 'rope_scaling': None}
        """
        if self.kind == "hooked":
            cfg = self.bridge.cfg
            scaled = bool(getattr(cfg, "use_NTK_by_parts_rope", False))
            return {"rope_type": "llama3" if scaled else "default", "rope_scaling": {"factor": cfg.NTK_by_parts_factor} if scaled else None}
        return rope_summary(self.hf_model.config.get_text_config())

    def attached_saes(self) -> list[dict[str, Any]]:
        """The SAEs attached to the model now (SAELens's ``HookedSAETransformer``), as :func:`poslens.model.user_saes.attached_saes` records them.

        Returns:
            One record per SAE (hook point, ``d_sae``, the sha256 of its weights, ...); none for other models.

        Example:
            >>> import tempfile, poslens
            >>> from poslens.testing import save_tiny_model
            >>> poslens.load_model(save_tiny_model(tempfile.mkdtemp(), "llama"), device="cpu").attached_saes()
            []
        """
        from poslens.model.user_saes import attached_saes

        return attached_saes(self.bridge)

    @property
    def label(self) -> str:
        """The name results carry: :attr:`name`, with the attached SAEs' hook points when there are any.

        Read when a result is made, so an SAE attached after loading counts (``"custom (in memory) with SAE at
        blocks.1.hook_resid_pre"``); with no SAE it is :attr:`name`.

        Example:
            >>> import tempfile, poslens
            >>> from poslens.testing import save_tiny_model
            >>> model = poslens.load_model(save_tiny_model(tempfile.mkdtemp(), "llama"), device="cpu")
            >>> model.label == model.name   # no SAE attached
            True
        """
        from poslens.model.user_saes import label_with_saes

        saes = getattr(self.bridge, "acts_to_saes", None)  # the hook points only: no need to hash the SAEs here
        return label_with_saes(self.name, [{"hook_point": point} for point in sorted(saes)]) if isinstance(saes, dict) else self.name

    @property
    def variant_name(self) -> str:
        """The inference-time variant as a string (the results' ``variant`` column).

        Example:
            >>> import tempfile, poslens
            >>> from poslens.testing import save_tiny_model
            >>> folder = save_tiny_model(tempfile.mkdtemp(), "llama")
            >>> poslens.load_model(folder).variant_name, poslens.load_model(folder, variant="ntk:2+window:4").variant_name
            ('base', 'ntk:2+window:4')
        """
        return str(self.variant)

    @property
    def attention_kind(self) -> str:
        """``full``, ``sliding W`` or ``mixed`` (some layers windowed).

        Example:
            >>> import tempfile, poslens
            >>> from poslens.testing import save_tiny_model
            >>> folder = save_tiny_model(tempfile.mkdtemp(), "llama")
            >>> poslens.load_model(folder).attention_kind, poslens.load_model(folder, variant="window:4").attention_kind
            ('full', 'sliding 4')
        """
        widths = set(self.sliding_windows)
        if widths == {None}:
            return "full"
        if None not in widths and len(widths) == 1:
            return f"sliding {self.sliding_windows[0]}"
        return "mixed"

    def variant_hooks(self) -> list[tuple[str, Any]]:
        """Hooks that realise an imposed window; run before any measuring hook.

        :func:`poslens.model.hooks.run_with_hooks` adds them by itself; a model without a window variant has none.

        Returns:
            ``[(hook name, hook function)]``; empty without a window variant.

        Example:
            >>> import tempfile, poslens
            >>> from poslens.testing import save_tiny_model
            >>> folder = save_tiny_model(tempfile.mkdtemp(), "llama")
            >>> poslens.load_model(folder).variant_hooks()
            []
            >>> [name for name, _ in poslens.load_model(folder, variant="window:4").variant_hooks()]
            ['blocks.0.attn.hook_attn_scores', 'blocks.1.attn.hook_attn_scores', 'blocks.2.attn.hook_attn_scores']
        """
        if self.variant.sliding_window is None:
            return []
        from poslens.model.hooks import attn_scores

        return [(attn_scores(layer), window_hook(self.variant.sliding_window)) for layer in range(self.n_layers)]

    def describe(self) -> dict[str, Any]:
        """Provenance of the model, as stored in every result's metadata.

        Returns:
            The model's name, source, architecture, sizes, RoPE and BOS facts, and its weights' dtype and device
            (a comma list where they differ, as under a device map), as plain values.

        Example:
            >>> import tempfile, poslens
            >>> from poslens.testing import save_tiny_model
            >>> described = poslens.load_model(save_tiny_model(tempfile.mkdtemp(), "llama"), device="cpu").describe()
            >>> described["n_layers"], described["dtype"], described["device"]
            (3, 'float32', 'cpu')
        """
        tensors = list(self.module.parameters())
        return {
            "model": self.label,
            "source": self.source,
            "source_sha256": self.source_sha256,
            "architecture": self.architecture,
            "variant": self.variant_name,
            "n_layers": self.n_layers,
            "n_heads": self.n_heads,
            "n_kv_heads": self.n_kv_heads,
            "d_head": self.d_head,
            "rotary_dim": self.rotary_dim,
            "rope_base": list(self.rope_base),
            "window": list(self.sliding_windows),
            "max_context": self.max_context,
            "bos_token_id": self.bos_token_id,
            "bos_token": self.bos_token,
            "quantized": self.quantized,
            "dtype": ",".join(sorted({str(t.dtype).removeprefix("torch.") for t in tensors if t.is_floating_point()})),
            "device": ",".join(sorted({str(t.device) for t in tensors})),
        }

    def __repr__(self) -> str:
        q = f", {self.quantized}" if self.quantized else ""
        return (
            f"PosModel({self.name!r}, variant={self.variant_name!r}, {self.architecture}, "
            f"{self.n_layers} layers, {self.n_heads}/{self.n_kv_heads} heads, attention={self.attention_kind}{q})"
        )
