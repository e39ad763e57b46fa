"""The ``--full`` report's runtime estimate: seconds per token, timed here, times the tokens the study's parts process.

``poslens report --full`` prints this estimate before it starts. The cost
model counts each part's forward passes in tokens, scaled by ``1 + T/1024`` for
the attention's quadratic share at sequence length T, and multiplies by the
seconds per token of one short timed run of :func:`poslens.measurement.pipeline.collect_sums`
on the report's model (the capture hooks and the counterfactual replay
included). It is a rough guide for an idle machine, not a promise.

Each part declares its own cost (:attr:`poslens.study.part_registry.Part.tokens`).

Example:
    >>> from poslens.study.part_registry import estimated_tokens
    >>> from poslens.study.settings import Settings
    >>> tokens = estimated_tokens(Settings.full())
    >>> round(tokens / 1e6, 2)   # million tokens, before the seconds per token of the machine
    0.61
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from poslens.study.settings import Settings


def seconds_per_token(model_name: str) -> float:
    """Time one short capture run (2 sequences of 256 random tokens, 2 groups) of ``model_name``: its seconds per token.

    Args:
        model_name: A registry name or a model folder, as ``poslens report --model`` takes it.

    Returns:
        The wall-clock seconds of the run divided by its 512 tokens (the model's loading not counted).

    Example:
        >>> import tempfile
        >>> from poslens.testing import save_tiny_model
        >>> seconds_per_token(str(save_tiny_model(tempfile.mkdtemp(), "llama"))) > 0
        True
    """
    import time

    from poslens.measurement.pipeline import collect_sums
    from poslens.model.corpus import make_corpus
    from poslens.model.loading import load_model

    model = load_model(model_name)
    corpus = make_corpus(model, "random", n_seqs=2, seq_len=256, position0="bos", seed=0)
    start = time.perf_counter()
    collect_sums(model, corpus, groups=2, batch_size=2, progress=False)
    return (time.perf_counter() - start) / (2 * 256)


def estimate_line(s: Settings, per_token: float, plan: list[str] | None = None) -> str:
    """The line ``poslens report --full`` prints before it starts: the expected minutes and the timed seconds per token.

    The tokens are the sum of each part's declared cost
    (:func:`poslens.study.part_registry.estimated_tokens`), each forward weighted by ``1 + T/1024``.

    Args:
        s: The report's settings.
        per_token: Seconds per token, from :func:`seconds_per_token`.
        plan: The parts the report runs (default: every part).

    Returns:
        The line.

    Example:
        >>> from poslens.study.settings import Settings
        >>> estimate_line(Settings.full(), 2e-3)
        '--full: expecting roughly 20 minutes on this machine (calibrated at 2.0 ms per token; gemma3-270m costs more per token)'
    """
    from poslens.study.part_registry import estimated_tokens

    # per_token is timed with collect_sums itself (the forward with its hooks, then the counterfactual replay)
    tokens = estimated_tokens(s, plan)
    return (
        f"--full: expecting roughly {tokens * per_token / 60:.0f} minutes on this machine "
        f"(calibrated at {per_token * 1e3:.1f} ms per token; gemma3-270m costs more per token)"
    )
