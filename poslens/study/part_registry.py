"""The study's parts, each declared once: its name, settings, command-line options, files, figures and cost.

A part is one table of the study, made by one method of :class:`poslens.study.parts.Study`
(its name with ``_`` for ``-``) and run by the ``poslens`` command of the same name.
Everything else about it is derived from its :class:`Part` in :data:`PARTS`:

- the settings recorded in the saved part and compared when it is reused (:attr:`Part.settings`);
- its ``poslens`` command, with one option per setting it takes (:mod:`poslens.study.part_commands`);
- the command lines poslens prints so that a user can make a part that agrees with a folder (:func:`command_line`);
- the report's plan, the metrics its figures draw, the files ``run.json`` names (:attr:`Part.file`);
- the full run's time estimate (:func:`estimated_tokens`).

The options are declared once too, in :data:`OPTIONS` (the shared ones in :mod:`poslens.study.part_options`, a
part's own with its declaration): a setting's flag, default, help and how its value is spelled on a command line; a
part may spell a setting its own way (``compare --n-seqs`` is ``compare_seqs``) or give it another default.

Adding a part is one module of :mod:`poslens.study.declarations` whose ``DECLARES`` holds its :class:`Part`
(CONTRIBUTING.md shows the worked example, :mod:`poslens.study.declarations.sink_split`). Longer than 400 lines because
:class:`Part` documents every field a declaration may give, and the functions that read the registry sit beside it.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from poslens.study.part_options import BASE_OPTIONS, Option, OptionConflictError  # noqa: F401 (re-exported: declared here before)
from poslens.study.settings import FIELDS

if TYPE_CHECKING:
    from pathlib import Path

    from poslens.measurement.result import Result
    from poslens.study.settings import Settings

MEASURE_KEYS = ("model", "variant", "corpus", "text_field", "n_seqs", "seq_len", "groups", "early", "seed", "batch_size", "position0", "dtype")
"""The settings every measured part depends on: the model, the corpus and the measurement's grouping."""

RUNTIME = ("max_memory", "row_sums", "disk_budget")
"""Settings that choose how a part is computed, never its figures: a command takes them, its part does not record them."""


def lazy(where: str) -> Callable[..., Any]:
    """A function named ``"module:function"``, imported when it is first called (so that ``poslens --help`` stays fast).

    Args:
        where: ``"package.module:function"``.

    Returns:
        A function that imports ``function`` and calls it with its arguments.

    Example:
        >>> lazy("math:hypot")(3, 4)
        5.0
    """
    module, _, name = where.partition(":")

    def call(*args: Any, **kwargs: Any) -> Any:
        import importlib

        return getattr(importlib.import_module(module), name)(*args, **kwargs)

    call.__qualname__ = call.__name__ = name
    call.where = where  # type: ignore[attr-defined]  # what it imports, for a reader (and a test) to resolve
    return call


