"""The one forward pass (issue 38 item 4) and the checks made once at the entry (item 5).

- :func:`poslens.measurement.batching.intervened_forward` orders the hooks at a hook point: the
  interventions' ``hooks``, the capture's, then their ``hooks_after_capture``; ``poslens.measure``
  runs through it, so an edit after the capture changes the layers above but not the measured layer;
- ``Intervention`` declares ``hooks_after_capture`` (none by default), for a subclass and for an
  object with only ``label``, ``hooks`` and ``describe``;
- calibration of the relativizing edit runs in the batches the memory planner chooses: several
  batches give the fit of one batch (float64: to rounding; float32: to float32 tolerance) and the
  independent dense reference's (``relativize_reference.py``), and the batch size is recorded;
- the context length, early window and batch size are each checked once, at the entry, with the
  poslens error users see.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import poslens
from poslens.errors import InputError
from poslens.measurement.arguments import Intervention, as_interventions
from poslens.measurement.batching import batches, intervened_forward
from poslens.mechanisms.next_token_loss import next_token_nll
from poslens.mechanisms.relativization_fit import calibrate
from poslens.model import guards
from poslens.model.hooks import attn_scores, run_with_hooks
from poslens.runtime import planner
from poslens.runtime.estimate import estimate_peak_bytes
from poslens.testing import save_tiny_model

sys.path.insert(0, str(Path(__file__).parents[2]))
import relativize_reference as rr  # noqa: E402


class Recorder(Intervention):
    """Records, in ``fired``, when its hooks before and after the capture run at layer 0's scores."""

    def __init__(self, name: str, fired: list[str]) -> None:
        self.name, self.fired = name, fired

    @property
    def label(self) -> str:
        return self.name

    def hooks(self, model: Any, tokens: torch.Tensor) -> list:
        return [(attn_scores(0), lambda x, hook: self.fired.append(f"{self.name}:before"))]

    def hooks_after_capture(self, model: Any, tokens: torch.Tensor) -> list:
        return [(attn_scores(0), lambda x, hook: self.fired.append(f"{self.name}:after"))]

    def describe(self) -> dict[str, Any]:
        return {"intervention": self.name}


class BeforeOnly(Intervention):
    """A subclass that does not define ``hooks_after_capture``: it inherits the default (none)."""

    label = "before-only"

    def __init__(self, fired: list[str]) -> None:
        self.fired = fired

    def hooks(self, model: Any, tokens: torch.Tensor) -> list:
        return [(attn_scores(0), lambda x, hook: self.fired.append("before-only"))]

    def describe(self) -> dict[str, Any]:
        return {"intervention": "before-only"}


class Plain:
    """Not a subclass: only ``label``, ``hooks`` and ``describe``, as a user may write one."""

    label = "plain"

    def hooks(self, model: Any, tokens: torch.Tensor) -> list:
        return []

    def describe(self) -> dict[str, Any]:
        return {"intervention": "plain"}


class FlattenAfterCapture(Intervention):
    """After the capture, set layer 0's scores of every visible pair to 0 (uniform attention)."""

    label = "flatten-after"

    def hooks(self, model: Any, tokens: torch.Tensor) -> list:
        return []

    def hooks_after_capture(self, model: Any, tokens: torch.Tensor) -> list:
        def flatten(scores: torch.Tensor, hook: Any) -> torch.Tensor:
            t = scores.shape[-1]
            visible = torch.ones(t, t, dtype=torch.bool).tril().to(scores.device)
            return torch.where(visible, torch.zeros_like(scores), scores)

        return [(attn_scores(0), flatten)]

    def describe(self) -> dict[str, Any]:
        return {"intervention": "flatten-after"}


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory):
    return poslens.load_model(save_tiny_model(tmp_path_factory.mktemp("forward_llama"), "llama"), device="cpu")


@pytest.fixture(scope="module")
def short_context(tmp_path_factory: pytest.TempPathFactory):
    return poslens.load_model(save_tiny_model(tmp_path_factory.mktemp("forward_ctx32"), "llama", max_position_embeddings=32), device="cpu")


# -- (1) the hook order -----------------------------------------------------------------------------


def test_hooks_run_before_the_capture_then_the_capture_then_after_it(llama):
    fired: list[str] = []
    capture = [(attn_scores(0), lambda x, hook: fired.append("capture"))]
    tokens = poslens.make_corpus(llama, "random", n_seqs=2, seq_len=8).tokens
    intervened_forward(llama, tokens, [Recorder("a", fired), Recorder("b", fired)], capture, stop_after=attn_scores(0))
    assert fired == ["a:before", "b:before", "capture", "a:after", "b:after"]


