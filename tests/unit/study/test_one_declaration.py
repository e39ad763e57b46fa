"""A part is one declaration: registered with no other edit, it has a command, a place in the report and in run.json,
and a setting of its own (an option, a default, a check, an attribute of the settings, a field of run.json); and no
module outside the registry and the declarations names a part by string."""

from __future__ import annotations

import ast
import hashlib
import json
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from poslens.errors import InputError
from poslens.measurement.result import Result
from poslens.study import cli, part_registry
from poslens.study.part_cache import part_key
from poslens.study.part_registry import MEASURE_KEYS, MEASURED_OPTIONS, PARTS, Option, Part, register, report_plan, unregister
from poslens.study.parts import Study
from poslens.study.run_record import recorded_settings, run_record
from poslens.study.settings import Settings, settings_values

ROOT = Path(__file__).resolve().parents[3]
runner = CliRunner()


def _compute(study: Study) -> Result:
    """Mean of the corpus's token ids: a part that needs no model (only its settings, its own ``token_scale`` among them)."""
    value = float(study.settings.n_seqs) * study.settings.token_scale
    row = dict(model="none", variant="base", intervention="none", query_window="all", metric="token_mean", value=value, ci_low=0.0, ci_high=1.0)
    table = pd.DataFrame([row | dict(layer=-1, head=-1)])
    return study.cached("token-mean", lambda: Result(table, {"settings": {}}))


CAPTION = "The corpus's token mean, drawn by the part's own figure hook."


def _figures(part: Result, settings: dict, **inputs) -> list:
    """One figure, shown under C1 in the report."""
    import plotly.graph_objects as go

    return [("C1", go.Figure(go.Bar(x=["token_mean"], y=part.table["value"].tolist())), CAPTION)]


SCALE_OPTION = Option("--token-scale", 1.5, "Factor of the token mean (a setting only this part takes).", float, checks={"min": 0.5})


@pytest.fixture
def token_mean():
    """One declaration, and nothing else: the part every test below sees, with a setting of its own (``token_scale``)."""
    shown = []
    part = Part(
        "token-mean",
        "A made-up part of one figure.\n\nExample: poslens token-mean --out results/quick",
        (*MEASURE_KEYS, "tau", "token_scale"),
        (*MEASURED_OPTIONS, "tau", "token_scale"),
        show=lambda result, console: shown.append(result),
        order=65,  # after the sink split
        compute=_compute,
        figures=_figures,
        figure_metrics=("token_mean",),
        new_options={"token_scale": SCALE_OPTION},  # the setting: its name, default, option and check, here and nowhere else
    )
    register(part)
    yield part, shown
    unregister(part.name)


def test_a_registered_part_has_a_command_that_makes_it(token_mean, tmp_path):
    part, shown = token_mean
    app = cli.command_app()
    listed = runner.invoke(app, ["--help"])
    assert "token-mean" in listed.output
    done = runner.invoke(
        app, ["token-mean", "--n-seqs", "3", "--groups", "2", "--corpus", "random", "--model", "no/such/model", "--out", str(tmp_path)]
    )
    assert done.exit_code == 0, done.output
    assert (tmp_path / "token-mean.parquet").exists() and shown[0].table["value"].tolist() == [4.5]  # 3 x the default scale


