"""The one host-side CSR builder: group entries by row, with row offsets.

Graph storage (:meth:`sparsegcn.CSR.from_graph`), the ELL and CSR layouts
and node-chunked propagation all need entries grouped by row (receiver)
and the offsets ``indptr`` where each row starts. They all call this
module, so the offsets' dtype rule and the ordering within a row are the
same everywhere.

Offsets are int32 while the entry count fits, int64 once ``E >= 2**31``
(device code then needs ``jax_enable_x64``).
"""

from __future__ import annotations

import numpy as np

from sparsegcn import _checks

__all__ = ["group_by_row", "indptr_from_sorted", "offset_dtype"]

_INT32_LIMIT = 2**31


def offset_dtype(num_entries: int) -> np.dtype:
    """int32 when ``num_entries < 2**31``, else int64: the dtype of offsets and entry ids."""
    return np.dtype(np.int64 if num_entries >= _INT32_LIMIT else np.int32)


def _row_counts(rows: np.ndarray, num_rows: int) -> np.ndarray:
    """``[num_rows]`` entries per row; bad ids are caught without an extra pass over ``rows``."""
    _checks.check_integer_array("rows", rows, ndim=1)
    try:
        counts = np.bincount(rows, minlength=num_rows)
    except ValueError:  # bincount refuses negative ids, without naming them
        _checks.check_ids_in_range("rows", rows, num_rows)
        raise
    if counts.shape[0] > num_rows:  # an id >= num_rows grew the counts
        _checks.check_ids_in_range("rows", rows, num_rows)
    return counts


def indptr_from_sorted(rows_sorted, num_rows: int, *, dtype=None) -> np.ndarray:
    """Row offsets of entries already grouped by row.

    ``indptr[r]:indptr[r + 1]`` is the slice of row ``r``'s entries. The
    offsets are the running sum of the row counts, so they describe the
    entries correctly only when ``rows_sorted`` is non-decreasing; that is
    not re-checked here (callers hold sorted edges by construction, such as
    a :class:`~sparsegcn.Graph` with ``edges_sorted=True``, verified when it
    was built).

    Args:
      rows_sorted: int ``[E]`` row of each entry, non-decreasing, in ``[0, num_rows)``.
      num_rows: ``N``.
      dtype: offset dtype; default :func:`offset_dtype` of ``E``.

    Returns:
      ``[N + 1]`` offsets, ``indptr[0] = 0`` and ``indptr[N] = E``.

    Raises:
      ValueError: a row id outside ``[0, num_rows)``, named with its position.
    """
    rows = np.asarray(rows_sorted)
    num_rows = _checks.check_static_int("num_rows", num_rows)
    dtype = offset_dtype(rows.shape[0]) if dtype is None else np.dtype(dtype)
    indptr = np.zeros(num_rows + 1, dtype)
    np.cumsum(_row_counts(rows, num_rows), out=indptr[1:])
    return indptr


def group_by_row(rows, num_rows: int, *, cols=None, dtype=None) -> tuple[np.ndarray, np.ndarray]:
    """The permutation that groups entries by row, and the row offsets.

    Entries of one row keep their original relative order (a stable sort),
    or, when ``cols`` is given, are ordered by column (ties again in original
    order). ``rows[order]`` is non-decreasing and row ``r``'s entries are
    ``order[indptr[r]:indptr[r + 1]]``.

    Args:
      rows: int ``[E]`` row of each entry, in ``[0, num_rows)``.
      num_rows: ``N``.
      cols: optional int ``[E]``; order entries within a row by it.
      dtype: dtype of ``order`` and ``indptr``; default :func:`offset_dtype` of ``E``.

    Returns:
      ``(order [E], indptr [N + 1])``.

    Raises:
      ValueError: a row id outside ``[0, num_rows)``, or ``cols`` of another length.
    """
    rows = np.asarray(rows)
    num_rows = _checks.check_static_int("num_rows", num_rows)
    dtype = offset_dtype(rows.shape[0]) if dtype is None else np.dtype(dtype)
    indptr = np.zeros(num_rows + 1, dtype)
    np.cumsum(_row_counts(rows, num_rows), out=indptr[1:])
    if cols is None:
        order = np.argsort(rows, kind="stable")
    else:
        cols = np.asarray(cols)
        if cols.shape != rows.shape:
            raise ValueError(f"cols must have the shape of rows {rows.shape}, got {cols.shape}")
        order = np.lexsort((cols, rows))
    return order.astype(dtype, copy=False), indptr
