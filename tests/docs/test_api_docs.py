"""The API reference links what the docstrings name, and names nothing that does not exist.

Docstrings name other objects with Sphinx roles (``:func:`measure```), which read
well in ``help()``; docs/_ext/sphinx_roles.py rewrites them into mkdocstrings
cross-references when the site is built. These tests load the package with griffe
and that extension, as mkdocstrings does, without building the site
(tests/docs/test_docs.py builds it): no raw role may be left in any docstring, every
role must resolve, and every link must reach an object the API pages render.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import re
import sys
from pathlib import Path

import griffe
import pytest

import poslens
import poslens.measurement.result  # noqa: F401 (poslens imports its modules on first use; the test reads this one)

ROOT = Path(__file__).resolve().parents[2]
#: Any leftover role, including ones the extension does not know (``:ref:``, ``:py:obj:``).
RAW_ROLE = re.compile(r":(?:py:)?[a-z]+:`")


def _extension_module():
    spec = importlib.util.spec_from_file_location("sphinx_roles", ROOT / "docs" / "_ext" / "sphinx_roles.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("sphinx_roles", module)
    spec.loader.exec_module(module)
    return module


sphinx_roles = _extension_module()


def _load(package: str, search_paths: list[str]) -> tuple[griffe.Module, object]:
    extension = sphinx_roles.SphinxRoles()
    pkg = griffe.load(package, search_paths=search_paths, extensions=griffe.load_extensions(extension), docstring_parser="google")
    return pkg, extension


@pytest.fixture(scope="module")
def loaded():
    return _load("poslens", [str(ROOT)])


def _objects(obj):
    yield obj
    for member in obj.members.values():
        if not member.is_alias:
            yield from _objects(member)


def _documented_pages() -> set[str]:
    """The identifiers the API pages render (``::: poslens.fit.sums``)."""
    found = set()
    for page in (ROOT / "docs" / "api").rglob("*.md"):
        found |= set(re.findall(r"^:::\s*(\S+)", page.read_text(), flags=re.MULTILINE))
    return found


def test_no_raw_role_is_left(loaded) -> None:
    pkg, _ = loaded
    left = [
        f"{obj.path}: {match.group(0)}…" for obj in _objects(pkg) if obj.docstring is not None for match in RAW_ROLE.finditer(obj.docstring.value)
    ]
    assert not left, "Sphinx roles the API pages would show raw:\n" + "\n".join(left)


def test_every_reference_resolves(loaded) -> None:
    _, extension = loaded
    assert len(extension.references) > 100  # the docstrings do use roles: the rewrite ran
    bad = [f"{ref.where}: :{ref.role}:`{ref.written}`" for ref in extension.unresolved]
    assert not bad, "roles that name no object:\n" + "\n".join(bad)


def test_links_reach_rendered_objects(loaded) -> None:
    """Each link's target exists, is public, has a docstring, and is on an API page."""
    pkg, extension = loaded
    collection = pkg.modules_collection
    pages = _documented_pages()
    bad = []
    links = [ref for ref in extension.references if ref.link is not None]
    assert links
    for ref in links:
        obj = collection.get_member(ref.link)
        if obj is None:
            bad.append(f"{ref.where}: {ref.link} does not exist")
            continue
        if obj.is_alias:
            bad.append(f"{ref.where}: {ref.link} is a re-export, not where the object is documented")
            continue
        if sphinx_roles._private(ref.link):
            bad.append(f"{ref.where}: {ref.link} is private")
        if not obj.is_module and not obj.docstring:
            bad.append(f"{ref.where}: {ref.link} has no docstring, so no API page shows it")
        if not any(ref.link == page or ref.link.startswith(page + ".") for page in pages):
            bad.append(f"{ref.where}: {ref.link} is in a module without an API page")
    assert not bad, "links that would not reach an object on the site:\n" + "\n".join(bad)


def test_other_projects_objects_exist(loaded) -> None:
    """A role naming another project's object is shown as code; it must still name a real object."""
    _, extension = loaded
    bad = []
    for ref in extension.references:
        if not ref.external:
            continue
        module, _, attribute = ref.target.rpartition(".")
        try:
            getattr(importlib.import_module(module), attribute)
        except (ImportError, AttributeError):
            bad.append(f"{ref.where}: {ref.target}")
    assert not bad, "roles naming objects that do not exist:\n" + "\n".join(bad)


