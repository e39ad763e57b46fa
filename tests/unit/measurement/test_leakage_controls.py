"""Built-in controls of methodology §4 and the additivity of the streamed cell sums (§3.1).

- additivity: batch size and the order of sequences inside a group change nothing;
- a head with constant logits: C_res = 0, count share 1, L(log a) = L(count term);
- a per-query shift of the logits leaves every pattern figure unchanged, version 2's split included;
- an explicit absolute-position signal written into the residual stream after
  layer 0 raises C_res in the layer that reads it, and leaves layer 0 alone;
- on a real model with natural text, C_res ≈ 0 at layer 0 while C_mask > 0.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import torch

import poslens
from poslens.mechanisms.interventions import BosReplacement
from poslens.model.hooks import attn_scores, resid_post
from poslens.testing import save_tiny_model

sys.path.insert(0, str(Path(__file__).parents[2]))
import naive_reference as nr  # noqa: E402

SEQ_LEN, GROUPS, EARLY = 40, 4, 16
KEY = ["layer", "head", "query_window", "metric"]


def frame(result: poslens.Result) -> pd.DataFrame:
    return result.to_frame().sort_values(KEY).set_index(KEY)[["value", "ci_low", "ci_high"]]


def assert_tables_equal(a: pd.DataFrame, b: pd.DataFrame, atol: float, what: str) -> None:
    assert a.index.equals(b.index), f"{what}: different rows"
    diff = (a - b).abs().to_numpy()
    worst = np.nanmax(diff)
    assert np.array_equal(np.isnan(a.to_numpy()), np.isnan(b.to_numpy())), f"{what}: NaNs differ"
    assert worst <= atol, f"{what}: largest difference {worst:.3g} at {a.index[np.nanargmax(diff.max(1))]}"


def row(result: poslens.Result, metric: str, query_window: str, layer: int, head: int = -1) -> tuple[float, float, float]:
    r = result.select(metric, query_window, layer, head)
    assert len(r) == 1, (metric, query_window, layer, head)
    return float(r["value"].iloc[0]), float(r["ci_low"].iloc[0]), float(r["ci_high"].iloc[0])


# -- interventions ------------------------------------------------------------


class VisibleLogitEdit:
    """Replace the visible logits of one head by ``edit(logits)``; masked entries stay at the minimum."""

    kind = "visible-logit-edit"

    def __init__(self, layer: int, head: int, **setting: float):
        self.layer, self.head, self.setting = layer, head, setting
        self.label = f"{self.kind}-L{layer}H{head}"

    def edit(self, logits: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def hooks(self, model: Any, tokens: torch.Tensor) -> list:
        def fn(scores: torch.Tensor, hook: Any) -> torch.Tensor:
            out = scores.clone()
            head = out[:, self.head]
            out[:, self.head] = torch.where(head > torch.finfo(head.dtype).min / 2, self.edit(head), head)
            return out

        return [(attn_scores(self.layer), fn)]

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "layer": self.layer, "head": self.head, **self.setting}


class ConstantLogits(VisibleLogitEdit):
    """Set the visible logits of one head to a constant."""

    kind = "constant-logits"

    def __init__(self, layer: int, head: int, value: float = 0.25):
        super().__init__(layer, head, value=value)

    def edit(self, logits: torch.Tensor) -> torch.Tensor:
        return torch.full_like(logits, self.setting["value"])


class QueryShift(VisibleLogitEdit):
    """Add γ·log(1+i) to every visible logit of row i of one head: the softmax cannot see it."""

    kind = "query-shift"

    def __init__(self, layer: int, head: int, gamma: float = 2.0):
        super().__init__(layer, head, gamma=gamma)

    def edit(self, logits: torch.Tensor) -> torch.Tensor:
        rows = torch.arange(logits.shape[-2], dtype=logits.dtype, device=logits.device)
        return logits + self.setting["gamma"] * torch.log1p(rows)[:, None]


class KeyPositionSignal:
    """Write an explicit absolute-position signal into the residual stream after block 0.

    x_i += A·(v + ε·log(1+i)·w). v is a unit vector in the null space of layer
    1's key projection, so it reaches layer 1 only through its queries, as a
    constant query component q(v). w is chosen so that W_K w points along −q(v)
    in the slowest rotary pairs (which barely rotate over T = 40 positions):
    every layer-1 head then gains a logit ≈ −γ·log(1+j) that depends on the
    *absolute* position of the key j. At fixed offset, the logit falls with i,
    in step with the mask's −log(i+1), so C_res > 0 to first order in ε.
    A is large, so RMSNorm makes the token content a small part of q and k.
    """

    label = "key-position-signal"

    def __init__(self, model: Any, scale: float = 10.0, eps: float = 0.2, layer: int = 1, slow_pairs: tuple[int, ...] = (5, 6, 7)):
        attn = model.hf_model.model.layers[layer].self_attn
        w_q = attn.q_proj.weight.detach().double().cpu()
        w_k = attn.k_proj.weight.detach().double().cpu()
        n_heads, n_kv, d_head = model.n_heads, model.n_kv_heads, model.d_head
        v = torch.linalg.svd(w_k).Vh[-1]  # W_K v ≈ 0
        q_v = (w_q @ v).view(n_heads, d_head)
        dims = list(slow_pairs) + [d + d_head // 2 for d in slow_pairs]  # rotate_half pairs (d, d + d_head/2)
        target = torch.zeros(n_kv, d_head, dtype=torch.float64)
        for h in range(n_heads):
            target[h // (n_heads // n_kv), dims] -= q_v[h, dims]
        w = torch.linalg.lstsq(w_k, target.reshape(-1, 1)).solution[:, 0]
        w = w - (w @ v) * v
        self.coupling = [float(q_v[h, dims] @ (w_k @ w).view(n_kv, d_head)[h // (n_heads // n_kv), dims]) for h in range(n_heads)]
        self.v, self.w = v.float(), (w / w.norm()).float()
        self.scale, self.eps = scale, eps

    def hooks(self, model: Any, tokens: torch.Tensor) -> list:
        def fn(x: torch.Tensor, hook: Any) -> torch.Tensor:
            ell = torch.log1p(torch.arange(x.shape[1], dtype=x.dtype, device=x.device))[:, None]
            return x + self.scale * (self.v.to(x.device) + self.eps * ell * self.w.to(x.device))[None]

        return [(resid_post(0), fn)]

    def describe(self) -> dict[str, Any]:
        return {"kind": "key-position-signal", "scale": self.scale, "eps": self.eps}


class SinusoidSignal:
    """A random-direction sinusoidal code of absolute position added after block 0."""

    label = "sinusoid-signal"

    def __init__(self, d_model: int, scale: float = 1.0, seed: int = 1):
        g = torch.Generator().manual_seed(seed)
        self.proj = torch.randn(d_model, 6, generator=g) / np.sqrt(6)
        self.scale = scale

    def hooks(self, model: Any, tokens: torch.Tensor) -> list:
        def fn(x: torch.Tensor, hook: Any) -> torch.Tensor:
            i = torch.arange(x.shape[1], dtype=x.dtype, device=x.device)[:, None]
            freq = torch.tensor([0.5, 1.0, 2.0], dtype=x.dtype, device=x.device) * np.pi / SEQ_LEN
            code = torch.cat([torch.sin(i * freq), torch.cos(i * freq)], -1)
            return x + self.scale * (code @ self.proj.T.to(x.device))[None]

        return [(resid_post(0), fn)]

    def describe(self) -> dict[str, Any]:
        return {"kind": "sinusoid-signal", "scale": self.scale}


# -- fixtures -----------------------------------------------------------------


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory):
    return poslens.load_model(save_tiny_model(tmp_path_factory.mktemp("controls_llama"), "llama"))


@pytest.fixture(scope="module")
def bos_corpus(llama):
    return poslens.make_corpus(llama, "random", n_seqs=8, seq_len=SEQ_LEN, position0="bos", seed=5)


@pytest.fixture(scope="module")
def baseline(llama, bos_corpus):
    return poslens.measure(llama, bos_corpus, groups=GROUPS, early=EARLY, progress=False)


# -- (b) additivity -----------------------------------------------------------


@pytest.mark.integration  # slow: out of make test-fast, which stays under 2 minutes
@pytest.mark.parametrize("spec", [None, "noise"], ids=["no-intervention", "bos-noise"])
def test_tables_do_not_depend_on_batching_or_order_within_groups(llama, spec):
    # a seeded intervention must not depend on batching either (bos:noise drew one vector per batch row)
    n, groups = 6, 2
    corpus = poslens.make_corpus(llama, "random", n_seqs=n, seq_len=SEQ_LEN, position0="bos", seed=7)
    group = nr.group_of(n, groups)
    assert group.tolist() == [0, 0, 0, 1, 1, 1]
    # reverse the order inside every group block: the grouping is unchanged
    perm = np.concatenate([np.nonzero(group == g)[0][::-1] for g in range(groups)])
    assert not np.array_equal(perm, np.arange(n)) and np.array_equal(group[perm], group)
    interventions = [BosReplacement(spec, seed=5)] if spec else []
    kw = dict(groups=groups, early=EARLY, progress=False, interventions=interventions)
    reference = frame(poslens.measure(llama, corpus, batch_size=1, **kw))
    # 2 splits each group of 3 into batches of 2 and 1; n puts each whole group in one batch
    for batch_size in (2, n):
        other = frame(poslens.measure(llama, corpus, batch_size=batch_size, **kw))
        assert_tables_equal(reference, other, 1e-10, f"batch_size={batch_size} vs 1")
    permuted = frame(poslens.measure(llama, corpus.subset(perm.tolist()), batch_size=2, **kw))
    assert_tables_equal(reference, permuted, 1e-10, "sequences permuted within groups")


# -- (c) constant logits ------------------------------------------------------


def test_constant_logit_head_has_no_residual_component(llama, bos_corpus, baseline):
    layer, head = 1, 0
    iv = ConstantLogits(layer, head)
    result = poslens.measure(llama, bos_corpus, groups=GROUPS, early=EARLY, interventions=[iv], progress=False)
    assert set(result.table["intervention"]) == {iv.label}
    assert result.meta["settings"]["interventions"] == [iv.describe()]
    for query_window in ("early", "all"):
        c_res, low, high = row(result, "c_res", query_window, layer, head)
        assert abs(c_res) < 1e-10 and abs(low) < 1e-10 and abs(high) < 1e-10, (query_window, c_res, low, high)
        assert abs(row(result, "rho_res", query_window, layer, head)[0]) < 1e-8
        assert row(result, "count_share", query_window, layer, head)[0] == pytest.approx(1.0, abs=1e-8)
        pattern = row(result, "leakage_pattern", query_window, layer, head)[0]
        count = row(result, "leakage_count", query_window, layer, head)[0]
        assert pattern == pytest.approx(count, abs=1e-9), query_window
        assert row(result, "c_mask", query_window, layer, head)[0] == pytest.approx(count, abs=1e-9)
        assert row(result, "c_count", query_window, layer, head)[0] == pytest.approx(count, abs=1e-9)
        # uniform attention over i+1 keys
        q = np.arange(1, EARLY if query_window == "early" else SEQ_LEN)
        assert row(result, "key0_mass", query_window, layer, head)[0] == pytest.approx(np.mean(1 / (q + 1)), abs=1e-9)
        assert row(result, "entropy", query_window, layer, head)[0] == pytest.approx(np.mean(np.log(q + 1)), abs=1e-6)

    # the hook changes only that head's scores: layer 0 and the other layer-1 heads are untouched ...
    def untouched(t: pd.DataFrame) -> pd.DataFrame:
        lay, hd = t.index.get_level_values("layer"), t.index.get_level_values("head")
        return t[(lay == 0) | ((lay == layer) & (hd >= 0) & (hd != head))]

    a, b = frame(baseline), frame(result)
    assert_tables_equal(untouched(a), untouched(b), 1e-12, "rows the intervention cannot reach")
    # ... and it does reach the forward pass: layer 2 changes
    later_a, later_b = (t[t.index.get_level_values("layer") == 2] for t in (a, b))
    shared = later_a.index.intersection(later_b.index)
    assert np.nanmax((later_a.loc[shared] - later_b.loc[shared]).abs().to_numpy()) > 1e-6


def test_constant_logit_head_keeps_figures_finite(llama, bos_corpus):
    """L(s) of a constant-logit head is 0/0: its row may be absent (NaN cells are dropped) or 0;
    no row, the layer and model aggregates included, may hold ±inf or NaN."""
    layer, head = 1, 0
    result = poslens.measure(llama, bos_corpus, groups=GROUPS, early=EARLY, interventions=[ConstantLogits(layer, head)], progress=False)
    table = result.to_frame()
    infinite = table[~np.isfinite(table[["value", "ci_low", "ci_high"]]).all(axis=1)]
    assert infinite.empty, "non-finite figures:\n" + infinite[["layer", "head", "query_window", "metric", "value"]].to_string()


# -- a per-query logit shift is invisible to the pattern -------------------------


def test_per_query_logit_shift_leaves_pattern_figures_unchanged(llama, bos_corpus, baseline):
    """log a is invariant to s_ij → s_ij + f(i); every figure of the pattern must be too."""
    layer, head = 1, 0
    shifted = poslens.measure(llama, bos_corpus, groups=GROUPS, early=EARLY, interventions=[QueryShift(layer, head)], progress=False)
    for query_window in ("early", "all"):
        for metric in (
            "leakage_pattern",
            "leakage_pattern_saturated",
            "leakage_pattern_heldout",
            "leakage_count",
            "key0_mass",
            "entropy",
            "self_mass",
            "max_mass",
        ):
            before = row(baseline, metric, query_window, layer, head)[0]
            after = row(shifted, metric, query_window, layer, head)[0]
            assert after == pytest.approx(before, abs=1e-5), (query_window, metric, before, after)
        c_res, c_mask = row(shifted, "c_res", query_window, layer, head)[0], row(shifted, "c_mask", query_window, layer, head)[0]
        assert c_res + c_mask == pytest.approx(row(shifted, "leakage_pattern", query_window, layer, head)[0], abs=1e-10)
        # the logits themselves now carry absolute position
        assert row(shifted, "leakage_logit", query_window, layer, head)[0] > 10 * row(baseline, "leakage_logit", query_window, layer, head)[0]


def test_per_query_logit_shift_moves_the_logit_split_but_not_version_2(llama, bos_corpus, baseline):
    """methodology §4.0: a shift s_ij + f(i) leaves the pattern unchanged. Version 2 (c_res, the counterfactual
    split) depends on the pattern only, so it does not move; version 1's logit split (c_res_logit) does."""
    shifted = poslens.measure(llama, bos_corpus, groups=GROUPS, early=EARLY, interventions=[QueryShift(1, 0)], progress=False)
    for query_window in ("early", "all"):
        baseline_leak = row(baseline, "leakage_pattern", query_window, 1, 0)[0]
        assert row(shifted, "leakage_pattern", query_window, 1, 0)[0] == pytest.approx(baseline_leak, abs=1e-6)  # float32 shift
        assert abs(row(shifted, "c_res_logit", query_window, 1, 0)[0] - row(baseline, "c_res_logit", query_window, 1, 0)[0]) > 0.1
        for metric in ("c_res", "c_res_meanfield", "c_res_saturated"):
            want = row(baseline, metric, query_window, 1, 0)[0]
            assert row(shifted, metric, query_window, 1, 0)[0] == pytest.approx(want, abs=1e-6), (query_window, metric)


