"""The relativize part (methodology §11): every layer relativized, each measured before its own edit; it decides C7.

Longer than the other declarations: the part refuses (or, under ``--overwrite``, replaces) its old layout of table
format 1, and draws its calibration corpus disjoint from the measured one.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from poslens.study import part_printing
from poslens.study.part_registry import OptionConflictError, Part, lazy, measured_tokens

if TYPE_CHECKING:
    from poslens.measurement.result import Result
    from poslens.study.parts import Study


def check_options(settings: Mapping[str, Any]) -> None:
    """The relativize command's options that must agree: a calibration corpus disjoint from and large enough for its sizes.

    Args:
        settings: The command's settings.

    Raises:
        OptionConflictError: Naming the option to change.

    Example:
        >>> check_options({"seed": 0, "calibration_seed": 0, "relativize_seqs": 8, "calibration_seqs": None, "calibration_sizes": ()})
        Traceback (most recent call last):
        poslens.study.part_options.OptionConflictError: --calibration-seed 0 is the measured corpus's --seed: ...
    """
    seed, calibration_seed = settings["seed"], settings["calibration_seed"]
    if calibration_seed is not None and calibration_seed == seed:
        raise OptionConflictError(
            "--calibration-seed",
            f"--calibration-seed {calibration_seed} is the measured corpus's --seed: the calibration corpus (same --corpus and "
            f"--seq-len) must be disjoint from the measured one; pass another seed, or leave it out (--seed + 1 = {seed + 1})",
        )
    n_calibration = settings["relativize_seqs"] if settings["calibration_seqs"] is None else settings["calibration_seqs"]
    sizes = settings["calibration_sizes"]
    if sizes and max(sizes) > n_calibration:
        raise OptionConflictError(
            "--calibration-sizes",
            f"{max(sizes)} is more than the {n_calibration} sequences of the calibration corpus "
            f"(--calibration-seqs, default --n-seqs); use sizes in 2..{n_calibration}",
        )


def compute(study: Study) -> Result:
    """Cumulative attribution: every layer relativized in each mode, each measured before its own edit (methodology §11).

    The edit is fitted on a calibration corpus of the same source and length
    and another seed (``calibration_seed``, default ``seed + 1``), disjoint
    from the measured corpus by construction: N_cal + N windows are drawn
    and every one the measured corpus also holds is dropped
    (:meth:`~poslens.model.corpus.Corpus.excluding`; two seeds' draws of a
    small source share windows often). The part is ``relativize.parquet``, one
    tidy result (:func:`~poslens.mechanisms.attribution.cumulative_attribution`),
    reused, refused or measured again (``overwrite``) like the other parts. A folder
    holding the part in its old layout of table format 1 (``attribution.json`` and
    three ``attribution*.parquet``) is refused naming both layouts, unless ``overwrite``
    asks to measure it again (the old files poslens wrote are removed once the new part is written in full, so a
    failure on the way keeps them).

    Args:
        study: The study.

    Returns:
        The part's tidy result, reused from the folder when it matches.

    Raises:
        InputError: When the calibration seed is the measured corpus's seed (the corpora would not be disjoint),
            or the corpus holds fewer windows than the two disjoint corpora need (N + N_cal).
        OldLayoutError: When the folder holds the part in its old layout (and not ``overwrite``).
        SettingsMismatchError: When the saved part was made with other settings (and not ``overwrite``).
        InputsChangedError: When the saved part's input files changed since (and not ``overwrite``).

    Example:
        >>> from poslens.mechanisms.attribution import attribution_figure  # doctest: +SKIP
        >>> attribution_figure(study.relativize(), "all")[["value", "ci_low", "ci_high"]]  # doctest: +SKIP
    """
    from poslens.errors import InputError
    from poslens.mechanisms.attribution_table import OLD_FILES
    from poslens.ownership import remove_ours
    from poslens.runtime import distributed

    s = study.settings
    calibration_seed = s.seed + 1 if s.calibration_seed is None else s.calibration_seed
    if calibration_seed == s.seed:
        raise InputError(
            f"--calibration-seed {calibration_seed} is the measured corpus's --seed: the calibration corpus "
            f"must be disjoint from the measured one; pass another seed (default --seed + 1 = {s.seed + 1})"
        )
    replaces_old = _old_attribution_layout(study)
    result = study.cached(DECLARES[0].name, lambda: _attribution(study, calibration_seed))
    if replaces_old and distributed.is_main():  # only once the new part is written in full
        remove_ours([study.out / name for name in OLD_FILES])
    return result


def _old_attribution_layout(study: Study) -> bool:
    """Refuse the relativize part's old layout in the folder; under ``overwrite``, True: its old files go once the new part is written."""
    from poslens.errors import OldLayoutError
    from poslens.mechanisms.attribution_table import OLD_FILES, old_layout_message
    from poslens.runtime import distributed

    record = study.out / OLD_FILES[0]
    if distributed.decided_by_main(lambda: "old" if record.exists() else "none") == "none":
        return False
    if not study.overwrite:
        raise OldLayoutError(
            f"{old_layout_message(study.out)}. poslens does not reuse or replace the old files: pass --overwrite to "
            "measure the part again (removing the old files poslens wrote), or choose another --out; "
            "`poslens claims` still reads the old layout"
        )
    study.log(
        f"[{DECLARES[0].name}] {record} is the old layout of the part; measuring it again as relativize.parquet (--overwrite), "
        "and removing the old files once it is written"
    )
    return True