def measured_tokens(n_seqs: int, seq_len: int) -> float:
    """Token-equivalents of one measured forward pass (the counterfactual replay grows with T), for a part's cost.

    Args:
        n_seqs: Sequences.
        seq_len: Tokens per sequence.

    Returns:
        Token-equivalents.

    Example:
        >>> measured_tokens(2, 64)
        136.0
    """
    return n_seqs * seq_len * (1 + seq_len / 1024)


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
        order: Its place in ``poslens report`` (the baseline first: the others read it).
        compute: ``compute(study)``: the part, made through ``study.cached`` (:class:`~poslens.study.parts.Study`);
            ``study.<name with _>()`` and its command call it.
        provides: The claim inputs it provides, as :func:`poslens.study.claims.evaluate` names them (``"split"``): a
            claim that reads one of them is measured by this part's command.
        claim_inputs: ``claim_inputs(result)``: those inputs from its result (``None`` for one it did not measure;
            default: ``result`` under each name of ``provides``).
        figures: ``figures(result, settings, /, **inputs)``: its figures in the report, as ``(claim, figure, caption)``;
            ``inputs`` are every present part's claim inputs, by name (``result`` and ``settings`` positional-only, so
            that a claim input of the same name, ``path`` or ``split``, goes into ``inputs``).
        figure_order: Where its figures go among a claim's (default: :attr:`order`).
        warnings: ``warnings(settings, result)``: sentences on a part just computed (an option that measures nothing).
        new_options: The settings no other part takes, declared with the part by their options (merged into
            :data:`OPTIONS`): :class:`~poslens.study.settings.Settings` takes each as a keyword and reads it as an
            attribute, its default the option's, with no field of its own (:func:`declared_options`).
        zoo: ``zoo(study)``: its figures for one run of ``poslens zoo-measure`` (``None``: not measured there).
        zoo_order: Its place in ``poslens zoo-measure``.
        load_old: ``load_old(folder)``: the part from an older layout of the folder, or ``None`` (``poslens claims``).

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
    order: float = 0.0
    compute: Callable[[Any], Result] | None = None  # of a Study (not imported: parts.py imports this module)
    provides: tuple[str, ...] = ()
    claim_inputs: Callable[[Result], Mapping[str, Any]] | None = None
    figures: Callable[..., Iterable[tuple[str, Any, str]]] | None = None
    figure_order: float | None = None
    warnings: Callable[[Settings, Result], list[str]] = lambda settings, result: []
    new_options: Mapping[str, Option] = field(default_factory=dict)
    zoo: Callable[[Any], Any] | None = None
    load_old: Callable[[Path], Result | None] | None = None
    zoo_order: int = 0

    def inputs(self, result: Result) -> dict[str, Any]:
        """The claim inputs its ``result`` provides (:attr:`provides`), by name.

        Args:
            result: The part.

        Returns:
            ``{input name: value}`` (``None`` where the part measured nothing for that input).

        Example:
            >>> sorted(PARTS["sink-split"].inputs(None))   # no table: nothing was split
            ['split']
        """
        if self.claim_inputs is not None:
            return dict(self.claim_inputs(result))
        return dict.fromkeys(self.provides, result)

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


