"""Measure a trained zoo family with poslens's own parts, seeds as replicates, into a few small tables.

Every run (member × seed) of a family that ``poslens zoo`` trained is measured
through :class:`poslens.study.parts.Study` on the family's held-out text
(``held_out.jsonl``), exactly as ``poslens leakage / sinks / bos-swap /
ablate-sinks / relativize / path-tests --model <run folder> --corpus held_out.jsonl`` would,
one Study folder per run under ``work``. Each part of :data:`PARTS` turns its
Study result into figures (rows of :data:`FIGURE_COLUMNS`, :mod:`poslens.study.zoo_figures`); a part is measured
in the family when its declaration gives its figures (:attr:`poslens.study.part_registry.Part.zoo`).

Written into ``out`` (small CSV tables, meant to be committed):

- ``runs.csv``: the training summary, one row per run (steps, tokens, losses, sink count, key-0 mass);
- ``emergence.csv``: every checkpoint of every run (held-out loss, sink count at τ, key-0 mass);
- ``figures.csv``: every figure of every part for every run (model level and per layer);
- ``family.csv``: per member and model-level figure, the mean, spread and range over seeds; for the members
  other than ``standard``, the difference from ``standard`` paired by seed with its t interval over the seeds
  and the smallest difference the seeds could detect (:func:`poslens.study.claims.c4_zoo.seed_estimate`);
- ``claims.csv`` / ``claim_inputs.csv``: C4 decided inside the family (:func:`poslens.study.claims.c4_zoo.claim_c4_zoo`);
- ``parts.csv``: run, part, status and seconds; ``measure.json``: the settings, the family's record and the timings.

Longer than 400 lines because it is one job, the family's measurement: the runs, the checks that C4 can be
decided in the family, and the tables the figures go into.
"""

from __future__ import annotations

import difflib
import json
import shlex
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from poslens.errors import InputError, NotFoundError
from poslens.files import atomic_write, atomic_write_text
from poslens.study.claims.c4_zoo import ZOO_COMPARISONS, claim_c4_zoo, seed_estimate
from poslens.study.claims.table import CLAIMS_FILE, INPUTS_FILE, Claims
from poslens.study.part_registry import drawing, zoo_parts
from poslens.study.parts import Study
from poslens.study.settings import ZooMeasureOptions  # noqa: F401 (re-exported: it was defined here)
from poslens.study.zoo_figures import (  # noqa: F401 (re-exported: defined here before)
    FIGURE_COLUMNS,
    LEAKAGE_METRICS,
    PATH_READOUTS,
    _tidy,
    ablation_figures,
    bos_swap_figures,
    leakage_figures,
    path_edit_figures,
    relativize_figures,
    sinks_figures,
)
from poslens.version import __version__
from poslens.zoo.store import verify_family

#: The member every other member is compared with, seed by seed.
REFERENCE = "standard"


@dataclass(frozen=True)
class ZooPart:
    """One part of the family's measurement: its name and what turns the run's Study into figures.

    Attributes:
        name: The part's name (a ``poslens`` command).
        figures: ``figures(study)``: the part's figures for one run (:data:`FIGURE_COLUMNS`).

    Example:
        >>> [part.name for part in PARTS]
        ['leakage', 'sinks', 'bos-swap', 'ablate-sinks', 'relativize', 'path-tests']
    """

    name: str
    figures: Callable[[Study], pd.DataFrame]


PARTS: tuple[ZooPart, ...] = tuple(ZooPart(part.name, part.zoo) for part in zoo_parts() if part.zoo is not None)
"""The parts measured on every run, in order: those that declare figures for it (:attr:`poslens.study.part_registry.Part.zoo`,
in the order of :func:`~poslens.study.part_registry.zoo_parts`). A part's figures go into every table; C4's zoo case reads ``c_res``
and ``c_res_depth_slope`` of the leakage part."""

BASELINE = PARTS[0].name
"""The part every run must measure (the first of :data:`PARTS`, the leakage): C4's zoo case reads it."""


