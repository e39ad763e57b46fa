"""The sink-path split (methodology §13) against an independent dense reference (``split_reference.py``).

The reference rebuilds the edited heads' rows itself, from each forward's own scores, with its own RoPE for the phase
edit p, and computes the readouts V and R² with explicit arrays. poslens runs
:func:`~poslens.mechanisms.sink_split.sink_path_split`. They must agree to 1e-8 on float64 tiny models with four
layers (so that f averages two): Llama, StableLM (a quarter of each head rotated: transformers' Llama ignores
``partial_rotary_factor``, so the partial-rotary case is StableLM's), Mistral (a sliding window of 8, so rows ≥ 8 do
not see key 0) and Llama under ``ntk:2``.

transformers' eager attention takes its softmax in float32 even for float64 weights: a pattern read from the model
then differs from the float64 softmax of its scores by ~1e-7, above the tolerance. Both sides therefore run under
:class:`Float64Softmax`, which replaces every head's pattern by the float64 softmax of the scores the model computed,
before any edit. Its RMSNorm computes in float32 too, but it needs no such care: both sides feed it the same float64
stream up to ~1e-15, which moves a float32 rounding with a probability of order 1e-8 per entry (the reference's own
identity edits reproduce the unedited residual stream to ~1e-15). The last two tests run poslens without the float64
softmax, with an intervention recording every pattern before and after the split's edit: the rows it rebuilds sum to 1
within 1e-5, and it changes nothing else (row 0, the rows that do not see key 0, the other heads), as the spec says.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import poslens
from poslens.measurement.arguments import Intervention
from poslens.testing import save_tiny_model

sys.path.insert(0, str(Path(__file__).parents[1]))
import path_reference as pr  # noqa: E402
import split_reference as sr  # noqa: E402

pytestmark = pytest.mark.integration

N_SEQS, SEQ_LEN, GROUPS, EARLY, PENALTY, OFFSET, BATCH = 8, 24, 4, 8, 0.1, 5, 4
HEADS = [(0, 1), (1, 0), (2, 3)]
TOL = 1e-8
CASES = {"llama": ("llama", None), "stablelm": ("stablelm", None), "mistral": ("mistral", None), "llama-ntk2": ("llama", "ntk:2")}
RUNS = ("none", *sr.EDITS)


def attn_scores(layer: int) -> str:
    """The bridge's hook on a layer's pre-softmax scores."""
    return f"blocks.{layer}.attn.hook_attn_scores"


def attn_pattern(layer: int) -> str:
    """The bridge's hook on a layer's attention pattern."""
    return f"blocks.{layer}.attn.hook_pattern"


class Float64Softmax(Intervention):
    """Every head's pattern replaced by the float64 softmax of the scores the model computed (masked entries excluded)."""

    label = "float64-softmax"

    def hooks(self, model: Any, tokens: torch.Tensor) -> list:
        """A hook keeping each layer's scores, and one replacing its pattern."""
        kept: dict[int, torch.Tensor] = {}

        def keep(layer: int):
            def fn(scores: torch.Tensor, hook: Any) -> None:
                kept[layer] = scores.detach().to(torch.float64)

            return fn

        def softmax(layer: int):
            def fn(pattern: torch.Tensor, hook: Any) -> torch.Tensor:
                scores = kept[layer]
                return torch.softmax(scores.masked_fill(~sr.visible(scores), float("-inf")), -1).to(pattern.dtype)

            return fn

        layers = range(model.n_layers)
        return [(attn_scores(l), keep(l)) for l in layers] + [(attn_pattern(l), softmax(l)) for l in layers]

    def hooks_after_capture(self, model: Any, tokens: torch.Tensor) -> list:
        """None."""
        return []

    def describe(self) -> dict[str, Any]:
        """The intervention's name."""
        return {"intervention": self.label}


