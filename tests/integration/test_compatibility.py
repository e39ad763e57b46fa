"""The compatibility matrix: every architecture poslens supports, tested the same way.

One tiny random-weight model per kind of ``TINY_MODELS`` (tests/compatibility_matrix.py)
(Llama, Llama 3 and Apertus with ``llama3`` rope scaling, Qwen2, Qwen3 plain and with YaRN,
Ministral 3 with YaRN, Mistral, Gemma 1, 2 and 3, VaultGemma, Phi-3, OLMo 1, 2 and 3,
StarCoder2, Granite, Cohere, EXAONE 3 and 4, Falcon 7B, ERNIE 4.5, Arcee, BitNet, Hunyuan,
Jais 2, Seed-OSS, GPT-NeoX, StableLM, Phi, GLM, GLM-4 and Nemotron with partial rotary, the
MoE models Mixtral, Qwen2-MoE, Qwen3-MoE, GLM-4.5, OLMoE, FlexOlmo, Granite MoE, ERNIE 4.5 MoE
and MiniMax-M2, and DeepSeek-V2/V3 and Youtu with multi-head latent attention), saved to disk
with a byte tokenizer. For each:

(a) the bridge's log-probs equal those of the plain Hugging Face model;
(b) the softmax of the captured ``hook_attn_scores`` equals HF's eager attention weights;
(c) the visible keys, per layer, are the ones poslens expects (alternating windows included);
(d) each variant matches a model transformers builds natively with the changed config
    (or HF's own forward with an explicit sliding-window mask), or is refused with a reason;
(e) ``poslens.measure`` runs end to end and methodology §4's controls hold; the run's metadata
    records the RoPE type and scaling.

Kinds poslens must refuse (no RoPE, no TransformerLens adapter, a RoPE base poslens
cannot read, NoPE layers, attention sinks, chunked attention, per-layer head sizes,
layers without softmax attention, an adapter that hides the pre-softmax scores or splits
the fused QKV wrongly) are refused with :class:`poslens.ModelNotSupportedError`, as are the
hybrid and sparse-attention architectures of ``REFUSED_CONFIGS``, from their config alone.
``docs/supported_models.md`` is generated from the same tables and from
tests/architecture_coverage.py; a test checks it is current.
"""

from __future__ import annotations

import copy
import importlib.util
import re
from pathlib import Path

import architecture_coverage as coverage
import pytest
import torch
from compatibility_matrix import REFUSED_CONFIGS, TINY_KINDS, TINY_MODELS, UNSUPPORTED_KINDS, save_tiny_model, tiny_config
from parity import bridge_log_probs, native_log_probs

import poslens
from poslens.capture.cell_sum_capture import CellSumCapture
from poslens.capture.score_checks import MaskMismatchError
from poslens.fit.binning import Binning
from poslens.model.hooks import attn_scores, run_with_hooks
from poslens.model.variants import VariantNotSupportedError

T, TOL = 32, 1e-5
VARIANTS = ("ntk:2", "rope-base:1000", "window:8")
DOCS = Path(__file__).parents[2] / "docs"


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory):
    made: dict[str, Path] = {}

    def folder(kind: str) -> Path:
        if kind not in made:
            made[kind] = save_tiny_model(tmp_path_factory.mktemp(f"compat_{kind}"), kind)
        return made[kind]

    return folder


@pytest.fixture(scope="module")
def models(folders):
    """Each kind's model, loaded once; tests that change a model load their own."""
    made: dict[str, poslens.PosModel] = {}

    def model(kind: str) -> poslens.PosModel:
        if kind not in made:
            made[kind] = poslens.load_model(folders(kind))
        return made[kind]

    return model


@pytest.fixture(scope="module")
def tokens() -> torch.Tensor:
    return torch.randint(4, 260, (2, T), generator=torch.Generator().manual_seed(3))


def rope_dicts(config) -> list[dict]:
    params = config.rope_parameters
    return [params] if "rope_theta" in params else [p for p in params.values() if isinstance(p, dict)]


def hf_model(folder: Path, config=None):
    from transformers import AutoModelForCausalLM

    extra = {"config": config} if config is not None else {}
    model = AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager", dtype=torch.float32, **extra)
    return model.eval()


def expected_windows(config) -> list[int | None]:
    """Each layer's sliding window, read from the config as transformers applies it."""
    text = config.get_text_config()
    width = getattr(text, "sliding_window", None)
    types = getattr(text, "layer_types", None) or ["full_attention"] * text.num_hidden_layers
    if not width:
        return [None] * text.num_hidden_layers
    if not getattr(text, "layer_types", None):
        return [width] * text.num_hidden_layers
    return [width if t == "sliding_attention" else None for t in types]