def _family(zoo: Path) -> tuple[dict, pd.DataFrame]:
    for name in ("zoo.json", "summary.csv", "held_out.jsonl"):
        if not (zoo / name).exists():
            run = shlex.join(["poslens", "zoo", "--out", str(zoo)])  # quoted: pasted into a shell, it is this one command
            raise NotFoundError(f"{zoo / name} is missing: {zoo} is not a family trained by poslens zoo (run {run} first)")
    return json.loads((zoo / "zoo.json").read_text()), pd.read_csv(zoo / "summary.csv")


def family_table(figures: pd.DataFrame, reference: str = REFERENCE) -> pd.DataFrame:
    """Per member and model-level figure: mean, spread and range over seeds, and the difference from ``reference`` by seed.

    Args:
        figures: ``figures.csv``'s rows (member, seed, part and :data:`FIGURE_COLUMNS`).
        reference: The member the others are compared with.

    Returns:
        One row per (part, metric, query_window, intervention, member): ``n_seeds``, ``mean``, ``sd``, ``min``,
        ``max``, and for the other members ``difference`` (mean over seeds of member − reference of the same seed),
        ``difference_ci_low`` / ``difference_ci_high`` (t interval over the seeds) and ``detectable``.

    Example:
        >>> rows = [dict(member=m, seed=s, part="leakage", metric="c_res", layer=-1, query_window="all", intervention="none",
        ...              value=v + 0.01 * s, ci_low=np.nan, ci_high=np.nan) for m, v in [("standard", 0.1), ("sliding", 0.2)] for s in range(3)]
        >>> t = family_table(pd.DataFrame(rows))
        >>> t[["member", "n_seeds", "mean", "sd", "difference"]].round(3).values.tolist()
        [['standard', 3, 0.11, 0.01, nan], ['sliding', 3, 0.21, 0.01, 0.1]]
    """
    model = figures[figures["layer"] == -1]
    keys = ["part", "metric", "query_window", "intervention"]
    order = list(dict.fromkeys(model["member"]))
    rows = []
    for key, part in model.groupby(keys, sort=False, dropna=False):
        ref = part[part["member"] == reference].set_index("seed")["value"].astype(float)
        for member in order:
            mine = part[part["member"] == member].set_index("seed")["value"].astype(float)
            if mine.empty:
                continue
            row = dict(
                zip(keys, key, strict=True),
                member=member,
                n_seeds=int(mine.notna().sum()),
                mean=mine.mean(),
                sd=mine.std(ddof=1) if mine.notna().sum() > 1 else np.nan,
                min=mine.min(),
                max=mine.max(),
            )
            row.update(difference=np.nan, difference_ci_low=np.nan, difference_ci_high=np.nan, detectable=np.nan)
            if member != reference and len(ref):
                seeds = sorted(set(mine.index) & set(ref.index))
                est = seed_estimate((mine.loc[seeds] - ref.loc[seeds]).to_numpy())
                row.update(difference=est.value, difference_ci_low=est.ci_low, difference_ci_high=est.ci_high, detectable=est.detectable)
            rows.append(row)
    return pd.DataFrame(rows)


def c4_figures(figures: pd.DataFrame) -> pd.DataFrame:
    """The figures C4's zoo case reads: ``c_res`` and ``c_res_depth_slope`` at the model level, all queries, unedited.

    Args:
        figures: ``figures.csv``'s rows.

    Returns:
        member, seed, metric, value.

    Example:
        >>> f = pd.DataFrame([dict(member="standard", seed=0, part="leakage", metric="c_res", layer=-1, query_window="all",
        ...                        intervention="none", value=0.1, ci_low=0.0, ci_high=0.2)])
        >>> c4_figures(f).values.tolist()
        [['standard', 0, 'c_res', 0.1]]
    """
    keep = figures[
        (figures["part"] == BASELINE)
        & (figures["layer"] == -1)
        & (figures["query_window"] == "all")
        & (figures["intervention"] == "none")
        & figures["metric"].isin(["c_res", "c_res_depth_slope"])
    ]
    return keep[["member", "seed", "metric", "value"]].reset_index(drop=True)


