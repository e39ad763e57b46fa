"""The position-0 fingerprint (methodology §8, claim C6): the table its forward passes give.

Under a causal mask position 0 attends only to itself, so its residual stream
is a deterministic function of its one token. :func:`~poslens.mechanisms.position0_passes.position0_trajectories`
records it, :func:`poslens.fit.dispersion.dispersion` measures its spread across
inputs (zero with a constant BOS), :func:`trajectory_similarity` compares first
tokens, :func:`readout` decodes the position-0 token from sink-reading heads'
outputs at later positions (K tokens, every token in every group, features
standardized on the training folds, chance 1/K and a label-permutation null),
and :func:`fingerprint` runs all of it into one tidy Result. The forward
passes are in :mod:`poslens.mechanisms.position0_passes`; the statistics on
their arrays (numpy only) in :mod:`poslens.fit.dispersion` and :mod:`poslens.fit.readout`.

Layer index l < L means "entering block l" (``blocks.l.hook_resid_pre``;
l = 0 is the embedding); l = L means "leaving the last block". Layer −1 and
head −1 in the table are the aggregates defined beside
:data:`poslens.measurement.table.COLUMNS`; the glossary entry of each metric
says how it aggregates.
"""

from __future__ import annotations

import warnings
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
import torch

from poslens.errors import InputError
from poslens.fit.bounds import clip_interval
from poslens.fit.dispersion import Interval, cosine_jackknife, jackknife_replicates, relative_dispersion, with_layer_mean
from poslens.fit.groups import group_of
from poslens.fit.readout import Readout, balanced_classes, centroid_readout, readout_by_layer
from poslens.fit.stats import jackknife_interval
from poslens.measurement.pipeline import measure
from poslens.measurement.provenance import run_metadata
from poslens.measurement.result import Result
from poslens.measurement.table import COLUMNS
from poslens.mechanisms.position0_passes import position0_trajectories, readout_features
from poslens.mechanisms.sinks import DEFAULT_TAU, sink_reading_heads, sink_table
from poslens.model.corpus import Corpus, make_corpus
from poslens.model.guards import check_seq_len, require_pos_model
from poslens.model.pos_model import PosModel
from poslens.options import DEFAULTS

BOS_TOLERANCE = 1e-5  # methodology §8 built-in check: relative dispersion with a constant BOS must be this small


def trajectory_similarity(model: PosModel, token_ids: Sequence[int]) -> Interval:
    """Mean pairwise cosine similarity of the position-0 trajectories of different first tokens, per layer.

    Each token is run as a one-token input: position 0 sees only itself, so
    this is its trajectory in any sequence. The 95% interval is a
    delete-one-token jackknife (the tokens are a sample of possible first
    tokens). Returns (value, ci_low, ci_high), each [L + 1].

    Args:
        model: The loaded model.
        token_ids: Distinct first tokens.

    Returns:
        ``(value, ci_low, ci_high)``, each [L + 1].

    Raises:
        InputError: When ``token_ids`` holds a token twice (a ``ValueError``).

    Example:
        >>> import tempfile, poslens
        >>> from poslens.testing import save_tiny_model
        >>> model = poslens.load_model(save_tiny_model(tempfile.mkdtemp(), "llama"))
        >>> value, low, high = trajectory_similarity(model, [13, 28, 30, 40])
        >>> value.shape == (model.n_layers + 1,), bool((low <= value).all() and (value <= high).all())
        (True, True)
    """
    if len(set(token_ids)) != len(token_ids):
        raise InputError(f"token_ids must be distinct, got {list(token_ids)}")
    x = position0_trajectories(model, torch.tensor(list(token_ids), dtype=torch.long)[:, None])
    estimate, replicates = cosine_jackknife(x)
    return (estimate, *jackknife_interval(estimate, replicates))


