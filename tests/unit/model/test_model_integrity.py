"""Input integrity of models: cache entries, model folders, variants and the fingerprint's length.

Every test uses real files: tiny model folders saved to disk, real cache entries
(``POSLENS_CACHE`` points at a temporary folder), weights files with bytes
flipped, truncated or zeroed, and cache folders that cannot be written. Tests
run as root here, and root ignores ``chmod``, so an unwritable cache is made in
ways that stop root too: a path under a regular file (it cannot be created),
``/proc`` (it exists and nothing can be created in it), a lock file that is a
folder, and a memo file that is a folder. ``chmod 0o500`` is used only when the
tests do not run as root.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest
import torch

import poslens
from poslens.errors import InputError, ModelFileError, PoslensError
from poslens.model import cache as model_cache
from poslens.model.cache import MANIFEST, CacheNotWritableError, cache_root, cached_folder, entry_is_valid, file_sha256
from poslens.model.guards import check_seq_len
from poslens.model.model_files import model_files
from poslens.model.pos_model import ModelNotSupportedError
from poslens.model.variants import VariantNotSupportedError, parse_variant
from poslens.testing import save_tiny_model

Q_PROJ = "model.layers.0.self_attn.q_proj.weight"
AS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    root = tmp_path / "cache"
    monkeypatch.setenv("POSLENS_CACHE", str(root))
    return root


def safetensors_header(path: Path) -> tuple[int, dict]:
    """The header length and the header of a safetensors file."""
    with open(path, "rb") as handle:
        length = int.from_bytes(handle.read(8), "little")
        return length, json.loads(handle.read(length))


def tensor_offset(path: Path, name: str) -> int:
    """The file offset of the first byte of tensor ``name``'s data."""
    length, header = safetensors_header(path)
    return 8 + length + header[name]["data_offsets"][0]


def q_proj(folder: Path) -> torch.Tensor:
    from safetensors.torch import load_file

    return load_file(str(folder / "model.safetensors"))[Q_PROJ]


def copy_model(source: Path, target: Path) -> Path:
    shutil.copytree(source, target)
    return target


def flat(text: str) -> str:
    """CLI output with rich's box drawing removed and whitespace collapsed (panels wrap long lines)."""
    return " ".join(re.sub(r"[│╭╮╰╯─]", " ", text).split())


def counting_tiny_build(counter: Path):
    def build(tmp: Path) -> None:
        with open(counter, "a") as handle:
            handle.write("built\n")
        save_tiny_model(tmp, "llama")

    return build


def builds(counter: Path) -> int:
    return len(counter.read_text().splitlines()) if counter.exists() else 0


# ---------------------------------------------------------------- 1. cache entries


def test_weight_taken_off_the_manifest_is_still_checked(cache, tmp_path):
    counter = tmp_path / "count.txt"
    folder = cached_folder("tiny", counting_tiny_build(counter))
    good = q_proj(folder).clone()
    weights = folder / "model.safetensors"
    # One byte of q_proj's first float: its exponent byte, so the weight becomes huge.
    with open(weights, "r+b") as handle:
        handle.seek(tensor_offset(weights, Q_PROJ) + 3)
        handle.write(b"\x7e")
    assert abs(q_proj(folder)[0, 0].item()) > 1e30
    # ... and the file taken off the manifest, so its hash is no longer compared.
    manifest = json.loads((folder / MANIFEST).read_text())
    del manifest["files"]["model.safetensors"]
    (folder / MANIFEST).write_text(json.dumps(manifest))
    assert not entry_is_valid(folder)
    again = cached_folder("tiny", counting_tiny_build(counter))
    assert builds(counter) == 2 and again == folder and entry_is_valid(again)
    assert torch.equal(q_proj(again), good)
    loaded = poslens.load_model(again).hf_model.state_dict()
    # The bridge wraps each module (…layers.0._original_component.self_attn…): match the name without the wrappers.
    (name,) = [key for key in loaded if key.replace("._original_component", "") == Q_PROJ]
    assert torch.equal(loaded[name], good)


