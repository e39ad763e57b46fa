"""Sinks, interventions and their effects (methodology §6–§7) against independent, naive computations.

The references never call the poslens function under test:

- sink scores, their jackknife intervals and the sink-reading head counts at τ
  are recomputed from the attention weights of the plain Hugging Face model
  (eager attention, ``output_attentions=True``);
- the sink-path ablation is checked on the attention patterns captured just
  before and just after its hook, against the rule applied in numpy, and on
  the heads' outputs (z = a·v) downstream of it;
- BOS replacement and the position-0 transplant are checked on the residual
  stream captured at ``hook_resid_pre`` against vectors computed from the HF
  model's own embedding module and hidden states;
- the reduction is recomputed by hand from the two results' tables, and its
  paired delete-one-group jackknife from naive leave-one-group-out refits of
  C_res (``naive_reference``; each replicate redoes the per-sequence
  counterfactual's cross-fit without the group it drops).

Layer 0 of the tiny models is edited to hold real sink heads of graded
strength (see :func:`sink_state_dict`), so τ = 0.3 separates heads.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers
from scipy import stats

import poslens
from poslens.fit.metrics import all_metrics
from poslens.mechanisms import effects, sinks
from poslens.mechanisms.interventions import BosReplacement, Position0Transplant, SinkAblation
from poslens.model.hooks import attn_pattern, attn_qkv, attn_z, resid_post, resid_pre, run_with_hooks
from poslens.testing import save_tiny_model

sys.path.insert(0, str(Path(__file__).parents[2]))
import naive_reference as nr  # noqa: E402

N_SEQS, SEQ_LEN, GROUPS, EARLY, BATCH = 8, 32, 4, 16, 2
TAU = 0.3
BOS, D_HEAD, SLOW_DIM = 1, 16, 7  # rotate_half pair (7, 15) turns by 1e4^(-7/8) ≈ 3e-4 rad per position
# query head → strength of its constant query along the BOS key: a_i0 ≈ 1, ≈ 0.5, ≈ 0.2 at layer 0
SINK_QUERIES = {0: 1.0, 2: 0.25, 3: 0.1}


def sink_state_dict(folder: Path) -> dict[str, torch.Tensor]:
    """The weights of the tiny Llama in ``folder``, edited so that layer 0 holds sink heads.

    Every embedding row gets a shared unit direction u, the BOS row also a
    direction v (both removed from the random rows first). In layer 0, the
    slowest rotary dimension of query head h reads α_h·u (a constant query) and
    that of each kv head reads v (a key only the BOS has), so s_i0 ≈ 11·α_h for
    every i and s_ij ≈ 0 otherwise: head 0 puts almost all its mass on key 0.
    """
    state = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).state_dict()
    state = {name: tensor.clone() for name, tensor in state.items()}
    emb = state["model.embed_tokens.weight"]
    u, v = torch.linalg.qr(torch.randn(emb.shape[1], 2, generator=torch.Generator().manual_seed(5)))[0].T
    emb -= (emb @ u)[:, None] * u + (emb @ v)[:, None] * v
    emb += u
    emb[BOS] += v
    q = state["model.layers.0.self_attn.q_proj.weight"]
    k = state["model.layers.0.self_attn.k_proj.weight"]
    for kv_head in range(k.shape[0] // D_HEAD):
        k[kv_head * D_HEAD + SLOW_DIM] = v
    for head, alpha in SINK_QUERIES.items():
        q[head * D_HEAD + SLOW_DIM] = alpha * u
    return state


class Setup:
    """A model, its BOS corpus, the plain HF model, a baseline measurement and its native attention weights."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.model = poslens.load_model(folder)
        self.corpus = poslens.make_corpus(self.model, "random", n_seqs=N_SEQS, seq_len=SEQ_LEN, position0="bos", seed=3)
        self.tokens = self.corpus.tokens
        assert (self.tokens[:, 0] == BOS).all()
        self.settings = dict(groups=GROUPS, early=EARLY, batch_size=BATCH, progress=False)
        self.baseline = poslens.measure(self.model, self.corpus, **self.settings)
        self.hf = transformers.AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager", dtype=torch.float32)
        self.hf.eval()
        with torch.no_grad():
            out = self.hf(self.tokens, output_attentions=True)
        # [N, L, H, T, T] in float64
        self.attentions = np.stack([a.double().numpy() for a in out.attentions], axis=1)

    def hidden_states(self, **inputs) -> list[torch.Tensor]:
        with torch.no_grad():
            return list(self.hf(**inputs, output_hidden_states=True).hidden_states)


