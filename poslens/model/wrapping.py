"""Wrapping a loaded model as a :class:`~poslens.model.pos_model.PosModel`: a bridge around the very module, and the facts about it.

:func:`wrap_hf_model` boots a TransformerLens bridge around a transformers
causal LM (or uses the bridge given), checks what a bridge and the loaded
module can tell (:mod:`poslens.model.support`), and records the facts every
result carries (:mod:`poslens.model.config_facts`). :func:`from_memory` is the
door for a model object the researcher already holds (a transformers model,
a bridge, or a TransformerLens 3.x HookedTransformer). While the bridge
boots, TransformerLens 4.3 may not install anything: for a multimodal model
whose folder has no processor files it would otherwise run ``pip install
torchvision``, which replaces the CPU build of torch with a CUDA one.

Example:
    >>> import tempfile
    >>> from transformers import AutoModelForCausalLM, AutoTokenizer
    >>> from poslens.testing import save_tiny_model
    >>> folder = save_tiny_model(tempfile.mkdtemp(), "llama")
    >>> model = from_memory(AutoModelForCausalLM.from_pretrained(folder), AutoTokenizer.from_pretrained(folder))
    >>> model.source, model.sliding_windows
    ('memory', [None, None, None])
"""

from __future__ import annotations

import contextlib
import importlib.util
import weakref
from collections.abc import Iterator
from typing import Any

import torch

from poslens.errors import InputError
from poslens.model.config_facts import head_dims, layer_bases, layer_windows, max_context
from poslens.model.in_memory import MEMORY, model_kind, wrap_hooked
from poslens.model.pos_model import ModelNotSupportedError, PosModel
from poslens.model.support import check_no_attention_sinks, check_scores_hookable, check_supported, check_weights_loaded, not_bridgeable
from poslens.model.user_model import ModelUse
from poslens.model.variants import Variant, parse_variant


def _only_window(variant: Variant, what: str) -> None:
    if variant.ntk_alpha is not None or variant.rope_base is not None:
        raise InputError(
            f"variant {variant}: ntk: and rope-base: rewrite a model's RoPE frequencies before it is built, and {what} is "
            "already built; save it (save_pretrained) and load the folder with variant=..., or use window:W alone, "
            "which works on a model in memory"
        )


def from_memory(model: Any, tokenizer: Any = None, variant: str | Variant | None = None, name: str | None = None) -> PosModel:
    """Wrap a model object the researcher already holds, without saving it to disk.

    Args:
        model: a transformers ``PreTrainedModel`` (then ``tokenizer`` is needed),
            a TransformerLens ``TransformerBridge`` or a TransformerLens 3.x
            ``HookedTransformer`` (SAELens's ``HookedSAETransformer`` too).
        tokenizer: the model's tokenizer; a bridge's or HookedTransformer's own is used when omitted.
        variant: ``window:W`` only (see the module docstring); ``None`` for the model as it is.
        name: the name results carry (default: the model's own name or class).

    Returns:
        A :class:`~poslens.model.pos_model.PosModel` holding ``model`` itself.

    Raises:
        InputError: no tokenizer, or a variant that needs a rebuilt model.
        ModelNotSupportedError: a model poslens cannot read correctly, with the reason.

    Example:
        >>> import tempfile, poslens
        >>> from transformers import AutoModelForCausalLM, AutoTokenizer
        >>> from poslens.testing import save_tiny_model
        >>> folder = save_tiny_model(tempfile.mkdtemp(), "llama")
        >>> hf, tok = AutoModelForCausalLM.from_pretrained(folder), AutoTokenizer.from_pretrained(folder)
        >>> model = from_memory(hf, tok, name="my-llama")
        >>> model.hf_model is hf, model.source, model.n_layers
        (True, 'memory', 3)
    """
    parsed = parse_variant(variant)
    kind = model_kind(model)
    if kind == "pos":
        return model
    if kind == "hooked":
        _only_window(parsed, "a HookedTransformer")
        return wrap_hooked(model, tokenizer, parsed, name)
    if kind == "bridge":
        _only_window(parsed, "a TransformerBridge")
        hf = getattr(model, "original_model", None)
        tok = tokenizer if tokenizer is not None else getattr(model, "tokenizer", None)
        if hf is None:
            raise ModelNotSupportedError("this TransformerBridge holds no original_model (the transformers model it wraps)")
        if tok is None:
            raise InputError("this TransformerBridge has no tokenizer: pass tokenizer= (the model's own)")
        use = ModelUse(roots=[("", model), ("original_model.", hf)], runner=model)  # the user's own bridge: used as it is
        return wrap_hf_model(hf, tok, name or _hf_name(hf), MEMORY, None, None, parsed, bridge=model, use=use)
    if kind == "hf":
        _only_window(parsed, "a transformers model in memory")
        if tokenizer is None:
            raise InputError(
                "a transformers model needs its tokenizer: pass tokenizer= (for example AutoTokenizer.from_pretrained of the model's folder)"
            )
        # a second wrap of one module reuses its bridge, unless the user replaced some of its modules since
        use = _BRIDGES.get(model)
        use = use if use is not None and use.fits() else None
        return wrap_hf_model(model, tokenizer, name or _hf_name(model), MEMORY, None, None, parsed, use=use)
    raise InputError(
        f"poslens cannot read a {type(model).__name__}: give a registry name, a model folder, a transformers "
        "PreTrainedModel with tokenizer=, a TransformerLens TransformerBridge or a HookedTransformer"
    )


