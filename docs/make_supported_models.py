"""Write docs/supported_models.md from the compatibility matrix (tests/compatibility_matrix.py).

Every row is a kind that tests/integration/test_compatibility.py builds and tests; the
columns are read from the kind's transformers config, and the variant column
from poslens' own refusal rule (:func:`poslens.model.variants.variant_refusal`).
The "Not yet tested" list is computed from the installed transformers and
TransformerLens (``not_yet_tested`` of tests/architecture_coverage.py). Both modules are test data,
outside the package, so this script imports them from tests/.
Run ``python docs/make_supported_models.py`` after changing the matrix;
``tests/integration/test_compatibility.py`` checks that the page is current.
"""

from __future__ import annotations

import sys
from importlib.metadata import version
from pathlib import Path
from typing import Any

from poslens.model.variants import parse_variant, rope_parameter_dicts, variant_refusal

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from architecture_coverage import bridgeable_architectures, not_yet_tested, tested_architectures  # noqa: E402
from compatibility_matrix import REFUSED_CONFIGS, TINY_KINDS, TINY_MODELS, UNSUPPORTED_KINDS, tiny_config  # noqa: E402

PAGE = Path(__file__).parent / "supported_models.md"
VARIANTS = ("ntk:2", "rope-base:1000", "window:8")

INTRO = """\
# Supported models

poslens reads attention scores through the TransformerLens bridge and studies
causal decoders with rotary position embeddings (RoPE). The table lists the
architectures it is tested on. Each row is a tiny random-weight model built from
that architecture's transformers config (2–4 layers, hidden size 64, 4 heads,
a 260-token byte tokenizer) and saved to disk; the window widths and RoPE scaling
fields shown are the tiny model's, the pattern is the architecture's.
`tests/integration/test_compatibility.py` checks each one in the same way:

- **(a)** the bridge's log-probabilities match those of the plain Hugging Face model;
- **(b)** the softmax of the captured `hook_attn_scores` matches HF's eager attention weights;
- **(c)** in every layer, the keys the scores leave visible are the keys poslens expects, including alternating windows;
- **(d)** each variant matches a model that transformers builds natively with the changed config
  (for `window:`, HF's forward with an explicit sliding-window mask), or is refused with a reason;
- **(e)** `poslens.measure` runs end to end, and methodology §4's controls hold: layer-0 C_res stays at the noise floor
  and a constant-logit head gets C_res = 0. The run metadata records the RoPE type and scaling
  (`result.meta["model"]["rope_type"]` and `["rope_scaling"]`).

A real checkpoint of a listed architecture loads the same way, with
`poslens.load_model(folder)`. A model of another architecture may still work
if both transformers and TransformerLens support it, but it is untested. The
variants are:

- `ntk:<alpha>`, NTK-aware scaling of plain RoPE;
- `rope-base:<theta>`, which sets θ under the model's own scaling;
- `window:<W>`, which imposes a sliding window.

`ntk:` is refused wherever the config already scales its RoPE (`llama3`, `yarn`, …),
because scaling θ under another scheme is not NTK scaling.

Ministral 3 is measured up to its `original_max_position_embeddings` (`model.max_context` ends there): past it,
the model multiplies its queries by a factor that grows with absolute position (`llama_4_scaling_beta`), which
poslens would count as position carried by the residual stream.
"""

OUTRO = """
## Not yet tested

These causal-LM classes have both a class in the installed transformers ({transformers}) and an adapter in
the installed TransformerLens ({transformer_lens}), and their default config uses RoPE, but the matrix has
no tiny model for them yet. poslens may load them; nothing here checks that its figures are right for them.
The list is computed from the two libraries (`not_yet_tested()` in `tests/architecture_coverage.py`), not typed:

{not_yet}

A multimodal wrapper (`…ForConditionalGeneration`) is run on tokens only: poslens studies its text decoder, as
the tested Gemma 3 image-text row shows. Gemma 3n is refused from its config (below): its text decoder shares
key/value layers and runs AltUp, which no test covers yet.

## Refused

A model poslens cannot study correctly is refused with `poslens.ModelNotSupportedError`, which names what
is missing. It is never measured with figures that could be silently wrong. The tests cover these
refusals with the tiny models below. Encoders and encoder-decoders (BERT, T5, …) are refused in the same way.

{refused}

These architectures are refused from their config alone, before any weights are read (tested with each
config class's default config):

{refused_configs}

The other causal-LM classes both libraries support whose default config has no RoPE (learned, ALiBi or
sinusoidal positions, none, or an encoder) are refused in the same ways, untested one by one: {no_rope}.

## Models in memory, and TransformerLens 3.9

`poslens.load_model` also takes the model object a researcher already holds, and measures it as it is (no copy, nothing
saved; edits made after wrapping are measured; provenance records `source: memory` and the sha256 of the weights at
each measurement).

| object | TransformerLens | status |
|---|---|---|
| transformers `PreTrainedModel` + `tokenizer=` | 4.x, 3.9 | tested: the saved path's figures to 1e-10, edits measured |
| TransformerLens `TransformerBridge`, as it is | 4.x, 3.9 | tested: the saved path's figures to 1e-10 |
| TransformerLens 3.x `HookedTransformer`, rotary | 3.9 | tested: the dense reference from its own scores to 1e-8 |
| SAELens `HookedSAETransformer`, SAEs attached | 3.9 | tested: measured with the SAE in the forward pass |
| `HookedTransformer`: not rotary, sinks, bidirectional | 3.9 | refused, with the reason |

On a model in memory `window:` works and `ntk:` / `rope-base:` are refused (a built model's RoPE frequencies are
fixed: save it and load the folder with `variant=`). A bridge is booted around the transformers model's very module,
which is given back as it was: the bridge's wrappers are in its modules only while poslens runs it, each module keeps its
training mode, and no hook of poslens's is left. Your own hooks run where the bridge calls their module and are listed in
`meta["model"]["user_hooks"]`; a hook on a module the bridge never calls (`self_attn` itself) is refused, not skipped.
A HookedTransformer's masked scores are −inf, treated as masked; on the same float64 weights it matches the
transformers path to 1e-8 (`tests/unit/model/test_in_memory.py`, `tests/unit/model/test_hooked_transformer.py`).

TransformerLens 3.9 is the last line with `HookedTransformer`, and SAELens needs it; poslens allows it as well as 4.x.
`make test` runs the tiny-model core (loading, the scores check, `measure`, the controls, the
HookedTransformer and HookedSAETransformer paths, the tutorial "your model, as it is") a second time over
TransformerLens 3.9.0 and sae-lens 6.54.12; `make test-integration` does the same for the dense references.

This page is generated by `docs/make_supported_models.py` from `TINY_MODELS` and `REFUSED_CONFIGS`
(`tests/compatibility_matrix.py`) and `tests/architecture_coverage.py`, and tested with transformers 5 and
TransformerLens 4 (and, for the tiny-model core and the objects in memory, TransformerLens 3.9).
"""


