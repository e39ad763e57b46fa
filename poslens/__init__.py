"""poslens: where does absolute position come from in RoPE decoder-only transformers?

The public API, re-exported here:

>>> import poslens
>>> model = poslens.load_model("smollm2-135m")                      # doctest: +SKIP
>>> corpus = poslens.make_corpus(model, "docs", n_seqs=8, seq_len=128)  # doctest: +SKIP
>>> result = poslens.measure(model, corpus)                          # doctest: +SKIP
>>> result.to_frame().query("metric == 'c_res'")                     # doctest: +SKIP
"""

from poslens.study import claims
from poslens.mechanisms import effects
from poslens.mechanisms import fingerprint
from poslens.mechanisms import interventions
from poslens.mechanisms import sinks
from poslens.model.corpus import Corpus, make_corpus
from poslens.measurement.pipeline import measure
from poslens.model.loading import ModelNotSupportedError, PosModel, load_model
from poslens.model.registry import REGISTRY, registry_names
from poslens.measurement.result import Result
from poslens.model.variants import Variant, parse_variant

from poslens.version import __version__

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
