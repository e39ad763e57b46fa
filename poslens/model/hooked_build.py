"""A TransformerLens 3.x ``HookedTransformer`` from a Hugging Face model you hold in memory or in a local folder, offline.

TransformerLens 3.9's ``HookedTransformer.from_pretrained`` takes only the model
names it knows and refuses a local folder, so a researcher offline, or with a
fine-tuned model of their own, has no route to a ``HookedTransformer`` (the one
SAELens's ``HookedSAETransformer`` builds on). :func:`hooked_transformer` is that
route. It asks TransformerLens itself for everything model-specific: the config
comes from TransformerLens's own conversion of the Hugging Face config
(``convert_hf_model_config``, given the config in a temporary folder, so nothing
is fetched) and the weights from its own converter for the architecture
(``convert_llama_weights``, ``convert_qwen2_weights``, ``convert_mistral_weights``). The weights are loaded as
they are, in the model's dtype, with no weight processing (no folded norms, no
centred weights: ``from_pretrained_no_processing``'s model), so the attention
scores are the Hugging Face model's.

Families, and why the others are refused (the refusal names the family):

- **Llama** (``LlamaForCausalLM``, SmolLM among them), **Qwen2** (``Qwen2ForCausalLM``) and
  **Mistral** (``MistralForCausalLM``) without a sliding window: built.
- **Mistral with a sliding window**: TransformerLens builds it with its local attention,
  which poslens does not measure; measure the Hugging Face model itself.
- **Gemma** (1, 2 and 3): TransformerLens 3.9 builds a Gemma config only from its own
  model names (``google/gemma-2b``, ...), not from a config, so a local or fine-tuned
  Gemma has no route there.
- Scaled RoPE (``rope_scaling`` of any type but ``default``), attention or MLP biases in a
  Llama or Mistral (their converters drop them), and any other architecture: refused.

The figures poslens measures on the built model equal those of the Hugging Face
model to 1e-6 in float32 (``tests/unit/model/test_hooked_build.py``).
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from poslens.errors import InputError
from poslens.model.pos_model import ModelNotSupportedError

__all__ = ["BUILT_ARCHITECTURES", "check_transformer_lens_3", "hooked_transformer"]

BUILT_ARCHITECTURES = {"LlamaForCausalLM": "Llama", "Qwen2ForCausalLM": "Qwen2", "MistralForCausalLM": "Mistral"}
"""The Hugging Face architectures :func:`hooked_transformer` builds, with their family names."""

_CONVERTERS = {
    "LlamaForCausalLM": "convert_llama_weights",
    "Qwen2ForCausalLM": "convert_qwen2_weights",
    "MistralForCausalLM": "convert_mistral_weights",
}
_GEMMA = {"GemmaForCausalLM": "Gemma (1)", "Gemma2ForCausalLM": "Gemma 2", "Gemma3ForCausalLM": "Gemma 3"}


def hooked_transformer(model: Any, tokenizer: Any = None, cls: Any = None) -> Any:
    """A TransformerLens 3.x ``HookedTransformer`` with the weights of a Hugging Face model in memory or a local folder.

    Nothing is fetched: the config is TransformerLens's own conversion of the model's config, the weights
    its own converter's, in the model's dtype and without weight processing (see the module's notes for
    the families built and why the others are refused). Pass ``cls=HookedSAETransformer`` (SAELens) to
    attach SAEs. ``poslens.load_model(hooked)`` then measures it; its figures equal those of
    ``poslens.load_model(model, tokenizer=tokenizer)`` to 1e-6 in float32.

    Args:
        model: A transformers causal LM (``LlamaForCausalLM``, ``Qwen2ForCausalLM``, ``MistralForCausalLM``), or the
            path of a local folder holding one (loaded in float32 with ``local_files_only``).
        tokenizer: Its tokenizer; default: the folder's, when ``model`` is a folder.
        cls: The class to build: ``HookedTransformer`` (the default) or a subclass such as SAELens's
            ``HookedSAETransformer``.

    Returns:
        The model, in eval mode, on the Hugging Face model's device.

    Raises:
        ModelNotSupportedError: TransformerLens 3.x is not installed (checked first, from the installed package's
            version, before any model is loaded: on 4.x the message names the routes that work there), or the family
            is not built (the message names the family and why).
        InputError: No tokenizer, or ``model`` is neither a transformers model nor a folder.

    Example:
        >>> import tempfile
        >>> from poslens.testing import save_tiny_model
        >>> import importlib.metadata
        >>> folder = save_tiny_model(tempfile.mkdtemp(), "gemma")
        >>> try:
        ...     hooked_transformer(folder)
        ... except ModelNotSupportedError as error:
        ...     said = str(error)
        >>> tl3 = importlib.metadata.version("transformer_lens").startswith("3.")
        >>> ("GemmaForCausalLM is Gemma (1)" if tl3 else "4.0 removed HookedTransformer") in said   # 3.x: the family; 4.x: at once
        True
        >>> hooked = hooked_transformer(save_tiny_model(tempfile.mkdtemp(), "llama"))  # doctest: +SKIP
        >>> hooked.cfg.positional_embedding_type, poslens.load_model(hooked).kind  # doctest: +SKIP
        ('rotary', 'hooked')
    """
    check_transformer_lens_3()
    hf, tokenizer = _hf_model(model, tokenizer)
    architecture = _architecture(hf)
    _check_family(architecture, hf.config)
    try:
        from transformer_lens import HookedTransformer, HookedTransformerConfig
        from transformer_lens.loading_from_pretrained import convert_hf_model_config
        from transformer_lens.pretrained import weight_conversions
    except ImportError as error:
        raise ModelNotSupportedError(
            f"building a HookedTransformer needs TransformerLens 3.x (pip install 'transformer-lens>=3,<4'); it failed: {error}"
        ) from error
    parameter = next(hf.parameters())
    with tempfile.TemporaryDirectory(prefix="poslens-hf-config-") as folder:
        # TransformerLens reads a local config only from a folder; its name must not suggest a family it recognises by name
        config_dir = Path(folder) / "config"
        config_dir.mkdir()
        (config_dir / "config.json").write_text(hf.config.to_json_string(), encoding="utf-8")
        cfg_dict = convert_hf_model_config(str(config_dir))
    head_dim = getattr(hf.config, "head_dim", None)
    if head_dim and architecture != "MistralForCausalLM":  # Mistral's conversion reads head_dim; the others assume hidden / heads
        cfg_dict["d_head"] = cfg_dict["rotary_dim"] = int(head_dim)
    if architecture == "Qwen2ForCausalLM":  # TransformerLens's Qwen2 config rounds θ to an int; from_pretrained restores it
        cfg_dict["rotary_base"] = float((getattr(hf.config, "rope_parameters", None) or {}).get("rope_theta", cfg_dict["rotary_base"]))
    cfg_dict.update(
        model_name=_model_name(hf, architecture),
        tokenizer_name=None,
        original_architecture=architecture,
        dtype=parameter.dtype,
        device=str(parameter.device),
        init_weights=False,
        n_ctx=int(hf.config.max_position_embeddings),
    )
    cfg_dict.setdefault("default_prepend_bos", True)
    cfg = HookedTransformerConfig.from_dict(cfg_dict)
    built = (cls or HookedTransformer)(cfg, tokenizer=tokenizer)
    convert = getattr(weight_conversions, _CONVERTERS[architecture])
    state = convert(hf, cfg)
    missing, unexpected = built.load_state_dict(state, strict=False)
    buffers = ("IGNORE", "mask", "rotary_sin", "rotary_cos")
    if unexpected or not all(key.endswith(buffers) for key in missing):
        raise ModelNotSupportedError(
            f"TransformerLens's conversion of this {BUILT_ARCHITECTURES[architecture]} model left weights unmatched "
            f"(missing {sorted(k for k in missing if not k.endswith(buffers))}, unexpected {sorted(unexpected)}); "
            "measure the Hugging Face model itself (poslens.load_model(model, tokenizer=...))"
        )
    return built.eval()


def check_transformer_lens_3(version: str | None = None) -> None:
    """Refuse, before anything is loaded, a TransformerLens other than 3.x: 4.0 removed ``HookedTransformer``.

    Reads the installed package's version from its metadata (nothing is imported), so that
    :func:`hooked_transformer` on a default install (TransformerLens 4.x) stops at once, not after loading
    the whole model, and says which routes work there.

    Args:
        version: The TransformerLens version to check (default: the installed one's).

    Raises:
        ModelNotSupportedError: The version is 4.0 or later; the message names the routes that measure the model on
            4.x (``poslens.load_model`` of the folder, of the transformers model, or of a ``TransformerBridge``) and
            how to install 3.x for a ``HookedTransformer``.

    Example:
        >>> check_transformer_lens_3("3.9.0")
        >>> check_transformer_lens_3("4.3.0")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        poslens.model.pos_model.ModelNotSupportedError: hooked_transformer() builds a TransformerLens 3.x HookedTransformer; ...
    """
    if version is None:
        import importlib.metadata

        try:
            version = importlib.metadata.version("transformer_lens")
        except importlib.metadata.PackageNotFoundError:
            return  # not installed at all: the import below says so
    major = version.split(".")[0]
    if major.isdigit() and int(major) >= 4:
        raise ModelNotSupportedError(
            f"hooked_transformer() builds a TransformerLens 3.x HookedTransformer; TransformerLens {version} is installed, and 4.0 "
            "removed HookedTransformer. On 4.x measure the model itself: poslens.load_model(folder), or "
            "poslens.load_model(model, tokenizer=...) for a transformers model in memory, or poslens.load_model(bridge) for a "
            "TransformerBridge (TransformerBridge.boot_transformers(...)); for a HookedTransformer (SAELens's HookedSAETransformer), "
            "install TransformerLens 3.x: pip install 'transformer-lens>=3.9,<4'"
        )


def _hf_model(model: Any, tokenizer: Any) -> tuple[Any, Any]:
    """The transformers model and its tokenizer: ``model`` itself, or loaded from the folder it names."""
    if isinstance(model, str | Path):
        folder = Path(model)
        if not (folder / "config.json").is_file():
            raise InputError(f"{folder} is not a local model folder (no config.json): pass a transformers model or a folder that holds one")
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        hf = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, local_files_only=True).eval()
        return hf, tokenizer if tokenizer is not None else AutoTokenizer.from_pretrained(folder, local_files_only=True)
    if not hasattr(model, "config") or not hasattr(model, "parameters"):
        raise InputError(f"hooked_transformer() takes a transformers causal LM or a local folder, not {type(model).__name__}")
    if tokenizer is None:
        raise InputError("hooked_transformer() needs the model's tokenizer: pass tokenizer= (AutoTokenizer.from_pretrained(...))")
    return model, tokenizer


def _model_name(hf: Any, architecture: str) -> str:
    """The name the built model carries: the folder's name for a model loaded from a local folder (not its path), else
    the name it was loaded by, else its architecture."""
    name = str(getattr(hf.config, "_name_or_path", "") or "")
    if name and Path(name).is_dir():
        return Path(name).resolve().name
    return name or architecture


def _architecture(hf: Any) -> str:
    """The model's architecture name: its class's, else its config's first."""
    name = type(hf).__name__
    if name.endswith("ForCausalLM"):
        return name
    return str((getattr(hf.config, "architectures", None) or [name])[0])


def _check_family(architecture: str, config: Any) -> None:
    """Refuse what :func:`hooked_transformer` does not build, naming the family and why."""
    if architecture in _GEMMA:
        raise ModelNotSupportedError(
            f"{architecture} is {_GEMMA[architecture]}: TransformerLens 3.9 builds a Gemma config only from its own model names "
            "(google/gemma-2b, google/gemma-2-2b, google/gemma-3-270m, ...), not from a model's config, so a local or fine-tuned "
            "Gemma has no HookedTransformer route; measure the Hugging Face model itself (poslens.load_model(model, tokenizer=...))"
        )
    if architecture not in BUILT_ARCHITECTURES:
        built = ", ".join(f"{family} ({name})" for name, family in BUILT_ARCHITECTURES.items())
        raise ModelNotSupportedError(
            f"{architecture}: hooked_transformer() builds {built}; measure this model with poslens.load_model(model, tokenizer=...)"
        )
    family = BUILT_ARCHITECTURES[architecture]
    rope = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None) or {}
    rope_type = rope.get("rope_type", rope.get("type", "default")) if isinstance(rope, dict) else "default"
    if rope_type not in (None, "default"):
        raise ModelNotSupportedError(
            f"this {family} model scales its RoPE ({rope_type!r}); poslens reads a HookedTransformer's rotary tables as plain "
            "RoPE, so measure the Hugging Face model itself (poslens.load_model(model, tokenizer=...))"
        )
    if architecture == "MistralForCausalLM" and getattr(config, "sliding_window", None):
        raise ModelNotSupportedError(
            f"this Mistral model has a sliding window ({config.sliding_window}): TransformerLens builds it with its local "
            "attention, which poslens does not measure; measure the Hugging Face model itself (poslens.load_model(model, tokenizer=...))"
        )
    if architecture == "Qwen2ForCausalLM" and getattr(config, "use_sliding_window", False):
        raise ModelNotSupportedError(
            "this Qwen2 model uses a sliding window, which TransformerLens's Qwen2 config leaves out; "
            "measure the Hugging Face model itself (poslens.load_model(model, tokenizer=...))"
        )
    biased = [name for name in ("attention_bias", "mlp_bias") if getattr(config, name, False)]
    if biased and architecture != "Qwen2ForCausalLM":
        raise ModelNotSupportedError(
            f"this {family} model has {' and '.join(biased)}: TransformerLens's {family} conversion drops biases; "
            "measure the Hugging Face model itself (poslens.load_model(model, tokenizer=...))"
        )
