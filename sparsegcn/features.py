"""Node features, dense or sparse, and the one product models need: ``X @ W``.

Citation graphs carry ~1%-dense bag-of-words features. Keeping them sparse
makes ``X @ W`` a sparse-dense product over the stored values only, and lets
dropout touch only those values (see :func:`sparsegcn.nn.dropout`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import scipy.sparse as sp

from sparsegcn import _checks
from sparsegcn.backends.segment import gather_scatter

Array = Any


@dataclasses.dataclass(frozen=True, eq=False)
class SparseFeatures:
    """A sparse ``[N, F]`` feature matrix in row-sorted COO form; a pytree.

    Attributes:
      rows: int32 ``[nnz]`` row (node) of each stored value, non-decreasing.
      cols: int32 ``[nnz]`` column (feature) of each stored value.
      values: float32 ``[nnz]`` the stored values.
      shape: static ``(N, F)``.
    """

    rows: Array
    cols: Array
    values: Array
    shape: tuple[int, int]

    def __post_init__(self):
        n, f = (_checks.check_static_int(f"shape[{i}]", d) for i, d in enumerate(self.shape))
        object.__setattr__(self, "shape", (n, f))
        if _checks.is_traced(self.rows, self.cols, self.values):
            return
        rows, cols, values = (np.asarray(a) for a in (self.rows, self.cols, self.values))
        for name, ids, bound in (("rows", rows, n), ("cols", cols, f)):
            _checks.check_integer_array(f"features.{name}", ids, ndim=1)
            _checks.check_ids_in_range(f"features.{name}", ids, bound)
        if not rows.shape == cols.shape == values.shape:
            raise ValueError(
                f"rows, cols and values must have one entry per stored value, got shapes "
                f"{rows.shape}, {cols.shape}, {values.shape}"
            )
        if rows.size > 1 and (np.diff(rows.astype(np.int64)) < 0).any():
            raise ValueError("features.rows must be non-decreasing (CSR order); use from_scipy")
        _checks.check_finite("features.values", values)
        convert = jnp.asarray if isinstance(self.values, jax.Array) else np.asarray
        object.__setattr__(self, "rows", convert(rows.astype(np.int32, copy=False)))
        object.__setattr__(self, "cols", convert(cols.astype(np.int32, copy=False)))
        object.__setattr__(self, "values", convert(values.astype(np.float32, copy=False)))

    def tree_flatten_with_keys(self):
        names = ("rows", "cols", "values")
        return tuple((jax.tree_util.GetAttrKey(k), getattr(self, k)) for k in names), self.shape

    @classmethod
    def tree_unflatten(cls, shape, children):
        features = object.__new__(cls)
        for name, value in zip(("rows", "cols", "values"), children, strict=True):
            object.__setattr__(features, name, value)
        object.__setattr__(features, "shape", shape)
        return features

    @classmethod
    def from_scipy(cls, matrix) -> SparseFeatures:
        """From any scipy sparse matrix; explicit zeros are dropped, duplicates summed."""
        csr = sp.csr_array(matrix, dtype=np.float32)
        csr.sum_duplicates()
        csr.eliminate_zeros()
        rows = np.repeat(np.arange(csr.shape[0], dtype=np.int32), np.diff(csr.indptr))
        return cls(rows, csr.indices.astype(np.int32), csr.data, csr.shape)

    @property
    def nnz(self) -> int:
        return int(self.values.shape[0])

    @property
    def ndim(self) -> int:
        return 2

    @property
    def dtype(self):
        return self.values.dtype

    def with_values(self, values: Array) -> SparseFeatures:
        """Same sparsity pattern, new stored values (e.g. after dropout)."""
        return SparseFeatures.tree_unflatten(self.shape, (self.rows, self.cols, values))

    def matmul(self, w: jax.Array) -> jax.Array:
        """``X @ W`` for ``W`` of shape ``[F, out]``; returns ``[N, out]``."""
        if w.shape[0] != self.shape[1]:
            raise ValueError(f"X @ W needs W with {self.shape[1]} rows, got shape {w.shape}")
        values = jnp.asarray(self.values).astype(w.dtype)
        return gather_scatter(
            self.cols, self.rows, values, w, self.shape[0], indices_are_sorted=True
        )

    def todense(self) -> jax.Array:
        """The dense ``[N, F]`` float32 array."""
        return jnp.zeros(self.shape, jnp.float32).at[self.rows, self.cols].add(self.values)

    def to_scipy(self) -> sp.csr_array:
        rows, cols, values = (np.asarray(a) for a in (self.rows, self.cols, self.values))
        return sp.csr_array((values, (rows, cols)), shape=self.shape)

    def __repr__(self) -> str:
        return f"SparseFeatures(shape={self.shape}, nnz={self.values.shape[0]})"


jax.tree_util.register_pytree_with_keys_class(SparseFeatures)

Features = Any  # jax.Array [N, F] or SparseFeatures


def as_features(x, num_nodes: int | None = None) -> Features:
    """Validates features once on the host and puts them in model form.

    scipy sparse matrices become :class:`SparseFeatures`; anything else a
    float32 ``jax.Array``. Raises ``ValueError`` naming the shape when the
    row count differs from ``num_nodes``, or the first non-finite value.
    """
    features: jax.Array | SparseFeatures
    if isinstance(x, SparseFeatures):
        features = x
    elif sp.issparse(x):
        features = SparseFeatures.from_scipy(x)
    else:
        host = _checks.as_host("features", x)
        if host.ndim != 2:
            raise ValueError(f"features must have 2 dimensions [N, F], got shape {host.shape}")
        if not (np.issubdtype(host.dtype, np.floating) or np.issubdtype(host.dtype, np.integer)):
            raise ValueError(f"features must be real numbers, got dtype {host.dtype}")
        _checks.check_finite("features", host)
        features = jnp.asarray(host, jnp.float32)
    if num_nodes is not None:
        _checks.check_num_rows("features", features.shape, num_nodes)
    return features


def matmul(x: Features, w: jax.Array) -> jax.Array:
    """``X @ W`` for dense or sparse ``X`` ``[N, F]`` and ``W`` ``[F, out]``."""
    if isinstance(x, SparseFeatures):
        return x.matmul(w)
    return x @ w


def row_normalize(x):
    """Divides each row by its sum (host-side); all-zero rows stay zero.

    .. math:: \\tilde X_{ij} = X_{ij} / \\sum_k X_{ik}

    Accepts a scipy sparse matrix (returns CSR) or a dense array.
    This is the feature preprocessing of Kipf & Welling's GCN, meant for
    non-negative features such as bag-of-words counts: a row with negative
    entries has no meaningful sum, so it is refused.

    Raises:
      ValueError: naming the first negative entry.
    """
    _check_non_negative(x)
    if sp.issparse(x):
        csr = sp.csr_array(x, dtype=np.float32)
        sums = np.asarray(csr.sum(axis=1)).ravel()
        inv = np.zeros_like(sums)
        np.divide(1.0, sums, out=inv, where=sums != 0)
        return sp.csr_array(sp.diags_array(inv) @ csr, dtype=np.float32)
    dense = np.asarray(x, np.float32)
    sums = dense.sum(axis=1, keepdims=True)
    return np.divide(dense, sums, out=np.zeros_like(dense), where=sums != 0)


FEATURE_NORMALIZATIONS = ("auto", "row", "none")


def _first_negative(x) -> tuple[int, ...] | None:
    if sp.issparse(x):
        coo = sp.coo_array(x)
        bad = np.flatnonzero(coo.data < 0)
        if bad.size == 0:
            return None
        pos = np.lexsort((coo.col[bad], coo.row[bad]))[0]
        return int(coo.row[bad][pos]), int(coo.col[bad][pos])
    dense = np.asarray(x)
    flat = np.flatnonzero(dense.ravel() < 0)
    return None if flat.size == 0 else tuple(int(i) for i in np.unravel_index(flat[0], dense.shape))


def _check_non_negative(x) -> None:
    bad = _first_negative(x)
    if bad is not None:
        raise ValueError(
            f"row normalization needs non-negative features, but features[{bad[0]}, {bad[1]}] "
            f"is negative; use normalize_features='none' for signed features"
        )


def normalize(x, mode: str = "auto"):
    """Host-side feature preprocessing by name.

    Args:
      x: ``[N, F]`` dense or scipy sparse features.
      mode: ``"row"`` (:func:`row_normalize`), ``"none"`` (unchanged), or
        ``"auto"``: row-normalize non-negative features (bag-of-words, as
        in the Planetoid datasets) and leave signed features (embeddings,
        Gaussian features) unchanged, since dividing by a signed row sum
        destroys them.
    """
    if mode not in FEATURE_NORMALIZATIONS:
        raise ValueError(
            f"feature normalization must be one of {FEATURE_NORMALIZATIONS}, got {mode!r}"
        )
    if mode == "none" or (mode == "auto" and _first_negative(x) is not None):
        return x
    return row_normalize(x)