def visible(t: int, window: int | None) -> torch.Tensor:
    i, j = torch.arange(t)[:, None], torch.arange(t)[None, :]
    allowed = j <= i
    return allowed if window is None else allowed & (i - j < window)


def captured_scores(model: poslens.PosModel, tokens: torch.Tensor) -> dict[int, torch.Tensor]:
    seen: dict[int, torch.Tensor] = {}

    def keep(layer: int):
        return lambda scores, hook: seen.__setitem__(layer, scores.detach().double())

    run_with_hooks(model, tokens, [(attn_scores(layer), keep(layer)) for layer in range(model.n_layers)])
    return seen


def test_matrix_covers_the_issue_list():
    families = {kind: TINY_MODELS[kind].family for kind in TINY_KINDS}
    for wanted in ("llama", "llama3", "qwen2", "qwen3", "qwen3-yarn", "mistral", "gemma2", "gemma3", "phi3", "olmo2", "gpt-neox", "stablelm"):
        assert wanted in families
    assert set(UNSUPPORTED_KINDS) == set(REFUSALS)


# ---------------------------------------------------------------- (a), (b), (c)


@pytest.mark.parametrize("kind", TINY_KINDS)
def test_bridge_log_probs_match_hf(kind, folders, models, tokens):
    folder, model = folders(kind), models(kind)
    bridged = bridge_log_probs(model, tokens)
    assert bridged.shape == (2, T, model.hf_model.config.get_text_config().vocab_size) and torch.isfinite(bridged).all()
    assert (bridged - native_log_probs(folder, tokens)).abs().max().item() <= TOL


@pytest.mark.parametrize("kind", TINY_KINDS)
def test_captured_scores_softmax_to_hf_attentions(kind, folders, models, tokens):
    folder, model = folders(kind), models(kind)
    captured = captured_scores(model, tokens)
    with torch.no_grad():
        attentions = hf_model(folder)(tokens, output_attentions=True).attentions
    assert len(attentions) == model.n_layers == len(captured)
    for layer in range(model.n_layers):
        assert captured[layer].shape == (2, model.n_heads, T, T)
        torch.testing.assert_close(torch.softmax(captured[layer], -1), attentions[layer].double(), rtol=0, atol=1e-5)


@pytest.mark.parametrize("kind", TINY_KINDS)
def test_visible_keys_per_layer(kind, folders, models, tokens):
    """Per layer: the keys HF attends to, the unmasked captured scores and poslens' own mask are the same set."""
    folder, model = folders(kind), models(kind)
    assert model.sliding_windows == expected_windows(model.hf_model.config)
    captured = captured_scores(model, tokens)
    with torch.no_grad():
        attentions = hf_model(folder)(tokens, output_attentions=True).attentions
    capture = CellSumCapture(model, Binning(T), groups=2)
    lowest = torch.finfo(torch.float32).min
    for layer in range(model.n_layers):
        want = visible(T, model.sliding_windows[layer]).expand(2, model.n_heads, T, T)
        assert torch.equal(attentions[layer] > 0, want), f"layer {layer}: HF attends to other keys"
        assert torch.equal(captured[layer] > lowest / 2, want), f"layer {layer}: captured mask differs"
        assert torch.equal(capture.geometry(layer).valid, want[0, 0]), f"layer {layer}: poslens expects other keys"
        # the capture's own check passes on this layer's scores
        capture.reduce(layer, captured[layer][:1].float())


@pytest.mark.parametrize("kind", [k for k in TINY_KINDS if any(w is not None for w in expected_windows(tiny_config(k)))])
def test_wrong_windows_are_caught(kind, folders, tokens):
    """The mask check can fail: with every layer's window forgotten, the capture names the first windowed layer."""
    model = poslens.load_model(folders(kind))
    first = next(layer for layer, w in enumerate(model.sliding_windows) if w is not None)
    model.sliding_windows = [None] * model.n_layers
    corpus = poslens.make_corpus(model, "random", n_seqs=2, seq_len=T, seed=0)
    with pytest.raises(MaskMismatchError, match=f"layer {first}: keys poslens treats as visible are masked"):
        poslens.measure(model, corpus, groups=2, progress=False)


# ---------------------------------------------------------------- (d) variants


