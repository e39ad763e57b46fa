"""The ``poslens`` command of each study part, generated from its declaration (:mod:`poslens.study.part_registry`).

A part's command takes one option per setting in :attr:`~poslens.study.part_registry.Part.options`
(flag, default, help and check from :data:`~poslens.study.part_registry.OPTIONS`, spelled as the part
says), then ``--overwrite`` and ``--out``. typer reads a command's options from its signature, so each
command is a function whose ``__signature__`` lists them; its body hands the settings to the runner the
CLI gives (``poslens.study.cli._run_part``), which makes the part and prints it.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer

from poslens.study import cli_options
from poslens.study.part_registry import OPTIONS, Part


def setting_option(setting: str, default: Any = None, flag: str | None = None) -> Any:
    """The ``typer.Option`` of ``setting``, from its declaration in :data:`~poslens.study.part_registry.OPTIONS`.

    Args:
        setting: A setting name.
        default: Another default than the declared one (``None``: the declared one).
        flag: Another spelling than the declared one (``None``: the declared one).

    Returns:
        The option, for a command's signature.

    Example:
        >>> setting_option("tau").param_decls, setting_option("tau").default
        (('--tau',), 0.3)
    """
    option = OPTIONS[setting]
    checks = dict(option.checks)
    return typer.Option(option.default if default is None else default, flag or option.flag, help=_help_with_default(option.help, checks), **checks)


def _help_with_default(text: str, checks: dict[str, Any]) -> str:
    """``text`` with a default written in words (``show_default="8,64,T/2"``) shown as typer shows a value: ``[default: 8,64,T/2]``.

    typer prints a ``show_default`` string in parentheses (``[default: (8,64,T/2)]``), so the string goes into the help
    text instead, its bracket escaped for rich's markup, and ``show_default`` becomes False; ``checks`` is changed in place.
    """
    shown = checks.get("show_default")
    if not isinstance(shown, str):
        return text
    checks["show_default"] = False
    return f"{text} \\[default: {shown}]"


def _typer_option(part: Part, setting: str) -> Any:
    """The ``typer.Option`` of ``setting`` on ``part``'s command (its own spelling and default)."""
    return setting_option(setting, part.defaults.get(setting), part.flag(setting))


def part_command(part: Part, run: Callable[[Part, dict[str, Any], bool, Path], None]) -> Callable[..., None]:
    """The typer command of ``part``: its options from the registry, its body ``run(part, typed, overwrite, out)``.

    Args:
        part: The part's declaration.
        run: Makes the part into ``out`` from ``typed``, the options' values by setting name as the command received
            them (:meth:`~poslens.study.part_registry.Option.setting_value` turns each into its setting), and prints it.

    Returns:
        A function for ``app.command(part.name)``.

    Example:
        >>> from poslens.study.part_registry import PARTS
        >>> command = part_command(PARTS["sinks"], lambda part, typed, overwrite, out: print(typed["tau"]))
        >>> list(inspect.signature(command).parameters)[-3:]
        ['tau', 'overwrite', 'out']
    """
    parameters = [
        inspect.Parameter(setting, inspect.Parameter.KEYWORD_ONLY, default=_typer_option(part, setting), annotation=OPTIONS[setting].annotation)
        for setting in part.options
    ]
    parameters += [
        inspect.Parameter("overwrite", inspect.Parameter.KEYWORD_ONLY, default=cli_options.OVERWRITE, annotation=bool),
        inspect.Parameter("out", inspect.Parameter.KEYWORD_ONLY, default=cli_options.OUT, annotation=Path),
    ]

    def command(**values: Any) -> None:
        overwrite, out = values.pop("overwrite"), values.pop("out")
        run(part, values, overwrite, out)

    command.__signature__ = inspect.Signature(parameters, return_annotation=None)  # type: ignore[attr-defined]
    command.__annotations__ = {}  # typer reads the types from the signature
    command.__name__ = part.method
    command.__qualname__ = part.method
    command.__doc__ = part.summary
    return command
