"""MkDocs hook: TeX maths becomes MathML at build time, so the site needs no network.

- Markdown pages (and docstrings rendered by mkdocstrings) are read with
  ``pymdownx.arithmatex`` in generic mode, which keeps ``$...$`` and
  ``$$...$$`` away from the rest of Markdown (so ``s'_{ij}`` is not read as
  emphasis) and leaves ``<span class="arithmatex">\\(...\\)</span>`` and
  ``<div class="arithmatex">\\[...\\]</div>``; :func:`render_arithmatex` turns
  those into ``<math>`` elements with ``latex2mathml`` (pure Python).
- Notebook pages (mkdocs-jupyter, through nbconvert) leave ``$...$`` and
  ``$$...$$`` in the text of their Markdown cells for MathJax, and load MathJax
  and Mermaid from a CDN. :func:`render_notebook` converts the maths of the
  Markdown cells the same way and removes those two scripts.

MathML Core is rendered by current Chromium, Firefox and Safari with no script.
A formula ``latex2mathml`` cannot convert is left as TeX and is a warning and,
in a ``--strict`` build, an error at the end of the build (raised by the hook
itself: ``mkdocs build --strict -q`` does not count warnings).
"""

from __future__ import annotations

import html as _html
import logging
import re

from html_text import map_text
from latex2mathml.converter import convert
from mkdocs.exceptions import PluginError

log = logging.getLogger("mkdocs.hooks.mathml")

_ARITHMATEX = re.compile(
    r'<span class="arithmatex">\\\((?P<inline>.*?)\\\)</span>'
    r'|<div class="arithmatex">\\\[(?P<block>.*?)\\\]</div>',
    re.DOTALL,
)
# nbconvert's Markdown cells: $$...$$ (display), then $...$ (inline; not "\$", no space just inside)
_DOLLARS = re.compile(
    r"(?<![\\$])\$\$(?P<block>.+?)(?<!\\)\$\$"
    r"|(?<![\\$])\$(?P<inline>[^\s$](?:[^$]*?[^\s\\$])?)\$(?![$0-9])",
    re.DOTALL,
)
# the script blocks nbconvert's templates add to a notebook page (MathJax, Mermaid), both from a CDN
_MATHJAX = re.compile(r"<!-- Load mathjax -->.*?<!-- End of mathjax configuration -->", re.DOTALL)
_SCRIPT = re.compile(r"<script\b[^>]*>.*?</script\s*>", re.DOTALL | re.IGNORECASE)

NOTEBOOK_MARKDOWN = frozenset({"jp-RenderedMarkdown", "jp-MarkdownOutput"})
"""Classes of the elements that hold a notebook's rendered Markdown cells."""


class MathError(ValueError):
    """A formula that could not be converted."""


def tex_to_mathml(tex: str, display: bool = False) -> str:
    """One TeX formula (without its delimiters) as a MathML ``<math>`` element.

    Example:
        >>> tex_to_mathml(r"C_\\text{res}")[:5]
        '<math'
    """
    try:
        out = convert(tex.strip(), display="block" if display else "inline")
    except Exception as e:  # latex2mathml raises its own errors and, on some input, IndexError
        raise MathError(f"cannot convert {tex!r} to MathML: {type(e).__name__} {e}") from e
    unknown = re.findall(r">(\\[A-Za-z]+)<", out)  # latex2mathml passes a command it does not know through as text
    if unknown:
        raise MathError(f"cannot convert {tex!r} to MathML: unknown command {', '.join(sorted(set(unknown)))}")
    return out


def _replace(m: re.Match[str], errors: list[str]) -> str:
    display = m.group("block") is not None
    tex = _html.unescape(m.group("block") if display else m.group("inline"))
    try:
        return tex_to_mathml(tex, display)
    except MathError as e:
        errors.append(str(e))
        return m.group(0)


def render_arithmatex(html: str) -> tuple[str, list[str]]:
    """``html`` with arithmatex's generic output converted to MathML, and the errors met."""
    errors: list[str] = []
    return _ARITHMATEX.sub(lambda m: _replace(m, errors), html), errors


def render_dollars(html: str, only_classes: frozenset[str] | None = NOTEBOOK_MARKDOWN) -> tuple[str, list[str]]:
    """``html`` with ``$$...$$`` and ``$...$`` in its text converted to MathML, and the errors met.

    Only text inside an element with one of ``only_classes`` (by default a
    notebook's Markdown cells; ``None``: anywhere) and outside code, links and
    scripts is read. A formula does not span an element: nbconvert leaves the
    TeX of a formula as one run of text.
    """
    errors: list[str] = []
    out = map_text(html, lambda text: _DOLLARS.sub(lambda m: _replace(m, errors), text), only_classes=only_classes)
    return out, errors


def strip_cdn_scripts(html: str) -> str:
    """``html`` without nbconvert's MathJax block and its Mermaid loader, the scripts it takes from a CDN."""
    html = _MATHJAX.sub("", html)
    return _SCRIPT.sub(lambda m: "" if "mermaid.esm.min.mjs" in m.group(0) or re.match(r'<script\s+src=""', m.group(0)) else m.group(0), html)


def render_notebook(html: str) -> tuple[str, list[str]]:
    """A notebook page's HTML with its Markdown cells' maths as MathML and no CDN scripts."""
    html, errors = render_dollars(strip_cdn_scripts(html))
    more_html, more = render_arithmatex(html)
    return more_html, errors + more


def render_page(html: str, notebook: bool = False) -> tuple[str, list[str]]:
    """The rendering the hook applies to one page's content HTML: its HTML and the errors met."""
    return render_notebook(html) if notebook else render_arithmatex(html)


_errors: list[str] = []


def on_pre_build(config):
    _errors.clear()


def on_page_content(html, page, config, files):
    html, errors = render_page(html, notebook=page.file.src_uri.endswith(".ipynb"))
    for e in errors:
        log.warning(f"{page.file.src_uri}: {e}")
        _errors.append(f"{page.file.src_uri}: {e}")
    return html


def on_post_build(config):
    if config["strict"] and _errors:
        raise PluginError("mathml: formulas that could not be converted:\n" + "\n".join(_errors))
