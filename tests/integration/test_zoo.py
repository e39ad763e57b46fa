"""The model zoo on the CPU: a tiny family trained through ``poslens zoo``, reloaded and measured.

One module-scoped run of the command trains all three members with two seeds
for a few steps (width 32, 2 layers, T = 32, the first 60 documents). The tests
check that the members differ only in the position scheme (configs, initial
weights, data order), that each folder loads through ``load_model`` with the
window and RoPE base it was trained with, that ``measure`` runs end to end on
one, that the checkpoints' sink scores are poslens's own, and that the command
reuses, refuses and stops as it says.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import torch
from typer.testing import CliRunner

import poslens
from poslens.errors import InputError, OutputConflictError
from poslens.mechanisms.sinks import key0_means
from poslens.study.cli import app
from poslens.zoo.data import documents, held_out_batch, is_held_out, load_data, sample_batch
from poslens.zoo.evaluate import sink_scores
from poslens.zoo.family import MEMBERS, POSITION_FIELDS, initial_model, member_config, sliding_window
from poslens.zoo.train import ZooSettings, train_family

runner = CliRunner()
TINY = [
    "--steps",
    "3",
    "--seq-len",
    "32",
    "--width",
    "32",
    "--depth",
    "2",
    "--heads",
    "2",
    "--batch-size",
    "4",
    "--eval-every",
    "2",
    "--eval-seqs",
    "4",
    "--max-documents",
    "60",
    "--device",
    "cpu",
]
RUNS = [f"{member}-s{seed}" for seed in (0, 1) for member in MEMBERS]


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def family(tmp_path_factory):
    out = tmp_path_factory.mktemp("zoo") / "family"
    done = runner.invoke(app, ["zoo", *TINY, "--out", str(out)])
    assert done.exit_code == 0, done.output
    return out, done.output


def test_the_command_writes_every_run_and_the_tables(family):
    out, output = family
    summary = pd.read_csv(out / "summary.csv")
    assert summary["folder"].tolist() == RUNS
    assert set(summary["steps"]) == {3} and set(summary["stopped_by"]) == {"steps"}
    assert summary["held_out_loss"].between(0, 10).all()
    log = pd.read_csv(out / "log.csv")
    assert sorted(set(log["step"])) == [0, 2, 3]  # step 0, every --eval-every, and the last
    assert len(log) == 3 * len(RUNS) and log["sink_heads"].between(0, 4).all()
    lines = [json.loads(line) for line in (out / "standard-s0" / "log.jsonl").read_text().splitlines()]
    assert [row["step"] for row in lines] == [0, 2, 3] and len(lines[0]["sink_scores"]) == 2  # [layer][head]
    record = json.loads((out / "zoo.json").read_text())
    assert record["settings"]["seeds"] == [0, 1] and record["data"]["n_documents"] == 60
    assert "summary.csv" in output and "held-out loss" in output


def test_members_differ_only_in_the_position_scheme(family):
    out, _ = family
    configs = {run: json.loads((out / run / "config.json").read_text()) for run in RUNS}
    shared = [{k: v for k, v in c.items() if k not in POSITION_FIELDS} for c in configs.values()]
    assert all(c == shared[0] for c in shared), "members' configs differ outside the position fields"
    assert {c["architectures"][0] for c in configs.values()} == {"MistralForCausalLM"}
    assert configs["standard-s0"]["rope_parameters"]["rope_theta"] == 1e4 and configs["standard-s0"]["sliding_window"] is None
    assert configs["large-base-trained-s0"]["rope_parameters"]["rope_theta"] == 1e6
    assert configs["sliding-s0"]["sliding_window"] == sliding_window(32) == 4
    assert configs["sliding-s0"]["rope_parameters"]["rope_theta"] == 1e4


def test_same_seed_same_initial_weights_other_seed_other_weights():
    states = {name: initial_model(member_config(name, 32, 2, 2, 32), seed=0).state_dict() for name in MEMBERS}
    first = states["standard"]
    for name, state in states.items():
        assert all(torch.equal(first[key], state[key]) for key in first), name
    other = initial_model(member_config("standard", 32, 2, 2, 32), seed=1).state_dict()
    assert not torch.equal(first["model.layers.0.self_attn.q_proj.weight"], other["model.layers.0.self_attn.q_proj.weight"])


def test_data_order_is_shared_by_the_members():
    # a member trained alone ends with the very weights it has when trained beside the others: the others draw no batch
    # of their own and change no random state, so each member of a seed sees the same batches in the same order
    settings = dict(
        steps=2, seq_len=16, width=16, depth=1, heads=2, batch_size=2, eval_every=2, eval_seqs=2, seeds=(0,), max_documents=30, device="cpu"
    )
    quiet = lambda line: None  # noqa: E731
    import tempfile
    from pathlib import Path

    alone, beside = Path(tempfile.mkdtemp()), Path(tempfile.mkdtemp())
    train_family(alone, ZooSettings(members=("standard",), **settings), log=quiet)
    train_family(beside, ZooSettings(members=("sliding", "standard"), **settings), log=quiet)
    from safetensors.torch import load_file

    a, b = load_file(alone / "standard-s0" / "model.safetensors"), load_file(beside / "standard-s0" / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    g1, g2 = torch.Generator().manual_seed(0), torch.Generator().manual_seed(0)
    data = load_data(max_documents=30)
    assert torch.equal(sample_batch(data.train, 16, 3, g1), sample_batch(data.train, 16, 3, g2))


def test_the_held_out_split_is_by_name_and_disjoint():
    data = load_data(max_documents=80)
    names = [name for name, _ in documents()[:80]]
    assert data.held_out_names == [name for name in names if is_held_out(name)]
    assert 0 < len(data.held_out_names) < len(names) // 2
    assert torch.equal(held_out_batch(data.held_out, 16, 3), held_out_batch(data.held_out, 16, 3))
    assert load_data(max_documents=80).sha256 == data.sha256 != load_data(max_documents=79).sha256


def test_each_run_loads_with_its_window_and_base(family):
    out, _ = family
    for run, window, base in [("standard-s0", None, 1e4), ("large-base-trained-s1", None, 1e6), ("sliding-s1", 4, 1e4)]:
        model = poslens.load_model(out / run, device="cpu")
        assert model.architecture == "mistral" and model.n_layers == 2 and model.n_heads == 2
        assert model.sliding_windows == [window, window] and model.rope_base == [base, base], run


def test_measure_end_to_end_and_the_sink_scores_are_poslens_own(family):
    out, _ = family
    model = poslens.load_model(out / "sliding-s0", device="cpu")
    corpus = poslens.make_corpus(model, str(out / "held_out.jsonl"), n_seqs=4, seq_len=32, seed=0)
    assert corpus.position0 == "bos" and bool((corpus.tokens[:, 0] == 1).all())
    result = poslens.measure(model, corpus, groups=2, early=8, batch_size=2, progress=False)
    for metric in ("c_res", "c_mask"):
        assert pd.notna(result.value(metric, "all")), metric
    heads = [(layer, head) for layer in range(2) for head in range(2)]
    theirs = key0_means(result, heads)
    from transformers import AutoModelForCausalLM

    ours = sink_scores(AutoModelForCausalLM.from_pretrained(out / "sliding-s0"), corpus.tokens)  # the bridge wraps model.hf_model
    for layer, head in heads:
        assert ours[layer, head].item() == pytest.approx(theirs[(layer, head)], abs=1e-5)


def test_a_rerun_reuses_and_other_settings_are_refused(family):
    out, _ = family
    again = runner.invoke(app, ["zoo", *TINY, "--out", str(out)])
    assert again.exit_code == 0 and "reusing" in again.output
    with pytest.raises(OutputConflictError, match="other settings"):
        train_family(out, ZooSettings(steps=4, seq_len=32, width=32, depth=2, heads=2, max_documents=60, device="cpu"))


def test_bad_options_are_refused_before_training(tmp_path):
    for option, word in [
        (["--members", "nope"], "unknown zoo member"),
        (["--seeds", "a,b"], "integer seeds"),
        (["--width", "30", "--heads", "4"], "multiple of heads"),
        (["--task", "nope"], "task must be one of stdlib, bigram-backcopy"),
        (["--task", "bigram-backcopy"], "max_documents chooses documents of the stdlib task"),  # TINY passes --max-documents
    ]:
        done = runner.invoke(app, ["zoo", *TINY, *option, "--out", str(tmp_path / "x")])
        assert done.exit_code == 2 and word in " ".join(done.output.split()), (option, done.output)
    assert not (tmp_path / "x").exists()
    with pytest.raises(InputError, match="schedule"):
        ZooSettings(schedule="linear")


def test_a_time_budget_stops_every_run_at_the_same_step(tmp_path):
    settings = ZooSettings(
        steps=10_000,
        seq_len=16,
        width=16,
        depth=1,
        heads=2,
        batch_size=2,
        eval_every=5000,
        eval_seqs=2,
        seeds=(0,),
        members=("standard", "sliding"),
        max_documents=30,
        device="cpu",
        time_budget=0.5,
    )
    table = train_family(tmp_path, settings, log=lambda line: None)
    assert set(table["stopped_by"]) == {"time"} and table["steps"].nunique() == 1 and 0 < table["steps"].iloc[0] < 10_000


# --------------------------------------------------------------------------- Bigram-Backcopy and the family's measurement

BB = ["--task", "bigram-backcopy", "--steps", "3", "--seq-len", "32", "--width", "16", "--depth", "3", "--heads", "2",
      "--batch-size", "4", "--eval-every", "2", "--eval-seqs", "4", "--device", "cpu", "--seeds", "0,1", "--members", "standard,sliding"]  # fmt: skip


@pytest.fixture(scope="module")
def backcopy_family(tmp_path_factory):
    """A tiny Bigram-Backcopy family (standard and sliding × 2 seeds, 3 steps) trained by the command, measured by zoo-measure."""
    root = tmp_path_factory.mktemp("zoo_bb")
    out = root / "family"
    done = runner.invoke(app, ["zoo", *BB, "--out", str(out)])
    assert done.exit_code == 0, done.output
    measured = runner.invoke(
        app,
        ["zoo-measure", "--zoo", str(out), "--out", str(root / "tables"), "--work", str(root / "work"), "--n-seqs", "8", "--groups", "2",
         "--early", "8", "--batch-size", "8", "--relativize-seqs", "4", "--replacement", "zero"],
    )  # fmt: skip
    assert measured.exit_code == 0, measured.output
    return out, root / "tables", root / "work"


def test_a_backcopy_family_loads_with_the_task_tokenizer_and_its_held_out_chain(backcopy_family):
    out, _, _ = backcopy_family
    record = json.loads((out / "zoo.json").read_text())
    assert record["task"] == "bigram-backcopy" and record["data"]["vocab_size"] == 68 and record["wall_seconds"] > 0
    model = poslens.load_model(out / "sliding-s1", device="cpu")
    assert model.sliding_windows == [4, 4, 4] and model.rope_base == [1e4] * 3 and len(model.tokenizer) == 68
    corpus = poslens.make_corpus(model, str(out / "held_out.jsonl"), n_seqs=4, seq_len=32, seed=0)
    from poslens.zoo.backcopy import load_backcopy

    chain = load_backcopy().held_out.tolist()
    assert bool((corpus.tokens[:, 0] == 1).all())
    for row in corpus.tokens[:, 1:].tolist():  # the measured sequences are windows of the task's held-out chain
        assert any(chain[k : k + 31] == row for k in range(0, len(chain) - 30, 31))


def test_zoo_measure_writes_the_tables_with_every_part_as_the_commands_measure_them(backcopy_family):
    out, tables, work = backcopy_family
    parts = pd.read_csv(tables / "parts.csv")
    assert set(parts["status"]) == {"ok"}, parts[parts["status"] != "ok"].to_string()
    assert sorted(set(parts["part"])) == ["ablate-sinks", "bos-swap", "leakage", "path-tests", "relativize", "sinks"] and len(parts) == 6 * 4
    figures = pd.read_csv(tables / "figures.csv")
    # the leakage figure of one run is the one poslens.measure gives on the same corpus (the leakage command's route)
    model = poslens.load_model(out / "sliding-s1", device="cpu")
    corpus = poslens.make_corpus(model, str((out / "held_out.jsonl").resolve()), n_seqs=8, seq_len=32, seed=0)
    result = poslens.measure(model, corpus, groups=2, early=8, batch_size=8, progress=False)
    mine = figures.query("member == 'sliding' and seed == 1 and metric == 'c_res' and layer == -1 and query_window == 'all'")
    assert float(mine["value"].iloc[0]) == pytest.approx(result.value("c_res", "all"), rel=1e-5, abs=1e-9)
    assert (work / "sliding-s1" / "leakage.parquet").exists()
    # the path-specific tests' changes, as the part's own table holds them (D = 64: the offset C3 reads)
    path = figures.query("part == 'path-tests' and member == 'standard' and seed == 0 and metric == 'resid_probe_r2_ge2'")
    assert {"key0-phase:D=64", "key1-phase:D=64", "key0-phase:D=64 − key1-phase:D=64"} <= set(path["intervention"])
    table = poslens.Result.load(work / "standard-s0" / "path-tests.parquet").table
    own = table.query("kind == 'difference' and reference == 'none' and intervention == 'key0-phase:D=64' and layer == -1")
    own = own.query("metric == 'resid_probe_r2_ge2' and query_bin == -1")
    assert path.query("intervention == 'key0-phase:D=64'")["value"].iloc[0] == pytest.approx(float(own["value"].iloc[0]), rel=1e-5)  # %.6g
    # C4's zoo case: the sliding comparison is the mean over seeds of (sliding − standard) of the same seed
    claims = pd.read_csv(tables / "claims.csv")
    c_res = figures.query("part == 'leakage' and metric == 'c_res' and layer == -1 and query_window == 'all'").set_index(["member", "seed"])["value"]
    diffs = [c_res[("sliding", s)] - c_res[("standard", s)] for s in (0, 1)]
    sliding = claims[claims["model"].str.contains("sliding − standard: c_res, paired")].iloc[0]
    assert sliding["case"] == "sliding" and set(claims["claim"]) == {"C4"}
    summary = pd.read_csv(out / "summary.csv")
    sinkless = {(r.member, int(r.seed)) for r in summary.itertuples() if r.sink_heads < 1}
    read = [s for s in (0, 1) if ("sliding", s) not in sinkless and ("standard", s) not in sinkless]
    if read:
        assert sliding["figure"] == pytest.approx(np.mean([diffs[s] for s in read]))
    else:  # runs of a few steps form no sink: C4 does not read them, and its row says so
        assert np.isnan(sliding["figure"])
        inputs = pd.read_csv(tables / "claim_inputs.csv")
        assert "could not be read" in inputs[(inputs["key"] == sliding["key"]) & (inputs["role"] != "reported")]["where"].iloc[0]
    # the comparison's arithmetic itself, read without the sink check: the mean over seeds of the paired differences
    from poslens.study.claims.c4_zoo import claim_c4_zoo
    from poslens.study.zoo_measure import c4_figures

    unchecked = [r for r in claim_c4_zoo(c4_figures(figures)) if "sliding − standard: c_res, paired" in r["model"]][0]
    assert unchecked["figure"] == pytest.approx(np.mean(diffs))
    assert len(claims) == 3  # no large-base-trained member: its comparison is left out, the sliding ones stay
    family = pd.read_csv(tables / "family.csv")
    assert set(family["member"]) == {"standard", "sliding"} and family["n_seeds"].max() == 2
    emergence = pd.read_csv(tables / "emergence.csv")
    assert sorted(set(emergence["step"])) == [0, 2, 3] and "key0_mass" in emergence.columns
    assert json.loads((tables / "measure.json").read_text())["parts"] == ["leakage", "sinks", "bos-swap", "ablate-sinks", "relativize", "path-tests"]
