"""MkDocs hook: an option's default, written into a page from the one place it is declared.

A page writes ``<!-- option default: path_offsets -->`` where it states the default of a setting's option; this hook
replaces the marker with the default ``--help`` shows (:data:`poslens.study.part_registry.OPTIONS`: the option's
``show_default``, else its value), so that no page restates a default by hand.
"""

from __future__ import annotations

import re

from mkdocs.exceptions import PluginError

MARKER = re.compile(r"<!-- option default: (\w+) -->")
"""The marker, with the setting's name."""


def shown_default(setting: str) -> str:
    """The default of ``setting``'s option as ``--help`` shows it."""
    from poslens.study.part_registry import OPTIONS

    if setting not in OPTIONS:
        raise PluginError(f"<!-- option default: {setting} -->: no option of a setting {setting!r}")
    option = OPTIONS[setting]
    shown = option.checks.get("show_default")
    return str(shown if isinstance(shown, str) else option.default)


def on_page_markdown(markdown: str, page, config, files) -> str:
    return MARKER.sub(lambda match: shown_default(match.group(1)), markdown)
