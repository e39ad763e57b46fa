"""The callbacks that check the ``poslens`` commands' options when the command line is parsed, and ``--overwrite`` and ``--out``.

The options of the settings (flag, default, help, check) are declared once, with the parts, in
:data:`poslens.study.part_registry.OPTIONS`; :func:`poslens.study.part_commands.setting_option` makes them.

Every callback returns the value it was given (or its normal form) and raises
``typer.BadParameter`` (BadParameter below) with the reason, so a wrong option stops the command
before any model is loaded. The options of the measuring commands are the
settings of the parts (:class:`poslens.study.settings.Settings`); their defaults
are the quick preset's, so that commands run one after another into one folder agree.
"""

from __future__ import annotations

import typer

from poslens.errors import InputError, PoslensError
from poslens.options import MeasureOptions
from poslens.zoo.family import parse_members

# The callbacks import what they check with inside themselves: they run only when their command runs,
# and importing torch here would make ``poslens --help`` take seconds.


def check_max_memory(value: str) -> str:
    """Check ``--max-memory``: ``free``, ``auto`` or a size such as 8GB.

    Args:
        value: The option as typed.

    Returns:
        The value unchanged.

    Raises:
        BadParameter: When the value is no size.

    Example:
        >>> check_max_memory("8GB"), check_max_memory("free")
        ('8GB', 'free')
    """
    from poslens.runtime.planner import parse_bytes

    if value.lower() in ("free", "auto"):
        return value
    try:
        parse_bytes(value)
    except ValueError as error:
        raise typer.BadParameter(str(error)) from error
    return value


def check_route(value: str) -> str:
    """Check ``--row-sums``: one of the routes ``auto``, ``store``, ``second-pass`` (``poslens.runtime.disk.ROUTES``).

    Args:
        value: The option as typed.

    Returns:
        The value unchanged.

    Raises:
        BadParameter: When the value names no route.

    Example:
        >>> check_route("store")
        'store'
    """
    from poslens.runtime.disk import ROUTES

    if value not in ROUTES:
        raise typer.BadParameter(f"--row-sums must be one of {', '.join(ROUTES)}, got {value!r}")
    return value


def check_disk_budget(value: str | None) -> str | None:
    """Check ``--disk-budget``: a size such as 2GB, or left out.

    Args:
        value: The option as typed, or ``None``.

    Returns:
        The value unchanged.

    Raises:
        BadParameter: When the value is no size.

    Example:
        >>> check_disk_budget("2GB"), check_disk_budget(None)
        ('2GB', None)
    """
    from poslens.runtime.planner import parse_bytes

    if value is None:
        return None
    try:
        parse_bytes(value, what="disk")
    except ValueError as error:
        raise typer.BadParameter(str(error)) from error
    return value


def check_tau(value: float) -> float:
    """Check ``--tau`` as :meth:`poslens.options.MeasureOptions.validate` does (nan refused).

    Args:
        value: The sink-reading threshold τ.

    Returns:
        The value unchanged.

    Raises:
        BadParameter: When τ is not in (0, 1].

    Example:
        >>> check_tau(0.3)
        0.3
    """
    try:
        MeasureOptions(tau=value).validate()
    except InputError as error:
        raise typer.BadParameter(f"--{error}") from error
    return value


def check_bos(value: str) -> str:
    """Check the form of ``--bos``; the token itself is checked against the tokenizer later.

    Args:
        value: ``bos``, ``none`` or ``token:<id or string>``.

    Returns:
        The value unchanged.

    Raises:
        BadParameter: When the value has none of these forms, or the id is negative.

    Example:
        >>> check_bos("token:12"), check_bos("none")
        ('token:12', 'none')
    """
    rest = value[len("token:") :] if value.startswith("token:") else None
    if value in ("bos", "none") or (rest and not (rest.lstrip("-").isdigit() and int(rest) < 0)):
        return value
    raise typer.BadParameter(f"{value!r} is not bos, none or token:<id or string> (an id ≥ 0, or a string that is one token)")


def check_replacements(values: list[str]) -> list[str]:
    """Check each ``--replacement``: a BOS replacement :class:`poslens.mechanisms.interventions.BosReplacement` accepts.

    Args:
        values: The replacements as typed.

    Returns:
        The values unchanged.

    Raises:
        BadParameter: When one of them is no replacement.

    Example:
        >>> check_replacements(["mean", "zero"])
        ['mean', 'zero']
    """
    from poslens.mechanisms.interventions import BosReplacement

    for value in values:
        try:
            BosReplacement(value)
        except ValueError as error:
            raise typer.BadParameter(str(error)) from error
    return values


def check_variant(value: str) -> str:
    """Check ``--variant`` before any model is loaded.

    Args:
        value: ``base`` or variants such as ``ntk:4`` joined by ``+``.

    Returns:
        The value unchanged.

    Raises:
        BadParameter: When :func:`poslens.model.variants.parse_variant` refuses it.

    Example:
        >>> check_variant("ntk:4+window:64")
        'ntk:4+window:64'
    """
    from poslens.model.variants import parse_variant

    try:
        parse_variant(value)
    except ValueError as error:
        raise typer.BadParameter(str(error)) from error
    return value


