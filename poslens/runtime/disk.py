"""Which route the per-sequence counterfactual takes: the row-bin store on temporary disk, or a second forward pass.

The per-sequence counterfactual of methodology §4.4 (i) needs, for every
sequence, each row's maximum and its sums of exp(s) per offset bin, once the
absolute component A has been fitted on the whole corpus. Two routes give the
same figures:

- ``"store"``: the first pass writes those sums to an anonymous file in the
  temporary folder (``TMPDIR``), 8·L·H·T·(1 + bins) bytes per sequence
  (:func:`poslens.capture.row_bin_store.store_bytes`), and a replay reads them
  back. No second forward pass, but the disk grows with the number of sequences.
- ``"second-pass"``: nothing is kept; once A is known, a second forward pass
  over the same batches recomputes the sums layer by layer and folds them in at
  once. About one more forward pass (without the cell sums), and no disk.

``"auto"`` (the default) takes the store when its size, known before the run
starts, fits the disk budget, and the second pass otherwise. The default budget
is the smaller of ``DEFAULT_DISK_BUDGET`` (4 GB) and half the free space of
the temporary folder, so the disk a run uses stops growing with N once the
budget is reached.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import asdict, dataclass
from typing import Any

from poslens.errors import InputError
from poslens.files import bytes_text
from poslens.runtime.planner import parse_bytes

ROUTES = ("auto", "store", "second-pass")
DEFAULT_DISK_BUDGET = 4 * 10**9  # bytes: the store's default ceiling, whatever the free space
FREE_SHARE = 0.5  # the default budget takes at most this share of the temporary folder's free space


def default_disk_budget(directory: str | None = None) -> int:
    """The default budget for the row-bin store: the smaller of 4 GB and half the free space of ``directory``.

    Args:
        directory: The folder the store would go in; default the temporary folder.

    Returns:
        The budget in bytes.

    Example:
        >>> 0 <= default_disk_budget() <= DEFAULT_DISK_BUDGET
        True
    """
    free = shutil.disk_usage(directory or tempfile.gettempdir()).free
    return int(min(DEFAULT_DISK_BUDGET, FREE_SHARE * free))


@dataclass(frozen=True)
class CounterfactualRoute:
    """The route chosen for the per-sequence counterfactual, and why.

    Attributes:
        route: ``"store"`` or ``"second-pass"``.
        requested: What the caller asked for: ``"auto"``, ``"store"`` or ``"second-pass"``.
        reason: One sentence saying why this route runs.
        estimated_store_bytes: What the store would hold for this run (this process's share of the sequences).
        budget_bytes: The disk budget the estimate was compared with.
        directory: The temporary folder the store goes in.

    Example:
        >>> r = choose_route("auto", estimated_store_bytes=10**10, budget=10**9, directory="/tmp")
        >>> r.route, r.reason
        ('second-pass', 'the row-bin store would take 10 GB of temporary disk, over the budget of 1 GB: a second forward pass instead')
    """

    route: str
    requested: str
    reason: str
    estimated_store_bytes: int
    budget_bytes: int
    directory: str

    def describe(self) -> dict[str, Any]:
        """The route's fields, JSON-ready, for the run's provenance.

        Returns:
            The fields by name.

        Example:
            >>> choose_route("second-pass", 100, 10**9, "/tmp").describe()["route"]
            'second-pass'
        """
        return asdict(self)


def check_route(requested: Any) -> str:
    """Check a ``row_sums=`` argument: one of ``ROUTES``.

    Args:
        requested: The argument.

    Returns:
        The route name.

    Raises:
        InputError: When it is not one of ``auto``, ``store``, ``second-pass``.

    Example:
        >>> check_route("store")
        'store'
        >>> check_route("disk")
        Traceback (most recent call last):
        ...
        poslens.errors.InputError: row_sums must be one of auto, store, second-pass, got 'disk'
    """
    if requested not in ROUTES:
        raise InputError(f"row_sums must be one of {', '.join(ROUTES)}, got {requested!r}")
    return requested


def choose_route(
    requested: str, estimated_store_bytes: int, budget: int | str | None = None, directory: str | None = None, processes: int = 1
) -> CounterfactualRoute:
    """Decide, before the run starts, whether the counterfactual keeps the row-bin store or makes a second pass.

    ``"auto"`` keeps the store when ``estimated_store_bytes`` fits ``budget``
    (default :func:`default_disk_budget`), else makes a second pass. ``"store"``
    and ``"second-pass"`` are taken as asked; the store's room on disk is
    checked when it is created (:func:`poslens.capture.row_bin_store.check_disk_space`).
    The budget is the whole machine's: ``processes`` processes writing to the
    same folder (the ranks of one node under torchrun) get an equal share each.

    Args:
        requested: ``"auto"``, ``"store"`` or ``"second-pass"``.
        estimated_store_bytes: What the store would hold for this run.
        budget: The disk budget in bytes or as text (``"2GB"``); default :func:`default_disk_budget`.
        directory: The folder the store would go in; default the temporary folder.
        processes: How many processes share the folder and the budget (each estimates its own store).

    Returns:
        The route, with the reason and the figures it was decided on.

    Raises:
        InputError: When ``requested`` or ``budget`` is not valid.

    Example:
        >>> choose_route("auto", estimated_store_bytes=5 * 10**8, budget="1GB").route
        'store'
        >>> choose_route("auto", estimated_store_bytes=5 * 10**9, budget="1GB").route
        'second-pass'
        >>> choose_route("auto", estimated_store_bytes=5 * 10**8, budget="1GB", processes=4).route   # 250 MB each
        'second-pass'
    """
    check_route(requested)
    directory = directory or tempfile.gettempdir()
    budget_bytes = (default_disk_budget(directory) if budget is None else parse_bytes(budget, what="disk")) // max(1, processes)
    need, room = bytes_text(estimated_store_bytes), bytes_text(budget_bytes)
    if requested == "store":
        return CounterfactualRoute(
            "store", requested, f"asked for the row-bin store ({need} of temporary disk)", estimated_store_bytes, budget_bytes, directory
        )
    if requested == "second-pass":
        return CounterfactualRoute(
            "second-pass", requested, "asked for a second forward pass (no temporary disk)", estimated_store_bytes, budget_bytes, directory
        )
    if estimated_store_bytes <= budget_bytes:
        return CounterfactualRoute(
            "store",
            requested,
            f"the row-bin store takes {need} of temporary disk, within the budget of {room}",
            estimated_store_bytes,
            budget_bytes,
            directory,
        )
    return CounterfactualRoute(
        "second-pass",
        requested,
        f"the row-bin store would take {need} of temporary disk, over the budget of {room}: a second forward pass instead",
        estimated_store_bytes,
        budget_bytes,
        directory,
    )
