"""A fuzzing harness for input integrity: every run succeeds with provenance, or fails with a poslens error.

Hypothesis draws command lines at the edges of their options, corpus files
(text in several encodings, JSONL lines of every JSON type, empty and huge
lines) and save / load round trips of results. Each run must end in one of
three ways:

- it succeeds: the part's ``.parquet`` is there, its provenance names the
  sha256 of the corpus file it read and of the measured tokens, and a save
  loads back equal;
- it is a usage error of the command line (exit status 2) naming an option;
- it raises a :class:`~poslens.errors.PoslensError` whose message names the
  option or the file at fault.

Anything else (another exception, a traceback) fails, and so does any change
to a file of the user's. The commands run in-process through typer's
CliRunner on the tiny Llama, so the whole file takes well under a minute.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import re
import uuid
from pathlib import Path
from unittest import mock

import pandas as pd
import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from poslens.errors import OutputConflictError, PoslensError
from poslens.measurement.result import Result
from poslens.measurement.table import COLUMNS
from poslens.study.cli import app

runner = CliRunner()
# POSLENS_FUZZ_SCALE=N runs N times the examples, freshly drawn; by default the examples are the same on every run (about 40 s).
SCALE = int(os.environ.get("POSLENS_FUZZ_SCALE", "1"))
FUZZ = dict(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow], derandomize=SCALE == 1)
USER_BYTES = b"my own numbers, not poslens's\n\x00\xff"


@pytest.fixture(scope="module")
def scratch(tmp_path_factory) -> Path:
    """One folder for the module; each example works in a fresh uuid-named folder under it."""
    return tmp_path_factory.mktemp("fuzz")


def fresh(scratch: Path) -> Path:
    folder = scratch / uuid.uuid4().hex
    folder.mkdir()
    return folder


def flat(text: str) -> str:
    """Text of typer's error box on one line, without its frame."""
    return " ".join(re.sub(r"[│╭╮╰╯─]", " ", text).split())


def check_outcome(result, *, culprits: list[str], out: Path, part: str, corpus_file: Path | None, user_files: dict[Path, bytes]) -> str:
    """Assert that a CLI run ended in one of the three allowed ways; return which ('ok', 'usage', 'refused')."""
    for path, data in user_files.items():
        assert path.read_bytes() == data, f"{path} (the user's) was changed by the run"
    output = flat(result.output)
    assert "Traceback" not in result.output, result.output
    if result.exit_code == 0:
        parquet = out / f"{part}.parquet"
        assert parquet.is_file(), output
        meta = Result.load(parquet).meta
        inputs = meta["inputs"]
        if corpus_file is not None:
            assert inputs[str(corpus_file)] == hashlib.sha256(corpus_file.read_bytes()).hexdigest()
        assert re.fullmatch(r"[0-9a-f]{64}", meta["corpus"]["tokens_sha256"])
        assert all(re.fullmatch(r"[0-9a-f]{64}", digest) for digest in inputs.values()), inputs
        return "ok"
    if result.exit_code == 2:
        assert isinstance(result.exception, SystemExit), repr(result.exception)
        assert re.search(r"Invalid value for '--[a-z][a-z-]*'", output), output
        return "usage"
    error = result.exception
    assert result.exit_code == 1, (result.exit_code, repr(error), output)
    assert isinstance(error, PoslensError), f"not a PoslensError: {type(error).__module__}.{type(error).__name__}: {error}"
    message = " ".join(str(error).split())
    assert any(c in message for c in culprits), f"{type(error).__name__} names none of {culprits}: {message}"
    return "refused"


# ---------------------------------------------------------------- 1. option combinations at their edges

