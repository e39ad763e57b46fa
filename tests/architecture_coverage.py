"""Which architectures the installed libraries could bridge, and which of them the matrix tests.

poslens reads attention through a TransformerLens bridge of a transformers
causal language model. :func:`bridgeable_architectures` lists every causal-LM
class of the installed transformers that TransformerLens has an architecture
adapter for, each with whether its default config uses rotary position
embeddings; :func:`not_yet_tested` keeps the RoPE ones that the compatibility
tests do not cover (:data:`compatibility_matrix.TINY_MODELS`, tested or refused, and
:data:`compatibility_matrix.REFUSED_CONFIGS`). ``docs/make_supported_models.py``
writes the supported-models page from these, so the page follows the libraries.
Test data, not part of the package: import it from a test as ``import architecture_coverage``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from compatibility_matrix import REFUSED_CONFIGS, TINY_MODELS

from poslens.model.variants import rope_parameter_dicts


@dataclass(frozen=True)
class Architecture:
    """A causal-LM class of transformers that TransformerLens can bridge.

    ``rope`` says whether the default config of ``config_class`` has rotary
    position embeddings (``rope_parameters`` with a ``rope_theta``).

    Attributes:
        hf_class: The transformers causal-LM class.
        model_type: Its config's ``model_type``.
        config_class: Its config class.
        rope: Whether its default config has rotary position embeddings.

    Example:
        >>> arch = next(a for a in bridgeable_architectures() if a.hf_class == "FalconForCausalLM")
        >>> arch.model_type, arch.config_class, arch.rope
        ('falcon', 'FalconConfig', True)
    """

    hf_class: str
    model_type: str
    config_class: str
    rope: bool


def _config_class_for(hf_class: str, model_types: list[str]) -> tuple[str, str]:
    """The model type (and its config class) a causal-LM class belongs to.

    Some classes serve several model types (``LlamaForCausalLM`` also serves ``exaone``); the one whose config class
    shares the class's name is its own.
    """
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    stem = hf_class.lower()
    own = [t for t in model_types if stem.startswith(CONFIG_MAPPING_NAMES[t].removesuffix("Config").lower())]
    model_type = max(own, key=lambda t: (len(CONFIG_MAPPING_NAMES[t]), t.replace("-", "_") in stem)) if own else model_types[0]
    return model_type, CONFIG_MAPPING_NAMES[model_type]


def _has_rope(config_class: str) -> bool:
    import transformers

    return bool(rope_parameter_dicts(getattr(transformers, config_class)().get_text_config()))


@functools.cache
def bridgeable_architectures() -> tuple[Architecture, ...]:
    """Every causal-LM class of the installed transformers that the installed TransformerLens has an adapter for.

    A class counts when transformers' ``AutoModelForCausalLM`` maps a model type
    to it and TransformerLens' architecture registry names it; sorted by class name.
    Computed once per process (it builds every default config, a few seconds).

    Returns:
        The architectures, sorted by class name.

    Example:
        >>> names = [a.hf_class for a in bridgeable_architectures()]
        >>> "LlamaForCausalLM" in names, "GPT2LMHeadModel" in names, "BertForMaskedLM" in names
        (True, True, False)
    """
    import transformers
    from transformer_lens.factories.architecture_adapter_factory import SUPPORTED_ARCHITECTURES
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    model_types: dict[str, list[str]] = {}
    for model_type, classes in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.items():
        for name in [classes] if isinstance(classes, str) else classes:
            model_types.setdefault(name, []).append(model_type)
    found = []
    for name in sorted(set(model_types) & set(SUPPORTED_ARCHITECTURES)):
        if not hasattr(transformers, name):
            continue
        model_type, config_class = _config_class_for(name, model_types[name])
        found.append(Architecture(name, model_type, config_class, _has_rope(config_class)))
    return tuple(found)


def tested_architectures() -> set[str]:
    """The HF classes (and model types) the compatibility tests cover, tested or refused.

    A class counts as covered when a kind of :data:`compatibility_matrix.TINY_MODELS` names it as its
    architecture or builds its config class (``ExaoneConfig`` is served by ``LlamaForCausalLM``), or
    when :data:`compatibility_matrix.REFUSED_CONFIGS` holds it (refused from its config alone).

    Returns:
        The class names and model types covered.

    Example:
        >>> covered = tested_architectures()
        >>> "LlamaForCausalLM" in covered, "gemma3_text" in covered, "JambaForCausalLM" in covered
        (True, True, True)
        >>> "Gemma3nForConditionalGeneration" in covered, "BertForMaskedLM" in covered   # refused from its config; no causal LM
        (True, False)
    """
    import transformers

    covered: set[str] = set()
    for spec in TINY_MODELS.values():
        covered.add(spec.architecture)
        covered.add(getattr(transformers, spec.config_class).model_type)
    return covered | set(REFUSED_CONFIGS)


def not_yet_tested() -> tuple[Architecture, ...]:
    """The RoPE architectures both libraries support that no tiny kind covers yet.

    An architecture is covered when :func:`tested_architectures` holds its class or model type.

    Returns:
        The architectures, sorted by class name.

    Example:
        >>> untested = {a.hf_class for a in not_yet_tested()}
        >>> "LlamaForCausalLM" in untested, all(a.rope for a in not_yet_tested())
        (False, True)
    """
    covered = tested_architectures()
    return tuple(a for a in bridgeable_architectures() if a.rope and a.hf_class not in covered and a.model_type not in covered)