# -- (d) explicit position signal -----------------------------------------------


@pytest.fixture(scope="module")
def plain_corpus(llama):
    # random tokens, no BOS: nothing but the model itself marks position
    return poslens.make_corpus(llama, "random", n_seqs=16, seq_len=SEQ_LEN, position0="none", seed=11)


@pytest.fixture(scope="module")
def plain_baseline(llama, plain_corpus):
    return poslens.measure(llama, plain_corpus, groups=GROUPS, early=EARLY, progress=False)


SHARP = 12.0  # layer 1's q_proj and k_proj × 12: logits × 144, so the tiny model's layer 1 attends sharply


@pytest.fixture(scope="module")
def sharp_llama(tmp_path_factory: pytest.TempPathFactory):
    """The tiny Llama with layer 1 sharpened: its random logits are O(1), as a trained model's are."""
    import transformers

    folder = save_tiny_model(tmp_path_factory.mktemp("controls_llama_sharp_src"), "llama")
    state = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).state_dict()
    state = {k: v * SHARP if k.startswith("model.layers.1.self_attn.") and ("q_proj" in k or "k_proj" in k) else v for k, v in state.items()}
    return poslens.load_model(save_tiny_model(tmp_path_factory.mktemp("controls_llama_sharp"), "llama", state_dict=state))