class PatternRecorder(Intervention):
    """Records, per batch of every run, each layer's scores and pattern before the split's edit (``hooks``) and the
    pattern after it (``hooks_after_capture``)."""

    label = "pattern-recorder"

    def __init__(self) -> None:
        self.batches: list[dict[str, Any]] = []

    def _record(self, store: dict, layer: int):
        def fn(x: torch.Tensor, hook: Any) -> None:
            store[layer] = x.detach().to(torch.float64).clone()

        return fn

    def hooks(self, model: Any, tokens: torch.Tensor) -> list:
        """Opens a new batch record; keeps the scores and the pattern as they reach the split."""
        batch = {"tokens": tokens.clone(), "scores": {}, "before": {}, "after": {}}
        self.batches.append(batch)
        layers = range(model.n_layers)
        return [(attn_scores(l), self._record(batch["scores"], l)) for l in layers] + [
            (attn_pattern(l), self._record(batch["before"], l)) for l in layers
        ]

    def hooks_after_capture(self, model: Any, tokens: torch.Tensor) -> list:
        """Keeps the pattern as the split left it, in the batch record ``hooks`` opened."""
        batch = self.batches[-1]
        assert torch.equal(batch["tokens"], tokens), "hooks_after_capture came for another batch than hooks"
        return [(attn_pattern(l), self._record(batch["after"], l)) for l in range(model.n_layers)]

    def describe(self) -> dict[str, Any]:
        """The intervention's name."""
        return {"intervention": self.label}


def sink_path_split(model, corpus, interventions):
    """poslens' split with this file's settings."""
    from poslens.mechanisms.sink_split import sink_path_split as split

    kwargs = dict(offset=OFFSET, groups=GROUPS, early=EARLY, batch_size=BATCH, penalty=PENALTY)
    return split(model, corpus, heads=HEADS, **kwargs, shams=False, every_head_phase=False, interventions=interventions, progress=False)


def build(tmp_path_factory, name: str):
    """A float64 tiny model of the case ``name`` (four layers) and its random corpus."""
    kind, variant = CASES[name]
    folder = save_tiny_model(tmp_path_factory.mktemp(name), kind, seed=3, initializer_range=0.1, num_hidden_layers=4)
    model = poslens.load_model(folder, variant=variant or "base", dtype=torch.float64)
    return model, poslens.make_corpus(model, "random", n_seqs=N_SEQS, seq_len=SEQ_LEN, seed=0)


@pytest.fixture(scope="module", params=list(CASES))
def case(request, tmp_path_factory):
    """A model, its corpus and the reference's split."""
    model, corpus = build(tmp_path_factory, request.param)
    reference = sr.sink_split_reference(model, corpus.tokens, HEADS, GROUPS, OFFSET, PENALTY, batch_size=BATCH)
    return request.param, model, corpus, reference


@pytest.fixture(scope="module")
def compared(case):
    """The case and poslens' split table under the float64 softmax."""
    pytest.importorskip("poslens.mechanisms.sink_split")
    name, model, corpus, reference = case
    return name, model, reference, sink_path_split(model, corpus, [Float64Softmax()]).table


def close(got: float, want: float) -> bool:
    """Within TOL, relative where |want| > 1."""
    return abs(got - want) <= TOL * max(1.0, abs(want))


# ----- the reference on its own -----------------------------------------------------------------------------------


