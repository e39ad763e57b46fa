"""The resume state of a zoo family's training: what a restarted ``poslens zoo`` needs to go on exactly where it stopped.

The family trains in lockstep (:mod:`poslens.zoo.train`), so one file,
``resume.pt`` in the family's folder, holds the whole state at a checkpoint
step: each run's weights, optimizer state (AdamW's moments and step counts),
running training loss and log rows so far; each seed's data generator (the
data position); torch's global random state; the step and the training time
spent. It is written atomically after every checkpoint (every ``eval_every``
steps) and deleted once the family is finished. A restart with the same settings
and data loads it and ends with the same weights and log, bit for bit, as a run
that was never interrupted (only the wall-clock columns differ; under a time
budget the learning rate also follows the time spent, so only a step budget is exact).

Example:
    >>> RESUME_FILE
    'resume.pt'
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from poslens.files import atomic_write
from poslens.ownership import record_written, remove_ours

#: The resume state's file in the family's folder.
RESUME_FILE = "resume.pt"
#: The format of the resume state (a file of another format is not read: the family restarts from step 0).
RESUME_FORMAT = 1


def save_resume(
    out: Path, settings: dict, data_sha256: str, step: int, seconds: float, runs: list[Any], generators: dict[int, torch.Generator]
) -> Path:
    """Write the family's state at ``step`` to ``out``/``resume.pt``, atomically, and list it as poslens's.

    Args:
        out: The family's folder.
        settings: The family's settings (``ZooSettings.to_dict()``): a restart with other settings does not resume.
        data_sha256: The task data's hash: a restart with other data does not resume.
        step: The steps taken.
        seconds: The training time spent so far.
        runs: The runs (each with ``member``, ``seed``, ``model``, ``optimizer``, ``loss_sum``, ``loss_steps``, ``rows``).
        generators: Each seed's data generator.

    Returns:
        The file's path.

    Example:
        >>> save_resume(Path("results/zoo"), settings.to_dict(), data.sha256, 250, 80.0, runs, generators)  # doctest: +SKIP
    """
    state = {
        "format": RESUME_FORMAT,
        "settings": settings,
        "data_sha256": data_sha256,
        "step": step,
        "seconds": seconds,
        "torch_rng": torch.get_rng_state(),
        "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
        "generators": {seed: g.get_state() for seed, g in generators.items()},
        "runs": {
            (run.member, run.seed): {
                "model": run.model.state_dict(),
                "optimizer": run.optimizer.state_dict(),
                "loss_sum": run.loss_sum.detach().cpu(),
                "loss_steps": run.loss_steps,
                "rows": list(run.rows),
            }
            for run in runs
        },
    }
    path = out / RESUME_FILE
    atomic_write(path, lambda tmp: torch.save(state, tmp))
    record_written([path])
    return path


def load_resume(out: Path, settings: dict, data_sha256: str) -> dict | None:
    """The state ``out``/``resume.pt`` holds, if it was written for these settings and data; else None.

    Args:
        out: The family's folder.
        settings: The family's settings (``ZooSettings.to_dict()``).
        data_sha256: The task data's hash.

    Returns:
        The state (see :func:`save_resume`), or None when there is none or it belongs to other settings, data or format.

    Example:
        >>> load_resume(Path("/nonexistent"), {}, "") is None
        True
    """
    path = out / RESUME_FILE
    if not path.is_file():
        return None
    state = torch.load(path, map_location="cpu", weights_only=False)  # written by save_resume (listed as poslens's)
    if state.get("format") != RESUME_FORMAT or state.get("settings") != settings or state.get("data_sha256") != data_sha256:
        return None
    return state


def restore(state: dict, runs: list[Any], generators: dict[int, torch.Generator]) -> None:
    """Put the saved state back into freshly built ``runs`` and ``generators`` (and torch's global random state).

    Args:
        state: What :func:`load_resume` returned.
        runs: The runs, built as for step 0 (same members, seeds and devices).
        generators: Each seed's data generator.

    Example:
        >>> restore(load_resume(Path("results/zoo"), settings.to_dict(), data.sha256), runs, generators)  # doctest: +SKIP
    """
    for run in runs:
        saved = state["runs"][(run.member, run.seed)]
        run.model.load_state_dict(saved["model"])
        run.optimizer.load_state_dict(saved["optimizer"])
        run.loss_sum.copy_(saved["loss_sum"].to(run.loss_sum.device))
        run.loss_steps = int(saved["loss_steps"])
        run.rows = list(saved["rows"])
    for seed, g in generators.items():
        g.set_state(state["generators"][seed])
    torch.set_rng_state(state["torch_rng"])
    if state.get("cuda_rng") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda_rng"])


def remove_resume(out: Path) -> None:
    """Delete ``out``/``resume.pt`` (the family is finished), if poslens wrote it.

    Args:
        out: The family's folder.

    Example:
        >>> remove_resume(Path("/nonexistent"))
    """
    remove_ours([out / RESUME_FILE])


__all__ = ["RESUME_FILE", "RESUME_FORMAT", "load_resume", "remove_resume", "restore", "save_resume"]
