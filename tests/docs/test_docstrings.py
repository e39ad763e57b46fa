"""Every public function, method and class of poslens documents its arguments, result and errors.

``help(poslens.measure)`` and the API reference (docs/api/) show the same
docstrings, so each public callable carries the Google sections a reader needs
to call it without reading the source:

- **Args** when it takes parameters (besides ``self``/``cls``), naming each one;
  for a class, the constructor's parameters (``Args:`` or ``Attributes:``);
- **Returns** (or **Yields** for a generator) when it returns a value: its return
  annotation is not ``None``, or its body returns a value;
- **Raises** when its own body has a ``raise`` statement (not one in a nested
  function, not a bare re-raise), naming each exception type it raises.

Public means: a module-level function or class of a module under poslens/ whose
name does not start with ``_``, and the methods of such a class whose names do
not start with ``_`` (``__init__`` is checked through the class). Properties are
read like attributes and need no Returns; overloads and nested functions are not
checked. A command of the ``poslens`` CLI (a function decorated with
``@app.command()`` or ``@app.callback()``) is documented by ``poslens CMD --help``,
which typer builds from the docstring and from each option's ``help=``: every one
of its parameters must have a ``help=`` text instead of an Args entry (an Args
section would be printed into ``--help`` a second time), and its ``typer.Exit`` /
``BadParameter`` raises are how a command exits, not errors for a caller. The check
reads the source with ``ast``, so it needs no model.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "poslens"
SECTION = re.compile(r"^(?P<indent>\s*)(?P<name>[A-Z][A-Za-z ]*):\s*$")
#: Section headings accepted for each requirement (Google style, as griffe reads it).
ARGS = {"Args", "Arguments", "Parameters", "Attributes", "Keyword Args", "Keyword Arguments", "Other Parameters"}
RETURNS = {"Returns", "Return", "Yields", "Yield"}
RAISES = {"Raises", "Raise", "Exceptions"}
ALL_SECTIONS = ARGS | RETURNS | RAISES | {"Example", "Examples", "Note", "Notes", "Warning", "Warnings", "See Also", "Warns", "Receives", "Todo"}


def sections(doc: str) -> dict[str, str]:
    """Split a Google docstring into its sections: heading -> body text."""
    found: dict[str, list[str]] = {}
    current: list[str] | None = None
    indent = ""
    for line in doc.splitlines():
        match = SECTION.match(line)
        if match and match["name"] in ALL_SECTIONS:
            current = found.setdefault(match["name"], [])
            indent = match["indent"]
            continue
        if current is not None:
            if line.strip() and not line.startswith(indent + " ") and not line.startswith(indent + "\t"):
                current = None  # a dedented line ends the section
            else:
                current.append(line)
    return {name: "\n".join(body) for name, body in found.items()}


def documented_names(body: str) -> set[str]:
    """The names an Args/Raises section lists: ``name:``, ``name (type):``, ``*args:``."""
    lines = [line for line in body.splitlines() if line.strip()]
    if not lines:
        return set()
    base = min(len(line) - len(line.lstrip()) for line in lines)
    names = set()
    for line in lines:
        if len(line) - len(line.lstrip()) == base:
            match = re.match(r"\s*\**([\w.]+)\s*(\([^)]*\))?\s*:", line)
            if match:
                names.add(match[1])
    return names


def _direct(node: ast.AST):
    """The nodes of a function body, not descending into nested functions, classes or lambdas."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        yield child
        yield from _direct(child)