def test_a_part_declares_a_setting_of_its_own(token_mean, tmp_path):
    app = cli.command_app()
    helped = " ".join(runner.invoke(app, ["token-mean", "--help"], env={"COLUMNS": "200"}).output.split())
    assert "--token-scale" in helped and "[default: 1.5]" in helped
    assert "--token-scale" not in runner.invoke(app, ["leakage", "--help"], env={"COLUMNS": "200"}).output  # only its part takes it
    args = ["token-mean", "--n-seqs", "2", "--groups", "2", "--corpus", "random", "--model", "no/such/model"]
    done = runner.invoke(app, [*args, "--token-scale", "2", "--out", str(tmp_path)])
    assert done.exit_code == 0, done.output
    saved = Result.load(tmp_path / "token-mean.parquet")
    assert saved.table["value"].tolist() == [4.0] and saved.meta["settings"]["token_scale"] == 2.0  # recorded in the part
    refused = runner.invoke(app, [*args, "--token-scale", "0.1", "--out", str(tmp_path / "low")])
    assert refused.exit_code == 2 and "--token-scale" in refused.output  # its check, from its option

    settings = Settings(n_seqs=2, token_scale=2.0)
    assert settings.token_scale == 2.0 and Settings().token_scale == 1.5 and Settings.quick(token_scale=3.0).token_scale == 3.0
    assert Settings.full(token_scale=3.0).token_scale == 3.0 and Study(settings, tmp_path).with_settings(seq_len=64).settings.token_scale == 2.0
    assert Settings(token_scale=1.5) == Settings() and hash(Settings(token_scale=1.5)) == hash(Settings())  # the default is not held
    with pytest.raises(InputError, match="token_scale must be at least 0.5"):
        Settings(token_scale=0.1)
    made = Study(settings, tmp_path / "api").token_mean()
    recorded = json.loads(json.dumps(run_record({"token-mean": made}, recorded_settings(settings), quick=True, timings={}, argv=["report"])))
    assert recorded["settings"]["token_scale"] == 2.0 and "part_settings" not in recorded["settings"]  # flat in run.json
    assert settings_values(settings, ("n_seqs", "token_scale")) == {"n_seqs": 2, "token_scale": 2.0}


def test_an_unknown_setting_is_refused():
    with pytest.raises(InputError, match="no setting 'token_scale'"):  # its part is not registered
        Settings(token_scale=2.0)
    with pytest.raises(InputError, match="did you mean split_offset"):
        Settings(split_ofset=4)


# What the code before the parts declared their own settings recorded, for Settings(seq_len=64, split_offset=8) (main at
# 7c7531c, where split_offset was a field of Settings): sink-split's reuse key over its settings, and with its input hashes.
OLD_SPLIT_KEY = "08ff7eb6cfa6415b"
OLD_SPLIT_PART_KEY = "b248d263ef414842"


def test_a_folder_written_before_still_matches():
    names = PARTS["sink-split"].settings
    settings = Settings(seq_len=64, split_offset=8)
    # the old key, computed here the old way: the flat settings, as JSON with sorted keys, SHA-256, 16 hex digits
    flat = dict(
        model="smollm2-135m", variant="base", corpus="docs", text_field="text", n_seqs=16, seq_len=64, groups=8, early=32,
        seed=0, batch_size=4, position0="bos", dtype="float32", tau=0.3, split_offset=8,
    )  # fmt: skip
    assert set(flat) == set(names)
    old = hashlib.sha256(json.dumps(flat, sort_keys=True, default=str).encode()).hexdigest()[:16]
    assert old == OLD_SPLIT_KEY and settings.key(*names) == old
    assert part_key(settings, names, {"c.txt": "00"}) == OLD_SPLIT_PART_KEY
    # a saved part's recorded settings (meta["settings"], run.json) compare equal to the settings that made it
    assert settings_values(settings, names) == flat
    saved = json.loads(json.dumps(flat))
    assert saved == settings_values(Settings(**{n: v for n, v in saved.items()}), tuple(saved))
    assert list(recorded_settings(settings))[-3:] == ["path_offsets", "path_doses", "split_offset"]  # run.json's order kept


def test_an_unregistered_part_leaves_no_command():
    assert "token-mean" not in runner.invoke(cli.command_app(), ["--help"]).output


def test_a_registered_part_is_in_the_report_plan_and_run_json(token_mean, tmp_path):
    part, _ = token_mean
    plan = report_plan()
    assert plan.index("token-mean") == plan.index("sink-split") + 1
    study = Study(Settings(n_seqs=2, corpus="random", model="no/such/model"), tmp_path)
    made = study.token_mean()  # every registered part is a method of the study
    record = run_record({"leakage": made, "token-mean": made}, {}, quick=True, timings={}, argv=["report"])
    assert json.loads(json.dumps(record, default=str))["parts"]["token-mean"] == "token-mean.parquet"
    assert part_registry.estimated_tokens(Settings(), ["token-mean"]) == 0.0


