"""What the compiled loops cost a process: the first `measure` with a fresh numba cache, with a warm one, and without them.

Usage:
    python benchmarks/compile_cost.py

Each case runs in its own Python process: the first ``measure`` of a tiny Llama (8 × 32 random tokens, the
defaults) and a second one right after, timed inside the process. ``fresh cache`` points ``NUMBA_CACHE_DIR``
at an empty folder (numba compiles every loop the run uses), ``warm cache`` at the same folder again (numba
loads them), and ``POSLENS_FUSED=0`` runs the torch and numpy routes. Prints a Markdown table.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

RUN = """
import tempfile, time, warnings
warnings.simplefilter("ignore")
import poslens
from poslens.testing import save_tiny_model
model = poslens.load_model(save_tiny_model(tempfile.mkdtemp(), "llama"), device="cpu")
corpus = poslens.make_corpus(model, "random", n_seqs=8, seq_len=32, seed=0)
start = time.perf_counter(); poslens.measure(model, corpus, progress=False); first = time.perf_counter() - start
start = time.perf_counter(); poslens.measure(model, corpus, progress=False); second = time.perf_counter() - start
print(f"{first:.2f} {second:.2f}")
"""


def timed(env: dict[str, str]) -> tuple[float, float]:
    """The first and second ``measure`` in a fresh process with ``env`` added to the environment.

    Args:
        env: Variables to set.

    Returns:
        ``(first, second)`` in seconds.

    Example:
        >>> timed({"POSLENS_FUSED": "0"})  # doctest: +SKIP
        (0.58, 0.09)
    """
    done = subprocess.run([sys.executable, "-c", RUN], env={**os.environ, "HF_HUB_OFFLINE": "1", **env}, capture_output=True, text=True, check=True)
    first, second = done.stdout.split()[-2:]
    return float(first), float(second)


def main() -> None:
    cache = tempfile.mkdtemp(prefix="numba-cache-")
    cases = [("fresh cache", {"NUMBA_CACHE_DIR": cache}), ("warm cache", {"NUMBA_CACHE_DIR": cache}), ("POSLENS_FUSED=0", {"POSLENS_FUSED": "0"})]
    print("| case | first measure (s) | second measure (s) |")
    print("|---|---|---|")
    for name, env in cases:
        first, second = timed(env)
        print(f"| {name} | {first:.2f} | {second:.2f} |")


if __name__ == "__main__":
    main()
