"""A griffe extension for the API reference: turn Sphinx roles into cross-reference links.

poslens docstrings name other objects with Sphinx roles, ``:class:`~poslens.model.loading.PosModel```,
``:func:`measure```, ``:meth:`Result.select```, which read well in ``help()``. Markdown
does not know them, so without this extension the site would show them raw. At
docs-build time each role is rewritten into a mkdocstrings cross-reference,
``[`PosModel`][poslens.model.loading.PosModel]``, which autorefs turns into a link.

A short name is resolved the way Python would see it from the docstring: first
the object's own members (a method named in its class's docstring), then the
enclosing class and module, with the module's imports. A re-export
(``poslens.load_model``) links to where the object is defined, which is where its
API page documents it. ``~`` shows only the last component, as in Sphinx.

A name that resolves outside poslens (``:class:`filelock.FileLock```), or to a private
object (``:func:`_helper```), is shown as code without a link: the site has no
inventory of other projects, and the API pages leave private objects out. A link
to an attribute without a docstring (a dataclass field, described in its class's
``Attributes:`` section) goes to its class. A name that resolves nowhere is
reported as a griffe warning and left as a link to the written name, which
autorefs reports too; it never silently vanishes. Both warnings fail
``mkdocs build --strict``, but only when warnings are logged: ``-q`` (log level
ERROR) hides them. tests/docs/test_api_docs.py runs this rewrite over every docstring.

The extension also reads Sphinx's other convention, a ``#:`` comment above a
module constant or class attribute (``#: Share of the free memory ...``), as that
attribute's docstring, so the constants the docstrings name have an entry to link to.
"""

from __future__ import annotations

import importlib.util
import re
from dataclasses import dataclass
from typing import Any

import griffe

#: A Sphinx role: ``:class:`X```, ``:py:func:`~a.b```, ``:meth:`title <a.B.c>```.
ROLE = re.compile(r":(?:py:)?(?P<role>class|func|meth|mod|data|attr|exc|obj|const|type):`(?P<body>[^`]+)`")
_TITLED = re.compile(r"^(?P<title>.*?)\s*<(?P<target>[^<>]+)>$")


@dataclass
class Reference:
    """One role found in a docstring, and where it points."""

    where: str  #: the path of the object whose docstring holds the role
    role: str
    written: str  #: the target as written, without ``~`` or ``!``
    target: str | None  #: the canonical path, or None when it does not resolve
    external: bool = False  #: resolves outside the loaded packages: shown as code, not linked
    link: str | None = None  #: the identifier the link goes to (None: shown as code, or unresolved)


def _member(obj: griffe.Object | griffe.Alias, name: str) -> griffe.Object | griffe.Alias | None:
    if name in obj.members:
        return obj.members[name]
    if getattr(obj, "is_class", False):
        try:
            return obj.all_members.get(name)  # inherited members
        except Exception:  # noqa: BLE001 - unresolvable bases: no inherited members
            return None
    return None


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _lookup(collection: griffe.ModulesCollection, path: str, depth: int = 0) -> tuple[str | None, bool]:
    """Return (canonical path, external) for a dotted path; (None, False) when it does not exist."""
    parts = path.split(".")
    if parts[0] not in collection.members:  # another project's object, if that project exists
        return (path, True) if len(parts) > 1 and _importable(parts[0]) else (None, False)
    if depth > 20:
        return None, False
    obj: griffe.Object | griffe.Alias = collection.members[parts[0]]
    for i, part in enumerate(parts[1:], start=1):
        if obj.is_alias:  # a re-export or an import: continue from where it points
            target, external = _lookup(collection, obj.target_path, depth + 1)
            rest = ".".join(parts[i:])
            if target is None:
                return None, False
            if external:
                return f"{target}.{rest}", True
            return _lookup(collection, f"{target}.{rest}", depth + 1)
        nxt = _member(obj, part)
        if nxt is None:
            return None, False
        obj = nxt
    if obj.is_alias:
        return _lookup(collection, obj.target_path, depth + 1)
    return obj.path, False