def test_a_registered_part_draws_its_figures_in_the_report(token_mean, tmp_path):
    from poslens.study.claims import evaluate
    from poslens.study.report import build_report

    made = Study(Settings(n_seqs=2, corpus="random", model="no/such/model"), tmp_path).token_mean()
    page = build_report({"token-mean": made}, evaluate(), {"n_seqs": 2}, tmp_path / "report.html").read_text()
    assert CAPTION.replace("'", "&#39;") in page or CAPTION in page
    unregister("token-mean")
    page = build_report({"token-mean": made}, evaluate(), {"n_seqs": 2}, tmp_path / "again.html").read_text()
    assert CAPTION.replace("'", "&#39;") not in page and CAPTION not in page  # the hook, not the test, drew it


def _strings(path: Path) -> list[tuple[int, str]]:
    """The string constants of a module that are not docstrings."""
    tree = ast.parse(path.read_text())
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
    ]


# Strings that are a part's name but name something else there, each with its reason:
OTHER_MEANINGS = {
    # the public function poslens.compare (the top-level API's lazy table of names)
    "poslens/__init__.py": {"compare"},
    # the meta key under which a compare part of table format 1 kept its comparisons (read back from old files)
    "poslens/mechanisms/comparisons.py": {"comparisons"},
    # Result.plot's kinds (the measurement layer, below the study: it cannot read the registry), named as the
    # figures they draw, some of which share a part's name
    "poslens/measurement/plot_kinds.py": {"leakage", "sinks", "sink-split"},
}
# The claim inputs that share a part's name (evaluate's keywords leakage and fingerprint), which the claims read by name.
CLAIM_INPUTS = {"leakage", "fingerprint"}


def test_no_module_outside_the_registry_and_the_declarations_names_a_part():
    names = set(PARTS)
    bad = []
    for path in sorted((ROOT / "poslens").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel == "poslens/study/part_registry.py" or rel.startswith("poslens/study/declarations/"):
            continue
        allowed = OTHER_MEANINGS.get(rel, set()) | (CLAIM_INPUTS if rel.startswith("poslens/study/claims/") else set())
        bad += [f"{rel}:{line}: {value!r}" for line, value in _strings(path) if value in names and value not in allowed]
    assert not bad, "parts named by string outside the registry:\n" + "\n".join(bad)


def test_the_compare_parts_give_c4_its_comparisons_from_the_comparisons_part():
    from poslens.mechanisms.comparisons import COMPARISON_COLUMNS
    from poslens.study.part_registry import claim_inputs

    cases = Result(pd.DataFrame({"metric": ["c_res"]}), {"cases": []})  # a compare part of table format 2
    row = dict.fromkeys(COMPARISON_COLUMNS, "x") | dict(layer=-1, head=-1, value=0.1, ci_low=0.0, ci_high=0.2, se=0.05, df=3.0, detectable=0.1)
    comparisons = Result(pd.DataFrame([row]), {})
    inputs = claim_inputs({"compare": cases, "comparisons": comparisons})
    assert inputs["comparison"] is cases and inputs["c4_comparisons"]["value"].tolist() == [0.1]
    assert "c4_comparisons" not in claim_inputs({"compare": cases})  # C4 then reads the cases alone


def _hook(function):
    """A figure hook, resolved when the declaration names it lazily (``part_registry.lazy``)."""
    import importlib

    where = getattr(function, "where", None)
    if where is None:
        return function
    module, _, name = where.partition(":")
    return getattr(importlib.import_module(module), name)


def test_every_figure_hook_takes_its_result_and_settings_by_position_only():
    # the report calls hook(result, settings, **claim_inputs): a hook whose first parameter is named as a claim input
    # (path, split, attribution) would get it twice
    import inspect

    for part in PARTS.values():
        if part.figures is None:
            continue
        first = list(inspect.signature(_hook(part.figures)).parameters.values())[:2]
        assert [p.kind for p in first] == [inspect.Parameter.POSITIONAL_ONLY] * 2, part.name
