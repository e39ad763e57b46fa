"""The docs' maths is MathML made at build time: no MathJax, no CDN, no raw TeX left.

``docs/_hooks/mathml.py`` converts the ``$...$`` / ``$$...$$`` of Markdown pages
(read by ``pymdownx.arithmatex`` in generic mode) and of notebook Markdown cells
(left by nbconvert) to MathML with ``latex2mathml``, and drops the MathJax and
Mermaid scripts nbconvert would load from a CDN. These tests run the page
through the same Markdown extensions as ``mkdocs.yml`` and then the hook's
rendering function, without a full site build; tests/docs/test_docs.py greps every
page of the strictly built site.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import latex2mathml  # noqa: F401  (the dev extra installs it: a missing renderer fails, never skips)
import markdown
import pymdownx  # noqa: F401
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
HOOKS = ROOT / "docs" / "_hooks"


def _hook():
    sys.path.insert(0, str(HOOKS))
    try:
        import mathml
    finally:
        sys.path.remove(str(HOOKS))
    return mathml


def _markdown_extensions() -> tuple[list[str], dict]:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    names, configs = [], {}
    for ext in config["markdown_extensions"]:
        if isinstance(ext, dict):
            ((name, options),) = ext.items()
            names.append(name)
            configs[name] = options or {}
        else:
            names.append(ext)
    return names, configs


def render_markdown(text: str) -> str:
    """Markdown as the site renders it: mkdocs.yml's extensions, then the math hook."""
    names, configs = _markdown_extensions()
    assert "pymdownx.arithmatex" in names and configs["pymdownx.arithmatex"].get("generic") is True
    html = markdown.Markdown(extensions=names, extension_configs=configs).convert(text)
    out, errors = _hook().render_page(html)
    assert not errors, errors
    return out


def _prose(html: str) -> str:
    """``html`` without code, preformatted text and MathML: what a reader sees as text."""
    return re.sub(r"<(code|pre|math)\b.*?</\1>", "", html, flags=re.DOTALL)


@pytest.fixture(scope="module")
def methodology() -> str:
    return render_markdown((ROOT / "docs" / "methodology.md").read_text(encoding="utf-8"))


def test_methodology_has_no_raw_tex(methodology):
    prose = _prose(methodology)
    assert "arithmatex" not in methodology
    for raw in ("$", "\\(", "\\)", "\\[", "\\]", "\\text", "\\frac", "_{"):
        assert raw not in prose, f"raw TeX {raw!r} left on the methodology page: ...{prose[max(0, prose.find(raw) - 80) : prose.find(raw) + 80]}..."


def test_methodology_key_definitions_are_mathml(methodology):
    maths = re.findall(r"<math\b.*?</math>", methodology, flags=re.DOTALL)
    assert len(maths) > 100
    blocks = [m for m in maths if 'display="block"' in m]
    assert len(blocks) >= 10

    def has(*parts: str) -> bool:
        return any(all(p in m for p in parts) for m in blocks)

    # C_res = ρ_res · L(log a); ρ_mask as a ratio of inner products; L(y) = ‖P(y)‖² / SST(y)
    assert has("<mi>C</mi><mtext>res</mtext>", "<mtext>res</mtext>")
    assert has("<mtext>mask</mtext>", "<mfrac>")
    assert has("<mi>L</mi>", "<mtext>SST</mtext>")
    # the counterfactual's fit and the per-sequence logits s'_ij(n), once mangled by Markdown emphasis
    assert has("<mi>&#x003B2;</mi>", "<mi>g</mi>", "<mi>h</mi>")
    assert has("<msubsup><mi>s</mi>", "&#x02032;")
    assert "<em>ij" not in methodology and "<em>(n)" not in methodology