SEQ_LENS = [0, 1, 2, 3, 16, 33, 5000]
EARLY = [None, 0, 1, 2, 8, 40]
TAUS = [None, "-1", "0", "nan", "inf", "0.3", "1", "2"]
VARIANTS = [
    "base",
    "ntk:0",
    "ntk:2",
    "window:0",
    "window:1",
    "window:2",
    "window:8",
    "rope-base:1e-300",
    "rope-base:1e6",
    "garbage",
    "window:1e300",
    "ntk:1e-300",
]
BOS = ["bos", "none", "token:5", "token:99999", "first"]
SEEDS = ["-1", "0", str(2**40), str(2**64), str(-(2**63) - 1)]
OUT_NAMES = ["out", "out", "out", "résumé ✓ out", "o" * 300, "o" * 300 + "/sub", DANGLING := "a symlink to a folder that is not there"]
# option: (every value drawn at its edges, the values that make a run that works with the others' usual values)
OPTIONS = {
    "--n-seqs": ([str(n) for n in range(7)], ["2", "3"]),
    "--seq-len": ([str(t) for t in SEQ_LENS], ["16"]),
    "--groups": ([str(g) for g in range(10)], ["2"]),
    "--early": (EARLY, [None, 2, 8]),
    "--tau": (TAUS, [None, "0.3", "1"]),
    "--variant": (VARIANTS, ["base", "ntk:2", "window:2", "window:8", "rope-base:1e6"]),
    "--bos": (BOS, ["bos", "none", "token:5"]),
    "--seed": (SEEDS, SEEDS[:3]),
    "--batch-size": (["0", "1", "3"], ["3"]),
    "--max-memory": (["free", "8GB", "1B", "0", "nan", "1e400GB"], [None]),
    "--dtype": (["float32", "bfloat16", "garbage"], [None]),
    "--row-sums": (["auto", "store", "second-pass", "garbage"], [None, "store"]),
    "--disk-budget": (["0", "-1GB", "nan", "1B", "20GB", "garbage"], [None]),
}
# A message that names an option's Python parameter names the option too.
PARAMETERS = {
    "--n-seqs": "n_seqs",
    "--seq-len": "seq_len",
    "--groups": "groups",
    "--early": "early",
    "--tau": "tau",
    "--variant": "variant",
    "--bos": "position0",
    "--seed": "seed",
    "--text-field": "text_field",
    "--batch-size": "batch_size",
    "--max-memory": "max_memory",
    "--dtype": "dtype",
    "--row-sums": "row_sums",
    "--disk-budget": "disk_budget",
}
DISTINCT = ("5000", "99999", str(2**64), str(-(2**63) - 1))  # values no message holds by chance


def corpus_lines(kind: str, field: str, missing: bool) -> list[str]:
    sentence = "The quick brown fox jumps over the lazy dog; ünïcödé ✓ 12345. "
    if kind == "txt":
        return [sentence * 12]
    lines = [json.dumps({field: sentence * 3, "id": i}) for i in range(4)]
    if missing:
        lines.insert(2, json.dumps({"other": sentence}))
    return lines


@st.composite
def command_lines(draw):
    """(command, options, corpus kind, a JSONL line without the field?, the user's file in --out, --out's name).

    At most three options take values at their edges; the others take values
    that work together, so that a good share of the runs succeed.
    """
    command = draw(st.sampled_from(["leakage", "sinks"]))
    names = [o for o in OPTIONS if command == "sinks" or o != "--tau"]
    wild = draw(st.sets(st.sampled_from(names), max_size=3))
    args: dict[str, str] = {}
    for option in names:
        every, usual = OPTIONS[option]
        value = draw(st.sampled_from(every if option in wild else usual))
        if value is not None:
            args[option] = str(value)
    corpus = draw(st.sampled_from(["random", "txt", "jsonl"]))
    field = draw(st.sampled_from([None, "text", "body"]))
    if field is not None:
        args["--text-field"] = field
    missing = draw(st.booleans()) if corpus == "jsonl" else False
    user = draw(st.sampled_from([None, None, None, "notes.csv", "leakage.csv", f"{command}.parquet", "leakage.sums.npz"]))
    out_name = draw(st.sampled_from(OUT_NAMES)) if user is None else "out"
    return command, args, corpus, missing, user, out_name, draw(st.sampled_from([False, False, False, True]))


class FullDisk:
    """The row-bin store's temporary file on a TMPDIR that fills up after ``room`` bytes (ENOSPC)."""

    def __init__(self, file, room: int) -> None:
        self.file, self.room = file, room

    def write(self, data) -> int:
        import errno

        if self.file.tell() + len(data) > self.room:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return self.file.write(data)

    def __getattr__(self, name):
        return getattr(self.file, name)