def readout(
    model: PosModel,
    corpus: Corpus,
    heads: Sequence[tuple[int, int]],
    positions: Sequence[int] | None = None,
    groups: int = DEFAULTS.groups,
    n_permutations: int = 200,
    seed: int = 0,
) -> Readout:
    """How well the position-0 token of each sequence can be decoded from later positions' outputs of ``heads``.

    Features: :func:`~poslens.mechanisms.position0_passes.readout_features`; labels: ``corpus.position0_token_ids``;
    classifier, chance (1/K) and permutation null: :func:`~poslens.fit.readout.centroid_readout`.

    Args:
        model: The loaded model.
        corpus: A corpus with a varied position 0 (:func:`varied_corpus`).
        heads: ``(layer, head)`` pairs to read.
        positions: Query positions to average over; default all i ≥ 1.
        groups: Number of contiguous groups (folds).
        n_permutations: Number of label permutations of the null.
        seed: Seed of the permutations.

    Returns:
        The readout's accuracy against chance and the null.

    Example:
        >>> r = readout(model, varied_corpus(model, 64, 48, 8, groups=8), [(3, 0), (5, 2)], groups=8)  # doctest: +SKIP
        >>> r.accuracy, r.chance, r.p_value  # doctest: +SKIP
    """
    features = readout_features(model, corpus.tokens, heads, positions)
    return centroid_readout(features, corpus.position0_token_ids, groups, n_permutations, seed)


def varied_corpus(model: PosModel, n_seqs: int, seq_len: int, n_first_tokens: int, seed: int = 0, groups: int = DEFAULTS.groups) -> Corpus:
    """'docs' text after a position-0 slot holding one of K frequent tokens, every token in every group.

    The K tokens are the most frequent non-special tokens of the sampled text
    (ties: smaller id). Which sequence gets which token:
    :func:`~poslens.fit.readout.balanced_classes` (within each of the ``groups`` contiguous groups,
    the j-th sequence gets token j mod K), so every token is present in every
    training fold of :func:`~poslens.fit.readout.centroid_readout`; ``n_seqs`` must be ≥ K · groups.
    Each sequence continues with its own text window (windows do not overlap),
    so each token is followed by n_seqs / K different continuations. The
    windows are those of ``position0='bos'`` with the same seed (the first
    n of them for a BOS corpus of n ≤ n_seqs sequences), so the corpora differ
    only at position 0.

    Args:
        model: The loaded model.
        n_seqs: Number of sequences, at least K · groups.
        seq_len: Tokens per sequence.
        n_first_tokens: Number of first tokens K.
        seed: Seed of the text windows.
        groups: Number of contiguous groups.

    Returns:
        The corpus, with ``position0_token_ids`` set.

    Raises:
        InputError: When the sampled text holds fewer than K distinct tokens (a ``ValueError``).

    Example:
        >>> c = varied_corpus(model, 64, 48, 8, groups=8)  # doctest: +SKIP
        >>> c.position0, c.meta["first_token_ids"][:2]  # doctest: +SKIP
    """
    classes = balanced_classes(n_seqs, n_first_tokens, groups)  # checks the size before any text is read
    base = make_corpus(model, "docs", n_seqs, seq_len, position0="token:0", seed=seed)
    special = set(getattr(model.tokenizer, "all_special_ids", []) or [])
    counts = Counter(t for t in base.tokens[:, 1:].flatten().tolist() if t not in special)
    first = [t for t, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:n_first_tokens]]
    if len(first) < n_first_tokens:
        raise InputError(f"the sampled text holds only {len(first)} distinct tokens; ask for fewer first tokens")
    tokens = base.tokens.clone()
    tokens[:, 0] = torch.tensor(first)[torch.from_numpy(classes)]
    ids = tokens[:, 0].tolist()
    strings = model.tokenizer.convert_ids_to_tokens(first)
    meta = {
        **base.meta,
        "first_token_ids": first,
        "first_tokens": strings,
        "groups": groups,
        "first_token_rule": "within each of the contiguous groups, the j-th sequence gets token j mod K: every token in every group",
    }
    return Corpus(tokens, base.source, seed, "varied", ids, model.tokenizer.convert_ids_to_tokens(ids), meta)


def _row(model: PosModel, intervention: str, metric: str, layer: int, value: float, low: float, high: float) -> dict[str, Any]:
    low, high = clip_interval(metric, value, low, high)  # a dispersion is ≥ 0, a cosine in [−1, 1]
    return dict(
        model=model.label,
        variant=model.variant_name,
        intervention=intervention,
        layer=int(layer),
        head=-1,
        query_window="all",
        metric=metric,
        value=float(value),
        ci_low=float(low),
        ci_high=float(high),
    )


