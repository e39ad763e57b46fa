"""Shared fixtures: tiny real models saved to disk, and the two embedded models.

Every fixture here is session-scoped, so each model is built or loaded at most
once per test session:

- ``tiny_llama_dir``, ``tiny_mistral_dir``, ``tiny_gemma3_dir``: folders holding
  a tiny random Llama, Mistral (sliding window 8) and Gemma 3 (mixed windows),
  made by :func:`poslens.testing.save_tiny_model`, ready for ``load_model``;
- ``smollm2``, ``gemma3``: the embedded 4-bit models as :class:`poslens.PosModel`.
  Tests that use them are marked ``embedded`` automatically.

Every test also gets one kind marker (``unit``, ``integration``, ``notebooks``,
``docs``, ``browser``) from the first folder under ``tests/`` that holds its file, as
:mod:`suite_kinds` says: ``pytest -m unit`` (``make test-fast``) runs the fast set only.

The jaxtyping shape annotations of :mod:`poslens.fit` and :mod:`poslens.capture`
are checked at run time (beartype) for the whole session: the import hook is
installed here, before any test or fixture imports poslens.
"""

from __future__ import annotations

from jaxtyping import install_import_hook

install_import_hook(["poslens.fit", "poslens.capture"], "beartype.beartype")

import os
from pathlib import Path

import pytest
from suite_kinds import kind_of

TESTS = Path(__file__).resolve().parent

# Never reach the network from a test: everything must come from disk.
os.environ.setdefault("HF_HUB_OFFLINE", "1")

EMBEDDED_FIXTURES = ("smollm2", "gemma3")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Marks on fixtures have no effect in pytest, so mark the tests that use them.
    for item in items:
        if any(name in getattr(item, "fixturenames", ()) for name in EMBEDDED_FIXTURES):
            item.add_marker(pytest.mark.embedded)
        embedded, marked = (item.get_closest_marker(name) is not None for name in ("embedded", "integration"))
        kind = kind_of(item.path.resolve().relative_to(TESTS), embedded=embedded, marked_integration=marked)
        item.add_marker(getattr(pytest.mark, kind))


def _tiny_dir(tmp_path_factory: pytest.TempPathFactory, kind: str) -> Path:
    from poslens.testing import save_tiny_model

    return save_tiny_model(tmp_path_factory.mktemp(f"tiny_{kind}"), kind)


@pytest.fixture(scope="session")
def tiny_llama_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random Llama (3 layers, 4 heads / 2 kv heads, head_dim 16, θ = 1e4) saved with a byte tokenizer."""
    return _tiny_dir(tmp_path_factory, "llama")


@pytest.fixture(scope="session")
def tiny_mistral_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random Mistral with a sliding window of 8 in every layer."""
    return _tiny_dir(tmp_path_factory, "mistral")


@pytest.fixture(scope="session")
def tiny_gemma3_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random Gemma 3: three sliding layers (W = 8, θ = 1e4), then one global (θ = 1e6)."""
    return _tiny_dir(tmp_path_factory, "gemma3")


def _embedded(name: str):
    import poslens
    from poslens.model.registry import REGISTRY

    entry = REGISTRY[name]
    if not entry.installed():
        pytest.skip(f"embedded model {name!r} is not installed; install it with: {entry.install_command}")
    return poslens.load_model(name)


@pytest.fixture(scope="session")
def smollm2():
    """The embedded SmolLM2-135M (GGUF Q4_1, dequantized to float32), loaded once per session."""
    return _embedded("smollm2-135m")


@pytest.fixture(scope="session")
def gemma3():
    """The embedded Gemma 3 270M (GGUF Q4_K_M, dequantized to float32), loaded once per session."""
    return _embedded("gemma3-270m")
