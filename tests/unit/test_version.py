"""The version and the file formats agree everywhere: poslens/version.py, pyproject.toml and CHANGELOG.md.

A change to the sums or table format bumps its number in poslens/version.py,
the minor version, and gets a CHANGELOG entry (CONTRIBUTING.md, "Formats and
versions"); these checks fail when one of the three is forgotten.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from poslens.version import FORMAT_INTRODUCED, SUMS_FORMAT, TABLE_FORMAT, __version__, newer_format_message

ROOT = Path(__file__).resolve().parents[2]
CHANGELOG = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")


def changelog_entry(version: str) -> str:
    """The text of the CHANGELOG's section for ``version`` (from its ``## [version]`` heading to the next one)."""
    match = re.search(rf"^## \[{re.escape(version)}\][^\n]*\n(.*?)(?=^## \[|\Z)", CHANGELOG, flags=re.M | re.S)
    assert match, f"CHANGELOG.md has no '## [{version}]' section"
    return match.group(1)


def test_pyproject_has_the_packages_version():
    stated = re.search(r'^version = "([^"]+)"', (ROOT / "pyproject.toml").read_text(encoding="utf-8"), flags=re.M).group(1)
    assert stated == __version__, f"pyproject.toml says {stated}, poslens/version.py {__version__}: bump both"


def test_the_changelog_has_the_version_and_its_formats():
    entry = changelog_entry(__version__)
    assert CHANGELOG.index(f"## [{__version__}]") == CHANGELOG.index("## ["), "the current version's entry comes first"
    # a format introduced by this version is named in its entry
    for kind, current in (("sums", SUMS_FORMAT), ("table", TABLE_FORMAT)):
        if FORMAT_INTRODUCED[kind][current] == __version__:
            assert re.search(rf"{kind} format {current}\b", entry, flags=re.I), f"the {__version__} entry does not name {kind} format {current}"


def test_every_format_names_the_version_that_introduced_it():
    for kind, current in (("sums", SUMS_FORMAT), ("table", TABLE_FORMAT)):
        assert sorted(FORMAT_INTRODUCED[kind]) == list(range(1, current + 1)), kind
        for version in FORMAT_INTRODUCED[kind].values():
            changelog_entry(version)  # each version that introduced a format has an entry


def test_a_newer_format_is_refused_naming_both_versions():
    assert newer_format_message("sums", SUMS_FORMAT) is None and newer_format_message("table", 1) is None
    message = newer_format_message("sums", SUMS_FORMAT + 1, written_by="9.9.9")
    assert f"sums format {SUMS_FORMAT + 1}" in message and "9.9.9" in message
    assert f"poslens {__version__}" in message and f"sums format {SUMS_FORMAT})" in message
    with pytest.raises(ValueError, match="kind must be 'sums' or 'table'"):
        newer_format_message("npz", 1)


def _saved_table(folder: Path) -> Path:
    import pandas as pd

    from poslens.measurement.result_files import write_result

    row = dict(
        model="m", variant="base", intervention="none", layer=0, head=-1, query_window="all", metric="c_res", value=0.1, ci_low=0.0, ci_high=0.2
    )
    return write_result(folder / "t.parquet", pd.DataFrame([row]), {"seed": 0}, None, csv=False)


def test_a_saved_table_records_its_format_and_an_older_one_still_reads(tmp_path):
    import pyarrow.parquet as pq

    from poslens.measurement.result_files import TABLE_FORMAT_KEY, VERSION_KEY, read_result

    path = _saved_table(tmp_path)
    meta = pq.read_table(path).schema.metadata
    assert int(meta[TABLE_FORMAT_KEY]) == TABLE_FORMAT and meta[VERSION_KEY].decode() == __version__
    # a table of 0.1.0 carries neither key: it is format 1 and reads
    table = pq.read_table(path)
    old = {k: v for k, v in meta.items() if k not in (TABLE_FORMAT_KEY, VERSION_KEY)}
    pq.write_table(table.replace_schema_metadata(old), path)
    assert read_result(path, sums=False)[0]["value"].tolist() == [0.1]


def test_a_table_of_a_newer_format_is_refused_naming_both_versions(tmp_path):
    import pyarrow.parquet as pq

    from poslens.errors import InputError
    from poslens.measurement.result_files import TABLE_FORMAT_KEY, VERSION_KEY, read_result

    path = _saved_table(tmp_path)
    table = pq.read_table(path)
    meta = dict(table.schema.metadata)
    meta[TABLE_FORMAT_KEY], meta[VERSION_KEY] = str(TABLE_FORMAT + 1).encode(), b"9.9.9"
    pq.write_table(table.replace_schema_metadata(meta), path)
    with pytest.raises(InputError, match=rf"table format {TABLE_FORMAT + 1} \(written by poslens 9\.9\.9\).*this poslens {re.escape(__version__)}"):
        read_result(path, sums=False)
