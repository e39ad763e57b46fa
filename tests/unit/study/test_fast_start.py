"""Fast start: ``poslens --help``, ``poslens --version`` and ``import poslens`` load neither torch nor transformers.

Each check runs in a fresh Python (a subprocess), since this test process has long imported torch. The
public names stay reachable: ``poslens.X`` and ``from poslens import X`` import X's module on first use.
The start-up times themselves are in docs/benchmarks.md ("Start-up"); a wall-clock limit here would fail
on a busy machine for no fault of the code, so these tests check the cause of slowness (the heavy imports).
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

import poslens

ROOT = Path(__file__).resolve().parents[3]
HEAVY = ("torch", "transformers", "transformer_lens", "pandas")


def _heavy_modules_after(code: str, *args: str) -> tuple[list[str], str]:
    """Run ``code`` in a fresh Python and return the heavy top-level packages it imported, and its output."""
    probe = code + f"\nimport sys\nprint('HEAVY', ','.join(sorted({{n.split('.')[0] for n in sys.modules}} & set({HEAVY!r}))))\n"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", probe, *args], capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    last = [line for line in done.stdout.splitlines() if line.startswith("HEAVY")][-1]
    found = last.removeprefix("HEAVY").strip()
    return (found.split(",") if found else []), done.stdout


COMMAND = """
import sys
sys.argv = ["poslens", *sys.argv[1:]]
from poslens.study.cli import run
try:
    run()
except SystemExit:
    pass
"""


@pytest.mark.parametrize("args", [["--help"], ["--version"], ["leakage", "--help"], ["zoo", "--help"]])
def test_help_and_version_import_neither_torch_nor_transformers(args: list[str]):
    heavy, output = _heavy_modules_after(COMMAND, *args)
    assert heavy == [], f"poslens {' '.join(args)} imported {heavy}"
    expected = f"poslens {poslens.__version__}" if args == ["--version"] else "Usage:"
    assert expected in output  # the command really ran


def test_import_poslens_imports_no_torch():
    heavy, _ = _heavy_modules_after("import poslens\nassert isinstance(poslens.__version__, str)")
    assert heavy == []


def test_the_probe_sees_torch_when_a_name_needs_it():
    # the control: the same probe reports torch once a public name that needs it is used
    heavy, _ = _heavy_modules_after("import poslens\nposlens.measure")
    assert "torch" in heavy


def test_every_public_name_is_reachable_both_ways():
    table = poslens._WHERE
    assert set(poslens.__all__) == set(table) | {"__version__"}
    for name in poslens.__all__:
        namespace: dict = {}
        exec(f"from poslens import {name}", namespace)
        assert namespace[name] is getattr(poslens, name)
        assert name in dir(poslens)
        if name == "__version__":
            continue
        module_name, attribute = table[name]
        source = importlib.import_module(module_name)
        assert getattr(poslens, name) is (getattr(source, attribute) if attribute else source), name


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'no_such_name'"):
        poslens.no_such_name  # noqa: B018


def test_subpackages_are_reachable_as_attributes():
    heavy, output = _heavy_modules_after("import poslens\nprint(poslens.measurement.__name__, poslens.testing.__name__)")
    assert "poslens.measurement poslens.testing" in output and "torch" in heavy  # poslens.testing builds models