def _heads_to_read(sink_result: Result, tau: float) -> tuple[list[tuple[int, int]], str]:
    """Sink-reading heads (score ≥ τ), or the 3 highest-scoring heads if none reaches τ, with the rule used."""
    heads = sink_reading_heads(sink_result, tau)
    if heads:
        return heads, f"sink score >= tau = {tau}"
    scores = sink_table(sink_result, tau).query("metric == 'sink_score'").sort_values("value", ascending=False, kind="stable")
    top = sorted((int(l), int(h)) for l, h in zip(scores["layer"][:3], scores["head"][:3], strict=False))
    return top, f"no head reached tau = {tau}: the 3 heads with the highest sink score"


def fingerprint(
    model: PosModel,
    n_seqs: int = 32,
    seq_len: int = 64,
    n_first_tokens: int = 8,
    groups: int = DEFAULTS.groups,
    seed: int = 0,
    tau: float = DEFAULT_TAU,
    sink_result: Result | None = None,
    readout_seqs: int | None = None,
    n_permutations: int = 200,
) -> Result:
    """methodology §8 in one call: dispersion, trajectory similarity and readout, as a tidy table.

    Rows (query_window ``all``, head −1; layer 0..L per layer and the aggregate −1, as its glossary entry says):

    - ``dispersion`` per layer, intervention ``position0:bos`` (docs text after
      BOS; the built-in check) and ``position0:none`` (position 0 = first text
      token), ``n_seqs`` sequences each;
    - ``trajectory_cosine`` per layer, ``position0:varied``: the K first tokens
      run as one-token inputs (interval: delete-one-token jackknife);
    - readout, intervention ``position0:varied``, on ``readout_seqs`` sequences
      (default 4 · K · groups, i.e. 4 sequences per token per group: 256 with the
      defaults; at least K · groups) whose position-0 token is one of the K most
      frequent text tokens, every token in every group (:func:`varied_corpus`):
      ``readout_accuracy`` (held-out, interval over folds), ``readout_chance``
      = 1/K, ``readout_chance_permuted`` (the within-group label-permutation
      null: mean and central 95% range) and ``readout_p_value`` (interval =
      value); classifier: :func:`~poslens.fit.readout.centroid_readout`, per layer
      by :func:`~poslens.fit.readout.readout_by_layer`. Features are
      standardized on the training folds, so heads with large outputs do not
      swamp the rest. There is no readout with BOS: one class, so accuracy could
      not exceed chance by design; the BOS dispersion is the check there.

    The heads read are ``sink_reading_heads(sink_result, tau)``; without
    ``sink_result``, ``poslens.measure`` is run on the BOS corpus to get them.
    If no head reaches τ, the 3 heads with the highest sink score are read
    (``meta['heads_rule']`` says which). ``meta['bos_check']`` records the
    built-in check that BOS dispersion is ≤ ``BOS_TOLERANCE`` (a warning if not).

    Args:
        model: The loaded model.
        n_seqs: Sequences per dispersion corpus.
        seq_len: Tokens per sequence.
        n_first_tokens: Number of first tokens K of the readout and the similarity.
        groups: Number of contiguous groups (jackknife groups and folds).
        seed: Seed of the text windows and permutations.
        tau: Sink-score threshold of the heads read.
        sink_result: A measured result to pick the heads from; default: measured here.
        readout_seqs: Sequences of the readout corpus; default 4 · K · groups.
        n_permutations: Number of label permutations of the readout's null.

    Returns:
        The tidy table, with ``meta['heads_rule']`` and ``meta['bos_check']``.

    Example:
        >>> result = fingerprint(poslens.load_model("smollm2-135m"), n_seqs=16, seq_len=48, groups=4)  # doctest: +SKIP
        >>> result.select("readout_accuracy")[["layer", "value", "ci_low", "ci_high"]]  # doctest: +SKIP
    """
    require_pos_model(model, "fingerprint()")
    # Named as users set it: --fingerprint-len / the study's fingerprint_len, not the leakage part's --seq-len.
    check_seq_len(
        model, seq_len, option="--fingerprint-len", parameter="fingerprint_len= of Settings or Study.with_settings, seq_len= of fingerprint()"
    )
    readout_seqs = 4 * n_first_tokens * groups if readout_seqs is None else readout_seqs
    balanced_classes(readout_seqs, n_first_tokens, groups)  # fail before any forward pass
    bos = make_corpus(model, "docs", n_seqs, seq_len, position0="bos", seed=seed)
    none = make_corpus(model, "docs", n_seqs, seq_len, position0="none", seed=seed)
    varied = varied_corpus(model, readout_seqs, seq_len, n_first_tokens, seed, groups)
    sink_source = "given sink_result" if sink_result is not None else "poslens.measurement.pipeline on the position0:bos corpus"
    if sink_result is None:
        sink_result = measure(model, bos, groups=groups, probe=False, progress=False)
    heads, rule = _heads_to_read(sink_result, tau)
    layers, rows = list(range(model.n_layers + 1)) + [-1], []
    for label, corpus in (("position0:bos", bos), ("position0:none", none)):
        x = np.asarray(position0_trajectories(model, corpus.tokens), dtype=np.float64)
        values = with_layer_mean(*jackknife_replicates(relative_dispersion, x, group_of(n_seqs, groups)))
        rows += [_row(model, label, "dispersion", *row) for row in zip(layers, *values, strict=False)]
        if label == "position0:bos":
            worst = float(values[0][:-1].max())
            bos_check = dict(max_dispersion=worst, tolerance=BOS_TOLERANCE, passed=worst <= BOS_TOLERANCE)
            if worst > BOS_TOLERANCE:
                warnings.warn(
                    f"position-0 dispersion with BOS is {worst:.2e} > {BOS_TOLERANCE:g}: position 0 is not "
                    "a closed system in this forward pass (check hooks, padding or masks)",
                    stacklevel=2,
                )
    first = varied.meta["first_token_ids"]
    values = with_layer_mean(*cosine_jackknife(position0_trajectories(model, torch.tensor(first)[:, None])))
    rows += [_row(model, "position0:varied", "trajectory_cosine", *row) for row in zip(layers, *values, strict=False)]
    features = readout_features(model, varied.tokens, heads)
    readouts = readout_by_layer(features, varied.position0_token_ids, heads, groups, n_permutations, seed)
    for layer, r in readouts.items():
        rows += [
            _row(model, "position0:varied", metric, layer, *figures)
            for metric, figures in (
                ("readout_accuracy", (r.accuracy, r.ci_low, r.ci_high)),
                ("readout_chance", (r.chance,) * 3),
                ("readout_chance_permuted", (r.permuted_chance, r.permuted_low, r.permuted_high)),
                ("readout_p_value", (r.p_value,) * 3),
            )
        ]
    settings = dict(
        n_seqs=n_seqs,
        seq_len=seq_len,
        n_first_tokens=n_first_tokens,
        groups=groups,
        seed=seed,
        tau=tau,
        readout_seqs=readout_seqs,
        n_permutations=n_permutations,
    )
    meta = run_metadata(model, bos, settings)
    meta.update(
        corpora={"position0:bos": bos.describe(), "position0:none": none.describe(), "position0:varied": varied.describe()},
        first_token_ids=first,
        first_tokens=varied.meta["first_tokens"],
        heads=[list(h) for h in heads],
        head_sink_scores=[float(sink_result.select("key0_mass", "all", l, h)["value"].iloc[0]) for l, h in heads],
        heads_rule=rule,
        sink_source=sink_source,
        bos_check=bos_check,
        readout={"position0:varied": vars(readouts[-1])},
        readout_design=dict(
            classes=n_first_tokens,
            groups=groups,
            n_seqs=readout_seqs,
            assignment=varied.meta["first_token_rule"],
            features="per sequence, the mean over positions i >= 1 of each read head's hook_z, concatenated",
            classifier="nearest class centroid on features standardized with the training groups' mean and sd",
            chance="1/K",
            null=f"{n_permutations} label permutations within groups, same folds and classifier",
        ),
    )
    return Result(pd.DataFrame(rows, columns=COLUMNS), meta)
