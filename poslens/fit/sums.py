"""Per-group sufficient statistics: the only thing a measurement keeps of the forward pass.

Every array has the group axis first and is a plain float64 sum over
(sequence, query, key) pairs, so sums from batches, groups and processes add.
Cells are indexed ``[query_bin, offset_bin]``. Shapes (G groups, L layers,
H heads, C query bins, B offset bins, F = 4 row features, W = 2 windows,
D = 4H + 1 probe features):

========== ================== =====================================================
name       shape              sum over pairs (or rows) of
========== ================== =====================================================
n          G, L, C, B         1 (pair count; structural)
c1         G, L, C, B         count term c_i = log|V_i|
s1         G, L, H, C, B      logit s_ij
z1         G, L, H, C, B      log Z_i
nq         G, L, C            1, per query bin
c2         G, L, C            c_i²
s2         G, L, H, C         s_ij²
z2         G, L, H, C         (log Z_i)²
sz         G, L, H, C         s_ij · log Z_i
si, sj     G, L, H, C         s_ij · i,  s_ij · j
i1, j1     G, L, C            i, j
ii, jj, ij G, L, C            i², j², i·j
rows       G, C               1 per query row (not per pair)
feat       G, L, H, F, C      row features a_i0, entropy, a_ii, max_j a_ij
xtx        G, L, W, D, D      probe design [1, features of all heads]ᵀ[…]
xty, y1    G, L, W, D / —     probe targets log(i+1)
yy, pn     G, L, W            Σ y², row count
nseq       G                  1 per sequence
srow       G, L, H, T         Σ_{j∈V_i} s_ij per exact row i (METHOD §4.3)
skey0      G, L, H, T         s_i0 per exact row (0 where key 0 is not visible)
soff_all   G, L, H, T         s_{i,i−Δ} per exact offset Δ, rows 1 ≤ i < T
soff_early G, L, H, Q         the same over the early rows 1 ≤ i < Q (Q capped at T)
cf_all     G, L, H, C, B      log a'_ij(n) of the per-sequence counterfactual, all-window fit
cf_early   G, L, H, C, B      the same for the early window's own fit (cells outside it: 0)
cf_*_rep   G, L, H, C, B      row g: the jackknife replicate without group g, whole
========== ================== =====================================================

The ``cf_*`` sums come from the second pass (:mod:`poslens.capture.counterfactual_capture`):
each group's counterfactual uses the fit on the other groups (cross-fitting).
Replicates refit that fit too, so they are not the sum over the other groups:
:meth:`CellSums.leave_out` takes them from ``cf_*_rep``, and :meth:`CellSums.pooled`
and :meth:`CellSums.group` leave the ``_rep`` arrays out.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from poslens.fit.binning import Binning

FEATURES = ("key0_mass", "entropy", "self_mass", "max_mass")
REPLICATE = "_rep"  # suffix of arrays that hold whole jackknife replicates, not per-group sums
WINDOWS = ("early", "all")


def array_shapes(groups: int, layers: int, heads: int, binning: Binning) -> dict[str, tuple[int, ...]]:
    """The shape of every statistic in the table above.

    Example:
        >>> array_shapes(2, 3, 4, Binning(32))["s1"]   # groups, layers, heads, query bins, offset bins
        (2, 3, 4, 19, 19)
    """
    g, l, h, t = groups, layers, heads, binning.seq_len
    c, b, f, w, d = binning.n_query_bins, binning.n_offset_bins, len(FEATURES), len(WINDOWS), len(FEATURES) * heads + 1
    q = min(binning.early, t)
    return {
        "n": (g, l, c, b), "c1": (g, l, c, b),
        "s1": (g, l, h, c, b), "z1": (g, l, h, c, b),
        "nq": (g, l, c), "c2": (g, l, c),
        "s2": (g, l, h, c), "z2": (g, l, h, c), "sz": (g, l, h, c), "si": (g, l, h, c), "sj": (g, l, h, c),
        "i1": (g, l, c), "j1": (g, l, c), "ii": (g, l, c), "jj": (g, l, c), "ij": (g, l, c),
        "rows": (g, c),
        "feat": (g, l, h, f, c),
        "xtx": (g, l, w, d, d), "xty": (g, l, w, d), "y1": (g, l, w), "yy": (g, l, w), "pn": (g, l, w),
        "nseq": (g,),
        "srow": (g, l, h, t), "skey0": (g, l, h, t), "soff_all": (g, l, h, t), "soff_early": (g, l, h, q),
        "cf_all": (g, l, h, c, b), "cf_early": (g, l, h, c, b),
        "cf_all_rep": (g, l, h, c, b), "cf_early_rep": (g, l, h, c, b),
    }


def empty_arrays(groups: int, layers: int, heads: int, binning: Binning) -> dict[str, np.ndarray]:
    """Zeroed arrays for every statistic in the table above.

    Example:
        >>> a = empty_arrays(2, 3, 4, Binning(32))
        >>> a["s1"].shape   # groups, layers, heads, query bins, offset bins
        (2, 3, 4, 19, 19)
    """
    return {name: np.zeros(shape, dtype=np.float64) for name, shape in array_shapes(groups, layers, heads, binning).items()}


def sums_bytes(groups: int, layers: int, heads: int, binning: Binning) -> int:
    """Bytes that :meth:`CellSums.zeros` allocates for these sizes, without allocating them.

    The accumulators live for the whole capture run; at the default 8 groups
    they are tens of MiB for a 30-layer model (see :mod:`poslens.runtime.memory`).

    Example:
        >>> s = CellSums.zeros(groups=2, layers=3, heads=4, binning=Binning(32))
        >>> held = [*s.arrays.values(), s.row_features, s.row_count, s.group_sizes]
        >>> sums_bytes(2, 3, 4, Binning(32)) == sum(a.nbytes for a in held)
        True
    """
    elements = sum(int(np.prod(shape)) for shape in array_shapes(groups, layers, heads, binning).values())
    elements += layers * heads * len(FEATURES) * binning.seq_len + binning.seq_len + groups  # row_features, row_count, group_sizes
    return 8 * elements


def counterfactual_bytes(groups: int, layers: int, heads: int, binning: Binning) -> int:
    """Bytes the second pass holds besides the sums: per window, the cross-fitted residuals A
    (per group, per variant of the current group, and as exp(−A) weights, each [G, L, H, C·B]),
    and Σ log Z' per group, variant, layer, head and row.

    Example:
        >>> counterfactual_bytes(2, 3, 4, Binning(32)) > 0
        True
    """
    cells = binning.n_query_bins * binning.n_offset_bins
    rows = binning.seq_len + min(binning.early, binning.seq_len)
    return 8 * (len(WINDOWS) * 3 * groups * layers * heads * cells + groups * groups * layers * heads * rows)


@dataclass
class CellSums:
    """Grouped sums of one measurement, with what is needed to fit them.

    ``row_features`` [L, H, F, T] holds per-query sums over all sequences (for
    curves); ``row_count`` [T] the number of sequences that contributed;
    ``layer_windows`` the sliding window of each layer (None: full causal), which
    the counterfactual fit of METHOD §4.1 needs.

    Example:
        >>> sums = CellSums.zeros(groups=2, layers=1, heads=1, binning=Binning(16))
        >>> sums.pooled()["s1"].shape
        (1, 1, 16, 16)
    """

    binning: Binning
    arrays: dict[str, np.ndarray]
    row_features: np.ndarray
    row_count: np.ndarray
    group_sizes: np.ndarray = field(default_factory=lambda: np.zeros(0))
    layer_windows: tuple[int | None, ...] = ()

    @classmethod
    def zeros(
        cls, groups: int, layers: int, heads: int, binning: Binning, layer_windows: tuple[int | None, ...] | None = None
    ) -> "CellSums":
        """Empty sums (all zeros) for ``groups`` groups of a model with ``layers`` × ``heads``.

        Example:
            >>> s = CellSums.zeros(groups=3, layers=2, heads=4, binning=Binning(16))
            >>> s.arrays["s1"].shape, s.row_features.shape   # [G, L, H, C, B] and [L, H, F, T]
            ((3, 2, 4, 16, 16), (2, 4, 4, 16))
        """
        return cls(
            binning=binning,
            arrays=empty_arrays(groups, layers, heads, binning),
            row_features=np.zeros((layers, heads, len(FEATURES), binning.seq_len)),
            row_count=np.zeros(binning.seq_len),
            group_sizes=np.zeros(groups),
            layer_windows=tuple(layer_windows) if layer_windows is not None else (None,) * layers,
        )

    @property
    def n_groups(self) -> int:
        """Number of groups G (the jackknife's units).

        Example:
            >>> CellSums.zeros(groups=3, layers=2, heads=4, binning=Binning(16)).n_groups
            3
        """
        return int(self.arrays["n"].shape[0])

    @property
    def n_layers(self) -> int:
        """Number of layers L.

        Example:
            >>> CellSums.zeros(groups=3, layers=2, heads=4, binning=Binning(16)).n_layers
            2
        """
        return int(self.arrays["n"].shape[1])

    @property
    def n_heads(self) -> int:
        """Number of attention heads H per layer.

        Example:
            >>> CellSums.zeros(groups=3, layers=2, heads=4, binning=Binning(16)).n_heads
            4
        """
        return int(self.arrays["s1"].shape[2])

    def pooled(self) -> dict[str, np.ndarray]:
        """Sums over all groups (the group axis removed).

        Example:
            >>> s = CellSums.zeros(groups=3, layers=1, heads=1, binning=Binning(16))
            >>> s.arrays["n"][:, 0, 0, 0] = [1.0, 2.0, 3.0]   # pairs in cell (0, 0) of each group
            >>> float(s.pooled()["n"][0, 0, 0]), s.pooled()["n"].shape
            (6.0, (1, 16, 16))
        """
        return {k: v.sum(axis=0) for k, v in self.arrays.items() if not k.endswith(REPLICATE)}

    def leave_out(self, group: int) -> dict[str, np.ndarray]:
        """Sums over all groups but ``group`` (a jackknife replicate).

        Example:
            >>> s = CellSums.zeros(groups=3, layers=1, heads=1, binning=Binning(16))
            >>> s.arrays["n"][:, 0, 0, 0] = [1.0, 2.0, 3.0]
            >>> float(s.leave_out(1)["n"][0, 0, 0])   # 1 + 3
            4.0
        """
        out = {k: v.sum(axis=0) - v[group] for k, v in self.arrays.items() if not k.endswith(REPLICATE)}
        out.update({k[: -len(REPLICATE)]: v[group] for k, v in self.arrays.items() if k.endswith(REPLICATE)})
        return out

    def leave_out_groups(self, groups: set[int]) -> dict[str, np.ndarray]:
        """Sums over all groups but those in ``groups`` (per-group arrays only; no replicate arrays).

        Example:
            >>> s = CellSums.zeros(groups=3, layers=1, heads=1, binning=Binning(16))
            >>> s.arrays["n"][:, 0, 0, 0] = [1.0, 2.0, 3.0]
            >>> float(s.leave_out_groups({0, 2})["n"][0, 0, 0])
            2.0
        """
        keep = [g for g in range(self.n_groups) if g not in groups]
        return {k: v[keep].sum(axis=0) for k, v in self.arrays.items() if not k.endswith(REPLICATE)}

    def group(self, group: int) -> dict[str, np.ndarray]:
        """Sums of one group.

        Example:
            >>> s = CellSums.zeros(groups=3, layers=1, heads=1, binning=Binning(16))
            >>> s.arrays["n"][:, 0, 0, 0] = [1.0, 2.0, 3.0]
            >>> float(s.group(2)["n"][0, 0, 0]), s.group(2)["n"].shape
            (3.0, (1, 16, 16))
        """
        return {k: v[group] for k, v in self.arrays.items() if not k.endswith(REPLICATE)}

    def __add__(self, other: "CellSums") -> "CellSums":
        if self.binning != other.binning or self.arrays["s1"].shape != other.arrays["s1"].shape:
            raise ValueError("cannot add sums of different shapes or binnings")
        if self.layer_windows != other.layer_windows:
            raise ValueError(f"cannot add sums of layers with different windows: {self.layer_windows} vs {other.layer_windows}")
        return CellSums(
            self.binning,
            {k: v + other.arrays[k] for k, v in self.arrays.items()},
            self.row_features + other.row_features,
            self.row_count + other.row_count,
            self.group_sizes + other.group_sizes,
            self.layer_windows,
        )

    def save(self, path: str | Path) -> None:
        """Write the sums to a ``.npz`` file (reload with :meth:`load`).

        Example:
            >>> import tempfile, pathlib; path = pathlib.Path(tempfile.mkdtemp()) / "sums.npz"
            >>> CellSums.zeros(groups=2, layers=1, heads=1, binning=Binning(16)).save(path)
            >>> path.exists()
            True
        """
        np.savez_compressed(
            path,
            seq_len=self.binning.seq_len,
            early=self.binning.early,
            row_features=self.row_features,
            row_count=self.row_count,
            group_sizes=self.group_sizes,
            layer_windows=np.array([-1 if w is None else w for w in self.layer_windows], dtype=np.int64),
            **{f"a_{k}": v for k, v in self.arrays.items()},
        )

    @classmethod
    def load(cls, path: str | Path) -> "CellSums":
        """Read sums written by :meth:`save`.

        Example:
            >>> import tempfile, pathlib; path = pathlib.Path(tempfile.mkdtemp()) / "sums.npz"
            >>> CellSums.zeros(groups=2, layers=1, heads=1, binning=Binning(16, early=8)).save(path)
            >>> back = CellSums.load(path)
            >>> back.binning == Binning(16, early=8), back.n_groups, back.arrays["s1"].shape
            (True, 2, (2, 1, 1, 16, 16))
        """
        with np.load(path) as data:
            binning = Binning(int(data["seq_len"]), early=int(data["early"]))
            arrays = {k[2:]: data[k] for k in data.files if k.startswith("a_")}
            windows = tuple(None if w < 0 else int(w) for w in data["layer_windows"]) if "layer_windows" in data.files else ()
            missing = set(array_shapes(1, 1, 1, binning)) - set(arrays)
            if missing:
                raise ValueError(f"{path}: sums written by an older poslens lack {sorted(missing)}; measure again")
            return cls(binning, arrays, data["row_features"], data["row_count"], data["group_sizes"], windows)