def test_file_added_to_an_entry_makes_it_invalid(cache, tmp_path):
    counter = tmp_path / "count.txt"
    folder = cached_folder("tiny", counting_tiny_build(counter))
    (folder / "model-00002-of-00002.safetensors").write_bytes(b"not written by the build")
    assert not entry_is_valid(folder)
    cached_folder("tiny", counting_tiny_build(counter))
    assert builds(counter) == 2 and entry_is_valid(folder)
    assert not (folder / "model-00002-of-00002.safetensors").exists()


def test_stale_build_folders_of_the_key_are_removed(cache, tmp_path):
    models = cache / "models"
    models.mkdir(parents=True)
    # What a build killed after tempfile.mkdtemp leaves: a half-written model folder.
    stale = models / ".build-tiny-k1ll3d_0"
    stale.mkdir()
    (stale / "model.safetensors").write_bytes(b"half")
    other_key = models / ".build-tiny-other-ab12cd34"  # another key's build: not ours to remove
    other_key.mkdir()
    counter = tmp_path / "count.txt"
    cached_folder("tiny", counting_tiny_build(counter))
    assert not stale.exists() and other_key.exists()
    # Removed also when the entry is already valid.
    stale.mkdir()
    cached_folder("tiny", counting_tiny_build(counter))
    assert builds(counter) == 1 and not stale.exists() and other_key.exists()


def test_cache_that_cannot_be_created(tmp_path, monkeypatch):
    blocker = tmp_path / "file.txt"
    blocker.write_text("a regular file: no folder can be made under it, not even by root")
    root = blocker / "cache"
    monkeypatch.setenv("POSLENS_CACHE", str(root))
    with pytest.raises(CacheNotWritableError) as info:
        cache_root()
    message = str(info.value)
    assert str(root) in message and "set POSLENS_CACHE to a folder you can write to" in message
    assert isinstance(info.value, OSError) and isinstance(info.value, PoslensError)
    with pytest.raises(CacheNotWritableError, match="set POSLENS_CACHE"):
        cached_folder("tiny", lambda tmp: None)
    # Hashing a source file needs no cache: it is hashed, just not remembered.
    source = tmp_path / "source.bin"
    source.write_bytes(b"abc")
    assert file_sha256(source).startswith("ba7816bf8f01")


def _unwritable_folder(tmp_path: Path) -> Path:
    if not AS_ROOT:
        folder = tmp_path / "readonly"
        folder.mkdir()
        folder.chmod(0o500)
        return folder
    if not Path("/proc/self").is_dir():
        pytest.skip("running as root without /proc: no real folder here is unwritable to root")
    return Path("/proc")  # exists; nothing can be created in it, by root either


def test_cache_that_cannot_be_written(tmp_path, monkeypatch):
    root = _unwritable_folder(tmp_path)
    monkeypatch.setenv("POSLENS_CACHE", str(root))
    try:
        assert cache_root() == root  # it exists: nothing to create yet
        with pytest.raises(CacheNotWritableError) as info:
            cached_folder("tiny", lambda tmp: save_tiny_model(tmp, "llama"))
        message = str(info.value)
        assert str(root / "models") in message and "set POSLENS_CACHE to a folder you can write to" in message
        if _smollm2_installed():  # the whole path: the GGUF is hashed (no memo), then its entry cannot be built
            with pytest.raises(CacheNotWritableError, match="set POSLENS_CACHE to a folder you can write to"):
                poslens.load_model("smollm2-135m")
        source = tmp_path / "source.bin"
        source.write_bytes(b"abc")
        assert file_sha256(source).startswith("ba7816bf8f01")  # the memo cannot be written: no memo, no error
    finally:
        if not AS_ROOT:
            root.chmod(0o700)


