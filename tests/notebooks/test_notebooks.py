"""The tutorial notebooks in docs/tutorials run top to bottom, draw their plots, and are stored executed.

They are committed with their outputs, written by ``docs/execute_tutorials.py``
(the docs render them as they are, ``execute: false``). A cheap test checks that
the stored outputs belong to the current code: every code cell has outputs and
the hash of the code cells recorded in the notebook's metadata matches. The
slow tests execute each notebook with nbclient in a fresh kernel that runs this
interpreter (the one with poslens installed), with the embedded 4-bit model
``smollm2-135m``.
"""

from __future__ import annotations

import ast
import json
import os
import re
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TUTORIALS = ROOT / "docs" / "tutorials"
NOTEBOOKS = sorted(TUTORIALS.glob("*.ipynb"))
PLOTLY_MIME = "application/vnd.plotly.v1+json"


def test_there_are_tutorials() -> None:
    assert [p.name for p in NOTEBOOKS] == [
        "01_first_look.ipynb",
        "02_bos_patching.ipynb",
        "03_architectures.ipynb",
        "04_your_model.ipynb",
        "05_your_text_head_by_head.ipynb",
    ]


def _execute_tutorials():
    import importlib.util

    spec = importlib.util.spec_from_file_location("execute_tutorials", ROOT / "docs" / "execute_tutorials.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _ends_in_expression(source: str) -> bool:
    """Whether a cell's last statement is an expression: such a cell shows something; one that only imports or assigns may not."""
    body = ast.parse(source).body
    return bool(body) and isinstance(body[-1], ast.Expr)


RERUN = "run `python docs/execute_tutorials.py {stem}` (with the venv's Python) and commit the notebook"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_committed_executed_and_current(path: Path) -> None:
    import nbformat

    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    assert nb.metadata["kernelspec"]["name"] == "python3"
    rerun = RERUN.format(stem=path.stem)
    code = [(i, cell) for i, cell in enumerate(nb.cells) if cell.cell_type == "code"]
    empty = [i for i, cell in code if not cell.outputs and _ends_in_expression(cell.source)]
    assert not empty, f"{path.name}: code cells {empty} have no outputs; {rerun}"
    counts = [cell.execution_count for _, cell in code]
    assert counts == list(range(1, len(code) + 1)), f"{path.name}: cells were not run top to bottom in one kernel ({counts}); {rerun}"
    errors = [i for i, cell in code if any(out.output_type == "error" for out in cell.outputs)]
    assert not errors, f"{path.name}: code cells {errors} store an error; {rerun}"
    recorded = nb.metadata.get("poslens", {}).get("source_sha256")
    assert recorded == _execute_tutorials().source_sha256(nb), f"{path.name}: its code cells changed since its outputs were stored; {rerun}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_stored_figures_render_on_the_site(path: Path) -> None:
    """Each stored figure has an HTML rendering for the site, and plotly.js is inlined once, before the first one."""
    import nbformat

    nb = nbformat.read(path, as_version=4)
    figures = [
        out
        for cell in nb.cells
        if cell.cell_type == "code"
        for out in cell.outputs
        if out.output_type in ("display_data", "execute_result") and PLOTLY_MIME in out.get("data", {})
    ]
    assert figures, f"{path.name} stores no plotly figure"
    html = [out.data.get("text/html", "") for out in figures]
    assert all("Plotly.newPlot" in page for page in html), f"{path.name}: a figure has no HTML rendering; {RERUN.format(stem=path.stem)}"
    inlined = [len(page) > 1_000_000 for page in html]
    assert inlined == [True] + [False] * (len(html) - 1), f"{path.name}: plotly.js must be inlined once, in the first figure"


# A path of the machine that executed a notebook: its home, its temporary and working folders, a virtual environment, caches.
MACHINE_PATH = re.compile(r"(/work/|/home/|/root/|/tmp/|/Users/|/private/var/|\.venv\b|site-packages|dist-packages|\.cache/|AppData)")


def _output_texts(out) -> list[str]:
    """Every text an output stores: a stream's text, each mimetype's data (JSON data as its dump), an error's traceback."""
    if out.output_type == "stream":
        return [out.text]
    if out.output_type == "error":
        return list(out.traceback)
    return [value if isinstance(value, str) else json.dumps(value) for value in out.get("data", {}).values()]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_stored_outputs_show_no_machine_path_and_no_warning(path: Path) -> None:
    """A stored tutorial shows neither the paths of the machine that executed it nor a warning (the docs site shows its outputs)."""
    import nbformat

    nb = nbformat.read(path, as_version=4)
    rerun = RERUN.format(stem=path.stem)
    for index, cell in enumerate(nb.cells):
        for out in cell.get("outputs", []) if cell.cell_type == "code" else []:
            for text in _output_texts(out):
                found = MACHINE_PATH.search(text)
                assert not found, (
                    f"{path.name}, cell {index}: an output shows a machine path "
                    f"({text[max(found.start() - 60, 0) : found.end() + 60]!r}); fix the cell and {rerun}"
                )
            if out.output_type == "stream" and out.name == "stderr":
                assert "Warning" not in out.text, f"{path.name}, cell {index}: a warning is stored ({out.text[:300]!r}); {rerun}"


WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
TEXT_BAR = re.compile(r"\d+%\|")  # tqdm's text bar: " 40%|████      | 2/5"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_stored_outputs_keep_no_progress_widget_or_bar(path: Path) -> None:
    """A saved notebook keeps a progress widget's or bar's last frame (a stale "0%" or "99% 238/240"): none is stored."""
    import nbformat

    nb = nbformat.read(path, as_version=4)
    rerun = RERUN.format(stem=path.stem)
    assert "widgets" not in nb.metadata, f"{path.name} stores widget state; {rerun}"
    for index, cell in enumerate(nb.cells):
        for out in cell.get("outputs", []) if cell.cell_type == "code" else []:
            assert WIDGET_MIME not in out.get("data", {}), f"{path.name}, cell {index}: a widget is stored; {rerun}"
            texts = [out.text] if out.output_type == "stream" else [t for t in out.get("data", {}).values() if isinstance(t, str)]
            assert not any(TEXT_BAR.search(text) for text in texts), f"{path.name}, cell {index}: a progress bar is stored; {rerun}"


@pytest.fixture(scope="session")
def python3_kernel(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A kernelspec named ``python3`` that starts *this* interpreter.

    The spec is written to a temporary folder put first on ``JUPYTER_PATH`` for
    the session, so a ``python3`` spec elsewhere (user-level, or one pointing at
    another Python) cannot shadow it, and nothing is installed on the system.
    """
    import jupyter_client.kernelspec

    data = _execute_tutorials().write_python3_kernelspec(tmp_path_factory.mktemp("jupyter"), "Python 3 (poslens tests)")
    old = os.environ.get("JUPYTER_PATH")
    os.environ["JUPYTER_PATH"] = os.pathsep.join([str(data)] + ([old] if old else []))
    found = jupyter_client.kernelspec.KernelSpecManager().get_kernel_spec("python3")
    assert found.argv[0] == sys.executable, found.argv
    yield "python3"
    if old is None:
        os.environ.pop("JUPYTER_PATH", None)
    else:
        os.environ["JUPYTER_PATH"] = old


# "your model, as it is" builds a HookedTransformer: it runs in make test's TransformerLens 3.9 pass (marker tl3)
NEEDS_TL3 = {"04_your_model"}


@pytest.mark.embedded
@pytest.mark.parametrize("path", [pytest.param(p, marks=pytest.mark.tl3) if p.stem in NEEDS_TL3 else p for p in NOTEBOOKS], ids=lambda p: p.stem)
def test_notebook_runs(path: Path, python3_kernel: str, tmp_path: Path) -> None:
    import nbformat
    from nbclient import NotebookClient

    if path.stem in NEEDS_TL3:
        from hooked_models import require_transformer_lens_3

        require_transformer_lens_3()

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


def _html_outputs(path: Path) -> list[str]:
    import nbformat

    nb = nbformat.read(path, as_version=4)
    return [
        "".join(out["data"]["text/html"])
        for cell in nb.cells
        if cell.cell_type == "code"
        for out in cell.outputs
        if out.get("output_type") in ("display_data", "execute_result") and "text/html" in out.get("data", {})
    ]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_stored_results_come_from_this_version_and_show_todays_methods_line(path: Path) -> None:
    """A notebook run with another poslens records that version in its results' provenance, and the Methods line of its day."""
    import re

    import pandas as pd

    import poslens
    from poslens.measurement.display import result_html
    from poslens.measurement.result import Result

    shown = Result(
        pd.DataFrame(
            [
                dict(
                    model="m",
                    variant="base",
                    intervention="none",
                    layer=-1,
                    head=-1,
                    query_window="early",
                    metric="c_res",
                    value=0.1,
                    ci_low=0.0,
                    ci_high=0.2,
                )
            ]
        )
    )
    current = re.search(r"<p[^>]*>Methods: .*?</p>", result_html(shown)).group(0)
    rerun = RERUN.format(stem=path.stem)
    html = _html_outputs(path)
    versions = {v for page in html for v in re.findall(r'<th style="text-align:left">poslens</th><td style="text-align:left">([^<]+)</td>', page)}
    methods = {m for page in html for m in re.findall(r"<p[^>]*>Methods: .*?</p>", page)}
    assert versions <= {poslens.__version__}, f"{path.name} records poslens {sorted(versions)}, the package is {poslens.__version__}; {rerun}"
    assert methods <= {current}, f"{path.name} shows a Methods line the code no longer prints; {rerun}"
    if path.stem in ("01_first_look", "05_your_text_head_by_head"):  # these show a result: the check above has something to read
        assert versions and methods, f"{path.name} shows no result's provenance or Methods line"
