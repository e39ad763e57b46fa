"""The study's parts, each declared once: its name, settings, command-line options, files, figures and cost.

A part is one table of the study, made by one method of :class:`poslens.study.parts.Study`
(its name with ``_`` for ``-``) and run by the ``poslens`` command of the same name.
Everything else about it is derived from its :class:`Part` in :data:`PARTS`:

- the settings recorded in the saved part and compared when it is reused (:attr:`Part.settings`);
- its ``poslens`` command, with one option per setting it takes (:mod:`poslens.study.part_commands`);
- the command lines poslens prints so that a user can make a part that agrees with a folder (:func:`command_line`);
- the report's plan, the metrics its figures draw, the files ``run.json`` names (:attr:`Part.file`);
- the full run's time estimate (:func:`estimated_tokens`).

The options are declared once too, in :data:`OPTIONS`: a setting's flag, default,
help and how its value is spelled on a command line; a part may spell a setting
its own way (``compare --n-seqs`` is ``compare_seqs``) or give it another default.

Adding a part is one :class:`Part` here and its compute method on ``Study``
(CONTRIBUTING.md shows a worked example). Longer than 400 lines because it
declares every part and option of the study in one place, which is its point.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from poslens.errors import InputError
from poslens.options import DEFAULTS
from poslens.study import part_printing

if TYPE_CHECKING:
    from poslens.study.settings import Settings

MEASURE_KEYS = ("model", "variant", "corpus", "text_field", "n_seqs", "seq_len", "groups", "early", "seed", "batch_size", "position0", "dtype")
"""The settings every measured part depends on: the model, the corpus and the measurement's grouping."""

RUNTIME = ("max_memory", "row_sums", "disk_budget")
"""Settings that choose how a part is computed, never its figures: a command takes them, its part does not record them."""


def _tuple_of(kind: type) -> Callable[[Any], tuple]:
    """A comma list (``"8,64"``) or ``None`` as the tuple of ``kind`` a setting holds."""

    def parse(value: Any) -> tuple:
        return tuple(kind(v) for v in value.split(",")) if value else ()

    return parse


@dataclass(frozen=True)
class Option:
    """The command-line option of one setting.

    Attributes:
        flag: How the option is spelled (``--n-seqs``).
        default: The option's default, as typed (``None`` where the setting's default is derived, e.g. ``--early``).
        help: Its ``--help`` text.
        annotation: The Python type the command receives.
        spelling: How a value is written back on a command line (:func:`command_line`): ``"value"``
            (``--seed 3``), ``"comma"`` (``--doses 0.5,1``), ``"repeat"`` (``--replacement mean --replacement zero``),
            ``"unset-flag"`` (``--full``: the setting is the flag's negation), or ``"none"`` (not an option at all).
        to_setting: The setting's value from the option's (``None``: the same).
        checks: Keyword arguments of ``typer.Option`` (``min``, ``show_default``) and ``callback``: the name of a
            check in :mod:`poslens.study.cli_options`.

    Example:
        >>> OPTIONS["path_doses"].setting_value("0.5,1")
        (0.5, 1.0)
        >>> OPTIONS["compare_quick"].setting_value(True)   # --full
        False
    """

    flag: str
    default: Any
    help: str
    annotation: Any = str
    spelling: str = "value"
    to_setting: Callable[[Any], Any] | None = None
    checks: Mapping[str, Any] = field(default_factory=dict)

    def setting_value(self, value: Any) -> Any:
        """The setting's value for the option's ``value``.

        Args:
            value: What the command received.

        Returns:
            The value the setting holds.

        Example:
            >>> OPTIONS["relativize_loss"].setting_value(True)   # --no-loss
            False
        """
        return value if self.to_setting is None else self.to_setting(value)


