"""poslens as pip installs it: the sdist and the wheel build, carry the templates, and the README's API example runs from the wheel.

The sdist is built by setuptools from a copy of the package's sources (nothing is
written into the repository), the wheel by ``pip wheel`` from that sdist, as
``pip install poslens-<version>.tar.gz`` does. The wheel is installed with
``pip install --no-deps --target`` into a temporary folder, and used from a
second Python whose ``PYTHONPATH`` starts with that folder and whose working
folder lies outside the repository. The test
environment's own poslens is an editable install; its finder comes after
``PYTHONPATH`` on the import path, so the wheel's copy is the one imported, and
the test asserts that it is. Nothing reaches the network: the build uses the
setuptools already installed (``--no-build-isolation``) and the install takes
the one local wheel with ``--no-deps``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def readme_api_example() -> str:
    """The README's Python example (the fenced block that calls ``poslens.load_model``)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = [block for block in re.findall(r"```python\n(.*?)```", text, flags=re.S) if "poslens.load_model(" in block]
    assert len(blocks) == 1, "the README should have one Python example that loads a model"
    return blocks[0]


def tiny_example(model_folder: Path) -> str:
    """The README's example with the tiny random Llama in place of smollm2-135m, at 8 sequences of 64 tokens.

    Eight sequences are the fewest the 8 jackknife groups take, and 64 tokens keep the early window (32) below seq_len.
    """
    code = readme_api_example()
    replacements = {
        'poslens.load_model("smollm2-135m")': f"poslens.load_model({str(model_folder)!r})",
        "n_seqs=16, seq_len=128": "n_seqs=8, seq_len=64",
    }
    for old, new in replacements.items():
        assert old in code, f"the README's API example no longer contains {old!r}; update this test"
        code = code.replace(old, new)
    return code


