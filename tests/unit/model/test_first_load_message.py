"""The first load of an embedded model says on stderr what it is doing; a load from the cache says nothing.

The message comes from :func:`poslens.model.cache.cached_folder` when it is
given ``name=``: one line before the build (the model, what the build does, the
entry's folder) and one after (the entry's size and folder). A tiny build
function stands in for the 50-second dequantization; ``POSLENS_CACHE`` points at
a temporary folder.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from poslens.model.cache import cached_folder, folder_size, size_text


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    root = tmp_path / "cache"
    monkeypatch.setenv("POSLENS_CACHE", str(root))
    return root


def build(folder: Path) -> None:
    (folder / "config.json").write_text("{}")
    (folder / "model.safetensors").write_bytes(b"\0" * 5000)


def test_first_build_says_what_it_does_and_the_size(cache, capsys):
    folder = cached_folder("tiny-key", build, name="tiny-model", doing="dequantizing its weights")
    lines = capsys.readouterr().err.splitlines()
    assert folder == cache / "models" / "tiny-key"
    assert len(lines) == 2
    assert lines[0] == f"poslens: first load of tiny-model: dequantizing its weights into {folder} ..."
    assert lines[1] == f"poslens: cached tiny-model ({size_text(folder_size(folder))}) at {folder}"
    assert 5002 < folder_size(folder) < 6000  # the two files and the manifest
    assert "KiB" in lines[1]


def test_a_load_from_the_cache_says_nothing(cache, capsys):
    cached_folder("tiny-key", build, name="tiny-model")
    capsys.readouterr()
    again = cached_folder("tiny-key", build, name="tiny-model")
    assert capsys.readouterr().err == ""
    assert (again / "model.safetensors").stat().st_size == 5000


def test_a_damaged_entry_is_rebuilt_and_says_so(cache, capsys):
    folder = cached_folder("tiny-key", build, name="tiny-model", doing="dequantizing its weights")
    (folder / "model.safetensors").write_bytes(b"\1" * 5000)  # one changed byte is enough; all of them here
    capsys.readouterr()
    cached_folder("tiny-key", build, name="tiny-model", doing="dequantizing its weights")
    err = capsys.readouterr().err
    assert err.startswith(f"poslens: rebuilding the damaged cache entry of tiny-model: dequantizing its weights into {folder} ...\n")
    assert "poslens: cached tiny-model (" in err
    assert (folder / "model.safetensors").read_bytes() == b"\0" * 5000


def test_without_a_name_a_build_is_silent(cache, capsys):
    cached_folder("tiny-key", build)
    assert capsys.readouterr().err == ""


def test_a_failed_build_says_it_started_but_not_that_it_cached(cache, capsys):
    def failing(folder: Path) -> None:
        raise RuntimeError("the build broke")

    with pytest.raises(RuntimeError, match="the build broke"):
        cached_folder("tiny-key", failing, name="tiny-model")
    err = capsys.readouterr().err
    assert "first load of tiny-model" in err and "cached" not in err


@pytest.mark.parametrize(
    "n_bytes, text",
    [
        (0, "0 bytes"),
        (1023, "1023 bytes"),
        (1024, "1.0 KiB"),
        (542_000_000, "517 MiB"),
        (1_180_000_000, "1.1 GiB"),
        (5 << 40, "5.0 TiB"),
        (5000 << 40, "5000 TiB"),
    ],
)
def test_size_text(n_bytes, text):
    assert size_text(n_bytes) == text
