"""The absolute terms a relativizing edit subtracts from a head's logits (methodology §11).

For one layer's structure (query window "all": rows 1 ≤ i < T), joint least
squares over every visible pair fits

    s_ij ≈ g(i − j) + β·[j = 0] + h(i) + A[c(i), b(i − j)] + κ[c(i)]·[j = 0]

with g, β and h as in :mod:`poslens.fit.counterfactual` (the relative part, the
sink and the row shifts), one absolute term A per (query bin, offset bin) cell
and one key-0 term κ per query bin. Cells whose pairs are all key-0 pairs (row i
of an exact query bin with i in an exact offset bin) get no A: κ carries them, so
the columns of (A, κ) are linearly independent. Their span meets that of (g, β,
h) (a query bin's cells add up to its rows' h, an offset bin's to its g), so the
least-squares (A, κ) is not unique; of all of them this module takes the one whose
edit E_ij = A + κ·[j = 0] has the smallest sum of squares over one sequence's
pairs. Refitting g, β, h, A and κ to the edited mean logits s − E then gives
A = κ = 0: E is the fixed point of subtract-and-refit, found in one solve.

The solve works on sums alone: with Z the pair-level design of (A, κ) and P the
least-squares projection on (g, β, h) (:func:`poslens.fit.counterfactual.fit_logits`),
(A, κ) solves Zᵀ(I − P)Z x = Zᵀ(I − P)s. That matrix depends only on the
structure, so it is built once per structure (:func:`edit_solver`) from the
structural sums of each column and every head is solved with it.

All arrays are float64 numpy; nothing here touches torch or a model.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from jaxtyping import Float

from poslens.fit.counterfactual import fit_logits
from poslens.fit.mask_structure import MaskStructure, structural_cells, structural_sums

MODES = ("all", "key0", "all-but-key0")
"""What a relativizing edit subtracts: A and κ (``all``), κ only (``key0``) or A only (``all-but-key0``)."""

NULL_EIGENVALUE = 1e-9
"""An eigenvalue of Zᵀ(I − P)Z below this fraction of the largest is a null direction (the measured gap is 1e-16 to 3e-5 at T ≤ 2048)."""


@dataclass(frozen=True)
class AbsoluteTerms:
    """The absolute terms of a stack of heads: A per cell and κ per query bin.

    Attributes:
        cells: A[c, b], [..., C, B] (0 in empty cells and in cells made only of key-0 pairs).
        key0: κ[c], [..., C] (0 in query bins without a visible key 0).

    Example:
        >>> t = AbsoluteTerms(np.ones((2, 3)), np.full(2, 0.5))
        >>> t.for_mode("key0").cells.sum(), t.for_mode("all-but-key0").key0.sum()
        (np.float64(0.0), np.float64(0.0))
    """

    cells: Float[np.ndarray, "*heads qbins obins"]
    key0: Float[np.ndarray, "*heads qbins"]

    def for_mode(self, mode: str) -> AbsoluteTerms:
        """The terms an edit in ``mode`` subtracts: both (``all``), κ only (``key0``) or A only (``all-but-key0``).

        Args:
            mode: One of :data:`MODES`.

        Returns:
            The terms with the unused part set to zero.

        Raises:
            ValueError: When ``mode`` is not one of :data:`MODES`.

        Example:
            >>> AbsoluteTerms(np.ones((1, 1)), np.ones(1)).for_mode("all").key0.tolist()
            [1.0]
        """
        check_mode(mode)
        cells = self.cells if mode in ("all", "all-but-key0") else np.zeros_like(self.cells)
        key0 = self.key0 if mode in ("all", "key0") else np.zeros_like(self.key0)
        return AbsoluteTerms(cells, key0)


def check_mode(mode: str) -> str:
    """Return ``mode`` if it is one of :data:`MODES`, else raise a ``ValueError`` naming them.

    Args:
        mode: The mode asked for.

    Returns:
        ``mode``.

    Raises:
        ValueError: When ``mode`` is unknown.

    Example:
        >>> check_mode("key0")
        'key0'
    """
    if mode not in MODES:
        raise ValueError(f"unknown relativization mode {mode!r}; choose one of: {', '.join(MODES)}")
    return mode


@dataclass(frozen=True, eq=False)
class EditSolver:
    """The structure's columns of (A, κ) and the linear map from a head's sums to its terms.

    Attributes:
        structure: The structure of the layer and query window.
        cell_columns: Flat cell indices c·B + b that get an A, [K_A].
        key0_columns: Query bins that get a κ, [K_κ].
        column_sums: Each column's structural sums over one sequence:
            ``(row, key0, offset, cells, key0 per query bin)``, each [K, ...].
        to_terms: [K, K]: x = to_terms @ Zᵀ(I − P)s.
        gram: Zᵀ Z over one sequence's pairs, [K, K].
        operator: Zᵀ(I − P)Z, [K, K].

    Example:
        >>> from poslens.fit.binning import Binning
        >>> from poslens.fit.mask_structure import structure
        >>> solver = edit_solver(structure(Binning(8), rows=8, sliding_window=None))
        >>> len(solver.cell_columns), len(solver.key0_columns)   # exact bins: 35 one-pair cells, 7 of them key 0's
        (28, 7)
    """

    structure: MaskStructure
    cell_columns: np.ndarray
    key0_columns: np.ndarray
    column_sums: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]
    to_terms: np.ndarray
    gram: np.ndarray
    operator: np.ndarray

    def projected(
        self, row_sums: np.ndarray, key0_sums: np.ndarray, offset_sums: np.ndarray, cell_sums: np.ndarray, key0_bin_sums: np.ndarray
    ) -> np.ndarray:
        """Zᵀ(I − P)y of a field y given by its sums over one sequence's pairs, [..., K].

        Args:
            row_sums: Σ_j y_ij per row, [..., rows].
            key0_sums: y_i0 per row (0 where key 0 is hidden), [..., rows].
            offset_sums: Σ_i y_{i,i−Δ} per offset, [..., D].
            cell_sums: Σ of y over each cell's pairs, [..., C·B].
            key0_bin_sums: Σ of y over each query bin's key-0 pairs, [..., C].

        Returns:
            The (A, κ) columns' inner products with the part of y that (g, β, h) do not fit, [..., K].

        Example:
            >>> from poslens.fit.binning import Binning
            >>> from poslens.fit.mask_structure import structure
            >>> solver = edit_solver(structure(Binning(8), rows=8, sliding_window=None))
            >>> bool(np.allclose(solver.projected(*solver.column_sums), solver.operator))   # Zᵀ(I − P)Z
            True
        """
        st = self.structure
        fit = fit_logits(st, row_sums, key0_sums, offset_sums, 1.0)
        fitted_cells = fit._fitted_cells(with_rows=True)
        at_key0 = _at_rows(fit.g, st) + fit.beta[..., None] + fit.h  # pair (i, 0) has offset i
        fitted_key0_bins = _by_query_bin(st, at_key0 * st.key0)
        residual_cells = cell_sums - fitted_cells
        residual_key0 = key0_bin_sums - fitted_key0_bins
        return np.concatenate([residual_cells[..., self.cell_columns], residual_key0[..., self.key0_columns]], axis=-1)

    def terms(self, row_sums: np.ndarray, key0_sums: np.ndarray, offset_sums: np.ndarray, cell_sums: np.ndarray, n_seqs: float) -> AbsoluteTerms:
        """The minimum-norm least-squares A and κ of heads whose logits have these sums over ``n_seqs`` sequences.

        Args:
            row_sums: Σ_j s_ij per row, [..., rows].
            key0_sums: s_i0 per row (0 where key 0 is hidden), [..., rows].
            offset_sums: Σ_i s_{i,i−Δ} per offset, [..., D].
            cell_sums: Σ of s over each cell's pairs, [..., C·B].
            n_seqs: Number of sequences the sums are over.

        Returns:
            A [..., C, B] and κ [..., C].

        Example:
            >>> from poslens.fit.binning import Binning
            >>> from poslens.fit.mask_structure import structure
            >>> st = structure(Binning(8), rows=8, sliding_window=None)
            >>> i, j = np.meshgrid(np.arange(8), np.arange(8), indexing="ij")
            >>> relative = -0.3 * (i - j) + 2.0 * (j == 0)   # relative logits and a constant sink
            >>> t = edit_solver(st).terms(*dense_sums(st, relative), 1.0)
            >>> float(np.abs(t.cells).max()) < 1e-9, float(np.abs(t.key0).max()) < 1e-9
            (True, True)
        """
        st = self.structure
        key0_bin_sums = _by_query_bin(st, key0_sums[..., : st.rows] * st.key0)
        rhs = self.projected(row_sums[..., : st.rows], key0_sums[..., : st.rows], offset_sums[..., : st.n_offsets], cell_sums, key0_bin_sums) / n_seqs
        x = rhs @ self.to_terms.T
        return self.unpack(x)

    def unpack(self, x: np.ndarray) -> AbsoluteTerms:
        """Split column coefficients [..., K] into A [..., C, B] and κ [..., C].

        Args:
            x: Coefficients of the (A, κ) columns, [..., K].

        Returns:
            The terms, zero where no column is.

        Example:
            >>> from poslens.fit.binning import Binning
            >>> from poslens.fit.mask_structure import structure
            >>> solver = edit_solver(structure(Binning(8), rows=8, sliding_window=None))
            >>> t = solver.unpack(np.ones(35))
            >>> float(t.cells.sum()), float(t.key0.sum())
            (28.0, 7.0)
        """
        st = self.structure
        n_q = len(st.pair_cells) // st.n_offset_bins
        k_a = len(self.cell_columns)
        cells = np.zeros((*x.shape[:-1], n_q * st.n_offset_bins))
        cells[..., self.cell_columns] = x[..., :k_a]
        key0 = np.zeros((*x.shape[:-1], n_q))
        key0[..., self.key0_columns] = x[..., k_a:]
        return AbsoluteTerms(cells.reshape(*x.shape[:-1], n_q, st.n_offset_bins), key0)


def _at_rows(values: np.ndarray, st: MaskStructure) -> np.ndarray:
    """values[..., i] for rows i < D, 0 beyond (key 0 is hidden there anyway)."""
    out = np.zeros((*values.shape[:-1], st.rows))
    n = min(st.rows, st.n_offsets)
    out[..., :n] = values[..., :n]
    return out


def _by_query_bin(st: MaskStructure, per_row: np.ndarray) -> np.ndarray:
    """Sum a per-row array [..., rows] over each query bin: [..., C]."""
    n_q = len(st.pair_cells) // st.n_offset_bins
    out = np.zeros((*per_row.shape[:-1], n_q))
    for c in range(n_q):
        rows = st.query_bin[: st.rows] == c
        if rows.any():
            out[..., c] = per_row[..., rows].sum(-1)
    return out


def _column_sums(
    st: MaskStructure, cell_columns: np.ndarray, key0_columns: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The structural sums, over one sequence, of each (A, κ) column's 0/1 field."""
    n_b = st.n_offset_bins
    n_q = len(st.pair_cells) // n_b
    rows = np.arange(st.rows)
    k0_rows = np.nonzero(st.key0)[0]
    k0_cell = st.query_bin[k0_rows] * n_b + st.offset_bin[k0_rows]  # the cell of pair (i, 0)
    to_cells = st.to_cells.toarray()
    offsets_to_cells = st.offsets_to_cells.toarray()
    row_a = to_cells[cell_columns]
    key0_a = np.zeros((len(cell_columns), st.rows))
    for k, cb in enumerate(cell_columns):
        key0_a[k, k0_rows[k0_cell == cb]] = 1.0
    offset_a = offsets_to_cells[cell_columns]
    cells_a = np.zeros((len(cell_columns), n_q * n_b))
    cells_a[np.arange(len(cell_columns)), cell_columns] = st.pair_cells[cell_columns]
    bins_a = np.zeros((len(cell_columns), n_q))
    bins_a[np.arange(len(cell_columns)), cell_columns // n_b] = st.key0_cells[cell_columns]

    in_bin = (st.query_bin[: st.rows][None, :] == key0_columns[:, None]) & (st.key0[None, :] > 0)  # [K_κ, rows]
    row_k = in_bin.astype(np.float64)
    offset_k = np.zeros((len(key0_columns), st.n_offsets))
    offset_k[:, : min(st.rows, st.n_offsets)] = row_k[:, : min(st.rows, st.n_offsets)]  # pair (i, 0) has offset i
    cells_k = np.zeros((len(key0_columns), n_q * n_b))
    for k in range(len(key0_columns)):
        np.add.at(cells_k[k], k0_cell[in_bin[k, k0_rows]], 1.0)
    bins_k = np.zeros((len(key0_columns), n_q))
    bins_k[np.arange(len(key0_columns)), key0_columns] = row_k.sum(-1)
    del rows
    return (
        np.concatenate((row_a, row_k)),
        np.concatenate((key0_a, row_k)),
        np.concatenate((offset_a, offset_k)),
        np.concatenate((cells_a, cells_k)),
        np.concatenate((bins_a, bins_k)),
    )


def edit_solver(st: MaskStructure) -> EditSolver:
    """Build the (A, κ) columns of a structure and the map from a head's sums to its minimum-norm terms.

    The structure must be the query window "all" of its layer. Costs O(K · rows) for the columns' sums and
    O(K³) for the solve, K = the number of columns (a few hundred at T = 1024).

    Args:
        st: The structure of the layer in query window "all" (:func:`poslens.fit.mask_structure.structure`).

    Returns:
        The solver every head of the structure uses.

    Example:
        >>> from poslens.fit.binning import Binning
        >>> from poslens.fit.mask_structure import structure
        >>> solver = edit_solver(structure(Binning(32), rows=32, sliding_window=8))
        >>> solver.operator.shape == solver.gram.shape == solver.to_terms.shape
        True
    """
    n_b = st.n_offset_bins
    n_q = len(st.pair_cells) // n_b
    mixed = (st.pair_cells > 0) & (st.pair_cells > st.key0_cells)
    cell_columns = np.nonzero(mixed)[0]
    key0_per_bin = _by_query_bin(st, st.key0)
    key0_columns = np.nonzero(key0_per_bin > 0)[0]
    sums = _column_sums(st, cell_columns, key0_columns)
    partial = EditSolver(st, cell_columns, key0_columns, sums, np.zeros((0, 0)), np.zeros((0, 0)), np.zeros((0, 0)))
    operator = partial.projected(*sums)
    operator = 0.5 * (operator + operator.T)
    # Zᵀ Z: A columns are disjoint cells; a κ column overlaps the cells holding its key-0 pairs
    cells_part, bins_part = sums[3], sums[4]
    gram = np.concatenate([cells_part[:, cell_columns], bins_part[:, key0_columns]], axis=1)
    gram = 0.5 * (gram + gram.T)
    values, vectors = np.linalg.eigh(operator)
    null = values < NULL_EIGENVALUE * max(values.max(), 1e-300)
    kept = vectors[:, ~null]
    pseudo_inverse = (kept / values[~null]) @ kept.T
    n = vectors[:, null]
    if n.shape[1]:
        # move the least-squares solution along the null directions to the smallest xᵀ G x (pair-weighted ‖E‖²)
        correction = n @ np.linalg.solve(n.T @ gram @ n, n.T @ gram)
        to_terms = (np.eye(len(values)) - correction) @ pseudo_inverse
    else:
        to_terms = pseudo_inverse
    del n_q
    return EditSolver(st, cell_columns, key0_columns, sums, to_terms, gram, operator)


def dense_sums(st: MaskStructure, logits: Float[np.ndarray, "*heads query key"]) -> tuple[np.ndarray, ...]:
    """Row, key-0, offset and cell sums of one sequence's dense logits [..., T, T] over the structure's pairs.

    A small dense helper for examples and checks; a calibration forward computes the same sums from its scores.

    Args:
        st: The structure of the layer and query window.
        logits: One sequence's logits, [..., T, T].

    Returns:
        ``(row_sums, key0_sums, offset_sums, cell_sums)``, as :meth:`EditSolver.terms` takes them.

    Example:
        >>> from poslens.fit.binning import Binning
        >>> from poslens.fit.mask_structure import structure
        >>> st = structure(Binning(4), rows=4, sliding_window=None)
        >>> [x.shape for x in dense_sums(st, np.ones((4, 4)))]
        [(4,), (4,), (4,), (16,)]
    """
    return (*structural_sums(st, logits), structural_cells(st, logits))


def edit_values(st: MaskStructure, terms: AbsoluteTerms) -> Float[np.ndarray, "*heads query key"]:
    """The edit E_ij = A[c(i), b(i − j)] + κ[c(i)]·[j = 0] on the visible pairs of rows i ≥ 1, 0 elsewhere: [..., T, T].

    Args:
        st: The structure of the layer in query window "all" (rows = T).
        terms: The terms to subtract (already restricted to a mode, :meth:`AbsoluteTerms.for_mode`).

    Returns:
        E, [..., T, T].

    Example:
        >>> from poslens.fit.binning import Binning
        >>> from poslens.fit.mask_structure import structure
        >>> st = structure(Binning(4), rows=4, sliding_window=None)
        >>> e = edit_values(st, AbsoluteTerms(np.zeros((4, 4)), np.ones(4)))
        >>> e[:, 0].tolist(), float(e.sum())   # κ on key 0 of rows 1..3 only
        ([0.0, 1.0, 1.0, 1.0], 3.0)
    """
    t = st.rows
    i, j = np.meshgrid(np.arange(t), np.arange(t), indexing="ij")
    delta = i - j
    visible = (delta >= 0) & (delta < st.n_offsets) & (i >= 1)
    qbin = st.query_bin[:t][:, None] + 0 * j
    obin = st.offset_bin[np.clip(delta, 0, st.n_offsets - 1)]
    e = terms.cells[..., qbin, obin] + terms.key0[..., qbin] * (j == 0)
    return np.where(visible, e, 0.0)