def test_help_keeps_the_roles() -> None:
    """The rewrite is for the site only: ``help()`` reads the docstrings as written."""
    assert ":func:`" in (poslens.measurement.result.Result.__doc__ or "") + (poslens.load_model.__doc__ or "") + (
        sys.modules["poslens.model.pos_model"].__doc__ or ""
    )


BAD_PACKAGE = {
    "__init__.py": '"""A package; :func:`helper.run` and :class:`~mini.helper.Box` are its API."""\nfrom mini.helper import Box\n',
    "helper.py": '''"""Helpers."""

import pathlib


class Box:
    """A box; :meth:`open` opens it, :class:`pathlib.Path` is where, and :func:`nowhere` does not exist."""

    def open(self) -> None:
        """Open; see :class:`Box` and :attr:`size`, which is not there, and :func:`_private`."""


#: How many boxes fit.
LIMIT = 3


def run() -> None:
    """Run :class:`Box` (re-exported as :class:`mini.Box`) up to :data:`LIMIT` times."""


def _private() -> None:
    """Private."""
''',
}


def test_bad_references_are_reported(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A role that resolves nowhere is reported (a warning, which fails ``mkdocs build --strict``), never dropped."""
    (tmp_path / "mini").mkdir()
    for name, text in BAD_PACKAGE.items():
        (tmp_path / "mini" / name).write_text(text)
    with caplog.at_level(logging.WARNING):
        pkg, extension = _load("mini", [str(tmp_path)])
    assert sorted(ref.written for ref in extension.unresolved) == ["nowhere", "size"]
    assert "nowhere" in caplog.text and "size" in caplog.text
    box = pkg["helper.Box"]
    assert "[`open`][mini.helper.Box.open]" in box.docstring.value
    assert "`pathlib.Path`" in box.docstring.value and "][pathlib" not in box.docstring.value
    assert "[`nowhere`][nowhere]" in box.docstring.value  # left as a link, so autorefs reports it too
    assert "[`Box`][mini.helper.Box]" in pkg["helper.Box.open"].docstring.value
    assert "`_private`" in pkg["helper.Box.open"].docstring.value and "][mini.helper._private]" not in pkg["helper.Box.open"].docstring.value
    assert "[`helper.run`][mini.helper.run]" in pkg.docstring.value  # relative to the package
    assert "[`Box`][mini.helper.Box]" in pkg.docstring.value  # ~ shows the last component
    assert "[`mini.Box`][mini.helper.Box]" in pkg["helper.run"].docstring.value  # a re-export links to the definition
    assert pkg["helper.LIMIT"].docstring.value == "How many boxes fit."  # a #: comment is the attribute's docstring
    assert "[`LIMIT`][mini.helper.LIMIT]" in pkg["helper.run"].docstring.value


def test_defaults_show_values_not_names() -> None:
    """The API pages show ``groups: int = 8``, not ``= DEFAULTS.groups`` (docs/_ext/default_values.py)."""
    from poslens.options import DEFAULTS

    spec = importlib.util.spec_from_file_location("default_values", ROOT / "docs" / "_ext" / "default_values.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    pkg = griffe.load("poslens", search_paths=[str(ROOT)], extensions=griffe.load_extensions(module.DefaultValues()), docstring_parser="google")
    shown = {p.name: str(p.default) for p in pkg["measurement.pipeline.measure"].parameters}
    assert (shown["early"], shown["batch_size"]) == (repr(DEFAULTS.early), repr(DEFAULTS.batch_size))
    assert shown["groups"] == "None"  # chosen from the corpus's size (poslens.fit.groups.default_groups)
    assert str(pkg["mechanisms.fingerprint.fingerprint"].parameters["groups"].default) == repr(DEFAULTS.groups)
    assert str(pkg["mechanisms.effects.reduction"].parameters["query_window"].default) == "'early'"  # DEFAULT_QUERY_WINDOW
    named = [
        f"{obj.path}({p.name}={p.default})"
        for obj in _objects(pkg)
        if obj.is_function
        for p in obj.parameters
        if re.match(r"^[A-Za-z_]*DEFAULT", str(p.default or ""))
    ]
    assert not named, "defaults still shown by name:\n" + "\n".join(named)
