"""package_version: the version of the distribution installed beside the imported files, found without reading every installed distribution."""

from __future__ import annotations

import importlib.metadata
import types
from pathlib import Path

import pytest

from poslens.measurement import provenance
from poslens.measurement.provenance import package_version


@pytest.fixture(autouse=True)
def _fresh_cache():
    provenance._installed_version.cache_clear()
    yield
    provenance._installed_version.cache_clear()


def _install(site: Path, top: str, dist_name: str, version: str) -> types.ModuleType:
    """A package ``top`` without ``__version__``, with the metadata of distribution ``dist_name`` beside it, as pip leaves them."""
    (site / top).mkdir(parents=True)
    (site / top / "__init__.py").write_text("")
    info = site / f"{dist_name.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist_name}\nVersion: {version}\n")
    (info / "top_level.txt").write_text(f"{top}\n")
    (info / "RECORD").write_text(f"{top}/__init__.py,,\n")
    module = types.ModuleType(top)
    module.__file__ = str(site / top / "__init__.py")
    return module


def test_the_version_is_the_one_installed_beside_the_imported_files(tmp_path, monkeypatch):
    first = _install(tmp_path / "a", "toppkg", "toppkg", "1.2.3")
    second = _install(tmp_path / "b", "toppkg", "toppkg", "2.0.0")
    monkeypatch.syspath_prepend(str(tmp_path / "b"))
    assert package_version(first) == "1.2.3"
    assert package_version(second) == "2.0.0"


def test_a_distribution_named_like_its_package_is_found_without_reading_every_distribution(tmp_path, monkeypatch):
    module = _install(tmp_path, "like_named", "like-named", "3.1.4")

    def every_distribution():
        raise AssertionError("packages_distributions read every installed distribution")

    monkeypatch.setattr(importlib.metadata, "packages_distributions", every_distribution)
    assert package_version(module) == "3.1.4"


def test_a_distribution_named_otherwise_is_found_through_its_top_level_names(tmp_path, monkeypatch):
    module = _install(tmp_path, "shortpkg", "Other-Name", "4.5.6")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert package_version(module) == "4.5.6"


def test_a_like_named_distribution_that_provides_another_package_is_not_taken(tmp_path, monkeypatch):
    """As ``attr`` (provided by ``attrs``) beside a distribution called ``attr``: the provider's version, not the namesake's."""
    module = _install(tmp_path, "sharedname", "Provider-Dist", "1.0.0")
    namesake = tmp_path / "sharedname-9.9.9.dist-info"
    namesake.mkdir()
    (namesake / "METADATA").write_text("Metadata-Version: 2.1\nName: sharedname\nVersion: 9.9.9\n")
    (namesake / "RECORD").write_text("other_module/__init__.py,,\n")  # no top_level.txt: its files say what it installs
    monkeypatch.syspath_prepend(str(tmp_path))
    assert package_version(module) == "1.0.0"


def test_a_package_without_metadata_has_version_question_mark(tmp_path):
    (tmp_path / "bare").mkdir()
    module = types.ModuleType("bare")
    module.__file__ = str(tmp_path / "bare" / "__init__.py")
    assert package_version(module) == "?"


def test_a_module_with_dunder_version_gives_it():
    module = types.ModuleType("versioned")
    module.__version__ = "9.9"
    assert package_version(module) == "9.9"


def test_transformer_lens_is_looked_up_once_per_process(monkeypatch):
    import transformer_lens

    first = package_version(transformer_lens)
    assert first != "?"
    monkeypatch.setattr(importlib.metadata, "distributions", lambda **_: (_ for _ in ()).throw(AssertionError("looked up again")))
    assert package_version(transformer_lens) == first
