"""The study's settings: one frozen object with the quick and full presets.

:class:`Settings` holds everything a study part depends on (:class:`ZooMeasureOptions`: those shared by a
zoo family's runs). Which settings each part depends on, and the command-line option of each, are declared
with the parts in :mod:`poslens.study.part_registry`.

A setting only one part takes is declared with that part, not here: its name, default and option are the part's
``new_options`` (``split_offset``, in :mod:`poslens.study.declarations.sink_split`). :class:`Settings` keeps such
settings in one field, :attr:`Settings.part_settings` (:class:`PartSettings`, a frozen mapping), and reads them as
ordinary attributes (``settings.split_offset``); the constructor, the presets and :func:`dataclasses.replace` take
them as keywords, and :meth:`Settings.as_dict` (``run.json``, the reuse keys) lists them flat beside the others.
"""

from __future__ import annotations

import hashlib
import inspect
import json
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import TYPE_CHECKING, Any

from poslens.errors import InputError
from poslens.fit.relativize import MODES
from poslens.options import DEFAULTS, MeasureOptions

if TYPE_CHECKING:  # the settings load without torch, for the command line's --help
    from poslens.mechanisms.architectures import Case


class PartSettings(Mapping):
    """The settings the parts declare for themselves (``split_offset``), frozen and hashable: only values off their default.

    Args:
        values: ``{setting: value}``.

    Example:
        >>> PartSettings({"split_offset": 8}) == PartSettings({"split_offset": 8}), dict(PartSettings())
        (True, {})
    """

    def __init__(self, values: Mapping[str, Any] | None = None) -> None:
        self._items = tuple(sorted((values or {}).items()))

    def __getitem__(self, name: str) -> Any:
        for key, value in self._items:
            if key == name:
                return value
        raise KeyError(name)

    def __iter__(self) -> Iterator[str]:
        return (key for key, _ in self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        return hash(self._items)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Mapping) and dict(self) == dict(other)

    def __repr__(self) -> str:
        return f"PartSettings({dict(self)!r})"


def declared_defaults() -> dict[str, Any]:
    """The settings the registered parts declare for themselves (:attr:`~poslens.study.part_registry.Part.new_options`), with their defaults.

    A declared setting's default is its option's default as the setting holds it
    (:meth:`~poslens.study.part_options.Option.setting_value`).

    Returns:
        ``{setting: default}``, in the registry's order.

    Example:
        >>> declared_defaults()["split_offset"] is None
        True
    """
    return {name: option.setting_value(option.default) for name, option in _declared_options().items()}


#: The registry, found by name on first use, as it finds the declarations: it imports this module, so this module
#: does not import it (the layers' rule: no import cycle, even inside a function).
REGISTRY = "poslens.study.part_registry"


def _declared_options() -> dict[str, Any]:
    """The registry's :func:`~poslens.study.part_registry.declared_options` (the parts' own settings and their options)."""
    import importlib

    return importlib.import_module(REGISTRY).declared_options()