@pytest.fixture(scope="module")
def setups(tmp_path_factory: pytest.TempPathFactory, tiny_llama_dir: Path, tiny_gemma3_dir: Path):
    made: dict[str, Setup] = {}

    def get(name: str) -> Setup:
        if name not in made:
            if name == "gemma3":
                folder = tiny_gemma3_dir
            else:  # "llama-sinks", "mistral-sinks": the same edited weights, full causal or a window of 8
                kind = name.split("-")[0]
                folder = save_tiny_model(tmp_path_factory.mktemp(f"sinks_{kind}"), kind, state_dict=sink_state_dict(tiny_llama_dir))
            made[name] = Setup(folder)
        return made[name]

    return get


def jackknife(estimate: np.ndarray, replicates: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """θ̂ ± t_{0.975, G−1}·sqrt((G−1)/G Σ_g (θ_(g) − mean θ_(·))²), replicates on axis 0."""
    g = replicates.shape[0]
    se = np.sqrt((g - 1) / g * ((replicates - replicates.mean(0)) ** 2).sum(0))
    half = stats.t.ppf(0.975, g - 1) * se
    return estimate - half, estimate + half


def naive_sink_scores(attentions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean over sequences and queries i ≥ 1 of a_i0, per [layer, head], with its delete-one-group interval."""
    key0 = attentions[:, :, :, 1:, 0]  # [N, L, H, T−1]; rows where a window hides key 0 hold 0 and count
    group = nr.group_of(len(attentions), GROUPS)
    score = key0.mean(axis=(0, 3))
    replicates = np.stack([key0[group != g].mean(axis=(0, 3)) for g in range(GROUPS)])
    low, high = jackknife(score, replicates)
    return score, low, high


def row(table, metric: str, layer: int, head: int) -> tuple[float, float, float]:
    r = table[(table["metric"] == metric) & (table["layer"] == layer) & (table["head"] == head)]
    assert len(r) == 1, (metric, layer, head, len(r))
    return float(r["value"].iloc[0]), float(r["ci_low"].iloc[0]), float(r["ci_high"].iloc[0])


def vocab_id(folder: Path, token: str) -> int:
    """The id of ``token`` in the saved tokenizer's vocabulary (byte-level: "a" is the byte a)."""
    return transformers.AutoTokenizer.from_pretrained(folder).get_vocab()[token]


def record(store: dict, key) -> Callable:
    def hook(x: torch.Tensor, hook) -> None:
        store[key] = x.detach().double().clone()

    return hook


# -- sinks (methodology §6) --------------------------------------------------------


@pytest.mark.parametrize("name", ["llama-sinks", "mistral-sinks", "gemma3"])
def test_sink_table_matches_native_attention(setups, name: str):
    setup = setups(name)
    score, low, high = naive_sink_scores(setup.attentions)
    n_layers, n_heads = score.shape
    table = sinks.sink_table(setup.baseline)
    assert set(table["query_window"]) == {"all"}
    assert len(table[table["metric"] == "sink_score"]) == n_layers * n_heads
    for layer in range(n_layers):
        for head in range(n_heads):
            got = row(table, "sink_score", layer, head)
            want = (score[layer, head], low[layer, head], high[layer, head])
            np.testing.assert_allclose(got, want, rtol=0, atol=2e-7, err_msg=f"sink_score L{layer} h{head}")
    # every threshold that lies clear of all scores and interval ends: 0.3, and one between each pair of neighbours
    ends = np.unique(np.concatenate([score.ravel(), low.ravel(), high.ravel()]))
    taus = [TAU] + [(a + b) / 2 for a, b in zip(ends[:-1], ends[1:], strict=False) if b - a > 1e-5]
    for tau in taus:
        assert np.abs(ends - tau).min() > 5e-6, tau  # no figure sits on τ, so counts cannot flip by rounding
        table = sinks.sink_table(setup.baseline, tau)
        for layer in list(range(n_layers)) + [-1]:
            part = slice(None) if layer == -1 else layer  # the model count includes layer 0
            want = tuple(float((x[part] >= tau).sum()) for x in (score, low, high))
            assert row(table, "sink_heads", layer, -1) == want, (tau, layer)
        want_heads = sorted((int(l), int(h)) for l, h in zip(*np.nonzero(score >= tau), strict=False))
        assert sinks.sink_reading_heads(setup.baseline, tau) == want_heads, tau
    if name == "llama-sinks":
        # the edit gives sink heads and non-sink heads at the default τ, so the count is not trivially 0 or all
        assert sinks.sink_reading_heads(setup.baseline) == [(0, 0), (0, 2)]
        assert score[0, 0] > 0.95


@pytest.mark.parametrize("name", ["llama-sinks", "mistral-sinks"])
def test_key0_means_are_means_over_rows_that_see_key0(setups, name: str):
    setup = setups(name)
    window = setup.model.sliding_windows[0]
    stop = SEQ_LEN if window is None else min(SEQ_LEN, window)
    heads = [(layer, head) for layer in range(setup.model.n_layers) for head in range(setup.model.n_heads)]
    got = sinks.key0_means(setup.baseline, heads)
    for layer, head in heads:
        want = setup.attentions[:, layer, head, 1:stop, 0].mean()
        assert got[(layer, head)] == pytest.approx(want, abs=2e-7), (layer, head)
    if window is not None:  # the window matters: the mean over all rows is far from it
        assert abs(setup.attentions[:, 0, 0, 1:, 0].mean() - got[(0, 0)]) > 0.1


# -- sink-path ablation (methodology §7) -------------------------------------------


@pytest.mark.parametrize("name,tau", [("llama-sinks", TAU), ("mistral-sinks", 0.1)])
def test_sink_ablation_rewrites_key0_and_rescales_rows(setups, name: str, tau: float):
    setup = setups(name)
    model = setup.model
    score, _, _ = naive_sink_scores(setup.attentions)
    heads = [(int(l), int(h)) for l, h in zip(*np.nonzero(score >= tau), strict=False)]
    # ablate in two layers: the edited sink heads of layer 0, and two ordinary heads of layer 1 downstream
    heads += [(1, 1), (1, 3)]
    means = sinks.key0_means(setup.baseline, heads)
    ablation = SinkAblation(means)
    layers = sorted({l for l, _ in heads})
    before, after, values, outputs = {}, {}, {}, {}
    tokens = setup.tokens[:3]
    hooks = [(attn_pattern(l), record(before, l)) for l in layers]
    hooks += ablation.hooks(model, tokens)
    hooks += [(attn_pattern(l), record(after, l)) for l in layers]
    hooks += [(attn_qkv(l, "v"), record(values, l)) for l in layers] + [(attn_z(l), record(outputs, l)) for l in layers]
    run_with_hooks(model, tokens, hooks)
    # before the first ablation the patterns are the native model's
    np.testing.assert_allclose(before[0].numpy(), setup.attentions[:3, 0], rtol=0, atol=1e-6)

    positions = np.arange(SEQ_LEN)
    for layer in layers:
        a0, a1 = before[layer].numpy(), after[layer].numpy()  # [batch, H, T, T]
        window = model.sliding_windows[layer]
        sees_key0 = (positions >= 1) & ((positions < window) if window else True)
        want = a0.copy()
        for (l, head), mean in means.items():
            if l != layer:
                continue
            for i in np.nonzero(sees_key0)[0]:
                want[:, head, i, 1:] = a0[:, head, i, 1:] * (1 - mean) / (1 - a0[:, head, i, 0])[:, None]
                want[:, head, i, 0] = mean
            assert np.abs(a1[:, head, sees_key0, 0] - mean).max() < 1e-6
        np.testing.assert_allclose(a1, want, rtol=0, atol=1e-6, err_msg=f"layer {layer}")
        np.testing.assert_allclose(a1.sum(-1), 1.0, rtol=0, atol=1e-6)
        assert np.abs(a1 - a0).max() > 0.05  # the ablation really changed the rows
        # the heads' outputs are made from the ablated pattern: z_i = Σ_j a_ij v_j (grouped-query: kv head h // 2)
        v = values[layer].numpy()  # [batch, T, kv heads, d_head]
        v = np.repeat(v, model.n_heads // v.shape[2], axis=2)
        z = np.einsum("bhij,bjhd->bihd", a1, v)
        np.testing.assert_allclose(outputs[layer].numpy(), z, rtol=0, atol=1e-5, err_msg=f"z, layer {layer}")


# -- BOS-embedding replacement (methodology §7) ------------------------------------

KINDS = ["mean", "zero", "token:7", "token:a", "noise"]


@pytest.mark.parametrize("name", ["llama-sinks", "gemma3"])
@pytest.mark.parametrize("kind", KINDS)
def test_bos_replacement_matches_the_embedding_module(setups, name: str, kind: str):
    setup = setups(name)
    model, tokens = setup.model, setup.tokens[:3]
    embedding = setup.hf.get_input_embeddings()
    vocab = embedding.weight.shape[0]
    with torch.no_grad():
        rows = embedding(torch.arange(vocab)[None])[0].double()  # every row through the module (Gemma: ×√d)
        embedded = embedding(tokens).double()
    if name == "gemma3":  # the module's scaling matters: raw weight rows would fail this test
        assert np.abs(rows.numpy() - embedding.weight.detach().double().numpy()).max() > 0.1
    swap = BosReplacement(kind)
    seen: dict[int, torch.Tensor] = {}
    run_with_hooks(model, tokens, swap.hooks(model, tokens) + [(resid_pre(0), record(seen, 0))])
    got = seen[0]
    # positions ≥ 1 are the plain embeddings
    torch.testing.assert_close(got[:, 1:], embedded[:, 1:], rtol=0, atol=1e-6)
    if kind == "noise":
        norms = embedded[:, 0].norm(dim=-1)
        torch.testing.assert_close(got[:, 0].norm(dim=-1), norms, rtol=1e-6, atol=0)
        direction = got[:, 0] / got[:, 0].norm(dim=-1, keepdim=True)
        torch.testing.assert_close(direction, direction[:1].expand_as(direction), rtol=0, atol=1e-6)  # one direction
        assert abs(float(direction[0] @ embedded[0, 0] / norms[0])) < 0.5  # not the embedding it replaces
        # the same direction in a separate batch, and another one under another seed
        other: dict[int, torch.Tensor] = {}
        more = setup.tokens[5:7]
        run_with_hooks(model, more, BosReplacement("noise").hooks(model, more) + [(resid_pre(0), record(other, 0))])
        run_with_hooks(model, more, BosReplacement("noise", seed=1).hooks(model, more) + [(resid_pre(0), record(other, 1))])
        torch.testing.assert_close(other[0][0, 0] / other[0][0, 0].norm(), direction[0], rtol=0, atol=1e-6)
        assert (other[1][0, 0] / other[1][0, 0].norm() - direction[0]).abs().max() > 0.1
        return
    if kind == "mean":
        want = rows.mean(0)  # over the whole vocabulary, special tokens included
    elif kind == "zero":
        want = torch.zeros(rows.shape[1], dtype=torch.float64)
    else:
        token = kind.removeprefix("token:")
        token_id = int(token) if token.isdigit() else vocab_id(setup.folder, token)
        assert token_id != BOS
        want = rows[token_id]
        assert swap.describe()["token_id"] == token_id
    torch.testing.assert_close(got[:, 0], want.expand(len(tokens), -1), rtol=0, atol=1e-6)
    # downstream, the run equals the native model fed these embeddings
    inputs = embedded.float().clone()
    inputs[:, 0] = want.float()
    logits = run_with_hooks(model, tokens, swap.hooks(model, tokens), logits=True)
    with torch.no_grad():
        native = setup.hf(inputs_embeds=inputs).logits
    torch.testing.assert_close(logits.double(), native.double(), rtol=0, atol=1e-4)


# -- position-0 transplant (methodology §7) ----------------------------------------


@pytest.mark.parametrize("name", ["llama-sinks", "gemma3"])
@pytest.mark.parametrize("donor", ["token:42", "a"])
def test_transplant_writes_the_donor_trajectory_into_every_block(setups, name: str, donor: str):
    setup = setups(name)
    model, tokens = setup.model, setup.tokens[:3]
    token = donor.removeprefix("token:")
    donor_id = int(token) if token.isdigit() else vocab_id(setup.folder, token)
    # the donor trajectory: the native model's hidden states entering each block, for the one-token input
    trajectory = setup.hidden_states(input_ids=torch.tensor([[donor_id]]))
    baseline = setup.hidden_states(input_ids=tokens)
    # under causal attention the transplant equals running with the donor token at position 0
    swapped = tokens.clone()
    swapped[:, 0] = donor_id
    expected = setup.hidden_states(input_ids=swapped)
    transplant = Position0Transplant(donor)
    seen: dict[int, torch.Tensor] = {}
    run_with_hooks(model, tokens, transplant.hooks(model, tokens) + [(resid_pre(l), record(seen, l)) for l in range(model.n_layers)])
    assert transplant.describe()["token_id"] == donor_id
    assert len(seen) == model.n_layers
    for layer in range(model.n_layers):
        want = trajectory[layer][0, 0].double()
        assert (baseline[layer][:, 0].double() - want).abs().max() > 1e-2  # the BOS trajectory is another one
        torch.testing.assert_close(seen[layer][:, 0], want.expand(len(tokens), -1), rtol=0, atol=1e-5, msg=f"block {layer}")
        torch.testing.assert_close(seen[layer], expected[layer].double(), rtol=0, atol=1e-4, msg=f"block {layer}, all positions")

    # Overwritten entering every block, not only the first: a disturbance added to position 0 as each block
    # ends reaches the next block's input on its own, and is gone from it under the transplant.
    def disturb(resid: torch.Tensor, hook) -> torch.Tensor:
        out = resid.clone()
        out[:, 0] += 3.0
        return out

    disturbances = [(resid_post(l), disturb) for l in range(model.n_layers - 1)]
    alone: dict[int, torch.Tensor] = {}
    run_with_hooks(model, tokens, disturbances + [(resid_pre(l), record(alone, l)) for l in range(1, model.n_layers)])
    disturbed: dict[int, torch.Tensor] = {}
    hooks = disturbances + transplant.hooks(model, tokens) + [(resid_pre(l), record(disturbed, l)) for l in range(1, model.n_layers)]
    run_with_hooks(model, tokens, hooks)
    for layer in range(1, model.n_layers):
        want = trajectory[layer][0, 0].double()
        assert (alone[layer][:, 0] - baseline[layer][:, 0].double()).abs().max() > 1.0  # the disturbance arrives
        torch.testing.assert_close(disturbed[layer][:, 0], want.expand(len(tokens), -1), rtol=0, atol=1e-5, msg=f"block {layer}, disturbed")


# -- reduction (methodology §7) ----------------------------------------------------


@pytest.mark.integration  # slow: out of make test-fast, which stays under 2 minutes
@pytest.mark.parametrize("intervention", ["bos:mean", "sink-ablation"])
def test_reduction_matches_hand_computation(setups, intervention: str):
    setup = setups("llama-sinks")
    model, before = setup.model, setup.baseline
    if intervention == "bos:mean":
        iv = BosReplacement("mean")
    else:
        score, _, _ = naive_sink_scores(setup.attentions)
        iv = SinkAblation({(int(l), int(h)): float(setup.attentions[:, l, h, 1:, 0].mean()) for l, h in zip(*np.nonzero(score >= TAU), strict=False)})
    after = poslens.measure(model, setup.corpus, interventions=[iv], **setup.settings)
    n_layers = model.n_layers
    # naive C_res per layer (mean over heads), for all sequences and for each leave-one-group-out replicate
    group = nr.group_of(N_SEQS, GROUPS)
    bins = nr.ReferenceBins(SEQ_LEN, EARLY)
    scores = {
        "before": nr.capture_scores(model, setup.tokens, GROUPS, BATCH),
        "after": nr.capture_scores(model, setup.tokens, GROUPS, BATCH, interventions=[iv]),
    }

    def naive(run: str, window: str, keep: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """C_res and L, layers 1.. then the model aggregate (means over heads, then over layers ≥ 1).

        The per-sequence counterfactual is cross-fitted over the groups kept (their original labels):
        in the replicate without g', group γ's sequences use A fitted on the sequences outside γ and g'."""
        layers = [nr.layer_metrics(nr.PairData(s[keep], bins, window), saturated=False, groups=group[keep]) for s in scores[run]]
        out = []
        for metric in ("c_res", "leakage_pattern"):
            per_layer = [m[metric].mean() for m in layers]
            out.append(np.array(per_layer[1:] + [np.mean(per_layer[1:])]))
        return out[0], out[1]

    def package(result, window: str, g: int | None) -> np.ndarray:
        """The C_res that effects.reduction divides: from the pooled sums, or from sums.leave_out(g) (replicate g's own refit)."""
        sums = result.sums
        cf = sums.counterfactual_cells
        m = all_metrics(
            sums.pooled() if g is None else sums.leave_out(g), cf.pooled() if g is None else cf.leave_out(g), sums.binning, sums.layer_windows
        )
        return m["c_res"][["early", "all"].index(window), 1:, -1]  # layers 1.., then the model aggregate

    runs = {"before": before, "after": after}
    for window in ("early", "all"):
        # the default window is early, C3's
        table = effects.reduction(before, after) if window == "early" else effects.reduction(before, after, query_window=window)
        assert set(table["metric"]) == {"reduction"} and set(table["query_window"]) == {window}
        assert set(table["intervention"]) == {iv.label} and set(table["head"]) == {-1}
        assert sorted(table["layer"]) == [-1] + list(range(1, n_layers))  # no layer-0 row
        # point values by hand from the two results' own tables: 1 − C_res(after) / C_res(before)
        for layer in list(range(1, n_layers)) + [-1]:
            want = 1 - after.value("c_res", window, layer) / before.value("c_res", window, layer)
            assert row(table, "reduction", layer, -1)[0] == pytest.approx(want, rel=1e-12, abs=1e-12), (window, layer)
        # The paired jackknife: each replicate refits both runs without group g. On these layers C_res is
        # ~1e-6 of L ≈ 0.77 (ρ_res ~ 4e-6), so 1 − C_res(after)/C_res(before) amplifies any rounding
        # of C_res by ~1/C_res: checked as (1) every C_res it divides, full and per replicate, against
        # the reference to 1e-8 of L, and (2) the jackknife of the ratios of those C_res to 1e-12.
        everyone = np.ones(N_SEQS, bool)
        own = {}
        for run, result in runs.items():
            for g in [None] + list(range(GROUPS)):
                want, leak = naive(run, window, everyone if g is None else group != g)
                got = package(result, window, g)
                np.testing.assert_allclose(got, want, rtol=0, atol=1e-8 * leak.min(), err_msg=f"C_res {run} {window} replicate {g}")
                own[run, g] = got
        # (1) tells the two jackknife definitions apart here: keeping each sequence's full cross-fit log a'(n)
        # in the replicates (only P refit) moves some layer's C_res by more than 5× the tolerance, in every replicate
        full_ap = {layer: nr.perseq_log_ap(nr.PairData(scores["before"][layer], bins, window), GROUPS) for layer in range(1, n_layers)}
        for g in range(GROUPS):
            keep = group != g
            want, leak = naive("before", window, keep)
            kept = []
            for layer in range(1, n_layers):
                s = scores["before"][layer]
                pair_n = nr.PairData(s, bins, window).n
                kept_data = nr.PairData(s[keep], bins, window)
                kept.append(nr.layer_metrics(kept_data, saturated=False, log_ap=full_ap[layer][keep[pair_n]])["c_res"].mean())
            assert np.abs(np.array(kept) - want[:-1]).max() > 5e-8 * leak.min(), (window, g)
        estimate = 1 - own["after", None] / own["before", None]
        replicates = np.stack([1 - own["after", g] / own["before", g] for g in range(GROUPS)])
        low, high = jackknife(estimate, replicates)
        for k, layer in enumerate(list(range(1, n_layers)) + [-1]):
            got = row(table, "reduction", layer, -1)
            np.testing.assert_allclose(got, (estimate[k], low[k], high[k]), rtol=1e-12, atol=1e-12, err_msg=f"{window} layer {layer}")
        # the aggregate is the ratio of the aggregates, not the mean of the per-layer ratios
        agg = row(table, "reduction", -1, -1)[0]
        assert abs(agg - np.mean(estimate[:-1])) > 1e-6
