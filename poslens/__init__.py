"""poslens: where does absolute position come from in RoPE decoder-only transformers?

The public API, re-exported here:

>>> import poslens
>>> model = poslens.load_model("smollm2-135m")                      # doctest: +SKIP
>>> corpus = poslens.make_corpus(model, "docs", n_seqs=8, seq_len=128)  # doctest: +SKIP
>>> result = poslens.measure(model, corpus)                          # doctest: +SKIP
>>> result.to_frame().query("metric == 'c_res'")                     # doctest: +SKIP
"""

from poslens import claims, effects, fingerprint, interventions, sinks
from poslens.corpus import Corpus, make_corpus
from poslens.measure import measure
from poslens.models import ModelNotSupportedError, PosModel, load_model
from poslens.registry import REGISTRY, registry_names
from poslens.results import Result
from poslens.variants import Variant, parse_variant

__version__ = "0.1.0"

__all__ = [
    "Corpus",
    "ModelNotSupportedError",
    "PosModel",
    "REGISTRY",
    "Variant",
    "__version__",
    "claims",
    "effects",
    "fingerprint",
    "interventions",
    "sinks",
    "Result",
    "load_model",
    "make_corpus",
    "measure",
    "parse_variant",
    "registry_names",
]