def check_modes(value: str) -> str:
    """Check ``--modes``: a comma list of relativization modes, each once.

    Args:
        value: The option as typed.

    Returns:
        The modes joined by commas, blanks removed.

    Raises:
        BadParameter: When a mode is unknown, named twice, or none is given.

    Example:
        >>> check_modes("all, key0")
        'all,key0'
    """
    from poslens.fit.relativize import MODES

    modes = [m.strip() for m in value.split(",") if m.strip()]
    unknown = [m for m in modes if m not in MODES]
    if unknown or not modes:
        raise typer.BadParameter(
            f"{value!r} is not a comma list of relativization modes; choose from {', '.join(MODES)} "
            f"(e.g. --modes {MODES[1]} or --modes {','.join(MODES)})"
        )
    if len(set(modes)) < len(modes):
        raise typer.BadParameter(f"{value!r} names a mode twice; name each of {', '.join(MODES)} at most once")
    return ",".join(modes)


#: The largest offset ``--offsets`` takes: the positions of a sequence are int32 in the forward pass.
MAX_OFFSET = 2**31 - 1


def check_offsets(value: str | None) -> str | None:
    """Check ``--offsets``: a comma list of whole offsets D ≥ 0 for the key-phase freeze, each once (None: the defaults).

    Args:
        value: The option as typed, or None.

    Returns:
        The offsets joined by commas, or None.

    Raises:
        BadParameter: When an offset is not a whole number ≥ 0 (ASCII digits), is above :data:`MAX_OFFSET`, or is named twice.

    Example:
        >>> check_offsets("8, 64"), check_offsets(None)
        ('8,64', None)
    """
    if value is None:
        return None
    parts = [p.strip() for p in value.split(",") if p.strip()]
    if not parts or not all(p.isascii() and p.isdigit() for p in parts):
        raise typer.BadParameter(f"{value!r} is not a comma list of whole offsets D >= 0 (e.g. --offsets 8,64,128)")
    too_large = [p for p in parts if int(p) > MAX_OFFSET]
    if too_large:
        raise typer.BadParameter(
            f"offset {too_large[0]} is larger than any sequence poslens measures (at most {MAX_OFFSET:,} tokens); "
            "give offsets D below --seq-len (e.g. --offsets 8,64,128)"
        )
    if len(set(map(int, parts))) < len(parts):
        raise typer.BadParameter(f"{value!r} names an offset twice; name each at most once")
    return ",".join(str(int(p)) for p in parts)


def check_doses(value: str) -> str:
    """Check ``--doses``: a comma list of the mask-only profile's doses λ in (0, 1], each once.

    Args:
        value: The option as typed.

    Returns:
        The doses joined by commas.

    Raises:
        BadParameter: When a dose is not a number in (0, 1], or is named twice.

    Example:
        >>> check_doses("0.25,0.5, 1")
        '0.25,0.5,1'
    """
    parts = [p.strip() for p in value.split(",") if p.strip()]
    try:
        doses = [float(p) for p in parts]
    except ValueError:
        doses = []
    if not doses or not all(0 < d <= 1 for d in doses):
        raise typer.BadParameter(f"{value!r} is not a comma list of doses in (0, 1] (e.g. --doses 0.25,0.5,1)")
    if len(set(doses)) < len(doses):
        raise typer.BadParameter(f"{value!r} names a dose twice; name each at most once")
    return ",".join(f"{d:g}" for d in doses)


def check_calibration_sizes(value: str | None) -> str | None:
    """Check the form of ``--calibration-sizes``: a comma list of integers ≥ 2.

    Args:
        value: The option as typed, or ``None``.

    Returns:
        The sizes sorted, each once, joined by commas; ``None`` when left out.

    Raises:
        BadParameter: When a word is not an integer ≥ 2.

    Example:
        >>> check_calibration_sizes("16,8,8")
        '8,16'
    """
    if value is None:
        return None
    words = [w.strip() for w in value.split(",") if w.strip()]
    if not words or not all(w.isdigit() and int(w) >= 2 for w in words):
        raise typer.BadParameter(f"{value!r} is not a comma list of calibration sizes (integers ≥ 2, e.g. 8,16)")
    return ",".join(str(n) for n in sorted({int(w) for w in words}))


def check_seeds(value: str) -> str:
    """Check ``--seeds``: a comma list of integers.

    Args:
        value: The option as typed.

    Returns:
        The seeds joined by commas, blanks removed.

    Raises:
        BadParameter: When a word is not an integer.

    Example:
        >>> check_seeds("0, 1")
        '0,1'
    """
    words = [w.strip() for w in value.split(",") if w.strip()]
    if not words or not all(w.lstrip("-").isdigit() for w in words):
        raise typer.BadParameter(f"{value!r} is not a comma list of integer seeds (e.g. --seeds 0,1)")
    return ",".join(words)


def check_members(value: str) -> str:
    """Check ``--members``: a comma list of zoo members (:func:`poslens.zoo.family.parse_members`).

    Args:
        value: The option as typed.

    Returns:
        The members joined by commas.

    Raises:
        BadParameter: When a member is unknown.

    Example:
        >>> check_members("standard,sliding")
        'standard,sliding'
    """
    try:
        return ",".join(parse_members(value))
    except PoslensError as error:
        raise typer.BadParameter(str(error)) from error


OVERWRITE = typer.Option(
    False,
    "--overwrite",
    help="Measure again a part that poslens made in --out with other settings or from "
    "input files changed since, replacing it (files poslens did not write are never replaced).",
)
OUT = typer.Option(
    ..., help="Output folder: <command>.parquet, .csv and .sums.npz are written there; parts made with the same settings and input files are reused."
)
