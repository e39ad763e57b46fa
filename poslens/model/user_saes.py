"""The SAEs attached to the user's model: SAELens's ``HookedSAETransformer`` with ``add_sae``.

An attached SAE changes what the model computes from its hook point on, so a result records each one
(:func:`attached_saes`: hook point, width ``d_sae``, input width, class, whether it adds its error term,
and the sha256 of its weights), and the model's label names them (:func:`label_with_saes`), so that a
result with an SAE is never taken for the bare model's. Both are read at measurement time: SAEs
attached or removed after :func:`poslens.load_model` count as they are when ``measure`` runs.
SAELens need not be installed: a model without ``acts_to_saes`` has none.

Example:
    >>> label_with_saes("custom (in memory)", [{"hook_point": "blocks.1.hook_resid_pre"}])
    'custom (in memory) with SAE at blocks.1.hook_resid_pre'
"""

from __future__ import annotations

from typing import Any

from poslens.model.weights_hash import state_dict_sha256


def attached_saes(model: Any) -> list[dict[str, Any]]:
    """The SAEs attached to ``model`` now (SAELens's ``acts_to_saes``), one record each, by hook point.

    Args:
        model: the user's model object (a ``HookedSAETransformer``; any other model has none).

    Returns:
        Records with ``hook_point``, ``d_sae``, ``d_in``, ``sae_class``, ``use_error_term`` and ``sha256``
        (of the SAE's weights, as :func:`~poslens.model.weights_hash.state_dict_sha256` takes it).

    Example:
        >>> import torch
        >>> attached_saes(torch.nn.Linear(2, 2))   # no acts_to_saes: no SAE
        []
    """
    saes = getattr(model, "acts_to_saes", None)
    if not isinstance(saes, dict):
        return []
    records = []
    for hook_point, sae in sorted(saes.items()):
        cfg = getattr(sae, "cfg", None)
        d_sae, d_in = getattr(cfg, "d_sae", None), getattr(cfg, "d_in", None)
        records.append(
            {
                "hook_point": str(hook_point),
                "d_sae": int(d_sae) if d_sae is not None else None,
                "d_in": int(d_in) if d_in is not None else None,
                "sae_class": type(sae).__name__,
                "use_error_term": bool(getattr(sae, "use_error_term", False)),
                "sha256": state_dict_sha256(sae),
            }
        )
    return records


def label_with_saes(name: str, saes: list[dict[str, Any]]) -> str:
    """The model's label with its attached SAEs named: ``"<name> with SAE at <hook point>"``.

    Args:
        name: the model's name.
        saes: the records of :func:`attached_saes`.

    Returns:
        ``name`` when no SAE is attached; else the name and every hook point.

    Example:
        >>> label_with_saes("m", []), label_with_saes("m", [{"hook_point": "a"}, {"hook_point": "b"}])
        ('m', 'm with SAEs at a, b')
    """
    if not saes:
        return name
    points = ", ".join(str(record["hook_point"]) for record in saes)
    return f"{name} with SAE{'s' if len(saes) > 1 else ''} at {points}"