_BRIDGES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # transformers model -> the use of the bridge poslens booted around it


def _hf_name(hf: Any) -> str:
    return str(getattr(hf.config, "_name_or_path", "") or type(hf).__name__) + " (in memory)"


@contextlib.contextmanager
def _no_install_while_booting() -> Iterator[None]:
    """Keep TransformerLens from installing packages while it boots a bridge.

    TransformerLens 4.3 loads a multimodal model's processor as it boots, and where that fails (a model
    folder without processor files, as poslens's image-text test models are) it runs ``pip install
    torchvision``, which pulls a CUDA build of torch into the environment at run time (minutes, gigabytes,
    and a changed torch). poslens measures text only: here the processor is retried only if torchvision is
    already importable, and nothing is installed.
    """
    try:
        from transformer_lens.model_bridge.sources.transformers import helpers
    except ImportError:  # another TransformerLens layout: nothing to guard
        helpers = None
    if not hasattr(helpers, "_ensure_torchvision"):
        yield
        return
    original, helpers._ensure_torchvision = helpers._ensure_torchvision, _torchvision_importable
    try:
        yield
    finally:
        helpers._ensure_torchvision = original


def _torchvision_importable() -> bool:
    try:
        return importlib.util.find_spec("torchvision") is not None
    except (ImportError, ValueError):  # ValueError: a None entry in sys.modules
        return False