def test_measure_reads_a_layer_before_the_edit_after_its_capture(tmp_path):
    """An edit after the capture leaves its own layer's figures exactly as they were and changes the layer above."""
    model = poslens.load_model(save_tiny_model(tmp_path, "llama", initializer_range=0.1), device="cpu")  # far from uniform attention
    corpus = poslens.make_corpus(model, "random", n_seqs=4, seq_len=16, seed=2)
    options = dict(groups=2, early=8, progress=False, probe=False)
    plain = poslens.measure(model, corpus, **options)
    edited = poslens.measure(model, corpus, interventions=[FlattenAfterCapture()], **options)

    def values(result: Any, layer: int) -> np.ndarray:
        return result.select("leakage_pattern", "all", layer=layer)["value"].to_numpy()

    np.testing.assert_array_equal(values(edited, 0), values(plain, 0))  # measured before the edit
    assert np.abs(values(edited, 1) - values(plain, 1)).max() > 0.01  # layer 1 sees the flattened layer 0


# -- (3) hooks_after_capture is declared on Intervention --------------------------------------------


def test_a_subclass_without_hooks_after_capture_runs_with_none(llama):
    fired: list[str] = []
    tokens = poslens.make_corpus(llama, "random", n_seqs=2, seq_len=8).tokens
    assert BeforeOnly(fired).hooks_after_capture(llama, tokens) == []
    intervened_forward(llama, tokens, [BeforeOnly(fired)], [(attn_scores(0), lambda x, hook: fired.append("capture"))])
    assert fired == ["before-only", "capture"]
    corpus = poslens.make_corpus(llama, "random", n_seqs=4, seq_len=8)
    result = poslens.measure(llama, corpus, groups=2, early=4, interventions=[BeforeOnly([])], progress=False, probe=False)
    assert set(result.table["intervention"]) == {"before-only"}


def test_an_object_with_only_label_hooks_and_describe_is_given_the_default(llama):
    plain = Plain()
    (wrapped,) = as_interventions([plain])
    tokens = poslens.make_corpus(llama, "random", n_seqs=2, seq_len=8).tokens
    assert wrapped.hooks_after_capture(llama, tokens) == [] and wrapped.label == "plain" and wrapped.describe() == plain.describe()
    recorder = Recorder("r", [])
    assert as_interventions([recorder])[0] is recorder  # a declared one is kept as it is
    nll = next_token_nll(llama, poslens.make_corpus(llama, "random", n_seqs=2, seq_len=8), [plain])
    np.testing.assert_array_equal(nll, next_token_nll(llama, poslens.make_corpus(llama, "random", n_seqs=2, seq_len=8)))


# -- (2) calibration in the planner's batches --------------------------------------------------------


def _budget_for_three(model: Any, seq_len: int, monkeypatch: pytest.MonkeyPatch) -> int:
    """A budget between the estimates of 3 and 4 sequences, with the process's runtime counted as 0."""
    monkeypatch.setattr(planner, "runtime_bytes", lambda model, device=None: 0)
    need = [estimate_peak_bytes(model, b, seq_len, groups=1).total for b in (3, 4)]
    assert need[0] < need[1]
    return (need[0] + need[1]) // 2


@pytest.mark.integration  # slow: out of make test-fast, which stays under 2 minutes
@pytest.mark.parametrize("kind", ["llama", "mistral"])
def test_calibration_in_several_batches_is_the_one_batch_fit_and_the_reference(kind, tmp_path, monkeypatch):
    """float64: several batches (the planner's 3 under a small budget) give the one-batch fit to rounding and the dense reference's."""
    folder = save_tiny_model(tmp_path, kind, seed=1, initializer_range=0.1)
    model = poslens.load_model(folder, dtype=torch.float64, device="cpu")
    cal = poslens.make_corpus(model, "random", n_seqs=8, seq_len=24, position0="bos", seed=11)
    budget = _budget_for_three(model, 24, monkeypatch)
    for mode in ("all", "key0"):
        split = calibrate(model, cal, mode=mode, early=18, max_memory=budget)
        whole = calibrate(model, cal, mode=mode, early=18)
        assert split.calibration["batch_size"] == 3 and whole.calibration["batch_size"] == 8
        ref = rr.calibrate(model, cal.tokens, mode, 18)
        assert np.abs(ref.cells).max() > 0.1 and np.abs(ref.key0).max() > 0.1  # a nonzero edit: the check can fail
        np.testing.assert_allclose(split.cells, whole.cells, rtol=0, atol=1e-12)
        np.testing.assert_allclose(split.key0, whole.key0, rtol=0, atol=1e-12)
        np.testing.assert_allclose(split.cells, ref.cells, rtol=0, atol=1e-8)
        np.testing.assert_allclose(split.key0, ref.key0, rtol=0, atol=1e-8)


def test_calibration_in_float32_batches_matches_one_batch_to_float32_tolerance(tmp_path, monkeypatch):
    folder = save_tiny_model(tmp_path, "llama", seed=0, initializer_range=0.1)
    model = poslens.load_model(folder, device="cpu")
    cal = poslens.make_corpus(model, "random", n_seqs=8, seq_len=24, position0="bos", seed=11)
    split = calibrate(model, cal, mode="all", early=18, batch_size=2)
    whole = calibrate(model, cal, mode="all", early=18)
    assert (split.calibration["batch_size"], whole.calibration["batch_size"]) == (2, 8)
    scale = np.abs(whole.cells).max()
    assert scale > 0.1
    assert np.abs(split.cells - whole.cells).max() <= 1e-5 * scale
    assert np.abs(split.key0 - whole.key0).max() <= 1e-5 * max(1.0, np.abs(whole.key0).max())