def test_the_reference_identity_edits_reproduce_the_unedited_run(case):
    """m without its profile shift (x_i = s_i0 − ℓ_i), p moving each query to its own position, and both: the
    unedited forward again, to 1e-10 in every pattern, residual stream and readout."""
    name, model, corpus, reference = case
    ref = pr.ReferenceForward(model)
    seq_groups = sr.group_of(N_SEQS, GROUPS)
    unedited = reference.forwards["none"]
    own = torch.arange(SEQ_LEN)
    for kind, options in (("m", dict(profile=False)), ("p", dict(phase_positions=own)), ("mp", dict(profile=False, phase_positions=own))):
        edit = sr.SplitEdit(ref, kind, reference.stats, seq_groups, list(model.sliding_windows), OFFSET, SEQ_LEN, **options)
        forward = ref.run(corpus.tokens, edit_scores=edit.edit_scores, edit_pattern=edit.edit_pattern, batch_size=BATCH)
        for layer in range(model.n_layers):
            assert np.abs(forward.patterns[layer] - unedited.patterns[layer]).max() < 1e-10, (name, kind, layer)
            assert np.abs(forward.resid[layer] - unedited.resid[layer]).max() < 1e-10, (name, kind, layer)
        levels = sr.levels_of(forward.resid, unedited.resid, seq_groups, GROUPS, PENALTY)
        for readout in sr.READOUTS:
            assert np.abs(levels[readout] - reference.levels[(readout, "none")]).max() < 1e-10, (name, kind, readout)


def test_the_reference_edits_rebuild_rows_that_sum_to_one_and_move_the_model(case):
    """Each rebuilt row sums to 1; rows outside R_l and the other heads keep the unedited softmax at layer 0 (whose
    inputs no edit reaches); s sets a_i0 = abar^(−g); every edit moves the readouts by far more than the tolerance."""
    name, model, corpus, reference = case
    seq_groups = sr.group_of(N_SEQS, GROUPS)
    unedited = reference.forwards["none"]
    for run in sr.EDITS:
        forward = reference.forwards[run]
        for (layer, head), st in reference.stats.items():
            rows = forward.patterns[layer][:, head]
            assert np.abs(rows.sum(-1) - 1).max() < 1e-12, (name, run, layer, head)
            if run == "s":
                assert np.abs(rows[:, st.rows, 0] - st.abar[seq_groups][:, None]).max() < 1e-15
        others = [h for h in range(model.n_heads) if (0, h) not in reference.stats]
        assert np.array_equal(forward.patterns[0][:, others], unedited.patterns[0][:, others])
        for _, head in [lh for lh in reference.stats if lh[0] == 0]:
            outside = ~reference.stats[(0, head)].rows
            assert np.array_equal(forward.patterns[0][:, head, outside], unedited.patterns[0][:, head, outside])
        assert max(abs(reference.f[(r, run)] - reference.f[(r, "none")]) for r in sr.READOUTS) > 1e3 * TOL, (name, run)


def test_the_reference_phase_edit_is_the_key_phase_freeze_at_key_zero(case):
    """At layer 0, p's a_i0 in an edited head is softmax(s)_0 with s_i0 replaced by scale·⟨R_D q_i, R_0 k_0⟩: the key-0
    column of path_reference's own key-phase edit (through the model's float32 softmax, hence 1e-6)."""
    name, model, corpus, reference = case
    ref = pr.ReferenceForward(model)
    frozen = ref.run(corpus.tokens[:BATCH], edit_scores=ref.key_phase_edit(0, OFFSET, lambda layer: model.sliding_windows[layer]))
    for (layer, head), st in reference.stats.items():
        if layer == 0:
            want = frozen.patterns[0][:, head, st.rows, 0]
            got = reference.forwards["p"].patterns[0][:BATCH, head, st.rows, 0]
            assert np.abs(got - want).max() < 1e-6, name
            assert np.abs(got - reference.forwards["none"].patterns[0][:BATCH, head, st.rows, 0]).max() > 1e-3, name


# ----- poslens against the reference ------------------------------------------------------------------------------


