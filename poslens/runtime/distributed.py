"""Data-parallel measurement with torch.distributed: shard the batches, all-reduce the sums.

Under ``torchrun --nproc_per_node=K`` (or any launcher that sets RANK and
WORLD_SIZE) every rank runs the same command; :func:`poslens.measure` gives
rank r the batches r, r + K, r + 2K, … and then all-reduces every cell sum
(gloo on CPU, NCCL on GPU), so every rank holds the sums of the whole corpus
and the fits are identical. Only rank 0 writes files. Outside a launcher
nothing here does anything.
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np
import torch
import torch.distributed as dist

from poslens.errors import PoslensError
from poslens.fit.sums import CellSums, SumFields

T = TypeVar("T")


def init_from_env() -> bool:
    """Join the process group if a launcher started several processes; return whether distributed.

    Returns:
        Whether several processes run (``torchrun``'s environment is set).

    Example:
        >>> init_from_env()  # a plain `python` run
        False
    """
    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size() > 1
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return False
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    if backend == "nccl":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group(backend=backend)
    return True


def rank() -> int:
    """This process's rank (0 outside a launcher); before the process group is joined, the launcher's ``RANK``.

    Returns:
        The rank.

    Example:
        >>> rank()
        0
    """
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank()
    return int(os.environ.get("RANK", "0")) if int(os.environ.get("WORLD_SIZE", "1")) > 1 else 0


def world_size() -> int:
    """Number of processes (1 outside a launcher).

    Returns:
        The number of processes.

    Example:
        >>> world_size()
        1
    """
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def local_world_size() -> int:
    """Number of processes on this machine (torchrun's ``LOCAL_WORLD_SIZE``; 1 outside a launcher): those that share its ``TMPDIR``.

    Returns:
        The number of processes on this node.

    Example:
        >>> local_world_size()
        1
    """
    if world_size() == 1:
        return 1
    return max(1, int(os.environ.get("LOCAL_WORLD_SIZE", world_size())))


def is_main() -> bool:
    """Whether this process writes results (rank 0).

    Returns:
        Whether this process has rank 0.

    Example:
        >>> is_main()
        True
    """
    return rank() == 0


def from_main(value: Any) -> Any:
    """Rank 0's ``value``, on every rank (a picklable object; in a single process, ``value`` itself).

    For a decision only rank 0 can make, such as whether it holds the output
    folder's lock: every rank then acts on the same outcome.

    Args:
        value: This rank's value (only rank 0's is used).

    Returns:
        Rank 0's value.

    Example:
        >>> from_main("rank 0 holds the lock")
        'rank 0 holds the lock'
    """
    if world_size() == 1:
        return value
    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def decided_by_main(decide: Callable[[], T]) -> T:
    """Run ``decide()`` on rank 0 alone and give every rank its outcome: the value it returned, or the error it raised.

    For a decision about shared files (reuse a saved part, or measure it; refuse
    a folder) that every rank must make alike while rank 0 may be writing
    those files: the other ranks never look at them for themselves. Rank 0
    raises its own error; the others raise it too (an error that cannot be sent
    is sent as a :class:`~poslens.errors.PoslensError` with its text). In a
    single process, ``decide()`` itself.

    Args:
        decide: What rank 0 decides; it returns something small and picklable.

    Returns:
        Rank 0's value.

    Raises:
        Exception: The error ``decide()`` raised on rank 0.

    Example:
        >>> decided_by_main(lambda: "measure")
        'measure'
    """
    if world_size() == 1:
        return decide()
    outcome: tuple[str, Any] = ("value", None)
    own: BaseException | None = None
    if is_main():
        try:
            outcome = ("value", decide())
        except Exception as error:
            own = error
            outcome = ("error", error if isinstance(error, PoslensError) else PoslensError(f"rank 0 stopped: {type(error).__name__}: {error}"))
    try:
        outcome = from_main(outcome)
    except (TypeError, AttributeError, pickle.PicklingError):  # an error that does not pickle
        outcome = from_main(("error", PoslensError(f"rank 0 stopped: {outcome[1]}")))
    if own is not None:
        raise own
    if outcome[0] == "error":
        raise outcome[1]
    return outcome[1]


def all_reduce_array(array: np.ndarray) -> np.ndarray:
    """Sum ``array`` over all ranks, in float64 (a copy-free no-op in a single process).

    Args:
        array: This rank's values.

    Returns:
        The float64 sum over all ranks; in a single process, ``array`` itself.

    Example:
        >>> all_reduce_array(np.ones(3)).tolist()
        [1.0, 1.0, 1.0]
    """
    if world_size() == 1:
        return array
    device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else torch.device("cpu")
    tensor = torch.from_numpy(np.ascontiguousarray(array, dtype=np.float64)).to(device)
    dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor.cpu().numpy()


def all_reduce_sums(sums: CellSums) -> CellSums:
    """Sum every array of ``sums`` (each :class:`poslens.fit.sums.SumFields` field and the row sums) over all ranks,
    in float64 (a no-op in a single process).

    Args:
        sums: This rank's sums.

    Returns:
        The sums over all ranks.

    Example:
        >>> from poslens.fit.binning import Binning
        >>> all_reduce_sums(CellSums.zeros(2, 1, 1, Binning(8))).n_groups
        2
    """
    if world_size() == 1:
        return sums
    return CellSums(
        binning=sums.binning,
        per_group=SumFields(**{name: all_reduce_array(array) for name, array in sums.per_group.as_dict().items()}),
        row_features=all_reduce_array(sums.row_features),
        row_count=all_reduce_array(sums.row_count),
        group_sizes=all_reduce_array(sums.group_sizes),
        layer_windows=sums.layer_windows,
    )