def wrap_hf_model(
    hf: Any,
    tokenizer: Any,
    name: str,
    source: str,
    sha: str | None,
    quantized: str | None,
    variant: Variant,
    dtype: torch.dtype | None = None,
    rotary_dim: int | None = None,
    bridge: Any = None,
    use: ModelUse | None = None,
) -> PosModel:
    """A :class:`PosModel` around a loaded transformers causal LM (the module itself, not a copy).

    ``bridge`` is a TransformerLens bridge already wrapping ``hf`` (used as it
    is), and ``use`` how poslens runs it (:class:`~poslens.model.user_model.ModelUse`:
    a bridge booted earlier around ``hf``, or the user's own). Without either, a
    bridge is booted around ``hf``; a model from memory (``source="memory"``) is
    then given back as it was (its modules, and each module's training mode), the
    bridge installed only while it runs, and a model poslens loaded keeps it. The checks of a model
    loaded from a folder apply: RoPE, causal attention, no attention sinks, a
    bridge whose ``hook_attn_scores`` holds the pre-softmax scores.

    Args:
        hf: the transformers model.
        tokenizer: its tokenizer.
        name: the name results carry.
        source: where it came from (a path, ``hf-cache:<id>`` or ``"memory"``).
        sha: the source file's sha256, if any.
        quantized: the quantization of the source weights, if any.
        variant: the inference-time variant (its RoPE part already written into the config).
        dtype: the weights' dtype (default: ``hf``'s).
        rotary_dim: the rotated dimensions per head (default: computed from the config).
        bridge: an existing bridge around ``hf``.
        use: how poslens runs ``hf`` (with ``bridge`` or the bridge it holds).

    Returns:
        The model.

    Raises:
        ModelNotSupportedError: a model poslens cannot read correctly, with the reason.

    Example:
        >>> import tempfile
        >>> from transformers import AutoModelForCausalLM, AutoTokenizer
        >>> from poslens.testing import save_tiny_model
        >>> folder = save_tiny_model(tempfile.mkdtemp(), "llama")
        >>> hf = AutoModelForCausalLM.from_pretrained(folder)
        >>> wrap_hf_model(hf, AutoTokenizer.from_pretrained(folder), "mine", "memory", None, None, Variant()).hf_model is hf
        True
    """
    from transformer_lens.model_bridge import TransformerBridge

    config = hf.config
    check_supported(config, name)
    text_config = config.get_text_config() if hasattr(config, "get_text_config") else config
    n_heads = text_config.num_attention_heads
    d_head, own_rotary_dim = head_dims(text_config)
    rotary_dim = own_rotary_dim if rotary_dim is None else rotary_dim
    dtype = dtype or next(hf.parameters()).dtype
    check_no_attention_sinks(hf, name, text_config.model_type)
    check_weights_loaded(hf, name)
    declared_bos = tokenizer.bos_token
    if use is not None:
        bridge = use.runner
    if bridge is None:
        modes, snapshot = {module: module.training for module in hf.modules()}, ModelUse.before_boot(hf)
        try:
            with _no_install_while_booting():
                bridge = TransformerBridge.boot_transformers(name, hf_model=hf, tokenizer=tokenizer, dtype=dtype)
        except (ValueError, NotImplementedError, KeyError) as error:
            ModelUse.after_boot(hf, None, snapshot)  # a boot that failed half-way leaves the model as it was, too
            raise not_bridgeable(config, name, error) from error
        finally:
            for module, mode in modes.items():
                module.training = mode
        if source == MEMORY:  # the user's model: its modules given back at once, the bridge installed only while it runs
            use = _BRIDGES[hf] = ModelUse.after_boot(hf, bridge, snapshot)
        else:  # poslens's own model, loaded from files: it keeps the bridge
            use = ModelUse(roots=[("", hf)], runner=bridge)
    check_scores_hookable(bridge, text_config.num_hidden_layers, name, text_config.model_type)
    if declared_bos is None and tokenizer.bos_token is not None:
        # TransformerLens fills a missing BOS with EOS; poslens must not silently put EOS at position 0.
        tokenizer.bos_token = None
    n_layers = text_config.num_hidden_layers
    sliding_windows = layer_windows(text_config, n_layers)
    if variant.sliding_window is not None:
        sliding_windows = [variant.sliding_window if w is None else min(w, variant.sliding_window) for w in sliding_windows]
    bos_id = tokenizer.bos_token_id
    probe = tokenizer("a").input_ids
    return PosModel(
        bridge=bridge,
        hf_model=hf,
        tokenizer=tokenizer,
        name=name,
        source=source,
        source_sha256=sha,
        architecture=text_config.model_type,
        n_layers=n_layers,
        n_heads=n_heads,
        n_kv_heads=getattr(text_config, "num_key_value_heads", None) or n_heads,
        d_head=d_head,
        rotary_dim=rotary_dim,
        rope_base=layer_bases(text_config, n_layers),
        sliding_windows=sliding_windows,
        max_context=max_context(text_config),
        bos_token_id=bos_id,
        bos_token=tokenizer.bos_token,
        tokenizer_prepends_bos=bool(bos_id is not None and probe and probe[0] == bos_id),
        quantized=quantized,
        variant=variant,
        use=use,
    )
