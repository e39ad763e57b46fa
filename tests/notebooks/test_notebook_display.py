"""poslens in a real Jupyter kernel: progress bars, the tqdm warning, and figures that survive nbconvert's HTML export.

Each test executes a small notebook with nbclient in a fresh kernel running
this interpreter, on a tiny random Llama saved to a temporary folder:

- with ipywidgets, a measure() cell shows one widget per bar and no stderr lines;
- without ipywidgets (hidden from the kernel), it shows a few text lines and no
  ``TqdmWarning: IProgress not found``, neither from poslens nor from the
  libraries it calls;
- Result.plot figures carry ``text/html`` beside plotly's JSON, so the HTML
  export of the saved notebook holds every figure, with plotly.js once.
"""

from __future__ import annotations

import importlib.util
import io
import os
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PLOTLY_MIME = "application/vnd.plotly.v1+json"
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
PLOTLYJS_BANNER = "* plotly.js v"  # the licence header at the top of plotly.min.js

SETUP = """\
import pathlib, tempfile
import poslens
from poslens.testing import save_tiny_model
import transformers
transformers.utils.logging.disable_progress_bar()
folder = save_tiny_model(pathlib.Path(tempfile.mkdtemp()) / "tiny", "llama")
model = poslens.load_model(folder)
corpus = poslens.make_corpus(model, "random", n_seqs=64, seq_len=16)"""
# 32 batches of 2 sequences and 96 counterfactual layers: tqdm's default redraws wrote ~40 stderr outputs for this cell
MEASURE = "result = poslens.measure(model, corpus, groups=4, batch_size=2, early=8)"
HIDE_IPYWIDGETS = "import sys\nsys.modules['ipywidgets'] = None  # as if ipywidgets were not installed"


@pytest.fixture(scope="module")
def kernel(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A ``python3`` kernelspec that starts this interpreter, first on ``JUPYTER_PATH`` for the module's tests."""
    spec = importlib.util.spec_from_file_location("execute_tutorials", ROOT / "docs" / "execute_tutorials.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    home = module.write_python3_kernelspec(tmp_path_factory.mktemp("jupyter"), "Python 3 (poslens tests)")
    saved = {name: os.environ.get(name) for name in ("JUPYTER_PATH", "PLOTLY_RENDERER", "HF_HUB_OFFLINE")}
    os.environ["JUPYTER_PATH"] = os.pathsep.join([str(home)] + [saved["JUPYTER_PATH"]] * bool(saved["JUPYTER_PATH"]))
    os.environ.pop("PLOTLY_RENDERER", None)  # plotly's own choice of renderer, as in a user's notebook
    os.environ["HF_HUB_OFFLINE"] = "1"
    yield "python3"
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def _run(kernel: str, cells: list[str], tmp_path: Path):
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source) for source in cells])
    nb.metadata["kernelspec"] = {"name": kernel, "display_name": "Python 3", "language": "python"}
    NotebookClient(nb, kernel_name=kernel, timeout=600, resources={"metadata": {"path": str(tmp_path)}}).execute()
    return nb


def _streams(cell, name: str = "stderr") -> list[str]:
    return [out.text for out in cell.outputs if out.output_type == "stream" and out.name == name]


def test_progress_is_one_widget_per_bar_with_ipywidgets(kernel: str, tmp_path: Path) -> None:
    pytest.importorskip("ipywidgets", reason="the notebook extra (ipywidgets) is not installed")
    nb = _run(kernel, [SETUP, MEASURE], tmp_path)
    measured = nb.cells[1]
    widgets = [out for out in measured.outputs if out.output_type == "display_data" and WIDGET_MIME in out.data]
    assert len(widgets) == 2, measured.outputs  # "measuring" and "measuring (counterfactual)"
    assert [out.data["text/plain"].split(":")[0] for out in widgets] == ["measuring", "measuring (counterfactual)"]
    assert _streams(measured) == []
    assert not any("Warning" in text for cell in nb.cells for text in _streams(cell))


def test_progress_without_ipywidgets_is_a_few_text_lines_and_no_warning(kernel: str, tmp_path: Path) -> None:
    nb = _run(kernel, [HIDE_IPYWIDGETS, SETUP, MEASURE, "import tqdm.auto\ntqdm.auto.tqdm.__module__"], tmp_path)
    warnings = [text for cell in nb.cells for text in _streams(cell) if "Warning" in text or "IProgress" in text]
    assert not warnings, warnings
    measured = nb.cells[2]
    assert not [out for out in measured.outputs if out.output_type == "display_data"]
    lines = _streams(measured)
    assert 2 <= len(lines) <= 10, lines  # each bar's first line, a redraw every 30 s at most, its clearing at the end
    assert any("measuring:" in text for text in lines) and any("measuring (counterfactual)" in text for text in lines)
    assert nb.cells[3].outputs[0].data["text/plain"] in ("'tqdm.std'", "'tqdm.asyncio'")  # tqdm.auto fell back to text bars, silently


@pytest.fixture(scope="module")
def exported(kernel: str, tmp_path_factory: pytest.TempPathFactory):
    """A notebook that measures the tiny model and draws three figures, executed, and its HTML export."""
    from nbconvert import HTMLExporter

    nb = _run(
        kernel,
        [
            SETUP,
            "result = poslens.measure(model, corpus, groups=4, early=8, progress=False)",
            'result.plot("sources")',
            'result.plot("heads", metric="c_res")',
            'result.plot("leakage")',
        ],
        tmp_path_factory.mktemp("figures"),
    )
    page, _ = HTMLExporter().from_notebook_node(nb)
    return nb, page