def measure_family(
    zoo: str | Path,
    out: str | Path,
    work: str | Path,
    options: ZooMeasureOptions | None = None,
    parts: tuple[ZooPart, ...] = PARTS,
    log: Callable[[str], None] = print,
) -> Claims:
    """Measure every run of the family in ``zoo`` with ``parts`` and write the tables into ``out``.

    The parts go in passes, one part over every run before the next part, so
    that a run cut short has each early part for the whole family; the tables
    are rewritten after every part. A part that fails is recorded in
    ``parts.csv`` with its error and the next one runs; a part reused from
    ``work`` (same settings and inputs) costs nothing.

    Args:
        zoo: The family's folder (written by ``poslens zoo``).
        out: Where the small tables go (e.g. ``docs/zoo_data``).
        work: Where each run's Study folder goes (parquet parts; large, not committed).
        options: The measuring settings.
        parts: The parts (default :data:`PARTS`).
        log: Where progress lines go.

    Returns:
        C4's zoo claims (also ``claims.csv`` / ``claim_inputs.csv`` in ``out``).

    Raises:
        NotFoundError: When ``zoo`` is not a trained family.
        InputError: When no run measured the leakage part, or the family lacks the members C4's zoo case compares
            (the tables are written first).

    Example:
        >>> claims = measure_family("results/zoo_bb", "docs/zoo_data", "results/zoo_bb_measure")  # doctest: +SKIP
    """
    zoo, out, work = Path(zoo), Path(out), Path(work)
    options = options or ZooMeasureOptions()
    record, summary = _family(zoo)
    check_decidable(summary, zoo)
    verify_family(zoo)  # a stored family (docs/zoo_family): every file as its hashes.json records
    if BASELINE not in [p.name for p in parts]:
        raise InputError(f"the parts must include {BASELINE}: C4's zoo case reads it (given: {', '.join(p.name for p in parts) or 'none'})")
    seq_len = options.seq_len or int(record["settings"]["seq_len"])
    corpus = str((zoo / "held_out.jsonl").resolve())
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    runs = summary.sort_values("seed", kind="stable").to_dict("records")
    studies = {
        r["folder"]: Study(
            options.settings(str((zoo / r["folder"]).resolve()), corpus, seq_len), work / r["folder"], log=lambda line: log(f"    {line}")
        )
        for r in runs
    }
    frames: list[pd.DataFrame] = []
    status: list[dict] = []

    def write() -> None:
        _write_tables(out, zoo, record, summary, frames, status, options, seq_len, time.perf_counter() - start, parts)

    for part in parts:
        for r in runs:
            log(f"[zoo-measure {time.perf_counter() - start:.0f}s] {r['folder']}: {part.name}")
            t0 = time.perf_counter()
            try:
                figures = part.figures(studies[r["folder"]])
                state = "ok"
            except Exception as error:  # one failed part must not stop the others
                log(traceback.format_exc())
                figures, state = pd.DataFrame(columns=FIGURE_COLUMNS), f"failed: {type(error).__name__}: {str(error)[:300]}"
            tagged = figures.reindex(columns=FIGURE_COLUMNS)
            tagged.insert(0, "part", part.name)
            tagged.insert(0, "seed", int(r["seed"]))
            tagged.insert(0, "member", r["member"])
            frames.append(tagged)
            status.append(dict(run=r["folder"], part=part.name, status=state, seconds=round(time.perf_counter() - t0, 1)))
        write()
    figures = _figures(frames)
    if figures.empty or c4_figures(figures).empty:
        raise InputError(f"no run of {zoo} measured the leakage part (see {out / 'parts.csv'}); C4's zoo case has nothing to read")
    try:
        family = f"zoo ({record['settings'].get('task', 'stdlib')})"
        claims = Claims.from_rows(claim_c4_zoo(c4_figures(figures), family=family, without_sinks=runs_without_sinks(figures, summary)))
    except ValueError as error:  # the tables are written; C4's zoo case needs standard and another member
        raise InputError(
            f"{zoo}: C4's zoo case cannot be decided ({error}); train the family with --members standard,large-base-trained,sliding"
        ) from error
    atomic_write(out / CLAIMS_FILE, lambda tmp: claims.table.to_csv(tmp, index=False))
    atomic_write(out / INPUTS_FILE, lambda tmp: claims.inputs.to_csv(tmp, index=False))
    write()
    log(f"zoo-measure: {len(runs)} runs × {len(parts)} parts in {time.perf_counter() - start:.0f} s; wrote the tables in {out}")
    return claims


