"""The metric glossary (docs/glossary.md) names exactly the metrics that poslens's result tables hold.

A tiny random Llama is measured by every producer of rows (a measurement with
the probe, the sink table, a BOS-replacement reduction, the fingerprint, the
architecture comparison and the path-specific tests); the union of their ``metric`` columns must be
the glossary's list, on the page and in :data:`poslens.fit.metric_glossary.GLOSSARY`,
with no entry for a metric nothing emits.
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import pytest

import poslens
from poslens.fit.metric_glossary import _END, _START, GLOSSARY, glossary_markdown, with_glossary

ROOT = Path(__file__).resolve().parents[3]
PAGE = ROOT / "docs" / "glossary.md"
REWRITE = "rewrite it with: .venv/bin/python -m poslens.fit.metric_glossary docs/glossary.md"
HEADING = re.compile(r"^### `([^`]+)` \{#([^}]+)\}$", re.M)


def page_metrics(text: str) -> list[str]:
    """The metric names the page has an entry (a ``### `name` {#name}`` heading) for, in page order."""
    names = []
    for name, anchor in HEADING.findall(text):
        assert name == anchor, f"the entry for {name!r} has the anchor {anchor!r}"
        names.append(name)
    return names


def mismatch(emitted: set[str], documented: list[str]) -> list[str]:
    """What is wrong between the emitted metric names and the page's entries, in words (empty if nothing)."""
    problems = [f"{name!r} is emitted but has no entry on docs/glossary.md" for name in sorted(emitted - set(documented))]
    problems += [f"docs/glossary.md has an entry for {name!r}, which no producer emits" for name in sorted(set(documented) - emitted)]
    problems += [f"docs/glossary.md has {name!r} twice" for name in sorted({n for n in documented if documented.count(n) > 1})]
    return problems


@pytest.fixture(scope="module")
def emitted(tiny_llama_dir) -> dict[str, set[str]]:
    """Metric names per producer, measured on the tiny Llama."""
    from poslens.mechanisms.architectures import Case, compare
    from poslens.mechanisms.effects import reduction
    from poslens.mechanisms.fingerprint import fingerprint
    from poslens.mechanisms.interventions import BosReplacement
    from poslens.mechanisms.sinks import sink_table

    model = poslens.load_model(tiny_llama_dir)
    corpus = poslens.make_corpus(model, "random", n_seqs=8, seq_len=24, seed=0)
    base = poslens.measure(model, corpus, groups=4, early=8, progress=False)  # probe on: every figure of a measurement
    swap = poslens.measure(model, corpus, groups=4, early=8, progress=False, probe=False, interventions=[BosReplacement("zero")])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the random tiny model's BOS check may warn; the rows are what is tested
        prints = fingerprint(model, n_seqs=8, seq_len=12, n_first_tokens=4, groups=4, n_permutations=19, sink_result=base)
    cases = compare(
        [Case(str(tiny_llama_dir), "base", "standard")],
        n_seqs=8,
        seq_len=24,
        groups=4,
        early=8,
        source="random",
        loader=lambda name, variant: model,
        progress=False,
    )
    from poslens.mechanisms.path_tests import path_specific_tests

    path = path_specific_tests(model, corpus, offsets=[8], groups=4, early=8, tau=0.05, baseline=base, progress=False)
    return {
        "path tests": set(path.to_frame()["metric"]),
        "measure": set(base.to_frame()["metric"]),
        "sinks": set(sink_table(base)["metric"]),
        "reduction": set(reduction(base, swap)["metric"]) | set(reduction(base, swap, query_window="all")["metric"]),
        "intervention run": set(swap.to_frame()["metric"]),
        "fingerprint": set(prints.to_frame()["metric"]),
        "compare": set(cases.to_frame()["metric"]),
    }


@pytest.mark.integration  # slow: out of make test-fast, which stays under 2 minutes
def test_every_emitted_metric_has_one_entry_and_every_entry_is_emitted(emitted):
    union = set().union(*emitted.values())
    assert len(union) >= 41 and {"c_res", "probe_r2", "reduction", "sink_heads", "readout_accuracy"} <= union
    assert not mismatch(union, page_metrics(PAGE.read_text(encoding="utf-8"))), "\n".join(mismatch(union, page_metrics(PAGE.read_text())))
    assert not mismatch(union, list(GLOSSARY)), "\n".join(mismatch(union, list(GLOSSARY)))


@pytest.mark.integration  # slow: out of make test-fast, which stays under 2 minutes
def test_the_check_fails_on_a_missing_or_a_stale_entry(emitted):
    """The check above can fail: a metric without an entry, an entry without a metric, and a repeated entry are all named."""
    union = set().union(*emitted.values())
    documented = page_metrics(PAGE.read_text(encoding="utf-8"))
    assert mismatch(union | {"c_new"}, documented) == ["'c_new' is emitted but has no entry on docs/glossary.md"]
    assert mismatch(union - {"c_res"}, documented) == ["docs/glossary.md has an entry for 'c_res', which no producer emits"]
    assert mismatch(union, documented + ["c_res"]) == ["docs/glossary.md has 'c_res' twice"]
    # an entry removed from the page is caught by the page check
    page = PAGE.read_text(encoding="utf-8")
    without = re.sub(r"^### `probe_r2` \{#probe_r2\}$", "### (removed)", page, flags=re.M)
    assert mismatch(union, page_metrics(without)) == ["'probe_r2' is emitted but has no entry on docs/glossary.md"]


def test_the_page_list_is_the_generated_one():
    page = PAGE.read_text(encoding="utf-8")
    assert page.count(_START) == 1 and page.count(_END) == 1
    assert with_glossary(page) == page, f"docs/glossary.md's list is stale: {REWRITE}"
    assert page_metrics(glossary_markdown()) == list(GLOSSARY)


def test_every_entry_is_complete():
    sections = re.compile(r"^methodology §\d+(\.\d+)?(; methodology §\d+(\.\d+)?)*$")
    for name, entry in GLOSSARY.items():
        assert entry.definition and entry.formula and entry.range and entry.sign and entry.rows, name
        assert sections.match(entry.section), f"{name}: cite the methodology page as 'methodology §N', not {entry.section!r}"
        assert "METHOD" not in entry.definition + entry.sign + entry.rows + entry.section, name
        # TeX stays in $...$; an underscore after a non-word character would turn into emphasis without arithmatex
        assert "$" not in entry.formula and not re.search(r"(?<!\w)_", entry.formula), f"{name}: {entry.formula!r}"


def test_the_page_explains_sign_changes_and_negative_held_out_r2():
    page = PAGE.read_text(encoding="utf-8")
    assert "A reduction above 1 means C_res changed sign" in page and "reversed it" in page
    assert "A negative held-out R² means no decodable signal at this size" in page and "worse than their mean" in page
    assert "layer` = −1" in page and "head` = −1" in page
    assert "changed sign" in GLOSSARY["reduction"].sign and "worse than their own mean" in GLOSSARY["probe_r2"].sign


def test_the_glossary_is_in_the_nav_and_linked_from_home():
    assert "- Metric glossary: glossary.md" in (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    assert "](glossary.md)" in (ROOT / "docs" / "index.md").read_text(encoding="utf-8")


def test_the_glossary_page_is_for_users() -> None:
    """What a reader of the glossary sees holds no maintainer instruction (scripts, test files, the venv); comments are not shown."""
    page = (ROOT / "docs" / "glossary.md").read_text(encoding="utf-8")
    shown = re.sub(r"<!--.*?-->", "", page, flags=re.DOTALL)
    found = [m.group(0) for m in re.finditer(r"\.venv|tests/|test_\w+\.py|python -m|\bmake \w", shown)]
    assert not found, f"maintainer instructions on the glossary page: {found}"
    assert "metric_glossary docs/glossary.md" in page  # kept for maintainers, in a comment
