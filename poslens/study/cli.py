"""The ``poslens`` command: wiring only; every computation lives in the library."""

from __future__ import annotations

import os
import platform
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

import poslens
from poslens.runtime import distributed
from poslens.model.registry import REGISTRY

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False, help="Where does absolute position come from in RoPE transformers?")
console = Console()


def _memory_option(value: str) -> str:
    """Check ``--max-memory`` when the command line is parsed."""
    if value.lower() in ("free", "auto"):
        return value
    from poslens.runtime.memory import parse_bytes

    try:
        parse_bytes(value)
    except ValueError as error:
        raise typer.BadParameter(str(error)) from error
    return value


def _version(value: bool) -> None:
    if value:
        console.print(f"poslens {poslens.__version__}")
        raise typer.Exit()


@app.callback()
def main(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version and exit."),
) -> None:
    """poslens: attribute absolute position in attention to the causal mask and to position 0.

    Example: poslens --version
    """


@app.command()
def models() -> None:
    """List the embedded registry models and whether their packages are installed.

    Example: poslens models
    """
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


def _writable_dir(path: Path) -> Path:
    """The output folder, created and checked for writing before any model is loaded."""
    from poslens.measurement.result import OutputNotWritableError, ensure_writable_dir

    try:
        return ensure_writable_dir(path)
    except OutputNotWritableError as error:
        raise typer.BadParameter(str(error), param_hint="'--out'") from error


def _variant_option(value: str) -> str:
    """Check ``--variant`` when the command line is parsed, before any model is loaded."""
    try:
        poslens.parse_variant(value)
    except ValueError as error:
        raise typer.BadParameter(str(error)) from error
    return value


def _quantized_note(model) -> str:
    return f" — weights {model.quantized}" if model.quantized else ""


@app.command()
def leakage(
    model: str = typer.Option(..., help="Registry name, local model folder, or a model id in the local HF cache."),
    n_seqs: int = typer.Option(32, help="Number of sequences N."),
    seq_len: int = typer.Option(256, help="Tokens per sequence T (position 0 included)."),
    variant: str = typer.Option("base", callback=_variant_option,
                                help="Inference-time variant: ntk:<a>, window:<W>, rope-base:<θ>, joined by '+'."),
    bos: str = typer.Option("bos", help="Position 0: bos, none, or token:<id or string>."),
    corpus: str = typer.Option("docs", help="docs, random, repeat, or a path to .txt/.jsonl/folder."),
    seed: int = typer.Option(0, help="Seed of the corpus sampling."),
    groups: int = typer.Option(8, help="Groups of sequences for the intervals."),
    early: int = typer.Option(32, help="Q: the early window is 1 ≤ i < Q."),
    batch_size: Optional[int] = typer.Option(
        None, help="Sequences per forward pass; default: the largest that fits --max-memory (at most one group)."),
    max_memory: str = typer.Option(
        "free", "--max-memory", callback=lambda v: _memory_option(v),
        help="Memory budget for the whole process, e.g. 8GB or 512MiB; 'free' (default): 80% of the memory free now, "
             "for the forward pass. Picks the batch size, or stops with the numbers and the longest --seq-len that fits."),
    dtype: str = typer.Option("float32", help="Weights' dtype: float32, bfloat16 or float16 (sums stay float64)."),
    device_map: Optional[str] = typer.Option(None, help="transformers device map, e.g. 'auto' to spread a large model over GPUs."),
    out: Path = typer.Option(..., help="Output folder: leakage.parquet and leakage.csv are written there."),
) -> None:
    """Measure position leakage and its mask / residual-stream decomposition (METHOD §3–§5).

    Runs unchanged under `torchrun --nproc_per_node=K` (sequences sharded, sums all-reduced, rank 0 writes).

    Example: poslens leakage --model smollm2-135m --n-seqs 16 --seq-len 128 --max-memory 4GB --out results/leak
    """
    _writable_dir(out)
    loaded = poslens.load_model(model, variant=variant, dtype=dtype, device_map=device_map)
    tokens = poslens.make_corpus(loaded, corpus, n_seqs=n_seqs, seq_len=seq_len, position0=bos, seed=seed)
    result = poslens.measure(loaded, tokens, groups=groups, early=early, batch_size=batch_size, max_memory=max_memory)
    if not distributed.is_main():
        return  # under torchrun, rank 0 prints and writes
    path = result.save(Path(out) / "leakage.parquet")
    for window in ("early", "all"):
        _print_frame(result.summary(window), f"{loaded.name} ({loaded.variant_name}), {window} queries, head mean, 95% CI{_quantized_note(loaded)}")
    console.print(f"wrote {path} and {path.with_suffix('.csv')}")


