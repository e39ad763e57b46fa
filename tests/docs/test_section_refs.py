"""Every "§N.N" cited anywhere in the project is a numbered section of docs/methodology.md.

The methodology page carries the specification with its own section numbers,
each numbered heading with an explicit anchor (``## 4.4 Controls {#s4.4}``).
Code, docstrings, tests and pages cite them as "methodology §4.4"; the docs hook
``docs/_hooks/section_links.py`` makes those citations links. This test reads
the sources (Python files, Markdown pages, the README, the notebooks' cells) and
fails on a number the page does not have, and on any citation of the
specification file users do not have.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
METHODOLOGY = ROOT / "docs" / "methodology.md"

ANCHOR = re.compile(r"\{[^}\n]*#s(\d+(?:\.\d+)*)[^}\n]*\}")
REF = re.compile("\u00a7" r"\s*(\d+(?:\.\d+)*)")
# the specification file, by name; spelled in two halves so that this file does not cite it. Word boundaries: the
# notebooks embed plotly.js, whose "ERR_METH" "OD_NOT_IMPLEMENTED" is an identifier, not a citation
SPEC = re.compile(r"\bMETH" r"OD(?:\.md)?\b")
# a test that checks a text does not name it (``assert "METH" "OD" not in text``) is not a citation
ABSENCE_CHECK = re.compile(r"""["']METH""" r"""OD(?:\.md)?["']\s+not\s+in\b""")


def sources() -> list[Path]:
    """The files whose citations must resolve."""
    files = [ROOT / "README.md"]
    for pattern in ("poslens/**/*.py", "tests/**/*.py", "docs/**/*.py", "docs/**/*.md", "docs/tutorials/*.ipynb"):
        files.extend(ROOT.glob(pattern))
    return sorted(f for f in set(files) if f.is_file())


def text_of(path: Path) -> str:
    """A file's text; for a notebook, its cells' sources (outputs are generated, not written)."""
    raw = path.read_text(encoding="utf-8")
    if path.suffix == ".ipynb":
        return "\n".join("".join(cell.get("source", "")) for cell in json.loads(raw)["cells"])
    return raw


def anchors(markdown: str) -> set[str]:
    """Section numbers with an explicit anchor: ``"4.4"`` for ``{#s4.4}``."""
    return {m.group(1) for m in ANCHOR.finditer(markdown)}


def unresolved(paths: list[Path], sections: set[str]) -> list[str]:
    """``path:line: §N`` for every citation of a number not in ``sections``."""
    bad = []
    for path in paths:
        for lineno, line in enumerate(text_of(path).splitlines(), 1):
            for m in REF.finditer(line):
                if m.group(1) not in sections:
                    bad.append(f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}:{lineno}: \u00a7{m.group(1)}")
    return bad


def spec_citations(paths: list[Path]) -> list[str]:
    """``path:line`` of every mention of the specification file (whole file text, notebook outputs included)."""
    hits = []
    for path in paths:
        for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if SPEC.search(ABSENCE_CHECK.sub("", line)):
                hits.append(f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}:{lineno}")
    return hits


def test_methodology_numbers_its_sections():
    sections = anchors(METHODOLOGY.read_text(encoding="utf-8"))
    # the specification's sections, 0 to 13, and the subsections others cite
    cited = ["3.1", "3.2", "3.3", "4.0", "4.1", "4.2", "4.3", "4.4", "4.5", "4.6", "9.1", "13.1", "13.2", "13.3", "13.4", "13.5", "13.6"]
    for number in [str(k) for k in range(14)] + cited:
        assert number in sections, f"docs/methodology.md has no heading with {{#s{number}}}"
    assert "14" not in sections  # the page numbers no section the specification lacks


def test_every_section_reference_resolves():
    sections = anchors(METHODOLOGY.read_text(encoding="utf-8"))
    paths = sources()
    assert METHODOLOGY in paths and ROOT / "README.md" in paths
    assert sum(len(REF.findall(text_of(p))) for p in paths) > 50  # the collector does find the citations
    bad = unresolved(paths, sections)
    assert not bad, "citations of sections docs/methodology.md does not have:\n" + "\n".join(bad)


def test_a_bad_number_is_caught(tmp_path):
    sections = anchors(METHODOLOGY.read_text(encoding="utf-8"))
    page = tmp_path / "page.md"
    page.write_text("as methodology \u00a74.4 says, and \u00a799.7 does not\n", encoding="utf-8")
    assert unresolved([page], sections) == [f"{page}:1: \u00a799.7"]
    nb = tmp_path / "nb.ipynb"
    nb.write_text(json.dumps({"cells": [{"cell_type": "markdown", "source": ["see methodology \u00a7", "14.3\n"]}]}), encoding="utf-8")
    assert unresolved([nb], sections) == [f"{nb}:1: \u00a714.3"]


def test_no_file_cites_the_specification_file(tmp_path):
    hits = spec_citations(sources())
    assert not hits, "mentions of the specification file users do not have (say it on docs/methodology.md instead):\n" + "\n".join(hits)
    demo = tmp_path / "demo.md"
    word = "METH" + "OD"  # split, so that this file does not itself cite the specification file
    demo.write_text(f'x.ERR_{word}_NOT_IMPLEMENTED\nas {word}.md says\nwhere {word} is silent\nassert "{word}" not in page\n', encoding="utf-8")
    assert spec_citations([demo]) == [f"{demo}:2", f"{demo}:3"]


def test_the_docs_hook_links_citations():
    pytest.importorskip("mkdocs")
    sys.path.insert(0, str(ROOT / "docs" / "_hooks"))
    try:
        import section_links
    finally:
        sys.path.remove(str(ROOT / "docs" / "_hooks"))
    sections = section_links.sections_of(METHODOLOGY.read_text(encoding="utf-8"))
    assert sections == frozenset(anchors(METHODOLOGY.read_text(encoding="utf-8")))
    html = (
        "<p>see methodology \u00a74.4 (i) and methodology \u00a799.1; <code>methodology \u00a74.1</code> "
        '<a href="x">methodology \u00a74.2</a></p><pre>methodology \u00a73.1</pre>'
    )
    out, missing = section_links.link_sections(html, sections, "../methodology/")
    assert '<a class="section-ref" href="../methodology/#s4.4">methodology \u00a74.4</a> (i)' in out
    assert missing == ["99.1"]
    # code, preformatted text and existing links are left alone
    assert "<code>methodology \u00a74.1</code>" in out and '<a href="x">methodology \u00a74.2</a>' in out
    assert "<pre>methodology \u00a73.1</pre>" in out
    own, _ = section_links.link_sections("<p>as \u00a73.1 says</p>", sections, "", bare=True)
    assert '<a class="section-ref" href="#s3.1">\u00a73.1</a>' in own
