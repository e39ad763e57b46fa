"""A page states an option's default through a marker that docs/_hooks/option_defaults.py fills from the registry."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from poslens.options import DEFAULTS, PATH_OFFSETS_SHOWN

ROOT = Path(__file__).resolve().parents[2]


def _hook():
    spec = importlib.util.spec_from_file_location("option_defaults", ROOT / "docs" / "_hooks" / "option_defaults.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_marker_becomes_the_default_help_shows():
    hook = _hook()
    page = "by default `--offsets <!-- option default: path_offsets -->`, τ = <!-- option default: tau -->"
    assert hook.on_page_markdown(page, None, None, None) == f"by default `--offsets {PATH_OFFSETS_SHOWN}`, τ = {DEFAULTS.tau}"


def test_the_methodology_reads_the_offsets_default_from_the_registry():
    text = (ROOT / "docs" / "methodology.md").read_text(encoding="utf-8")
    assert "<!-- option default: path_offsets -->" in text
    assert "report $D = 8$, 64" not in text  # the default is not written by hand
