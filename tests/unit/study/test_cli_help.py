"""``poslens ... --help`` shows every default cleanly and whole, and the pages it points to travel with the sdist."""

from __future__ import annotations

import fnmatch
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from poslens.study.cli import app
from poslens.zoo.family import MEMBERS

ROOT = Path(__file__).resolve().parents[3]
runner = CliRunner()


def help_text(*command: str, width: int = 80) -> str:
    done = runner.invoke(app, [*command, "--help"], env={"COLUMNS": str(width), "TERMINAL_WIDTH": str(width)})
    assert done.exit_code == 0, done.output
    return done.output


def flat(text: str) -> str:
    """The help's words on one line: box characters and line breaks out."""
    return " ".join(re.sub(r"[│╭╮╰╯─]", " ", text).split())


@pytest.mark.parametrize("command", ["leakage", "path-tests", "relativize", "sink-split"])
def test_a_default_given_in_words_shows_without_parentheses(command):
    text = flat(help_text(command, width=200))
    assert "[default: (" not in text
    assert "[default: 32]" in text  # --early: the library's default Q
    if command == "path-tests":
        assert "[default: 8,64,T/2]" in text
    if command == "relativize":
        assert "[default: --n-seqs]" in text and "[default: --seed + 1]" in text


@pytest.mark.parametrize("width", [80, 120])
def test_the_zoo_members_default_is_shown_whole_at_any_width(width):
    # in a fresh process: rich takes the terminal's width once per process
    code = "import sys; sys.argv = ['poslens', 'zoo', '--help']; from poslens.study.cli import run; run()"
    env = {**os.environ, "COLUMNS": str(width), "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    text = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120).stdout
    assert max(map(len, text.splitlines())) == width
    members = text[text.index("--members") : text.index("--eval-every")]
    assert "…" not in members  # rich cuts an unbreakable word with an ellipsis; --members' default was one
    words = flat(members)
    assert f"[default: all {len(MEMBERS)}]" in words
    for member in MEMBERS:
        assert member in words


def test_the_page_zoo_help_points_to_is_in_the_sdist():
    words = flat(help_text("zoo", width=200))
    pages = set(re.findall(r"docs/[\w/]+\.md", words))
    assert pages == {"docs/zoo.md"}
    manifest = (ROOT / "MANIFEST.in").read_text().splitlines()
    included = [line.split()[1:] for line in manifest if line.startswith("recursive-include")]
    for page in pages:
        assert (ROOT / page).is_file()
        assert any(page.startswith(folder + "/") and any(fnmatch.fnmatch(page, f"*{p}") for p in patterns) for folder, *patterns in included)
