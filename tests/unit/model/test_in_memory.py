"""The model the researcher already holds, measured as it is: a transformers model with its tokenizer, a TransformerBridge.

Real objects only: tiny Llama folders saved to disk, loaded by transformers in
the test (no poslens loading code in between), and the bridge poslens boots
for a folder. The in-memory routes must give the saved-and-reloaded path's
figures to 1e-10 (they hold the same module), measure edits made after
wrapping, and record where the model came from. (The HookedTransformer route,
TransformerLens 3.x: tests/unit/model/test_hooked_transformer.py.)
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

import poslens


def figures(model, seed: int = 1):
    corpus = poslens.make_corpus(model, "random", n_seqs=4, seq_len=24, seed=seed)
    return poslens.measure(model, corpus, groups=2, early=8, progress=False)


@pytest.fixture(scope="module")
def from_disk(tiny_llama_dir):
    return figures(poslens.load_model(tiny_llama_dir))


def hf_and_tokenizer(folder):
    return AutoModelForCausalLM.from_pretrained(folder), AutoTokenizer.from_pretrained(folder)


def test_a_transformers_model_in_memory_gives_the_saved_paths_figures(tiny_llama_dir, from_disk):
    hf, tok = hf_and_tokenizer(tiny_llama_dir)
    model = poslens.load_model(hf, tokenizer=tok)
    assert model.hf_model is hf and model.source == "memory"  # the user's module, not a copy
    got = figures(model)
    np.testing.assert_allclose(got.table["value"].to_numpy(), from_disk.table["value"].to_numpy(), rtol=0, atol=1e-10)
    assert (
        got.table[["layer", "head", "metric", "query_window"]].to_numpy() == from_disk.table[["layer", "head", "metric", "query_window"]].to_numpy()
    ).all()


def test_a_bridge_in_memory_gives_the_saved_paths_figures(tiny_llama_dir, from_disk):
    bridge = poslens.load_model(tiny_llama_dir).bridge  # a TransformerBridge the user holds
    model = poslens.load_model(bridge)
    assert model.bridge is bridge and model.source == "memory"
    np.testing.assert_allclose(figures(model).table["value"].to_numpy(), from_disk.table["value"].to_numpy(), rtol=0, atol=1e-10)


def test_an_edit_in_memory_is_measured_as_edited_and_its_hash_recorded(tiny_llama_dir):
    hf, tok = hf_and_tokenizer(tiny_llama_dir)
    model = poslens.load_model(hf, tokenizer=tok)
    before = figures(model)
    with torch.no_grad():
        hf.model.layers[1].self_attn.q_proj.weight.mul_(3.0)  # an edit after wrapping
    after = figures(model)
    edited = poslens.load_model(hf, tokenizer=tok)  # a second wrap of the edited module agrees
    again = figures(edited)
    assert np.nanmax(np.abs(after.table["value"].to_numpy() - before.table["value"].to_numpy())) > 1e-3
    np.testing.assert_array_equal(after.table["value"].to_numpy(), again.table["value"].to_numpy())
    # provenance: from memory, with the state dict's hash taken at each measurement
    import hashlib

    # the state dict and every buffer, saved or not (the rotary inv_freq), as measured (the bridge adds its own zero
    # lm_head bias), each distinct tensor once
    tensors = {t.data_ptr(): t for t in [*hf.state_dict().values(), *hf.buffers()]}.values()
    digests = sorted(
        hashlib.sha256(f"{t.dtype}|{tuple(t.shape)}|".encode() + t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()).hexdigest()
        for t in tensors
    )
    want = hashlib.sha256("".join(digests).encode()).hexdigest()
    assert after.meta["model"]["source"] == "memory"
    assert after.meta["model"]["source_sha256"] == want != before.meta["model"]["source_sha256"]
    assert after.meta["model"]["state_sha256"] == want  # one read of the weights gives both records


def test_the_weights_record_read_in_the_background_is_the_inline_one_and_its_error_reaches_the_caller(tiny_llama_dir):
    from types import SimpleNamespace

    from poslens.measurement.provenance import weights_record_in_background
    from poslens.model.weights_hash import weights_record

    model = poslens.load_model(tiny_llama_dir)
    assert weights_record_in_background(model).result() == weights_record(model.module)

    class Unreadable(torch.nn.Module):
        def state_dict(self, *args, **kwargs):
            raise RuntimeError("weights unreadable")

    with pytest.raises(RuntimeError, match="weights unreadable"):
        weights_record_in_background(SimpleNamespace(module=Unreadable())).result()


def test_variants_on_a_model_in_memory(tiny_llama_dir):
    hf, tok = hf_and_tokenizer(tiny_llama_dir)
    windowed = poslens.load_model(hf, tokenizer=tok, variant="window:4")
    assert windowed.sliding_windows == [4, 4, 4] and windowed.variant_name == "window:4"
    from_folder = poslens.load_model(tiny_llama_dir, variant="window:4")
    np.testing.assert_allclose(figures(windowed).table["value"].to_numpy(), figures(from_folder).table["value"].to_numpy(), rtol=0, atol=1e-10)
    for variant in ("ntk:2", "rope-base:1e6"):
        with pytest.raises(ValueError, match="already built; save it .* and load the folder with variant="):
            poslens.load_model(hf, tokenizer=tok, variant=variant)


def test_refusals_name_what_is_missing(tiny_llama_dir):
    hf, _ = hf_and_tokenizer(tiny_llama_dir)
    with pytest.raises(ValueError, match="needs its tokenizer: pass tokenizer="):
        poslens.load_model(hf)
    with pytest.raises(ValueError, match="cannot read a Linear"):
        poslens.model.wrapping.from_memory(torch.nn.Linear(2, 2))
    with pytest.raises(TypeError, match=r"Wrap it first, as it is: model = poslens.load_model\(hf_model, tokenizer=tokenizer\)"):
        poslens.measure(hf, None)


# ---------------------------------------------------------------- the user's model stays the user's

HOOK_DICTS = (
    "_forward_pre_hooks",
    "_forward_pre_hooks_with_kwargs",
    "_forward_hooks",
    "_forward_hooks_with_kwargs",
    "_forward_hooks_always_called",
    "_backward_pre_hooks",
    "_backward_hooks",
    "_state_dict_hooks",
    "_state_dict_pre_hooks",
    "_load_state_dict_pre_hooks",
    "_load_state_dict_post_hooks",
)


def structure(module: torch.nn.Module) -> list:
    """Every module by name: the object itself, its class, its training mode and each of its hook dicts (by identity)."""
    return [
        (name, id(sub), type(sub).__name__, sub.training, [{k: id(v) for k, v in getattr(sub, d).items()} for d in HOOK_DICTS])
        for name, sub in module.named_modules(remove_duplicate=False)
    ]


def keep_output(module, args, output):  # a hook of the user's that changes nothing: it must stay where it was put
    return None


def run_commands(model, tiny: bool = True) -> None:
    """measure, measure with a BOS intervention, the next-token loss (a forward with logits), the cumulative attribution, the path tests
    and the fingerprint (its trajectory passes)."""
    from poslens.mechanisms.attribution import cumulative_attribution
    from poslens.mechanisms.fingerprint import fingerprint
    from poslens.mechanisms.next_token_loss import next_token_nll
    from poslens.mechanisms.path_tests import path_specific_tests

    corpus = poslens.make_corpus(model, "random", n_seqs=4, seq_len=16, seed=1)
    poslens.measure(model, corpus, groups=2, early=8, progress=False)
    poslens.measure(model, corpus, groups=2, early=8, progress=False, interventions=[poslens.BosReplacement("zero")])
    next_token_nll(model, corpus, [], 2)
    calibration = poslens.make_corpus(model, "random", n_seqs=4, seq_len=16, seed=2)
    cumulative_attribution(model, corpus, calibration, modes=["key0"], groups=2, early=8, loss=False, progress=False)
    # a low tau so that every edit runs (the key-phase freezes, the mask-only profile and the ablation), each its own hooks
    paths = path_specific_tests(model, corpus, offsets=[4], groups=2, early=8, batch_size=2, tau=0.01, progress=False)
    assert {"key0-phase:D=4", "sink-mask-only:1", "sink-ablation"} <= set(paths.table["intervention"])
    fingerprint(model, n_seqs=4, seq_len=16, n_first_tokens=4, groups=2, n_permutations=10)


@pytest.mark.integration  # slow: out of make test-fast, which stays under 2 minutes
@pytest.mark.parametrize("given", ["transformers model", "bridge"])
def test_the_users_model_is_as_given_after_every_command(tiny_llama_dir, given):
    """The same module objects, the same hooks (the user's own kept), the same training mode: poslens leaves no trace."""
    hf, tok = hf_and_tokenizer(tiny_llama_dir)
    if given == "bridge":
        user = poslens.load_model(tiny_llama_dir).bridge  # a bridge the user holds (its model under it)
        model = poslens.load_model(user)
    else:
        user = hf
        user.train()  # a model in training mode stays in training mode
        user.model.layers[0].mlp.register_forward_hook(keep_output)
        model = poslens.load_model(user, tokenizer=tok)
    before = structure(user)
    inner = structure(user.original_model) if given == "bridge" else None
    run_commands(model)
    assert structure(user) == before
    if inner is not None:
        assert structure(user.original_model) == inner
    if given == "transformers model":
        assert user.training and all(m.training for m in user.modules())
        assert type(user.model.layers[0]).__name__ == "LlamaDecoderLayer"  # not TransformerLens's BlockBridge


def shift_attention(module, args, output):  # moves the model's logits: on self_attn itself, which the bridge does not call
    return (output[0] + 0.9, *output[1:])


def shift_attention_input(module, args):
    return None


@pytest.mark.parametrize("kind", ["forward", "forward_pre"])
def test_a_users_hook_on_self_attn_is_refused_naming_module_and_function(tiny_llama_dir, kind):
    """The bridge computes attention without calling self_attn: its hook would be skipped, so poslens refuses."""
    from poslens.errors import PoslensError

    hf, tok = hf_and_tokenizer(tiny_llama_dir)
    attention = hf.model.layers[1].self_attn
    if kind == "forward":
        attention.register_forward_hook(shift_attention)
        with torch.no_grad():  # the hook does move the transformers model's own logits
            tokens = torch.tensor([[1, 5, 9, 13]])
            moved = hf(tokens).logits
        assert moved.shape[-1] > 0
    else:
        attention.register_forward_pre_hook(shift_attention_input)
    model = poslens.load_model(hf, tokenizer=tok)
    corpus = poslens.make_corpus(model, "random", n_seqs=4, seq_len=16, seed=1)
    with pytest.raises(PoslensError) as refused:
        poslens.measure(model, corpus, groups=2, early=8, progress=False)
    message = str(refused.value)
    function = "shift_attention" if kind == "forward" else "shift_attention_input"
    assert f"test_in_memory.{function} on model.layers.1.self_attn (LlamaAttention) would not run" in message
    assert type(refused.value).__name__ == "UserHookNotRunError"
    assert type(hf.model.layers[1]).__name__ == "LlamaDecoderLayer" and len(getattr(attention, f"_{kind}_hooks")) == 1


def double_query(module, args, output):
    return output * 2  # exact in floating point, as doubling the weights is


def test_a_users_hook_the_bridge_runs_changes_the_figures_and_is_recorded(tiny_llama_dir):
    """A hook on q_proj runs: the figures are those of the model with q_proj's weights doubled, and provenance names it."""
    hf, tok = hf_and_tokenizer(tiny_llama_dir)
    model = poslens.load_model(hf, tokenizer=tok)
    plain = figures(model)
    handle = hf.model.layers[1].self_attn.q_proj.register_forward_hook(double_query)
    hooked = figures(model)
    handle.remove()
    with torch.no_grad():
        hf.model.layers[1].self_attn.q_proj.weight.mul_(2.0)
    edited = figures(model)
    np.testing.assert_allclose(hooked.table["value"].to_numpy(), edited.table["value"].to_numpy(), rtol=0, atol=1e-10)
    assert np.nanmax(np.abs(hooked.table["value"].to_numpy() - plain.table["value"].to_numpy())) > 1e-3
    assert hooked.meta["model"]["user_hooks"] == [
        {"module": "model.layers.1.self_attn.q_proj", "kind": "forward", "function": "test_in_memory.double_query"}
    ]
    assert plain.meta["model"]["user_hooks"] == [] == edited.meta["model"]["user_hooks"]


def test_a_transformerlens_hook_on_the_users_bridge_runs_and_is_recorded(tiny_llama_dir):
    """A permanent hook on a hook point of the user's bridge runs in poslens's passes, and stays after them."""
    bridge = poslens.load_model(tiny_llama_dir).bridge
    model = poslens.load_model(bridge)
    plain = figures(model)
    bridge.blocks[1].attn.hook_q.add_hook(lambda q, hook: q * 2, is_permanent=True)
    hooked = figures(model)
    assert np.nanmax(np.abs(hooked.table["value"].to_numpy() - plain.table["value"].to_numpy())) > 1e-3
    [record] = hooked.meta["model"]["user_hooks"]
    assert (
        record["module"] == bridge.blocks[1].attn.hook_q.name
        and record["function"] == "test_in_memory.test_a_transformerlens_hook_on_the_users_bridge_runs_and_is_recorded.<lambda>"
    )
    assert len(bridge.blocks[1].attn.hook_q._forward_hooks) == 1


def test_a_model_without_weights_is_refused_when_wrapped(tiny_llama_dir):
    """A model on PyTorch's meta device stops at poslens.load_model, naming a tensor and the fix, not in measure."""
    from transformers import AutoConfig

    from poslens.errors import PoslensError

    config = AutoConfig.from_pretrained(tiny_llama_dir)
    with torch.device("meta"):
        empty = AutoModelForCausalLM.from_config(config)
    with pytest.raises(PoslensError, match=r"has no weights: model\.embed_tokens\.weight is on PyTorch's meta device .*load_state_dict\("):
        poslens.load_model(empty, tokenizer=AutoTokenizer.from_pretrained(tiny_llama_dir))


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_provenance_records_dtype_device_and_transformerlens_version(tiny_llama_dir, dtype):
    """An in-memory model's dtype changes its figures (by up to 2e-3): it is recorded, with its device and TransformerLens's version."""
    import importlib.metadata

    import transformer_lens

    hf, tok = hf_and_tokenizer(tiny_llama_dir)
    result = figures(poslens.load_model(hf.to(getattr(torch, dtype)), tokenizer=tok))
    assert result.meta["model"]["dtype"] == dtype and result.meta["model"]["device"] == "cpu"
    installed = next(
        d.version for d in importlib.metadata.distributions(path=[str(Path(transformer_lens.__file__).parents[1])]) if d.name == "transformer-lens"
    )
    assert result.meta["versions"]["transformer_lens"] == installed != "?"
    folder = poslens.load_model(tiny_llama_dir, dtype=dtype)  # the other kinds: a folder, and the bridge the user holds
    for model in (folder, poslens.load_model(folder.bridge)):
        meta = figures(model).meta
        assert (meta["model"]["dtype"], meta["model"]["device"], meta["versions"]["transformer_lens"]) == (dtype, "cpu", installed)


def test_the_libraries_own_hooks_are_neither_refused_nor_recorded(tiny_llama_dir):
    """transformers installs output-capturing hooks on self_attn once attentions are asked for: plumbing, not the user's."""
    hf, tok = hf_and_tokenizer(tiny_llama_dir)
    with torch.no_grad():
        hf(torch.tensor([[1, 5, 9]]), output_attentions=True, output_hidden_states=True)
    attention = hf.model.layers[0].self_attn  # a module the bridge never calls
    assert any(f.__module__.startswith("transformers.") for f in attention._forward_hooks.values())
    result = figures(poslens.load_model(hf, tokenizer=tok))
    assert result.meta["model"]["user_hooks"] == []


def test_what_the_user_held_is_shown_in_repr_display_and_summary(tiny_llama_dir, monkeypatch):
    """The weights' hash, the user's own hook (run, and named) appear in repr, the notebook display and summary()."""
    hf, tok = hf_and_tokenizer(tiny_llama_dir)
    model = poslens.load_model(hf, tokenizer=tok)
    handle = hf.model.layers[1].self_attn.q_proj.register_forward_hook(double_query)
    try:
        hooked = figures(model)
    finally:
        handle.remove()
    record = hooked.meta["model"]
    distinct = {t.data_ptr(): t for t in [*hf.state_dict().values(), *hf.buffers()]}.values()
    assert record["weights_bytes"] == sum(t.numel() * t.element_size() for t in distinct)
    hook_text = "test_in_memory.double_query on model.layers.1.self_attn.q_proj"
    shown, page = repr(hooked), hooked._repr_html_()
    assert f"weights sha256 {record['source_sha256'][:12]}" in shown and f"your hooks: {hook_text} (run)" in shown
    assert record["source_sha256"][:16] in page and f"{hook_text} (forward, run)" in page
    assert hooked.summary().columns.name == model.name == hooked.table["model"].iloc[0]  # no SAE: the bare name
    # above the stated size the hash is skipped, with the reason recorded and shown
    import poslens.model.weights_hash as weights_hash

    monkeypatch.setattr(weights_hash, "MAX_HASHED_BYTES", record["weights_bytes"] - 1)
    skipped = figures(model)
    assert skipped.meta["model"]["source_sha256"] is None
    assert skipped.meta["model"]["source_sha256_skipped"].startswith(f"the weights ({record['weights_bytes']} bytes) are above")
    assert "not taken: the weights" in skipped._repr_html_() and "weights not hashed" in repr(skipped)
