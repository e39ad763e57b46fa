"""Each study part is declared once (poslens/study/part_registry.py); its command, command line, reuse key and plan come from it."""

from __future__ import annotations

import inspect
import shlex

import pytest
import typer
from typer.main import get_command
from typer.testing import CliRunner

from poslens.mechanisms.architectures import default_cases
from poslens.study.cli import app
from poslens.study.part_commands import part_command
from poslens.study.part_registry import OPTIONS, PARTS, Part, command_line, estimated_tokens, report_plan
from poslens.study.parts import Study
from poslens.study.settings import Settings

runner = CliRunner()

# a value other than each setting's default, as a part's saved metadata records it (JSON: lists, not tuples)
OTHER_VALUES = {
    "model": "models/my llama",
    "variant": "ntk:4",
    "position0": "none",
    "corpus": "texts;x.jsonl",
    "text_field": "body",
    "n_seqs": 12,
    "seq_len": 96,
    "seed": 3,
    "groups": 4,
    "early": 9,
    "batch_size": 2,
    "dtype": "bfloat16",
    "tau": 0.25,
    "replacements": ["zero", "token:eos"],
    "fingerprint_seqs": 6,
    "fingerprint_len": 40,
    "compare_seqs": 5,
    "compare_len": 300,
    "compare_quick": False,
    "relativize_seqs": 10,
    "relativize_len": 48,
    "relativize_modes": ["all", "key0"],
    "calibration_seqs": 8,
    "calibration_seed": 7,
    "calibration_sizes": [4, 8],
    "relativize_loss": False,
    "path_offsets": [8, 16],
    "path_doses": [0.5, 1.0],
}


def test_every_part_is_a_study_method_and_every_study_part_is_declared():
    declared = {part.method for part in PARTS.values()}
    assert all(callable(getattr(Study, name, None)) for name in declared)
    not_parts = {"inputs", "model", "corpus", "claims", "write", "with_settings", "part", "cached", "measured"}
    methods = {name for name, _ in inspect.getmembers(Study, inspect.isfunction) if not name.startswith("_")}
    assert methods - not_parts == declared


def test_the_report_runs_every_part_in_the_declared_order():
    assert report_plan() == list(PARTS)
    assert report_plan(skip_compare=True) == [name for name in PARTS if name not in ("compare", "comparisons")]
    assert PARTS["leakage"] is next(iter(PARTS.values()))  # the baseline comes first: the others read it


COMMANDS = [name for name, part in PARTS.items() if not part.made_by]


def test_a_part_made_by_another_command_has_none_of_its_own_and_its_hint_names_that_command():
    commands = get_command(app).commands
    assert PARTS["comparisons"].command == "compare" and "comparisons" not in commands and "compare" in commands
    settings = {"compare_seqs": 4, "groups": 2}
    assert command_line("comparisons", settings, "A") == command_line("compare", settings, "A") == "poslens compare --n-seqs 4 --groups 2 --out A"
    assert PARTS["comparisons"].settings == PARTS["compare"].settings  # made together: reused or refused together


@pytest.mark.parametrize("name", COMMANDS)
def test_each_part_has_its_command_with_one_option_per_setting_it_takes(name):
    part = PARTS[name]
    command = get_command(app).commands[name]
    flags = {opt for param in command.params for opt in param.opts}
    for setting in part.options:
        assert part.flag(setting) in flags, (name, setting)
    # a setting the part records can be given on its command line, unless it has no option at all (compare's cases)
    for setting in part.settings:
        assert setting in part.options or OPTIONS[setting].spelling == "none", (name, setting)
    assert command.help and command.help.startswith(part.summary.splitlines()[0])


@pytest.mark.parametrize("name", COMMANDS)
def test_the_printed_command_line_gives_back_the_settings_it_spells(name):
    """command_line writes a part's recorded settings as options; its command parses them back to the same settings."""
    part = PARTS[name]
    settings = {s: OTHER_VALUES[s] for s in part.settings if s in OTHER_VALUES}
    line = command_line(name, settings, "out dir")
    words = shlex.split(line)
    assert words[:2] == ["poslens", name] and words[-2:] == ["--out", "out dir"]
    received = {}

    def record(part_: Part, typed: dict, overwrite: bool, out) -> None:
        received.update({s: OPTIONS[s].setting_value(v) for s, v in typed.items()})

    probe = typer.Typer()
    probe.command(name)(part_command(part, record))
    probe.command("other")(lambda: None)  # two commands: typer then expects the command's name
    done = runner.invoke(probe, words[1:])
    assert done.exit_code == 0, done.output
    for setting, value in settings.items():
        got = received[setting]
        assert (list(got) if isinstance(got, tuple) else got) == value, (setting, got, value)


def test_defaults_are_left_out_of_the_command_line_as_the_command_spells_them():
    # bos-swap's --replacement defaults to mean alone, not to the study's four replacements
    assert command_line("bos-swap", {"replacements": ["mean"]}, "A") == "poslens bos-swap --out A"
    four = list(Settings().replacements)
    assert command_line("bos-swap", {"replacements": four}, "A").count("--replacement") == 4
    assert command_line("relativize", {"relativize_seqs": 16, "early": 32}, "A") == "poslens relativize --out A"


def test_the_full_runs_estimate_is_the_sum_of_the_parts_costs():
    """The closed form the report printed before the registry, written out by hand."""
    s = Settings.full()
    cases = len(default_cases(quick=s.compare_quick))
    grow = lambda t: 1 + t / 1024  # noqa: E731
    expected = s.n_seqs * s.seq_len * (1 + 1 + len(s.replacements)) * grow(s.seq_len)
    expected += (2 * s.fingerprint_seqs + 256) * s.fingerprint_len
    expected += (cases + 1) * s.compare_seqs * s.compare_len * grow(s.compare_len)
    expected += (1 + len(s.relativize_modes) + 2 + 2 * len(s.relativize_modes)) * s.relativize_seqs * s.relativize_len * grow(s.relativize_len)
    expected += 2 * (1 + 2 * len({8, 64, s.seq_len // 2}) + len(s.path_doses) + 1) * s.n_seqs * s.seq_len * grow(s.seq_len)
    expected += 1.5 * 8 * s.n_seqs * s.seq_len * grow(s.seq_len)  # the sink split: unedited, 4 edits, 2 shams, every-head P0
    assert estimated_tokens(s) == pytest.approx(expected, rel=1e-12)
    assert estimated_tokens(s, report_plan(skip_compare=True)) < expected


def test_a_new_part_is_one_declaration_and_its_command_follows(tmp_path):
    """The worked example of CONTRIBUTING: a declared part gets a command with its options, checks and printer."""
    printed = []
    part = Part(
        "key0-mass",
        "Mean attention on key 0.\n\nExample: poslens key0-mass --out results/quick",
        ("model", "n_seqs", "tau"),
        ("model", "n_seqs", "tau"),
        show=lambda result, console: printed.append(result),
    )
    received = {}
    probe = typer.Typer()
    probe.command(part.name)(part_command(part, lambda p, typed, overwrite, out: received.update(typed, out=out)))
    probe.command("other")(lambda: None)
    done = runner.invoke(probe, ["key0-mass", "--n-seqs", "5", "--tau", "0.5", "--out", str(tmp_path)])
    assert done.exit_code == 0, done.output
    assert received == {"model": "smollm2-135m", "n_seqs": 5, "tau": 0.5, "out": tmp_path}
    bad = runner.invoke(probe, ["key0-mass", "--tau", "2", "--out", str(tmp_path)])  # the τ check comes with the option
    assert bad.exit_code == 2 and "--tau" in bad.output
