"""A griffe extension for the API reference: read ``Example:`` as an examples section.

poslens docstrings head their doctests with ``Example:``. Google-style parsing
treats a singular ``Example:`` as an admonition whose body is Markdown, so
``>>> x["a"][0]`` would be read as a reference link. Renaming the heading to
``Examples:`` before parsing makes griffe render the doctests as code.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_HEADING = re.compile(r"^(\s*)Example:\s*$", re.MULTILINE)


class ExampleSections(griffe.Extension):
    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = _HEADING.sub(r"\1Examples:", obj.docstring.value)
