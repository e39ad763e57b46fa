"""The path-tests part (methodology §12): the path-specific causal tests, which decide C3."""

from __future__ import annotations

from typing import TYPE_CHECKING

from poslens.study import part_printing
from poslens.study.part_registry import MEASURE_KEYS, MEASURED_OPTIONS, Part, lazy, measured_tokens

if TYPE_CHECKING:
    from poslens.measurement.result import Result
    from poslens.study.parts import Study
    from poslens.study.settings import Settings

from poslens.options import default_path_offsets


def compute(study: Study) -> Result:
    """The path-specific causal tests: the key-0 phase freeze, its key-1 sham, the mask-only sink profile (methodology §12).

    Runs on the leakage part's corpus and groups, with the leakage part as the
    unedited baseline (its sink-reading heads at τ and its cross-fitted absolute
    component), one full forward pass per edit: offsets D = ``path_offsets``
    (default :func:`poslens.options.default_path_offsets`), the sham at each, the mask-only profile at
    each dose of ``path_doses``, and the sink-path ablation.

    Args:
        study: The study.

    Returns:
        The part's tidy result (:func:`~poslens.mechanisms.path_tests.path_specific_tests`), reused from the folder
        when it matches.

    Example:
        >>> fall = study.path_tests().table.query("metric == 'resid_probe_r2_ge2' and kind == 'difference'")  # doctest: +SKIP
    """
    from poslens.mechanisms.path_tests import path_specific_tests

    base = study.leakage()  # first: the baseline, reused when saved

    def measured() -> Result:
        s = study.settings
        return path_specific_tests(
            study.model(),
            study.corpus(),
            offsets=s.path_offsets or None,
            doses=s.path_doses,
            groups=s.groups,
            early=s.early,
            batch_size=int(base.meta.get("settings", {}).get("batch_size") or s.batch_size),  # the leakage part's batches
            tau=s.tau,
            baseline=base,
            progress=True,
        )

    return study.cached(DECLARES[0].name, measured)


def warnings(settings: Settings, result: Result) -> list[str]:
    """The warning of offsets D at or beyond the sequence length (the freeze edits nothing the corpus exercises).

    Args:
        settings: The settings it was computed with.
        result: The part.

    Returns:
        One sentence naming ``--offsets``, or none.

    Example:
        >>> from poslens.study.settings import Settings
        >>> print(*warnings(Settings(seq_len=32, path_offsets=(8, 64)), None))  # doctest: +ELLIPSIS
        --offsets 64 is not below --seq-len 32: the freeze puts each query 64 tokens from key 0, an offset ...
    """
    beyond = [d for d in settings.path_offsets if d >= settings.seq_len]
    if not beyond:
        return []
    listed = ",".join(map(str, beyond))
    return [
        f"--offsets {listed} {'is' if len(beyond) == 1 else 'are'} not below --seq-len {settings.seq_len}: the freeze "
        f"puts each query {listed} tokens from key 0, an offset these sequences never show the model, so the edit "
        f"moves key 0's logit outside what the corpus exercises; give offsets below {settings.seq_len}"
    ]


DECLARES = (
    Part(
        "path-tests",
        "Path-specific causal tests: freeze key 0's RoPE phase (and key 1's, the sham), the mask-only sink profile (methodology §12).\n\n"
        "Each edit is one full forward pass over the leakage part's corpus (measured first if it is not in --out), read "
        "against the unedited run on the same tokens: the residual stream's and the attention outputs' position content "
        "(held-out probe R², η²), L(log a) with its numerator and SST, a_i0 in the sink-reading heads and the loss.\n\n"
        "Example: poslens path-tests --model smollm2-135m --n-seqs 16 --seq-len 128 --offsets 8,64 --doses 0.5,1 --out results/quick",
        (*MEASURE_KEYS, "tau", "path_offsets", "path_doses"),
        (*MEASURED_OPTIONS, "tau", "path_offsets", "path_doses"),
        show=part_printing.show_path_tests,
        figure_metrics=("resid_probe_r2", "resid_probe_r2_ge2", "leakage_pattern_ge2"),
        # the unedited run, the freeze and the sham at each offset, each dose and the ablation, each a full forward
        # whose residual readouts cost about as much again
        tokens=lambda s: (
            2 * (1 + 2 * (len(s.path_offsets or default_path_offsets(s.seq_len))) + len(s.path_doses) + 1) * measured_tokens(s.n_seqs, s.seq_len)
        ),
        order=50,
        compute=compute,
        provides=("path",),
        figures=lazy("poslens.study.report_figures:path_test_figures"),
        figure_order=5,
        warnings=warnings,
        zoo=lazy("poslens.study.zoo_figures:path_edit_figures"),
        zoo_order=6,
    ),
)
"""The part, for the registry."""