def _study(model: str, n_seqs: int, seq_len: int, groups: int, seed: int, corpus: str, out: Path, **extra):
    from poslens.study.parts import Settings, Study

    settings = Settings(model=model, n_seqs=n_seqs, seq_len=seq_len, groups=groups, seed=seed, corpus=corpus, **extra)
    return Study(settings, out, log=lambda message: console.print(escape(message)))


_MODEL = typer.Option("smollm2-135m", help="Registry name, local model folder, or a model id in the local HF cache.")
_N_SEQS = typer.Option(16, help="Number of sequences N.")
_SEQ_LEN = typer.Option(128, help="Tokens per sequence T.")
_GROUPS = typer.Option(8, help="Groups of sequences for the intervals.")
_SEED = typer.Option(0, help="Seed of the corpus sampling.")
_CORPUS = typer.Option("docs", help="docs, random, repeat, or a path to .txt/.jsonl/folder.")
_OUT = typer.Option(..., help="Output folder.")


def _show(result, metric: str, title: str) -> None:
    rows = result.table[(result.table["metric"] == metric) & (result.table["head"] == -1)]
    Console(width=max(console.width, 130)).print(
        escape(title), rows[["intervention", "layer", "query_window", "value", "ci_low", "ci_high"]].to_string(index=False)
    )


@app.command()
def sinks(model: str = _MODEL, n_seqs: int = _N_SEQS, seq_len: int = _SEQ_LEN, groups: int = _GROUPS, seed: int = _SEED,
          corpus: str = _CORPUS, tau: float = typer.Option(0.3, help="Sink-reading threshold τ."), out: Path = _OUT) -> None:
    """Sink score of every head and sink-reading head counts per layer (METHOD §6).

    Example: poslens sinks --model smollm2-135m --n-seqs 16 --seq-len 128 --tau 0.3 --out results/quick
    """
    result = _study(model, n_seqs, seq_len, groups, seed, corpus, out, tau=tau).sinks()
    counts = result.table[result.table["metric"] == "sink_heads"]
    console.print(counts[["layer", "value", "ci_low", "ci_high"]].to_string(index=False))


@app.command("bos-swap")
def bos_swap(model: str = _MODEL, n_seqs: int = _N_SEQS, seq_len: int = _SEQ_LEN, groups: int = _GROUPS, seed: int = _SEED,
             corpus: str = _CORPUS,
             replacement: list[str] = typer.Option(["mean"], help="mean, zero, noise or token:<id or string>; repeat for several."),
             out: Path = _OUT) -> None:
    """Replace the BOS embedding and report the reduction of C_res (METHOD §7).

    Example: poslens bos-swap --model smollm2-135m --replacement mean --replacement zero --out results/quick
    """
    result = _study(model, n_seqs, seq_len, groups, seed, corpus, out, replacements=tuple(replacement)).bos_swap()
    _show(result, "reduction", "reduction of C_res = 1 − C_res(after)/C_res(before)")


@app.command("ablate-sinks")
def ablate_sinks(model: str = _MODEL, n_seqs: int = _N_SEQS, seq_len: int = _SEQ_LEN, groups: int = _GROUPS, seed: int = _SEED,
                 corpus: str = _CORPUS, tau: float = typer.Option(0.3, help="Sink-reading threshold τ."), out: Path = _OUT) -> None:
    """Ablate the sink path of sink-reading heads and report the reduction of C_res (METHOD §7).

    Example: poslens ablate-sinks --model smollm2-135m --tau 0.3 --out results/quick
    """
    result = _study(model, n_seqs, seq_len, groups, seed, corpus, out, tau=tau).ablate_sinks()
    _show(result, "reduction", "reduction of C_res under sink-path ablation")