def test_inline_and_display_maths_and_what_stays_text():
    out = render_markdown(
        "The share $C_\\text{res}$ of $L$; costs \\$5 and $6; `$x$` stays code.\n\n"
        "$$\n\\rho_\\text{mask} = \\frac{\\langle a, b \\rangle}{\\lVert a \\rVert^2}\n$$\n\n"
        "| a | b |\n|---|---|\n| $\\lvert V_i \\rvert$ | x |\n"
    )
    assert out.count("<math") == 4
    assert '<math xmlns="http://www.w3.org/1998/Math/MathML" display="block">' in out
    assert "<code>$x$</code>" in out and "$5 and $6" in out


def test_a_bad_formula_is_reported():
    mathml = _hook()
    for tex, why in (("x^", "MissingSuperScript"), ("\\rhoo_i", "unknown command \\rhoo")):
        html, errors = mathml.render_arithmatex(f'<p><span class="arithmatex">\\({tex}\\)</span></p>')
        assert len(errors) == 1 and "cannot convert" in errors[0] and why in errors[0], errors
        assert "arithmatex" in html  # left as it was, and the build warns (strict: fails)


def test_notebook_page_needs_no_network(tmp_path):
    convert = pytest.importorskip("mkdocs_jupyter.convert")
    nb = {
        "cells": [
            {
                "cell_type": "markdown",
                "id": "md",
                "metadata": {},
                "source": [
                    "Pattern $a'_{ij} = \\operatorname{softmax}_j s_{ij}$ and\n\n",
                    "$$C_\\text{res} = \\rho_\\text{res} \\cdot L(\\log a)$$\n",
                ],
            },
            {
                "cell_type": "code",
                "id": "code",
                "metadata": {},
                "execution_count": 1,
                "source": ["price = '$1 and $2'"],
                "outputs": [{"output_type": "stream", "name": "stdout", "text": ["$x$ stays\n"]}],
            },
        ],
        "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    path = tmp_path / "nb.ipynb"
    path.write_text(json.dumps(nb), encoding="utf-8")
    html = convert.nb2html(str(path), execute=False, custom_mathjax_url="")
    assert "mathjax" in html.lower() and "https://cdn" in html  # what mkdocs-jupyter gives: MathJax and a CDN
    out, errors = _hook().render_page(html, notebook=True)
    assert not errors
    assert "mathjax" not in out.lower() and "https://cdn" not in out and not re.search(r"<script[^>]+src=\"(https?:)?//", out)
    assert '<script src=""' not in out
    assert out.count("<math") == 2 and '<math xmlns="http://www.w3.org/1998/Math/MathML" display="block">' in out
    assert "$x$ stays" in out  # output text is not read as maths


def _external_references(html: str) -> list[str]:
    """External scripts, module imports and MathJax in a built page, ignoring the text of an inlined plotly.js.

    plotly.js, inlined by the notebooks' figures, holds URLs as default settings
    (``topojsonURL``, map icons) that only geographic traces fetch, and names
    MathJax to use it if a page has it; neither loads anything here.
    """
    scripts = re.findall(r"<script\b[^>]*>.*?</script\s*>", html, flags=re.DOTALL | re.IGNORECASE)
    kept = html
    for s in scripts:
        if "plotly.js v" in s[:2000] or "Plotly.newPlot" in s or "window.PlotlyConfig" in s:
            kept = kept.replace(s, "")
    found = re.findall(r"<script[^>]+src=[\"'](?:https?:)?//[^\"']*", kept)
    found += re.findall(r"import\(\s*[\"']https?://[^\"']*", kept)
    found += re.findall(r"https://cdn[^\"'\s]*", kept)
    found += re.findall(r"<link[^>]+href=[\"'](?:https?:)?//[^\"']*", kept)
    found += re.findall(r"mathjax", kept, flags=re.IGNORECASE)
    return found


def test_external_reference_check():
    assert _external_references('<script src="https://cdn.x/y.js"></script>')
    assert _external_references("<script>MathJax.Hub.Config({})</script>")
    assert _external_references('<link rel="stylesheet" href="https://fonts.googleapis.com/css?family=Roboto">')
    assert not _external_references("<script>/*! plotly.js v2 */ var u='https://cdn.plot.ly/un/'</script><p>x</p>")
