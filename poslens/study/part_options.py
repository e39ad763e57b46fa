"""The command-line options of the study's settings: :class:`Option`, and the options every part may share.

A setting's option is declared once: its flag, default, ``--help`` text, type, checks and how a value is written
back on a command line. :data:`BASE_OPTIONS` holds those of the settings that several parts take (or that only a
part declared before the registry takes); a part declares an option only it takes with its declaration
(:attr:`poslens.study.part_registry.Part.new_options`). :data:`poslens.study.part_registry.OPTIONS` holds both.
A shared option's default is the setting's (:class:`poslens.study.settings.Settings`, whose measurement defaults are
:mod:`poslens.options`'s), never written here again; a part's own option declares its setting, whose default is the
option's (``Settings`` holds it in ``part_settings``): ``--help``, the printed command lines and the settings agree by
construction.

Example:
    >>> BASE_OPTIONS["groups"].flag, BASE_OPTIONS["path_offsets"].checks["show_default"]
    ('--groups', '8,64,T/2')
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from poslens.errors import InputError
from poslens.options import DEFAULTS, PATH_OFFSETS_SHOWN
from poslens.study import cli_options
from poslens.study.settings import Settings


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
        spelling: How a value is written back on a command line (:func:`~poslens.study.part_registry.command_line`): ``"value"``
            (``--seed 3``), ``"comma"`` (``--doses 0.5,1``), ``"repeat"`` (``--replacement mean --replacement zero``),
            ``"unset-flag"`` (``--full``: the setting is the flag's negation), or ``"none"`` (not an option at all).
        to_setting: The setting's value from the option's (``None``: the same).
        checks: Keyword arguments of ``typer.Option`` (``min``, ``show_default``) and ``callback``: the name of a
            check in :mod:`poslens.study.cli_options`.

    Example:
        >>> BASE_OPTIONS["path_doses"].setting_value("0.5,1")
        (0.5, 1.0)
        >>> BASE_OPTIONS["compare_quick"].setting_value(True)   # --full
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
            >>> BASE_OPTIONS["relativize_loss"].setting_value(True)   # --no-loss
            False
        """
        return value if self.to_setting is None else self.to_setting(value)


