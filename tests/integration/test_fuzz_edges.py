"""Fuzzing beside test_fuzz.py (issue 49): numeric options typed at their extremes, and corpus paths that are no plain file.

Hypothesis draws the spellings a user may type for the numeric options
(huge, negative, signed, exponent, other digits, blanks, duplicates) and the
paths a corpus may be (a named pipe, a device, a symlink loop, an empty file,
a folder holding only a pipe, a /proc file). Each run must end in one of three
ways: it succeeds with its part saved, it is a usage error of the command line
(exit status 2) naming the option, or it raises a
:class:`~poslens.errors.PoslensError`. A raw exception (OverflowError, an
allocation error, FileNotFoundError) or a run that waits forever fails: every
run here has a deadline. The commands run in-process through typer's
CliRunner on the tiny Llama.
"""

from __future__ import annotations

import os
import re
import threading
import uuid
from pathlib import Path

from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from poslens.errors import PoslensError
from poslens.study.cli import app

runner = CliRunner()
SCALE = int(os.environ.get("POSLENS_FUZZ_SCALE", "1"))
FUZZ = dict(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow], derandomize=SCALE == 1)
#: Seconds a single run may take before it counts as hung.
HANG = 120


def flat(text: str) -> str:
    return " ".join(re.sub(r"[│╭╮╰╯─]", " ", text).split())


def within_deadline(call):
    """``call()`` on a daemon thread; a call still running after :data:`HANG` seconds fails the test (it hung)."""
    box: dict = {}

    def target() -> None:
        try:
            box["value"] = call()
        except BaseException as error:  # noqa: BLE001 (handed to the test, which judges it)
            box["error"] = error

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(HANG)
    assert not thread.is_alive(), f"the run still waits after {HANG} s: it hangs"
    if "error" in box:
        raise box["error"]
    return box["value"]


def judged(result, out: Path, part: str, option: str) -> str:
    """One of the three allowed outcomes, asserted: 'ok', 'usage' or 'refused'."""
    output = flat(result.output)
    assert "Traceback" not in result.output, result.output
    if result.exit_code == 0:
        assert (out / f"{part}.parquet").is_file(), output
        return "ok"
    if result.exit_code == 2:
        assert isinstance(result.exception, SystemExit), repr(result.exception)
        assert re.search(r"Invalid value for '--[a-z][a-z-]*'", output), output
        return "usage"
    error = result.exception
    assert result.exit_code == 1, (result.exit_code, repr(error), output)
    assert isinstance(error, PoslensError), f"not a PoslensError: {type(error).__module__}.{type(error).__name__}: {error}"
    return "refused"


# ---------------------------------------------------------------- 1. numeric options typed at their extremes

SPELLINGS = st.sampled_from(
    ["0", "1", "-1", "2", "+3", " 4", "1e3", "0x10", "٣", "²", "1_000", "nan", "inf", "-inf", "", "2.5",
     str(2**31 - 1), str(2**31), str(2**63), str(2**64), "99999999999999999999", "1" * 40, "10000000000", "-" + "9" * 30]
)  # fmt: skip
#: The options of each command drawn here, with the value that works when it is not the one drawn.
NUMERIC = {
    "leakage": {"--n-seqs": "2", "--seq-len": "16", "--groups": "2", "--early": "4", "--batch-size": "2", "--seed": "0"},
    "sinks": {"--n-seqs": "2", "--seq-len": "16", "--groups": "2", "--early": "4", "--tau": "0.3"},
    "path-tests": {"--n-seqs": "2", "--seq-len": "16", "--groups": "2", "--early": "4", "--offsets": "4", "--doses": "1"},
}


@st.composite
def numeric_cases(draw):
    command = draw(st.sampled_from(sorted(NUMERIC)))
    options = dict(NUMERIC[command])
    option = draw(st.sampled_from(sorted(options)))
    value = draw(SPELLINGS)
    if option in ("--offsets", "--doses") and draw(st.booleans()):
        value = f"{value},{draw(SPELLINGS)}"  # a comma list
    options[option] = value
    return command, option, options


