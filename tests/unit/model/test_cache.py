"""The on-disk cache of dequantized models: build once, atomic, self-checking, safe under concurrency.

Each test points ``POSLENS_CACHE`` at its own temporary folder; build
functions record every call in a counter file, which is how "built once" is
observed, in this process or in others.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import threading
import time
from pathlib import Path

import pytest

from poslens.model import cache as model_cache
from poslens.model.cache import MANIFEST, cache_root, cached_folder, entry_is_valid, file_sha256

PAYLOAD = b"weights" * 1000


def counting_build(counter: Path, sleep: float = 0.0):
    """A build that appends a line to ``counter`` each time it runs, then writes two files."""

    def build(tmp: Path) -> None:
        with open(counter, "a") as handle:
            handle.write("built\n")
        time.sleep(sleep)
        (tmp / "model.safetensors").write_bytes(PAYLOAD)
        (tmp / "sub").mkdir()
        (tmp / "sub" / "config.json").write_text('{"a": 1}')

    return build


def builds(counter: Path) -> int:
    return len(counter.read_text().splitlines()) if counter.exists() else 0


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    root = tmp_path / "cache"
    monkeypatch.setenv("POSLENS_CACHE", str(root))
    return root


def test_cache_root_follows_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("POSLENS_CACHE", str(tmp_path / "explicit"))
    assert cache_root() == tmp_path / "explicit" and cache_root().is_dir()
    monkeypatch.delenv("POSLENS_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_root() == tmp_path / "xdg" / "poslens"


def test_builds_once(cache, tmp_path):
    counter = tmp_path / "count.txt"
    first = cached_folder("demo", counting_build(counter), extra={"source": "unit test"})
    assert builds(counter) == 1
    second = cached_folder("demo", counting_build(counter))
    assert builds(counter) == 1
    assert first == second and first.parent.parent == cache
    assert (first / "model.safetensors").read_bytes() == PAYLOAD
    manifest = json.loads((first / MANIFEST).read_text())
    assert manifest["key"] == "demo" and manifest["source"] == "unit test"
    assert manifest["files"] == {
        "model.safetensors": hashlib.sha256(PAYLOAD).hexdigest(),
        "sub/config.json": hashlib.sha256(b'{"a": 1}').hexdigest(),
    }
    assert entry_is_valid(first)
    # A different key is a different entry.
    cached_folder("other", counting_build(counter))
    assert builds(counter) == 2


def test_failed_build_leaves_no_entry(cache, tmp_path):
    def failing(tmp: Path) -> None:
        (tmp / "model.safetensors").write_bytes(PAYLOAD[:10])  # half written
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        cached_folder("demo", failing)
    models = cache / "models"
    assert not (models / "demo").exists()
    assert not any(p.name.startswith(".build-") for p in models.iterdir())  # temporary folder removed
    # The next call builds properly.
    counter = tmp_path / "count.txt"
    folder = cached_folder("demo", counting_build(counter))
    assert builds(counter) == 1 and (folder / "model.safetensors").read_bytes() == PAYLOAD


@pytest.mark.parametrize("damage", ["overwrite", "truncate", "delete", "manifest"])
def test_damaged_entry_is_detected_and_rebuilt(cache, tmp_path, damage):
    counter = tmp_path / "count.txt"
    folder = cached_folder("demo", counting_build(counter))
    weights = folder / "model.safetensors"
    if damage == "overwrite":
        with open(weights, "r+b") as handle:  # same size, a few bytes changed
            handle.seek(100)
            handle.write(b"XXXX")
        assert weights.stat().st_size == len(PAYLOAD)
    elif damage == "truncate":
        weights.write_bytes(PAYLOAD[:-1])
    elif damage == "delete":
        (folder / "sub" / "config.json").unlink()
    else:
        (folder / MANIFEST).write_text("{not json")
    assert not entry_is_valid(folder)
    again = cached_folder("demo", counting_build(counter))
    assert builds(counter) == 2
    assert again == folder and entry_is_valid(again)
    assert weights.read_bytes() == PAYLOAD


def test_folder_without_manifest_is_not_an_entry(cache, tmp_path):
    # E.g. a folder left by an older version, or copied in by hand.
    stale = cache / "models" / "demo"
    stale.mkdir(parents=True)
    (stale / "model.safetensors").write_bytes(b"old")
    assert not entry_is_valid(stale)
    counter = tmp_path / "count.txt"
    folder = cached_folder("demo", counting_build(counter))
    assert builds(counter) == 1 and (folder / "model.safetensors").read_bytes() == PAYLOAD


def test_concurrent_threads_build_once(cache, tmp_path):
    counter = tmp_path / "count.txt"
    build = counting_build(counter, sleep=0.5)
    results: list[Path] = []
    errors: list[BaseException] = []
    start = threading.Barrier(4)

    def worker() -> None:
        try:
            start.wait()
            results.append(cached_folder("demo", build))
        except BaseException as error:  # noqa: BLE001 - reported below
            errors.append(error)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert not errors
    assert builds(counter) == 1
    assert len(results) == 4 and len(set(results)) == 1 and entry_is_valid(results[0])


def _process_worker(cache_dir: str, counter: str, barrier, queue) -> None:
    import os

    os.environ["POSLENS_CACHE"] = cache_dir
    try:
        barrier.wait(timeout=30)
        folder = cached_folder("demo", counting_build(Path(counter), sleep=1.0))
        queue.put(("ok", str(folder)))
    except BaseException as error:  # noqa: BLE001 - reported to the parent
        queue.put(("error", repr(error)))


def test_concurrent_processes_build_once(cache, tmp_path):
    # fork: the children only run the cache code, never torch.
    context = multiprocessing.get_context("fork")
    counter = tmp_path / "count.txt"
    barrier = context.Barrier(3)
    queue = context.Queue()
    processes = [context.Process(target=_process_worker, args=(str(cache), str(counter), barrier, queue)) for _ in range(3)]
    for process in processes:
        process.start()
    outcomes = [queue.get(timeout=60) for _ in processes]
    for process in processes:
        process.join(timeout=30)
        assert process.exitcode == 0
    assert all(kind == "ok" for kind, _ in outcomes), outcomes
    assert builds(counter) == 1
    folders = {folder for _, folder in outcomes}
    assert len(folders) == 1 and entry_is_valid(Path(folders.pop()))


def test_file_sha256_matches_hashlib_and_notices_changes(cache, tmp_path):
    path = tmp_path / "weights.gguf"
    path.write_bytes(PAYLOAD)
    assert file_sha256(path) == hashlib.sha256(PAYLOAD).hexdigest()
    assert file_sha256(path) == hashlib.sha256(PAYLOAD).hexdigest()  # from the memo
    path.write_bytes(PAYLOAD + b"!")  # size changes, so the memo key does
    assert file_sha256(path) == hashlib.sha256(PAYLOAD + b"!").hexdigest()


def test_embedded_model_comes_from_a_valid_entry(smollm2):
    # The model was loaded from a cache entry that records the GGUF's hash.
    folder = Path(smollm2.hf_model.name_or_path)
    assert folder.parent == model_cache.cache_root() / "models"
    assert folder.name.startswith("smollm2-135m-") and folder.name.endswith("-float32")
    manifest = json.loads((folder / MANIFEST).read_text())
    source = Path(smollm2.source)
    digest = hashlib.sha256(source.read_bytes()).hexdigest()
    assert manifest["source_sha256"] == digest and digest[:16] in folder.name
    assert "config.json" in manifest["files"] and any(name.endswith(".safetensors") for name in manifest["files"])
    assert entry_is_valid(folder)
    # The cached folder is a plain float32 model: no GGUF quantization marker left.
    config = json.loads((folder / "config.json").read_text())
    assert "quantization_config" not in config
