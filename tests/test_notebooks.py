"""The tutorial notebooks in docs/tutorials run top to bottom and draw their plots.

They are committed without outputs (the docs render them as they are), so these
tests are also what keeps them working: each is executed with nbclient in a
fresh kernel that runs this interpreter (the one with poslens installed), with
the embedded 4-bit model ``smollm2-135m``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TUTORIALS = ROOT / "docs" / "tutorials"
NOTEBOOKS = sorted(TUTORIALS.glob("*.ipynb"))
PLOTLY_MIME = "application/vnd.plotly.v1+json"


def test_there_are_tutorials() -> None:
    assert [p.name for p in NOTEBOOKS] == ["01_first_look.ipynb", "02_bos_patching.ipynb", "03_architectures.ipynb"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_committed_without_outputs(path: Path) -> None:
    import nbformat

    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    dirty = [i for i, cell in enumerate(nb.cells) if cell.cell_type == "code" and (cell.outputs or cell.execution_count)]
    assert not dirty, f"{path.name}: code cells {dirty} carry outputs; clear them before committing"
    assert nb.metadata["kernelspec"]["name"] == "python3"


@pytest.fixture(scope="session")
def python3_kernel(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A kernelspec named ``python3`` that starts *this* interpreter.

    The spec is written to a temporary folder put first on ``JUPYTER_PATH`` for
    the session, so a ``python3`` spec elsewhere (user-level, or one pointing at
    another Python) cannot shadow it, and nothing is installed on the system.
    """
    import jupyter_client.kernelspec

    data = tmp_path_factory.mktemp("jupyter")
    spec = data / "kernels" / "python3"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python 3 (poslens tests)",
        "language": "python",
    }))
    old = os.environ.get("JUPYTER_PATH")
    os.environ["JUPYTER_PATH"] = os.pathsep.join([str(data)] + ([old] if old else []))
    found = jupyter_client.kernelspec.KernelSpecManager().get_kernel_spec("python3")
    assert found.argv[0] == sys.executable, found.argv
    yield "python3"
    if old is None:
        os.environ.pop("JUPYTER_PATH", None)
    else:
        os.environ["JUPYTER_PATH"] = old


@pytest.mark.embedded
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs(path: Path, python3_kernel: str, tmp_path: Path) -> None:
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the kernel inherits the environment: never reach the hub
    client = NotebookClient(nb, kernel_name=python3_kernel, timeout=600, resources={"metadata": {"path": str(tmp_path)}})
    start = time.perf_counter()
    client.execute()  # raises CellExecutionError on the first failing cell
    seconds = time.perf_counter() - start

    outputs = [out for cell in nb.cells if cell.cell_type == "code" for out in cell.outputs]
    errors = [out for out in outputs if out.output_type == "error"]
    assert not errors, errors
    tracebacks = [out.text for out in outputs if out.output_type == "stream" and "Traceback" in out.text]
    assert not tracebacks, tracebacks
    figures = [out for out in outputs if out.output_type == "display_data" and PLOTLY_MIME in out.get("data", {})]
    assert figures, f"{path.name} drew no plotly figure"
    for figure in figures:
        traces = figure["data"][PLOTLY_MIME]["data"]
        assert traces and all(len(trace.get("x", [])) > 0 for trace in traces), f"{path.name}: a figure has an empty trace"
    print(f"{path.name}: {seconds:.1f} s")