OPTIONS: Mapping[str, Option] = MappingProxyType(
    {
        "model": Option("--model", "smollm2-135m", "Registry name, local model folder, or a model id in the local HF cache."),
        "variant": Option(
            "--variant",
            "base",
            "Inference-time variant: ntk:<a>, window:<W>, rope-base:<θ>, joined by '+'.",
            checks={"callback": "check_variant"},
        ),
        "position0": Option("--bos", "bos", "Position 0: bos, none, or token:<id or string>.", checks={"callback": "check_bos"}),
        "corpus": Option("--corpus", "docs", "docs, random, repeat, or a path to .txt/.jsonl/folder."),
        "text_field": Option("--text-field", "text", "Field (JSONL) or column (Parquet, saved dataset) that holds the text of a --corpus file."),
        "n_seqs": Option("--n-seqs", 16, "Number of sequences N.", int, checks={"min": 1}),
        "seq_len": Option("--seq-len", 128, "Tokens per sequence T (position 0 included).", int, checks={"min": 2}),
        "seed": Option("--seed", 0, "Seed of the corpus sampling.", int),
        "groups": Option("--groups", DEFAULTS.groups, "Groups of sequences for the intervals.", int, checks={"min": 2}),
        "early": Option(
            "--early",
            None,
            "Q: the early window is 1 ≤ i < Q (below --seq-len).",
            int | None,
            to_setting=lambda value: DEFAULTS.early if value is None else value,
            checks={"min": 2, "show_default": str(DEFAULTS.early)},
        ),
        "batch_size": Option(
            "--batch-size",
            DEFAULTS.batch_size,
            "Largest number of sequences per forward pass, whatever their groups (a setting of the part); --max-memory may lower it.",
            int,
            checks={"min": 1},
        ),
        "max_memory": Option(
            "--max-memory",
            "free",
            "Memory budget for the whole process, e.g. 8GB or 512MiB; 'free' (default): 80% of the memory free now, "
            "for the forward pass. Lowers the batch size to what fits, or stops with the numbers and the longest --seq-len that fits.",
            checks={"callback": "check_max_memory"},
        ),
        "row_sums": Option(
            "--row-sums",
            "auto",
            "How the per-sequence counterfactual gets each sequence's row sums: 'store' keeps them on temporary disk (TMPDIR, "
            "8·L·H·T·(1 + bins) bytes per sequence), 'second-pass' runs the model a second time and keeps nothing, 'auto' (default) "
            "keeps the store when it fits --disk-budget. The figures are the same.",
            checks={"callback": "check_route"},
        ),
        "disk_budget": Option(
            "--disk-budget",
            None,
            "Most temporary disk the store may take under --row-sums auto, e.g. 2GB; default the smaller of 4 GB and half the free space.",
            str | None,
            checks={"callback": "check_disk_budget"},
        ),
        "dtype": Option("--dtype", "float32", "Weights' dtype: float32, bfloat16 or float16 (sums stay float64)."),
        "device_map": Option("--device-map", None, "transformers device map, e.g. 'auto' to spread a large model over GPUs.", str | None),
        "tau": Option("--tau", DEFAULTS.tau, "Sink-reading threshold τ, in (0, 1].", float, checks={"callback": "check_tau"}),
        "replacements": Option(
            "--replacement",
            list(("mean", "zero", "noise", "token:eos")),
            "BOS replacements: mean, zero, noise, token:eos or token:<id or string>; repeat for several.",
            list[str],
            spelling="repeat",
            to_setting=tuple,
            checks={"callback": "check_replacements"},
        ),
        "fingerprint_seqs": Option("--fingerprint-seqs", 16, "Sequences per position-0 setting.", int, checks={"min": 1}),
        "fingerprint_len": Option("--fingerprint-len", 48, "Tokens per fingerprint sequence.", int, checks={"min": 2}),
        "compare_seqs": Option("--compare-seqs", 8, "Sequences per case.", int, checks={"min": 1}),
        "compare_len": Option("--compare-len", 640, "Tokens per sequence (beyond gemma3's 512 window by default).", int, checks={"min": 2}),
        "compare_quick": Option(
            "--full",
            False,
            "All NTK α ∈ {2,4,8} and windows {64,128}, not one of each.",
            bool,
            spelling="unset-flag",
            to_setting=lambda full: not full,
        ),
        "cases": Option("cases", (), "The comparison's cases (from Python only).", spelling="none"),
        "relativize_seqs": Option("--relativize-seqs", 16, "Sequences of the measured corpus.", int, checks={"min": 1}),
        "relativize_len": Option("--relativize-len", 64, "Tokens per sequence (measured and calibration).", int, checks={"min": 2}),
        "relativize_modes": Option(
            "--modes",
            "all,key0,all-but-key0",
            "Relativization modes, a comma list of all (every column), key0 (key 0 only), all-but-key0 (every column but key 0).",
            spelling="comma",
            to_setting=_tuple_of(str),
            checks={"callback": "check_modes"},
        ),
        "calibration_seqs": Option(
            "--calibration-seqs",
            None,
            "Sequences of the calibration corpus the edit is fitted on.",
            int | None,
            checks={"min": 2, "show_default": "--n-seqs"},
        ),
        "calibration_seed": Option(
            "--calibration-seed",
            None,
            "Seed of the calibration corpus (same --corpus and --seq-len); it must differ from --seed, so that the corpora are disjoint.",
            int | None,
            checks={"show_default": "--seed + 1"},
        ),
        "calibration_sizes": Option(
            "--calibration-sizes",
            None,
            "Calibration sizes to fit the edit on, a comma list (the spread between them is the calibration's own noise).",
            str | None,
            spelling="comma",
            to_setting=_tuple_of(int),
            checks={"callback": "check_calibration_sizes", "show_default": "half and all of --calibration-seqs"},
        ),
        "relativize_loss": Option(
            "--no-loss",
            False,
            "Skip the change in next-token loss (it runs the full forward per edit).",
            bool,
            spelling="unset-flag",
            to_setting=lambda no_loss: not no_loss,
        ),
        "path_offsets": Option(
            "--offsets",
            None,
            "Offsets D of the key-0 phase freeze, a comma list.",
            str | None,
            spelling="comma",
            to_setting=_tuple_of(int),
            checks={"callback": "check_offsets", "show_default": "8,64,T/2"},
        ),
        "split_offset": Option(
            "--split-offset",
            None,
            "D of the split's phase edit: key 0's logit as if the query sat D tokens from it.",
            int | None,
            checks={"min": 0, "show_default": "64, or half the narrowest sliding window"},
        ),
        "path_doses": Option(
            "--doses",
            "1",
            "Doses λ of the mask-only sink profile, a comma list in (0, 1].",
            spelling="comma",
            to_setting=_tuple_of(float),
            checks={"callback": "check_doses"},
        ),
    }
)
"""The command-line option of every setting a command takes, by setting name."""