def test_figures_survive_the_html_export(exported) -> None:
    nb, page = exported
    figures = [out for cell in nb.cells[2:] for out in cell.outputs if out.output_type in ("display_data", "execute_result")]
    assert len(figures) == 3, [cell.outputs for cell in nb.cells[2:]]
    for figure in figures:
        assert PLOTLY_MIME in figure.data and "Plotly.newPlot" in figure.data["text/html"]
    assert [PLOTLYJS_BANNER in figure.data["text/html"] for figure in figures] == [True, False, False]
    assert page.count(PLOTLYJS_BANNER) == 1, "plotly.js must be in the exported page once"
    assert page.count('class="plotly-graph-div"') == 3
    for figure in figures:  # each figure's div, and the script that draws into it, are in the page
        (div_id,) = re.findall(r'<div id="(poslens-figure-[0-9a-f]+)" class="plotly-graph-div"', figure.data["text/html"])
        assert f'id="{div_id}"' in page and re.search(rf'Plotly\.newPlot\(\s*"{div_id}"', page), div_id
    assert "c_res per head (early queries)" in page  # the default window


def test_exported_figures_draw_in_a_browser(exported, tmp_path: Path) -> None:
    """The exported page, opened offline in headless Chromium, draws all three figures with the one copy of plotly.js."""
    import shutil
    import time

    if not shutil.which("chromium") or not shutil.which("chromedriver"):
        pytest.skip("Debian's chromium and chromium-driver are needed (the Makefile's set-up installs them)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    _, page = exported
    path = tmp_path / "exported.html"
    path.write_text(page, encoding="utf-8")
    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium")
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--disable-background-networking",
        "--window-size=1200,3000",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)
    try:
        driver.get(path.as_uri())
        count = (
            "return document.querySelectorAll('.plotly-graph-div .main-svg').length > 0 ? "
            "[...document.querySelectorAll('.plotly-graph-div')].filter(d => d.querySelector('.main-svg')).length : 0"
        )
        deadline = time.time() + 60
        while driver.execute_script(count) < 3 and time.time() < deadline:
            time.sleep(0.5)
        assert driver.execute_script(count) == 3, "not every figure was drawn"
        assert "needs plotly.js" not in driver.execute_script("return document.body.innerText")
    finally:
        driver.quit()


def test_plotlyjs_travels_again_when_its_cell_is_run_again(kernel: str) -> None:
    """JupyterLab sends each cell's id with its code: re-running the cell that carried plotly.js replaces its output,
    so the new output carries plotly.js again; other cells never do."""
    from jupyter_client.manager import start_new_kernel

    manager, client = start_new_kernel(kernel_name=kernel)
    try:

        def run(code: str, cell_id: str) -> list[dict]:
            content = dict(code=code, silent=False, store_history=True, user_expressions={}, allow_stdin=False, stop_on_error=True)
            message = client.session.msg("execute_request", content, metadata={"cellId": cell_id})
            client.shell_channel.send(message)
            shown = []
            while True:
                reply = client.get_iopub_msg(timeout=120)
                if reply["parent_header"].get("msg_id") != message["header"]["msg_id"]:
                    continue
                if reply["msg_type"] == "error":
                    raise AssertionError("\n".join(reply["content"]["traceback"]))
                if reply["msg_type"] in ("display_data", "execute_result"):
                    shown.append(reply["content"]["data"])
                if reply["msg_type"] == "status" and reply["content"]["execution_state"] == "idle":
                    return shown

        run("import plotly.graph_objects as go\nfrom poslens.measurement.figure import Figure\nfig = Figure(go.Bar(x=[1, 2], y=[3, 4]))", "setup")

        def carries_plotlyjs(cell_id: str) -> list[bool]:
            return [PLOTLYJS_BANNER in data["text/html"] for data in run("display(fig)\nfig", cell_id)]

        assert carries_plotlyjs("first") == [True, False]  # two figures in one cell: plotly.js once
        assert carries_plotlyjs("second") == [False, False]
        assert carries_plotlyjs("first") == [True, False]  # the first cell run again
        assert carries_plotlyjs("second") == [False, False]
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)


def test_a_figure_outside_a_kernel_is_a_plotly_figure() -> None:
    import plotly.graph_objects as go

    from poslens.measurement.figure import Figure

    fig = Figure(go.Bar(x=[1], y=[2]))
    assert isinstance(fig, go.Figure) and fig.to_dict()["data"][0]["type"] == "bar"
    html = fig.notebook_html(include_plotlyjs=False)
    assert "Plotly.newPlot" in html and PLOTLYJS_BANNER not in html
    assert "Restart &amp; Run All" not in html and "Restart & Run All" in html  # the note shown if plotly.js is missing


def test_bar_class_without_ipywidgets_is_the_text_bar(monkeypatch: pytest.MonkeyPatch) -> None:
    from poslens import progress

    assert progress.bar_class().__module__ != "tqdm.std" or not progress.has_ipywidgets()
    monkeypatch.setitem(sys.modules, "ipywidgets", None)  # as if it were not installed
    assert not progress.has_ipywidgets()
    assert progress.bar_class().__module__ == "tqdm.std"
    assert not progress.in_notebook_kernel()  # pytest is no kernel: a text bar keeps tqdm's own redraw interval
    bar = progress.progress_bar(range(3), file=io.StringIO())
    assert list(bar) == [0, 1, 2] and bar.mininterval == 0.1
