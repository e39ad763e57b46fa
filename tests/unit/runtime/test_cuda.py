"""poslens on CUDA: the streamed figures against the naive reference, the controls of methodology §4.4, CUDA against
the CPU, and a capture pass that never synchronizes with the host.

Every test skips where ``torch.cuda.is_available()`` is false, which is every
machine of this project but the GPU one that ``benchmarks/gpu_suite.sh``
runs on. ``POSLENS_TEST_DEVICE=cpu`` runs the same checks on the CPU instead
(the suite's dry run; there "CUDA against the CPU" compares the CPU with
itself, and the synchronization check, which needs CUDA, still skips).

- The naive reference (``naive_reference.py``: full scores, explicit one-hot
  least squares in numpy float64) against ``poslens.measure`` on the device, on
  a full-causal Llama and a sliding-window Mistral, with a small row-block
  budget so that the device's block bookkeeping is under test (as in
  ``test_leakage_reference.py``): every per-head figure to 1e-8.
- methodology §4.4's controls through the streamed code with the scores on the
  device (``test_decomposition_controls.py``'s synthetic heads): C_res = 0 to
  1e-8 of L for the exact-zero cases (a)–(d), a clear C_res with an interval
  that excludes 0 for (f) and (g); and on a real model, a head whose logits are
  set constant has C_res = 0 (``test_leakage_controls.py``'s intervention).
- CUDA against the CPU: the same tiny Llama in float64 (its RMSNorm and rotary
  tables computed in float64 too, so that both devices compute the same
  numbers up to float64 round-off) measured on each device: every value and
  interval bound to 1e-8; and the same float64 scores streamed on each device.
- The capture's hooks run under ``torch.cuda.set_sync_debug_mode("error")``:
  a pass over a batch raises at the first host synchronization.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import poslens
from poslens.capture.cell_sum_capture import CellSumCapture
from poslens.capture.row_bin_store import RowBinStore
from poslens.fit.binning import Binning
from poslens.measurement.pipeline import measure_scores
from poslens.model.hooks import attn_scores, run_with_hooks
from poslens.testing import save_tiny_model

sys.path.insert(0, str(Path(__file__).parents[2]))
import naive_reference as nr  # noqa: E402
import test_decomposition_controls as dc  # noqa: E402
from test_leakage_controls import ConstantLogits, frame  # noqa: E402
from test_leakage_reference import BLOCK_PER_HEAD, measure_in_blocks  # noqa: E402

DEVICE = os.environ.get("POSLENS_TEST_DEVICE", "cuda")
pytestmark = pytest.mark.skipif(
    DEVICE.startswith("cuda") and not torch.cuda.is_available(),
    reason="needs CUDA (torch.cuda.is_available() is false); POSLENS_TEST_DEVICE=cpu runs these checks on the CPU",
)
N_SEQS, SEQ_LEN, GROUPS, EARLY = 8, 40, 4, 18
TOL = 1e-8


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory):
    made: dict[str, Path] = {}

    def folder(kind: str) -> Path:
        if kind not in made:
            made[kind] = save_tiny_model(tmp_path_factory.mktemp(f"cuda_{kind}"), kind, seed=int(kind == "mistral"))
        return made[kind]

    return folder


def on_device(model: poslens.PosModel) -> bool:
    return next(model.hf_model.parameters()).device.type == torch.device(DEVICE).type


# -- the naive reference ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["llama", "mistral"])
def test_streamed_figures_on_the_device_match_the_naive_reference(folders, kind: str):
    model = poslens.load_model(folders(kind), device=DEVICE)
    assert on_device(model)
    corpus = poslens.make_corpus(model, "random", n_seqs=N_SEQS, seq_len=SEQ_LEN, position0="bos", seed=3)
    result = measure_in_blocks(model, corpus, BLOCK_PER_HEAD, groups=GROUPS, early=EARLY, batch_size=N_SEQS // GROUPS)
    table = nr.lookup(result.to_frame())
    scores = nr.capture_scores(model, corpus.tokens, GROUPS)  # the same batches, moved to the CPU in float64
    naive = nr.naive_table(scores, nr.ReferenceBins(SEQ_LEN, EARLY), GROUPS)
    bad, compared = [], 0
    for (layer, window), figures in naive.items():
        for metric in nr.PER_HEAD:
            for head, want in enumerate(figures[metric]):
                got = float(table[(layer, head, window, metric)][0])
                compared += 1
                if not abs(got - want) <= TOL:
                    bad.append(f"L{layer} h{head} {window} {metric}: {DEVICE} {got!r} vs naive {want!r}")
    assert compared == model.n_layers * 2 * len(nr.PER_HEAD) * model.n_heads
    assert not bad, f"{len(bad)} figures differ from the naive reference:\n" + "\n".join(bad[:30])


# -- methodology §4.4's controls ----------------------------------------------------------------------------------


@pytest.mark.parametrize("window", [None, 8], ids=["causal", "window8"])
@pytest.mark.parametrize("case", list(dc.ZERO_CASES))
def test_no_absolute_logit_means_no_residual_component_on_the_device(case: str, window: int | None):
    scores = dc.heads(dc.ZERO_CASES[case], window).to(DEVICE)
    result = measure_scores([scores], groups=dc.GROUPS, early=dc.EARLY, layer_windows=[window])
    for q in ("early", "all"):
        for metric in dc.V2:
            leakage = dc.figure(result, "leakage_pattern_saturated" if metric.endswith("saturated") else "leakage_pattern", q)[0]
            assert leakage > 1e-3, (case, q, leakage)  # the mask alone gives position: there is something to explain
            value, low, high = dc.figure(result, metric, q)
            assert max(abs(value), abs(low), abs(high)) <= 1e-8 * leakage, (case, q, metric, value, leakage)


@pytest.mark.parametrize("case", list(dc.NONZERO_CASES))
def test_absolute_logit_terms_give_a_clear_residual_component_on_the_device(case: str):
    result = measure_scores([dc.heads(dc.NONZERO_CASES[case]).to(DEVICE)], groups=dc.GROUPS, early=dc.EARLY)
    for metric in ("c_res", "c_res_meanfield"):
        value, low, high = dc.figure(result, metric, "all")
        leakage = dc.figure(result, "leakage_pattern", "all")[0]
        assert abs(value) >= 0.1 * leakage, (case, metric, value, leakage)
        assert not (low <= 0 <= high), (case, metric, low, high)


def test_streaming_on_the_device_equals_the_cpu_on_the_same_scores():
    """The same float64 scores (a zero case, a non-zero case and a sliding layer) streamed on each device."""
    layers = [dc.heads(dc.NONZERO_CASES["g key-0 logit growing with i"], noise=0.3), dc.heads(dc.ZERO_CASES["a relative"], 8, noise=0.3)]
    cpu = measure_scores(layers, groups=dc.GROUPS, early=dc.EARLY, layer_windows=[None, 8])
    device = measure_scores([x.to(DEVICE) for x in layers], groups=dc.GROUPS, early=dc.EARLY, layer_windows=[None, 8])
    a, b = frame(cpu), frame(device)
    assert a.index.equals(b.index) and len(a) > 100
    np.testing.assert_allclose(b.to_numpy(), a.to_numpy(), rtol=0, atol=1e-10)


def test_constant_logit_head_has_no_residual_component_on_the_device(folders):
    model = poslens.load_model(folders("llama"), device=DEVICE)
    corpus = poslens.make_corpus(model, "random", n_seqs=N_SEQS, seq_len=SEQ_LEN, position0="bos", seed=5)
    layer, head = 1, 0
    result = poslens.measure(model, corpus, groups=GROUPS, early=16, interventions=[ConstantLogits(layer, head)], progress=False)
    for window in ("early", "all"):
        rows = result.select("c_res", window, layer, head)
        c_res, low, high = (float(rows[col].iloc[0]) for col in ("value", "ci_low", "ci_high"))
        assert abs(c_res) < 1e-10 and abs(low) < 1e-10 and abs(high) < 1e-10, (window, c_res, low, high)
        count_share = float(result.select("count_share", window, layer, head)["value"].iloc[0])
        assert count_share == pytest.approx(1.0, abs=1e-8)
        # an untouched head of the same layer keeps a residual component: the check can tell them apart
        other = float(result.select("c_res", window, layer, 1)["value"].iloc[0])
        assert abs(other) > 1e-6, (window, other)


# -- CUDA against the CPU -----------------------------------------------------------------------------------------


def float64_llama(monkeypatch: pytest.MonkeyPatch) -> None:
    """transformers' Llama with its RMSNorm and rotary tables in the model's dtype (it computes both in float32).

    As ``hooked_models.float64_llama_reference``, with the frequencies made on the positions' device, so that
    a float64 model computes the same numbers on the CPU and on CUDA up to float64 round-off.
    """
    from transformers.models.llama import modeling_llama as ml

    def norm_forward(self, hidden_states):
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        return self.weight * (hidden_states * torch.rsqrt(variance + self.variance_epsilon))

    def rotary_forward(self, x, position_ids):
        dim = self.inv_freq.shape[0] * 2
        base = (self.config.rope_parameters or {}).get("rope_theta", 10000.0)
        inv = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float64, device=position_ids.device) / dim))
        emb = torch.cat([position_ids[..., None].to(torch.float64) * inv] * 2, dim=-1)
        return emb.cos().to(x.dtype), emb.sin().to(x.dtype)

    monkeypatch.setattr(ml.LlamaRMSNorm, "forward", norm_forward)
    monkeypatch.setattr(ml.LlamaRotaryEmbedding, "forward", rotary_forward)


def test_device_result_equals_cpu_result(folders, monkeypatch: pytest.MonkeyPatch):
    float64_llama(monkeypatch)
    tables = {}
    for device in ("cpu", DEVICE):
        model = poslens.load_model(folders("llama"), device=device, dtype=torch.float64)
        assert next(model.hf_model.parameters()).dtype == torch.float64
        corpus = poslens.make_corpus(model, "random", n_seqs=N_SEQS, seq_len=SEQ_LEN, position0="bos", seed=3)
        result = poslens.measure(model, corpus, groups=GROUPS, early=EARLY, batch_size=2, progress=False)
        tables[device] = frame(result)
    cpu, other = tables["cpu"], tables[DEVICE]
    assert cpu.index.equals(other.index), "the two devices' tables have different rows"
    assert np.array_equal(np.isnan(cpu.to_numpy()), np.isnan(other.to_numpy()))
    # figures that are not all zero, so that agreement to 1e-8 means something (this random model's C_res is ~1e-5)
    assert (cpu.xs("leakage_pattern", level="metric")["value"] > 1e-3).all()
    assert (cpu.xs("c_res", level="metric")["value"].abs() > 1e-7).any()
    diff = np.nanmax(np.abs(cpu.to_numpy() - other.to_numpy()))
    assert diff <= TOL, f"{DEVICE} and the CPU differ by up to {diff:.3g}"


# -- no host synchronization in the capture ----------------------------------------------------------------------


@pytest.mark.skipif(not torch.cuda.is_available(), reason="torch.cuda.set_sync_debug_mode needs CUDA")
def test_capture_pass_does_not_synchronize(folders):
    """A capture pass (the measurement's hooks, stopping after the last layer's scores, as collect_sums runs it) under
    ``torch.cuda.set_sync_debug_mode("error")``. The first batch runs outside the mode: it checks each layer's mask
    once (a one-off read back). Whatever the capture holds for the end of the batch (``flush``, where it has one)
    is handed over outside the mode too."""
    model = poslens.load_model(folders("llama"), device="cuda")
    corpus = poslens.make_corpus(model, "random", n_seqs=4, seq_len=SEQ_LEN, position0="bos", seed=3)
    store = RowBinStore()
    capture = CellSumCapture(model, Binning(SEQ_LEN, early=EARLY), groups=2, probe=True, store=store)
    stop = attn_scores(model.n_layers - 1)
    tokens = corpus.tokens.to("cuda")

    def end_of_batch() -> None:
        flush = getattr(capture, "flush", None)
        if flush is not None:
            flush()

    try:
        capture.group = 0
        capture.add_structure(2)
        run_with_hooks(model, tokens[:2], capture.hooks(), stop_after=stop)
        end_of_batch()
        torch.cuda.synchronize()
        assert not capture.sums.per_group.logit[1].any()  # group 1 is still empty
        # the mode must catch a synchronization here, or the check below proves nothing
        with pytest.raises(RuntimeError):
            torch.cuda.set_sync_debug_mode("error")
            try:
                torch.ones(1, device="cuda").item()
            finally:
                torch.cuda.set_sync_debug_mode("default")
        # a forward without hooks that synchronizes by itself (in transformers or the bridge) would hide the capture's
        try:
            torch.cuda.set_sync_debug_mode("error")
            run_with_hooks(model, tokens[2:], [], stop_after=stop)
        except RuntimeError as error:
            pytest.skip(f"the forward without hooks already synchronizes, so the capture's part cannot be told: {error}")
        finally:
            torch.cuda.set_sync_debug_mode("default")
        capture.group = 1
        capture.add_structure(2)
        torch.cuda.set_sync_debug_mode("error")
        try:
            run_with_hooks(model, tokens[2:], capture.hooks(), stop_after=stop)
        finally:
            torch.cuda.set_sync_debug_mode("default")
        end_of_batch()
        torch.cuda.synchronize()
        assert capture.sums.per_group.logit[1].any()  # the hooks ran in the mode and their sums arrived
    finally:
        store.close()
