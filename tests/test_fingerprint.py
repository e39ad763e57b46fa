"""The position-0 fingerprint (METHOD §8, claim C6): trajectories, dispersion, similarity, readout."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from scipy import stats

import poslens
from poslens.corpus import Corpus, make_corpus
from poslens.fingerprint import centroid_readout, dispersion, fingerprint, position0_trajectories, readout, trajectory_similarity
from poslens.results import COLUMNS, Result


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
    assert exact.accuracy == 1.0 and exact.n_classes == 4 and exact.uniform_chance == 0.25
    assert exact.chance <= 0.5 and exact.permuted_high < 1.0 and exact.p_value < 0.01
    shuffled = list(np.random.default_rng(1).permutation(labels))
    corpus = repeated_corpus(labels)
    corpus.position0_token_ids = [int(t) for t in shuffled]
    noise = readout(tiny, corpus, heads, groups=4)
    assert noise.accuracy <= 0.5 and noise.ci_low <= 0.25 and noise.p_value > 0.05


def test_centroid_readout_on_constructed_features():
    rng = np.random.default_rng(0)
    labels = np.arange(400) % 4
    features = np.eye(4)[labels] + 0.05 * rng.normal(size=(400, 4))
    assert centroid_readout(features, labels, groups=8).accuracy == 1.0
    shuffled = centroid_readout(features, rng.permutation(labels), groups=8)
    assert abs(shuffled.accuracy - 0.25) < 0.08 and shuffled.ci_low < 0.25 < shuffled.ci_high
    assert shuffled.permuted_low <= shuffled.accuracy <= shuffled.permuted_high and shuffled.p_value > 0.025


def test_fingerprint_result_schema_and_roundtrip(tiny, tmp_path):
    result = fingerprint(tiny, n_seqs=8, seq_len=12, n_first_tokens=4, groups=4)
    table = result.table
    assert list(table.columns) == COLUMNS
    assert set(table["metric"]) == {
        "dispersion", "trajectory_cosine", "readout_accuracy", "readout_chance", "readout_chance_permuted",
        "readout_chance_uniform", "readout_p_value",
    }
    assert set(table["intervention"]) == {"position0:bos", "position0:none", "position0:varied"}
    assert table[["value", "ci_low", "ci_high"]].notna().all().all()
    assert (table["query_window"] == "all").all() and (table["head"] == -1).all()
    read_layers = sorted({layer for layer, _ in result.meta["heads"]})
    assert sorted(result.select("readout_accuracy").query("intervention == 'position0:varied'")["layer"]) == [-1] + read_layers
    layers = sorted(table.query("metric == 'dispersion'")["layer"].unique())
    assert layers == [-1] + list(range(tiny.n_layers + 1))
    assert result.select("dispersion").query("intervention == 'position0:bos'")["value"].max() <= 1e-6
    assert len(result.meta["heads"]) == 3 and "no head reached" in result.meta["heads_rule"]  # random weights: no sinks
    assert len(result.meta["first_token_ids"]) == 4 and result.meta["bos_check"]["passed"]
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
