"""The model the researcher already holds: a transformers model, a TransformerBridge or a HookedTransformer, measured as it is.

:func:`poslens.model.wrapping.from_memory` (also reached through
:func:`poslens.load_model` when it is given an object instead of a name) wraps,
without saving anything to disk (this module holds the HookedTransformer part,
the recognition of model objects):

- a transformers ``PreTrainedModel`` with its tokenizer (a bridge is booted
  around the very same module: its weights are not copied);
- a TransformerLens ``TransformerBridge`` (used as it is);
- a TransformerLens 3.x ``HookedTransformer``, including SAELens's
  ``HookedSAETransformer`` with SAEs attached (its attention hooks fire under
  the bridge's names; masked scores are −inf, which the capture treats as masked).

Edits made to the weights after wrapping are measured as edited: poslens holds
the user's module, not a copy. Provenance records ``source: "memory"`` and,
at each measurement, the sha256 of the state dict as it is then
(:func:`poslens.model.weights_hash.state_dict_sha256`; not above
:data:`poslens.model.weights_hash.MAX_HASHED_BYTES`, with the reason recorded). Inference-time variants: ``window:W`` works (it is
a hook on the scores); ``ntk:`` and ``rope-base:`` are refused, since a built
model's RoPE frequencies are fixed (save it and load the folder with the
variant instead). Objects poslens cannot read correctly are refused with the
reason: a HookedTransformer without rotary embeddings, with attention sinks
(``use_attention_sinks``) or with non-causal attention, and bridges whose
``hook_attn_scores`` holds post-softmax weights.
"""

from __future__ import annotations

from typing import Any

import torch  # noqa: F401 (the examples use it)

from poslens.errors import InputError
from poslens.model.pos_model import ModelNotSupportedError, PosModel
from poslens.model.support import check_weights_loaded
from poslens.model.user_model import ModelUse
from poslens.model.variants import Variant
from poslens.model.weights_hash import state_dict_sha256  # noqa: F401 (re-exported: it was defined here)

MEMORY = "memory"


def model_kind(obj: Any) -> str:
    """What kind of model object ``obj`` is: ``"pos"``, ``"hooked"``, ``"bridge"``, ``"hf"``, or ``""`` for none poslens takes.

    Recognised by class names in the type's MRO (and their packages), so that
    neither TransformerLens 3.x nor SAELens need be installed to ask.

    Args:
        obj: anything.

    Returns:
        The kind.

    Example:
        >>> model_kind("smollm2-135m"), model_kind(torch.nn.Linear(2, 2))
        ('', '')
    """
    if isinstance(obj, PosModel):
        return "pos"
    names = {cls.__name__ for cls in type(obj).__mro__}
    modules = {cls.__module__.split(".")[0] for cls in type(obj).__mro__}
    if "HookedTransformer" in names and "transformer_lens" in modules:
        return "hooked"
    if "TransformerBridge" in names and "transformer_lens" in modules:
        return "bridge"
    if "PreTrainedModel" in names and "transformers" in modules:
        return "hf"
    return ""


def wrap_hooked(ht: Any, tokenizer: Any, variant: Variant, name: str | None) -> PosModel:
    """A :class:`~poslens.model.pos_model.PosModel` around a TransformerLens 3.x ``HookedTransformer`` (the object itself).

    Args:
        ht: the HookedTransformer (or SAELens's HookedSAETransformer).
        tokenizer: its tokenizer (default: ``ht.tokenizer``).
        variant: ``window:W`` or none (checked by the caller).
        name: the name results carry.

    Returns:
        The model, with ``kind == "hooked"``.

    Raises:
        ModelNotSupportedError: no rotary embeddings, attention sinks, non-causal or local attention.
        InputError: no tokenizer.

    Example:
        >>> wrap_hooked(hooked_transformer, None, Variant(), "mine").kind  # doctest: +SKIP
        'hooked'
    """
    cfg = ht.cfg
    label = name or f"{getattr(cfg, 'model_name', None) or type(ht).__name__} (in memory)"
    if getattr(cfg, "positional_embedding_type", None) != "rotary":
        raise ModelNotSupportedError(
            f"{label} is a HookedTransformer with {cfg.positional_embedding_type!r} positions, not rotary: poslens studies "
            "RoPE models, where logits depend only on offsets"
        )
    if getattr(cfg, "attention_dir", "causal") != "causal":
        raise ModelNotSupportedError(f"{label} has {cfg.attention_dir!r} attention: poslens needs the causal mask")
    if getattr(cfg, "use_attention_sinks", False):
        raise ModelNotSupportedError(
            f"{label} uses attention sinks (use_attention_sinks): a learned logit per head joins each softmax after "
            "hook_attn_scores, so the softmax of the scores poslens captures is not the model's attention"
        )
    tok = tokenizer if tokenizer is not None else getattr(ht, "tokenizer", None)
    if tok is None:
        raise InputError(f"{label} has no tokenizer: pass tokenizer= (the model's own)")
    n_layers, n_heads = int(cfg.n_layers), int(cfg.n_heads)
    if getattr(cfg, "use_local_attn", False):
        raise ModelNotSupportedError(f"{label} uses TransformerLens's local attention, which poslens has not been tested on")
    check_weights_loaded(ht, label)
    sliding_windows = [variant.sliding_window] * n_layers
    bos_id = tok.bos_token_id
    probe = tok("a").input_ids
    return PosModel(
        bridge=ht,
        hf_model=None,
        tokenizer=tok,
        name=label,
        source=MEMORY,
        source_sha256=None,
        architecture=str(getattr(cfg, "original_architecture", None) or "HookedTransformer"),
        n_layers=n_layers,
        n_heads=n_heads,
        n_kv_heads=int(getattr(cfg, "n_key_value_heads", None) or n_heads),
        d_head=int(cfg.d_head),
        rotary_dim=int(cfg.rotary_dim or cfg.d_head),
        rope_base=[float(cfg.rotary_base)] * n_layers,
        sliding_windows=sliding_windows,
        max_context=int(cfg.n_ctx),
        bos_token_id=bos_id,
        bos_token=tok.bos_token,
        tokenizer_prepends_bos=bool(bos_id is not None and probe and probe[0] == bos_id),
        quantized=None,
        variant=variant,
        kind="hooked",
        use=ModelUse(roots=[("", ht)], runner=ht),  # run as it is; given back in its training mode, without poslens's hooks
    )
