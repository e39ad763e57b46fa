"""A stored family: float16 weights, a sha256 for every file, checked before a measurement reads it.

A real (tiny) family is trained, stored, loaded back with poslens.load_model and compared with the float32 original
by an independent forward; then a byte of a stored file is changed and zoo-measure's check must refuse it.
"""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

import poslens
from poslens.errors import InputError
from poslens.zoo.settings import ZooSettings
from poslens.zoo.store import HASHES_FILE, store_family, verify_family
from poslens.zoo.train import train_family

SETTINGS = dict(task="bigram-backcopy", steps=3, warmup=0, seq_len=16, width=16, depth=1, heads=2, batch_size=2)


@pytest.fixture(scope="module")
def family(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("zoo")
    settings = ZooSettings(members=("standard", "sliding"), seeds=(0, 1), eval_every=3, eval_seqs=2, device="cpu", **SETTINGS)
    train_family(root / "trained", settings, log=lambda line: None, show_progress=False)
    hashes = store_family(root / "trained", root / "stored")
    return root / "trained", root / "stored", hashes


def test_weights_are_float16_and_every_file_is_hashed(family) -> None:
    trained, stored, hashes = family
    listed = json.loads((stored / HASHES_FILE).read_text())
    assert listed == hashes and len(hashes) > 4
    files = sorted(str(p.relative_to(stored)) for p in stored.rglob("*") if p.is_file() and p.name != HASHES_FILE)
    assert sorted(hashes) == files
    assert not (stored / "resume.pt").exists()
    for run in ("standard-s0", "sliding-s1"):
        original, half = load_file(trained / run / "model.safetensors"), load_file(stored / run / "model.safetensors")
        assert set(original) == set(half)
        for name, tensor in half.items():
            assert tensor.dtype == torch.float16
            assert torch.equal(tensor, original[name].to(torch.float16))
    assert verify_family(stored) == len(hashes)


def test_the_stored_model_loads_and_computes_what_the_float16_weights_say(family) -> None:
    trained, stored, _ = family
    from transformers import AutoModelForCausalLM

    model = poslens.load_model(stored / "standard-s0")
    reference = AutoModelForCausalLM.from_pretrained(trained / "standard-s0", torch_dtype=torch.float32)  # the float32 original, by HF alone
    tokens = torch.tensor([[0, 3, 5, 7, 9, 11, 2, 4]])
    with torch.no_grad():
        got = model.bridge(tokens).float()
        want = reference(tokens).logits.float()
    # float16 rounding of the weights moves the logits a little, never more than a few parts in a thousand here
    assert torch.isfinite(got).all() and (got - want).abs().max() < 5e-2
    assert not torch.equal(got, want)  # the stored weights are the rounded ones, read as they are


def test_a_changed_or_missing_file_is_refused(family, tmp_path) -> None:
    import shutil

    _, stored, _ = family
    copy = tmp_path / "copy"
    shutil.copytree(stored, copy)
    weights = copy / "sliding-s0" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1
    weights.write_bytes(bytes(data))
    with pytest.raises(InputError, match="sliding-s0/model.safetensors changed"):
        verify_family(copy)
    weights.unlink()
    with pytest.raises(InputError, match="missing"):
        verify_family(copy)


def test_an_unfinished_family_or_a_full_target_is_refused(family, tmp_path) -> None:
    trained, stored, _ = family
    with pytest.raises(InputError, match="holds files"):
        store_family(trained, stored)
    unfinished = tmp_path / "unfinished"
    unfinished.mkdir()
    for name in ("zoo.json", "summary.csv"):
        (unfinished / name).write_bytes((trained / name).read_bytes())
    (unfinished / "resume.pt").write_bytes(b"")
    with pytest.raises(InputError, match="unfinished"):
        store_family(unfinished, tmp_path / "out")
