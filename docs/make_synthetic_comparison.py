"""Regenerate methodology §4.0's synthetic comparison: version 1 against version 2 on control heads.

Builds the control heads of methodology §4.4 as attention scores (no model), measures
them with :func:`poslens.measurement.pipeline.measure_scores`, and writes one Markdown table:
for each head and query window, the leakage of the pattern L(log a) and the
residual share ρ_res = C_res / L by

- version 1, the logit split (``c_res_logit``; not invariant to per-query shifts),
- version 2 mean-field (``c_res_meanfield``, ``rho_res_meanfield``),
- version 2 per-sequence (``c_res``, ``rho_res``), the figure claims use,

with the 95% jackknife intervals of ``c_res_meanfield`` and ``c_res``. Every
figure on the page comes from the package's computation; nothing is typed in.

Usage::

    .venv/bin/python docs/make_synthetic_comparison.py [--out docs/synthetic_comparison.md]

Deterministic (seeded noise); about half a minute on 2 CPU cores.
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import torch

from poslens.measurement.pipeline import measure_scores

T = 96  # sequence length
EARLY = 32  # Q: the early window is 1 ≤ i < Q
N_SEQS = 32
GROUPS = 8
WINDOW = 16  # the sliding window of head (e)
SEED = 0
NEG = torch.finfo(torch.float64).min

I = torch.arange(T, dtype=torch.float64)[:, None]  # query position i
J = torch.arange(T, dtype=torch.float64)[None, :]  # key position j
DELTA = I - J
KEY0 = (J == 0).to(torch.float64).expand(T, T)


def kernel() -> torch.Tensor:
    """k(Δ) = −0.05·Δ + sin(0.3·Δ): relative, and varying inside offset bins."""
    return -0.05 * DELTA + torch.sin(0.3 * DELTA)


def smooth() -> torch.Tensor:
    """The smooth kernel −0.05·Δ."""
    return -0.05 * DELTA


@dataclass
class Head:
    """One synthetic head: its label, description, logits [T, T] and per-sequence noise sd."""

    label: str
    description: str
    logits: torch.Tensor
    noise_sd: float = 0.0


def causal_heads() -> list[Head]:
    """The heads measured under a causal mask."""
    a = kernel()
    d = a + 3.0 * KEY0
    return [
        Head("(a)", "k(Δ): purely relative", a),
        Head("(b)", "k(Δ) + 2·log(i+1): per-row shift", a + 2.0 * torch.log(I + 1).expand(T, T)),
        Head("(c)", "constant logits", torch.zeros(T, T, dtype=torch.float64)),
        Head("(d)", "k(Δ) + 3·[j=0]: constant key-0 bias", d),
        Head("(f)", "k(Δ) + 0.5·log(j+1): key-position term", a + 0.5 * torch.log(J + 1).expand(T, T)),
        Head("(f′)", "−0.05·Δ + 0.5·log(j+1): key-position term, smooth kernel", smooth() + 0.5 * torch.log(J + 1).expand(T, T)),
        Head("(g)", "−0.05·Δ + [j=0]·(3 + 0.05·i): key-0 logit growing with i", smooth() + KEY0 * (3.0 + 0.05 * I)),
        Head("(i)", "(a) + noise sd 0.3", a, 0.3),
        Head("(i)", "(a) + noise sd 1.0", a, 1.0),
        Head("(i)", "(d) + noise sd 0.3", d, 0.3),
        Head("(i)", "(d) + noise sd 1.0", d, 1.0),
    ]


def window_heads() -> list[Head]:
    """The heads measured under a sliding window of width ``WINDOW``."""
    a = kernel()
    return [
        Head("(e)", f"(a) under a sliding window W = {WINDOW}", a),
        Head("(e)", f"(d) under a sliding window W = {WINDOW}", a + 3.0 * KEY0),
    ]


def scores(heads: list[Head], window: int | None, generator: torch.Generator) -> torch.Tensor:
    """Scores [N, H, T, T] in float64, invisible entries at the dtype minimum."""
    visible = J <= I
    if window is not None:
        visible = visible & (I - window < J)
    out = torch.empty(N_SEQS, len(heads), T, T, dtype=torch.float64)
    for h, head in enumerate(heads):
        logits = head.logits.expand(N_SEQS, T, T)
        if head.noise_sd > 0:
            logits = logits + head.noise_sd * torch.randn(N_SEQS, T, T, dtype=torch.float64, generator=generator)
        out[:, h] = logits.masked_fill(~visible, NEG)
    return out


def fmt(x: float, digits: int = 4) -> str:
    """A figure with ``digits`` decimals; a true zero prints without a sign."""
    text = f"{x:.{digits}f}"
    return text[1:] if text.startswith("-") and float(text) == 0 else text


def sci(x: float) -> str:
    """A component C in scientific notation, so floating-point zeros and the noise floor both show."""
    return f"{x:.1e}"


def rows(heads: list[Head], window: int | None, generator: torch.Generator) -> list[list[str]]:
    """Measure ``heads`` in one call and return one table row per head and query window."""
    result = measure_scores([scores(heads, window, generator)], groups=GROUPS, early=EARLY, layer_windows=[window])
    out = []
    for h, head in enumerate(heads):
        for query_window in ("all", "early"):

            def value(metric: str, query_window: str = query_window, h: int = h) -> float:
                return result.value(metric, query_window, layer=0, head=h)

            def interval(metric: str, query_window: str = query_window, h: int = h) -> str:
                r = result.select(metric, query_window, layer=0, head=h).iloc[0]
                return f"{sci(r['value'])} [{sci(r['ci_low'])}, {sci(r['ci_high'])}]"

            leak = value("leakage_pattern")
            out.append(
                [
                    head.label,
                    head.description,
                    query_window,
                    fmt(leak),
                    fmt(value("c_res_logit") / leak, 2),
                    fmt(value("rho_res_meanfield"), 2),
                    interval("c_res_meanfield"),
                    fmt(value("rho_res"), 2),
                    interval("c_res"),
                ]
            )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="docs/synthetic_comparison.md", help="Markdown file to write")
    args = parser.parse_args()

    torch.manual_seed(SEED)
    torch.set_num_threads(min(2, os.cpu_count() or 1))
    generator = torch.Generator().manual_seed(SEED)
    start = time.perf_counter()
    body = rows(causal_heads(), None, generator) + rows(window_heads(), WINDOW, generator)
    order = ["(a)", "(b)", "(c)", "(d)", "(e)", "(f)", "(f′)", "(g)", "(i)"]
    body.sort(key=lambda row: order.index(row[0]))  # stable: heads keep their order within a label
    seconds = time.perf_counter() - start

    header = [
        "head",
        "logits",
        "queries",
        "L(log a)",
        "ρ_res v1 (logit split)",
        "ρ_res v2 mean-field",
        "C_res v2 mean-field [95%]",
        "ρ_res v2 per-sequence",
        "C_res v2 per-sequence [95%]",
    ]
    table = ["| " + " | ".join(header) + " |", "|" + "|".join(["---"] * 3 + ["---:"] * (len(header) - 3)) + "|"]
    table += ["| " + " | ".join(r) + " |" for r in body]

    today = datetime.now(timezone.utc).strftime("%Y-%m-%d")
    text = f"""# Synthetic comparison: decomposition version 1 against version 2

