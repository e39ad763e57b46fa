"""study: the parts (declared in :mod:`poslens.study.declarations`), the claims (:mod:`poslens.study.claims`), the report and the CLI.

The claims' modules moved into the :mod:`poslens.study.claims` subpackage; their old paths (``MOVED``) still
import, as the same module objects, with a ``DeprecationWarning`` that names the new path.

Example:
    >>> import warnings
    >>> with warnings.catch_warnings():
    ...     warnings.simplefilter("ignore", DeprecationWarning)
    ...     from poslens.study.rules import verdict
    >>> import poslens.study.claims.rules
    >>> verdict is poslens.study.claims.rules.verdict
    True
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings
from collections.abc import Sequence
from types import ModuleType

MOVED = {
    "poslens.study.claim_table": "poslens.study.claims.table",
    "poslens.study.rules": "poslens.study.claims.rules",
    "poslens.study.lookup": "poslens.study.claims.lookup",
    "poslens.study.verdict_summary": "poslens.study.claims.text",
    "poslens.study.claims_leakage": "poslens.study.claims.c1_leakage",
    "poslens.study.claims_path": "poslens.study.claims.c3_path",
    "poslens.study.claims_compare": "poslens.study.claims.c4_compare",
    "poslens.study.claims_zoo": "poslens.study.claims.c4_zoo",
    "poslens.study.claims_position0": "poslens.study.claims.c5_bos_swap",
    "poslens.study.claims_relativize": "poslens.study.claims.c7_relativize",
    "poslens.study.claims_split": "poslens.study.claims.c8_split",
}
"""Old module path → new, for the modules that moved into :mod:`poslens.study.claims` (C2 now lives in
:mod:`~poslens.study.claims.c2_mask` and C6 in :mod:`~poslens.study.claims.c6_fingerprint`; their old modules
re-export them)."""


class _MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports an old path of ``MOVED`` as the module at its new path (one module object, under both names)."""

    def find_spec(self, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        return importlib.util.spec_from_loader(fullname, self) if fullname in MOVED else None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        warnings.warn(f"{spec.name} moved to {MOVED[spec.name]}; import it from there", DeprecationWarning, stacklevel=2)
        module = importlib.import_module(MOVED[spec.name])
        self._specs[module.__name__] = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        module.__spec__ = self._specs[module.__name__]  # the import system has just set the old path's spec on it

    def __init__(self) -> None:
        self._specs: dict[str, importlib.machinery.ModuleSpec | None] = {}


if not any(isinstance(finder, _MovedModules) for finder in sys.meta_path):
    sys.meta_path.append(_MovedModules())
