"""The hooks a user put on their model: found, named, and told apart from TransformerLens's own.

:func:`user_hooks` lists the forward hooks and pre-hooks on a module tree, each
with its module's name and its function's name (TransformerLens's wrapper of a
hook-point hook taken off). poslens runs these hooks with the model and records
the list in each result's provenance (``meta["model"]["user_hooks"]``); a hook it
cannot run is refused (:class:`UserHookNotRunError`, raised by
:class:`poslens.model.user_model.ModelUse`).

Example:
    >>> net = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.ReLU())
    >>> def clip(module, args, output):
    ...     return output.clamp(max=1.0)
    >>> handle = net[1].register_forward_hook(clip)
    >>> user_hooks(net)
    [{'module': '1', 'kind': 'forward', 'function': 'poslens.model.user_hooks.clip'}]
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import Any

import torch

from poslens.errors import PoslensError

#: The hook dictionaries of a torch module whose hooks run in a forward pass, and the kind :func:`user_hooks` reports.
FORWARD_HOOKS = {"_forward_pre_hooks": "forward_pre", "_forward_hooks": "forward"}
#: Every hook dictionary of a torch module (the forward ones and the others), for comparisons before and after.
HOOK_DICTS = (
    "_forward_pre_hooks",
    "_forward_pre_hooks_with_kwargs",
    "_forward_hooks",
    "_forward_hooks_with_kwargs",
    "_forward_hooks_always_called",
    "_backward_pre_hooks",
    "_backward_hooks",
    "_state_dict_hooks",
    "_state_dict_pre_hooks",
    "_load_state_dict_pre_hooks",
    "_load_state_dict_post_hooks",
)


class UserHookNotRunError(PoslensError, ValueError):
    """A hook on the user's model sits on a module the bridge never calls: it would be skipped, so poslens refuses.

    Example:
        >>> issubclass(UserHookNotRunError, ValueError)
        True
    """


def _innermost(function: Any) -> Any:
    """The user's function inside TransformerLens's wrappers (a hook point's ``full_hook``) and ``functools.partial``."""
    for _ in range(8):
        if isinstance(function, functools.partial):
            function = function.func
            continue
        code = getattr(function, "__code__", None)
        cells = getattr(function, "__closure__", None) or ()
        names = code.co_freevars if code is not None else ()
        inner = next((cell.cell_contents for name, cell in zip(names, cells, strict=False) if name in ("hook", "full_hook")), None)
        if inner is None or not callable(inner):
            return function
        function = inner
    return function


def function_name(function: Any) -> str:
    """A hook function as a person reads it: ``module.qualified_name``, TransformerLens's wrappers taken off.

    Args:
        function: a hook function (or any callable).

    Returns:
        The name.

    Example:
        >>> def double(module, args, output):
        ...     return output * 2
        >>> function_name(double)
        'poslens.model.user_hooks.double'
    """
    inner = _innermost(function)
    qualname = getattr(inner, "__qualname__", None) or type(inner).__qualname__
    return f"{getattr(inner, '__module__', None) or type(inner).__module__}.{qualname}".replace(".<locals>", "")


#: Packages whose own hooks are plumbing, not the user's: TransformerLens's capture hooks on a bridge's components,
#: and transformers' output-capturing hooks (installed once ``output_attentions`` or ``output_hidden_states`` is asked).
INTERNAL_PACKAGES = ("transformer_lens", "transformers")


def is_internal(function: Any) -> bool:
    """Whether a hook is a library's own plumbing (:data:`INTERNAL_PACKAGES`), not the user's.

    Args:
        function: a hook function.

    Returns:
        True for a function of TransformerLens or transformers itself (a hook point's wrapper of a user's function is the
        user's).

    Example:
        >>> is_internal(print)
        False
    """
    package = str(getattr(_innermost(function), "__module__", "") or "").split(".")[0]
    return package in INTERNAL_PACKAGES


def display_name(name: str) -> str:
    """A module's name as a person finds it in the model: TransformerLens's ``._original_component`` steps taken out.

    Args:
        name: the module's name in ``named_modules()``.

    Returns:
        The name without the bridge's wrapper steps.

    Example:
        >>> display_name("blocks.0._original_component.self_attn._original_component")
        'blocks.0.self_attn'
    """
    return name.replace("._original_component", "").replace("_original_component.", "")


def user_hooks(module: torch.nn.Module, prefix: str = "") -> list[dict[str, str]]:
    """The forward hooks and pre-hooks found on ``module`` and its submodules (the libraries' own left out, :func:`is_internal`).

    A TransformerLens hook on a hook point (``add_hook``) is a forward hook of
    that hook point; it is reported with the function it wraps. poslens's own
    hooks are never on a model between two of its forward passes.

    Args:
        module: a torch module (a transformers model, a bridge, a HookedTransformer).
        prefix: put before every module name (``"original_model."``).

    Returns:
        One ``{"module": name, "kind": "forward" | "forward_pre", "function": name}`` per hook, in module order
        (the root module is ``""``).

    Example:
        >>> net = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.ReLU())
        >>> def scale(module, args, output):
        ...     return output * 2
        >>> handle = net[0].register_forward_hook(scale)
        >>> user_hooks(net)
        [{'module': '0', 'kind': 'forward', 'function': 'poslens.model.user_hooks.scale'}]
    """
    return named_hooks(module.named_modules(prefix=prefix.rstrip(".")))


def named_hooks(named: Iterable[tuple[str, torch.nn.Module]]) -> list[dict[str, str]]:
    """:func:`user_hooks` of the modules ``named`` (each module once); a hook point is named as TransformerLens names it.

    Args:
        named: ``(name, module)`` pairs, as ``named_modules()`` gives them.

    Returns:
        One record per hook, as :func:`user_hooks` gives them.

    Example:
        >>> net = torch.nn.Sequential(torch.nn.Linear(2, 2))
        >>> handle = net[0].register_forward_pre_hook(lambda module, args: None)
        >>> [(hook["module"], hook["kind"]) for hook in named_hooks(net.named_modules())]
        [('0', 'forward_pre')]
    """
    found, seen = [], set()
    for name, sub in named:
        if id(sub) in seen:
            continue
        seen.add(id(sub))
        hooks = [(kind, f) for attribute, kind in FORWARD_HOOKS.items() for f in getattr(sub, attribute, {}).values() if not is_internal(f)]
        if not hooks:  # most modules: no name to form
            continue
        shown = sub.name if type(sub).__name__ == "HookPoint" and isinstance(getattr(sub, "name", None), str) else display_name(name)
        found.extend({"module": shown, "kind": kind, "function": function_name(function)} for kind, function in hooks)
    return found


def user_functions(module: torch.nn.Module) -> list[Any]:
    """The user's forward hook and pre-hook functions on ``module`` itself (TransformerLens's own left out).

    Args:
        module: a torch module.

    Returns:
        The hook functions, pre-hooks first.

    Example:
        >>> layer = torch.nn.Linear(2, 2)
        >>> handle = layer.register_forward_hook(print)
        >>> user_functions(layer) == [print]
        True
    """
    return [f for name in FORWARD_HOOKS for f in getattr(module, name, {}).values() if not is_internal(f)]