@contextlib.contextmanager
def tmpdir_full(full: bool):
    """While the block runs, a TMPDIR that fills up after 4 kB of the row-bin store (when ``full``)."""
    if not full:
        yield
        return
    from poslens.capture import row_bin_store

    real = row_bin_store.tempfile.TemporaryFile
    with mock.patch.object(row_bin_store.tempfile, "TemporaryFile", lambda dir=None: FullDisk(real(dir=dir), room=4096)):
        yield


def run_edge_case(
    model_dir: Path,
    scratch: Path,
    command: str,
    args: dict[str, str],
    corpus: str,
    missing: bool,
    user: str | None,
    out_name: str = "out",
    full_tmpdir: bool = False,
) -> str:
    folder = fresh(scratch)
    out = folder / out_name
    if out_name == DANGLING:
        out = folder / "results"
        out.symlink_to(folder / "gone")
    corpus_file = None
    if corpus != "random":
        stored_field = args.get("--text-field", "text")
        corpus_file = folder / f"corpus-{uuid.uuid4().hex[:6]}.{corpus}"
        # the file holds its texts in field "text"; a --text-field body then names a field that is not there
        corpus_file.write_text("\n".join(corpus_lines(corpus, "text" if stored_field == "body" else stored_field, missing)) + "\n", encoding="utf-8")
    user_files = {}
    if user is not None:
        out.mkdir()
        (out / user).write_bytes(USER_BYTES)
        user_files[out / user] = USER_BYTES
    argv = [command, "--model", str(model_dir), "--corpus", str(corpus_file or "random"), "--out", str(out)]
    for option, value in args.items():
        argv += [option, value]
    with tmpdir_full(full_tmpdir):
        result = runner.invoke(app, argv)
    culprits = [*args, *(PARAMETERS[o] for o in args), "--corpus", "--out"] + (["TMPDIR"] if full_tmpdir else [])
    culprits += [v for o, v in args.items() if o in ("--variant", "--bos", "--text-field", "--max-memory", "--dtype") or v in DISTINCT]
    if corpus_file is not None:
        culprits.append(corpus_file.name)
    if user is not None:
        culprits.append(user)
    outcome = check_outcome(result, culprits=culprits, out=out, part=command, corpus_file=corpus_file, user_files=user_files)
    if user in ("leakage.csv", f"{command}.parquet", "leakage.sums.npz"):
        assert outcome != "ok", "a run replaced the user's file"
    if outcome == "refused" and isinstance(result.exception, OutputConflictError):
        assert user is not None and user in str(result.exception)
    if outcome != "ok" and user is None:
        assert not os.path.exists(out), "a failed run left the --out folder it created"
    if out_name == DANGLING:
        assert outcome == "usage" and out.is_symlink() and "symbolic link" in flat(result.output)
    if full_tmpdir and type(result.exception).__name__ == "DiskFullError":  # the folder that filled up, and the route that needs none
        assert "(TMPDIR) filled up" in str(result.exception) and "--row-sums second-pass" in str(result.exception)
    return outcome


@settings(max_examples=20 * SCALE, **FUZZ)
@given(case=command_lines())
@example(case=("leakage", {"--n-seqs": "2", "--seq-len": "5000", "--groups": "2"}, "random", False, None, "out"))
@example(case=("sinks", {"--n-seqs": "2", "--seq-len": "16", "--groups": "2", "--variant": "window:1e300"}, "random", False, None, "out"))
@example(case=("leakage", {"--n-seqs": "2", "--seq-len": "16", "--groups": "2", "--seed": str(2**64)}, "random", False, None, "out"))
@example(case=("leakage", {"--n-seqs": "2", "--seq-len": "16", "--groups": "2", "--max-memory": "1B"}, "random", False, None, "out"))
@example(case=("leakage", {"--n-seqs": "2", "--seq-len": "16", "--groups": "2", "--max-memory": "1e400GB"}, "random", False, None, "out"))
@example(case=("leakage", {"--n-seqs": "2", "--seq-len": "16", "--groups": "2", "--dtype": "garbage"}, "random", False, None, "out"))
@example(case=("leakage", {"--n-seqs": "2", "--seq-len": "16", "--groups": "2"}, "random", False, None, "o" * 300))
@example(case=("leakage", {"--n-seqs": "2", "--seq-len": "16", "--groups": "2", "--bos": "token:99999"}, "random", False, None, "out"))
@example(case=("leakage", {"--n-seqs": "2", "--seq-len": "16", "--groups": "2", "--text-field": "body"}, "jsonl", False, None, "out"))
@example(case=("sinks", {"--n-seqs": "6", "--seq-len": "2", "--groups": "2", "--tau": "1", "--bos": "none"}, "txt", False, "leakage.csv", "out"))
@example(
    case=(
        "leakage",
        {"--n-seqs": "3", "--seq-len": "16", "--groups": "2", "--early": "8", "--variant": "window:2", "--seed": str(2**40), "--batch-size": "1"},
        "jsonl",
        False,
        "notes.csv",
        "out",
    )
)
@example(case=("leakage", {"--n-seqs": "2", "--seq-len": "16", "--groups": "2", "--row-sums": "store"}, "random", False, None, "out", True))
@example(case=("leakage", {"--n-seqs": "2", "--seq-len": "16", "--groups": "2", "--disk-budget": "0"}, "random", False, None, "out"))
@example(case=("leakage", {"--n-seqs": "2", "--seq-len": "16", "--groups": "2"}, "random", False, None, DANGLING))
def test_cli_options_at_their_edges(tiny_llama_dir, scratch, case):
    event(run_edge_case(tiny_llama_dir, scratch, *case))


