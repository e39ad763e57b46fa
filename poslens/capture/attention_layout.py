"""What the capture reads of a model: its layer and head counts (:class:`HeadCounts`) and each layer's sliding window (:class:`AttentionLayout`).

A loaded :class:`~poslens.model.pos_model.PosModel` has these attributes; the
synthetic path (:func:`poslens.measurement.pipeline.measure_scores`, and the
docstring examples) passes a ``SimpleNamespace`` with them. Both protocols are
runtime-checkable, so the run-time type checks of the tests accept either.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable


@runtime_checkable
class HeadCounts(Protocol):
    """A model's layer and head counts: all the counterfactual replay reads of it.

    Example:
        >>> from types import SimpleNamespace
        >>> isinstance(SimpleNamespace(n_layers=2, n_heads=4), HeadCounts)
        True
    """

    @property
    def n_layers(self) -> int:
        """Number of layers.

        Returns:
            The layer count.

        Example:
            >>> from types import SimpleNamespace
            >>> SimpleNamespace(n_layers=2, n_heads=4, sliding_windows=[None, None]).n_layers
            2
        """
        ...

    @property
    def n_heads(self) -> int:
        """Number of attention heads per layer.

        Returns:
            The head count.

        Example:
            >>> from types import SimpleNamespace
            >>> SimpleNamespace(n_layers=2, n_heads=4, sliding_windows=[None, None]).n_heads
            4
        """
        ...


@runtime_checkable
class AttentionLayout(HeadCounts, Protocol):
    """The shape of a model's attention that the capture needs: ``n_layers``, ``n_heads`` and ``sliding_windows``.

    ``sliding_windows[l]`` is layer l's sliding window (``None``: full causal attention); the
    attribute keeps the name :class:`~poslens.model.pos_model.PosModel` gives it.

    Example:
        >>> from types import SimpleNamespace
        >>> layout: AttentionLayout = SimpleNamespace(n_layers=2, n_heads=4, sliding_windows=[None, 512])
        >>> layout.n_layers, layout.sliding_windows[1], isinstance(layout, AttentionLayout)
        (2, 512, True)
    """

    @property
    def sliding_windows(self) -> Sequence[int | None]:
        """Each layer's sliding window (``None``: full causal).

        Returns:
            One width or ``None`` per layer.

        Example:
            >>> from types import SimpleNamespace
            >>> SimpleNamespace(n_layers=2, n_heads=4, sliding_windows=[None, 512]).sliding_windows
            [None, 512]
        """
        ...