def windowed_log_probs(folder: Path, tokens: torch.Tensor, width: int) -> torch.Tensor:
    """HF's own forward with an explicit causal sliding-window mask (additive, 4-D), the same in every layer."""
    t = tokens.shape[1]
    mask = torch.zeros(t, t).masked_fill(~visible(t, width), torch.finfo(torch.float32).min)
    with torch.no_grad():
        return hf_model(folder)(tokens, attention_mask=mask.expand(tokens.shape[0], 1, t, t)).logits.log_softmax(-1)


def native_rope_log_probs(folder: Path, tokens: torch.Tensor, theta) -> torch.Tensor:
    """A model transformers builds natively from ``folder`` with every RoPE base replaced by ``theta(old)``."""
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(folder)
    text = config.get_text_config()
    params = copy.deepcopy(text.rope_parameters)
    text.rope_parameters = params
    for p in rope_dicts(text):
        p["rope_theta"] = theta(float(p["rope_theta"]))
    with torch.no_grad():
        return hf_model(folder, config)(tokens).logits.log_softmax(-1)


@pytest.mark.parametrize("spec", VARIANTS)
@pytest.mark.parametrize("kind", TINY_KINDS)
def test_variant_matches_native_or_is_refused(kind, spec, folders, models, tokens):
    folder, base = folders(kind), models(kind)
    config = base.hf_model.config.get_text_config()
    scaled = sorted({p.get("rope_type", "default") for p in rope_dicts(config)} - {"default"})
    if spec.startswith("ntk") and scaled:
        # llama3 / YaRN scaling already rescales the frequencies: NTK scaling of θ would mean something else.
        with pytest.raises(VariantNotSupportedError) as info:
            poslens.load_model(folder, variant=spec)
        message = str(info.value)
        assert spec in message and f"rope_type {scaled[0]!r}" in message and "NTK" in message and "rope-base" in message
        return
    model = poslens.load_model(folder, variant=spec)
    assert model.variant_name == spec
    if spec.startswith("ntk"):
        # NTK's d is the rotated part of the head (a quarter of it under GPT-NeoX's and StableLM's partial rotary)
        d_head = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        d = int(d_head * rope_dicts(config)[0].get("partial_rotary_factor", 1.0))
        assert model.rotary_dim == d
        expected = native_rope_log_probs(folder, tokens, lambda theta: theta * 2.0 ** (d / (d - 2)))
        assert model.rope_base == pytest.approx([b * 2.0 ** (d / (d - 2)) for b in base.rope_base], rel=1e-12)
    elif spec.startswith("rope-base"):
        expected = native_rope_log_probs(folder, tokens, lambda theta: 1000.0)
        assert model.rope_base == [1000.0] * model.n_layers
    else:
        expected = windowed_log_probs(folder, tokens, 8)
        assert model.sliding_windows == [8 if w is None else min(w, 8) for w in base.sliding_windows]
    assert (bridge_log_probs(model, tokens) - expected).abs().max().item() <= TOL
    if model.rope_base != base.rope_base or model.sliding_windows != base.sliding_windows:
        # the comparison can fail: the unchanged model is measurably off
        assert (bridge_log_probs(base, tokens) - expected).abs().max().item() > 10 * TOL


# ---------------------------------------------------------------- (e) measure and controls


class ConstantHead:
    """Set the visible scores of one head to a constant: its C_res must be exactly 0 (methodology §4.4)."""

    kind = "constant-logits"

    def __init__(self, layer: int, head: int = 0):
        self.layer, self.head = layer, head
        self.label = f"constant-logits-L{layer}H{head}"

    def hooks(self, model, tokens):
        def fn(scores, hook):
            out = scores.clone()
            head = out[:, self.head]
            out[:, self.head] = torch.where(head > torch.finfo(head.dtype).min / 2, torch.full_like(head, 0.25), head)
            return out

        return [(attn_scores(self.layer), fn)]

    def describe(self):
        return {"kind": self.kind, "layer": self.layer, "head": self.head}


def figure(result, metric: str, window: str, layer: int, head: int = -1):
    r = result.select(metric, window, layer, head)
    assert len(r) == 1, (metric, window, layer, head)
    return float(r["value"].iloc[0]), float(r["ci_low"].iloc[0]), float(r["ci_high"].iloc[0])


