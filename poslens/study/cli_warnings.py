"""The ``poslens`` command's warnings: one line each, once per run, in the command's own flags, with no source path.

The library warns as a Python library does (:func:`warnings.warn`, with the file and line of the caller); that
is right for the API and wrong for a command, where the path means nothing to the user and the advice
(``n_seqs=16``) is not what they typed. While a command runs, :func:`command_warnings` replaces
:func:`warnings.showwarning`: each warning prints as one line, ``warning: <message>``, on stderr, once per
distinct message however often the library repeats it, and a :class:`~poslens.errors.AdvisedWarning`'s
advice is spelled in the command's flags (:func:`flag_spelling`). The Python API keeps its ordinary warnings.

Two warnings are not printed, since the command says the same in its own words: :class:`~poslens.errors.EarlyWindowWarning`
(the command's note on ``--early``) and :class:`~poslens.errors.UnseenOffsetWarning` (the part's warning on
``--offsets`` or ``--split-offset``, recorded with the part by :mod:`poslens.study.part_warnings`).

Example:
    >>> import warnings, sys
    >>> from poslens.errors import AdvisedWarning
    >>> with command_warnings(stream=sys.stdout):
    ...     for _ in range(3):
    ...         warnings.warn(AdvisedWarning("use more sequences ({n_seqs})", {"n_seqs": 16}))
    warning: use more sequences (n_seqs=16)
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import IO, Any

from poslens.errors import AdvisedWarning, EarlyWindowWarning, UnseenOffsetWarning

API_PARAMETERS: Mapping[str, str] = {
    **dict.fromkeys(("n_seqs", "fingerprint_seqs", "relativize_seqs", "compare_seqs", "calibration_seqs"), "n_seqs"),
    **dict.fromkeys(("seq_len", "fingerprint_len", "relativize_len", "compare_len"), "seq_len"),
    "groups": "groups",
    "early": "early",
    "batch_size": "batch_size",
    "warmup": "warmup",
}
"""A command's parameter (its setting) → the API parameter a warning's advice names: ``relativize_seqs`` is a corpus's ``n_seqs``."""

SILENT = (EarlyWindowWarning, UnseenOffsetWarning)
"""Warnings a command does not print: it says the same in its own flags."""


def flag_spelling(name: str, found: Any, options: Mapping[str, tuple[str, Any]]) -> str | None:
    """The command's flag(s) for the API parameter ``name``, chosen by the value the warning found.

    Args:
        name: The API parameter (``"n_seqs"``).
        found: The value the call had (``8``), or ``None`` when the warning does not say.
        options: The command's options by parameter name: ``{"relativize_seqs": ("--relativize-seqs", 8), ...}``.

    Returns:
        The flag of the option that takes ``name`` and had ``found`` (several joined by ``" or "`` when they all had it);
        with none that had it, the option named ``name`` itself, else the first that takes it; ``None`` when the command
        has no such option (the advice then stays in the API's spelling).

    Example:
        >>> options = {"n_seqs": ("--n-seqs", 16), "relativize_seqs": ("--relativize-seqs", 8)}
        >>> flag_spelling("n_seqs", 8, options), flag_spelling("n_seqs", 5, options), flag_spelling("groups", 4, options)
        ('--relativize-seqs', '--n-seqs', None)
    """
    taking = {parameter: flag_value for parameter, flag_value in options.items() if API_PARAMETERS.get(parameter) == name}
    if not taking:
        return None
    had = [flag for flag, value in taking.values() if found is not None and value == found]
    if had:
        return " or ".join(dict.fromkeys(had))
    return taking[name][0] if name in taking else next(iter(taking.values()))[0]


