"""Train a zoo family: every member and seed in lockstep, saved as Hugging Face folders with their logs.

:func:`train_family` builds each run (member × seed) from the seed's initial
weights, then takes every training step for all runs together: a seed's batch
is drawn once and fed to each member, so the members of a seed see the same
data in the same order, and a time budget stops every run at the same step.
The optimizer is AdamW with linear warmup, then a cosine decay to a tenth of
the peak (or a constant rate); its progress is the larger of the step's share
of ``steps`` and the elapsed share of the time budget, the same for every run.
On CUDA the forward runs under bf16 autocast (float32 weights); on the CPU in float32.

The output folder holds, per run, ``<member>-s<seed>/`` (the model, its
task's tokenizer, ``log.jsonl`` with one line per checkpoint and ``run.json``),
and for the family ``zoo.json`` (settings and data), ``log.csv`` (every
checkpoint of every run, rewritten at each checkpoint), ``held_out.jsonl``
(the held-out documents or chain, a ``--corpus`` for the measuring commands) and
``summary.csv`` / ``summary.md`` (one row per run). A rerun with the same
settings into the same folder reuses the trained family, and resumes an
unfinished one from its last checkpoint (``resume.pt``, :mod:`poslens.zoo.resume`),
ending with the same weights and log as a run never interrupted.

Every file the zoo writes is listed in its folder's manifest
(:mod:`poslens.ownership`), and only those are ever replaced or deleted: a
file of the user's at one of the names the zoo writes is refused before
training, with or without ``overwrite``, and ``overwrite`` deletes only the
listed files of a run folder (a user's ``notes.txt`` there stays).

Longer than 400 lines because it is one job, the lockstep training loop:
its settings, checkpoints and outputs are read and written by that loop alone.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from poslens.errors import InputError, OutputConflictError
from poslens.files import atomic_write
from poslens.ownership import check_replaceable, record_written, written_files
from poslens.progress import progress_bar
from poslens.version import __version__
from poslens.zoo.backcopy import BackcopyData, load_backcopy
from poslens.zoo.data import ZooData, load_data
from poslens.zoo.evaluate import autocast, held_out_loss, next_token_loss, sink_count, sink_scores
from poslens.zoo.family import MEMBERS, NOPE_NOTE, initial_model, member_config
from poslens.zoo.resume import RESUME_FILE, load_resume, remove_resume, restore, save_resume
from poslens.zoo.settings import SCHEDULES, TASKS, ZooSettings  # noqa: F401 (re-exported: they were defined here)

#: The columns of the summary table (``summary.csv``), one row per run.
SUMMARY_COLUMNS = [
    "member",
    "label",
    "seed",
    "rope_theta",
    "sliding_window",
    "steps",
    "tokens",
    "train_loss",
    "held_out_loss",
    "sink_heads",
    "max_sink_score",
    "key0_mass",
    "stopped_by",
    "seconds",
    "folder",
]


def run_name(member: str, seed: int) -> str:
    """The folder name of a run: ``<member>-s<seed>``.

    Args:
        member: The member's name.
        seed: The seed.

    Returns:
        The name.

    Example:
        >>> run_name("sliding", 1)
        'sliding-s1'
    """
    return f"{member}-s{seed}"


def learning_rate(settings: ZooSettings, step: int, progress: float) -> float:
    """The learning rate at ``step``: linear warmup, then cosine to a tenth of the peak (or constant).

    Args:
        settings: The family's settings.
        step: The step (0-based).
        progress: How far training is, in [0, 1] (the larger of the step and the time shares).

    Returns:
        The rate.

    Example:
        >>> s = ZooSettings(lr=1e-3, warmup=10)
        >>> learning_rate(s, 4, 0.0), learning_rate(s, 50, 0.0), round(learning_rate(s, 50, 1.0), 6)
        (0.0005, 0.001, 0.0001)
    """
    warm = min(1.0, (step + 1) / settings.warmup) if settings.warmup > 0 else 1.0
    if settings.schedule == "constant":
        return settings.lr * warm
    p = min(1.0, max(0.0, progress))
    return settings.lr * warm * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * p)))


def _device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise InputError(f"device {name!r} asked for, but CUDA is not available here; use --device cpu or auto")
    return device


def load_task(settings: ZooSettings) -> ZooData | BackcopyData:
    """The data of the family's task: the standard library's documents, or the Bigram-Backcopy chains.

    Args:
        settings: The family's settings (``task``, and for ``stdlib`` ``held_out`` and ``max_documents``).

    Returns:
        The data: training batches, held-out sequences, the tokenizer saved with each model, and its description.

    Example:
        >>> load_task(ZooSettings(task="bigram-backcopy")).describe()["task"]
        'bigram-backcopy'
    """
    if settings.task == "bigram-backcopy":
        return load_backcopy()
    return load_data(settings.held_out, settings.max_documents)


#: The files the zoo writes at the top of its output folder.
TOP_FILES = ("zoo.json", "held_out.jsonl", "log.csv", "summary.csv", "summary.md", RESUME_FILE)
#: The files the zoo writes into a run folder (the model's and tokenizer's as ``save_pretrained`` names them, the logs).
RUN_FILES = (
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "model.safetensors.index.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.json",
    "merges.txt",
    "chat_template.jinja",
    "log.jsonl",
    "run.json",
)


def _check_ours(paths: list[Path], overwrite: bool) -> None:
    """Refuse, before anything is written, a file at one of ``paths`` that poslens did not write.

    A file poslens wrote and that has changed since may be replaced under ``overwrite``.
    """
    for path in paths:
        if overwrite and path.is_file() and path.name in written_files(path.parent):
            continue
        check_replaceable(path)


def _write_ours(path: Path, write: Callable[[Path], None]) -> None:
    """Write ``path`` atomically and list it in its folder's manifest."""
    atomic_write(path, write)
    record_written([path])