def _decorators(node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> set[str]:
    names = set()
    for dec in node.decorator_list:
        target = dec.func if isinstance(dec, ast.Call) else dec
        names.add(ast.unparse(target).rsplit(".", 1)[-1])
    return names


def parameters(fn: ast.FunctionDef | ast.AsyncFunctionDef, *, method: bool) -> list[str]:
    args = fn.args
    names = [a.arg for a in args.posonlyargs + args.args]
    if method and names and "staticmethod" not in _decorators(fn):
        names = names[1:]  # self / cls
    names += [a.arg for a in args.kwonlyargs]
    names += [a.arg for a in (args.vararg, args.kwarg) if a is not None]
    return names


def returns_value(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    if fn.returns is not None:
        annotation = ast.unparse(fn.returns).strip("'\"")
        return annotation not in {"None", "NoReturn", "Never", "typing.NoReturn"}
    return any(isinstance(n, ast.Return) and n.value is not None for n in _direct(fn)) or any(
        isinstance(n, (ast.Yield, ast.YieldFrom)) for n in _direct(fn)
    )


def raised_types(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> tuple[bool, set[str]]:
    """Whether the body raises directly, and the exception type names it raises by name."""
    raises, names = False, set()
    for node in _direct(fn):
        if isinstance(node, ast.Raise) and node.exc is not None:
            raises = True
            exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            name = ast.unparse(exc).rsplit(".", 1)[-1]
            if name[:1].isupper():  # a type; a lowercase name is a caught exception re-raised
                names.add(name)
    return raises, names


def class_parameters(cls: ast.ClassDef) -> list[str] | None:
    """The constructor's parameters: ``__init__``'s, or a dataclass's fields; None when neither is written here."""
    for node in cls.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == "__init__":
            return parameters(node, method=True)
    decorators = _decorators(cls)
    if "dataclass" in decorators or any(ast.unparse(b).endswith("NamedTuple") for b in cls.bases):
        return [
            n.target.id
            for n in cls.body
            if isinstance(n, ast.AnnAssign)
            and isinstance(n.target, ast.Name)
            and "ClassVar" not in ast.unparse(n.annotation)
            and "init=False" not in ast.unparse(n.value or ast.Constant(None))
            and not n.target.id.startswith("_")
        ]
    return None


@dataclass
class Problem:
    where: str
    what: str

    def __str__(self) -> str:
        return f"{self.where}: {self.what}"


def _has_help(default: ast.expr | None, constants: dict[str, ast.expr]) -> bool:
    """Whether a CLI parameter's default is a ``typer.Option`` / ``typer.Argument`` with a ``help=`` text."""
    if isinstance(default, ast.Name):
        default = constants.get(default.id)
    elif isinstance(default, ast.Attribute) and isinstance(default.value, ast.Name):  # an option of an imported module
        default = constants.get(f"{default.value.id}.{default.attr}")
    if isinstance(default, ast.Call) and getattr(default.func, "id", None) == "setting_option":
        # an option declared with the settings (poslens.study.part_registry.OPTIONS): its help is there
        from poslens.study.part_registry import OPTIONS

        setting = default.args[0].value if default.args and isinstance(default.args[0], ast.Constant) else None
        return bool(setting in OPTIONS and OPTIONS[setting].help)
    return isinstance(default, ast.Call) and any(
        k.arg == "help" and ((isinstance(k.value, ast.Constant) and k.value.value) or isinstance(k.value, ast.JoinedStr)) for k in default.keywords
    )


def _is_context(arg: ast.arg) -> bool:
    """A ``typer.Context`` parameter: click's context, not an option of the command."""
    return isinstance(arg.annotation, ast.Attribute) and arg.annotation.attr == "Context"


def check_command(where: str, fn: ast.FunctionDef, constants: dict[str, ast.expr]) -> list[Problem]:
    """A CLI command: a docstring, and a ``help=`` text for every parameter."""
    if not ast.get_docstring(fn):
        return [Problem(where, "no docstring")]
    args = fn.args
    positional = args.posonlyargs + args.args
    defaults = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
    pairs = list(zip(positional, defaults, strict=False)) + list(zip(args.kwonlyargs, args.kw_defaults, strict=False))
    missing = [a.arg for a, d in pairs if not _is_context(a) and not _has_help(d, constants)]
    return [Problem(where, f"CLI parameters without help= text: {', '.join(missing)}")] if missing else []


def check_function(where: str, fn: ast.FunctionDef | ast.AsyncFunctionDef, *, method: bool) -> list[Problem]:
    decorators = _decorators(fn)
    if "overload" in decorators:
        return []
    doc = ast.get_docstring(fn)
    if not doc:
        return [Problem(where, "no docstring")]
    parts = sections(doc)
    problems = []
    params = parameters(fn, method=method)
    if params:
        args = next((parts[s] for s in ARGS - {"Attributes"} if s in parts), None)
        if args is None:
            problems.append(Problem(where, f"no Args section (takes {', '.join(params)})"))
        else:
            missing = [p for p in params if p not in documented_names(args)]
            if missing:
                problems.append(Problem(where, f"Args does not name {', '.join(missing)}"))
    is_property = bool(decorators & {"property", "cached_property", "setter"})
    if not is_property and returns_value(fn) and not any(s in parts for s in RETURNS):
        problems.append(Problem(where, "no Returns section (it returns a value)"))
    return problems + raises_problems(where, fn, [parts], "it raises")


def raises_problems(where: str, fn: ast.FunctionDef, docs: list[dict[str, str]], what: str) -> list[Problem]:
    """A missing Raises section, or the types it leaves out, when ``fn``'s own body raises."""
    raises, types = raised_types(fn)
    if not raises:
        return []
    body = next((doc[s] for doc in docs for s in RAISES if s in doc), None)
    if body is None:
        return [Problem(where, f"no Raises section ({what} {', '.join(sorted(types)) or 'an exception'})")]
    missing = sorted(t for t in types if t not in documented_names(body))
    return [Problem(where, f"Raises does not name {', '.join(missing)}")] if missing else []


def check_class(where: str, cls: ast.ClassDef) -> list[Problem]:
    doc = ast.get_docstring(cls)
    if not doc:
        return [Problem(where, "no docstring")]
    problems = []
    params = class_parameters(cls)
    parts = sections(doc)
    init = next((n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)
    init_parts = sections(ast.get_docstring(init) or "") if init is not None else {}
    if params:
        documented = set()
        for part in (parts, init_parts):
            for s in ARGS:
                if s in part:
                    documented |= documented_names(part[s])
        if not any(s in parts or s in init_parts for s in ARGS):
            problems.append(Problem(where, f"no Args/Attributes section (its constructor takes {', '.join(params)})"))
        else:
            missing = [p for p in params if p not in documented]
            if missing:
                problems.append(Problem(where, f"Args/Attributes does not name {', '.join(missing)}"))
    if init is not None:
        problems += raises_problems(where, init, [parts, init_parts], "its constructor raises")
    for node in cls.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not node.name.startswith("_"):
            problems += check_function(f"{where}.{node.name}", node, method=True)
    return problems


def check_source(module: str, source: str) -> list[Problem]:
    """Every problem of one module's public callables."""
    problems = []
    tree = ast.parse(source)
    constants = {t.id: n.value for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
    for node in tree.body:  # the options a CLI module imports from a sibling module (``from poslens.study import cli_options``)
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("poslens"):
            for alias in node.names:
                sibling = ROOT.joinpath(*node.module.split("."), f"{alias.name}.py")
                if sibling.is_file():
                    for n in ast.parse(sibling.read_text()).body:
                        if isinstance(n, ast.Assign):
                            constants.update({f"{alias.asname or alias.name}.{t.id}": n.value for t in n.targets if isinstance(t, ast.Name)})
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and _decorators(node) & {"command", "callback"}:
            problems += check_command(f"{module}.{node.name}", node, constants)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not node.name.startswith("_"):
            problems += check_function(f"{module}.{node.name}", node, method=False)
        elif isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
            problems += check_class(f"{module}.{node.name}", node)
    return problems


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = sorted(PACKAGE.rglob("*.py"))


@pytest.mark.parametrize("path", MODULES, ids=lambda p: _module_name(p))
def test_public_docstrings(path: Path) -> None:
    problems = check_source(_module_name(path), path.read_text())
    assert not problems, f"{len(problems)} docstring(s) lack a section:\n" + "\n".join(f"  {p}" for p in problems)


BAD = '''
def measure(model, corpus, *, layers=None):
    """Measure.

    Args:
        model: The model.

    Returns:
        A result.
    """
    if layers == []:
        raise InputError("no layers")
    return 1


def quiet(x) -> int:
    """No sections at all."""
    def inner():
        raise ValueError("not this one")
    return x


class Thing:
    """A thing."""

    def __init__(self, size: int) -> None:
        self.size = size

    def grow(self, by: int) -> int:
        """Grow.

        Args:
            by: How much.

        Returns:
            The new size.

        Raises:
            InputError: When ``by`` is negative.
        """
        if by < 0:
            raise InputError("negative")
        try:
            return self.size + by
        except TypeError:
            raise


_NAME = typer.Option("x", help="A name.")


@app.command()
def cli(name: str = _NAME, count: int = typer.Option(1), flag: bool = typer.Option(False, help="")) -> None:
    """A command."""
    raise typer.Exit(1)
'''


def test_the_check_can_fail() -> None:
    problems = {str(p) for p in check_source("m", BAD)}
    assert problems == {
        "m.measure: Args does not name corpus, layers",
        "m.measure: no Raises section (it raises InputError)",
        "m.quiet: no Args section (takes x)",
        "m.quiet: no Returns section (it returns a value)",
        "m.Thing: no Args/Attributes section (its constructor takes size)",
        "m.cli: CLI parameters without help= text: count, flag",
    }, problems
