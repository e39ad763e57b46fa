"""The package's layers: imports only point down, there are no import cycles, and the fits need no torch.

Layers, lowest first (docs/architecture.md draws the same picture):

    poslens.errors, .files, .options, .ownership, .version   exceptions, atomic writes, the options, which files poslens wrote, the version;
                         .compiled, .compiled_loops: the numba loops of the CPU routes (outside the packages the tests' shape checks wrap)
    poslens.fit          statistics, binning, cell sums, fits, metrics: numpy only
    poslens.model        registry, loading, variants, cache, hook names, corpus; and poslens.testing, tiny test models
    poslens.capture      the hooks that turn a forward pass into cell sums
    poslens.runtime      memory planning, torchrun
    poslens.measurement  collect sums -> fit -> tidy table (Result)
    poslens.zoo          trainer of controlled model families (same data and seed, position scheme varied)
    poslens.mechanisms   sinks, interventions, fingerprint, architectures, effects
    poslens.study        study parts, claims, report, plots, CLI

Every import counts, also those inside functions: an upward import placed in a
function is still an upward dependency.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "poslens"
LAYERS = ["base", "fit", "model", "capture", "runtime", "measurement", "zoo", "mechanisms", "study"]


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, name: str) -> set[str]:
    """Every poslens module ``name`` imports (``from a import b`` counts ``a.b`` when that is a module)."""
    found: set[str] = set()
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.startswith("poslens")}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            if base.startswith("poslens"):
                found.add(base)
                found |= {f"{base}.{alias.name}" for alias in node.names}
    return found


def _graph() -> dict[str, set[str]]:
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    return {name: {m for m in _imports(path, name) if m in modules and m != name} for name, path in modules.items()}


BASE = ("compiled", "compiled_loops", "errors", "files", "options", "ownership", "progress", "version")
#: Top-level modules that sit in a subpackage's layer (poslens.testing builds transformers models, as the model layer does).
TOP_LEVEL_IN_LAYER = {"testing": "model"}


def _layer(module: str) -> int | None:
    """The layer's index; the package root (the public API) sits above all layers."""
    parts = module.split(".")
    if module == "poslens":
        return len(LAYERS)
    if len(parts) == 2 and parts[1] in BASE:
        return 0
    if len(parts) == 2 and parts[1] in TOP_LEVEL_IN_LAYER:
        return LAYERS.index(TOP_LEVEL_IN_LAYER[parts[1]])
    return LAYERS.index(parts[1]) if len(parts) > 1 and parts[1] in LAYERS[1:] else None


def test_every_module_belongs_to_a_layer():
    loose = [m for m in _graph() if _layer(m) is None]
    assert not loose, f"modules outside the layers {LAYERS}: {loose}"


def test_imports_point_down_the_layers():
    upward = [
        f"{module} (layer {_layer(module)}) imports {target} (layer {_layer(target)})"
        for module, targets in _graph().items()
        for target in targets
        if _layer(target) > _layer(module)
    ]
    assert not upward, "\n".join(upward)


def test_no_import_cycles():
    graph = _graph()
    state: dict[str, int] = {}  # 1 on the stack, 2 done

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for target in sorted(graph[node]):
            if state.get(target) == 1:
                cycle = stack[stack.index(target) :] + [target] if target in stack else [node, target]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if target not in state:
                visit(target, stack + [target])
        state[node] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])


def test_the_fits_import_no_torch():
    for path in (PACKAGE / "fit").rglob("*.py"):
        tree = ast.parse(path.read_text())
        names = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        names |= {(n.module or "").split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        assert not names & {"torch", "transformer_lens", "transformers"}, f"{path.name} imports {names & {'torch', 'transformers'}}"


def test_the_checker_sees_an_upward_import(tmp_path):
    # the test above must be able to fail: an upward import inside a function is found
    source = tmp_path / "x.py"
    source.write_text("def f():\n    from poslens.study.parts import Study\n")
    assert "poslens.study.parts" in _imports(source, "poslens.fit.x")


def test_the_api_shadows_no_module():
    # `poslens.measure` used to be both a function and, underneath it, the module poslens/measure.py
    import importlib

    import poslens

    for name in poslens.__all__:
        value = getattr(poslens, name)
        is_module = type(value).__name__ == "module"
        on_disk = (PACKAGE / f"{name}.py").exists() or (PACKAGE / name).is_dir()
        assert is_module or not on_disk, f"poslens.{name} hides the module poslens/{name}"
    assert importlib.import_module("poslens.measurement.pipeline").measure is poslens.measure