@pytest.mark.parametrize("kind", TINY_KINDS)
def test_measure_runs_and_controls_hold(kind, models):
    model = models(kind)
    corpus = poslens.make_corpus(model, "random", n_seqs=16, seq_len=T, position0="bos", seed=0)
    last = model.n_layers - 1
    # The control edits one head of the last layer only, so every layer before it is measured as the model is.
    control = ConstantHead(last)
    result = poslens.measure(model, corpus, groups=8, early=16, batch_size=4, interventions=[control], progress=False)
    table = result.to_frame()
    assert set(table["layer"]) == set(range(model.n_layers)) | {-1}
    assert set(table["intervention"]) == {control.label}
    assert table["value"].notna().all()
    for window in ("early", "all"):
        # Layer 0 of a RoPE model: its input holds no position, so C_res sits at the noise floor
        # (methodology §4.4 (i): |C_res| < 3% of L(log a), the bound of tests/unit/measurement/test_decomposition_controls.py)
        # while the mask carries a clear C_mask.
        c_res, low, high = figure(result, "c_res", window, 0)
        leakage = figure(result, "leakage_pattern", window, 0)[0]
        c_mask, mask_low, _ = figure(result, "c_mask", window, 0)
        assert abs(c_res) < 0.03 * leakage, (window, c_res, leakage)
        assert c_mask > 0 and mask_low > 0 and max(-low, high) < mask_low / 2, (window, c_res, low, high, mask_low)
        if window == "early":
            assert low <= 0 <= high, f"layer-0 C_res {c_res:.3g} [{low:.3g}, {high:.3g}] excludes 0"
        # A head with constant visible logits has no residual component at all; its neighbour has one.
        c_res, low, high = figure(result, "c_res", window, last, 0)
        assert abs(c_res) < 1e-10 and abs(low) < 1e-10 and abs(high) < 1e-10, (window, c_res, low, high)
        assert abs(figure(result, "c_res", window, last, 1)[0]) > 1e-8
    # The run metadata records the RoPE type and scaling, as the kind's config declares them.
    meta = result.meta["model"]
    spec = tiny_config(kind).get_text_config().rope_parameters
    if "rope_type" in spec:
        assert meta["rope_type"] == spec["rope_type"]
        scaling = {k: v for k, v in spec.items() if k not in ("rope_type", "rope_theta", "partial_rotary_factor")}
        assert meta["rope_scaling"] == (scaling or None)
    else:  # one RoPE per layer type (Gemma 3)
        assert meta["rope_type"] == {name: p["rope_type"] for name, p in spec.items()}
        assert meta["rope_scaling"] == {name: None for name in spec}
    assert meta["rotary_dim"] == model.rotary_dim


def test_run_metadata_records_llama3_scaling_exactly(folders):
    model = poslens.load_model(folders("llama3"), variant="rope-base:1000")
    corpus = poslens.make_corpus(model, "random", n_seqs=2, seq_len=8, seed=0)
    meta = poslens.measure(model, corpus, groups=2, progress=False, probe=False).meta["model"]
    assert meta["rope_type"] == "llama3"
    assert meta["rope_scaling"] == {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 16}
    assert meta["rope_base"] == [1000.0] * model.n_layers and meta["variant"] == "rope-base:1000"


def test_ministral3_is_measured_only_where_its_logits_are_relative(models, tokens):
    """Past original_max_position_embeddings Ministral 3 scales its queries by absolute position: poslens stops there."""
    model = models("ministral3")
    assert model.max_context == 32 == tokens.shape[1]
    run_with_hooks(model, tokens, [])
    with pytest.raises(ValueError, match="exceeds .* context of 32 tokens"):
        run_with_hooks(model, torch.cat([tokens, tokens[:, :1]], 1), [])


# ---------------------------------------------------------------- refusals


REFUSALS = {
    "gpt2": "no rotary position embeddings",
    "helium": "cannot be bridged",
    "gptj": "RoPE base fixed in transformers' code",
    "codegen": "RoPE base fixed in transformers' code",
    "smollm3": "layers without rotary position embeddings (NoPE layers [2])",
    "falcon-gqa": "fuses 2 key/value groups into one query_key_value matrix",
    "cohere2": "layers without rotary position embeddings (NoPE layers [2])",
    "exaone4-hybrid": "layers without rotary position embeddings (NoPE layers [2])",
    "gpt-oss": "has attention sinks (self_attn.sinks)",
    "gemma4": "attention sizes that vary from layer to layer (head_dim",
    "llama4": "not plain causal softmax attention (chunked_attention in layers [0, 1]",
    "qwen3-next": "not plain causal softmax attention (linear_attention in layers [0]: state-space, linear-attention",
    "nanochat": "exposes only the post-softmax attention weights",
    "jetmoe": "exposes only the post-softmax attention weights",
    "laguna": "exposes only the post-softmax attention weights",
    "modernbert-decoder": "exposes only the post-softmax attention weights",
}


