"""Progress bars: tqdm's widget in Jupyter, plain text elsewhere, and never tqdm's ``IProgress not found`` warning.

:func:`progress_bar` is tqdm's ``tqdm.auto`` bar (a widget in a Jupyter kernel,
text in a terminal) when ipywidgets is installed (``pip install "poslens[notebook]"``).
Without ipywidgets, ``tqdm.auto`` would warn ``TqdmWarning: IProgress not found``
in a notebook; poslens then uses tqdm's text bar, silently. A text bar in a
notebook kernel redraws at most every :data:`NOTEBOOK_TEXT_INTERVAL` seconds:
each redraw there is a separate stderr output that a saved notebook keeps.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any

#: Seconds between redraws of a text bar in a notebook kernel (tqdm's default, 0.1 s, fills a saved notebook with outputs).
NOTEBOOK_TEXT_INTERVAL = 30.0


def has_ipywidgets() -> bool:
    """Whether ipywidgets can be imported (what tqdm's notebook widget needs).

    Returns:
        True if ``import ipywidgets`` succeeds.

    Example:
        >>> isinstance(has_ipywidgets(), bool)
        True
    """
    try:
        import ipywidgets  # noqa: F401
    except ImportError:
        return False
    return True


def in_notebook_kernel() -> bool:
    """Whether this code runs in a Jupyter kernel (where tqdm.auto would draw a widget).

    Returns:
        True inside an IPython kernel (Jupyter, nbclient), False in a terminal, a script or plain IPython.

    Example:
        >>> in_notebook_kernel()   # a doctest runs outside any kernel
        False
    """
    shell_module = sys.modules.get("IPython")
    if shell_module is None:
        return False
    shell = shell_module.get_ipython()
    return shell is not None and "IPKernelApp" in getattr(shell, "config", {})


def bar_class() -> type:
    """The tqdm class poslens draws with: ``tqdm.auto.tqdm`` with ipywidgets, else ``tqdm.std.tqdm``.

    Returns:
        A tqdm class.

    Example:
        >>> bar_class().__module__ in ("tqdm.std", "tqdm.asyncio", "tqdm.notebook")
        True
    """
    if has_ipywidgets():
        from tqdm.auto import tqdm
    else:  # tqdm.auto would warn "IProgress not found" in a notebook, then fall back to this very class
        from tqdm.std import tqdm
    return tqdm


def progress_bar(iterable: Iterable[Any], **options: Any) -> Any:
    """Wrap ``iterable`` in a progress bar of :func:`bar_class`; ``options`` go to tqdm (``desc``, ``total``, ``disable``, ...).

    In a notebook kernel without ipywidgets, the text bar redraws at most
    every :data:`NOTEBOOK_TEXT_INTERVAL` seconds (unless ``mininterval`` is given).

    Args:
        iterable: what to iterate over.
        **options: tqdm's keyword arguments.

    Returns:
        The tqdm bar, iterable like ``iterable``.

    Example:
        >>> sum(progress_bar(range(4), desc="adding", disable=True))
        6
    """
    tqdm = bar_class()
    if tqdm.__module__ == "tqdm.std" and in_notebook_kernel():
        options.setdefault("mininterval", NOTEBOOK_TEXT_INTERVAL)
    return tqdm(iterable, **options)


def _quiet_tqdm_auto() -> None:
    """In a notebook kernel without ipywidgets, import ``tqdm.auto`` once with its ``IProgress not found`` warning silenced.

    tqdm.auto picks its class (and warns) when first imported; importing it
    here, silently, leaves it cached for the libraries poslens calls
    (transformers, huggingface_hub), which then draw text bars without the warning.
    """
    if "tqdm.auto" in sys.modules or not in_notebook_kernel() or has_ipywidgets():
        return
    import warnings

    from tqdm.std import TqdmWarning

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="IProgress not found", category=TqdmWarning)
        import tqdm.auto  # noqa: F401


_quiet_tqdm_auto()
