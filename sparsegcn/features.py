"""Node features, dense or sparse, and the one product models need: ``X @ W``.

Citation graphs carry ~1%-dense bag-of-words features. Keeping them sparse
makes ``X @ W`` a sparse-dense product over the stored values only, and lets
dropout touch only those values (see :func:`sparsegcn.nn.dropout`).
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import scipy.sparse as sp

from sparsegcn import _checks
from sparsegcn.backends.csr import _csr_product
from sparsegcn.backends.segment import gather_scatter

Array = Any


class FeatureLayout(NamedTuple):
    """Host-built index arrays that let ``X @ W`` and its gradient run on the
    native CSR kernel (:mod:`sparsegcn.backends.csr`) instead of a gather
    and a scatter; a pytree.

    Attributes:
      indptr: int32 ``[N + 1]``, row ``i``'s stored values are
        ``indptr[i]:indptr[i + 1]`` (the values are row-sorted).
      t_indptr: int32 ``[F + 1]``, the same for ``X^T`` (by column).
      t_rows: int32 ``[nnz]``, the row of each stored value in column order.
      t_order: int32 ``[nnz]``, the position of each column-ordered value in
        ``values``, so ``X^T``'s values are ``values[t_order]``.
    """

    indptr: Array
    t_indptr: Array
    t_rows: Array
    t_order: Array

    @classmethod
    def build(cls, rows: np.ndarray, cols: np.ndarray, shape: tuple[int, int]) -> FeatureLayout:
        """From row-sorted host ids; ``O(nnz log nnz)`` once."""
        n, f = shape
        indptr = np.zeros(n + 1, np.int64)
        np.cumsum(np.bincount(rows, minlength=n), out=indptr[1:])
        t_order = np.argsort(cols, kind="stable")
        t_indptr = np.zeros(f + 1, np.int64)
        np.cumsum(np.bincount(cols, minlength=f), out=t_indptr[1:])
        return cls(
            indptr.astype(np.int32),
            t_indptr.astype(np.int32),
            rows[t_order].astype(np.int32),
            t_order.astype(np.int32),
        )


@dataclasses.dataclass(frozen=True, eq=False)
class SparseFeatures:
    """A sparse ``[N, F]`` feature matrix in row-sorted COO form; a pytree.

    Attributes:
      rows: int32 ``[nnz]`` row (node) of each stored value, non-decreasing.
      cols: int32 ``[nnz]`` column (feature) of each stored value.
      values: float32 ``[nnz]`` the stored values.
      shape: static ``(N, F)``.
      layout: the :class:`FeatureLayout` of the ids, built when the
        features are made on the host (``None`` when made from traced
        arrays): with it, :meth:`matmul` and its gradient run on the CSR
        kernel.
    """

    rows: Array
    cols: Array
    values: Array
    shape: tuple[int, int]
    layout: FeatureLayout | None = None

    def __post_init__(self):
        if not isinstance(self.shape, (tuple, list)) or len(self.shape) != 2:
            raise ValueError(f"shape must be (N, F), two sizes, got {self.shape!r}")
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
        _checks.check_real_values("features.values", values)
        convert = jnp.asarray if isinstance(self.values, jax.Array) else np.asarray
        object.__setattr__(self, "rows", convert(rows.astype(np.int32, copy=False)))
        object.__setattr__(self, "cols", convert(cols.astype(np.int32, copy=False)))
        object.__setattr__(self, "values", convert(values.astype(np.float32, copy=False)))
        if self.layout is None and rows.size:
            layout = FeatureLayout.build(rows, cols, (n, f))
            object.__setattr__(self, "layout", FeatureLayout(*(convert(a) for a in layout)))

    def tree_flatten_with_keys(self):
        names = ("rows", "cols", "values", "layout")
        return tuple((jax.tree_util.GetAttrKey(k), getattr(self, k)) for k in names), self.shape

    @classmethod
    def tree_unflatten(cls, shape, children):
        """Also takes ``(rows, cols, values)`` alone: features without a layout."""
        features = object.__new__(cls)
        children = tuple(children) + (None,) * (4 - len(tuple(children)))
        for name, value in zip(("rows", "cols", "values", "layout"), children, strict=True):
            object.__setattr__(features, name, value)
        object.__setattr__(features, "shape", shape)
        return features

    @classmethod
    def from_scipy(cls, matrix) -> SparseFeatures:
        """From any scipy sparse matrix; explicit zeros are dropped, duplicates summed.

        Raises:
          ValueError: ``matrix`` is not 2-D, or holds values that are not finite real
            numbers within float32's range, naming the first.
        """
        if not sp.issparse(matrix):
            matrix = _checks.as_host("matrix", matrix)
        if len(matrix.shape) != 2:
            raise ValueError(f"features must be [N, F], got shape {tuple(matrix.shape)}")
        coo = sp.coo_array(matrix)
        _checks.check_real_values("features.values", coo.data)
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
        """Same sparsity pattern (and layout), new stored values (e.g. after dropout)."""
        return SparseFeatures.tree_unflatten(
            self.shape, (self.rows, self.cols, values, self.layout)
        )

    def matmul(self, w: jax.Array) -> jax.Array:
        """``X @ W`` for ``W`` of shape ``[F, out]``; returns ``[N, out]``.

        With a :attr:`layout`, the product is one call of the CSR kernel
        (``O(nnz out)``, reading each stored value once), and so is the
        gradient with respect to ``W`` (``X^T ȳ``, on the transposed layout);
        the gradient with respect to the values is ``<ȳ_row, W_col>`` per
        value. Without one, it gathers ``W``'s rows per value and sums them
        by row.
        """
        if w.ndim != 2 or w.shape[0] != self.shape[1]:
            raise ValueError(f"X @ W needs W with {self.shape[1]} rows, got shape {w.shape}")
        values = jnp.asarray(self.values).astype(w.dtype)
        if self.layout is None or values.shape[0] == 0:
            return gather_scatter(
                self.cols, self.rows, values, w, self.shape[0], indices_are_sorted=True
            )
        layout = FeatureLayout(*(jnp.asarray(a) for a in self.layout))
        return _csr_features_matmul(
            layout, jnp.asarray(self.rows), jnp.asarray(self.cols), values, w
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


@jax.custom_vjp
def _csr_features_matmul(layout: FeatureLayout, rows, cols, values, w):
    return _csr_product(layout.indptr, cols, values, w)


def _csr_features_fwd(layout, rows, cols, values, w):
    return _csr_product(layout.indptr, cols, values, w), (layout, rows, cols, values, w)


def _csr_features_bwd(residuals, cotangent):
    layout, rows, cols, values, w = residuals
    # X^T ȳ on the transposed layout: no scatter into W's rows.
    w_bar = _csr_product(layout.t_indptr, layout.t_rows, values[layout.t_order], cotangent)
    # Per stored value <ȳ_row, W_col>; dead code (removed by XLA) unless the
    # values depend on what is differentiated.
    values_bar = jnp.sum(
        cotangent.at[rows].get(mode="promise_in_bounds") * w.at[cols].get(mode="promise_in_bounds"),
        axis=-1,
    )
    return (None, None, None, values_bar.astype(values.dtype), w_bar.astype(w.dtype))


_csr_features_matmul.defvjp(_csr_features_fwd, _csr_features_bwd)

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
        _checks.check_real_values("features", host)
        features = jnp.asarray(host, jnp.float32)
    if num_nodes is not None:
        _checks.check_num_rows("features", features.shape, num_nodes)
    return features


def matmul(x: Features, w: jax.Array) -> jax.Array:
    """``X @ W`` for dense or sparse ``X`` ``[N, F]`` and ``W`` ``[F, out]``.

    Raises:
      ValueError: ``X``'s last axis is not ``W``'s first (features of another
        width than the model's ``in_features``), naming both shapes; checked
        on the static shapes, so it costs nothing under ``jit``.
    """
    x_shape, w_shape = tuple(np.shape(x) if not hasattr(x, "shape") else x.shape), w.shape
    if not x_shape or x_shape[-1] != w_shape[0]:
        raise ValueError(
            f"features of shape {x_shape} meet a weight of shape {tuple(w_shape)}, which "
            f"expects {w_shape[0]} columns; build the model with in_features="
            f"{x_shape[-1] if x_shape else '?'} (the features' width) or give it "
            f"[N, {w_shape[0]}] features"
        )
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
      ValueError: naming the first negative, non-finite or non-real entry, or
        features that are not ``[N, F]``.
    """
    if not sp.issparse(x):
        x = _checks.as_host("features", x)
    if len(x.shape) != 2:
        raise ValueError(f"features must be [N, F], got shape {tuple(x.shape)}")
    if sp.issparse(x):
        _checks.check_real_values("features.values", sp.coo_array(x).data)
    else:
        _checks.check_real_values("features", x)
    _check_non_negative(x)
    # Sums and quotients in float64: a row of float32 values may sum past float32's
    # range (40 values of 3e38), which would make the row 0 (x / inf).
    if sp.issparse(x):
        csr = sp.csr_array(x, dtype=np.float32, copy=True)  # never the caller's arrays
        csr.sum_duplicates()
        sums = np.add.reduceat(
            np.concatenate([csr.data.astype(np.float64), [0.0]]), csr.indptr[:-1]
        ) * (np.diff(csr.indptr) > 0)
        per_value = np.repeat(sums, np.diff(csr.indptr))
        data = np.divide(
            csr.data, per_value, out=np.zeros(csr.data.shape, np.float64), where=per_value != 0
        )
        return sp.csr_array((data.astype(np.float32), csr.indices, csr.indptr), shape=csr.shape)
    dense = np.asarray(x, np.float32)
    out = np.zeros_like(dense)
    chunk = max(1, (1 << 24) // max(dense.shape[1], 1))  # rows of float64 at a time: 128 MiB
    for start in range(0, dense.shape[0], chunk):
        rows = dense[start : start + chunk]
        sums = rows.sum(axis=1, keepdims=True, dtype=np.float64)
        quotient = np.divide(rows, sums, out=np.zeros(rows.shape, np.float64), where=sums != 0)
        out[start : start + chunk] = quotient
    return out


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