# ---------------------------------------------------------------- 2. corpus files through the CLI

ENCODINGS = ["utf-8", "utf-8-sig", "latin-1", "cp1252", "utf-16", "utf-16-le"]
FILLER = "Pack my box with five dozen liquor jugs. "
HUGE = "word " * 200_000  # a line of about 1 MB
INVALID_JSON = [
    "{",
    "{'text': 'single quotes'}",
    '{"text": "unterminated',
    "[1, 2",
    "tru",
    '{"text": "a"} trailing',
    "\x00",
    '{"text": "\\ud800 lone surrogate"}',
    "[" * 5000,
    "{}{}",
    '{"text": "a",}',
]
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)


@st.composite
def jsonl_lines(draw, field: str) -> str:
    kind = draw(st.sampled_from(["text", "text", "text", "value", "other field", "field of another type", "invalid", "blank", "long"]))
    if kind == "text":
        return json.dumps({field: draw(st.text(max_size=40)) + FILLER, "n": draw(st.integers())}, ensure_ascii=draw(st.booleans()))
    if kind == "value":
        return json.dumps(draw(JSON_VALUES))
    if kind == "other field":
        return json.dumps({"other": draw(st.text(max_size=20))})
    if kind == "field of another type":
        return json.dumps({field: draw(JSON_VALUES.filter(lambda v: not isinstance(v, str)))})
    if kind == "invalid":
        return draw(st.sampled_from(INVALID_JSON))
    if kind == "blank":
        return draw(st.sampled_from(["", " ", "\t", "  \r"]))
    return json.dumps({field: FILLER * 500})  # a long line, 20 kB


@st.composite
def corpus_files(draw):
    """(suffix, text, encoding, text field): a .txt, .md or .jsonl corpus to write, its lines ending in \\n or \\r\\n."""
    suffix = draw(st.sampled_from([".txt", ".jsonl", ".md"]))
    encoding = draw(st.sampled_from(["utf-8", *ENCODINGS]))
    field = draw(st.sampled_from(["text", "text", "body", "ü field"]))
    end = draw(st.sampled_from(["\n", "\r\n"]))
    if suffix == ".jsonl":
        lines = draw(st.lists(jsonl_lines(field), min_size=0, max_size=6))
    else:
        lines = draw(st.lists(st.text(max_size=60), max_size=3)) + [FILLER * draw(st.sampled_from([0, 2, 2, 3]))]
    return suffix, end.join(lines) + draw(st.sampled_from(["", end])), encoding, field


CORPUS_OPTIONS = ["--n-seqs", "2", "--seq-len", "8", "--groups", "2", "--early", "4", "--batch-size", "2"]


def run_corpus_file(model_dir: Path, scratch: Path, suffix: str, text: str, encoding: str, field: str) -> str:
    folder = fresh(scratch)
    path = folder / f"corpus ü {uuid.uuid4().hex[:6]}{suffix}"
    path.write_bytes(text.encode(encoding, errors="replace"))
    out = folder / "out"
    out.mkdir()
    (out / "notes.csv").write_bytes(USER_BYTES)
    result = runner.invoke(
        app, ["leakage", "--model", str(model_dir), "--corpus", str(path), "--text-field", field, *CORPUS_OPTIONS, "--out", str(out)]
    )
    return check_outcome(result, culprits=[path.name], out=out, part="leakage", corpus_file=path, user_files={out / "notes.csv": USER_BYTES})