class OptionConflictError(InputError):
    """Two options of a command that cannot hold together; ``flag`` names the one to change.

    Args:
        flag: The option to change (``--calibration-sizes``).
        message: What is wrong and what to type instead.

    Example:
        >>> raise OptionConflictError("--calibration-sizes", "12 is more than the 8 sequences")
        Traceback (most recent call last):
        poslens.study.part_registry.OptionConflictError: 12 is more than the 8 sequences
    """

    def __init__(self, flag: str, message: str) -> None:
        super().__init__(message)
        self.flag = flag


def _check_relativize(settings: Mapping[str, Any]) -> None:
    """The relativize command's options that must agree: a calibration corpus disjoint from and large enough for its sizes."""
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


def _measured_tokens(n_seqs: int, seq_len: int) -> float:
    """Token-equivalents of one measured forward pass (the counterfactual replay grows with T)."""
    return n_seqs * seq_len * (1 + seq_len / 1024)


def _compare_cases(s: Settings) -> int:
    from poslens.mechanisms.architectures import default_cases

    return len(s.cases) or len(default_cases(quick=s.compare_quick))


@dataclass(frozen=True)
class Part:
    """One part of the study, declared once.

    Attributes:
        name: Its one spelling: the command, the file stem, and (with ``_``) the :class:`~poslens.study.parts.Study` method.
        summary: What it measures: the command's ``--help``, its first line the one-line description.
        settings: The settings its figures depend on: recorded in the saved part and compared when it is reused.
        options: The settings its command takes, in ``--help`` order: its ``settings`` that have an option, and the
            :data:`RUNTIME` ones it honours.
        show: What its command prints, ``show(result, console)`` (:mod:`poslens.study.part_printing`).
        flags: Its own spelling of a setting's option (``{"compare_seqs": "--n-seqs"}``).
        defaults: Its own default of an option, as typed (``{"replacements": ["mean"]}``).
        fills: Its corpora's sizes: each must hold at least one sequence per group.
        lengths: Its corpora's lengths: the early window must lie below each.
        made_by: The part whose command makes this one too (empty: its own command).
        figure_metrics: The metrics the report's figures of this part draw.
        tokens: Its cost in token-equivalents of a measured forward pass, for the full run's estimate.
        check: Checks of its options that must agree with each other, given the settings; raises
            :class:`OptionConflictError` before anything loads.

    Example:
        >>> PARTS["compare"].flag("compare_seqs"), PARTS["leakage"].flag("n_seqs")
        ('--n-seqs', '--n-seqs')
        >>> PARTS["bos-swap"].method
        'bos_swap'
    """

    name: str
    summary: str
    settings: tuple[str, ...]
    options: tuple[str, ...]
    show: Callable[[Any, Any], None]
    flags: Mapping[str, str] = field(default_factory=dict)
    defaults: Mapping[str, Any] = field(default_factory=dict)
    fills: tuple[str, ...] = ("n_seqs",)
    lengths: tuple[str, ...] = ("seq_len",)
    figure_metrics: tuple[str, ...] = ()
    tokens: Callable[[Settings], float] = lambda s: 0.0
    check: Callable[[Mapping[str, Any]], None] = lambda settings: None
    made_by: str = ""

    @property
    def method(self) -> str:
        """The :class:`~poslens.study.parts.Study` method that computes it."""
        return self.name.replace("-", "_")

    @property
    def file(self) -> str:
        """The file that holds its table, in the study folder."""
        return f"{self.name}.parquet"

    @property
    def command(self) -> str:
        """The ``poslens`` command that makes it."""
        return self.made_by or self.name

    def flag(self, setting: str) -> str:
        """How this part's command spells the option of ``setting``.

        Args:
            setting: A setting name.

        Returns:
            The flag (``--n-seqs``).

        Example:
            >>> PARTS["relativize"].flag("relativize_seqs")
            '--n-seqs'
        """
        return self.flags.get(setting, OPTIONS[setting].flag)

    def default(self, setting: str) -> Any:
        """The setting's value when this part's command is not given its option.

        Args:
            setting: A setting name.

        Returns:
            The value the setting holds by default on this command.

        Example:
            >>> PARTS["bos-swap"].default("replacements"), PARTS["leakage"].default("early")
            (('mean',), 32)
        """
        option = OPTIONS[setting]
        return option.setting_value(self.defaults.get(setting, option.default))