def test_levels_match_the_reference(compared):
    """Every level row (metric f, readouts V and R², runs none/m/p/mp/s, each layer and layer −1) to 1e-8."""
    name, model, reference, table = compared
    levels = table[(table["metric"] == "f") & (table["kind"] == "level")]
    for readout in sr.READOUTS:
        for run in RUNS:
            rows = levels[(levels["readout"] == readout) & (levels["intervention"] == run)]
            got = dict(zip(rows["layer"].astype(int), rows["value"].astype(float), strict=True))
            assert len(got) == len(rows) == model.n_layers + 1, (name, readout, run, sorted(got))
            for layer in range(model.n_layers):
                want = reference.levels[(readout, run)][layer]
                assert close(got[layer], want), (name, readout, run, layer, got[layer], want)
            assert close(got[-1], reference.f[(readout, run)]), (name, readout, run, got[-1], reference.f[(readout, run)])


def test_derived_figures_match_the_reference(compared):
    """φ_m, φ_p, the interaction, share_m, r1, r2, sink_total, sink_share and coverage, per readout, to 1e-8."""
    name, model, reference, table = compared
    derived = table[(table["kind"] == "derived") & (table["intervention"] == "split")]
    for readout in sr.READOUTS:
        for metric in sr.DERIVED:
            row = derived[(derived["readout"] == readout) & (derived["metric"] == metric)]
            assert len(row) == 1, (name, readout, metric, len(row))
            got, want = float(row["value"].iloc[0]), reference.derived[(readout, metric)]
            assert close(got, want), (name, readout, metric, got, want)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """Mistral (rows ≥ 8 do not see key 0), split by poslens without the float64 softmax, every pattern recorded per
    batch before and after the split's edit: ``{(layer, head): R_l}`` of the edited heads, the model, the batches."""
    pytest.importorskip("poslens.mechanisms.sink_split")
    model, corpus = build(tmp_path_factory, "mistral")
    recorder = PatternRecorder()
    sink_path_split(model, corpus, [recorder])
    assert recorder.batches and all(b["after"] for b in recorder.batches), "poslens never ran the hooks after its edit"
    rows = {lh: torch.as_tensor(sr.key0_rows(SEQ_LEN, model.sliding_windows[lh[0]])) for lh in HEADS}
    return rows, model, recorder.batches


def test_edited_rows_sum_to_one_without_the_float64_softmax(recorded):
    """With the model's own float32 softmax, every row poslens rebuilds (edited heads, rows R_l) sums to 1 within 1e-5,
    and some differ from the model's by more than 1e-2 (the recording does see the edit)."""
    rows, model, batches = recorded
    moved = worst = 0.0
    for batch in batches:
        for (layer, head), r in rows.items():
            edited = batch["after"][layer][:, head, r]
            worst = max(worst, float((edited.sum(-1) - 1).abs().max()))
            moved = max(moved, float((edited[..., 0] - batch["before"][layer][:, head, r, 0]).abs().max()))
    assert worst < 1e-5, worst
    assert moved > 1e-2, moved


def test_nothing_but_the_edited_rows_changes_without_the_float64_softmax(recorded):
    """The spec: row 0 and the rows outside R_l are never touched, nor the heads the split does not edit. Without the
    float64 softmax a rewrite of those rows (even as their own softmax, recomputed in float64) shows as a change of
    order 1e-8 from the model's float32 pattern."""
    rows, model, batches = recorded
    worst: dict[str, float] = {"row 0": 0.0, "rows outside R_l": 0.0, "other heads": 0.0}
    for batch in batches:
        for layer in range(model.n_layers):
            change = (batch["after"][layer] - batch["before"][layer]).abs()
            edited = [head for l, head in rows if l == layer]
            others = [head for head in range(model.n_heads) if head not in edited]
            worst["other heads"] = max(worst["other heads"], float(change[:, others].max()))
            for head in edited:
                outside = ~rows[(layer, head)]
                outside[0] = False
                worst["row 0"] = max(worst["row 0"], float(change[:, head, 0].max()))
                worst["rows outside R_l"] = max(worst["rows outside R_l"], float(change[:, head, outside].max()))
    assert all(v == 0.0 for v in worst.values()), f"the split changed what it must not touch, by up to {worst}"