@settings(max_examples=20 * SCALE, **FUZZ)
@given(case=corpus_files())
@example(case=(".jsonl", json.dumps({"text": HUGE}) + "\n\n" + json.dumps({"text": FILLER}), "utf-8", "text"))  # a 1 MB line
@example(case=(".jsonl", json.dumps({"text": 3}) + "\n" + json.dumps({"text": HUGE}), "utf-8", "text"))
@example(case=(".txt", "café au lait, " * 20, "latin-1", "text"))
@example(case=(".txt", "naïve “quotes” — " * 20, "cp1252", "text"))
@example(case=(".jsonl", json.dumps({"text": FILLER * 3}), "utf-16", "text"))
@example(case=(".txt", FILLER * 3, "utf-16-le", "text"))  # no byte-order mark: NUL bytes between the letters
@example(case=(".jsonl", "\n".join(json.dumps(v) for v in [None, 1, 2.5, True, "s", [1], {"text": FILLER * 3}]), "utf-8", "text"))
@example(case=(".jsonl", "", "utf-8", "text"))
@example(case=(".jsonl", "\n\n  \n", "utf-8-sig", "text"))
def test_corpus_files_through_the_cli(tiny_llama_dir, scratch, case):
    event(run_corpus_file(tiny_llama_dir, scratch, *case))


# ---------------------------------------------------------------- 3. save and load round trips

ODD_STRINGS = [
    "",
    " ",
    "nan",
    "NaN",
    "None",
    "null",
    "NULL",
    "1e5",
    "-1",
    "a,b",
    '"quoted"',
    "line\nbreak",
    "tab\there",
    "ünïcödé ✓",
    "日本語",
    "\x00nul",
    "🙂",
    "\u2028",
    "=1+1",
]
TEXTS = st.sampled_from(ODD_STRINGS) | st.text(max_size=12)
FLOATS = st.floats(allow_nan=True, allow_infinity=True) | st.sampled_from([math.nan, math.inf, -math.inf, -0.0, 5e-324])
ROWS = st.fixed_dictionaries(
    {
        "model": TEXTS,
        "variant": TEXTS,
        "intervention": TEXTS,
        "layer": st.integers(-1, 2**31),
        "head": st.integers(-(2**63), 2**63 - 1),
        "query_window": TEXTS,
        "metric": TEXTS,
        "value": FLOATS,
        "ci_low": FLOATS,
        "ci_high": FLOATS,
    }
)
META_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | TEXTS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXTS, inner, max_size=3),
    max_leaves=12,
)
STEMS = ["leakage", "résumé ✓", "with space", "-dash", "a.b", "x" * 215, "日本語", "x" * 240, "é" * 150]
TARGETS = [
    "fine",
    "fine",
    "fine",
    "upper-case suffix",
    "in new subfolders",
    "folder",
    ".csv name",
    "no suffix",
    "trailing dot",
    "user's .csv twin",
    "user's .csv twin, csv=False",
    "user's .sums.npz",
    "user's .parquet",
    "foreign parquet",
    "under a file",
]


def table_of(rows: list[dict]) -> pd.DataFrame:
    frame = pd.DataFrame(rows, columns=COLUMNS)
    return frame.astype({"layer": "int64", "head": "int64", "value": "float64", "ci_low": "float64", "ci_high": "float64"})


def same_json(a, b) -> bool:
    """Equality of JSON values, with nan equal to nan and ints and floats told apart."""
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))
    if type(a) is not type(b):
        return False
    if isinstance(a, list):
        return len(a) == len(b) and all(same_json(x, y) for x, y in zip(a, b, strict=False))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same_json(a[k], b[k]) for k in a)
    return a == b


