"""``run.json``: the provenance of a whole ``poslens report`` run (version, command, machine, settings, models, timings).

:func:`run_record` builds the record from the parts a report computed;
``poslens report`` writes it as ``run.json`` beside ``report.html``.

Example:
    >>> from types import SimpleNamespace
    >>> leakage = SimpleNamespace(meta=dict(model=dict(model="m", variant="base", source="/m", source_sha256="ab"), corpus="random"))
    >>> record = run_record({"leakage": leakage}, {"n_seqs": 4}, quick=True, timings={"leakage": 1.5}, argv=["leakage"])
    >>> record["preset"], record["command"], record["models"], record["parts"]
    ('quick', 'poslens leakage', {'m (base)': {'source': '/m', 'sha256': 'ab', 'quantized': None}}, {'leakage': 'leakage.parquet'})
"""

from __future__ import annotations

import os
import platform
import shlex
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from poslens.study.part_registry import PARTS
from poslens.version import __version__

if TYPE_CHECKING:
    from poslens.study.settings import Settings


def described_models(parts: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The models the parts were measured on, from their metadata (a part's own and its sub-parts'), by "name (variant)".

    Args:
        parts: The report's parts by name, each with a ``meta`` dict (a :class:`poslens.measurement.result.Result`).

    Returns:
        ``{"model (variant)": {"source", "sha256", "quantized"}}``.

    Example:
        >>> from types import SimpleNamespace
        >>> sub = dict(model=dict(model="g", variant="window:64", source="/g", source_sha256="cd", quantized="Q4_1"))
        >>> described_models({"compare": SimpleNamespace(meta=dict(parts=[sub]))})
        {'g (window:64)': {'source': '/g', 'sha256': 'cd', 'quantized': 'Q4_1'}}
    """
    models = {}
    for result in parts.values():
        for meta in [result.meta] + result.meta.get("parts", []):
            if "model" in meta and isinstance(meta["model"], dict):
                described = meta["model"]
                models[f"{described['model']} ({described['variant']})"] = {
                    "source": described.get("source"),
                    "sha256": described.get("source_sha256"),
                    "quantized": described.get("quantized"),
                }
    return models


def recorded_settings(settings: Settings) -> dict[str, Any]:
    """The settings as ``run.json`` and ``report.html`` record them: flat, every part's own settings beside the rest, no ``cases``.

    Args:
        settings: The report's settings.

    Returns:
        ``{setting: value}`` (:meth:`~poslens.study.settings.Settings.as_dict` less ``cases``, which only Python gives).

    Example:
        >>> from poslens.study.settings import Settings
        >>> recorded = recorded_settings(Settings(split_offset=8))
        >>> recorded["split_offset"], "cases" in recorded, "part_settings" in recorded
        (8, False, False)
    """
    return {name: value for name, value in settings.as_dict().items() if name != "cases"}


def run_record(
    parts: Mapping[str, Any], settings: dict[str, Any], *, quick: bool, timings: dict[str, float], argv: Sequence[str], cuda: bool = False
) -> dict[str, Any]:
    """The contents of ``run.json`` for a report whose parts are ``parts`` (the first, the baseline, gives the corpus and versions).

    Args:
        parts: The report's parts by name.
        settings: The report's settings as a dict (as ``report.html`` shows them).
        quick: Whether the run used the ``--quick`` preset (else ``--full``).
        timings: Each part's compute seconds.
        argv: The command's arguments after ``poslens``.
        cuda: Whether CUDA was available to the run.

    Returns:
        The record: ``poslens_version``, ``preset``, ``command``, ``created``, ``machine``, ``settings``, ``models``,
        ``corpus``, ``versions``, ``timings_seconds`` and ``parts`` (each part's file).

    Example:
        >>> from types import SimpleNamespace
        >>> part = SimpleNamespace(meta=dict(corpus="random", versions=dict(torch="2")))
        >>> record = run_record({"leakage": part}, {}, quick=False, timings={}, argv=["report", "--full"])
        >>> record["preset"], record["command"], record["corpus"], record["versions"]
        ('full', 'poslens report --full', 'random', {'torch': '2'})
    """
    leakage_meta = next(iter(parts.values())).meta  # the plan starts with the baseline, which read the corpus
    return {
        "poslens_version": __version__,
        "preset": "quick" if quick else "full",
        "command": shlex.join(["poslens", *argv]),
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "cuda": cuda},
        "settings": settings,
        "models": described_models(parts),
        "corpus": leakage_meta.get("corpus"),
        "versions": leakage_meta.get("versions"),
        "timings_seconds": timings,
        "parts": {name: PARTS[name].file for name in parts},
    }
