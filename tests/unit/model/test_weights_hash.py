"""state_dict_sha256 reuses its last hash only while the weights' checksums hold: every kind of edit is hashed afresh."""

from __future__ import annotations

import hashlib

import pytest
import torch

from poslens.compiled import fused_available
from poslens.model import weights_hash
from poslens.model.weights_hash import CHECKSUM_WORDS, state_dict_sha256, weights_checksum


def _sha256_by_hand(module: torch.nn.Module) -> str:
    """The hash as defined, read through sha256 every time: each distinct tensor's digest, sorted, hashed."""
    digests, seen = [], set()
    for tensor in [*module.state_dict().values(), *module.buffers()]:
        key = (tensor.data_ptr(), tuple(tensor.shape), tensor.dtype, tuple(tensor.stride()))
        if key in seen:
            continue
        seen.add(key)
        data = tensor.detach().contiguous()
        one = hashlib.sha256(f"{data.dtype}|{tuple(data.shape)}|".encode())
        one.update(data.reshape(-1).view(torch.uint8).numpy().tobytes())
        digests.append(one.hexdigest())
    return hashlib.sha256("".join(sorted(digests)).encode()).hexdigest()


def test_every_edit_gives_the_hash_of_the_weights_as_they_are_now():
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(64, 48), torch.nn.Linear(48, 3))  # whole checksum runs, and a tail
    module.register_buffer("odd", torch.arange(7, dtype=torch.int16))  # 14 bytes: no whole run at all
    first = state_dict_sha256(module)
    assert first == _sha256_by_hand(module) and state_dict_sha256(module) == first  # unchanged: the same hash
    weight, bias = module[0].weight, module[1].bias

    def edits():
        with torch.no_grad():
            yield weight.add_(0.0)  # an in-place operation that changes nothing: the hash stays
            yield weight.mul_(2.0)
        yield weight.data.__setitem__((5, 7), 1.5)  # through .data: the version counter does not move
        yield weight.data.__setitem__(slice(None), weight.data[torch.randperm(48)].clone())  # rows permuted in place
        row = weight.data[3].clone()
        yield weight.data[3].copy_(torch.roll(row, 2))  # 64-bit words moved within one checksum run
        yield weight.data.__setitem__([0, 1], weight.data[[1, 0]].clone())  # rows 0 and 1 swapped: one run, the same words
        yield weight.detach().numpy().__setitem__((0, 0), -3.0)  # through a numpy view
        yield bias.data.__setitem__(2, 9.0)  # in the tail after the last whole run
        yield module.odd.data.__setitem__(0, 5)  # a buffer too small for a whole run

    hashes = [first]
    for _ in edits():
        now = state_dict_sha256(module)
        assert now == _sha256_by_hand(module)
        hashes.append(now)
    assert hashes[1] == first and len(set(hashes)) == len(hashes) - 1  # every edit but the no-op moved it
    module.load_state_dict(torch.nn.Sequential(torch.nn.Linear(64, 48), torch.nn.Linear(48, 3)).state_dict(), strict=False)
    assert state_dict_sha256(module) == _sha256_by_hand(module) != hashes[-1]


@pytest.mark.skipif(not fused_available(), reason="numba is not installed")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64], ids=["float32", "bfloat16", "int64"])
def test_the_compiled_checksum_equals_the_modular_sum_written_out(dtype, monkeypatch):
    """Each run's Σ (2k + 1)·w_k mod 2⁶⁴, from the compiled loop and from torch's integer product (``POSLENS_FUSED=0``),
    equals the same sum written out in Python integers, on words of every sign and a tail shorter than a run."""
    g = torch.Generator().manual_seed(5)
    tensor = (torch.randn(3 * 8 * CHECKSUM_WORDS // torch.tensor([], dtype=dtype).element_size() + 7, generator=g) * 1e6).to(dtype)
    words = tensor.reshape(-1).view(torch.uint8)[: 3 * 8 * CHECKSUM_WORDS].view(torch.int64).view(3, CHECKSUM_WORDS).tolist()
    want = [sum((2 * k + 1) * w for k, w in enumerate(run)) % 2**64 for run in words]
    want = [w - 2**64 if w >= 2**63 else w for w in want]  # as int64
    compiled_route = weights_checksum(tensor)
    monkeypatch.setattr(weights_hash, "fused_available", lambda: False)
    torch_route = weights_checksum(tensor)
    assert compiled_route[2].tolist() == torch_route[2].tolist() == want
    assert torch.equal(compiled_route[3], torch_route[3]) and compiled_route[3].numel() > 0
