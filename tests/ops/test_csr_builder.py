"""The host CSR builder against scipy.sparse."""

import numpy as np
import pytest
import scipy.sparse as sp

from sparsegcn.ops import group_by_row, indptr_from_sorted, offset_dtype

CASES = {
    "empty": ([], [], 4),
    "duplicates": ([2, 0, 2, 2, 1], [1, 1, 1, 0, 3], 4),
    "self_loops_isolated": ([0, 3, 3, 0, 5], [0, 3, 0, 0, 5], 8),
    "random": (
        np.random.default_rng(0).integers(0, 30, 500),
        np.random.default_rng(1).integers(0, 40, 500),
        40,
    ),
}


def as_arrays(name):
    rows, cols, n = CASES[name]
    return np.asarray(rows, np.int32), np.asarray(cols, np.int32), n


def scipy_counts(rows, cols, n):
    """scipy's CSR with duplicates summed into counts (data[k] = multiplicity), indices sorted."""
    ref = sp.csr_array((np.ones(rows.size), (rows, cols)), shape=(n, n))
    ref.sum_duplicates()
    return ref


@pytest.mark.parametrize("name", list(CASES))
def test_offsets_and_grouping_match_scipy(name):
    rows, cols, n = as_arrays(name)
    order, indptr = group_by_row(rows, n)
    ref = scipy_counts(rows, cols, n)
    # Row r holds as many entries as scipy's row r sums to (duplicates counted).
    expected = np.concatenate([[0], np.cumsum(ref.sum(axis=1))])
    np.testing.assert_array_equal(indptr, expected)
    assert indptr.dtype == np.int32 and order.dtype == np.int32
    assert (np.diff(rows[order]) >= 0).all()
    for r in range(n):
        members = order[indptr[r] : indptr[r + 1]]
        np.testing.assert_array_equal(members, np.flatnonzero(rows == r))  # stable
    np.testing.assert_array_equal(indptr_from_sorted(rows[order], n), indptr)


@pytest.mark.parametrize("name", list(CASES))
def test_ordering_by_column_within_a_row_matches_scipy_sorted_indices(name):
    rows, cols, n = as_arrays(name)
    order, indptr = group_by_row(rows, n, cols=cols, dtype=np.int64)
    assert order.dtype == np.int64 and indptr.dtype == np.int64
    ref = scipy_counts(rows, cols, n)
    counts = ref.data.astype(np.int64)
    np.testing.assert_array_equal(indptr, np.concatenate([[0], np.cumsum(ref.sum(axis=1))]))
    np.testing.assert_array_equal(cols[order], np.repeat(ref.indices, counts))
    # Ties (duplicate entries) stay in input order.
    keys = rows[order].astype(np.int64) * n + cols[order]
    for key in np.unique(keys):
        np.testing.assert_array_equal(np.sort(order[keys == key]), order[keys == key])


def test_offset_dtype_widens_at_two_to_the_31():
    assert offset_dtype(2**31 - 1) == np.int32
    assert offset_dtype(2**31) == np.int64


def test_bad_rows_are_named():
    with pytest.raises(ValueError, match=r"rows\[2\] = 5 is out of range"):
        group_by_row(np.array([0, 1, 5]), 4)
    with pytest.raises(ValueError, match=r"rows\[1\] = -1 is out of range"):
        indptr_from_sorted(np.array([0, -1]), 4)
    with pytest.raises(ValueError, match="integer dtype, got float64"):
        group_by_row(np.array([0.0, 1.0]), 4)
    with pytest.raises(ValueError, match=r"cols must have the shape of rows \(2,\), got \(3,\)"):
        group_by_row(np.array([0, 1]), 4, cols=np.array([0, 1, 2]))