def test_explicit_position_signal_gives_c_res_in_the_layer_that_reads_it(sharp_llama):
    """methodology §4.4 (h): an absolute-position signal written into the residual stream after block 0 gives layer 1
    a clear C_res: |C_res| ≥ 0.1·L(log a) over the early queries, with an interval away from 0 and from the
    baseline's. The signal adds +γ·log(1+j) to every layer-1 logit (ε < 0 in :class:`KeyPositionSignal`): a
    key-position term u(j), methodology §4.4's (f) inside a model. Settings: T = 96, Q = 16, 16 random sequences, no BOS.
    Measured: C_res / L = +0.30 early (baseline −0.002 [−0.058, +0.053]); over all queries +0.03, which does
    not separate from the baseline's noise floor."""
    corpus = poslens.make_corpus(sharp_llama, "random", n_seqs=16, seq_len=96, position0="none", seed=11)
    settings = dict(groups=GROUPS, early=16, progress=False, probe=False)
    baseline = poslens.measure(sharp_llama, corpus, **settings)
    signal = KeyPositionSignal(sharp_llama, eps=-0.2)
    assert all(c < 0 for c in signal.coupling), signal.coupling  # so ε < 0 gives every head +γ·log(1+j), γ > 0
    result = poslens.measure(sharp_llama, corpus, interventions=[signal], **settings)
    a, b = (t[t.index.get_level_values("layer") == 0] for t in (frame(baseline), frame(result)))
    assert_tables_equal(a, b, 1e-12, "layer 0 (before the signal)")
    base, base_low, base_high = row(baseline, "c_res", "early", 1)
    with_signal, low, high = row(result, "c_res", "early", 1)
    leakage = row(result, "leakage_pattern", "early", 1)[0]
    assert abs(with_signal) >= 0.1 * leakage, (with_signal, leakage)
    assert not (low <= 0 <= high), (with_signal, low, high)
    assert low > base_high or high < base_low, ((low, high), (base_low, base_high))
    for query_window in ("early", "all"):  # the logits carry absolute position where they did not
        assert row(result, "leakage_logit", query_window, 1)[0] > 10 * row(baseline, "leakage_logit", query_window, 1)[0]