def _windows(config: Any) -> str:
    n = config.num_hidden_layers
    width = getattr(config, "sliding_window", None)
    if not width:
        return "none (full causal)"
    types = getattr(config, "layer_types", None)
    if not types:
        return f"sliding {width}, every layer"
    per_layer = [f"sliding {width}" if t == "sliding_attention" else "full" for t in types[:n]]
    return "per layer: " + ", ".join(per_layer)


def _rope(config: Any) -> str:
    params = config.rope_parameters
    if "rope_theta" in params:
        named = [("", params)]
    else:
        named = [(f"{name.removesuffix('_attention')}: ", p) for name, p in params.items() if isinstance(p, dict)]
    parts = []
    for prefix, p in named:
        extra = {k: v for k, v in p.items() if k not in ("rope_type", "rope_theta", "partial_rotary_factor")}
        scaling = f" ({', '.join(f'{k}={v:g}' if isinstance(v, float) else f'{k}={v}' for k, v in sorted(extra.items()))})" if extra else ""
        parts.append(f"{prefix}`{p.get('rope_type', 'default')}`{scaling}")
    return "; ".join(parts)


def _rotary(config: Any) -> str:
    factors = {float(p.get("partial_rotary_factor", getattr(config, "partial_rotary_factor", None) or 1.0)) for p in rope_parameter_dicts(config)}
    factor = factors.pop()
    return "full" if factor == 1.0 else f"partial ({factor:g} of each head)"


def _softcap(config: Any) -> str:
    caps = [(what, getattr(config, name, None)) for what, name in (("attention", "attn_logit_softcapping"), ("logits", "final_logit_softcapping"))]
    caps = [f"{what}" for what, value in caps if value]
    return ", ".join(caps) if caps else "no"


def _variants(config: Any) -> str:
    out = []
    for spec in VARIANTS:
        kind = spec.split(":")[0]
        reason = variant_refusal(config, parse_variant(spec))
        if reason is None:
            out.append(f"`{kind}:` ✓")
        else:
            out.append(f"`{kind}:` refused ({reason.split(':')[0]})")
    return "<br>".join(out)


def render() -> str:
    """The page's text (the test compares it with the file)."""
    header = "| Architecture | tiny kind | HF class | RoPE type (scaling) | rotary | sliding windows | soft-capping | variants | status |"
    rule = "|" + "---|" * 9
    rows = []
    for kind in TINY_KINDS:
        spec = TINY_MODELS[kind]
        config = tiny_config(kind).get_text_config()
        rows.append(
            f"| {spec.family} | `{kind}` | `{spec.architecture}` | {_rope(config)} | {_rotary(config)} | "
            f"{_windows(config)} | {_softcap(config)} | {_variants(config)} | tested (a)–(e) |"
        )
    refused = ["| Architecture | tiny kind | HF class | status |", "|---|---|---|---|"]
    for kind in UNSUPPORTED_KINDS:
        spec = TINY_MODELS[kind]
        refused.append(f"| {spec.family} | `{kind}` | `{spec.architecture}` | refused: {spec.refused} (tested) |")
    refused_configs = ["| HF class | config | status |", "|---|---|---|"]
    for hf_class, (config_class, _, missing) in REFUSED_CONFIGS.items():
        refused_configs.append(f"| `{hf_class}` | `{config_class}` | refused: {missing} (tested) |")
    architectures = bridgeable_architectures()
    not_yet = ", ".join(f"`{a.hf_class}`" for a in not_yet_tested()) or "none"
    covered = tested_architectures()
    no_rope = ", ".join(f"`{a.hf_class}`" for a in architectures if not a.rope and a.hf_class not in covered)
    outro = OUTRO.format(
        refused="\n".join(refused),
        refused_configs="\n".join(refused_configs),
        not_yet=not_yet,
        no_rope=no_rope,
        transformers=version("transformers"),
        transformer_lens=version("transformer-lens"),
    )
    return INTRO + "\n" + "\n".join([header, rule, *rows]) + "\n" + outro


def main() -> None:
    PAGE.write_text(render())
    print(f"wrote {PAGE}")


if __name__ == "__main__":
    main()