@settings(max_examples=40 * SCALE, **FUZZ)
@given(case=numeric_cases())
@example(case=("path-tests", "--offsets", {**NUMERIC["path-tests"], "--offsets": "99999999999999999999"}))
@example(case=("path-tests", "--offsets", {**NUMERIC["path-tests"], "--offsets": str(2**31 - 1)}))
@example(case=("leakage", "--n-seqs", {**NUMERIC["leakage"], "--n-seqs": "10000000000"}))
@example(case=("leakage", "--seq-len", {**NUMERIC["leakage"], "--seq-len": str(2**63)}))
@example(case=("leakage", "--seed", {**NUMERIC["leakage"], "--seed": "-" + "9" * 30}))
@example(case=("leakage", "--batch-size", {**NUMERIC["leakage"], "--batch-size": str(2**63)}))
def test_numeric_options_at_their_extremes_end_in_a_result_a_usage_error_or_a_poslens_error(tiny_llama_dir, tmp_path_factory, case):
    command, option, options = case
    out = tmp_path_factory.mktemp("numbers") / "out"
    argv = [command, "--model", str(tiny_llama_dir), "--corpus", "random", "--out", str(out)]
    for name, value in options.items():
        argv += [name, value]
    result = within_deadline(lambda: runner.invoke(app, argv))
    outcome = judged(result, out, command, option)
    if outcome == "usage":
        assert option in flat(result.output) or "--" in flat(result.output)
    if outcome != "ok":
        assert not out.exists(), "a failed run left the --out folder it created"
    event(f"{option}: {outcome}")


# ---------------------------------------------------------------- 2. corpus paths that are no plain file

KINDS = ["named pipe", "folder of a pipe", "/dev/null", "/dev/zero", "symlink loop", "empty file", "proc file", "dangling symlink", "fine"]


def corpus_path(folder: Path, kind: str) -> Path:
    path = folder / f"c-{uuid.uuid4().hex[:6]}.txt"
    if kind == "named pipe":
        os.mkfifo(path)
    elif kind == "folder of a pipe":
        path = folder / "corpus"
        path.mkdir()
        os.mkfifo(path / "a.txt")
    elif kind in ("/dev/null", "/dev/zero"):
        path = Path(kind)
    elif kind == "symlink loop":
        path.symlink_to(path)
    elif kind == "empty file":
        path.write_text("")
    elif kind == "proc file":
        path = Path("/proc/self/status")
    elif kind == "dangling symlink":
        path.symlink_to(folder / "gone.txt")
    else:
        path.write_text("The quick brown fox jumps over the lazy dog. " * 40)
    return path


@settings(max_examples=12 * SCALE, **FUZZ)
@given(kind=st.sampled_from(KINDS), through=st.sampled_from(["command", "read_texts"]))
@example(kind="named pipe", through="command")
@example(kind="/dev/zero", through="read_texts")
def test_a_corpus_that_is_no_plain_file_is_read_or_refused_never_waited_on(tiny_llama_dir, tmp_path_factory, kind, through):
    folder = tmp_path_factory.mktemp("corpus")
    path = corpus_path(folder, kind)
    if through == "read_texts":
        from poslens.model.corpus_texts import read_texts

        try:
            texts = within_deadline(lambda: read_texts(path))
        except PoslensError as error:
            assert str(path.name) in str(error) or str(path) in str(error), str(error)
            event(f"{kind}: refused")
            return
        assert all(isinstance(text, str) for text in texts) and kind in ("empty file", "fine", "proc file")
        event(f"{kind}: read")
        return
    out = folder / "out"
    argv = ["leakage", "--model", str(tiny_llama_dir), "--corpus", str(path), "--n-seqs", "2", "--seq-len", "16", "--groups", "2"]
    result = within_deadline(lambda: runner.invoke(app, [*argv, "--early", "4", "--out", str(out)]))
    outcome = judged(result, out, "leakage", "--corpus")
    if kind in ("named pipe", "/dev/zero", "/dev/null", "folder of a pipe", "symlink loop", "dangling symlink"):
        assert outcome == "refused", flat(result.output)
    event(f"{kind}: {outcome}")
