"""poslens: where does absolute position come from in RoPE decoder-only transformers?

The public API, re-exported here (the tutorials use only these names):

- loading and measuring: :func:`load_model`, :func:`make_corpus`, :func:`measure`, :class:`Result`;
  :func:`hooked_transformer` (a TransformerLens 3.x ``HookedTransformer`` from a model in memory or a local folder, offline);
- interventions and their effect: :class:`BosReplacement`, :class:`SinkAblation`, :func:`reduction`, :func:`paired_difference`;
- per-head answers: :func:`sink_heads` (the sink-reading heads with their C_res and C_mask);
- cause: :func:`calibrate_relativization` and :class:`Relativization` (an edit that leaves each head's logits no
  absolute component), :func:`cumulative_attribution` (every layer relativized, each measured before its own edit);
  the path-specific tests :func:`path_specific_tests`, with their edits :class:`KeyPhaseFreeze` (key 0's RoPE phase
  frozen) and :class:`MaskOnlySinkProfile` (the sink's mask-only key-0 mass);
- architectures: :class:`Case`, :func:`compare`, :func:`case_table`;
- the study: :class:`Study`, :class:`Settings`, :mod:`claims` (verdicts C1–C7), :mod:`plots`.

Everything else lives in the layers (``poslens.fit``, ``poslens.model``, ...; see docs/architecture.md).

>>> import poslens
>>> model = poslens.load_model("smollm2-135m")                      # doctest: +SKIP
>>> corpus = poslens.make_corpus(model, "docs", n_seqs=8, seq_len=128)  # doctest: +SKIP
>>> result = poslens.measure(model, corpus)                          # doctest: +SKIP
>>> result.to_frame().query("metric == 'c_res'")                     # doctest: +SKIP
>>> sorted(name for name in poslens.__all__ if name[0].isupper())[:3]
['BosReplacement', 'Case', 'Corpus']
"""

import importlib
import importlib.util
from typing import TYPE_CHECKING, Any

from poslens import progress as _progress  # noqa: F401 (at import, as before: silences tqdm.auto's "IProgress not found" in a notebook without ipywidgets)
from poslens.version import __version__

# Each public name and where it lives: ``poslens.X`` imports its module on first use, so that
# ``import poslens`` and ``poslens --help`` load neither torch nor transformers until a name needs them.
# The imports under TYPE_CHECKING say the same for type checkers and the API docs.
_WHERE: dict[str, tuple[str, str]] = {
    "plots": ("poslens.measurement.plots", ""),
    "measure": ("poslens.measurement.pipeline", "measure"),
    "Result": ("poslens.measurement.result", "Result"),
    "Case": ("poslens.mechanisms.architectures", "Case"),
    "case_table": ("poslens.mechanisms.architectures", "case_table"),
    "compare": ("poslens.mechanisms.architectures", "compare"),
    "cumulative_attribution": ("poslens.mechanisms.attribution", "cumulative_attribution"),
    "paired_difference": ("poslens.mechanisms.effects", "paired_difference"),
    "reduction": ("poslens.mechanisms.effects", "reduction"),
    "BosReplacement": ("poslens.mechanisms.interventions", "BosReplacement"),
    "SinkAblation": ("poslens.mechanisms.interventions", "SinkAblation"),
    "KeyPhaseFreeze": ("poslens.mechanisms.key_phase", "KeyPhaseFreeze"),
    "MaskOnlySinkProfile": ("poslens.mechanisms.mask_only_sink", "MaskOnlySinkProfile"),
    "path_specific_tests": ("poslens.mechanisms.path_tests", "path_specific_tests"),
    "Relativization": ("poslens.mechanisms.relativization", "Relativization"),
    "calibrate_relativization": ("poslens.mechanisms.relativization_fit", "calibrate"),
    "sink_heads": ("poslens.mechanisms.sinks", "sink_heads"),
    "Corpus": ("poslens.model.corpus", "Corpus"),
    "make_corpus": ("poslens.model.corpus", "make_corpus"),
    "hooked_transformer": ("poslens.model.hooked_build", "hooked_transformer"),
    "ModelNotSupportedError": ("poslens.model.loading", "ModelNotSupportedError"),
    "PosModel": ("poslens.model.loading", "PosModel"),
    "load_model": ("poslens.model.loading", "load_model"),
    "REGISTRY": ("poslens.model.registry", "REGISTRY"),
    "registry_names": ("poslens.model.registry", "registry_names"),
    "Variant": ("poslens.model.variants", "Variant"),
    "parse_variant": ("poslens.model.variants", "parse_variant"),
    "claims": ("poslens.study.claims", ""),
    "Settings": ("poslens.study.parts", "Settings"),
    "Study": ("poslens.study.parts", "Study"),
}

if TYPE_CHECKING:
    from poslens.measurement import plots
    from poslens.measurement.pipeline import measure
    from poslens.measurement.result import Result
    from poslens.mechanisms.architectures import Case, case_table, compare
    from poslens.mechanisms.attribution import cumulative_attribution
    from poslens.mechanisms.effects import paired_difference, reduction
    from poslens.mechanisms.interventions import BosReplacement, SinkAblation
    from poslens.mechanisms.key_phase import KeyPhaseFreeze
    from poslens.mechanisms.mask_only_sink import MaskOnlySinkProfile
    from poslens.mechanisms.path_tests import path_specific_tests
    from poslens.mechanisms.relativization import Relativization
    from poslens.mechanisms.relativization_fit import calibrate as calibrate_relativization
    from poslens.mechanisms.sinks import sink_heads
    from poslens.model.corpus import Corpus, make_corpus
    from poslens.model.hooked_build import hooked_transformer
    from poslens.model.loading import ModelNotSupportedError, PosModel, load_model
    from poslens.model.registry import REGISTRY, registry_names
    from poslens.model.variants import Variant, parse_variant
    from poslens.study import claims
    from poslens.study.parts import Settings, Study


def __getattr__(name: str) -> Any:
    """Import the public name ``name`` from its module on first use (PEP 562) and keep it in the package.

    A subpackage or module (``poslens.measurement``, ``poslens.testing``) is imported on first use too, as
    the eager imports used to make ``poslens.measurement.result`` reachable after ``import poslens``.
    """
    if name not in _WHERE:
        if not name.startswith("_") and importlib.util.find_spec(f"{__name__}.{name}") is not None:
            return importlib.import_module(f"{__name__}.{name}")
        raise AttributeError(f"module 'poslens' has no attribute {name!r}")
    module_name, attribute = _WHERE[name]
    module = importlib.import_module(module_name)
    value = getattr(module, attribute) if attribute else module
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


__all__ = [
    "BosReplacement",
    "Case",
    "Corpus",
    "KeyPhaseFreeze",
    "MaskOnlySinkProfile",
    "ModelNotSupportedError",
    "PosModel",
    "REGISTRY",
    "Relativization",
    "Result",
    "Settings",
    "SinkAblation",
    "Study",
    "Variant",
    "__version__",
    "calibrate_relativization",
    "case_table",
    "claims",
    "compare",
    "cumulative_attribution",
    "hooked_transformer",
    "load_model",
    "make_corpus",
    "measure",
    "paired_difference",
    "parse_variant",
    "path_specific_tests",
    "plots",
    "reduction",
    "registry_names",
    "sink_heads",
]
