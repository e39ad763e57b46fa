"""The zoo's synthetic task (Bigram-Backcopy) and C4 decided inside a trained family: unit tests, no training.

The task is checked against its definition (the copy rule, no two triggers in a
row, the bigram rows, the trigger rate ρ/(1+ρ), a stationary distribution over
positions), its determinism, and the route the measuring commands take (the
held-out text through the saved tokenizer and ``make_corpus``). C4's zoo case is
checked against a t interval computed here by hand, with seeds pairing the
members, and against the inference-time rows of the committed full run.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from scipy import stats

from poslens.errors import InputError
from poslens.study.claims.c4_compare import C4_DIRECTIONS
from poslens.study.claims.c4_zoo import ZOO_COMPARISONS, claim_c4_zoo, inference_time_beside, seed_estimate
from poslens.study.claims.rules import INCONCLUSIVE, NOT_SUPPORTED, SUPPORTED
from poslens.study.claims.table import Claims
from poslens.study.claims.text import summary_rows
from poslens.study.zoo_measure import family_table
from poslens.zoo.backcopy import BOS_ID, BackcopySpec, backcopy_tokenizer, bigram_table, chains, load_backcopy, text_of

ROOT = Path(__file__).resolve().parents[3]
SMALL = BackcopySpec(train_chains=64, chain_len=2048, held_out_len=4096)


@pytest.fixture(scope="module")
def data():
    return load_backcopy(SMALL)


def test_the_copy_rule_and_the_bigram_rows_hold_in_the_chains(data):
    spec, x = data.spec, data.train
    trigger = x >= spec.first_trigger
    # after a trigger at t, the token at t + 1 is the one at t - 1; a trigger is never next to another
    assert torch.equal(x[:, 2:][trigger[:, 1:-1]], x[:, :-2][trigger[:, 1:-1]])
    assert not (trigger[:, 1:] & trigger[:, :-1]).any()
    # after a plain token, the next follows its row: compare the empirical transitions with the table (chi-square-free:
    # the largest deviation of a frequent row stays within 5 standard errors)
    table = bigram_table(spec)
    cur, nxt = x[:, :-1].reshape(-1), x[:, 1:].reshape(-1)
    plain = cur < spec.first_trigger
    counts = torch.zeros(spec.n_plain, spec.n_plain + spec.n_triggers, dtype=torch.float64)
    counts.index_put_((cur[plain] - 4, nxt[plain] - 4), torch.ones(int(plain.sum()), dtype=torch.float64), accumulate=True)
    n = counts.sum(1, keepdim=True)
    se = torch.sqrt(table * (1 - table) / n.clamp(min=1))
    frequent = n.squeeze(1) > 2000
    assert frequent.sum() > 10
    assert ((counts / n - table).abs()[frequent] <= 5 * se[frequent] + 1e-9).all()
    # each row gives the triggers rho, shared equally; a fraction rho / (1 + rho) of the tokens are triggers
    assert torch.allclose(table[:, spec.n_plain :].sum(1), torch.full((spec.n_plain,), spec.trigger_rate, dtype=torch.float64))
    share = float(trigger.double().mean())
    expected = spec.trigger_rate / (1 + spec.trigger_rate)
    assert abs(share - expected) < 5 * math.sqrt(expected * (1 - expected) / x.numel()) * 10  # chains are correlated: 10x slack


def test_the_task_is_stationary_in_position(data):
    # the share of triggers at each position of the training sequences is the same: no position is special
    batch = data.batch(64, 4000, torch.Generator().manual_seed(3))
    assert bool((batch[:, 0] == BOS_ID).all())
    trigger = (batch[:, 1:] >= data.spec.first_trigger).double()
    by_position = trigger.mean(0)
    p = float(trigger.mean())
    se = math.sqrt(p * (1 - p) / batch.shape[0])
    assert float((by_position - p).abs().max()) < 5 * se
    first, last = trigger[:, :16].mean(), trigger[:, -16:].mean()
    assert abs(float(first - last)) < 5 * math.sqrt(2 * p * (1 - p) / (16 * batch.shape[0]))


def test_the_data_is_deterministic_from_its_seeds():
    a, b = load_backcopy(SMALL), load_backcopy(SMALL)
    assert a.sha256 == b.sha256 and torch.equal(a.train, b.train) and torch.equal(a.held_out, b.held_out)
    other = load_backcopy(BackcopySpec(train_chains=64, chain_len=2048, held_out_len=4096, table_seed=1))
    assert other.sha256 != a.sha256 and not torch.equal(bigram_table(SMALL), bigram_table(other.spec))
    g1, g2 = torch.Generator().manual_seed(0), torch.Generator().manual_seed(0)
    assert torch.equal(a.batch(32, 8, g1), b.batch(32, 8, g2))
    assert not torch.equal(chains(SMALL, 2, 50, seed=0), chains(SMALL, 2, 50, seed=1))


def test_the_held_out_text_comes_back_as_the_task_tokens_through_make_corpus(data, tmp_path):
    # the route of the measuring commands: --corpus held_out.jsonl, the tokenizer saved with the model, BOS at 0
    import poslens

    path = data.write_held_out(tmp_path / "held_out.jsonl")
    text = json.loads(path.read_text())["text"]
    tokenizer = backcopy_tokenizer(data.spec)
    assert tokenizer(text).input_ids == data.held_out.tolist()
    corpus = poslens.make_corpus(tokenizer, str(path), n_seqs=6, seq_len=33, seed=0)
    assert bool((corpus.tokens[:, 0] == BOS_ID).all())
    stream = data.held_out.tolist()
    for row in corpus.tokens[:, 1:].tolist():  # each window is 32 consecutive tokens of the chain, at a multiple of 32
        start = next(k for k in range(0, len(stream) - 31, 32) if stream[k : k + 32] == row)
        assert start % 32 == 0
    assert text_of(data.spec, torch.tensor([4, data.spec.first_trigger])) == "w0 q0"


def test_bad_task_constants_are_refused():
    with pytest.raises(InputError, match="trigger_rate"):
        BackcopySpec(trigger_rate=1.5)
    with pytest.raises(InputError, match="plain tokens"):
        BackcopySpec(n_plain=1)
    with pytest.raises(InputError, match="too few"):
        load_backcopy(BackcopySpec(train_chains=2, chain_len=8, held_out_len=8)).batch(32, 1, torch.Generator())


# --------------------------------------------------------------------------- C4 inside the family


def _figures(values: dict[str, list[float]], slopes: list[float] | None = None) -> pd.DataFrame:
    rows = [dict(member=m, seed=s, metric="c_res", value=v) for m, vs in values.items() for s, v in enumerate(vs)]
    for member, vs in ({"sliding": slopes, "standard": [0.0] * len(slopes)} if slopes else {}).items():
        rows += [dict(member=member, seed=s, metric="c_res_depth_slope", value=v) for s, v in enumerate(vs)]
    return pd.DataFrame(rows)


def test_the_seed_interval_is_a_t_interval_computed_by_hand():
    x = np.array([0.3, 0.1, 0.5, 0.2])
    e = seed_estimate(x)
    se = x.std(ddof=1) / 2
    half = stats.t.ppf(0.975, 3) * se
    assert (e.value, e.df, e.n) == (pytest.approx(0.275), 3, 4)
    assert e.ci_low == pytest.approx(0.275 - half) and e.ci_high == pytest.approx(0.275 + half)
    assert e.detectable == pytest.approx((stats.t.ppf(0.975, 3) + stats.t.ppf(0.8, 3)) * se)
    # scipy's one-sample t-test agrees on the interval
    ci = stats.ttest_1samp(x, 0).confidence_interval(0.95)
    assert (e.ci_low, e.ci_high) == (pytest.approx(ci.low), pytest.approx(ci.high))


def test_c4_zoo_pairs_by_seed_and_decides_by_the_c4_directions():
    # the seeds share a large offset (a seed effect) that pairing removes: member − standard is −0.01 ± 0.001 per seed
    offsets = [0.0, 0.05, -0.04]
    values = {
        "standard": [0.02 + o for o in offsets],
        "large-base-trained": [0.01 + o + d for o, d in zip(offsets, [0.001, -0.001, 0.0], strict=True)],
        "sliding": [0.03 + o + d for o, d in zip(offsets, [0.0, 0.001, -0.001], strict=True)],
    }
    rows = claim_c4_zoo(_figures(values, slopes=[0.01, 0.012, 0.011]))
    by = {r["model"].split(": ", 1)[1]: r for r in rows}
    ntk = by["large-base-trained − standard: c_res, paired by seed"]
    assert ntk["figure"] == pytest.approx(-0.01) and ntk["ci_high"] < 0 and ntk["own_verdict"] == SUPPORTED
    assert ntk["case"] == "ntk" and C4_DIRECTIONS[("ntk", "paired", "c_res")] == -1
    sliding = by["sliding − standard: c_res, paired by seed"]
    assert sliding["figure"] == pytest.approx(0.01) and sliding["own_verdict"] == SUPPORTED
    slope = by["sliding: c_res_depth_slope, mean over seeds"]
    assert slope["own_verdict"] == SUPPORTED and slope["figure"] == pytest.approx(0.011)
    assert {r["verdict"] for r in rows} == {SUPPORTED}
    # the per-seed differences are reported inputs beside the detectable difference, never deciding
    inputs = Claims.from_rows(rows).inputs
    seeds = inputs[inputs["name"].str.startswith("c_res (large-base-trained − standard), seed")]
    assert seeds["value"].round(6).tolist() == [-0.009, -0.011, -0.01] and set(seeds["role"]) == {"reported"}
    # unpaired, the seed offsets would swamp the difference: the interval of the raw means reaches 0
    raw = seed_estimate(values["large-base-trained"])
    assert raw.ci_low < 0 < raw.ci_high


def test_c4_zoo_against_the_claim_one_seed_and_the_joint():
    values = {"standard": [0.02, 0.021, 0.019], "large-base-trained": [0.03, 0.031, 0.029], "sliding": [0.03, 0.04, 0.02]}
    rows = claim_c4_zoo(_figures(values))
    own = {r["case"]: r["own_verdict"] for r in rows}
    assert own == {"ntk": NOT_SUPPORTED, "sliding": INCONCLUSIVE}
    assert {r["verdict"] for r in rows} == {NOT_SUPPORTED}  # one comparison against the claim decides the claim
    single = claim_c4_zoo(_figures({m: v[:1] for m, v in values.items()}))
    assert all(math.isnan(r["ci_low"]) for r in single) and {r["own_verdict"] for r in single} == {INCONCLUSIVE}
    with pytest.raises(ValueError, match="no comparison"):
        claim_c4_zoo(_figures({"standard": [0.1, 0.2]}))
    assert [c.direction for c in ZOO_COMPARISONS] == [-1, 1, 1, 1]


def test_runs_without_a_sink_are_left_out_of_c4_and_named():
    values = {"standard": [0.02, 0.021, 0.019, 0.02], "large-base-trained": [0.01, 0.011, 0.009, 0.5], "sliding": [0.03, 0.031, 0.029, 0.03]}
    sinkless = [("large-base-trained", 3)]
    rows = {r["case"]: r for r in claim_c4_zoo(_figures(values), without_sinks=sinkless + [("sliding", s) for s in range(4)])}
    inputs = Claims.from_rows(list(rows.values())).inputs
    where = {k: inputs[(inputs["key"] == r["key"]) & (inputs["role"] != "reported")]["where"].iloc[0] for k, r in rows.items()}
    # seed 3 of the large base (an outlier of 0.5) is not read: the difference is the mean over seeds 0-2, by hand
    assert rows["ntk"]["figure"] == pytest.approx(np.mean([0.01 - 0.02, 0.011 - 0.021, 0.009 - 0.019]))
    assert "left out, no sink-reading head: large-base-trained-s3" in where["ntk"] and "seeds 0, 1, 2" in where["ntk"]
    # no sliding run formed a sink: its comparison could not be read, and says so
    assert math.isnan(rows["sliding"]["figure"]) and rows["sliding"]["own_verdict"] == INCONCLUSIVE
    assert "could not be read" in where["sliding"]


def test_a_c4_row_without_an_interval_says_why():
    rows = claim_c4_zoo(_figures({"standard": [0.02], "large-base-trained": [0.01], "sliding": [0.03]}))
    inputs = Claims.from_rows(rows).inputs
    decided = inputs[inputs["role"] != "reported"]
    assert len(decided) and all("no interval: one seed" in w for w in decided["where"])


def test_a_row_whose_comparisons_read_as_claimed_shows_its_own_verdict_beside_the_claims():
    # the summary's badge and sentence of a group follow its own comparisons; the claim's verdict stands beside
    values = {"standard": [0.02, 0.021, 0.019], "large-base-trained": [0.03, 0.031, 0.029], "sliding": [0.04, 0.041, 0.039]}
    claims = Claims.from_rows(claim_c4_zoo(_figures(values)))
    rows = {r["case"]: r for r in summary_rows(claims)}
    sliding = rows["zoo: sliding"]
    assert (sliding["own_verdict"], sliding["verdict"], sliding["own_css"]) == (SUPPORTED, NOT_SUPPORTED, "supported")
    assert sliding["sentence"].startswith("NTK suppresses") and "The claim as a whole is not supported" in sliding["sentence"]
    ntk = rows["zoo: large-base-trained"]
    assert ntk["own_verdict"] == ntk["verdict"] == NOT_SUPPORTED and "as a whole" not in ntk["sentence"]


def test_the_zoo_beside_the_inference_time_variants_of_the_full_run():
    inference = Claims.read(ROOT / "docs" / "findings_data")
    values = {"standard": [0.02, 0.021, 0.019], "large-base-trained": [0.01, 0.011, 0.009], "sliding": [0.03, 0.031, 0.029]}
    zoo = Claims.from_rows(claim_c4_zoo(_figures(values, slopes=[-0.01, -0.012, -0.011])))
    beside = inference_time_beside(zoo, inference).set_index("comparison")
    # the full run's own verdicts, read independently from its tables: ntk:α − base (c_res, paired), window:W − base
    table = inference.table
    ntk_rows = table[table["model"].str.contains(r"\(ntk:\d+\) − smollm2-135m: c_res, paired", regex=True, na=False)]
    assert len(ntk_rows) == 3
    ntk = beside.loc["large-base-trained − standard: c_res"]
    assert ntk["zoo_verdict"] == SUPPORTED and ntk["inference_verdicts"] == ", ".join(dict.fromkeys(ntk_rows["own_verdict"]))
    assert ntk["agreement"] == ("agree" if set(ntk_rows["own_verdict"]) == {SUPPORTED} else "partly")
    slope = beside.loc["sliding: c_res_depth_slope"]  # the window variants' own depth slopes all read as claimed
    window_slopes = table[table["model"].str.match(r"smollm2-135m \(window:\d+\): c_res_depth_slope$", na=False)]
    assert len(window_slopes) == 4 and set(window_slopes["own_verdict"]) == {SUPPORTED}
    assert slope["zoo_verdict"] == NOT_SUPPORTED and slope["agreement"] == "differ"


def test_the_family_table_gives_the_spread_over_seeds_and_the_paired_difference():
    rows = []
    for member, base in (("standard", 1.0), ("sliding", 1.5)):
        for seed, noise in enumerate([0.0, 0.2, -0.1]):
            rows.append(
                dict(
                    member=member,
                    seed=seed,
                    part="leakage",
                    metric="c_res",
                    layer=-1,
                    query_window="all",
                    intervention="none",
                    value=base + noise + (0.01 * seed if member == "sliding" else 0),
                    ci_low=np.nan,
                    ci_high=np.nan,
                )
            )
    rows.append(dict(rows[0], layer=1))  # a per-layer row is not a model-level figure
    t = family_table(pd.DataFrame(rows)).set_index("member")
    assert t.loc["standard", "mean"] == pytest.approx(1.0 + 0.1 / 3) and t.loc["standard", "sd"] == pytest.approx(np.std([0, 0.2, -0.1], ddof=1))
    assert math.isnan(t.loc["standard", "difference"])
    e = seed_estimate([0.5, 0.51, 0.52])
    assert t.loc["sliding", "difference"] == pytest.approx(0.51) and t.loc["sliding", "difference_ci_low"] == pytest.approx(e.ci_low)
    assert t.loc["sliding", "detectable"] == pytest.approx(e.detectable)


def test_zoo_measure_parts_named_in_the_cli_are_the_parts_it_measures():
    from poslens.study.part_registry import zoo_parts
    from poslens.study.zoo_measure import PARTS

    assert tuple(p.name for p in PARTS) == tuple(p.name for p in zoo_parts())


def test_zoo_measure_refuses_a_family_that_cannot_decide_c4_before_measuring(tmp_path):
    from typer.testing import CliRunner

    from poslens.study.cli import app

    zoo = tmp_path / "family"
    zoo.mkdir()
    (zoo / "zoo.json").write_text('{"settings": {"seq_len": 16}}')
    (zoo / "held_out.jsonl").write_text('{"text": "a b"}\n')
    pd.DataFrame(dict(member=["standard", "sliding"], seed=[0, 0], folder=["standard-s0", "sliding-s0"])).to_csv(zoo / "summary.csv", index=False)
    work = tmp_path / "work"
    result = CliRunner().invoke(app, ["zoo-measure", "--zoo", str(zoo), "--out", str(tmp_path / "out"), "--work", str(work)])
    text = " ".join(str(result.exception).split())  # poslens's run() prints a PoslensError as one "error:" line
    assert isinstance(result.exception, InputError) and "cannot be decided" in text and "--seeds 0,1,2" in text, result.output
    assert not work.exists()  # nothing was measured: the run folders (standard-s0, ...) do not exist, and none was needed
    bad = CliRunner().invoke(app, ["zoo-measure", "--zoo", str(zoo), "--out", str(tmp_path / "out"), "--work", str(work), "--parts", "sinks"])
    assert isinstance(bad.exception, InputError) and "must include leakage" in str(bad.exception)


def test_zoo_warns_when_its_steps_do_not_pass_the_warmup():
    from poslens.zoo.settings import WarmupWarning, ZooSettings

    with pytest.warns(WarmupWarning, match="steps = 20 is not above warmup = 100"):
        ZooSettings(task="bigram-backcopy", steps=20, warmup=100)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ZooSettings(task="bigram-backcopy", steps=200, warmup=100)


def test_zoo_warns_once_in_its_flags_when_steps_do_not_pass_the_warmup(tmp_path):
    import subprocess
    import sys

    args = ["zoo", "--task", "bigram-backcopy", "--steps", "2", "--warmup", "100", "--seq-len", "16", "--width", "8", "--depth", "1"]
    args += ["--heads", "1", "--seeds", "0,1", "--members", "standard", "--eval-every", "1", "--eval-seqs", "2", "--batch-size", "2"]
    code = "import sys; sys.argv[0] = 'poslens'; from poslens.study.cli import run; run()"
    done = subprocess.run([sys.executable, "-c", code, *args, "--out", str(tmp_path / "zoo")], capture_output=True, text=True, timeout=300)
    lines = [line for line in done.stderr.splitlines() if "warmup" in line]
    assert done.returncode == 0, done.stderr
    assert len(lines) == 1 and lines[0].startswith("warning: steps = 2 is not above warmup = 100") and "(--warmup 0)" in lines[0], done.stderr
    assert ".py:" not in done.stderr
    # the summary it prints fits a narrow terminal: no line of its table is wider than 80 columns
    table = done.stdout[done.stdout.index("member") :].splitlines()[:3]
    assert table[0].split() == ["member", "seed", "steps", "held-out", "loss", "sink", "heads", "key-0", "mass"] and max(map(len, table)) <= 80, (
        done.stdout
    )
