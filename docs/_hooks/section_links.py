"""MkDocs hook: "methodology §4.4" in a page's text becomes a link to that section.

The methodology page (``docs/methodology.md``) numbers its sections and gives
each numbered heading an explicit anchor, ``{#s4.4}``. Code, docstrings and the
other pages cite them as "methodology §4.4"; this hook turns each such citation,
wherever it stands in prose (Markdown pages, notebooks, docstrings rendered by
mkdocstrings; never inside code, preformatted text or an existing link), into
a link to ``methodology/#s4.4``. On the methodology page itself a bare "§4.4"
is linked too. A citation of a section the page does not have is a warning and,
in a ``--strict`` build, an error at the end of the build (raised by the hook
itself: ``mkdocs build --strict -q`` does not count warnings). ``tests/docs/test_section_refs.py`` checks the
same thing on the sources.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

from html_text import map_text
from mkdocs.exceptions import PluginError
from mkdocs.utils import get_relative_url

log = logging.getLogger("mkdocs.hooks.section_links")

PAGE = "methodology.md"
"""The page that holds the numbered sections, relative to ``docs_dir``."""

ANCHOR = re.compile(r"\{[^}\n]*#s(\d+(?:\.\d+)*)[^}\n]*\}")
"""An attr_list anchor of a numbered section heading, ``{#s4.4}``."""

_SECT = r"(?:§|&sect;|&#167;|&#xa7;)"
CITED = re.compile(r"\bmethodology(?:\s|&nbsp;)+" + _SECT + r"\s*(\d+(?:\.\d+)*)", re.IGNORECASE)
"""A citation in prose: "methodology §4.4" (the number: group 1)."""
BARE = re.compile(_SECT + r"\s*(\d+(?:\.\d+)*)")
"""A bare "§4.4", linked only on the methodology page itself."""

_state: dict[str, object] = {"sections": frozenset(), "url": None, "missing": []}


def sections_of(markdown: str) -> frozenset[str]:
    """The section numbers that have an explicit anchor on a page (``"4.4"`` for ``{#s4.4}``)."""
    return frozenset(m.group(1) for m in ANCHOR.finditer(markdown))


def link_sections(html: str, sections: frozenset[str], href: str, bare: bool = False) -> tuple[str, list[str]]:
    """``html`` with every citation of a section linked to ``href#sN``, and the numbers that have no section.

    ``href`` is the methodology page's URL relative to the page being rendered
    (``""`` on that page itself). With ``bare``, a "§N" without the word
    "methodology" is linked as well.
    """
    missing: list[str] = []
    pattern = BARE if bare else CITED

    def link(m: re.Match[str]) -> str:
        number = m.group(1)
        if number not in sections:
            missing.append(number)
            return m.group(0)
        return f'<a class="section-ref" href="{href}#s{number}">{m.group(0)}</a>'

    return map_text(html, lambda text: pattern.sub(link, text)), missing


def on_files(files, config):
    source = Path(config["docs_dir"]) / PAGE
    _state["sections"] = sections_of(source.read_text(encoding="utf-8")) if source.exists() else frozenset()
    page = files.get_file_from_path(PAGE)
    _state["url"] = page.url if page is not None else None
    _state["missing"] = []
    return files


def on_page_content(html, page, config, files):
    url = _state["url"]
    if url is None:
        return html
    own = page.file.src_uri == PAGE
    href = "" if own else get_relative_url(url, page.url)
    html, missing = link_sections(html, _state["sections"], href, bare=own)
    for number in sorted(set(missing), key=lambda n: [int(k) for k in n.split(".")]):
        message = f"{page.file.src_uri}: cites methodology §{number}, which {PAGE} does not have (no {{#s{number}}} heading)"
        log.warning(message)
        _state["missing"].append(message)
    return html


def on_post_build(config):
    if config["strict"] and _state["missing"]:
        raise PluginError("section_links: citations of sections that do not exist:\n" + "\n".join(_state["missing"]))