def command_options() -> dict[str, tuple[str, Any]]:
    """The running command's options by parameter name, each with its long flag and its value.

    The value is the one the command resolved where it said so (:func:`resolved_values`: ``poslens report``'s
    preset), else the one typed or defaulted. Read from click's current context.

    Returns:
        ``{parameter: (flag, value)}``; empty outside a command.

    Example:
        >>> command_options()   # outside a command
        {}
    """
    ctx = _current_context()
    if ctx is None:
        return {}
    resolved = ctx.meta.get("poslens.resolved", {})
    options = {}
    for param in ctx.command.params:
        flags = [opt for opt in getattr(param, "opts", []) if opt.startswith("--")]
        if getattr(param, "param_type_name", "") == "option" and flags and param.name:
            options[param.name] = (flags[0], resolved.get(param.name, ctx.params.get(param.name)))
    return options


def _current_context() -> Any:
    """The running command's context: click's, or that of the copy of click that typer 0.2x carries (typer._click)."""
    import importlib

    import typer

    click_context = typer.Context.__mro__[1]  # click.core.Context, or typer._click.core.Context
    package = click_context.__module__.rsplit(".", 1)[0]
    return importlib.import_module(f"{package}.globals").get_current_context(silent=True)


def resolved_values(values: Mapping[str, Any]) -> None:
    """Tell the warnings the values the running command resolved (a preset's, where an option was left out).

    Args:
        values: ``{parameter: value}`` (``settings.as_dict()``).

    Example:
        >>> resolved_values({"n_seqs": 16})   # outside a command: nothing to tell
    """
    ctx = _current_context()
    if ctx is not None:
        ctx.meta["poslens.resolved"] = dict(values)


class WarningPrinter:
    """:func:`warnings.showwarning` for a command: ``warning: <message>`` on one line, once per message, no path.

    Args:
        stream: Where to print (default: ``sys.stderr`` at the time of the warning).

    Example:
        >>> printer = WarningPrinter(sys.stdout)
        >>> printer.show(UserWarning("two\\nlines"), UserWarning, "x.py", 3)
        warning: two lines
        >>> printer.show(UserWarning("two\\nlines"), UserWarning, "y.py", 4)   # the same message: once
    """

    def __init__(self, stream: IO[str] | None = None) -> None:
        self.stream = stream
        self.shown: set[str] = set()

    def show(self, message: Warning | str, category: type[Warning], filename: str, lineno: int, file: Any = None, line: Any = None) -> None:
        """Print ``message`` as the command spells it, unless it was printed already in this run.

        Args:
            message: The warning (or its text).
            category: Its class.
            filename: The file that warned (not printed).
            lineno: The line (not printed).
            file: Ignored (the printer's stream is used).
            line: Ignored.

        Example:
            >>> WarningPrinter(sys.stdout).show("plain text", UserWarning, "x.py", 1)
            warning: plain text
        """
        if isinstance(message, AdvisedWarning):
            options = command_options()
            found = message.found

            def spell(name: str, value: Any) -> str:
                flag = flag_spelling(name, found.get(name), options)
                return f"{name}={value}" if flag is None else f"{flag} {value}"

            text = message.spelled(spell)
        else:
            text = str(message)
        text = " ".join(text.split())  # one line
        if text in self.shown:
            return
        self.shown.add(text)
        if os.environ.get("RANK", "0") != "0":  # under torchrun, rank 0 prints (the ranks run the same parts)
            return
        print(f"warning: {text}", file=self.stream or sys.stderr, flush=True)


@contextmanager
def command_warnings(stream: IO[str] | None = None) -> Iterator[WarningPrinter]:
    """While a command runs: every warning as one ``warning:`` line, once, in the command's flags; :data:`SILENT` ones not at all.

    Args:
        stream: Where to print (default: stderr).

    Yields:
        The printer (its ``shown`` holds the lines printed).

    Example:
        >>> import warnings
        >>> with command_warnings(stream=sys.stdout):
        ...     warnings.warn("once")
        ...     warnings.warn("once")
        ...     warnings.warn(EarlyWindowWarning("the command's own note says it"))
        warning: once
    """
    printer = WarningPrinter(stream)
    with warnings.catch_warnings():
        for category in SILENT:
            warnings.filterwarnings("ignore", category=category)
        warnings.showwarning = printer.show
        yield printer
