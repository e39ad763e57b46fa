"""What the machine has: free memory, this process's resident memory, and what it holds besides the weights.

Free and resident memory come from psutil (:func:`free_memory_bytes`,
:func:`resident_bytes`); the free memory on CPU is also bounded by the room
left under the process's cgroup memory limit (:func:`cgroup_room_bytes`), as
in a container. :func:`runtime_bytes` is the resident memory besides the
weights, which a budget for the whole process must also hold, and
:func:`release_free_heap` hands the C heap's free pages back after a run.

Example:
    >>> free_memory_bytes("cpu") > 0 and resident_bytes() > 0
    True
"""

from __future__ import annotations

import ctypes
import gc
from pathlib import Path

import psutil
import torch

from poslens.errors import InputError
from poslens.model.pos_model import PosModel
from poslens.runtime.estimate import model_device, model_tensors, weight_bytes

#: Where the cgroup file systems are mounted (Linux); :func:`cgroup_room_bytes` reads its limits here.
CGROUP_ROOT = Path("/sys/fs/cgroup")


def resident_bytes() -> int:
    """This process's resident memory now (RSS, read through psutil), in bytes.

    Returns:
        The resident set size in bytes.

    Example:
        >>> resident_bytes() > 0
        True
    """
    return int(psutil.Process().memory_info().rss)


def release_free_heap() -> bool:
    """Hand the C heap's free pages back to the system (glibc ``malloc_trim(0)``).

    glibc keeps memory freed by blocks below its adaptive mmap threshold in
    its arenas. After a measurement that is the hooks' and the fits' freed
    arrays, about 100 MB for SmolLM2-135M at T = 1024, and it fragments the
    heap for the next forward pass, whose peak then rises by as much.
    :func:`poslens.measurement.pipeline.collect_sums` and
    :func:`poslens.measure` call this when they finish. Returns False where
    the C library has no ``malloc_trim`` (not glibc); nothing changes then.

    Returns:
        Whether ``malloc_trim`` could be called.

    Example:
        >>> release_free_heap() in (True, False)
        True
    """
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
        return True
    except (OSError, AttributeError):
        return False


def _read_int(path: Path) -> int | None:
    """The file's content as an int; None for ``max`` (cgroup v2's "no limit")."""
    text = path.read_text().strip()
    return None if text == "max" else int(text)


def cgroup_room_bytes(root: str | Path | None = None) -> int | None:
    """Bytes left under the cgroup memory limit, or None where there is no limit.

    cgroup v2: ``memory.max`` − ``memory.current`` in ``root`` (default
    :data:`CGROUP_ROOT`); where there is no v2 limit file, cgroup v1:
    ``memory/memory.limit_in_bytes`` − ``memory/memory.usage_in_bytes``.
    None where neither can be read (macOS, Windows, no cgroup), for v2's
    ``max`` and for v1's "no limit" value (about 2**63).

    Args:
        root: The cgroup folder to read; default :data:`CGROUP_ROOT`.

    Returns:
        The bytes left under the limit, or ``None``.

    Example:
        >>> import tempfile, pathlib
        >>> MiB = 1 << 20
        >>> root = pathlib.Path(tempfile.mkdtemp())
        >>> _ = (root / "memory.max").write_text("1073741824\\n")
        >>> _ = (root / "memory.current").write_text("268435456\\n")
        >>> cgroup_room_bytes(root) // MiB   # 1 GiB limit, 256 MiB used
        768
        >>> _ = (root / "memory.max").write_text("max\\n")
        >>> print(cgroup_room_bytes(root))
        None
    """
    root = Path(CGROUP_ROOT if root is None else root)
    for limit_file, usage_file in (
        (root / "memory.max", root / "memory.current"),
        (root / "memory" / "memory.limit_in_bytes", root / "memory" / "memory.usage_in_bytes"),
    ):
        try:
            limit = _read_int(limit_file)
            if limit is None or limit >= 1 << 60:
                return None
            return max(0, limit - _read_int(usage_file))
        except (OSError, ValueError, TypeError):
            continue
    return None


def free_memory_bytes(device: str | torch.device | None = None, *, cgroup_root: str | Path | None = None) -> int:
    """Memory available for new allocations on ``device`` (default CPU), in bytes.

    CPU: psutil's ``virtual_memory().available``, and no more than the room
    left under a cgroup memory limit (:func:`cgroup_room_bytes` of
    ``cgroup_root``). CUDA: the free bytes of ``torch.cuda.mem_get_info``
    plus what PyTorch's caching allocator holds unused.

    Args:
        device: ``"cpu"`` or a CUDA device; default the CPU.
        cgroup_root: The cgroup folder whose limit also bounds the CPU's; default :data:`CGROUP_ROOT`.

    Returns:
        The bytes available.

    Raises:
        InputError: When ``device`` is neither a CPU nor a CUDA device (a ``ValueError``).

    Example:
        >>> free_memory_bytes("cpu") > 0
        True
        >>> import tempfile, pathlib
        >>> MiB = 1 << 20
        >>> root = pathlib.Path(tempfile.mkdtemp())
        >>> _ = (root / "memory.max").write_text(str(512 * MiB)); _ = (root / "memory.current").write_text(str(500 * MiB))
        >>> free_memory_bytes("cpu", cgroup_root=root) // MiB   # a container with 12 MiB left
        12
    """
    device = torch.device(device or "cpu")
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        unused = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
        return int(free + unused)
    if device.type != "cpu":
        raise InputError(f"poslens reads the free memory of cpu and cuda devices, not {device.type}; give a budget (--max-memory)")
    available = int(psutil.virtual_memory().available)
    room = cgroup_room_bytes(cgroup_root)
    return available if room is None else min(available, room)


def _touch_weights(model: PosModel) -> None:
    """Read one element per page of every CPU weight, so that mmapped weights are resident.

    transformers maps safetensors files: until the first forward pass, most
    weight pages are not yet in the resident set.
    """
    with torch.inference_mode():
        for t in model_tensors(model):
            if t.device.type == "cpu" and t.numel():
                flat = t.detach().reshape(-1)
                flat[:: max(1, 4096 // t.element_size())].sum()


def runtime_bytes(model: PosModel, device: str | torch.device | None = None) -> int:
    """Memory this process holds on ``device`` besides the model's weights, in bytes.

    CPU: resident memory (:func:`resident_bytes`), after paging in mmapped
    weights, minus the weight bytes (Python, torch, transformers, tokenizer,
    corpus: about 0.5 GiB with poslens imported). Memory that the C heap keeps
    after a free (dequantizing a GGUF file leaves hundreds of MiB) counts as
    held, so a plan errs on the safe side. CUDA: allocated bytes minus the
    weights on the device.

    Args:
        model: The loaded model.
        device: The device to measure; default the model's.

    Returns:
        The bytes held besides the weights (never below 0).

    Example:
        >>> runtime_bytes(model) > 100 * 2**20  # doctest: +SKIP
        True
    """
    device = torch.device(device or model_device(model))
    weights = weight_bytes(model, device=device)
    if device.type == "cuda":
        return max(0, int(torch.cuda.memory_allocated(device)) - weights)
    _touch_weights(model)
    gc.collect()
    return max(0, resident_bytes() - weights)