def choose_parts(names: str) -> tuple[ZooPart, ...]:
    """The parts named in a comma list, in the order of :data:`PARTS`; leakage must be among them.

    Args:
        names: E.g. ``"leakage,sinks"``.

    Returns:
        The parts.

    Raises:
        InputError: An unknown part, or none named, or leakage missing (C4 reads it).

    Example:
        >>> [p.name for p in choose_parts("sinks, leakage")]
        ['leakage', 'sinks']
        >>> choose_parts("leakage,sink")
        Traceback (most recent call last):
        poslens.errors.InputError: unknown part 'sink' (did you mean 'sinks'?); parts: leakage, sinks, bos-swap, ablate-sinks, relativize, path-tests
    """
    wanted = [n.strip() for n in names.split(",") if n.strip()]
    known = [p.name for p in PARTS]
    for name in wanted:
        if name not in known:
            close = difflib.get_close_matches(name, known, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise InputError(f"unknown part {name!r}{hint}; parts: {', '.join(known)}")
    if BASELINE not in wanted:
        raise InputError(f"the parts must include {BASELINE}: C4's zoo case reads it (given: {', '.join(wanted) or 'none'})")
    return tuple(p for p in PARTS if p.name in wanted)


def c4_lines(claims: Claims) -> list[str]:
    """C4's zoo rows as short lines, a block per comparison (for a terminal of any width).

    Args:
        claims: What :func:`measure_family` returns.

    Returns:
        The lines.

    Example:
        >>> rows = [dict(member=m, seed=s, metric="c_res", value=v) for m, b in [("standard", 0.02), ("sliding", 0.03)]
        ...         for s, v in enumerate([b, b + 0.001, b - 0.001])]
        >>> print("\\n".join(c4_lines(Claims.from_rows(claim_c4_zoo(pd.DataFrame(rows))))))
        C4 inside the family:
          zoo: sliding − standard: c_res, paired by seed
            0.01 [0.01, 0.01]; this comparison: supported; C4: supported
    """
    lines = ["C4 inside the family:"]
    for r in claims.table.itertuples():
        interval = "no interval" if pd.isna(r.ci_low) else f"[{r.ci_low:.4g}, {r.ci_high:.4g}]"
        lines += [f"  {r.model}", f"    {r.figure:.4g} {interval}; this comparison: {r.own_verdict}; C4: {r.verdict}"]
    return lines


def check_decidable(summary: pd.DataFrame, zoo: Path | str = "the family") -> None:
    """Refuse, before anything is measured, a family in which no comparison of C4's zoo case can have an interval.

    Each comparison needs ``standard`` and the member compared (or ``sliding`` for its own depth slope), each in the
    same two seeds at least: the interval is a t interval over seeds.

    Args:
        summary: The family's ``summary.csv`` (``member`` and ``seed`` per run).
        zoo: The family's folder, for the message.

    Raises:
        InputError: No comparison has two seeds in all its members; the message says what to train.

    Example:
        >>> check_decidable(pd.DataFrame(dict(member=["standard", "sliding"] * 2, seed=[0, 0, 1, 1])))
        >>> check_decidable(pd.DataFrame(dict(member=["standard"], seed=[0])))
        Traceback (most recent call last):
        poslens.errors.InputError: the family: C4's zoo case cannot be decided: it has member standard with seed 0; ... --seeds 0,1,2 (or more seeds)
    """
    seeds = {m: set(map(int, g["seed"])) for m, g in summary.groupby("member")}
    for comparison in ZOO_COMPARISONS:
        members = [comparison.member] + ([comparison.reference] if comparison.reference else [])
        common = set.intersection(*(seeds.get(m, set()) for m in members))
        if len(common) >= 2:
            return
    held = "; ".join(f"member {m} with seed{'s' if len(v) > 1 else ''} {', '.join(map(str, sorted(v)))}" for m, v in sorted(seeds.items()))
    raise InputError(
        f"{zoo}: C4's zoo case cannot be decided: it has {held or 'no run'}; each comparison needs standard and "
        "large-base-trained or sliding in the same 2 seeds at least. Train the family with "
        "poslens zoo --members standard,large-base-trained,sliding --seeds 0,1,2 (or more seeds)"
    )


def runs_without_sinks(figures: pd.DataFrame, summary: pd.DataFrame) -> list[tuple[str, int]]:
    """The runs in which no head meets the sink criterion: a sink score ≥ τ, as the training recorded at the last checkpoint.

    The count is ``summary.csv``'s ``sink_heads``: each head's mean a_i0 over the held-out queries that can see key 0
    (:mod:`poslens.zoo.evaluate`). On a model without a window that is poslens's sink score (the sinks part); under a
    sliding window of W < T keys the sinks part also counts the queries that cannot see key 0, as 0, which caps its
    score at (W − 1)/(T − 1) (0.12 at W = 16, T = 128, below τ = 0.3): a windowed member could never show a sink by it.
    Where the summary lacks the count, the sinks part's (layer −1) is read.

    Args:
        figures: ``figures.csv``'s rows.
        summary: The family's ``summary.csv``.

    Returns:
        ``(member, seed)`` of each run without a sink.

    Example:
        >>> runs_without_sinks(pd.DataFrame(columns=["part", "metric", "layer", "member", "seed", "value"]),
        ...                    pd.DataFrame(dict(member=["standard"] * 3, seed=[0, 1, 2], sink_heads=[2, 0, 1])))
        [('standard', 1)]
    """
    counts = figures[(figures["part"] == drawing("sink_heads").name) & (figures["metric"] == "sink_heads") & (figures["layer"] == -1)]
    measured = {(str(r.member), int(r.seed)): float(r.value) for r in counts.itertuples()}
    found = []
    for r in summary.itertuples():
        key = (str(r.member), int(r.seed))
        count = getattr(r, "sink_heads", np.nan)
        count = measured.get(key, np.nan) if pd.isna(count) else count
        if not count >= 1:
            found.append(key)
    return found


def _figures(frames: list[pd.DataFrame]) -> pd.DataFrame:
    frames = [f for f in frames if len(f)]
    if not frames:
        return pd.DataFrame(columns=["member", "seed", "part", *FIGURE_COLUMNS])
    return pd.concat(frames, ignore_index=True)


def _write_tables(
    out: Path,
    zoo: Path,
    record: dict,
    summary: pd.DataFrame,
    frames: list[pd.DataFrame],
    status: list[dict],
    options: ZooMeasureOptions,
    seq_len: int,
    seconds: float,
    parts: tuple[ZooPart, ...],
) -> None:
    """Every table of ``out`` from what has been measured so far."""
    figures = _figures(frames)
    runs = summary.drop(columns=["folder", "label"], errors="ignore")
    log = pd.read_csv(zoo / "log.csv")
    emergence = log[
        [
            c
            for c in (
                "member",
                "seed",
                "step",
                "tokens",
                "seconds",
                "train_loss",
                "held_out_loss",
                "sink_heads",
                "max_sink_score",
                "key0_mass",
                "sink_heads_by_layer",
            )
            if c in log.columns
        ]
    ]
    tables = {
        "runs.csv": runs,
        "emergence.csv": emergence,
        "figures.csv": figures,
        "family.csv": family_table(figures) if len(figures) else pd.DataFrame(),
        "parts.csv": pd.DataFrame(status, columns=["run", "part", "status", "seconds"]),
    }
    for name, table in tables.items():
        atomic_write(out / name, lambda tmp, table=table: table.to_csv(tmp, index=False, float_format="%.6g"))
    measured = {
        "poslens_version": __version__,
        "zoo": {
            key: record.get(key)
            for key in ("settings", "data", "architecture", "task", "wall_seconds", "load_average_start", "load_average_end", "cpu_threads")
        },
        "options": {**asdict(options), "seq_len": seq_len},
        "parts": [p.name for p in parts],
        "seconds": round(seconds, 1),
    }
    atomic_write_text(out / "measure.json", json.dumps(measured, indent=1, default=str))
