"""The hash of weights held in memory: a model measured from memory, and the SAEs attached to it.

:func:`state_dict_sha256` digests every distinct tensor of a module (dtype, shape and bytes), so that
two states of the weights never share a hash; :func:`weights_record` is what a result's provenance
holds for a model measured from memory: that hash taken at measurement time, or, above
:data:`MAX_HASHED_BYTES`, no hash and the reason. Hashing reads every weight once: 0.54 s for a
smollm2-135m-sized float32 model (651 MB), under 0.001 s for poslens.testing's tiny models, on this
project's 2-core machine (docs/tutorials/your_model.md, "What a result records").
"""

from __future__ import annotations

import hashlib
from typing import Any

import torch

#: Weights larger than this (bytes) are not hashed at each measurement: reading them all would cost
#: tens of seconds per ``measure`` call on a CPU. 8 GB: a 2B-parameter float32 model, or 4B in bf16.
MAX_HASHED_BYTES = 8 * 10**9


def _distinct_tensors(module: torch.nn.Module) -> list[torch.Tensor]:
    """The module's state-dict tensors and every buffer, each once however many names it has (tied weights, a bridge's aliases).

    Buffers that are not saved (non-persistent, such as a rotary module's ``inv_freq``) count too: the forward
    reads them, so an edit of one in memory changes the hash.
    """
    seen, tensors = set(), []
    for tensor in [*module.state_dict().values(), *module.buffers()]:
        if not isinstance(tensor, torch.Tensor):
            continue
        key = (tensor.data_ptr(), tuple(tensor.shape), tensor.dtype, tuple(tensor.stride()))
        if key not in seen:
            seen.add(key)
            tensors.append(tensor)
    return tensors


def weights_bytes(module: torch.nn.Module) -> int:
    """Bytes of a module's distinct state-dict tensors.

    Args:
        module: a torch module.

    Returns:
        The size in bytes.

    Example:
        >>> weights_bytes(torch.nn.Linear(2, 3))   # 6 weights and 3 biases, float32
        36
    """
    return sum(t.numel() * t.element_size() for t in _distinct_tensors(module))


def state_dict_sha256(module: torch.nn.Module) -> str:
    """sha256 of a module's weights as they are now: the sorted digests of its distinct tensors (dtype, shape and bytes).

    The tensors are those of the state dict and every buffer, saved or not (a rotary
    module's ``inv_freq``: an edit of it in memory changes the forward, so the hash).
    Each tensor counts once however many names it has (tied
    weights, the aliases and wrappers a TransformerBridge adds), and names do
    not count, so a model hashes alike before and after a bridge wraps it.
    Used as the provenance of a model measured from memory, taken when it is measured,
    and of each SAE attached to it.

    Args:
        module: a torch module.

    Returns:
        64 hex digits.

    Example:
        >>> layer = torch.nn.Linear(2, 2)
        >>> before = state_dict_sha256(layer)
        >>> with torch.no_grad():
        ...     layer.weight[0, 0] += 1.0
        >>> before == state_dict_sha256(layer)
        False
    """
    digests = []
    for tensor in _distinct_tensors(module):
        data = tensor.detach().to("cpu").contiguous()
        one = hashlib.sha256(f"{data.dtype}|{tuple(data.shape)}|".encode())
        one.update(data.reshape(-1).view(torch.uint8).numpy().tobytes() if data.numel() else b"")
        digests.append(one.hexdigest())
    return hashlib.sha256("".join(sorted(digests)).encode()).hexdigest()


def weights_record(module: torch.nn.Module, max_bytes: int | None = None) -> dict[str, Any]:
    """What a result records of in-memory weights at measurement time: their sha256, or why there is none.

    Args:
        module: the model (the very module measured).
        max_bytes: weights above this size are not hashed (``None``: :data:`MAX_HASHED_BYTES`, read at the call).

    Returns:
        ``source_sha256`` (64 hex digits, or ``None`` above ``max_bytes``), ``state_dict_sha256_at``
        (``"measurement"``), ``weights_bytes``, and ``source_sha256_skipped`` (the reason) when not hashed.

    Example:
        >>> record = weights_record(torch.nn.Linear(2, 3))
        >>> len(record["source_sha256"]), record["weights_bytes"], "source_sha256_skipped" in record
        (64, 36, False)
        >>> weights_record(torch.nn.Linear(2, 3), max_bytes=10)["source_sha256_skipped"]
        'the weights (36 bytes) are above the 10 bytes poslens hashes at each measurement'
    """
    size = weights_bytes(module)
    max_bytes = MAX_HASHED_BYTES if max_bytes is None else max_bytes
    record: dict[str, Any] = {"state_dict_sha256_at": "measurement", "weights_bytes": size}
    if size > max_bytes:
        return {
            **record,
            "source_sha256": None,
            "source_sha256_skipped": f"the weights ({_size(size)}) are above the {_size(max_bytes)} poslens hashes at each measurement",
        }
    return {**record, "source_sha256": state_dict_sha256(module)}


def _size(n: int) -> str:
    return f"{n / 1e9:.1f} GB" if n >= 10**9 else f"{n} bytes"
