"""The controls of the sink-path split (methodology §13.6) on hand-built tiny models (``split_models.py``).

Each model's intended property is checked first, with plain forward passes and nothing of the split:

- **count only**: the sink head's key-0 logit is c at every row, every other logit 0, so a_i0 = e^c / (e^c + i);
- **phase only**: the competing mass ell_i is constant in i (the diagonal logit stands at least 14 above every
  other key j ≥ 1, checked at every row up to T), and the key-0 logit turns with RoPE, P·cos(i·ω₄);
- **phase with content noise**: the same, with the diagonal logit's sd over tokens ≈ 1.4;
- **cancel**: a_i0 nearly flat in i (the count and a rising phase offset each other);
- every model writes a_i0, and nothing else, into the residual stream that layers ≥ 2 read.

Then the split (every run under a float64 softmax, :class:`split_models.Float64Softmax`: transformers' eager
softmax is float32 even for float64 weights), readout V:

- count only: share_m ≥ 0.8 and C8 "count";
- phase only: share_m ≤ 0.2 and C8 "phase";
- phase with content noise: share_m ≤ 0.2;
- cancel: no share (the split records why, and C8 says "no share");
- identity: the per-layer readouts of layers 1, 2 and 3 (which see the same residual stream, layers ≥ 1 being
  silenced) agree to 1e-10 in every run, and a second run batched otherwise (8 sequences a pass, another sham seed)
  gives the same f, unedited and under each edit, to 1e-10.

The every-head P0 run is left out (``every_head_phase=False``): the float64 softmax takes the scores as the capture
sees them, before P0's edit of them, so under it that run would be the unedited one.
"""

from __future__ import annotations

import math

import pytest
import torch
from split_models import (
    OUTPUT,
    SEQ_LEN,
    Float64Softmax,
    cancel_model,
    count_model,
    phase_model,
    sink_head_scores,
)

import poslens
from poslens.model import hooks as hook_names
from poslens.model.hooks import run_with_hooks

pytestmark = pytest.mark.integration

N_SEQS, GROUPS, OFFSET = 32, 8, 32
COUNT_C, PHASE_P, NOISE_SD = 2.0, 2.5, 1.4


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    built = {
        "count": count_model(tmp_path_factory.mktemp("count"), c=COUNT_C),
        "phase": phase_model(tmp_path_factory.mktemp("phase"), phase=PHASE_P),
        "noise": phase_model(tmp_path_factory.mktemp("noise"), phase=PHASE_P, noise=NOISE_SD),
        "cancel": cancel_model(tmp_path_factory.mktemp("cancel"), c=COUNT_C),
    }
    corpus = poslens.make_corpus(built["count"], "random", n_seqs=N_SEQS, seq_len=SEQ_LEN, seed=0)
    return built, corpus


# ----- the models' own properties, from plain forward passes ------------------------------------------------------

ROWS = torch.arange(1, SEQ_LEN, dtype=torch.float64)  # i = 1..T − 1


def competing_mass(scores: torch.Tensor) -> torch.Tensor:
    """ell_i = logsumexp over the visible keys j ≥ 1, rows i ≥ 1: [batch, T − 1]."""
    return torch.logsumexp(scores[:, 1:, 1:], dim=-1)


def key0_mass(scores: torch.Tensor) -> torch.Tensor:
    """a_i0 from a float64 softmax, rows i ≥ 1: [batch, T − 1]."""
    return torch.softmax(scores, dim=-1)[:, 1:, 0]


def test_count_model_has_a_constant_key0_logit_and_a_i0_is_the_mask_count(models):
    built, corpus = models
    scores = sink_head_scores(built["count"], corpus.tokens)
    key0 = scores[:, 1:, 0]
    assert key0.max() - key0.min() < 1e-6  # constant in i (up to transformers' float32 RoPE tables and RMSNorm)
    assert (key0 - COUNT_C).abs().max() < 1e-6
    others = scores[:, 1:, 1:]
    assert others[torch.isfinite(others)].abs().max() < 1e-12  # every other visible logit equal (0)
    expected = math.exp(COUNT_C) / (math.exp(COUNT_C) + ROWS)
    assert (key0_mass(scores) - expected).abs().max() < 1e-7


def test_phase_model_has_a_constant_competing_mass_and_a_key0_logit_turning_with_rope(models):
    built, corpus = models
    model = built["phase"]
    scores = sink_head_scores(model, corpus.tokens)
    diagonal = torch.diagonal(scores, dim1=1, dim2=2)[:, 1:]
    below = scores[:, 1:, 1:].clone()
    below.diagonal(dim1=1, dim2=2).fill_(-torch.inf)
    gap = diagonal[:, 1:] - below[:, 1:].max(-1).values  # rows i ≥ 2, every key 1 ≤ j < i: the gap up to T
    assert gap.min() > 14.0, gap.min()
    ell = competing_mass(scores)
    assert (ell - diagonal).abs().max() < 1e-6  # only the diagonal key competes with key 0
    assert ell.max() - ell.min() < 1e-4  # constant in i (and across sequences): 0 up to float32 RoPE tables
    omega = 500.0 ** (-4 / 8)
    turning = PHASE_P * torch.cos(ROWS * omega)
    assert (scores[:, 1:, 0] - turning).abs().max() < 1e-5  # the key-0 logit: P·cos(i·ω₄), through RoPE alone
    assert turning.max() - turning.min() > 4.0
    a = key0_mass(scores).mean(0)
    assert a[0] > 0.9 and a[-1] < 0.1  # key 0's phase moves a_i0 across most of (0, 1)


