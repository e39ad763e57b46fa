"""The Jinja2 templates of poslens's HTML: a Result's notebook display and the study report, rendered one way.

The templates live in ``poslens/measurement/templates`` (the lowest layer that
renders HTML, so the study report above it reads the same files):
``result.html`` (:func:`poslens.measurement.display.result_html`),
``report.html`` and ``claims.html`` (:mod:`poslens.study.report`), and
``tables.html``, the table macros they share. Autoescaping is on in every
template: only values marked ``Markup`` by the caller go in unescaped.
"""

from __future__ import annotations

import jinja2


def page_templates() -> jinja2.Environment:
    """A Jinja2 environment on poslens's templates: autoescaped, strict about missing values, block lines trimmed.

    Each caller gets its own environment, so the filters one adds (the
    report's ``code``) stay its own.

    Returns:
        The environment; ``get_template(name)`` reads ``poslens/measurement/templates/<name>``.

    Example:
        >>> page = page_templates().from_string('{% from "tables.html" import cells %}<tr>{{ cells("td", ["<a>", 1]) }}</tr>')
        >>> page.render()
        '<tr><td>&lt;a&gt;</td><td>1</td></tr>'
    """
    return jinja2.Environment(
        loader=jinja2.PackageLoader("poslens.measurement", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