def _remove_ours(folder: Path) -> None:
    """Delete the files poslens listed in ``folder`` and its subfolders; the rest stays, and so does a folder left non-empty."""
    for sub in sorted((p for p in folder.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True) + [folder]:
        listed = written_files(sub)
        for name in listed:
            (sub / name).unlink(missing_ok=True)
        if listed:
            (sub / ".poslens-files.json").unlink(missing_ok=True)
            (sub / ".poslens-files.json.lock").unlink(missing_ok=True)
        if sub != folder and not any(sub.iterdir()):
            sub.rmdir()


def _check_out(out: Path, settings: ZooSettings, data: ZooData | BackcopyData, overwrite: bool) -> bool:
    """True when ``out`` already holds this family, trained with these settings and data (reuse it)."""
    record = out / "zoo.json"
    runs = [out / run_name(m, s) for m, s in settings.runs()]
    if record.exists():
        saved = json.loads(record.read_text())
        same = saved.get("settings") == settings.to_dict() and saved.get("data", {}).get("sha256") == data.sha256
        if same and all((run / "run.json").exists() for run in runs) and (out / "summary.csv").exists():
            return True
        if not same and not overwrite:
            raise OutputConflictError(
                f"{out} holds a zoo family trained with other settings or data ({record}); pass --overwrite "
                "(overwrite=True) to train it again, or choose another --out"
            )
    else:
        taken = [run for run in runs if run.exists() and any(run.iterdir())]
        if taken and not overwrite:
            raise OutputConflictError(
                f"{taken[0]} exists and is not empty, and {out} has no zoo.json: poslens did not train it; "
                "choose another --out, or pass --overwrite to replace it"
            )
    _check_files(out, settings, overwrite)
    return False


def _check_files(out: Path, settings: ZooSettings, overwrite: bool) -> None:
    """Refuse a file of the user's at a name the zoo writes in ``out`` or its run folders (before the task is loaded)."""
    runs = [out / run_name(m, s) for m, s in settings.runs()]
    replace = overwrite or (out / "zoo.json").exists()  # the same family, unfinished, is trained again: its own files may be replaced
    _check_ours([out / name for name in TOP_FILES], replace)
    for run in runs:
        _check_ours([run / name for name in RUN_FILES], replace)
        if (run / "checkpoints").is_dir():
            _check_ours([step / name for step in (run / "checkpoints").iterdir() if step.is_dir() for name in RUN_FILES], replace)


@dataclass
class _Run:
    member: str
    seed: int
    folder: Path
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    loss_sum: torch.Tensor
    loss_steps: int = 0
    rows: list[dict] = field(default_factory=list)


def train_family(
    out: str | Path, settings: ZooSettings | None = None, log: Callable[[str], None] = print, overwrite: bool = False, show_progress: bool = True
) -> pd.DataFrame:
    """Train the family of ``settings`` into ``out`` and return its summary (one row per run).

    Every ``eval_every`` steps the whole state is saved (``resume.pt``); called again with the same settings on a
    family cut short, it resumes from there and ends with the same weights and log as one uninterrupted run.

    Args:
        out: The output folder (created).
        settings: The family's settings (default :class:`ZooSettings`).
        log: Where progress lines go.
        overwrite: Train again a family that ``out`` holds with other settings, replacing its runs.
        show_progress: Draw a progress bar of the steps with its ETA (text in a terminal, a widget in a notebook;
            :func:`poslens.progress.progress_bar`).

    Returns:
        The summary table (:data:`SUMMARY_COLUMNS`), also written as ``summary.csv`` and ``summary.md``.

    Raises:
        OutputConflictError: When ``out`` holds a family trained with other settings, or run folders poslens did not write.
        InputError: When the device is not available.

    Example:
        >>> import tempfile
        >>> s = ZooSettings(steps=2, seq_len=16, width=16, depth=1, heads=2, batch_size=2, eval_seqs=2, seeds=(0,),
        ...                 members=("standard",), max_documents=30, device="cpu")
        >>> table = train_family(tempfile.mkdtemp(), s, log=lambda line: None, show_progress=False)
        >>> table[["member", "seed", "steps", "stopped_by"]].values.tolist()
        [['standard', 0, 2, 'steps']]
    """
    settings = settings or ZooSettings()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    device = _device(settings.device)
    _check_files(out, settings, overwrite)
    data = load_task(settings)
    if _check_out(out, settings, data, overwrite):
        log(f"{out}: every run is already trained with these settings and data; reusing it")
        return pd.read_csv(out / "summary.csv")
    state = load_resume(out, settings.to_dict(), data.sha256) if (out / "zoo.json").exists() else None
    data.write_held_out(out / "held_out.jsonl")
    record_written([out / "held_out.jsonl"])
    record = (
        json.loads((out / "zoo.json").read_text())
        if state is not None
        else {
            "poslens_version": __version__,
            "settings": settings.to_dict(),
            "data": data.describe(),
            "device": str(device),
            "architecture": "MistralForCausalLM",
            "task": settings.task,
            "load_average_start": [round(x, 2) for x in os.getloadavg()],
            "nope": NOPE_NOTE,
        }
    )
    _write_ours(out / "zoo.json", lambda tmp: tmp.write_text(json.dumps(record, indent=1), encoding="utf-8"))
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
    runs = []
    for member, seed in settings.runs():
        folder = out / run_name(member, seed)
        if folder.exists() and state is None:
            _remove_ours(folder)  # only what poslens wrote there: a user's file stays
        folder.mkdir(parents=True, exist_ok=True)
        config = member_config(
            member, settings.width, settings.depth, settings.heads, settings.seq_len, vocab_size=data.vocab_size, window=settings.window
        )
        model = initial_model(config, seed).to(device).train()
        optimizer = torch.optim.AdamW(
            model.parameters(),
            lr=settings.lr,
            betas=(0.9, 0.95),
            weight_decay=settings.weight_decay,
            **({"fused": True} if device.type == "cuda" else {}),
        )
        runs.append(_Run(member, seed, folder, model, optimizer, torch.zeros((), device=device)))
    generators = {seed: torch.Generator().manual_seed(seed) for seed in settings.seeds}
    eval_tokens = data.held_out_tokens(settings.seq_len, settings.eval_seqs)
    tokenizer = data.tokenizer()
    budget = settings.time_budget * len(runs) if settings.time_budget else None
    n_params = sum(p.numel() for p in runs[0].model.parameters())
    log(
        f"zoo: {len(runs)} runs ({', '.join(settings.members)} × seeds {list(settings.seeds)}), {n_params / 1e6:.2f} M parameters "
        f"each, {settings.steps} steps of {settings.batch_size} × {settings.seq_len} tokens, on {device}"
        + (f", at most {budget:.0f} s" if budget else "")
    )
    step, stopped_by, lr, spent = 0, "steps", None, 0.0
    if state is not None:
        restore(state, runs, generators)
        step, spent = int(state["step"]), float(state["seconds"])
        for run in runs:  # the log as it stood at the saved step (a line written after it, before a crash, goes)
            _write_ours(run.folder / "log.jsonl", lambda tmp, run=run: tmp.write_text("".join(json.dumps(r) + "\n" for r in run.rows)))
        log(f"zoo: resuming every run at step {step} of {settings.steps} from {out / RESUME_FILE}")
    start = time.perf_counter() - spent
    if state is None:
        _checkpoint(runs, settings, out, 0, 0.0, eval_tokens, tokenizer, log)
    bar = progress_bar(None, total=settings.steps, initial=step, desc=f"zoo: {len(runs)} runs", unit="step", disable=not show_progress)
    while step < settings.steps:
        elapsed = time.perf_counter() - start
        if budget is not None and elapsed >= budget:
            stopped_by = "time"
            break
        progress = max(step / settings.steps, elapsed / budget if budget else 0.0)
        lr = learning_rate(settings, step, progress)
        batches = {seed: data.batch(settings.seq_len, settings.batch_size, g).to(device) for seed, g in generators.items()}
        for run in runs:
            for group in run.optimizer.param_groups:
                group["lr"] = lr
            with autocast(device):
                loss = next_token_loss(run.model, batches[run.seed])
            run.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(run.model.parameters(), settings.grad_clip)
            run.optimizer.step()
            run.loss_sum += loss.detach()
            run.loss_steps += 1
        step += 1
        bar.update(1)
        if step % settings.eval_every == 0 and step < settings.steps:
            _checkpoint(runs, settings, out, step, time.perf_counter() - start, eval_tokens, tokenizer, log, lr)
            save_resume(out, settings.to_dict(), data.sha256, step, time.perf_counter() - start, runs, generators)
            bar.set_postfix_str(_postfix(runs), refresh=False)
    bar.close()
    seconds = time.perf_counter() - start
    if runs[0].rows[-1]["step"] != step:  # the last checkpoint, unless a time stop fell on one
        _checkpoint(runs, settings, out, step, seconds, eval_tokens, tokenizer, log, lr)
    return _finish(runs, settings, out, data, step, stopped_by, seconds, log)


def _postfix(runs: list[_Run]) -> str:
    """The bar's postfix: the last held-out loss and sink count of each run, ``member-s<seed> 3.25/2``."""
    return ", ".join(f"{run_name(r.member, r.seed)} {r.rows[-1]['held_out_loss']:.3f}/{r.rows[-1]['sink_heads']}" for r in runs if r.rows)


def _checkpoint(
    runs: list[_Run],
    settings: ZooSettings,
    out: Path,
    step: int,
    seconds: float,
    eval_tokens: torch.Tensor,
    tokenizer: Any,
    log: Callable[[str], None],
    lr: float | None = None,
) -> None:
    """Held-out loss and sink scores of every run at ``step``: a line in each ``log.jsonl`` and ``log.csv`` rewritten."""
    for run in runs:
        scores = sink_scores(run.model, eval_tokens)
        row = {
            "member": run.member,
            "label": MEMBERS[run.member].label,
            "seed": run.seed,
            "step": step,
            "tokens": step * settings.batch_size * settings.seq_len,
            "seconds": round(seconds, 2),
            "lr": lr,
            "train_loss": float(run.loss_sum / run.loss_steps) if run.loss_steps else None,
            "held_out_loss": held_out_loss(run.model, eval_tokens),
            "sink_heads": sink_count(scores, settings.tau),
            "max_sink_score": float(scores.max()),
            "key0_mass": float(scores.mean()),
            "sink_heads_by_layer": [sink_count(layer, settings.tau) for layer in scores],
            "sink_scores": [[round(float(v), 4) for v in layer] for layer in scores],
        }
        run.rows.append(row)
        run.loss_sum.zero_()
        run.loss_steps = 0
        with open(run.folder / "log.jsonl", "a", encoding="utf-8") as handle:
            handle.write(json.dumps(row) + "\n")
        record_written([run.folder / "log.jsonl"])
        if settings.save_checkpoints:
            _save_model(run.model, run.folder / "checkpoints" / f"step-{step:06d}", tokenizer)
    table = pd.DataFrame([{k: v for k, v in row.items() if k != "sink_scores"} for run in runs for row in run.rows])
    _write_ours(out / "log.csv", lambda tmp: table.to_csv(tmp, index=False))
    last = table[table["step"] == step]
    log(
        f"step {step}: held-out loss "
        + ", ".join(f"{run_name(r.member, r.seed)} {r.held_out_loss:.3f} ({r.sink_heads} sinks)" for r in last.itertuples())
    )


def _save_model(model: torch.nn.Module, folder: Path, tokenizer: Any) -> None:
    """The model (float32) and its task's tokenizer, as a folder :func:`poslens.load_model` reads; each file listed as poslens's.

    Saved into a temporary sibling first, then each file moved in, so that a file of the user's is refused by
    name (:func:`~poslens.ownership.check_replaceable`) rather than replaced.
    """
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # the zoo logs its own progress
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder, prefix=".poslens-save-") as staging:
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        files = sorted(Path(staging).iterdir())
        for path in files:
            if written_files(folder).get(path.name) is None:
                check_replaceable(folder / path.name)
        for path in files:
            os.replace(path, folder / path.name)
        record_written([folder / path.name for path in files])