@app.command()
def fingerprint(model: str = _MODEL, n_seqs: int = typer.Option(16, help="Sequences per setting."),
                seq_len: int = typer.Option(48, help="Tokens per sequence."), groups: int = _GROUPS, seed: int = _SEED,
                tau: float = typer.Option(0.3, help="Sink-reading threshold τ."), out: Path = _OUT) -> None:
    """Position-0 fingerprint: dispersion with and without BOS, trajectory similarity, readout (METHOD §8).

    Example: poslens fingerprint --model smollm2-135m --n-seqs 16 --seq-len 48 --out results/quick
    """
    study = _study(model, n_seqs, 128, groups, seed, "docs", out, tau=tau, fingerprint_seqs=n_seqs, fingerprint_len=seq_len)
    result = study.fingerprint()
    rows = result.table[(result.table["layer"] == -1)]
    console.print(rows[["intervention", "metric", "value", "ci_low", "ci_high"]].to_string(index=False))


@app.command("compare")
def compare_command(n_seqs: int = typer.Option(8, help="Sequences per case."),
                    seq_len: int = typer.Option(640, help="Tokens per sequence (beyond gemma3's 512 window by default)."),
                    groups: int = _GROUPS, seed: int = _SEED, corpus: str = _CORPUS,
                    full: bool = typer.Option(False, help="All NTK α ∈ {2,4,8} and windows {64,128}, not one of each."),
                    out: Path = _OUT) -> None:
    """C_res and C_mask by layer for standard RoPE, NTK and sliding-window cases (C4).

    Example: poslens compare --n-seqs 8 --seq-len 640 --out results/quick
    """
    study = _study("smollm2-135m", 16, 128, groups, seed, corpus, out, compare_seqs=n_seqs, compare_len=seq_len, compare_quick=not full)
    result = study.compare()
    rows = result.table[(result.table["layer"] == -1) & (result.table["head"] == -1) & result.table["metric"].isin(["c_res", "c_mask"])]
    console.print(rows[["model", "variant", "query_window", "metric", "value", "ci_low", "ci_high"]].to_string(index=False))
    console.print("variants other than 'base' are inference-time changes of smollm2-135m; weights are 4-bit quantized")


@app.command()
def claims(out: Path = typer.Option(..., help="Folder holding the parts written by the other commands.")) -> None:
    """Compute the verdicts C1–C6 from the tables in a folder; writes claims.csv.

    Example: poslens claims --out results/quick
    """
    from poslens.measurement.result import Result
    from poslens.study.parts import Settings, Study

    parts = {}
    for name in ("leakage", "bos-swap", "ablate-sinks", "compare", "fingerprint"):
        path = Path(out) / f"{name}.parquet"
        if path.exists():
            parts[name] = Result.load(path)
    if not parts:
        raise typer.BadParameter(f"{out} holds none of leakage/bos-swap/ablate-sinks/compare/fingerprint .parquet; run those commands first")
    table = Study(Settings(), out).claims(parts)
    console.print(table[["claim", "model", "figure", "ci_low", "ci_high", "verdict"]].to_string(index=False))
    console.print(f"wrote {Path(out) / 'claims.csv'}")


def _calibrate_seconds_per_token(model_name: str) -> float:
    """Time one short forward with capture hooks, to estimate a run's duration."""
    import time as _time

    from poslens.measurement.pipeline import collect_sums

    model = poslens.load_model(model_name)
    corpus = poslens.make_corpus(model, "random", n_seqs=2, seq_len=256, position0="bos", seed=0)
    start = _time.perf_counter()
    collect_sums(model, corpus, groups=2, batch_size=2, progress=False)
    return (_time.perf_counter() - start) / (2 * 256)