def test_random_position_code_puts_position_into_later_logits(llama, plain_corpus, plain_baseline):
    """A position code in a random direction: L(s) rises in every later layer; C_res's sign is not fixed."""
    signal = SinusoidSignal(llama.hf_model.config.hidden_size)
    result = poslens.measure(llama, plain_corpus, groups=GROUPS, early=EARLY, interventions=[signal], progress=False)
    for query_window in ("early", "all"):
        for layer in range(1, llama.n_layers):
            before = row(plain_baseline, "leakage_logit", query_window, layer)
            after = row(result, "leakage_logit", query_window, layer)
            assert after[1] > 0 and after[0] > 5 * before[0], (query_window, layer, before, after)
        assert row(result, "c_res", query_window, 0) == row(plain_baseline, "c_res", query_window, 0)


# -- (e) the real model at layer 0 --------------------------------------------


def test_smollm2_layer0_has_mask_leakage_but_no_residual_component(smollm2):
    corpus = poslens.make_corpus(smollm2, "docs", n_seqs=16, seq_len=64, position0="bos", seed=0)
    result = poslens.measure(smollm2, corpus, groups=8, batch_size=2, progress=False)
    for query_window in ("early", "all"):
        c_res, low, high = row(result, "c_res", query_window, 0)
        assert low <= 0 <= high, f"layer-0 C_res {c_res:.4g} [{low:.4g}, {high:.4g}] ({query_window}) excludes 0"
        c_mask, mask_low, mask_high = row(result, "c_mask", query_window, 0)
        assert c_mask > 0 and mask_low > 0, f"layer-0 C_mask {c_mask:.4g} [{mask_low:.4g}, {mask_high:.4g}] ({query_window})"
        # and the C_res interval is narrow enough to mean something: it excludes half of C_mask's lower bound
        assert max(-low, high) < mask_low / 2, f"layer-0 C_res interval [{low:.4g}, {high:.4g}] too wide ({query_window})"