BASE_OPTIONS: dict[str, Option] = {
    "model": Option("--model", Settings.model, "Registry name, local model folder, or a model id in the local HF cache."),
    "variant": Option(
        "--variant",
        Settings.variant,
        "Inference-time variant: ntk:<a>, window:<W>, rope-base:<θ>, joined by '+'.",
        checks={"callback": cli_options.check_variant},
    ),
    "position0": Option("--bos", Settings.position0, "Position 0: bos, none, or token:<id or string>.", checks={"callback": cli_options.check_bos}),
    "corpus": Option("--corpus", Settings.corpus, "docs, random, repeat, or a path to .txt/.jsonl/folder."),
    "text_field": Option(
        "--text-field", Settings.text_field, "Field (JSONL) or column (Parquet, saved dataset) that holds the text of a --corpus file."
    ),
    "n_seqs": Option("--n-seqs", Settings.n_seqs, "Number of sequences N.", int, checks={"min": 1}),
    "seq_len": Option("--seq-len", Settings.seq_len, "Tokens per sequence T (position 0 included).", int, checks={"min": 2}),
    "seed": Option("--seed", Settings.seed, "Seed of the corpus sampling.", int),
    "groups": Option("--groups", Settings.groups, "Groups of sequences for the intervals.", int, checks={"min": 2}),
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
        Settings.batch_size,
        "Largest number of sequences per forward pass, whatever their groups (a setting of the part); --max-memory may lower it.",
        int,
        checks={"min": 1},
    ),
    "max_memory": Option(
        "--max-memory",
        Settings.max_memory,
        "Memory budget for the whole process, e.g. 8GB or 512MiB; 'free' (default): 80% of the memory free now, "
        "for the forward pass. Lowers the batch size to what fits, or stops with the numbers and the longest --seq-len that fits.",
        checks={"callback": cli_options.check_max_memory},
    ),
    "row_sums": Option(
        "--row-sums",
        Settings.row_sums,
        "How the per-sequence counterfactual gets each sequence's row sums: 'store' keeps them on temporary disk (TMPDIR, "
        "8·L·H·T·(1 + bins) bytes per sequence), 'second-pass' runs the model a second time and keeps nothing, 'auto' (default) "
        "keeps the store when it fits --disk-budget. The figures are the same.",
        checks={"callback": cli_options.check_route},
    ),
    "disk_budget": Option(
        "--disk-budget",
        Settings.disk_budget,
        "Most temporary disk the store may take under --row-sums auto, e.g. 2GB; default the smaller of 4 GB and half the free space.",
        str | None,
        checks={"callback": cli_options.check_disk_budget},
    ),
    "dtype": Option("--dtype", Settings.dtype, "Weights' dtype: float32, bfloat16 or float16 (sums stay float64)."),
    "device_map": Option("--device-map", Settings.device_map, "transformers device map, e.g. 'auto' to spread a large model over GPUs.", str | None),
    "tau": Option("--tau", Settings.tau, "Sink-reading threshold τ, in (0, 1].", float, checks={"callback": cli_options.check_tau}),
    "replacements": Option(
        "--replacement",
        list(Settings.replacements),
        "BOS replacements: mean, zero, noise, token:eos or token:<id or string>; repeat for several.",
        list[str],
        spelling="repeat",
        to_setting=tuple,
        checks={"callback": cli_options.check_replacements},
    ),
    "fingerprint_seqs": Option("--fingerprint-seqs", Settings.fingerprint_seqs, "Sequences per position-0 setting.", int, checks={"min": 1}),
    "fingerprint_len": Option("--fingerprint-len", Settings.fingerprint_len, "Tokens per fingerprint sequence.", int, checks={"min": 2}),
    "compare_seqs": Option("--compare-seqs", Settings.compare_seqs, "Sequences per case.", int, checks={"min": 1}),
    "compare_len": Option(
        "--compare-len", Settings.compare_len, "Tokens per sequence (beyond gemma3's 512 window by default).", int, checks={"min": 2}
    ),
    "compare_quick": Option(
        "--full",
        not Settings.compare_quick,
        "All NTK α ∈ {2,4,8} and windows {64,128}, not one of each.",
        bool,
        spelling="unset-flag",
        to_setting=lambda full: not full,
    ),
    "cases": Option("cases", Settings.cases, "The comparison's cases (from Python only).", spelling="none"),
    "relativize_seqs": Option("--relativize-seqs", Settings.relativize_seqs, "Sequences of the measured corpus.", int, checks={"min": 1}),
    "relativize_len": Option("--relativize-len", Settings.relativize_len, "Tokens per sequence (measured and calibration).", int, checks={"min": 2}),
    "relativize_modes": Option(
        "--modes",
        ",".join(Settings.relativize_modes),
        "Relativization modes, a comma list of all (every column), key0 (key 0 only), all-but-key0 (every column but key 0).",
        spelling="comma",
        to_setting=_tuple_of(str),
        checks={"callback": cli_options.check_modes},
    ),
    "calibration_seqs": Option(
        "--calibration-seqs",
        Settings.calibration_seqs,
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
        checks={"callback": cli_options.check_calibration_sizes, "show_default": "half and all of --calibration-seqs"},
    ),
    "relativize_loss": Option(
        "--no-loss",
        not Settings.relativize_loss,
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
        checks={"callback": cli_options.check_offsets, "show_default": PATH_OFFSETS_SHOWN},
    ),
    "path_doses": Option(
        "--doses",
        ",".join(f"{dose:g}" for dose in Settings.path_doses),
        "Doses λ of the mask-only sink profile, a comma list in (0, 1].",
        spelling="comma",
        to_setting=_tuple_of(float),
        checks={"callback": cli_options.check_doses},
    ),
}
"""The options of the settings the parts share, by setting name; a part declares its own with it (``Part.new_options``)."""


class OptionConflictError(InputError):
    """Two options of a command that cannot hold together; ``flag`` names the one to change.

    Args:
        flag: The option to change (``--calibration-sizes``).
        message: What is wrong and what to type instead.

    Example:
        >>> raise OptionConflictError("--calibration-sizes", "12 is more than the 8 sequences")
        Traceback (most recent call last):
        poslens.study.part_options.OptionConflictError: 12 is more than the 8 sequences
    """

    def __init__(self, flag: str, message: str) -> None:
        super().__init__(message)
        self.flag = flag
