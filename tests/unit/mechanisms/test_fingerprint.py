"""The position-0 fingerprint (methodology §8, claim C6): trajectories, dispersion, similarity, readout."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from scipy import stats

import poslens
from poslens.fit.dispersion import dispersion
from poslens.fit.readout import _make_folds, _predict, balanced_classes, centroid_readout, permute_within_groups
from poslens.measurement.result import Result
from poslens.measurement.table import COLUMNS
from poslens.mechanisms.fingerprint import fingerprint, readout, trajectory_similarity, varied_corpus
from poslens.mechanisms.position0_passes import position0_trajectories
from poslens.model.corpus import Corpus, make_corpus


@pytest.fixture(scope="module")
def tiny(tiny_llama_dir):
    return poslens.load_model(tiny_llama_dir)


def naive_position0(folder, token: int) -> np.ndarray:
    """Position 0 of a Llama written out from the saved weights: a_00 = 1, so attention is o_proj(v) and RoPE is the identity."""
    config = json.loads((folder / "config.json").read_text())
    w = {k: v.double() for k, v in load_file(folder / "model.safetensors").items()}
    eps, n_heads, n_kv = config["rms_norm_eps"], config["num_attention_heads"], config["num_key_value_heads"]

    def rms(x, weight):
        return x / torch.sqrt((x * x).mean() + eps) * weight

    x = w["model.embed_tokens.weight"][token]
    out = [x]
    for layer in range(config["num_hidden_layers"]):
        p = f"model.layers.{layer}."
        v = (w[p + "self_attn.v_proj.weight"] @ rms(x, w[p + "input_layernorm.weight"])).view(n_kv, -1)
        z = v.repeat_interleave(n_heads // n_kv, dim=0).reshape(-1)  # query head h reads kv head h // (H / KV)
        x = x + w[p + "self_attn.o_proj.weight"] @ z
        h = rms(x, w[p + "post_attention_layernorm.weight"])
        gate, up = w[p + "mlp.gate_proj.weight"] @ h, w[p + "mlp.up_proj.weight"] @ h
        x = x + w[p + "mlp.down_proj.weight"] @ (torch.nn.functional.silu(gate) * up)
        out.append(x)
    return torch.stack(out).numpy()


def test_trajectories_equal_single_token_run(tiny, tiny_llama_dir):
    corpus = make_corpus(tiny, "random", n_seqs=6, seq_len=12, position0="none", seed=3)
    x = position0_trajectories(tiny, corpus.tokens, batch_size=4)
    assert x.shape == (6, tiny.n_layers + 1, 64)
    for n, token in enumerate(corpus.position0_token_ids):
        np.testing.assert_allclose(x[n].numpy(), naive_position0(tiny_llama_dir, token), atol=1e-5, rtol=0)


def test_dispersion_equals_naive_numpy():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(10, 4, 5)) + 3.0
    groups = 5
    value, low, high = dispersion(torch.tensor(x), groups=groups)

    def naive(data):
        out = []
        for layer in range(data.shape[1]):
            mean = data[:, layer].mean(axis=0)
            spread = [np.sqrt(((row - mean) ** 2).sum()) for row in data[:, layer]]
            out.append(np.mean(spread) / np.sqrt((mean**2).sum()))
        return np.array(out)

    np.testing.assert_allclose(value, naive(x), rtol=1e-12)
    group = np.arange(10) * groups // 10
    reps = np.array([naive(x[group != g]) for g in range(groups)])
    se = np.sqrt((groups - 1) / groups * ((reps - reps.mean(axis=0)) ** 2).sum(axis=0))
    t = stats.t.ppf(0.975, groups - 1)
    np.testing.assert_allclose(low, naive(x) - t * se, rtol=1e-10)
    np.testing.assert_allclose(high, naive(x) + t * se, rtol=1e-10)


def test_trajectory_similarity_equals_naive_cosines(tiny, tiny_llama_dir):
    tokens = [40, 50, 60, 70]
    value, low, high = trajectory_similarity(tiny, tokens)
    x = np.stack([naive_position0(tiny_llama_dir, t) for t in tokens])  # [K, L + 1, d]
    expected = [
        np.mean([x[a, l] @ x[b, l] / np.linalg.norm(x[a, l]) / np.linalg.norm(x[b, l]) for a in range(4) for b in range(a + 1, 4)])
        for l in range(tiny.n_layers + 1)
    ]
    np.testing.assert_allclose(value, expected, atol=1e-6)
    assert np.all(low <= value) and np.all(value <= high)
    with pytest.raises(ValueError, match="distinct"):
        trajectory_similarity(tiny, [40, 40, 60])


def repeated_corpus(labels: list[int], seq_len: int = 10) -> Corpus:
    tokens = torch.tensor(labels)[:, None].expand(len(labels), seq_len).contiguous()
    return Corpus(tokens, "repeat", 0, "varied", list(labels), [str(t) for t in labels])


def test_readout_separable_and_shuffled(tiny):
    # Each sequence is its position-0 token repeated: features are a function of the label, so classes separate.
    labels = [40 + 7 * (k % 4) for k in range(32)]
    heads = [(1, 0), (2, 3)]
    exact = readout(tiny, repeated_corpus(labels), heads, groups=4)
    assert exact.accuracy == 1.0 and exact.n_classes == 4 and exact.chance == 0.25
    assert exact.permuted_high < 1.0 and exact.p_value == pytest.approx(1 / 201)
    shuffled = list(np.random.default_rng(1).permutation(labels))
    corpus = repeated_corpus(labels)
    corpus.position0_token_ids = [int(t) for t in shuffled]
    noise = readout(tiny, corpus, heads, groups=4)
    assert noise.accuracy <= 0.5 and noise.ci_low <= 0.25 and noise.p_value > 0.05


# --------------------------------------------------------------------------- readout design (methodology §8)


def naive_predictions(x: np.ndarray, y: np.ndarray, groups: int, train_only: bool = True) -> np.ndarray:
    """Leave-one-group-out nearest centroid on standardized features, written with loops.

    ``train_only=False`` standardizes with every row (the held-out group leaking in): the wrong recipe.
    """
    n = len(y)
    group = np.arange(n) * groups // n
    predicted = np.empty(n, dtype=y.dtype)
    classes = sorted(set(y.tolist()))
    for g in range(groups):
        train = [i for i in range(n) if group[i] != g]
        test = [i for i in range(n) if group[i] == g]
        rows = train if train_only else list(range(n))
        mean = np.array([np.mean(x[rows, f]) for f in range(x.shape[1])])
        sd = np.array([np.sqrt(np.mean((x[rows, f] - mean[f]) ** 2)) for f in range(x.shape[1])])
        keep = [f for f in range(x.shape[1]) if sd[f] > 1e-9 * abs(mean[f]) and sd[f] > 0]
        z = (x[:, keep] - mean[keep]) / sd[keep]
        centroid = {c: np.mean([z[i] for i in train if y[i] == c], axis=0) for c in classes}
        for i in test:
            predicted[i] = min(classes, key=lambda c: float(np.sum((z[i] - centroid[c]) ** 2)))
    return predicted


def test_standardized_centroid_equals_naive_loops_and_uses_training_folds_only():
    leaky_differs = 0
    for seed in range(20):
        rng = np.random.default_rng(seed)
        n, groups = 12, 3
        y = balanced_classes(n, 2, groups)
        group = np.arange(n) * groups // n
        x = np.column_stack(
            [
                y + rng.normal(size=n),  # weak signal
                100.0 * rng.normal(size=n) + 50.0 * group,  # large scale, group-dependent offset: no signal
                rng.normal(size=n) * (group == 2),  # constant (0) in the fold that holds out group 2
                np.full(n, 3.0),  # constant everywhere: dropped
            ]
        )
        expected = naive_predictions(x, y, groups)
        r = centroid_readout(x, y, groups=groups, n_permutations=9)
        assert r.accuracy == pytest.approx(np.mean(expected == y), abs=1e-12)
        folds = _make_folds(x, group)
        np.testing.assert_array_equal(_predict(folds, y, 2), expected)
        assert [f.n_features for f in folds] == [3, 3, 2] and r.n_features == 2
        leaky_differs += int(np.any(naive_predictions(x, y, groups, train_only=False) != expected))
    assert leaky_differs > 0  # the reference can tell training-fold standardization from standardization on all rows


def test_large_feature_without_signal_does_not_swamp_the_readout():
    rng = np.random.default_rng(0)
    n, k, groups = 160, 4, 8
    y = balanced_classes(n, k, groups)
    signal = np.eye(k)[y] + 0.3 * rng.normal(size=(n, k))
    x = np.column_stack([signal, 1e4 * rng.normal(size=(n, 2))])  # e.g. a head with large, text-driven outputs
    r = centroid_readout(x, y, groups=groups, n_permutations=50)
    assert r.accuracy > 0.9 and r.ci_low > 0.8
    # Without standardization the large columns decide: raw nearest centroid is near chance on the same folds.
    group = np.arange(n) * groups // n
    raw = np.empty(n, dtype=int)
    for g in range(groups):
        train, test = group != g, group == g
        centroids = np.stack([x[train & (y == c)].mean(axis=0) for c in range(k)])
        raw[test] = ((x[test][:, None] - centroids[None]) ** 2).sum(-1).argmin(axis=1)
    assert np.mean(raw == y) < 0.45


@pytest.mark.parametrize("n_seqs, k, groups", [(64, 8, 8), (70, 8, 8), (10, 3, 2), (33, 4, 8), (40, 5, 4)])
def test_balanced_classes_put_every_class_in_every_group(n_seqs, k, groups):
    classes = balanced_classes(n_seqs, k, groups)
    group = np.arange(n_seqs) * groups // n_seqs
    for g in range(groups):
        counts = np.bincount(classes[group == g], minlength=k)
        assert len(counts) == k and counts.min() >= 1 and counts.max() - counts.min() <= 1
        assert set(classes[group != g]) == set(range(k))  # hence in every training fold


def test_too_few_sequences_name_the_minimum(tiny):
    with pytest.raises(ValueError, match=r"at least K · groups = 64"):
        balanced_classes(63, 8, 8)
    with pytest.raises(ValueError, match=r"at least K · groups = 16"):
        fingerprint(tiny, n_seqs=8, seq_len=12, n_first_tokens=4, groups=4, readout_seqs=15)


def test_varied_corpus_every_token_in_every_group(tiny):
    corpus = varied_corpus(tiny, 24, 12, 3, seed=1, groups=4)
    first = corpus.meta["first_token_ids"]
    ids = np.array(corpus.position0_token_ids)
    group = np.arange(24) * 4 // 24
    for g in range(4):
        assert sorted(ids[group == g].tolist()) == sorted(first * 2)
    assert len({tuple(row) for row in corpus.tokens[:, 1:].tolist()}) == 24  # each sequence its own continuation


def test_readout_refuses_designs_that_cannot_succeed():
    x = np.random.default_rng(0).normal(size=(16, 3))
    with pytest.raises(ValueError, match="one class"):
        centroid_readout(x, [7] * 16, groups=4)
    confined = [0] * 4 + [1] * 12  # class 0 only in group 0: the fold holding it out never sees it
    with pytest.raises(ValueError, match=r"only in group 0"):
        centroid_readout(x, confined, groups=4)


@pytest.mark.parametrize("k", [2, 3, 5])
def test_chance_is_one_over_k_and_null_centres_there(k):
    rng = np.random.default_rng(k)
    n, groups = 40 * k, 8
    y = balanced_classes(n, k, groups)
    x = rng.normal(size=(n, 6))  # no signal
    r = centroid_readout(x, y, groups=groups, n_permutations=200, seed=1)
    assert r.chance == 1 / k and r.n_classes == k
    assert abs(r.permuted_chance - 1 / k) < 0.02
    assert r.permuted_low < 1 / k < r.permuted_high
    assert r.permuted_low <= r.accuracy <= r.permuted_high and r.p_value > 0.025


def test_clear_signal_beats_chance_and_the_null():
    rng = np.random.default_rng(3)
    n, k, groups = 96, 8, 4
    y = balanced_classes(n, k, groups)
    x = rng.normal(size=(n, 16)) + 4.0 * np.eye(k, 16)[y]
    r = centroid_readout(x, y, groups=groups, n_permutations=99)
    assert r.accuracy > 0.7 and r.ci_low > 3 * r.chance
    assert r.p_value == pytest.approx(1 / 100) and r.permuted_high < 0.3


def test_permutation_keeps_each_groups_class_counts():
    y = balanced_classes(50, 4, 5)
    group = np.arange(50) * 5 // 50
    rng = np.random.default_rng(0)
    permuted = [permute_within_groups(y, group, rng) for _ in range(5)]
    for p in permuted:
        for g in range(5):
            assert sorted(p[group == g]) == sorted(y[group == g])
    assert any(np.any(p != y) for p in permuted)


def test_fingerprint_result_schema_and_roundtrip(tiny, tmp_path):
    result = fingerprint(tiny, n_seqs=8, seq_len=12, n_first_tokens=4, groups=4, n_permutations=99)
    table = result.table
    assert list(table.columns) == COLUMNS
    assert set(table["metric"]) == {
        "dispersion",
        "trajectory_cosine",
        "readout_accuracy",
        "readout_chance",
        "readout_chance_permuted",
        "readout_p_value",
    }
    assert set(table["intervention"]) == {"position0:bos", "position0:none", "position0:varied"}
    readout_rows = table[table["metric"].str.startswith("readout")]
    assert set(readout_rows["intervention"]) == {"position0:varied"}  # no one-class BOS readout
    assert (table.query("metric == 'readout_chance'")["value"] == 0.25).all()
    assert table[["value", "ci_low", "ci_high"]].notna().all().all()
    assert (table["query_window"] == "all").all() and (table["head"] == -1).all()
    read_layers = sorted({layer for layer, _ in result.meta["heads"]})
    assert sorted(result.select("readout_accuracy")["layer"]) == [-1] + read_layers
    layers = sorted(table.query("metric == 'dispersion'")["layer"].unique())
    assert layers == [-1] + list(range(tiny.n_layers + 1))
    assert result.select("dispersion").query("intervention == 'position0:bos'")["value"].max() <= 1e-6
    assert len(result.meta["heads"]) == 3 and "no head reached" in result.meta["heads_rule"]  # random weights: no sinks
    assert len(result.meta["first_token_ids"]) == 4 and result.meta["bos_check"]["passed"]
    assert result.meta["readout_design"]["n_seqs"] == 64 == result.meta["corpora"]["position0:varied"]["n_seqs"]  # 4 · K · groups
    assert result.meta["readout"]["position0:varied"]["n_permutations"] == 99
    loaded = Result.load(result.save(tmp_path / "fingerprint.parquet"))
    assert loaded.table.equals(table)
    assert loaded.meta["heads"] == result.meta["heads"] and loaded.meta["corpora"]["position0:varied"]["position0"] == "varied"


def test_smollm2_fingerprint_constant_with_bos_only(smollm2):
    # Small on purpose (CPU): 8 sequences of 16 tokens, text varies after position 0.
    bos = make_corpus(smollm2, "docs", n_seqs=8, seq_len=16, position0="bos", seed=0)
    none = make_corpus(smollm2, "docs", n_seqs=8, seq_len=16, position0="none", seed=0)
    with_bos, _, high = dispersion(position0_trajectories(smollm2, bos.tokens), groups=4)
    assert with_bos.max() <= 1e-5 and high.max() <= 1e-5
    without, _, _ = dispersion(position0_trajectories(smollm2, none.tokens), groups=4)
    # Mid-layer trajectories converge towards a shared sink direction (about 0.03 here), yet stay far above 1e-5.
    assert np.all(without[1:] > 1e-3)
