"""The split's edits and run (methodology §13.1): identity, shams, windows, refusals, and what the table holds."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import poslens
from poslens.errors import InputError
from poslens.measurement.arguments import Intervention
from poslens.measurement.batching import intervened_forward
from poslens.mechanisms.sink_split import ProbeSizeWarning, sink_path_split
from poslens.mechanisms.sink_split_edits import SinkPathEdit, SinkRowStats, SplitStatistics
from poslens.model import hooks as hook_names
from poslens.testing import save_tiny_model

T = 12


class Float64Softmax(Intervention):
    """Every head's pattern as the float64 softmax of its scores (transformers' eager softmax is float32 even for float64)."""

    label = "float64-softmax"

    def describe(self) -> dict:
        return {"intervention": "float64-softmax"}

    def hooks(self, model, tokens):
        kept = {}

        def keep(layer):
            def hook(scores, hook):
                kept[layer] = scores

            return hook

        def write(layer):
            def hook(pattern, hook):
                return torch.softmax(kept.pop(layer).to(torch.float64), dim=-1).to(pattern.dtype)

            return hook

        out = []
        for layer in range(model.n_layers):
            out += [(hook_names.attn_scores(layer), keep(layer)), (hook_names.attn_pattern(layer), write(layer))]
        return out


class Record(Intervention):
    """Keeps the pattern of every layer as the model uses it."""

    label = "record"

    def __init__(self) -> None:
        self.patterns = {}

    def describe(self) -> dict:
        return {"intervention": "record"}

    def hooks(self, model, tokens):
        def keep(layer):
            def hook(pattern, hook):
                self.patterns[layer] = pattern.detach().clone()

            return hook

        return [(hook_names.attn_pattern(layer), keep(layer)) for layer in range(model.n_layers)]


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    return poslens.load_model(save_tiny_model(tmp_path_factory.mktemp("llama"), "llama"), dtype=torch.float64)


@pytest.fixture(scope="module")
def tokens(llama):
    return poslens.make_corpus(llama, "random", n_seqs=4, seq_len=T, seed=0).tokens


def statistics_of(model, tokens, heads, groups=2) -> SplitStatistics:
    stats = SinkRowStats(heads, groups, tokens.shape[1])
    stats.sequence_groups = np.repeat(np.arange(groups), len(tokens) // groups)
    intervened_forward(model, tokens, [], stats.hooks())
    return stats.finish()


def sequence_of(tokens, groups=2):
    labels = np.repeat(np.arange(groups), len(tokens) // groups)
    return {row.numpy().tobytes(): (int(g), n) for n, (row, g) in enumerate(zip(tokens, labels, strict=True))}


def test_row_statistics_are_the_written_out_sums(llama, tokens):
    heads = [(1, 0), (2, 1)]
    stats = statistics_of(llama, tokens, heads)
    seen = Record()
    kept = {}

    def keep(layer):
        return lambda s, hook: kept.__setitem__(layer, s)

    intervened_forward(llama, tokens, [seen], [(hook_names.attn_scores(layer), keep(layer)) for layer in (1, 2)])
    for layer, head in heads:
        k = 0  # one edited head per layer
        s = kept[layer][:, head].double()
        ell = torch.stack([torch.logsumexp(s[:, i, 1 : i + 1], -1) if i else torch.zeros(len(s), dtype=torch.float64) for i in range(T)], -1)
        ell[:, 0] = 0.0
        torch.testing.assert_close(torch.as_tensor(stats.ell_sum[layer][0, k]), ell[:2].sum(0), rtol=0, atol=1e-10)
        a0 = torch.softmax(s, -1)[..., 0]
        a0[:, 0] = 0.0
        torch.testing.assert_close(torch.as_tensor(stats.key0_sum[layer][1, k]), a0[2:].sum(0), rtol=0, atol=1e-10)


def test_m_with_flat_row_statistics_is_the_identity(llama, tokens):
    """ℓrow(i) − ℓ̄ = 0 at every row (equal ℓ sums): edit m reproduces the unedited forward to 1e-10."""
    heads = [(0, 1), (1, 0), (2, 1)]
    stats = statistics_of(llama, tokens, heads)
    for layer in stats.ell_sum:
        stats.ell_sum[layer][:] = 3.0
    edit = SinkPathEdit("m", heads, stats, sequence_of(tokens), offset=4)
    unedited = intervened_forward(llama, tokens, [Float64Softmax()], [], logits=True)
    edited = intervened_forward(llama, tokens, [Float64Softmax(), edit], [], logits=True)
    torch.testing.assert_close(edited, unedited, rtol=0, atol=1e-10)


def test_each_edit_changes_only_its_heads_and_keeps_rows_exact(llama, tokens):
    heads = [(1, 0)]
    stats = statistics_of(llama, tokens, heads)
    before = Record()
    intervened_forward(llama, tokens, [before], [])
    for kind in ("m", "p", "mp", "s", "sham-m", "sham-p"):
        after = Record()
        intervened_forward(llama, tokens, [SinkPathEdit(kind, heads, stats, sequence_of(tokens), offset=4), after], [])
        pattern = after.patterns[1]
        assert float((pattern[:, 0].sum(-1) - 1).abs().max()) < 1e-12, kind
        torch.testing.assert_close(pattern[:, 1:], before.patterns[1][:, 1:], rtol=0, atol=0)  # other heads of the layer
        torch.testing.assert_close(after.patterns[0], before.patterns[0], rtol=0, atol=0)  # the layer below
        assert float((pattern[:, 0, 1:, 0] - before.patterns[1][:, 0, 1:, 0]).abs().max()) > 1e-6, kind  # the edit acts
        if kind == "s":
            means = stats.cross_fitted(1)[2]  # [G, heads]
            torch.testing.assert_close(pattern[:2, 0, 1:, 0], torch.full((2, T - 1), float(means[0, 0]), dtype=torch.float64))


def test_the_shams_permute_the_factors_shifts_within_each_sequence(llama, tokens):
    heads = [(1, 0), (1, 1)]
    stats = statistics_of(llama, tokens, heads)
    edit = SinkPathEdit("sham-m", heads, stats, sequence_of(tokens), offset=4, seed=3)
    shift = torch.arange(4 * 2 * T, dtype=torch.float64).reshape(4, 2, T)
    rows = np.arange(T) > 0
    permuted = edit._permuted(shift, rows, 1, [0, 1], [0, 1, 2, 3])
    assert torch.equal(permuted[..., 0], shift[..., 0])  # row 0 is never edited
    assert torch.equal(permuted.sort(-1).values, shift.sort(-1).values)  # the same shifts, at other rows
    assert not torch.equal(permuted, shift)
    assert not torch.equal(permuted[0, 0], permuted[1, 0] - (shift[1, 0] - shift[0, 0]))  # each sequence its own order
    torch.testing.assert_close(edit._permuted(shift, rows, 1, [0, 1], [0, 1, 2, 3]), permuted)  # seeded


def test_a_window_leaves_the_rows_that_do_not_see_key0(tmp_path):
    model = poslens.load_model(save_tiny_model(tmp_path, "mistral"), dtype=torch.float64)
    window = model.sliding_windows[1]
    assert window is not None and window < T
    tokens = poslens.make_corpus(model, "random", n_seqs=4, seq_len=T, seed=0).tokens
    stats = statistics_of(model, tokens, [(1, 0)])
    assert stats.sees_key0[1].tolist() == [False] + [i < window for i in range(1, T)]
    before, after = Record(), Record()
    intervened_forward(model, tokens, [before], [])
    intervened_forward(model, tokens, [SinkPathEdit("mp", [(1, 0)], stats, sequence_of(tokens), offset=2), after], [])
    torch.testing.assert_close(after.patterns[1][:, 0, window:], before.patterns[1][:, 0, window:], rtol=0, atol=1e-12)
    assert float((after.patterns[1][:, 0, 1:window, 0] - before.patterns[1][:, 0, 1:window, 0]).abs().max()) > 1e-6


def test_refusals(llama, tokens):
    stats = statistics_of(llama, tokens, [(1, 0)])
    with pytest.raises(InputError, match="one of"):
        SinkPathEdit("q", [(1, 0)], stats, {})
    with pytest.raises(InputError, match="offset D"):
        SinkPathEdit("p", [(1, 0)], stats, {}, offset=-1)
    with pytest.raises(InputError, match="the corpus it was built for"):
        SinkPathEdit("m", [(1, 0)], stats, {}).hooks(llama, tokens)


def test_the_split_without_sink_heads_says_so(llama):
    corpus = poslens.make_corpus(llama, "random", n_seqs=8, seq_len=T, seed=0)
    with pytest.warns(ProbeSizeWarning, match=r"\(n_seqs=\d+, seq_len=12\)"):  # the API's spelling; the command writes its flags
        result = sink_path_split(llama, corpus, heads=[], offset=4, groups=4, progress=False)
    assert result.meta["c8"]["verdict"] == "no share" and "no head" in result.meta["c8"]["reason"]
    assert set(result.table["intervention"]) == {"none", "p0-every-head"}


def test_the_split_table_holds_every_run_readout_and_figure(llama):
    corpus = poslens.make_corpus(llama, "random", n_seqs=8, seq_len=T, seed=0)
    result = sink_path_split(llama, corpus, heads=[(0, 0), (1, 1)], offset=4, groups=4, progress=False)
    table = result.table
    levels = table.query("kind == 'level' and layer == -1")
    assert sorted(levels["intervention"].unique()) == ["m", "mp", "none", "p", "p0-every-head", "s", "sham-m", "sham-p"]
    assert sorted(levels["readout"].unique()) == ["R2", "V"]
    derived = table.query("kind == 'derived' and readout == 'V'").set_index("metric")["value"]
    f = levels.query("readout == 'V'").set_index("intervention")["value"]
    assert derived["phi_m"] == pytest.approx(0.5 * ((f["none"] - f["m"]) + (f["p"] - f["mp"])))
    assert derived["sink_total"] == pytest.approx(f["none"] - f["s"])
    per_layer = table.query("kind == 'level' and readout == 'V' and intervention == 'none' and layer >= 2")["value"]
    assert f["none"] == pytest.approx(per_layer.mean())
    assert set(table.query("kind == 'loss'")["intervention"]) == {"m", "p", "mp", "s", "sham-m", "sham-p", "p0-every-head"}
    assert result.meta["sink_heads"] == [[0, 0], [1, 1]] and result.meta["settings"]["offset"] == 4
    assert np.isfinite(table["value"]).all()


C8_OF = {"count": "supported", "phase": "not supported", "undecided": "inconclusive", "no share": "inconclusive", "inconclusive": "inconclusive"}


def test_c8_in_the_claims_table_agrees_with_the_split(llama, tmp_path):
    """The claims table's C8 (read back from the saved part) is the split's own C8 verdict, mapped onto supported / not."""
    from poslens.measurement.result import Result
    from poslens.study.claims import evaluate

    corpus = poslens.make_corpus(llama, "random", n_seqs=12, seq_len=T, seed=0)
    result = sink_path_split(llama, corpus, heads=[(0, 0), (1, 1)], offset=4, groups=4, progress=False)
    result.save(tmp_path / "sink-split.parquet")
    loaded = Result.load(tmp_path / "sink-split.parquet")
    claims = evaluate(split=loaded, claims=["C8"])
    row = claims.table.iloc[0]
    assert row["claim"] == "C8" and row["verdict"] == C8_OF[result.meta["c8"]["verdict"]]
    inputs = claims.inputs[claims.inputs["key"] == row["key"]]
    assert {"r1", "r2", "φ_m beyond sham", "φ_p beyond sham", "sink_total (V)", "sink_total (R2)"} <= set(inputs["name"])
    if result.meta["c8"]["verdict"] == "no share":
        assert inputs["name"].str.startswith("no share:").any()


def test_the_path_tests_warn_where_the_probe_cannot_be_read(llama):
    from poslens.mechanisms.path_tests import path_specific_tests

    corpus = poslens.make_corpus(llama, "random", n_seqs=4, seq_len=T, seed=0)
    with pytest.warns(ProbeSizeWarning, match=r"use at least \d+ sequences of 12 tokens \(n_seqs=\d+, seq_len=12\)"):
        path_specific_tests(llama, corpus, offsets=[4], groups=2, early=4, tau=0.05, sham=False, ablation=False, progress=False)


def test_the_path_tests_warn_and_record_an_offset_the_sequences_never_show(llama):
    from poslens.mechanisms.path_tests import path_specific_tests

    corpus = poslens.make_corpus(llama, "random", n_seqs=8, seq_len=T, seed=0)
    with pytest.warns(UserWarning, match="never show the model"):
        result = path_specific_tests(llama, corpus, offsets=[4, 40], groups=2, early=4, tau=0.05, sham=False, ablation=False, progress=False)
    assert result.meta["offset_notes"] and "D = 40" in result.meta["offset_notes"][0]


def test_under_a_window_the_heads_are_read_by_the_rows_that_see_key0(tmp_path):
    """Methodology §13.1: the split's sink score under a window of W averages a_i0 over the rows 1 ≤ i < W only.

    The reference is computed here from the patterns themselves; τ sits between the head's two scores, so the
    head is edited by the visible rows' mean and would not be by the mean over every row.
    """
    from poslens.mechanisms import sinks

    model = poslens.load_model(save_tiny_model(tmp_path, "mistral"), dtype=torch.float64)
    window = model.sliding_windows[1]
    corpus = poslens.make_corpus(model, "random", n_seqs=8, seq_len=T, seed=0)
    baseline = poslens.measure(model, corpus, groups=4, early=6, progress=False)
    record = Record()
    intervened_forward(model, corpus.tokens, [record], [])
    a0 = record.patterns[1][:, 0, :, 0]  # [N, T]: a_i0 of layer 1, head 0 (the model's float32 softmax: compared to 1e-6)
    visible = float(a0[:, 1:window].mean())
    every_row = float(a0[:, 1:].mean())  # the rows the window keeps from key 0 hold 0
    assert every_row == pytest.approx(visible * (window - 1) / (T - 1), rel=1e-9)
    tau = (visible + every_row) / 2
    assert (1, 0) in sinks.sink_reading_heads(baseline, tau, rows="visible")
    assert (1, 0) not in sinks.sink_reading_heads(baseline, tau)
    assert sinks.key0_means(baseline, [(1, 0)])[(1, 0)] == pytest.approx(visible, rel=1e-6)
    split = sink_path_split(model, corpus, tau=tau, baseline=baseline, groups=4, offset=2, shams=False, every_head_phase=False, progress=False)
    assert [1, 0] in split.meta["sink_heads"]
    with pytest.raises(InputError, match="rows must be"):
        sinks.sink_reading_heads(baseline, tau, rows="some")