@dataclass(frozen=True)
class Settings:
    """Everything a study part depends on. ``quick()`` and ``full()`` give the two presets.

    Attributes:
        model: The model to measure (a registry name or a local folder).
        variant: Its inference-time variant (``base`` for none).
        corpus: The text source (:func:`~poslens.model.corpus.make_corpus`).
        text_field: The text field of a JSONL or Parquet ``corpus``.
        n_seqs: Sequences of the measured parts.
        seq_len: Tokens per sequence of the measured parts.
        groups: Number of groups of the delete-one-group jackknife.
        early: Query positions of the ``early`` query window.
        seed: Seed of the text windows.
        batch_size: Sequences per forward pass (an upper bound when planning memory).
        max_memory: The memory budget (``"free"``, or a size such as ``"8GB"``).
        row_sums: The per-sequence counterfactual's route: ``auto``, ``store`` or ``second-pass`` (the same figures).
        disk_budget: The most temporary disk the store may take under ``auto`` (default: the smaller of 4 GB and half the free space).
        position0: What position 0 holds (``bos``; :func:`~poslens.model.corpus.make_corpus`).
        dtype: The weights' dtype.
        device_map: A transformers device map, or ``None``.
        tau: Sink-score threshold of the sink-reading heads.
        replacements: The BOS replacements of the patching part.
        fingerprint_seqs: Sequences per position-0 setting of the fingerprint.
        fingerprint_len: Tokens per sequence of the fingerprint.
        compare_seqs: Sequences per case of the architecture comparison.
        compare_len: Tokens per sequence of the architecture comparison.
        compare_quick: Whether the comparison runs the quick set of cases.
        cases: The comparison's cases; empty: :func:`~poslens.mechanisms.architectures.default_cases`.
        relativize_seqs: Sequences of the cumulative attribution's measured corpus (methodology §11).
        relativize_len: Tokens per sequence of the cumulative attribution (a shorter T: it measures each mode again).
        relativize_modes: The relativization modes of the cumulative attribution.
        calibration_seqs: Sequences of its calibration corpus (``None``: ``relativize_seqs``).
        calibration_seed: Seed of its calibration corpus (``None``: ``seed + 1``; it must differ from ``seed``).
        calibration_sizes: Its calibration sizes (empty: half and all of the calibration corpus).
        relativize_loss: Whether it measures the change in next-token loss.
        path_offsets: The offsets D of the path-specific tests' key-phase freeze (empty: :func:`poslens.options.default_path_offsets`).
        path_doses: The doses λ of their mask-only sink profile (1 is the split's).
        part_settings: The settings a part declares for itself, read as attributes (``settings.split_offset``: D of the
            sink-path split's phase edit, declared in :mod:`poslens.study.declarations.sink_split`) and given as keywords
            (``Settings(split_offset=8)``); it holds only values off their declared default.

    Example:
        >>> Settings.quick().n_seqs, Settings.full().seq_len
        (16, 256)
        >>> Settings(split_offset=8).split_offset, Settings().split_offset   # a setting the sink-split part declares
        (8, None)
        >>> Settings(split_ofset=8)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        poslens.errors.InputError: Settings has no setting 'split_ofset', nor does a registered part declare one ...; did you mean split_offset?
    """

    model: str = "smollm2-135m"
    variant: str = "base"
    corpus: str = "docs"
    text_field: str = "text"
    n_seqs: int = 16
    seq_len: int = 128
    groups: int = DEFAULTS.groups
    early: int = DEFAULTS.early
    seed: int = 0
    batch_size: int = DEFAULTS.batch_size
    max_memory: str = "free"  # the study plans against the memory free now; the library plans only when asked
    row_sums: str = "auto"
    disk_budget: str | None = None
    position0: str = "bos"
    dtype: str = "float32"
    device_map: str | None = None
    tau: float = DEFAULTS.tau
    replacements: tuple[str, ...] = ("mean", "zero", "noise", "token:eos")
    fingerprint_seqs: int = 16
    fingerprint_len: int = 48
    compare_seqs: int = 8
    compare_len: int = 640
    compare_quick: bool = True
    cases: tuple[Case, ...] = field(default=())
    relativize_seqs: int = 16
    relativize_len: int = 64
    relativize_modes: tuple[str, ...] = MODES
    calibration_seqs: int | None = None
    calibration_seed: int | None = None
    calibration_sizes: tuple[int, ...] = ()
    relativize_loss: bool = True
    path_offsets: tuple[int, ...] = ()
    path_doses: tuple[float, ...] = (1.0,)
    part_settings: PartSettings = field(default_factory=PartSettings)

    def __post_init__(self) -> None:
        self.measure_options()  # refuse a bad groups, early, batch size or τ when the settings are made

    def __getattr__(self, name: str) -> Any:
        """A setting a part declares (``split_offset``): its value here, else its declared default."""
        stored = self.__dict__.get("part_settings")
        if name.startswith("_") or stored is None:  # copy and pickle look up dunders before the fields are set
            raise AttributeError(name)
        if name in stored:
            return stored[name]
        defaults = declared_defaults()
        if name in defaults:
            return defaults[name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def as_dict(self) -> dict[str, Any]:
        """Every setting by name, flat: the fields, then the settings the parts declare (as ``run.json`` records them).

        Returns:
            ``{setting: value}``, dataclasses within (``cases``) as dicts, the parts' settings in place of ``part_settings``.

        Example:
            >>> list(Settings(split_offset=8).as_dict().items())[-2:]
            [('path_doses', (1.0,)), ('split_offset', 8)]
        """
        values = asdict(self)
        values.pop("part_settings")
        return {**values, **declared_defaults(), **self.part_settings}

    def measure_options(self) -> MeasureOptions:
        """The measurement's options these settings hold, validated (:meth:`poslens.options.MeasureOptions.validate`).

        Returns:
            The options.

        Raises:
            ParameterTypeError: An option of the wrong type.
            InputError: An option out of range.

        Example:
            >>> Settings.quick(groups=4).measure_options().groups
            4
            >>> Settings(tau=0.0)
            Traceback (most recent call last):
            poslens.errors.InputError: tau must lie in (0, 1] (a head reads the sink when its key-0 mass is ≥ τ), got 0.0
        """
        return MeasureOptions(groups=self.groups, early=self.early, batch_size=self.batch_size, max_memory=self.max_memory, tau=self.tau).validate()

    @classmethod
    def quick(cls, **overrides: Any) -> Settings:
        """The quick preset (minutes on a laptop CPU): the defaults, with ``overrides``.

        Args:
            **overrides: Settings to change.

        Returns:
            The settings.

        Example:
            >>> s = Settings.quick(model="gemma3-270m")
            >>> s.model, s.n_seqs, s.seq_len, s.compare_quick
            ('gemma3-270m', 16, 128, True)
        """
        return cls(**overrides)

    @classmethod
    def full(cls, **overrides: Any) -> Settings:
        """The full preset, sized to finish within 90 minutes on 2 CPU cores, with ``overrides``.

        Twice the quick preset's sequences and length for the measured parts; the
        architecture comparison runs every dose-response case (NTK α ∈ {2, 4, 8},
        windows W ∈ {32, 64, 128, 256}, beside the base model and gemma3-270m) on
        16 sequences at a shorter T = 512 (every W below T; all SmolLM2 variants
        read the same token ids, so their differences are paired), and the
        cumulative attribution 32 sequences × 128 tokens (it measures the corpus
        once per mode, once more at the smaller calibration size); the path-specific
        tests run the measured corpus (32 × 256) with the mask-only profile's three
        doses. More sequences before more cases: each comparison needs a narrow
        interval of its difference.

        Args:
            **overrides: Settings to change.

        Returns:
            The settings.

        Example:
            >>> s = Settings.full(seq_len=512)
            >>> s.n_seqs, s.seq_len, s.compare_seqs, s.compare_len, s.compare_quick, s.relativize_len
            (32, 512, 16, 512, False, 128)
        """
        base = dict(
            n_seqs=32,
            seq_len=256,
            path_doses=(0.25, 0.5, 1.0),
            fingerprint_seqs=64,
            fingerprint_len=64,
            compare_seqs=16,
            compare_len=512,
            compare_quick=False,
            relativize_seqs=32,
            relativize_len=128,
        )
        return cls(**{**base, **overrides})

    def key(self, *names: str) -> str:
        """A short hash of the named settings (all if none).

        Args:
            *names: Setting names.

        Returns:
            The first 16 hex digits of the SHA-256 of the named values.

        Example:
            >>> Settings().key("model", "n_seqs")
            'c348ecbb9faf360e'
            >>> from poslens.study.part_registry import MEASURE_KEYS
            >>> Settings(tau=0.5).key(*MEASURE_KEYS) == Settings().key(*MEASURE_KEYS)  # τ is not a measuring setting
            True
        """
        values = self.as_dict()
        chosen = {n: values[n] for n in (names or sorted(values))}
        return hashlib.sha256(json.dumps(chosen, sort_keys=True, default=str).encode()).hexdigest()[:16]


def settings_values(settings: Settings, names: tuple[str, ...]) -> dict[str, Any]:
    """The values of the settings ``names``, as JSON would store them (tuples become lists).

    Args:
        settings: The settings.
        names: Setting names.

    Returns:
        ``{name: value}``, JSON-ready.

    Example:
        >>> settings_values(Settings(), ("n_seqs", "replacements"))
        {'n_seqs': 16, 'replacements': ['mean', 'zero', 'noise', 'token:eos']}
    """
    values = settings.as_dict()
    return {name: json.loads(json.dumps(values[name], default=str)) for name in names}


FIELDS = frozenset(f.name for f in fields(Settings))
"""The fields of :class:`Settings` (``part_settings`` among them)."""

_dataclass_init = Settings.__init__


def _init(self: Settings, *args: Any, **values: Any) -> None:
    """The dataclass's ``__init__``, with a part's declared setting taken as a keyword into ``part_settings``."""
    declared = {name: values.pop(name) for name in [n for n in values if n not in FIELDS]}
    if declared or "part_settings" in values:  # a dict given as part_settings becomes a PartSettings too
        defaults = declared_defaults()
        merged = {**dict(values.get("part_settings") or {}), **declared}  # dataclasses.replace passes both
        unknown = [name for name in merged if name not in defaults]
        if unknown:
            import difflib

            close = difflib.get_close_matches(unknown[0], [*sorted(FIELDS - {"part_settings"}), *defaults], n=1)
            hint = f"; did you mean {close[0]}?" if close else ""
            raise InputError(
                f"Settings has no setting {unknown[0]!r}, nor does a registered part declare one (theirs: {', '.join(defaults) or 'none'}){hint}"
            )
        for name, value in merged.items():
            _check_declared(name, value)
        values["part_settings"] = PartSettings({name: value for name, value in merged.items() if value != defaults[name]})
    _dataclass_init(self, *args, **values)


def _check_declared(name: str, value: Any) -> None:
    """Refuse a declared setting's number out of its option's bounds (``checks`` ``min``/``max``), as its command would."""
    checks = _declared_options()[name].checks
    if isinstance(value, int | float) and not isinstance(value, bool):
        if "min" in checks and value < checks["min"]:
            raise InputError(f"{name} must be at least {checks['min']}, got {value}")
        if "max" in checks and value > checks["max"]:
            raise InputError(f"{name} must be at most {checks['max']}, got {value}")


_init.__signature__ = inspect.signature(_dataclass_init)  # type: ignore[attr-defined]
Settings.__init__ = _init  # type: ignore[method-assign]


@dataclass(frozen=True)
class ZooMeasureOptions:
    """The measuring settings shared by every run of the family (the Study's settings, less the model).

    Attributes:
        n_seqs: Held-out sequences measured.
        seq_len: Tokens per sequence (``None``: the family's training T).
        groups: Jackknife groups.
        early: Q of the early query window.
        batch_size: Sequences per forward pass.
        tau: Sink-score threshold τ.
        replacements: The BOS replacements.
        relativize_seqs: Sequences of the relativization (and as many calibration sequences).
        relativize_len: Tokens per sequence of the relativization (``None``: the measured T).
        seed: Seed of the window draw.

    Example:
        >>> ZooMeasureOptions().groups
        8
    """

    n_seqs: int = 64
    seq_len: int | None = None
    groups: int = 8
    early: int = 16
    batch_size: int = 16
    tau: float = 0.3
    replacements: tuple[str, ...] = ("mean", "zero", "noise", "token:eos")
    relativize_seqs: int = 32
    relativize_len: int | None = None
    seed: int = 0

    def settings(self, model: str, corpus: str, seq_len: int) -> Settings:
        """The Study settings of one run.

        Args:
            model: The run's folder.
            corpus: The family's held-out text.
            seq_len: The measured T.

        Returns:
            The settings.

        Example:
            >>> ZooMeasureOptions().settings("results/zoo/standard-s0", "results/zoo/held_out.jsonl", 128).relativize_len
            128
        """
        return Settings(
            model=model,
            corpus=corpus,
            n_seqs=self.n_seqs,
            seq_len=seq_len,
            groups=self.groups,
            early=self.early,
            seed=self.seed,
            batch_size=self.batch_size,
            max_memory="free",
            tau=self.tau,
            replacements=tuple(self.replacements),
            relativize_seqs=self.relativize_seqs,
            relativize_len=self.relativize_len or seq_len,
        )