def _smollm2_installed() -> bool:
    from poslens.model.registry import REGISTRY

    return REGISTRY["smollm2-135m"].installed()


def test_valid_entry_is_used_where_no_lock_can_be_made(cache, tmp_path):
    counter = tmp_path / "count.txt"
    folder = cached_folder("tiny", counting_tiny_build(counter))
    lock = cache / "models" / ".tiny.lock"
    lock.unlink(missing_ok=True)
    lock.mkdir()  # a folder where the lock file should be: opening it fails, for root too
    assert cached_folder("tiny", counting_tiny_build(counter)) == folder and builds(counter) == 1
    # An entry that must be rebuilt cannot be, and the error says so.
    (folder / "extra.txt").write_text("x")
    with pytest.raises(CacheNotWritableError) as info:
        cached_folder("tiny", counting_tiny_build(counter))
    assert str(cache / "models") in str(info.value) and builds(counter) == 1


def test_file_sha256_when_the_memo_cannot_be_written(cache, tmp_path):
    cache.mkdir(parents=True)
    (cache / "sha256.json").mkdir()  # the memo's name is taken by a folder: reading and replacing it fail
    source = tmp_path / "source.bin"
    source.write_bytes(b"abc")
    assert file_sha256(source).startswith("ba7816bf8f01")
    source.write_bytes(b"abd")
    assert not file_sha256(source).startswith("ba7816bf8f01")


def test_module_docstring_states_what_is_hashed_when():
    doc = model_cache.__doc__
    assert "every file is hashed on every load" in doc
    assert "by its resolved path, size and\n  modification time" in doc


# ---------------------------------------------------------------- 2. model folders