def resolve(obj: griffe.Object, written: str, collection: griffe.ModulesCollection) -> tuple[str | None, bool]:
    """Resolve ``written`` as seen from ``obj``'s docstring: (canonical path or None, external)."""
    head, _, rest = written.partition(".")
    candidates = []
    try:
        base = obj.resolve(head)
        candidates.append(base + ("." + rest if rest else ""))
    except griffe.NameResolutionError:
        pass
    candidates.append(written)
    for candidate in candidates:
        path, external = _lookup(collection, candidate)
        if path is not None:
            return path, external
    return None, False


def _private(path: str) -> bool:
    """Whether a path names a private object, which the API pages do not render (so no link can reach it)."""
    return any(part.startswith("_") and not part.endswith("__") for part in path.split("."))


def _rendered(collection: griffe.ModulesCollection, path: str) -> str:
    """Where a link to ``path`` lands: the object, or for an undocumented attribute its class.

    The API pages leave out members without a docstring; a dataclass field is
    described in its class's ``Attributes:`` section instead, so the link goes there.
    """
    obj = collection.get_member(path)
    if obj is not None and obj.is_attribute and not obj.docstring and obj.parent is not None and obj.parent.is_class:
        return obj.parent.path
    return path


def rewrite(obj: griffe.Object, text: str, collection: griffe.ModulesCollection, found: list[Reference]) -> str:
    """Return ``text`` with every role replaced by a cross-reference; append each to ``found``."""

    def replace(match: re.Match[str]) -> str:
        body = match["body"].strip()
        titled = _TITLED.match(body)
        title = titled["title"] if titled else None
        written = (titled["target"] if titled else body).strip()
        short = written.startswith("~")
        written = written.lstrip("~!").removesuffix("()")
        shown = title or (written.rsplit(".", 1)[-1] if short else written)
        target, external = resolve(obj, written, collection)
        ref = Reference(obj.path, match["role"], written, target, external)
        found.append(ref)
        if target is None:
            griffe.logger.warning(f"{obj.path}: :{match['role']}:`{match['body']}` does not resolve to any object")
            return f"[`{shown}`][{written}]"
        if external or _private(target):
            return f"`{shown}`"
        ref.link = _rendered(collection, target)
        return f"[`{shown}`][{ref.link}]"

    return ROLE.sub(replace, text)


def _objects(obj: griffe.Object) -> Any:
    yield obj
    for member in obj.members.values():
        if not member.is_alias:
            yield from _objects(member)


class SphinxRoles(griffe.Extension):
    """Rewrite Sphinx roles in every docstring of a loaded package into autorefs links."""

    def __init__(self) -> None:
        super().__init__()
        self.references: list[Reference] = []

    def on_attribute_instance(self, *, node: Any, attr: griffe.Attribute, agent: Any, **kwargs: Any) -> None:
        """Read a Sphinx ``#:`` comment above an attribute (or after it, on its line) as its docstring."""
        if attr.docstring is not None or not isinstance(agent, griffe.Visitor) or not attr.lineno:
            return
        lines = agent.code.splitlines()
        above = []
        for line in reversed(lines[: attr.lineno - 1]):
            if not line.strip().startswith("#:"):
                break
            above.insert(0, line.strip()[2:].strip())
        same = re.search(r"#:\s*(.*)$", lines[attr.lineno - 1]) if attr.lineno <= len(lines) else None
        text = "\n".join(above) if above else (same[1] if same else "")
        if text:
            attr.docstring = griffe.Docstring(
                text,
                lineno=attr.lineno,
                endlineno=attr.lineno,
                parent=attr,
                parser=agent.docstring_parser,
                parser_options=agent.docstring_options,
            )

    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        """Rewrite the roles once the whole package is loaded, when every name can be resolved."""
        for obj in _objects(pkg):
            if obj.docstring is not None and ROLE.search(obj.docstring.value):
                obj.docstring.value = rewrite(obj, obj.docstring.value, loader.modules_collection, self.references)
                obj.docstring.__dict__.pop("parsed", None)  # parsed lazily; drop a stale parse

    @property
    def unresolved(self) -> list[Reference]:
        """The references that resolve to no object."""
        return [ref for ref in self.references if ref.target is None]
