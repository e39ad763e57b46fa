"""A griffe extension for the API reference: show a parameter's default as its value, not as the name it is read from.

poslens's defaults live in one place (``poslens.options.DEFAULTS``) and a few
module constants (``DEFAULT_QUERY_WINDOW``), so a signature reads
``groups: int = DEFAULTS.groups``. The API pages would show that name, which
tells a reader nothing; this extension imports the named object and puts its
value in its place (``8``), for every parameter default and attribute value
that names a plain value (a number, a string, a bool, ``None`` or a tuple of
them). Anything else (a call, a class) is left as written.
"""

from __future__ import annotations

import importlib
from typing import Any

import griffe

_PLAIN = (bool, int, float, str, type(None))


def _plain(value: Any) -> bool:
    return isinstance(value, _PLAIN) or (isinstance(value, tuple) and all(isinstance(v, _PLAIN) for v in value))


def resolve(path: str) -> tuple[bool, Any]:
    """``(True, value)`` of the object a dotted path names (``poslens.options.DEFAULTS.groups``), else ``(False, None)``.

    Example:
        >>> resolve("poslens.options.DEFAULTS.groups")
        (True, 8)
        >>> resolve("poslens.options.NOTHING")
        (False, None)
    """
    parts = path.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            value: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        try:
            for name in parts[cut:]:
                value = getattr(value, name)
        except AttributeError:
            return False, None
        return True, value
    return False, None


def value_of(expression: Any) -> str | None:
    """The ``repr`` of the plain value a default expression names, or ``None`` to leave it as written."""
    if not isinstance(expression, griffe.ExprName | griffe.ExprAttribute):
        return None
    path = expression.canonical_path
    if not path.startswith("poslens."):
        return None
    found, value = resolve(path)
    return repr(value) if found and _plain(value) else None


def _walk(obj: griffe.Object) -> Any:
    yield obj
    for member in obj.members.values():
        if not member.is_alias:
            yield from _walk(member)


class DefaultValues(griffe.Extension):
    """Replace defaults that name a plain value by the value, once the package is loaded (dataclass ``__init__`` included)."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        for obj in _walk(pkg):
            if obj.is_function:
                for parameter in obj.parameters:
                    shown = value_of(parameter.default)
                    if shown is not None:
                        parameter.default = shown
            elif obj.is_attribute:
                shown = value_of(obj.value)
                if shown is not None:
                    obj.value = shown