@pytest.fixture(scope="module")
def sdist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The poslens source archive (``poslens-<version>.tar.gz``), built by setuptools from a copy of the sources."""
    if importlib_missing("setuptools"):
        pytest.skip("setuptools is not installed: poslens cannot be built without reaching the network")
    work = tmp_path_factory.mktemp("sdist_build")
    source = work / "src"
    shutil.copytree(ROOT / "poslens", source / "poslens", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for name in ("pyproject.toml", "README.md", "LICENSE", "MANIFEST.in"):
        shutil.copy2(ROOT / name, source / name)
    shutil.copytree(ROOT / "docs", source / "docs", ignore=shutil.ignore_patterns("__pycache__", "*.ipynb", "*.parquet"))
    out = work / "dist"
    code = f"from setuptools import build_meta; print(build_meta.build_sdist({str(out)!r}))"
    proc = subprocess.run([sys.executable, "-c", code], cwd=source, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"building the sdist failed:\n{proc.stdout}\n{proc.stderr}"
    return out / proc.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def wheel(sdist: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The poslens wheel, built by pip from the sdist (as ``pip install poslens-<version>.tar.gz`` builds it)."""
    out = tmp_path_factory.mktemp("wheels")
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "--no-index", "-w", str(out), str(sdist)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=out,
    )
    assert proc.returncode == 0, f"pip wheel failed:\n{proc.stdout}\n{proc.stderr}"
    wheels = sorted(out.glob("poslens-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


def importlib_missing(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is None


@pytest.fixture(scope="module")
def site(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding poslens installed from the wheel (its dependencies come from the test environment)."""
    target = tmp_path_factory.mktemp("wheel_site") / "site"
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--target", str(target), str(wheel)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, f"pip install --target failed:\n{proc.stdout}\n{proc.stderr}"
    return target


def run_outside(code: str, site: Path, cwd: Path, cache: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(site), "HF_HUB_OFFLINE": "1", "POSLENS_CACHE": str(cache)}
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_the_sdist_carries_the_sources_and_the_templates(sdist: Path):
    import tarfile

    with tarfile.open(sdist) as archive:
        names = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    assert {"pyproject.toml", "README.md", "LICENSE", "poslens/__init__.py", "poslens/study/cli.py"} <= names
    assert {f"poslens/measurement/templates/{name}.html" for name in ("report", "claims", "tables", "result")} <= names


def test_the_sdist_carries_the_docs_pages_the_help_and_the_readme_point_to(sdist: Path):
    """``poslens zoo --help`` says docs/zoo.md, the README links docs/*.md and shows docs/img: each must be in the sdist."""
    import tarfile

    with tarfile.open(sdist) as archive:
        names = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    sources = [path.read_text(encoding="utf-8") for path in (ROOT / "poslens").rglob("*.py")]
    named = set(re.findall(r"docs/[\w/]+\.md", "\n".join(sources))) | set(re.findall(r"\((docs/[\w/.]+)[#)]", (ROOT / "README.md").read_text()))
    pages = {name for name in named if (ROOT / name).is_file()}  # a page the site builds from a notebook is no file here
    assert {"docs/zoo.md", "docs/methodology.md", "docs/glossary.md", "docs/img/report_sources.png"} <= pages
    assert pages <= names, f"pointed to but not in the sdist: {sorted(pages - names)}"


def test_the_wheel_carries_the_package_and_its_templates(wheel: Path):
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "poslens/__init__.py" in names and "poslens/study/cli.py" in names
    assert {f"poslens/measurement/templates/{name}.html" for name in ("report", "claims", "tables", "result")} <= names
    assert {name for name in names if name.startswith(("tests/", "docs/"))} == set()  # the tests and the docs stay in the repository and the sdist
    entry_points = next(name for name in names if name.endswith(".dist-info/entry_points.txt"))
    assert "poslens = poslens.study.cli:run" in zipfile.ZipFile(wheel).read(entry_points).decode()


def test_the_readme_example_runs_from_the_installed_wheel(site: Path, tiny_llama_dir: Path, tmp_path: Path):
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    assert ROOT not in outside.resolve().parents
    code = tiny_example(tiny_llama_dir) + "\n".join(
        [
            "",
            "import poslens.study.report as report",
            "print('POSLENS_FILE', poslens.__file__)",
            "print('TEMPLATE_FILE', report._TEMPLATES.get_template('report.html').filename)",
            "print('ROWS', len(result.to_frame()))",
        ]
    )
    proc = run_outside(code, site, outside, tmp_path / "cache")
    assert proc.returncode == 0, f"the README example failed from the wheel:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    said = dict(line.split(" ", 1) for line in proc.stdout.splitlines() if line.split(" ", 1)[0] in ("POSLENS_FILE", "TEMPLATE_FILE", "ROWS"))
    imported = Path(said["POSLENS_FILE"]).resolve()
    assert imported == (site / "poslens" / "__init__.py").resolve()  # the wheel's copy, not the editable checkout
    assert ROOT not in imported.parents
    assert Path(said["TEMPLATE_FILE"]).resolve().is_relative_to(site.resolve())
    # the example's result: a table with rows, saved (Parquet, CSV and the cell sums) under the working folder
    assert int(said["ROWS"]) > 0
    # print(result.summary("early")): the per-layer table, its columns named by the model it measured (its label)
    assert "layer" in proc.stdout and "leakage_pattern" in proc.stdout and "tiny_llama" in proc.stdout
    for name in ("leakage.parquet", "leakage.csv", "leakage.sums.npz"):
        assert (outside / "out" / name).is_file(), name


def test_the_installed_command_runs(site: Path, tmp_path: Path):
    script = site / "bin" / "poslens"
    assert script.is_file()  # pip wrote the console script for [project.scripts]
    env = {**os.environ, "PYTHONPATH": str(site), "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, str(script), "--version"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    version = re.search(r'^version = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), flags=re.M).group(1)
    assert proc.stdout.strip() == f"poslens {version}"