def test_phase_noise_model_adds_content_of_sd_1_4_to_the_diagonal_logit(models):
    built, corpus = models
    noisy = sink_head_scores(built["noise"], corpus.tokens)
    clean = sink_head_scores(built["phase"], corpus.tokens)
    diagonal = torch.diagonal(noisy, dim1=1, dim2=2)[:, 1:]
    assert abs(float(diagonal.std()) - NOISE_SD) < 0.1, float(diagonal.std())  # the token-content term
    by_row = diagonal.mean(0)
    assert by_row.std() < 0.5 * NOISE_SD  # it follows the token, not the position
    assert (competing_mass(noisy) - diagonal).abs().max() < 1e-5  # the diagonal still carries all the competing mass
    assert (noisy[:, 1:, 0] - clean[:, 1:, 0]).abs().max() < 1e-12  # key 0's logit as in the phase-only model


def test_cancel_model_keeps_a_i0_nearly_flat(models):
    built, corpus = models
    scores = sink_head_scores(built["cancel"], corpus.tokens)
    assert (competing_mass(scores) - torch.log(ROWS)).abs().max() < 1e-10  # the count's mask: ell_i = log i
    key0 = scores[:, 1:, 0]
    assert key0[:, -1].min() - key0[:, 0].max() > 2.0  # a key-0 logit that rises with i
    flat = key0_mass(scores).mean(0)
    count = key0_mass(sink_head_scores(built["count"], corpus.tokens)).mean(0)
    assert flat.std() < 0.2 * count.std(), (float(flat.std()), float(count.std()))


@pytest.mark.parametrize("name", ["count", "phase", "noise", "cancel"])
def test_only_the_sink_heads_output_reaches_layers_from_2(models, name):
    built, corpus = models
    model = built[name]
    seen = {}

    def keep(key):
        def hook(x, hook):
            seen[key] = x.detach().clone()

        return hook

    hooks = [(hook_names.attn_pattern(0), keep("pattern")), (hook_names.embed(), keep("embed"))]
    hooks += [(hook_names.resid_pre(layer), keep(layer)) for layer in range(1, model.n_layers)]
    run_with_hooks(model, corpus.tokens, hooks)
    expected = seen["embed"].clone()
    expected[..., OUTPUT] += seen["pattern"][:, 0, :, 0]  # a_i0 · v_0, v_0 = 1
    for layer in range(1, model.n_layers):
        assert (seen[layer] - expected).abs().max() < 1e-7, layer  # v_0 = 1 up to float32 RMSNorm


# ----- the split's controls ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def splits(models):
    from poslens.mechanisms.sink_split import sink_path_split

    built, corpus = models
    cache: dict[tuple, object] = {}

    def run(name: str, **settings):
        key = (name, *sorted(settings.items()))
        if key not in cache:
            cache[key] = sink_path_split(
                built[name],
                corpus,
                heads=[(0, 0)],
                offset=OFFSET,
                groups=GROUPS,
                every_head_phase=False,  # Float64Softmax softmaxes the scores before an after-capture edit (P0) could change them
                interventions=[Float64Softmax()],
                progress=False,
                **settings,
            )
        return cache[key]

    return run


def derived(result, metric: str, readout: str = "V") -> tuple[float, float, float]:
    """(value, ci_low, ci_high) of a derived figure of the split."""
    table = result.table
    row = table[(table["kind"] == "derived") & (table["readout"] == readout) & (table["metric"] == metric)]
    assert len(row) == 1, (metric, readout, len(row))
    return float(row["value"].iloc[0]), float(row["ci_low"].iloc[0]), float(row["ci_high"].iloc[0])


def levels(result, intervention: str, readout: str = "V"):
    """The level rows (metric f) of one run, indexed by layer (−1: the mean over layers ≥ 2)."""
    table = result.table
    rows = table[(table["kind"] == "level") & (table["readout"] == readout) & (table["intervention"] == intervention)]
    return rows.set_index("layer")["value"]


def test_count_only_is_mostly_the_masks_count(splits):
    result = splits("count")
    share = derived(result, "share_m")
    assert share[0] >= 0.8, (share, result.meta["c8"])
    assert result.meta["c8"]["verdict"] == "count", result.meta["c8"]


def test_phase_only_is_mostly_key0s_phase(splits):
    result = splits("phase")
    share = derived(result, "share_m")
    assert share[0] <= 0.2, (share, result.meta["c8"])
    assert result.meta["c8"]["verdict"] == "phase", result.meta["c8"]


def test_phase_with_content_noise_is_still_mostly_key0s_phase(splits):
    result = splits("noise")
    share = derived(result, "share_m")
    assert share[0] <= 0.2, (share, result.meta["c8"])


def test_cancel_has_no_share(splits):
    result = splits("cancel")
    assert result.meta["split"]["V"]["no_share"] is not None, result.meta["split"]["V"]
    assert result.meta["c8"]["verdict"] == "no share", result.meta["c8"]


def test_identity_layers_that_see_one_stream_and_another_batching_agree(splits):
    result = splits("count")
    for run in ("none", "m", "p", "mp", "s"):
        per_layer = levels(result, run)
        assert abs(per_layer[2] - per_layer[1]) < 1e-10 and abs(per_layer[3] - per_layer[2]) < 1e-10, (run, per_layer)
    again = splits("count", batch_size=8, seed=1, shams=False)  # a second unedited run, batched otherwise
    for run in ("none", "m", "p", "mp", "s"):
        assert abs(levels(again, run)[-1] - levels(result, run)[-1]) < 1e-10, run
