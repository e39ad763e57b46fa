"""On the embedded SmolLM2 (4-bit, float32) at 16 × 128 tokens, no pattern edit's row sums are off by more than 1e-5.

The regime that broke the old edits: strong sinks that round a_i0 to 1.0 in
float32. The test finds the sink-reading heads (mean a_i0 over rows i ≥ 1 at
least 0.3) in an unedited pass, checks that the regime is there (some of their
unedited rows have a_i0 == 1.0 exactly), then runs the sink-path ablation and
the mask-only sink profile and reads every edited layer's pattern as the model
uses it. The profile's absolute component is a seeded one of the size of a fit's
(its cells' sd 3 nats), not fitted: what is tested is the row arithmetic under
saturation, and a measurement to fit it would triple the test's time.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import poslens
from poslens.fit.binning import Binning
from poslens.measurement.arguments import Intervention
from poslens.measurement.batching import intervened_forward
from poslens.mechanisms.interventions import SinkAblation
from poslens.mechanisms.mask_only_sink import MaskOnlySinkProfile
from poslens.model import hooks as hook_names

pytestmark = pytest.mark.integration


class RowSums(Intervention):
    """Keeps the largest |row sum − 1| of the given heads, and per head its mean a_i0 and its rows with a_i0 == 1.0."""

    label = "row-sums"

    def __init__(self, heads: list[tuple[int, int]]) -> None:
        self.heads, self.worst, self.saturated, self.key0 = heads, 0.0, {}, {}

    def describe(self) -> dict:
        return {"intervention": "row-sums"}

    def hooks(self, model, tokens):
        by_layer: dict[int, list[int]] = {}
        for layer, head in self.heads:
            by_layer.setdefault(layer, []).append(head)

        def read(chosen: list[int]):
            def hook(pattern: torch.Tensor, hook) -> None:
                rows = pattern[:, chosen, 1:]
                self.worst = max(self.worst, float((rows.double().sum(-1) - 1).abs().max()))
                for k, head in enumerate(chosen):
                    self.key0.setdefault((hook.layer(), head), []).append(rows[:, k, :, 0].double().mean().item())
                    self.saturated[(hook.layer(), head)] = self.saturated.get((hook.layer(), head), 0) + int((rows[:, k, :, 0] == 1.0).sum())

            return hook

        return [(hook_names.attn_pattern(layer), read(chosen)) for layer, chosen in sorted(by_layer.items())]


def test_no_edit_breaks_a_row_on_smollm2(smollm2):
    corpus = poslens.make_corpus(smollm2, "docs", n_seqs=16, seq_len=128, seed=0)
    every_head = RowSums([(layer, head) for layer in range(smollm2.n_layers) for head in range(smollm2.n_heads)])
    for start in range(0, 16, 4):
        intervened_forward(smollm2, corpus.tokens[start : start + 4], [every_head], [])
    means = {head: float(np.mean(values)) for head, values in every_head.key0.items()}
    heads = sorted(head for head, mean in means.items() if mean >= 0.3)
    assert len(heads) > 20, heads
    saturated = sum(every_head.saturated[head] for head in heads)
    assert saturated > 0, "the regime under test: strong sinks that round a_i0 to 1.0 in float32"
    binning = Binning(128, early=32)
    absolute = 3.0 * np.random.default_rng(0).standard_normal((1, smollm2.n_layers, smollm2.n_heads, binning.n_query_bins * binning.n_offset_bins))
    groups = {row.numpy().tobytes(): 0 for row in corpus.tokens}
    edits = [SinkAblation({head: means[head] for head in heads}), MaskOnlySinkProfile(heads, absolute, binning, groups, dose=1.0)]
    for edit in edits:
        after = RowSums(heads)
        for start in range(0, 16, 4):
            logits = intervened_forward(smollm2, corpus.tokens[start : start + 4], [edit, after], [], logits=True)
            assert bool(torch.isfinite(logits).all()), edit.label
        assert after.worst <= 1e-5, (edit.label, after.worst)