def test_the_loss_pass_plans_for_every_positions_logits_and_gives_the_same_losses(llama, monkeypatch):
    """The next-token loss keeps T positions' logits and their float64 log-softmax: the planner counts them, by its closed form."""
    import poslens.mechanisms.next_token_loss as loss_module
    from poslens.runtime.estimate import estimate_from_shape, model_shape

    shape, t = model_shape(llama), 24
    assert estimate_from_shape(shape, 2, t, 1 << 19, 0, 1.0, 1).logits == 4 * 2 * shape.vocab  # the last position, float32
    # every position: the float32 logits, their float64 copy and its log-softmax
    assert estimate_from_shape(shape, 2, t, 1 << 19, 0, 1.0, 1, logit_positions=t).logits == (4 + 8 + 8) * 2 * shape.vocab * t
    monkeypatch.setattr(planner, "runtime_bytes", lambda model, device=None: 0)
    capture_four = estimate_peak_bytes(llama, 4, t, groups=1).total  # a capture pass of four sequences fits, the loss pass's does not
    assert planner.choose_batch_size(llama, t, 8, 1, 4, capture_four) == 4
    planned = planner.choose_batch_size(llama, t, 8, 1, 4, capture_four, logit_positions=t)
    assert 1 <= planned < 4
    sizes: list[int] = []
    real = loss_module.intervened_forward
    monkeypatch.setattr(loss_module, "intervened_forward", lambda model, tokens, *a, **k: sizes.append(len(tokens)) or real(model, tokens, *a, **k))
    corpus = poslens.make_corpus(llama, "random", n_seqs=8, seq_len=t, seed=3)
    under_budget = next_token_nll(llama, corpus, batch_size=4, max_memory=capture_four)
    assert max(sizes) == planned
    as_given = next_token_nll(llama, corpus, batch_size=4)
    assert max(sizes[-2:]) == 4
    np.testing.assert_allclose(under_budget, as_given, rtol=0, atol=1e-5)


# -- (4) each check once, at the entry ---------------------------------------------------------------


def _count_calls(monkeypatch: pytest.MonkeyPatch, module: Any, name: str) -> list[int]:
    calls: list[int] = []
    original = getattr(module, name)

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(module, name, counted)
    return calls


def test_the_context_length_is_checked_once_per_run_with_its_message(short_context, monkeypatch):
    from poslens.measurement import pipeline
    from poslens.model import hooks

    corpus = poslens.make_corpus(short_context, "random", n_seqs=8, seq_len=32)
    at_entry, in_pass = _count_calls(monkeypatch, pipeline, "check_seq_len"), _count_calls(monkeypatch, hooks, "check_seq_len")
    poslens.measure(short_context, corpus, groups=2, early=8, batch_size=2, progress=False, probe=False, row_sums="second-pass")
    assert (len(at_entry), len(in_pass)) == (1, 0)  # 8 forward passes (4 batches, twice), one check
    long = poslens.make_corpus(short_context, "random", n_seqs=4, seq_len=40)
    message = f"sequence length 40 exceeds {short_context.name}'s context of 32 tokens; use sequences of at most 32 tokens"
    for run in (
        lambda: poslens.measure(short_context, long, groups=2, progress=False),
        lambda: calibrate(short_context, long),
        lambda: next_token_nll(short_context, long),
        lambda: run_with_hooks(short_context, long.tokens),  # the forward called directly checks by itself
    ):
        with pytest.raises(InputError) as info:
            run()
        assert str(info.value) == message


def test_early_and_batch_size_are_checked_at_the_entry_with_their_messages(llama):
    corpus = poslens.make_corpus(llama, "random", n_seqs=4, seq_len=16)
    with pytest.raises(InputError, match=r"^early must be ≥ 2 \(the early window is 1 ≤ i < early\), got 1$"):
        calibrate(llama, corpus, early=1)
    for run in (
        lambda: calibrate(llama, corpus, batch_size=0),
        lambda: next_token_nll(llama, corpus, batch_size=0),
        lambda: poslens.measure(llama, corpus, groups=2, batch_size=0, progress=False),
    ):
        with pytest.raises(InputError, match=r"^batch_size must be ≥ 1, got 0$"):
            run()
    # past the entry the batches are cut as asked, unchecked
    assert [b.sequences.tolist() for b in batches(4, 2, 3)] == [[0, 1, 2], [3]]


def test_a_corpus_for_another_tokenizer_is_a_poslens_error(llama):
    from poslens.model.corpus import Corpus

    bad = Corpus(torch.full((1, 4), 999), "random", 0, "none", [999], ["?"])
    with pytest.raises(InputError, match="the corpus holds token id 999"):
        guards.check_corpus_fits(llama, bad)
