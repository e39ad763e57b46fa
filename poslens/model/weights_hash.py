"""The hash of weights held in memory: a model measured from memory, and the SAEs attached to it.

:func:`state_dict_sha256` digests every distinct tensor of a module (dtype, shape and bytes), so that
two states of the weights never share a hash; :func:`weights_record` is what a result's provenance
holds for a model measured from memory: that hash taken at measurement time, or, above
:data:`MAX_HASHED_BYTES`, no hash and the reason. Hashing reads every weight once: 0.54 s for a
smollm2-135m-sized float32 model (651 MB), under 0.001 s for poslens.testing's tiny models, on this
project's 2-core machine (docs/tutorials/your_model.md, "What a result records"). A module hashed before
is checked against a position-weighted checksum of its weights instead (:func:`weights_checksum`, about a
quarter of the time) and hashed again only when that changed, so that a notebook's repeated ``measure``
calls on one model do not each read it through sha256.
"""

from __future__ import annotations

import hashlib
import weakref
from typing import Any

import numpy as np
import torch

from poslens.compiled import compiled_loops, fused_available

#: Weights larger than this (bytes) are not hashed at each measurement: reading them all would cost
#: tens of seconds per ``measure`` call on a CPU. 8 GB: a 2B-parameter float32 model, or 4B in bf16.
MAX_HASHED_BYTES = 8 * 10**9

#: 64-bit words per checksum of :func:`weights_checksum`: the checksums take 1/64 of the weights' memory.
CHECKSUM_WORDS = 64

# each module's last checksums and the sha256 they were taken with; weak, so that a dropped model goes with them
_LAST_HASH: weakref.WeakKeyDictionary[torch.nn.Module, tuple[list[tuple[Any, ...]], str]] = weakref.WeakKeyDictionary()


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
    return _bytes_of(_distinct_tensors(module))


def _bytes_of(tensors: list[torch.Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def state_dict_sha256(module: torch.nn.Module) -> str:
    """sha256 of a module's weights as they are now: the sorted digests of its distinct tensors (dtype, shape and bytes).

    The tensors are those of the state dict and every buffer, saved or not (a rotary
    module's ``inv_freq``: an edit of it in memory changes the forward, so the hash).
    Each tensor counts once however many names it has (tied
    weights, the aliases and wrappers a TransformerBridge adds), and names do
    not count, so a model hashes alike before and after a bridge wraps it.
    Used as the provenance of a model measured from memory, taken when it is measured,
    and of each SAE attached to it. A module hashed before is read through sha256 again only when
    its :func:`weights_checksum` changed; otherwise its last hash is returned.

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
    return _sha256_of(module, _distinct_tensors(module))


def _sha256_of(module: torch.nn.Module, tensors: list[torch.Tensor]) -> str:
    """:func:`state_dict_sha256` of ``module``, whose distinct tensors ``tensors`` are."""
    checksums = [weights_checksum(tensor) for tensor in tensors]
    last = _LAST_HASH.get(module)
    if last is not None and _same_checksums(last[0], checksums):
        return last[1]
    digests = []
    for tensor in tensors:
        data = tensor.detach().to("cpu").contiguous()
        one = hashlib.sha256(f"{data.dtype}|{tuple(data.shape)}|".encode())
        one.update(data.reshape(-1).view(torch.uint8).numpy().tobytes() if data.numel() else b"")
        digests.append(one.hexdigest())
    digest = hashlib.sha256("".join(sorted(digests)).encode()).hexdigest()
    _LAST_HASH[module] = (checksums, digest)
    return digest


def weights_checksum(tensor: torch.Tensor) -> tuple[Any, ...]:
    """A tensor's dtype, shape and bytes summarized for :func:`state_dict_sha256` to tell whether they changed since its last hash.

    The bytes are read as 64-bit words, and each run of :data:`CHECKSUM_WORDS` words gives
    Σ_k (2k + 1)·w_k modulo 2⁶⁴ (the bytes after the last whole run are kept as they are). The weights are
    odd, so changing any one word changes its run's checksum, and so does swapping two unequal words of a
    run unless their difference is a multiple of 2⁵⁷; a change across runs moves each run's own checksum.
    What it cannot see is an edit made to cancel out, such as +δ and −δ/3 on words 0 and 1 of one run: none
    of the edits ``load_state_dict``, an in-place operation or ``.data`` make by accident. It reads the
    weights once, at about four times sha256's speed on a CPU, and takes 1/64 of their memory.

    Args:
        tensor: Any tensor (moved nowhere: the checksums are taken on its device).

    Returns:
        ``(dtype, shape, checksums, tail bytes)``; compare two with :func:`_same_checksums`.

    Example:
        >>> weights = torch.zeros(4, 64)
        >>> before = weights_checksum(weights)
        >>> _same_checksums([before], [weights_checksum(weights.clone())])
        True
        >>> weights.data[:, [0, 1]] = torch.tensor([1.0, 2.0])        # an edit through .data
        >>> changed = weights_checksum(weights)
        >>> weights.data[:, [0, 1]] = torch.tensor([2.0, 1.0])        # two values swapped
        >>> _same_checksums([before], [changed]), _same_checksums([changed], [weights_checksum(weights)])
        (False, False)
    """
    data = tensor.detach().reshape(-1).contiguous().view(torch.uint8)
    whole = data.numel() - data.numel() % (8 * CHECKSUM_WORDS)
    body = data[:whole]
    if body.storage_offset() % 8:  # a view into a shared storage that does not start on a word
        body = body.clone()
    words = body.view(torch.int64).view(-1, CHECKSUM_WORDS)
    if words.device.type == "cpu" and fused_available():  # the compiled loop: about twice torch's speed
        sums = torch.empty(words.shape[0], dtype=torch.int64)
        compiled_loops(1).run_checksums(words.numpy().view(np.uint64), sums.numpy().view(np.uint64))
        return (tensor.dtype, tuple(tensor.shape), sums, data[whole:].clone())
    odd = 2 * torch.arange(CHECKSUM_WORDS, dtype=torch.int64, device=words.device) + 1
    # integer arithmetic wraps modulo 2⁶⁴ and does not depend on the order of summation
    sums = torch.mv(words, odd) if words.device.type == "cpu" else (words * odd).sum(-1)
    return (tensor.dtype, tuple(tensor.shape), sums, data[whole:].clone())


def _same_checksums(before: list[tuple[Any, ...]], now: list[tuple[Any, ...]]) -> bool:
    """Whether two lists of :func:`weights_checksum` are equal, tensor by tensor (see its example)."""
    return len(before) == len(now) and all(
        a[:2] == b[:2] and a[2].device == b[2].device and torch.equal(a[2], b[2]) and torch.equal(a[3], b[3])
        for a, b in zip(before, now, strict=True)
    )


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
    tensors = _distinct_tensors(module)  # once: walking a bridge's modules takes a tenth of the hash
    size = _bytes_of(tensors)
    max_bytes = MAX_HASHED_BYTES if max_bytes is None else max_bytes
    record: dict[str, Any] = {"state_dict_sha256_at": "measurement", "weights_bytes": size}
    if size > max_bytes:
        return {
            **record,
            "source_sha256": None,
            "source_sha256_skipped": f"the weights ({_size(size)}) are above the {_size(max_bytes)} poslens hashes at each measurement",
        }
    return {**record, "source_sha256": _sha256_of(module, tensors)}


def _size(n: int) -> str:
    return f"{n / 1e9:.1f} GB" if n >= 10**9 else f"{n} bytes"