_MEASURED_OPTIONS = (
    "model",
    "variant",
    "position0",
    "corpus",
    "text_field",
    "n_seqs",
    "seq_len",
    "seed",
    "groups",
    "early",
    "batch_size",
    *RUNTIME,
    "dtype",
    "device_map",
)

_DECLARED = (
    Part(
        "leakage",
        "Measure position leakage and its mask / residual-stream decomposition (methodology §3–§5).\n\n"
        "Runs unchanged under `torchrun --nproc_per_node=K` (sequences sharded, sums all-reduced, rank 0 writes).\n\n"
        "Example: poslens leakage --model smollm2-135m --n-seqs 16 --seq-len 128 --max-memory 4GB --out results/leak",
        MEASURE_KEYS,
        _MEASURED_OPTIONS,
        show=part_printing.show_leakage,
        figure_metrics=("leakage_pattern", "c_res", "c_mask"),
        tokens=lambda s: _measured_tokens(s.n_seqs, s.seq_len),
    ),
    Part(
        "sinks",
        "Sink score of every head and sink-reading head counts per layer (methodology §6), from the leakage part.\n\n"
        "Example: poslens sinks --model smollm2-135m --n-seqs 16 --seq-len 128 --tau 0.3 --out results/quick",
        (*MEASURE_KEYS, "tau"),
        (*_MEASURED_OPTIONS, "tau"),
        show=part_printing.show_sinks,
        figure_metrics=("sink_score", "sink_heads"),
    ),
    Part(
        "bos-swap",
        "Replace the BOS embedding and report the reduction of C_res (methodology §7).\n\n"
        "Example: poslens bos-swap --model smollm2-135m --replacement mean --replacement zero --out results/quick",
        (*MEASURE_KEYS, "replacements"),
        (*_MEASURED_OPTIONS, "replacements"),
        show=part_printing.show_bos_swap,
        defaults={"replacements": ["mean"]},
        figure_metrics=("reduction",),
        tokens=lambda s: len(s.replacements) * _measured_tokens(s.n_seqs, s.seq_len),
    ),
    Part(
        "ablate-sinks",
        "Ablate the sink path of sink-reading heads and report the reduction of C_res (methodology §7).\n\n"
        "Example: poslens ablate-sinks --model smollm2-135m --tau 0.3 --out results/quick",
        (*MEASURE_KEYS, "tau"),
        (*_MEASURED_OPTIONS, "tau"),
        show=part_printing.show_ablate_sinks,
        figure_metrics=("c_res", "c_mask", "reduction"),
        tokens=lambda s: _measured_tokens(s.n_seqs, s.seq_len),
    ),
    Part(
        "path-tests",
        "Path-specific causal tests: freeze key 0's RoPE phase (and key 1's, the sham), the mask-only sink profile (methodology §12).\n\n"
        "Each edit is one full forward pass over the leakage part's corpus (measured first if it is not in --out), read "
        "against the unedited run on the same tokens: the residual stream's and the attention outputs' position content "
        "(held-out probe R², η²), L(log a) with its numerator and SST, a_i0 in the sink-reading heads and the loss.\n\n"
        "Example: poslens path-tests --model smollm2-135m --n-seqs 16 --seq-len 128 --offsets 8,64 --doses 0.5,1 --out results/quick",
        (*MEASURE_KEYS, "tau", "path_offsets", "path_doses"),
        (*_MEASURED_OPTIONS, "tau", "path_offsets", "path_doses"),
        show=part_printing.show_path_tests,
        figure_metrics=("resid_probe_r2", "resid_probe_r2_ge2", "leakage_pattern_ge2"),
        # the unedited run, the freeze and the sham at each offset, each dose and the ablation, each a full forward
        # whose residual readouts cost about as much again
        tokens=lambda s: (
            2 * (1 + 2 * (len(s.path_offsets) or len({8, 64, s.seq_len // 2})) + len(s.path_doses) + 1) * _measured_tokens(s.n_seqs, s.seq_len)
        ),
    ),
    Part(
        "sink-split",
        "The sink path's split as a number (methodology §13): how much of the residual stream's position the sink path "
        "carries, and how much of it runs through the mask's count and through key 0's RoPE phase.\n\n"
        "In the sink-reading heads of the leakage part (measured first if it is not in --out), one full forward pass per "
        "edit: m (the mask's count removed), p (key 0's phase frozen at --split-offset), mp (both), s (the whole sink "
        "path), each factor's sham, and the phase frozen in every head. Two readouts of the residual stream over layers "
        "≥ 2: V (the unedited probe on the edited run: position along the unedited code) and R² (the probe refitted: "
        "position content); the two-factor Shapley split of each, with paired group-jackknife intervals, and C8's verdict.\n\n"
        "Example: poslens sink-split --model smollm2-135m --n-seqs 16 --seq-len 128 --out results/quick",
        (*MEASURE_KEYS, "tau", "split_offset"),
        (*_MEASURED_OPTIONS, "tau", "split_offset"),
        show=part_printing.show_sink_split,
        figure_metrics=("f", "share_m", "sink_share"),
        # the unedited run, four edits, two shams and the every-head freeze, each a full forward with the residual readout
        tokens=lambda s: 1.5 * 8 * _measured_tokens(s.n_seqs, s.seq_len),
    ),
    Part(
        "fingerprint",
        "Position-0 fingerprint: dispersion with and without BOS, trajectory similarity, readout (methodology §8).\n\n"
        "The sink-reading heads come from the leakage part (--n-seqs × --seq-len), measured first if it is not in --out.\n\n"
        "Example: poslens fingerprint --model smollm2-135m --fingerprint-seqs 16 --fingerprint-len 48 --out results/quick",
        (*MEASURE_KEYS, "tau", "fingerprint_seqs", "fingerprint_len"),
        (*_MEASURED_OPTIONS, "tau", "fingerprint_seqs", "fingerprint_len"),
        show=part_printing.show_fingerprint,
        fills=("n_seqs", "fingerprint_seqs"),
        figure_metrics=("dispersion",),
        tokens=lambda s: (2 * s.fingerprint_seqs + 256) * s.fingerprint_len,
    ),
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
        check=_check_relativize,
        lengths=("relativize_len",),
        # the unedited run, each mode, the smaller calibration and the placebo; then the loss forwards
        tokens=lambda s: (1 + len(s.relativize_modes) + 2 + 2 * len(s.relativize_modes)) * _measured_tokens(s.relativize_seqs, s.relativize_len),
    ),
    Part(
        "compare",
        "C_res and C_mask by layer for standard RoPE, NTK and sliding-window cases (C4).\n\n"
        "Example: poslens compare --n-seqs 8 --seq-len 640 --out results/quick",
        ("compare_seqs", "compare_len", "compare_quick", "cases", "groups", "early", "seed", "corpus", "text_field", "batch_size"),
        (
            "compare_seqs",
            "compare_len",
            "groups",
            "early",
            "seed",
            "corpus",
            "text_field",
            "batch_size",
            *RUNTIME,
            "compare_quick",
        ),
        show=part_printing.show_compare,
        flags={"compare_seqs": "--n-seqs", "compare_len": "--seq-len"},
        fills=("compare_seqs",),
        lengths=("compare_len",),
        figure_metrics=("c_res", "c_mask"),
        tokens=lambda s: (_compare_cases(s) + 1) * _measured_tokens(s.compare_seqs, s.compare_len),  # gemma3-270m: about twice
    ),
    Part(
        "comparisons",
        "The comparisons among compare's cases by the interval of their difference (C4): paired differences of each "
        "variant against its model's base, trends, depth slopes and independent differences between models.",
        ("compare_seqs", "compare_len", "compare_quick", "cases", "groups", "early", "seed", "corpus", "text_field", "batch_size"),
        (),
        show=part_printing.show_compare,
        made_by="compare",  # measured with the cases, whose sums it needs: compare's command writes both
    ),
)

PARTS: Mapping[str, Part] = MappingProxyType({part.name: part for part in _DECLARED})
"""Every part of the study, by name, in the order ``poslens report`` runs them."""

COMMAND_SETTINGS: Mapping[str, tuple[str, ...]] = MappingProxyType({part.name: part.settings for part in _DECLARED})
"""The settings each part records and compares on reuse, by part name."""

OPTION_NAMES: Mapping[str, str] = MappingProxyType({setting: option.flag for setting, option in OPTIONS.items()})
"""The command-line option of each setting (as ``poslens report`` spells it), for messages that tell the user what to type."""


def report_plan(skip_compare: bool = False) -> list[str]:
    """The parts ``poslens report`` runs, in order.

    Args:
        skip_compare: Leave out the architecture comparison (it loads a second model).

    Returns:
        Part names.

    Example:
        >>> report_plan(skip_compare=True)
        ['leakage', 'sinks', 'bos-swap', 'ablate-sinks', 'path-tests', 'sink-split', 'fingerprint', 'relativize']
        >>> report_plan()[-2:]   # the comparisons are made with the cases
        ['compare', 'comparisons']
    """
    return [name for name, part in PARTS.items() if not (skip_compare and part.command == "compare")]


def estimated_tokens(settings: Settings, names: list[str] | None = None) -> float:
    """The token-equivalents of measured forward passes the parts ``names`` cost with ``settings``, for a time estimate.

    Args:
        settings: The study's settings.
        names: Part names (default: every part).

    Returns:
        Token-equivalents: multiply by the seconds one token takes (:func:`poslens.study.run_cost.seconds_per_token`).

    Example:
        >>> from poslens.study.settings import Settings
        >>> estimated_tokens(Settings(n_seqs=2, seq_len=64), ["leakage"])
        136.0
    """
    return float(sum(PARTS[name].tokens(settings) for name in (names or list(PARTS))))


def command_line(command: str, settings: Mapping[str, Any], out: Any) -> str:
    """The ``poslens`` command that makes part ``command`` with ``settings`` into ``out``: it agrees with the parts there.

    Only settings that differ from the command's defaults are spelled out; settings the
    command does not take are left out. The words are quoted for a POSIX shell
    (:func:`shlex.join`): a corpus named ``c;touch X;.jsonl`` is one argument.

    Args:
        command: a part's command (``"ablate-sinks"``, ``"compare"``, …).
        settings: recorded settings (a part's ``meta["settings"]``, or ``Settings`` as a dict).
        out: the output folder.

    Returns:
        The command line.

    Example:
        >>> command_line("ablate-sinks", {"model": "models/llama", "n_seqs": 4, "seq_len": 32, "tau": 0.3}, "A")
        'poslens ablate-sinks --model models/llama --n-seqs 4 --seq-len 32 --out A'
        >>> command_line("compare", {"compare_seqs": 4, "compare_quick": False, "groups": 2}, "A")
        'poslens compare --n-seqs 4 --full --groups 2 --out A'
        >>> command_line("leakage", {"corpus": "my texts;rm -rf x.txt"}, "out dir")
        "poslens leakage --corpus 'my texts;rm -rf x.txt' --out 'out dir'"
        >>> command_line("bos-swap", {"replacements": ["mean", "zero"]}, "A")
        'poslens bos-swap --replacement mean --replacement zero --out A'
    """
    part = PARTS[PARTS[command].command]  # a part made by another part's command: that command
    words = ["poslens", part.name]
    for name in part.settings:
        spelling = OPTIONS[name].spelling
        if name not in settings or spelling == "none" or _same(settings[name], part.default(name)):
            continue
        value, flag = settings[name], part.flag(name)
        if spelling == "unset-flag":
            words += [] if value else [flag]
        elif spelling == "repeat":
            for item in value:
                words += [flag, str(item)]
        elif spelling == "comma":
            words += [flag, ",".join(str(v) for v in value)]
        else:
            words += [flag, str(value)]
    return shlex.join([*words, "--out", str(out)])  # quoted: pasted into a shell, it runs as this one command


def _same(recorded: Any, default: Any) -> bool:
    """Whether a recorded setting (JSON: lists for tuples) is the command's default."""
    if isinstance(recorded, list | tuple) and isinstance(default, list | tuple):
        return list(recorded) == list(default)
    return bool(recorded == default)
