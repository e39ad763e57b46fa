"""The ``poslens`` command: wiring only; every computation lives in the library."""

from __future__ import annotations

import typer
from rich.console import Console
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