TOKENIZER_NAMES = {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.model", "vocab.json", "merges.txt"}


def test_folder_without_tokenizer_is_refused_before_the_weights_are_read(tiny_llama_dir, tmp_path, monkeypatch):
    from transformers import AutoModelForCausalLM

    folder = copy_model(tiny_llama_dir, tmp_path / "no-tokenizer")
    for name in TOKENIZER_NAMES:
        (folder / name).unlink(missing_ok=True)
    loads: list[object] = []
    original = AutoModelForCausalLM.from_pretrained.__func__

    def spy(cls, *args, **kwargs):
        loads.append(args)
        return original(cls, *args, **kwargs)

    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", classmethod(spy))
    with pytest.raises(ModelFileError) as info:
        poslens.load_model(folder)
    message = str(info.value)
    assert str(folder) in message and "no tokenizer files" in message
    assert f"tokenizer.save_pretrained({str(folder)!r})" in message
    assert "sentencepiece or tiktoken installed" not in message  # the old message, given after the weights loaded
    assert loads == []  # refused before any weights were read


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _zero(path: Path) -> None:
    path.write_bytes(bytes(path.stat().st_size))


def _empty(path: Path) -> None:
    path.write_bytes(b"")


def _extra_bytes(path: Path) -> None:
    with open(path, "ab") as handle:
        handle.write(b"\0" * 16)


@pytest.mark.parametrize(
    "damage, detail",
    [
        (_truncate, "but its header describes"),
        (_zero, "are zero (a zeroed file)"),
        (_empty, "it has 0 bytes"),
        (_extra_bytes, "16 more than its header describes"),
    ],
    ids=["truncated", "zeroed", "empty", "extra-bytes"],
)
def test_damaged_safetensors_is_named(tiny_llama_dir, tmp_path, damage, detail):
    folder = copy_model(tiny_llama_dir, tmp_path / "damaged")
    damage(folder / "model.safetensors")
    with pytest.raises(ModelFileError) as info:
        poslens.load_model(folder)
    message = str(info.value)
    assert str(folder / "model.safetensors") in message and "truncated or damaged" in message and detail in message
    assert "Save the model again (model.save_pretrained(folder))" in message


def test_damage_the_header_check_cannot_see_is_caught_at_the_load(tiny_llama_dir, tmp_path):
    folder = copy_model(tiny_llama_dir, tmp_path / "bad-shape")
    weights = folder / "model.safetensors"
    length, header = safetensors_header(weights)
    header[Q_PROJ]["shape"] = [1, 1]  # the data's length no longer matches shape × dtype; the offsets are kept
    text = json.dumps(header, separators=(",", ":")).encode()
    assert len(text) <= length
    data = weights.read_bytes()
    weights.write_bytes(data[:8] + text.ljust(length, b" ") + data[8 + length :])
    with pytest.raises(ModelFileError) as info:
        poslens.load_model(folder)
    message = str(info.value)
    assert str(folder) in message and "truncated or damaged" in message and "Save the model again" in message


@pytest.fixture(scope="module")
def sharded_dir(tmp_path_factory, tiny_llama_dir) -> Path:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = tmp_path_factory.mktemp("sharded")
    AutoModelForCausalLM.from_pretrained(tiny_llama_dir).save_pretrained(folder, max_shard_size="200KB")
    AutoTokenizer.from_pretrained(tiny_llama_dir).save_pretrained(folder)
    assert (folder / "model.safetensors.index.json").exists() and not (folder / "model.safetensors").exists()
    return folder


def test_sharded_model_with_a_damaged_or_missing_shard(sharded_dir, tmp_path):
    assert poslens.load_model(sharded_dir).n_layers == 3  # the intact sharded folder loads
    index = json.loads((sharded_dir / "model.safetensors.index.json").read_text())
    shards = sorted(set(index["weight_map"].values()))
    assert len(shards) >= 2

    truncated = copy_model(sharded_dir, tmp_path / "truncated")
    _truncate(truncated / shards[-1])
    with pytest.raises(ModelFileError) as info:
        poslens.load_model(truncated)
    assert str(truncated / shards[-1]) in str(info.value) and "truncated or damaged" in str(info.value)

    missing = copy_model(sharded_dir, tmp_path / "missing")
    (missing / shards[0]).unlink()
    with pytest.raises(ModelFileError) as info:
        poslens.load_model(missing)
    message = str(info.value)
    assert f"is missing 1 of the {len(shards)} weight shards" in message and shards[0] in message
    assert "model.safetensors.index.json" in message


def test_error_classes_join_the_hierarchy():
    for cls in (ModelNotSupportedError, VariantNotSupportedError):
        assert issubclass(cls, PoslensError) and issubclass(cls, ValueError)
    assert issubclass(CacheNotWritableError, PoslensError) and issubclass(CacheNotWritableError, OSError)


def test_model_files_lists_what_defines_the_model(tiny_llama_dir, tmp_path):
    folder = copy_model(tiny_llama_dir, tmp_path / "model")
    defining = sorted(path.name for path in folder.iterdir())
    (folder / "README.md").write_text("# model card")
    (folder / "LICENSE").write_text("license text")
    (folder / ".gitattributes").write_text("*.safetensors filter=lfs")
    (folder / "original").mkdir()
    (folder / "original" / "consolidated.pth").write_bytes(b"not read by transformers")
    (folder / "merges.txt").write_text("")  # a tokenizer file despite its .txt
    os.symlink(folder / "config.json", folder / "linked.json")  # as in a Hugging Face cache snapshot
    files = model_files(folder)
    assert [path.name for path in files] == sorted(defining + ["linked.json", "merges.txt"])
    assert all(path.parent == folder for path in files)
    with pytest.raises(ModelFileError, match="is not a folder"):
        model_files(folder / "config.json")


# ---------------------------------------------------------------- 3. variants


@pytest.mark.parametrize("spec", ["rope-base:1e-300", "rope-base:0.5", "rope-base:1"])
def test_rope_base_must_exceed_one(spec):
    with pytest.raises(InputError) as info:
        parse_variant(spec)
    message = str(info.value)
    assert f"variant {spec!r}: theta must be > 1" in message and "finite and > 1" in message
    assert "'rope-base:<theta>' (theta > 1)" in message
    assert parse_variant("rope-base:1.5").rope_base == 1.5


def test_bad_rope_base_is_a_usage_error_of_variant(tmp_path):
    from typer.testing import CliRunner

    from poslens.study.cli import app

    result = CliRunner().invoke(app, ["leakage", "--model", "no-such-model-xyz", "--variant", "rope-base:1e-300", "--out", str(tmp_path / "out")])
    text = flat(result.output)
    assert result.exit_code == 2, result.output
    assert "Invalid value for '--variant'" in text and "theta must be > 1" in text
    assert "unknown model" not in text


def test_ntk_that_leaves_no_rope_base_above_one_is_refused_before_loading(tiny_llama_dir):
    # θ = 1e4 · (1e-6)^(16/14) ≈ 1.4e-3
    with pytest.raises(VariantNotSupportedError) as info:
        poslens.load_model(tiny_llama_dir, variant="ntk:1e-6")
    message = str(info.value)
    assert "variant 'ntk:1e-06' gives llama a RoPE base of 0.0013895 (from 10000)" in message and "finite and > 1" in message


def test_window_one_is_refused_and_window_two_still_decomposes(tiny_llama_dir):
    with pytest.raises(InputError) as info:
        parse_variant("window:1")
    message = str(info.value)
    assert "W must be a whole number ≥ 2" in message and "each query sees only itself" in message
    assert "no pattern to decompose" in message and "'window:<W>' (W ≥ 2 tokens)" in message
    # window:2 is kept: every query past 0 sees two keys, and the table has its C_res and C_mask rows.
    model = poslens.load_model(tiny_llama_dir, variant="window:2")
    result = poslens.measure(model, poslens.make_corpus(model, "random", n_seqs=4, seq_len=32), groups=2, early=8, progress=False)
    assert {"c_res", "c_mask"} <= set(result.table["metric"])


# ---------------------------------------------------------------- 4. the fingerprint's length


@pytest.fixture(scope="module")
def ctx32_dir(tmp_path_factory) -> Path:
    return save_tiny_model(tmp_path_factory.mktemp("ctx32"), "llama", max_position_embeddings=32)


def test_fingerprint_length_beyond_the_context_names_its_option(ctx32_dir):
    from poslens.mechanisms.fingerprint import fingerprint

    model = poslens.load_model(ctx32_dir)
    with pytest.raises(InputError) as info:
        fingerprint(model, n_seqs=4, seq_len=48, groups=2)
    message = str(info.value)
    assert "sequence length 48 exceeds" in message and "context of 32 tokens" in message
    assert "use --fingerprint-len 32 or less" in message and "fingerprint_len=" in message
    assert "--seq-len" not in message
    # The general check keeps its message for the other callers.
    with pytest.raises(ValueError, match="use sequences of at most 32 tokens$"):
        check_seq_len(model, 48)


def test_cli_fingerprint_length_beyond_the_context_names_its_option(ctx32_dir, tmp_path):
    from typer.testing import CliRunner

    from poslens.study.cli import app

    result = CliRunner().invoke(
        app,
        [
            "fingerprint",
            "--model",
            str(ctx32_dir),
            "--n-seqs",
            "4",
            "--seq-len",
            "16",
            "--groups",
            "2",
            "--early",
            "8",
            "--fingerprint-seqs",
            "4",
            "--fingerprint-len",
            "48",
            "--out",
            str(tmp_path / "out"),
        ],
    )
    # The message poslens.study.cli.run prints as "error: <message>".
    assert result.exit_code == 1 and isinstance(result.exception, InputError), result.output
    assert "use --fingerprint-len 32 or less" in str(result.exception) and "--seq-len" not in str(result.exception)
