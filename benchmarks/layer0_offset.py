"""Layer-0 C_res over all queries on tiny random models, against the number of sequences.

Usage:
    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/layer0_offset.py

Layer 0's residual stream holds only token embeddings, so its C_res should be 0.
On random-weight tiny models and random tokens, the all-window interval of
C_res / L excludes 0 at 8 sequences for most kinds (tests/integration/test_compatibility.py
therefore bounds |C_res| < 3% of L there). This prints C_res / L with its 95%
interval at 8 and 64 sequences (T = 32) for a few kinds, to see whether the
offset shrinks with N, as a small-sample bias would.
"""

from __future__ import annotations

import tempfile

import poslens
from poslens.testing import save_tiny_model

KINDS = ("llama", "gemma2", "stablelm", "gemma", "phi")


def main() -> None:
    for kind in KINDS:
        model = poslens.load_model(save_tiny_model(tempfile.mkdtemp(), kind))
        for n in (8, 64):
            corpus = poslens.make_corpus(model, "random", n_seqs=n, seq_len=32, seed=0)
            result = poslens.measure(model, corpus, groups=4 if n == 8 else 8, early=8, progress=False, probe=False)
            row = result.select("c_res", "all", layer=0, head=-1).iloc[0]
            leak = result.value("leakage_pattern", "all", layer=0)
            print(f"{kind:9s} n={n:3d} all c_res/L={row.value / leak:+.2e} [{row.ci_low / leak:+.2e}, {row.ci_high / leak:+.2e}]")


if __name__ == "__main__":
    main()
