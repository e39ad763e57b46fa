"""Execute the tutorial notebooks and store their outputs, so the docs site shows their tables and figures.

Usage (from the repository root, with the venv's Python, which has poslens installed)::

    python docs/execute_tutorials.py                      # all of docs/tutorials/*.ipynb
    python docs/execute_tutorials.py 01_first_look        # one or more, by name

Each notebook runs top to bottom with nbclient in a fresh ``python3`` kernel
that starts this interpreter, offline (``HF_HUB_OFFLINE=1``). Its outputs are
written back into the ``.ipynb`` and the SHA-256 of its code cells' sources is
recorded in ``metadata["poslens"]["source_sha256"]``; tests/notebooks/test_notebooks.py
compares it with the current code cells, so a cell edited without running this
script fails the tests.

Plotly figures are stored as plotly's JSON (what JupyterLab draws) plus an HTML
rendering (what the docs site shows, mkdocs-jupyter runs with ``execute:
false``). ``Result.plot`` figures bring their own HTML rendering
(:class:`poslens.measurement.figure.Figure`); plotly.express figures do not, so
:func:`add_figure_html` renders every figure again, the same way, with plotly.js
inlined once per notebook, in its first figure, so each page works offline
without carrying a copy of plotly.js per figure.

Progress bars are off while the tutorials run (``TQDM_DISABLE=1``; the
tutorials also pass ``progress=False``): a saved notebook keeps a widget's
first frame, or every redraw of a text bar, neither of which helps a reader.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path

TUTORIALS = Path(__file__).resolve().parent / "tutorials"
PLOTLY_MIME = "application/vnd.plotly.v1+json"


def source_sha256(nb) -> str:
    """SHA-256 of the sources of a notebook's code cells, in order (markdown cells do not count).

    Example:
        >>> import nbformat
        >>> nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1 + 1"), nbformat.v4.new_markdown_cell("text")])
        >>> source_sha256(nb) == hashlib.sha256(json.dumps(["1 + 1"]).encode()).hexdigest()
        True
    """
    sources = [cell.source for cell in nb.cells if cell.cell_type == "code"]
    return hashlib.sha256(json.dumps(sources).encode()).hexdigest()


def write_python3_kernelspec(home: Path, display_name: str = "Python 3 (poslens)") -> Path:
    """Write a ``python3`` kernelspec that starts this interpreter under ``home`` (a folder to put first on ``JUPYTER_PATH``).

    Example:
        >>> home = Path(tempfile.mkdtemp())
        >>> json.loads((write_python3_kernelspec(home) / "kernels" / "python3" / "kernel.json").read_text())["argv"][0] == sys.executable
        True
    """
    spec = home / "kernels" / "python3"
    spec.mkdir(parents=True, exist_ok=True)
    (spec / "kernel.json").write_text(
        json.dumps(
            {
                "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                "display_name": display_name,
                "language": "python",
            }
        )
    )
    return home


def add_figure_html(nb) -> int:
    """Give every plotly output an HTML rendering; plotly.js goes into the first one only. Returns the figure count.

    Example:
        >>> import nbformat, plotly.graph_objects as go
        >>> figure = {PLOTLY_MIME: go.Figure(go.Bar(x=[1], y=[2])).to_plotly_json()}
        >>> cell = nbformat.v4.new_code_cell("fig", outputs=[nbformat.v4.new_output("display_data", data=dict(figure)) for _ in "ab"])
        >>> nb = nbformat.v4.new_notebook(cells=[cell])
        >>> add_figure_html(nb), [len(out.data["text/html"]) > 1_000_000 for out in cell.outputs]
        (2, [True, False])
    """
    import plotly.io as pio

    count = 0
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            if out.get("output_type") in ("display_data", "execute_result") and PLOTLY_MIME in out.get("data", {}):
                out.data["text/html"] = pio.to_html(
                    out.data[PLOTLY_MIME],
                    include_plotlyjs=count == 0,
                    include_mathjax=False,
                    full_html=False,
                    div_id=f"poslens-figure-{count}",
                    config={"displaylogo": False},
                    validate=False,
                )
                count += 1
    return count


def execute(path: Path) -> None:
    """Run one notebook and write it back with its outputs and the hash of its code cells."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as workdir:
        client = NotebookClient(nb, kernel_name="python3", timeout=1200, record_timing=False, resources={"metadata": {"path": workdir}})
        client.execute()  # raises CellExecutionError, naming the cell, on the first failure
    figures = add_figure_html(nb)
    nb.metadata["poslens"] = {"source_sha256": source_sha256(nb)}
    nbformat.validate(nb)
    nbformat.write(nb, path)
    size = path.stat().st_size / 1e6
    print(f"{path.name}: {time.perf_counter() - start:.0f} s, {figures} figures, {size:.1f} MB", flush=True)


def main(names: list[str]) -> None:
    paths = sorted(TUTORIALS.glob("*.ipynb"))
    if names:
        wanted = {name.removesuffix(".ipynb") for name in names}
        unknown = wanted - {p.stem for p in paths}
        if unknown:
            sys.exit(f"no tutorial {', '.join(sorted(unknown))}; tutorials: {', '.join(p.stem for p in paths)}")
        paths = [p for p in paths if p.stem in wanted]
    kernel_home = write_python3_kernelspec(Path(tempfile.mkdtemp(prefix="poslens-kernel-")))
    os.environ["JUPYTER_PATH"] = os.pathsep.join([str(kernel_home)] + [p for p in [os.environ.get("JUPYTER_PATH")] if p])
    os.environ["HF_HUB_OFFLINE"] = "1"  # the kernel inherits the environment: never reach the hub
    os.environ["PLOTLY_RENDERER"] = "plotly_mimetype"  # figures as JSON; add_figure_html renders them for the site
    os.environ["TQDM_DISABLE"] = "1"  # no progress bars of the libraries poslens calls (transformers) in the stored pages
    for path in paths:
        execute(path)


if __name__ == "__main__":
    main(sys.argv[1:])
