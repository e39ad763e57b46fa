"""The ``poslens zoo`` and ``poslens zoo-measure`` commands: train a family of small models, and measure it with the parts.

Wiring only, as ``poslens.study.cli``, which adds these commands to ``poslens``: the training is
:func:`poslens.zoo.train.train_family`, the measurement :func:`poslens.study.zoo_measure.measure_family`, and the parts
``zoo-measure`` measures are those that declare figures for it (:func:`poslens.study.part_registry.zoo_parts`).

Example:
    >>> [command.callback.__name__ for command in commands.registered_commands]
    ['zoo', 'zoo_measure']
"""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape

from poslens.errors import PoslensError
from poslens.study import cli_options
from poslens.study.cli_folders import output_folder
from poslens.study.part_commands import setting_option
from poslens.study.part_registry import zoo_parts
from poslens.study.settings import ZooMeasureOptions
from poslens.zoo.family import MEMBERS as ZOO_MEMBERS
from poslens.zoo.settings import ZooSettings

commands = typer.Typer()
"""The two commands, added to ``poslens`` by ``poslens.study.cli``."""

console = Console()


@commands.command()
def zoo(
    out: Path = typer.Option(..., help="Output folder: one Hugging Face model folder per member and seed, log.csv, summary.csv/.md."),
    task: str = typer.Option(
        ZooSettings.task,
        help="stdlib (the Python standard library's source, byte tokens) or bigram-backcopy (a synthetic task, sized for the CPU; "
        "see docs/zoo.md, in the sources and the sdist).",
    ),
    steps: int = typer.Option(ZooSettings.steps, min=1, help="Training steps (every run takes the same number)."),
    seq_len: int = typer.Option(ZooSettings.seq_len, min=4, help="Tokens per training sequence T, BOS included."),
    window: int | None = typer.Option(None, min=2, help="The sliding member's window in keys (at most --seq-len). Default: T/8."),
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
        show_default=False,  # one unbreakable word, which rich cuts in a narrow terminal: the help says it
        help=f"Members, a comma list of {', '.join(ZOO_MEMBERS)} (NoPE is left out). \\[default: all {len(ZOO_MEMBERS)}]",
    ),
    eval_every: int = typer.Option(ZooSettings.eval_every, min=1, help="Steps between checkpoints (held-out loss, sink count)."),
    eval_seqs: int = typer.Option(ZooSettings.eval_seqs, min=1, help="Held-out sequences per checkpoint."),
    tau: float = setting_option("tau"),
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
            window=window,
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
    with output_folder(out, console):
        table = train_family(out, settings, log=lambda message: console.print(escape(message), soft_wrap=True), overwrite=overwrite)
    short = {
        "member": "member",
        "seed": "seed",
        "steps": "steps",
        "held_out_loss": "held-out loss",
        "sink_heads": "sink heads",
        "key0_mass": "key-0 mass",
    }
    console.print(escape(table[list(short)].rename(columns=short).round(3).to_string(index=False)), soft_wrap=True)  # ~60 columns: no wrap
    console.print(escape(f"wrote {Path(out) / 'summary.csv'}, {Path(out) / 'log.csv'} and one model folder per run in {out}"), soft_wrap=True)


@commands.command("zoo-measure")
def zoo_measure(
    zoo: Path | None = typer.Option(
        None, help="The family's folder, as poslens zoo wrote it (zoo.json, summary.csv, held_out.jsonl, one folder per run)."
    ),
    out: Path = typer.Option(..., help="Where the small tables go (runs, emergence, figures, family, claims .csv; e.g. docs/zoo_data)."),
    work: Path | None = typer.Option(None, help="Where each run's Study folder goes (the parts as parquet; large, not for committing)."),
    n_seqs: int = typer.Option(ZooMeasureOptions.n_seqs, min=1, help="Held-out sequences measured per run."),
    seq_len: int | None = typer.Option(None, min=2, help="Tokens per sequence (default: the family's training T)."),
    groups: int = typer.Option(ZooMeasureOptions.groups, min=2, help="Groups of sequences for the intervals."),
    early: int = typer.Option(ZooMeasureOptions.early, min=2, help="Q: the early window is 1 ≤ i < Q."),
    batch_size: int = typer.Option(ZooMeasureOptions.batch_size, min=1, help="Sequences per forward pass."),
    tau: float = setting_option("tau"),
    relativize_seqs: int = typer.Option(ZooMeasureOptions.relativize_seqs, min=2, help="Sequences of the relativization (and of its calibration)."),
    replacement: list[str] = typer.Option(
        list(ZooMeasureOptions.replacements),
        callback=cli_options.check_replacements,
        help="BOS replacements: mean, zero, noise, token:eos or token:<id or string>; repeat for several.",
    ),
    power: bool = typer.Option(
        False,
        "--power",
        help="Measure nothing: from --out's figures.csv (a family already measured) and --findings' C4, print how many seeds each "
        "C4 comparison needs and the family that fits 3 h of CPU; write --out/power.csv.",
    ),
    findings: Path = typer.Option(Path("docs/findings_data"), help="With --power: the findings run's claims (the inference-time targets)."),
    parts: str = typer.Option(
        ",".join(p.name for p in zoo_parts()), help="The parts measured, a comma list in this order (the first is needed: C4 reads it)."
    ),
) -> None:
    """Measure every run of a trained zoo family with poslens's parts, seeds as replicates, and decide C4 inside it.

    Leakage and its decomposition, sinks, BOS replacement, sink-path ablation, relativization and the path-specific
    tests, each run measured on the family's held-out text as the measuring commands would; writes
    runs/emergence/figures/family/claims .csv into --out.

    With --power, nothing is measured: the seeds each comparison needs (methodology §9.1) come from the family in --out.

    Example: poslens zoo-measure --zoo results/zoo_bb --out docs/zoo_data --work results/zoo_bb_measure
    """
    from poslens.study.zoo_measure import c4_lines, choose_parts, measure_family

    if power:
        from poslens.study.zoo_power import power_markdown, write_power

        try:
            table, plan = write_power(out, findings)
        except PoslensError as error:
            raise typer.BadParameter(str(error), param_hint="'--out' / '--findings'") from None
        for line in power_markdown(table, plan):
            console.print(escape(line), soft_wrap=True)
        console.print(escape(f"wrote {out / 'power.csv'}"), soft_wrap=True)
        return
    if zoo is None or work is None:
        raise typer.BadParameter("give --zoo (the trained family) and --work (its Study folders), or --power", param_hint="'--zoo'")

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
    chosen = choose_parts(parts)
    with output_folder(out, console):
        claims = measure_family(zoo, out, work, options, chosen, log=lambda message: console.print(escape(message), soft_wrap=True))
    for line in c4_lines(claims):  # a block per comparison: no table to wrap in a narrow terminal
        console.print(escape(line), soft_wrap=True)
    console.print(escape(f"wrote the family's tables in {out}"), soft_wrap=True)