def listing(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def assert_refused(call, *names: str) -> PoslensError:
    """``call()`` raises a PoslensError whose message names one of ``names``."""
    with pytest.raises(PoslensError) as info:
        call()
    message = str(info.value)
    assert any(name in message for name in names), f"{type(info.value).__name__} names none of {names}: {message}"
    return info.value


def assert_round_trip(path: Path, result: Result) -> None:
    loaded = Result.load(path)
    pd.testing.assert_frame_equal(loaded.table, result.table, check_dtype=len(result.table) > 0, check_index_type=False)
    assert same_json(loaded.meta, result.meta), (loaded.meta, result.meta)


@st.composite
def saves(draw):
    rows = draw(st.lists(ROWS, max_size=4))
    meta = draw(st.dictionaries(TEXTS, META_VALUES, max_size=4))
    return (
        rows,
        meta,
        draw(st.sampled_from(TARGETS)),
        draw(st.sampled_from(STEMS)),
        draw(
            st.sampled_from(
                [
                    "save again",
                    "save another",
                    "user edits the .csv",
                    "user edits the .parquet",
                    "nothing",
                    TWO_AT_ONCE,
                    *SUMS_DAMAGE,
                ]
            )
        ),
    )


TWO_AT_ONCE = "two saves of it at once"
SUMS_DAMAGE = ("its sums made a newer format", "an array of objects put in its sums", "its sums truncated")


def with_sums(rows: list[dict], meta: dict) -> Result:
    from poslens.fit.binning import Binning
    from poslens.fit.sums import CellSums

    return Result(table_of(rows), meta, CellSums.zeros(groups=2, layers=1, heads=1, binning=Binning(8)))


def damage_sums(sums: Path, how: str) -> None:
    """Make the sums file one this poslens cannot read, as ``how`` says (numpy writes object arrays pickled)."""
    import zipfile

    import numpy as np

    if how == SUMS_DAMAGE[2]:
        sums.write_bytes(sums.read_bytes()[:100])
        return
    with np.load(sums) as data:
        arrays = {name: data[name] for name in data.files}
    if how == SUMS_DAMAGE[0]:
        arrays["sums_format"] = np.array(99)
    else:
        arrays["a_logit"] = np.array([{"not": "numbers"}], dtype=object)
    with zipfile.ZipFile(sums, "w") as archive:
        for name, array in arrays.items():
            with archive.open(f"{name}.npy", "w") as member:
                np.lib.format.write_array(member, array, allow_pickle=True)


def run_save(scratch: Path, rows: list[dict], meta: dict, target: str, stem: str, then: str) -> str:
    folder = fresh(scratch)
    result = with_sums(rows, meta) if then in SUMS_DAMAGE else Result(table_of(rows), meta)
    path = folder / f"{stem}.parquet"
    csv = target != "user's .csv twin, csv=False"
    culprit = path.name
    if len(os.fsencode(stem)) > 230:  # too long for the names of the twins' temporary files (a name holds 255 bytes)
        assert_refused(lambda: result.save(path, csv=csv), path.name)
        assert listing(folder) == {}, "a refused save changed the folder"
        return "refused"
    if target == "upper-case suffix":
        path = folder / f"{stem}.PARQUET"
    elif target == "in new subfolders":
        path = folder / "sub" / "deeper" / f"{stem}.parquet"
    elif target == "folder":
        path = folder / stem
        path.mkdir()
        culprit = stem
    elif target in (".csv name", "no suffix", "trailing dot"):
        path = folder / {".csv name": f"{stem}.csv", "no suffix": stem, "trailing dot": f"{stem}."}[target]
        culprit = path.name
    elif target.startswith("user's"):
        twin = path.with_suffix({".csv": ".csv", ".sum": ".sums.npz", ".par": ".parquet"}[target[7:11]])
        twin.write_bytes(USER_BYTES)
        culprit = twin.name
    elif target == "foreign parquet":
        pd.DataFrame({"a": [1, 2]}).to_parquet(path)
    elif target == "under a file":
        (folder / "a-file").write_bytes(USER_BYTES)
        path = folder / "a-file" / f"{stem}.parquet"
        culprit = "a-file"
    before = listing(folder)
    if target in ("fine", "upper-case suffix", "in new subfolders", "user's .csv twin, csv=False"):
        assert result.save(path, csv=csv) == path
        assert_round_trip(path, result)
        if not csv:
            assert (folder / f"{stem}.csv").read_bytes() == USER_BYTES
    else:
        assert_refused(lambda: result.save(path, csv=csv), culprit)
        assert listing(folder) == before, "a refused save changed the folder"
        if path.exists() or target.startswith("user's"):  # what is there is not a result, and loading it says so
            loaded = path if path.exists() else folder / culprit
            assert_refused(lambda: Result.load(loaded), loaded.name)
        return "refused"
    if then == TWO_AT_ONCE:  # the second waits for the first and replaces its files: neither is refused
        import threading

        other = Result(table_of(rows[::-1] + rows), {"other": True})
        errors: list[BaseException] = []

        def save(which: Result) -> None:
            try:
                which.save(path, csv=csv)
            except BaseException as error:  # noqa: BLE001 (collected for the assertion)
                errors.append(error)

        threads = [threading.Thread(target=save, args=(which,)) for which in (result, other)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert errors == [], errors
        loaded = Result.load(path)
        assert loaded.meta.get("other") is True or same_json(loaded.meta, result.meta)
    elif then in SUMS_DAMAGE:  # a sums file this poslens cannot read: a poslens error naming it, the file kept
        sums = path.with_suffix(".sums.npz")
        damage_sums(sums, then)
        kept = sums.read_bytes()
        assert_refused(lambda: Result.load(path), sums.name)
        assert sums.read_bytes() == kept
    elif then in ("save again", "save another"):
        again = result if then == "save again" else Result(table_of(rows[::-1] + rows), {"again": True})
        again.save(path, csv=csv)  # poslens wrote them: it may replace them
        assert_round_trip(path, again)
        if csv:
            assert_refused(lambda: Result.load(path.with_suffix(".csv")), path.with_suffix(".csv").name)
    elif then.startswith("user edits") and (csv or then.endswith(".parquet")):
        edited = path.with_suffix(".csv" if then.endswith(".csv") else path.suffix)
        edited.write_bytes(edited.read_bytes() + b"\nmy edit\n")
        kept = listing(path.parent)
        error = assert_refused(lambda: result.save(path, csv=csv), edited.name)
        assert isinstance(error, OutputConflictError) and "changed since" in str(error)
        assert listing(path.parent) == kept, "a refused save changed the folder"
    return "saved"


@settings(max_examples=60 * SCALE, **FUZZ)
@given(case=saves())
@example(case=([], {}, "fine", "leakage", "save again"))
@example(
    case=(
        [
            dict(
                model="m",
                variant="base",
                intervention="none",
                layer=0,
                head=-1,
                query_window="all",
                metric="c_res",
                value=math.nan,
                ci_low=-math.inf,
                ci_high=math.inf,
            )
        ],
        {"seed": math.nan, "n": 2**70},
        "fine",
        "leakage",
        "user edits the .csv",
    )
)
@example(case=([], {}, ".csv name", "leakage", "nothing"))
@example(case=([], {}, "folder", "leakage", "nothing"))
@example(case=([], {}, "user's .csv twin", "leakage", "nothing"))
@example(case=([], {}, "user's .parquet", "leakage", "nothing"))
@example(case=([], {}, "foreign parquet", "leakage", "nothing"))
@example(case=([], {}, "fine", "x" * 215, "save again"))
@example(case=([], {}, "fine", "x" * 240, "nothing"))
@example(case=([], {}, "fine", "leakage", TWO_AT_ONCE))
@example(case=([], {}, "fine", "leakage", SUMS_DAMAGE[0]))
@example(case=([], {}, "fine", "leakage", SUMS_DAMAGE[1]))
@example(case=([], {}, "fine", "leakage", SUMS_DAMAGE[2]))
def test_save_and_load_round_trips(scratch, case):
    event(run_save(scratch, *case))


# ---------------------------------------------------------------- 4. --model and Result.load at their edges


def model_edge(scratch: Path, kind: str) -> tuple[str, str]:
    """(--model value, the text its error must name) for each kind of model argument that cannot be loaded."""
    folder = fresh(scratch)
    if kind == "a file":
        (folder / "model.gguf").write_bytes(USER_BYTES)
        return str(folder / "model.gguf"), "model.gguf"
    if kind == "unknown name":
        return "smollm3-135m", "smollm3-135m"
    if kind == "a folder without config.json":
        return str(folder), folder.name
    if kind.startswith("pickled weights"):  # poslens never unpickles: a pickle can run code as it loads
        import pickle
        from collections import Counter

        import torch
        from safetensors.torch import load_file

        from poslens.testing import save_tiny_model

        model = save_tiny_model(folder / "model", "llama")
        if kind.endswith("(tensors)"):
            torch.save(load_file(model / "model.safetensors"), model / "pytorch_model.bin")
        else:
            (model / "pytorch_model.bin").write_bytes(pickle.dumps(Counter(weights=1)))
        (model / "model.safetensors").unlink()
        return str(model), "pytorch_model.bin"
    return str(folder / "nowhere"), "nowhere"


@pytest.mark.parametrize(
    "kind",
    [
        "a file",
        "unknown name",
        "a folder without config.json",
        "a missing folder",
        "pickled weights (tensors)",
        "pickled weights (objects)",
    ],
)
def test_a_model_that_cannot_be_loaded_is_a_poslens_error_naming_it(scratch, kind):
    model, name = model_edge(scratch, kind)
    out = fresh(scratch) / "out"
    result = runner.invoke(
        app,
        ["leakage", "--model", model, "--corpus", "random", "--n-seqs", "2", "--seq-len", "8", "--groups", "2", "--early", "4", "--out", str(out)],
    )
    check_outcome(result, culprits=[name], out=out, part="leakage", corpus_file=None, user_files={})
    assert result.exit_code == 1 and not out.exists()


def test_loading_a_result_that_is_not_there_is_a_poslens_error(scratch):
    missing = fresh(scratch) / "leakage.parquet"
    assert_refused(lambda: Result.load(missing), missing.name)


# ---------------------------------------------------------------- 5. sizes as printed, and models without weights


@settings(max_examples=200 * SCALE, **FUZZ)
@given(n_bytes=st.integers(min_value=1, max_value=10**19), budget=st.integers(min_value=1, max_value=10**19))
def test_a_size_as_printed_reads_back_within_rounding_and_never_as_zero(n_bytes, budget):
    """The route's reason names the store's size and the budget in units that read back to within three digits."""
    from poslens.runtime.disk import choose_route

    reason = choose_route("auto", estimated_store_bytes=n_bytes, budget=budget).reason
    unit_bytes = {"bytes": 1, "kB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12}
    printed = re.findall(r"([\d,.]+) (bytes|kB|MB|GB|TB)\b", reason)
    assert len(printed) == 2, reason
    for (number, unit), size in zip(printed, (n_bytes, budget), strict=True):
        read = float(number.replace(",", "")) * unit_bytes[unit]
        assert read > 0 and abs(read - size) <= 0.005 * size + 0.5, (reason, size)


def _tiny_hf(folder: Path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return AutoModelForCausalLM.from_pretrained(folder), AutoTokenizer.from_pretrained(folder)


@pytest.fixture(scope="module")
def tiny_hf_dir(scratch) -> Path:
    from poslens.testing import save_tiny_model

    return save_tiny_model(scratch / "tiny-hf", "llama")


@settings(max_examples=8 * SCALE, **FUZZ)
@given(pick=st.integers(min_value=0, max_value=10**6), buffer=st.booleans())
def test_a_model_with_a_tensor_on_the_meta_device_is_a_poslens_error_naming_it(tiny_hf_dir, pick, buffer):
    """Any one parameter (or buffer) left without values stops poslens.load_model, naming that tensor, never a raw RuntimeError."""
    import torch

    import poslens

    hf, tokenizer = _tiny_hf(tiny_hf_dir)
    named = list(hf.named_buffers() if buffer else hf.named_parameters())
    if not named:
        return
    name, tensor = named[pick % len(named)]
    owner_name, _, leaf = name.rpartition(".")
    owner = hf.get_submodule(owner_name)
    empty = torch.empty_like(tensor, device="meta")
    if buffer:
        owner.register_buffer(leaf, empty, persistent=leaf not in owner._non_persistent_buffers_set)
    else:
        setattr(owner, leaf, torch.nn.Parameter(empty, requires_grad=False))
    event(f"{'buffer' if buffer else 'parameter'}: {leaf}")
    with pytest.raises(PoslensError) as refused:
        poslens.load_model(hf, tokenizer=tokenizer)
    assert f"has no weights: {name} is on PyTorch's meta device" in str(refused.value)
    assert "load_state_dict(" in str(refused.value)