*Generated by `.venv/bin/python docs/make_synthetic_comparison.py` on {today}
(Python {platform.python_version()}, torch {torch.__version__}). Synthetic heads: no
model is involved. Every figure below is computed by
`poslens.measurement.pipeline.measure_scores` (the streaming code path of `poslens.measure`);
none is typed in.*

This page regenerates the comparison of methodology §4.0 / the methodology's
decomposition section on the control heads of §4.4.

**Settings.** T = {T} tokens; N = {N_SEQS} sequences in G = {GROUPS} groups (95%
jackknife intervals over groups); queries 1 ≤ i < T ("all") and 1 ≤ i < {EARLY}
("early"); i is the query, j the key, Δ = i − j; k(Δ) = −0.05·Δ + sin(0.3·Δ).
Logits are float64, invisible entries at the dtype minimum. Heads without noise
are identical across sequences, so their intervals have zero width. The noise
of the (i) heads is independent per sequence and pair, Gaussian, seeded
(seed {SEED}). One layer per mask: heads (a)–(i) under a causal mask, the (e)
heads under a sliding window of W = {WINDOW}.

**Columns.** L(log a) is `leakage_pattern` (methodology §3.1, binned ΔR² of log a).
Each ρ_res is a residual share C_res / L: version 1 is the logit split
`c_res_logit / leakage_pattern` (not invariant to per-query shifts of the
logits; kept for comparison only, no claim uses it); version 2 mean-field is
`rho_res_meanfield`, the counterfactual of methodology §4.1 fitted to the mean
pattern; version 2 per-sequence is `rho_res`, the counterfactual built per
sequence with a cross-fitted absolute component (methodology §4.4 (i)), which is the
figure claims use. The components C are printed in scientific notation, so that
floating-point zeros and the noise floor both show; methodology §4.4 asks for
C_res = 0 to within 1e-8 of L on (a)–(e), where the mask explains the leakage;
(f) and (g) have logits that depend on absolute position and should not have
C_res = 0; (i) is the noise floor of (a) and (d).

{chr(10).join(table)}
"""
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")
    print(f"wrote {out} in {seconds:.1f} s")


if __name__ == "__main__":
    main()
