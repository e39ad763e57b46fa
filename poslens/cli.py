"""The ``poslens`` command: wiring only; every computation lives in the library."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

import poslens
from poslens.registry import REGISTRY

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Where does absolute position come from in RoPE transformers?")
console = Console()


def _version(value: bool) -> None:
    if value:
        console.print(f"poslens {poslens.__version__}")
        raise typer.Exit()


@app.callback()
def main(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version and exit."),
) -> None:
    """poslens: attribute absolute position in attention to the causal mask and to position 0."""


@app.command()
def models() -> None:
    """List the embedded registry models and whether their packages are installed."""
    table = Table(title="poslens registry models (weights are 4-bit quantized GGUF)")
    for column in ("name", "architecture", "layers", "heads", "attention", "RoPE base(s)", "size", "installed"):
        table.add_column(column)
    for entry in REGISTRY.values():
        installed = "yes" if entry.installed() else f"no: {entry.install_command}"
        table.add_row(
            entry.name, entry.architecture, str(entry.n_layers), str(entry.n_heads),
            entry.attention, entry.rope_bases, entry.size, installed,
        )
    Console(width=max(console.width, 130)).print(table)


def _print_frame(frame, title: str) -> None:
    table = Table(title=escape(title))
    table.add_column(frame.index.name or "")
    for column in frame.columns:
        table.add_column(str(column))
    for index, row in frame.iterrows():
        table.add_row("all ≥1" if index == -1 else str(index), *[str(v) for v in row])
    Console(width=max(console.width, 150)).print(table)


def _quantized_note(model) -> str:
    return f" — weights {model.quantized}" if model.quantized else ""


@app.command()
def leakage(
    model: str = typer.Option(..., help="Registry name, local model folder, or a model id in the local HF cache."),
    n_seqs: int = typer.Option(32, help="Number of sequences N."),
    seq_len: int = typer.Option(256, help="Tokens per sequence T (position 0 included)."),
    variant: str = typer.Option("base", help="Inference-time variant: ntk:<a>, window:<W>, rope-base:<θ>, joined by '+'."),
    bos: str = typer.Option("bos", help="Position 0: bos, none, or token:<id or string>."),
    corpus: str = typer.Option("docs", help="docs, random, repeat, or a path to .txt/.jsonl/folder."),
    seed: int = typer.Option(0, help="Seed of the corpus sampling."),
    groups: int = typer.Option(8, help="Groups of sequences for the intervals."),
    early: int = typer.Option(32, help="Q: the early window is 1 ≤ i < Q."),
    batch_size: int = typer.Option(4, help="Sequences per forward pass."),
    out: Path = typer.Option(..., help="Output folder: leakage.parquet and leakage.csv are written there."),
) -> None:
    """Measure position leakage and its mask / residual-stream decomposition (METHOD §3–§5)."""
    loaded = poslens.load_model(model, variant=variant)
    tokens = poslens.make_corpus(loaded, corpus, n_seqs=n_seqs, seq_len=seq_len, position0=bos, seed=seed)
    result = poslens.measure(loaded, tokens, groups=groups, early=early, batch_size=batch_size)
    path = result.save(Path(out) / "leakage.parquet")
    for window in ("early", "all"):
        _print_frame(result.summary(window), f"{loaded.name} ({loaded.variant_name}), {window} queries, head mean, 95% CI{_quantized_note(loaded)}")
    console.print(f"wrote {path} and {path.with_suffix('.csv')}")