def _finish(
    runs: list[_Run],
    settings: ZooSettings,
    out: Path,
    data: ZooData | BackcopyData,
    steps: int,
    stopped_by: str,
    seconds: float,
    log: Callable[[str], None],
) -> pd.DataFrame:
    rows = []
    for run in runs:
        _save_model(run.model, run.folder, data.tokenizer())
        last = run.rows[-1]
        config = run.model.config
        summary = {
            "member": run.member,
            "label": MEMBERS[run.member].label,
            "seed": run.seed,
            "rope_theta": config.rope_parameters["rope_theta"],
            "sliding_window": config.sliding_window,
            "steps": steps,
            "tokens": steps * settings.batch_size * settings.seq_len,
            "train_loss": last["train_loss"],
            "held_out_loss": last["held_out_loss"],
            "sink_heads": last["sink_heads"],
            "max_sink_score": last["max_sink_score"],
            "key0_mass": last["key0_mass"],
            "stopped_by": stopped_by,
            "seconds": round(seconds, 2),
            "folder": run.folder.name,
        }
        rows.append(summary)
        text = json.dumps({**summary, "settings": settings.to_dict(), "data": data.describe(), "poslens_version": __version__}, indent=1)
        _write_ours(run.folder / "run.json", lambda tmp, text=text: tmp.write_text(text, encoding="utf-8"))
    table = pd.DataFrame(rows, columns=SUMMARY_COLUMNS)
    record = json.loads((out / "zoo.json").read_text())  # the machine's load beside the wall time: CPUs are often shared
    record.update(wall_seconds=round(seconds, 1), load_average_end=[round(x, 2) for x in os.getloadavg()], cpu_threads=torch.get_num_threads())
    _write_ours(out / "zoo.json", lambda tmp: tmp.write_text(json.dumps(record, indent=1), encoding="utf-8"))
    _write_ours(out / "summary.csv", lambda tmp: table.to_csv(tmp, index=False))
    _write_ours(out / "summary.md", lambda tmp: tmp.write_text(summary_markdown(table), encoding="utf-8"))
    remove_resume(out)  # finished: a rerun reuses the family
    log(f"zoo: {len(runs)} runs trained for {steps} steps in {seconds:.0f} s (stopped by {stopped_by}); wrote {out / 'summary.csv'}")
    return table


def summary_markdown(table: pd.DataFrame) -> str:
    """The summary table as Markdown, one row per run.

    Args:
        table: The summary (:data:`SUMMARY_COLUMNS`).

    Returns:
        The Markdown text.

    Example:
        >>> row = dict.fromkeys(SUMMARY_COLUMNS, 1)
        >>> summary_markdown(pd.DataFrame([row])).splitlines()[0].startswith("| member | label |")
        True
    """
    columns = [c for c in SUMMARY_COLUMNS if c in table.columns]
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in table[columns].itertuples(index=False):
        cells = ["" if isinstance(v, float) and math.isnan(v) else f"{v:.4g}" if isinstance(v, float) else str(v) for v in row]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