MEASURED_OPTIONS = (
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
"""The options of a part measured on the study's corpus, in ``--help`` order (its own follow them)."""

DECLARATIONS = "poslens.study.declarations"
"""The package whose modules declare the parts: each module's ``DECLARES``, a tuple of :class:`Part`."""

_PARTS: dict[str, Part] = {}
_OPTIONS: dict[str, Option] = dict(BASE_OPTIONS)
_loaded: list[bool] = []


def _load() -> None:
    """Import every module of :data:`DECLARATIONS` once and register its parts (on first use: no import cycle)."""
    if _loaded:
        return
    _loaded.append(True)
    import importlib
    import pkgutil

    package = importlib.import_module(DECLARATIONS)
    for module in pkgutil.iter_modules(package.__path__):
        register(*importlib.import_module(f"{DECLARATIONS}.{module.name}").DECLARES)


def register(*parts: Part) -> None:
    """Add parts to the study: their commands, their place in the report, their claim inputs and options follow.

    The declarations' modules are registered on first use; a test or a plugin registers a part of its own with
    this (and :func:`unregister` takes it back).

    Args:
        *parts: The parts.

    Raises:
        ValueError: When a part's name, or a setting of its ``new_options``, is taken.

    Example:
        >>> part = Part("key0-mass", "Mean attention on key 0.", ("model",), ("model",), show=print, order=99)
        >>> register(part); report_plan()[-1]
        'key0-mass'
        >>> unregister("key0-mass"); "key0-mass" in PARTS
        False
    """
    _load()
    for part in parts:
        if part.name in _PARTS:
            raise ValueError(f"a part named {part.name!r} is registered already")
        taken = set(part.new_options) & (set(_OPTIONS) | FIELDS)
        if taken:
            raise ValueError(f"part {part.name!r} declares options of settings that have one already: {sorted(taken)}")
        _OPTIONS.update(part.new_options)
        _PARTS[part.name] = part
    ordered = sorted(_PARTS.values(), key=lambda p: p.order)  # a stable sort: equal orders keep their registration
    _PARTS.clear()
    _PARTS.update((p.name, p) for p in ordered)


def unregister(name: str) -> None:
    """Take back a part :func:`register` added (and its ``new_options``).

    Args:
        name: The part's name.

    Example:
        >>> unregister("no-such-part")   # nothing to take back
    """
    _load()
    part = _PARTS.pop(name, None)
    for setting in part.new_options if part is not None else ():
        _OPTIONS.pop(setting, None)


def declared_options() -> dict[str, Option]:
    """The options of the settings the registered parts declare for themselves (:attr:`Part.new_options`), in order.

    :class:`~poslens.study.settings.Settings` takes these settings as keywords and holds them in its ``part_settings``;
    each one's default is its option's (:meth:`Option.setting_value` of :attr:`Option.default`).

    Returns:
        ``{setting: option}``.

    Example:
        >>> declared_options()["split_offset"].flag
        '--split-offset'
    """
    _load()
    return {name: option for part in _PARTS.values() for name, option in part.new_options.items()}


class _Live(Mapping):
    """A read-only view of the registry that loads the declarations on first use."""

    def __init__(self, read: Callable[[], Mapping]) -> None:
        self._read = read

    def __getitem__(self, key: Any) -> Any:
        _load()
        return self._read()[key]

    def __iter__(self) -> Iterator:
        _load()
        return iter(self._read())

    def __len__(self) -> int:
        _load()
        return len(self._read())

    def __repr__(self) -> str:
        return repr(dict(self))


OPTIONS: Mapping[str, Option] = _Live(lambda: _OPTIONS)
"""The command-line option of every setting a command takes, by setting name (the parts' ``new_options`` included)."""

PARTS: Mapping[str, Part] = _Live(lambda: _PARTS)
"""Every part of the study, by name, in the order ``poslens report`` runs them."""

COMMAND_SETTINGS: Mapping[str, tuple[str, ...]] = _Live(lambda: {name: part.settings for name, part in _PARTS.items()})
"""The settings each part records and compares on reuse, by part name."""

OPTION_NAMES: Mapping[str, str] = _Live(lambda: {setting: option.flag for setting, option in _OPTIONS.items()})
"""The command-line option of each setting (as ``poslens report`` spells it), for messages that tell the user what to type."""


def providers(inputs: Iterable[str]) -> tuple[str, ...]:
    """The commands of the parts that provide any of the claim inputs ``inputs`` (:attr:`Part.provides`), in order.

    Args:
        inputs: Claim input names, as :func:`poslens.study.claims.evaluate` names them.

    Returns:
        Command names, each once.

    Example:
        >>> providers(["split"]), providers(["comparison"])
        (('sink-split',), ('compare',))
    """
    wanted = set(inputs)
    return tuple(dict.fromkeys(part.command for part in PARTS.values() if wanted & set(part.provides) and not part.made_by))


def claim_inputs(parts: Mapping[str, Result]) -> dict[str, Any]:
    """The claim inputs the present ``parts`` provide, merged in the registry's order (a later part's value wins).

    Args:
        parts: The study parts present, by name.

    Returns:
        ``{input name: value}``, for :func:`poslens.study.claims.evaluate`.

    Example:
        >>> claim_inputs({})
        {}
    """
    merged: dict[str, Any] = {}
    for name, part in PARTS.items():
        if name in parts:
            merged.update(part.inputs(parts[name]))
    return merged


def baseline() -> Part:
    """The baseline part: the first the report runs, whose table the others read (the leakage, with every head's sink score).

    Returns:
        The part.

    Example:
        >>> baseline().file
        'leakage.parquet'
    """
    return next(iter(PARTS.values()))


def drawing(metric: str) -> Part:
    """The first part (in the report's order) whose figures draw ``metric`` (:attr:`Part.figure_metrics`).

    Args:
        metric: A metric of the parts' tables (``"sink_heads"``).

    Returns:
        The part.

    Raises:
        KeyError: When no part draws it.

    Example:
        >>> drawing("sink_heads").name, drawing("dispersion").name
        ('sinks', 'fingerprint')
    """
    for part in PARTS.values():
        if metric in part.figure_metrics:
            return part
    raise KeyError(f"no part draws {metric!r}")


def zoo_parts() -> list[Part]:
    """The parts ``poslens zoo-measure`` measures on every run of a family, in its order (:attr:`Part.zoo_order`).

    Returns:
        The parts.

    Example:
        >>> [part.name for part in zoo_parts()][:2]
        ['leakage', 'sinks']
    """
    return sorted((part for part in PARTS.values() if part.zoo is not None), key=lambda part: part.zoo_order)


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