def _attribution(study: Study, calibration_seed: int) -> Result:
    """The cumulative attribution of :meth:`relativize`, computed (its corpora drawn, every mode measured)."""
    from poslens.errors import InputError
    from poslens.mechanisms.attribution import cumulative_attribution
    from poslens.model.corpus import make_corpus

    s = study.settings
    model = study.model()
    measured = make_corpus(
        model, s.corpus, n_seqs=s.relativize_seqs, seq_len=s.relativize_len, position0=s.position0, seed=s.seed, text_field=s.text_field
    )
    # draw enough with the other seed to drop every window the measured corpus also holds: disjoint by construction
    n_calibration = s.calibration_seqs or s.relativize_seqs
    try:
        drawn = make_corpus(
            model,
            s.corpus,
            n_seqs=n_calibration + measured.n_seqs,
            seq_len=s.relativize_len,
            position0=s.position0,
            seed=calibration_seed,
            text_field=s.text_field,
        )
    except InputError as error:
        raise InputError(
            f"the calibration corpus must be disjoint from the measured one, so the corpus must hold "
            f"{measured.n_seqs} + {n_calibration} = {measured.n_seqs + n_calibration} windows of "
            f"{s.relativize_len} tokens (--n-seqs + --calibration-seqs); {error}"
        ) from error
    calibration = drawn.excluding(measured, n_calibration)
    return cumulative_attribution(
        model,
        measured,
        calibration,
        modes=s.relativize_modes,
        groups=s.groups,
        early=s.early,
        batch_size=s.batch_size,
        calibration_sizes=s.calibration_sizes or None,
        loss=s.relativize_loss,
        row_sums=s.row_sums,
        disk_budget=s.disk_budget,
        max_memory=s.max_memory,  # the loss passes keep every position's logits: planned against the memory
    )


def load_old(folder: Path) -> Result | None:
    """The part from its old layout of table format 1 (``attribution.json`` and three tables), or ``None``.

    Args:
        folder: The study folder.

    Returns:
        The part, or ``None`` where the folder holds no old layout.

    Example:
        >>> load_old(Path("no/such/folder")) is None
        True
    """
    if not (folder / "attribution.json").exists():
        return None
    from poslens.mechanisms.attribution_table import read_old_layout

    return read_old_layout(folder)


DECLARES = (
    Part(
        "relativize",
        "Relativize every layer and measure each before its own edit: the cumulative attribution (methodology §11).\n\n"
        "Writes relativize.parquet (and .csv), one row per figure: per layer and edit L(log a), C_res and C_mask, levels and "
        "paired differences; r = 1 − mean over layers ≥ 2 of L edited / unedited (metric reduction_ge2); the change in "
        "next-token loss (metric loss_change); the provenance, the calibration corpora included, in its metadata. "
        "--batch-size is used as given by the measurements (no --max-memory); the next-token loss passes, which keep every "
        "position's logits, lower it to what the free memory holds.\n\n"
        "Example: poslens relativize --model smollm2-135m --modes all,key0 --calibration-sizes 8,16 --out results/quick",
        (
            "model",
            "variant",
            "corpus",
            "text_field",
            "relativize_seqs",
            "relativize_len",
            "groups",
            "early",
            "seed",
            "batch_size",
            "position0",
            "dtype",
            "relativize_modes",
            "calibration_seqs",
            "calibration_seed",
            "calibration_sizes",
            "relativize_loss",
        ),
        (
            "model",
            "variant",
            "position0",
            "corpus",
            "text_field",
            "relativize_seqs",
            "relativize_len",
            "seed",
            "groups",
            "early",
            "batch_size",
            "row_sums",
            "disk_budget",
            "dtype",
            "device_map",
            "relativize_modes",
            "calibration_seqs",
            "calibration_seed",
            "calibration_sizes",
            "relativize_loss",
        ),
        show=part_printing.show_relativize,
        flags={"relativize_seqs": "--n-seqs", "relativize_len": "--seq-len"},
        fills=("relativize_seqs",),
        check=check_options,
        lengths=("relativize_len",),
        # the unedited run, each mode, the smaller calibration and the placebo; then the loss forwards
        tokens=lambda s: (1 + len(s.relativize_modes) + 2 + 2 * len(s.relativize_modes)) * measured_tokens(s.relativize_seqs, s.relativize_len),
        order=80,
        compute=compute,
        provides=("attribution",),
        figures=lazy("poslens.study.report_figures:relativize_figures"),
        zoo=lazy("poslens.study.zoo_figures:relativize_figures"),
        zoo_order=5,
        load_old=load_old,
    ),
)
"""The part, for the registry."""