@app.command()
def report(
    out: Path = typer.Option(Path("results/quick"), help="Output folder (reruns reuse finished parts)."),
    quick: bool = typer.Option(True, "--quick/--full", help="--quick: minutes on a laptop CPU; --full: the settings a paper would use."),
    model: str = typer.Option("smollm2-135m", help="Model for the baseline parts (leakage, sinks, interventions, fingerprint)."),
    skip_compare: bool = typer.Option(False, help="Skip the architecture comparison (it loads gemma3-270m)."),
    n_seqs: Optional[int] = typer.Option(None, help="Override the preset's number of sequences."),
    seq_len: Optional[int] = typer.Option(None, help="Override the preset's sequence length."),
    groups: Optional[int] = typer.Option(None, help="Override the preset's number of groups."),
    fingerprint_seqs: Optional[int] = typer.Option(None, help="Override the fingerprint's sequences per setting."),
    fingerprint_len: Optional[int] = typer.Option(None, help="Override the fingerprint's sequence length."),
    compare_seqs: Optional[int] = typer.Option(None, help="Override the comparison's sequences per case."),
    compare_len: Optional[int] = typer.Option(None, help="Override the comparison's sequence length."),
) -> None:
    """Run the whole study and write report.html, every table (Parquet + CSV), claims.csv and run.json.

    Example: poslens report --quick --out results/quick
    """
    import json
    import time as _time

    import torch

    from poslens.study.report import build_report
    from poslens.study.parts import Settings, Study

    _writable_dir(out)
    overrides = {k: v for k, v in dict(n_seqs=n_seqs, seq_len=seq_len, groups=groups, fingerprint_seqs=fingerprint_seqs,
                                        fingerprint_len=fingerprint_len, compare_seqs=compare_seqs, compare_len=compare_len).items()
                 if v is not None}
    settings = Settings.quick(model=model, **overrides) if quick else Settings.full(model=model, **overrides)
    study = Study(settings, out, log=lambda message: console.print(escape(message)))
    if not quick:
        per_token = _calibrate_seconds_per_token(model)
        s = settings
        cases = 4 if s.compare_quick else 7
        # each measurement makes two passes (the second for the per-sequence counterfactual)
        tokens = 2 * s.n_seqs * s.seq_len * (1 + 1 + len(s.replacements)) * (1 + s.seq_len / 1024)
        tokens += (2 * s.fingerprint_seqs + 256) * s.fingerprint_len
        tokens += 2 * (cases + 1) * s.compare_seqs * s.compare_len * (1 + s.compare_len / 1024)  # gemma3-270m: about twice
        console.print(f"--full: expecting roughly {tokens * per_token / 60:.0f} minutes on this machine "
                      f"(calibrated at {per_token * 1e3:.1f} ms per token; gemma3-270m costs more per token)")
    plan = ["leakage", "sinks", "bos-swap", "ablate-sinks", "fingerprint"] + ([] if skip_compare else ["compare"])
    parts, timings = {}, {}
    for number, name in enumerate(plan, start=1):
        console.rule(escape(f"part {number}/{len(plan)}: {name}"))
        start = _time.perf_counter()
        parts[name] = getattr(study, name.replace("-", "_"))()
        timings[name] = parts[name].meta.get("part_seconds", _time.perf_counter() - start)  # compute time, also when reused
    claims_table = study.claims(parts)
    settings_dict = {k: v for k, v in settings.__dict__.items() if k != "cases"}
    page = build_report(parts, claims_table, settings_dict, Path(out) / "report.html")
    models = {}
    for result in parts.values():
        for meta in [result.meta] + result.meta.get("parts", []):
            if "model" in meta and isinstance(meta["model"], dict):
                described = meta["model"]
                models[f"{described['model']} ({described['variant']})"] = {
                    "source": described.get("source"), "sha256": described.get("source_sha256"), "quantized": described.get("quantized")}
    leakage_meta = parts["leakage"].meta
    run = {
        "poslens_version": poslens.__version__,
        "preset": "quick" if quick else "full",
        "command": "poslens " + " ".join(sys.argv[1:]),
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "cuda": torch.cuda.is_available()},
        "settings": settings_dict,
        "models": models,
        "corpus": leakage_meta.get("corpus"),
        "versions": leakage_meta.get("versions"),
        "timings_seconds": timings,
        "parts": {name: f"{name}.parquet" for name in parts},
    }
    (Path(out) / "run.json").write_text(json.dumps(run, indent=1, default=str))
    console.print(claims_table[["claim", "model", "verdict"]].to_string(index=False))
    console.print(f"wrote {page}, {Path(out) / 'claims.csv'}, {Path(out) / 'run.json'}")


def run() -> None:
    """Entry point of the ``poslens`` command: known failures print one line, not a traceback.

    Example: poslens leakage --model no-such-model --out results/x prints
    ``error: unknown model 'no-such-model'. Known names: ...`` and exits with status 1.
    """
    from poslens.capture.leakage_capture import MaskMismatchError, NonFiniteScoresError

    known = (ValueError, KeyError, FileNotFoundError, ModuleNotFoundError, MemoryError, OSError,
             NonFiniteScoresError, MaskMismatchError, RuntimeError)
    try:
        app()  # click handles usage errors and Ctrl-C itself
    except known as error:
        console.print(f"[bold red]error:[/] {escape(str(error))}")
        raise SystemExit(1)

if __name__ == "__main__":
    run()