@pytest.mark.parametrize("kind, missing", REFUSALS.items())
def test_unsupported_architectures_are_refused(kind, missing, tmp_path):
    import transformers

    folder = save_tiny_model(tmp_path, kind)
    with pytest.raises(poslens.ModelNotSupportedError) as info:
        poslens.load_model(folder)
    message = str(info.value)
    assert missing in message
    model_type = getattr(transformers, TINY_MODELS[kind].config_class).model_type
    assert TINY_MODELS[kind].architecture in message or f"({model_type})" in message
    if kind == "helium":
        assert "TransformerLens" in message and "no architecture adapter" in message and "Available architectures" not in message


@pytest.mark.parametrize("hf_class", REFUSED_CONFIGS)
def test_architectures_refused_from_their_config(hf_class, tmp_path):
    """Hybrid and sparse-attention models are refused before any weights are read (the folder holds none)."""
    import transformers

    config_class, fields, missing = REFUSED_CONFIGS[hf_class]
    getattr(transformers, config_class)(**fields).save_pretrained(tmp_path)
    with pytest.raises(poslens.ModelNotSupportedError) as info:
        poslens.load_model(tmp_path)
    message = str(info.value)
    expected = {
        "global layers without RoPE (NoPE layers)": "NoPE layers",
        "head sizes that vary from layer to layer": "attention sizes that vary from layer to layer (head_dim",
        "recurrent cycles over its layers (and prefix-LM attention)": "runs its blocks several times in one forward pass",
        "layers that reuse earlier layers' keys and values (KV sharing)": "reuses the keys and values of earlier layers",
    }.get(missing, "not plain causal softmax attention")
    assert expected in message, message
    if "state-space" in missing:
        assert "state-space, linear-attention or convolution mixers" in message


def test_prefix_lm_is_not_causal(tmp_path):
    from transformers import HrmTextConfig

    HrmTextConfig().save_pretrained(tmp_path)  # prefix_lm=True: the prompt attends both ways
    with pytest.raises(poslens.ModelNotSupportedError, match=r"\(hrm_text\) is not a causal decoder"):
        poslens.load_model(tmp_path)


# ---------------------------------------------------------------- coverage of the installed libraries


def test_coverage_lists_only_installed_classes():
    """Every class the page lists exists in transformers and has a TransformerLens adapter."""
    import transformers
    from transformer_lens.factories.architecture_adapter_factory import SUPPORTED_ARCHITECTURES

    listed = coverage.bridgeable_architectures()
    assert len(listed) > 50
    for arch in listed:
        assert hasattr(transformers, arch.hf_class) and arch.hf_class in SUPPORTED_ARCHITECTURES, arch
        assert hasattr(transformers, arch.config_class), arch
    rope = {a.hf_class: a.rope for a in listed}
    assert rope["LlamaForCausalLM"] and rope["FalconForCausalLM"] and not rope["GPT2LMHeadModel"] and not rope["BloomForCausalLM"]
    untested = {a.hf_class for a in coverage.not_yet_tested()}
    assert untested <= {a.hf_class for a in listed if a.rope}
    assert not untested & coverage.tested_architectures()
    for kind in TINY_KINDS:
        assert TINY_MODELS[kind].architecture not in untested


def test_matrix_and_coverage_examples_run():
    """The docstring examples of the two test-data modules (tests/ is outside tests/docs/test_docstring_examples.py's reach)."""
    import doctest

    import compatibility_matrix

    for module in (compatibility_matrix, coverage):
        assert doctest.testmod(module).failed == 0, module.__name__


# ---------------------------------------------------------------- the docs page


def test_supported_models_page_is_current():
    spec = importlib.util.spec_from_file_location("make_supported_models", DOCS / "make_supported_models.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    text = module.render()
    # the page names the transformers and TransformerLens versions it was generated with; a fresh environment may hold a
    # newer patch release, which changes those numbers and nothing the page says about classes
    unversioned = lambda page: re.sub(r"\((\d+\.\d+\.\d+)\)", "(version)", page)  # noqa: E731
    page = (DOCS / "supported_models.md").read_text()
    assert unversioned(page) == unversioned(text), "docs/supported_models.md is stale: run python docs/make_supported_models.py"
    for kind in TINY_KINDS + UNSUPPORTED_KINDS:
        assert f"`{kind}`" in text
    assert "refused" in text and "tested" in text
