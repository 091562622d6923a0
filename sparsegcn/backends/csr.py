"""Compressed sparse rows: a host-built layout for a native CSR product.

The layout stores ``A`` row by row (a row is a receiver): ``indptr[i]`` to
``indptr[i + 1]`` delimit row ``i``'s entries, ``columns`` holds their
senders and ``data`` their weights. The product

.. math:: y_i = \\sum_{k = p_i}^{p_{i+1} - 1} d_k \\, x_{c_k}

runs on a native kernel rather than on gathers and a scatter. Which one is
the ``kernel`` choice (:data:`CSR_KERNELS`), made when the program is
lowered:

- ``"auto"`` (default): on CPU, sparsegcn's own kernel
  (:mod:`sparsegcn.backends.native`, built by ``pip install``) for float32;
  elsewhere, or when that library is missing, XLA's;
- ``"xla"``: ``jax.experimental.sparse.BCSR @ x``, which XLA lowers to
  jaxlib's ``cpu_csr_sparse_dense`` on CPU and, with
  ``jax_bcoo_cusparse_lowering`` set, cuSPARSE's CSR SpMM on GPU (without
  the flag, GPU runs gather and scatter);
- ``"native"``: as ``"auto"``, but refusing to run without the library.

Rows are visited in node order, so a locality-improving node
order (:meth:`sparsegcn.Graph.reorder`, RCM) shortens the distance between
the rows of ``x`` one output row reads: that is where this layout beats the
sliced ELL of :mod:`sparsegcn.backends.ell` (see ``benchmarks/README.md``).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import custom_batching
from jax.experimental import sparse as jsparse

from sparsegcn.backends import native
from sparsegcn.graph import CSR, Graph
from sparsegcn.ops.segment import accumulation_dtype

INT32_MAX = np.iinfo(np.int32).max
CSR_KERNELS = ("auto", "xla", "native")
"""Names of the CSR product's kernel choice (see the module docstring)."""


def check_csr_kernel(kernel: str) -> str:
    """``kernel`` if it names a choice this process can run.

    Raises:
      ValueError: an unknown name, or ``"native"`` without the built library
        (the message says why it is missing).
    """
    if kernel not in CSR_KERNELS:
        raise ValueError(f"csr_kernel must be one of {CSR_KERNELS}, got {kernel!r}")
    if kernel == "native" and not native.ffi_available():
        raise ValueError(f"csr_kernel='native' cannot run: {native.unavailable_reason()}")
    return kernel


class CsrLayout(NamedTuple):
    """The CSR layout of an ``N x N`` matrix ``A[row, col]``; a pytree.

    Attributes:
      indptr: int32 ``[N + 1]``, row ``i``'s entries are
        ``indptr[i]:indptr[i + 1]``.
      columns: int32 ``[E]``, the column (sender) of each entry.
      data: float32 ``[E]``, the weight of each entry (ones for an
        unweighted graph): a copy of the graph's weights in row order, made
        when packing, so the product reads no scattered weights.
      edge_ids: int32 ``[E]``, the position of each entry in the graph's
        edge list, so per-edge values computed in edge order (attention
        weights) can be laid out in row order: ``w[edge_ids]``.
    """

    indptr: jax.Array | np.ndarray
    columns: jax.Array | np.ndarray
    data: jax.Array | np.ndarray
    edge_ids: jax.Array | np.ndarray


def build_csr(
    cols: np.ndarray, rows: np.ndarray, num_nodes: int, weights: np.ndarray | None = None
) -> CsrLayout:
    """The CSR layout of ``A[rows[e], cols[e]] += weights[e]``, built on the host.

    Args:
      cols: int ``[E]`` column of each entry (the senders, for ``A``).
      rows: int ``[E]`` row of each entry (the receivers), validated ids.
      num_nodes: ``N``.
      weights: float ``[E]`` entry values, or None for ones.

    Raises:
      ValueError: more entries or nodes than int32 ids can address.
    """
    cols = np.asarray(cols)
    rows = np.asarray(rows)
    if cols.shape[0] > INT32_MAX or num_nodes > INT32_MAX:
        raise ValueError(
            f"the CSR layout uses int32 ids, but the graph has {cols.shape[0]} edges and "
            f"{num_nodes} nodes (at most {INT32_MAX} each); use the ELL layout or shard the graph"
        )
    # The same grouping by receiver that neighbour sampling uses (Graph.to_csr).
    csr = CSR.from_graph(Graph(cols, rows, weights, num_nodes))
    if csr.weights is None:
        data = np.ones(csr.num_edges, np.float32)
    else:
        data = np.asarray(csr.weights, np.float32)
    return CsrLayout(
        csr.indptr.astype(np.int32),
        csr.indices.astype(np.int32),
        data,
        np.asarray(csr.edge_ids).astype(np.int32),
    )


def csr_matmul(
    layout: CsrLayout,
    x: jax.Array,
    num_rows: int,
    weights: jax.Array | None = None,
    *,
    kernel: str = "auto",
) -> jax.Array:
    """``A @ x`` for the layout of ``A``.

    Args:
      layout: the :class:`CsrLayout` of ``A`` (``num_rows`` rows).
      x: ``[M, F]`` with ``M`` the number of columns of ``A``.
      num_rows: static number of rows of ``A``.
      weights: ``[E]`` entry values in edge-list order replacing the
        layout's ``data`` (read through ``edge_ids``, ``E`` scalars), or
        ``None`` for the stored ``data``.
      kernel: one of :data:`CSR_KERNELS` (see the module docstring).

    Returns:
      ``[num_rows, F]`` in ``x``'s dtype.

    Raises:
      ValueError: an unknown ``kernel``, or ``"native"`` without the library.
    """
    product = _PRODUCTS[check_csr_kernel(kernel)]
    if layout.columns.shape[0] == 0:
        return jnp.zeros((num_rows, x.shape[1]), x.dtype)
    wide = accumulation_dtype(x.dtype)  # bf16 / f16 rows are summed in float32
    if weights is None:
        data = jnp.asarray(layout.data).astype(wide)
    else:
        data = jnp.asarray(weights).astype(wide)[jnp.asarray(layout.edge_ids)]
    out = product(jnp.asarray(layout.indptr), jnp.asarray(layout.columns), data, x.astype(wide))
    return out.astype(x.dtype)


def _xla_product(indptr, columns, data, x):
    matrix = jsparse.BCSR((data, columns, indptr), shape=(indptr.shape[0] - 1, x.shape[0]))
    return matrix @ x


def _kernel_product(kernel: str):
    """The unbatched product for one kernel choice, decided when it is traced."""

    def product(indptr, columns, data, x):
        native_types = (indptr.dtype, columns.dtype, x.dtype) == (jnp.int32, jnp.int32, jnp.float32)
        if kernel == "xla" or not native_types or not native.ffi_available():
            return _xla_product(indptr, columns, data, x)
        # Lowering keeps only the branch of the platform compiled for: a GPU
        # program never sees the CPU library, a CPU one never XLA's kernel.
        return jax.lax.platform_dependent(
            indptr, columns, data, x, cpu=native.csr_spmm, default=_xla_product
        )

    return product


def _batched_product(kernel: str):
    """The product for one kernel choice, with a batching rule that keeps one kernel call."""
    single = _kernel_product(kernel)

    @custom_batching.custom_vmap
    def product(indptr, columns, data, x):
        return single(indptr, columns, data, x)

    @product.def_vmap
    def product_vmap(axis_size, in_batched, indptr, columns, data, x):
        """Under ``vmap`` (several seeds, say) one product serves the whole batch.

        JAX's own batching rule for a BCSR product with a batched right-hand side
        leaves the native kernel for gathers and scatters (4x slower here), so
        the batch is folded into the feature axis instead:
        ``[B, M, F] -> [M, B F]``, one product, and back. A batched matrix (a
        vmap over layouts) takes one product per batch element.
        """
        *matrix_batched, x_batched = in_batched
        if not any(matrix_batched):
            if not x_batched:
                return product(indptr, columns, data, x), False
            b, m, f = x.shape
            y = product(indptr, columns, data, jnp.moveaxis(x, 0, 1).reshape(m, b * f))
            # y is [rows, B F]; not -1: B or F may be 0
            return jnp.moveaxis(y.reshape(y.shape[0], b, f), 1, 0), True
        args = [
            a if batched else jnp.broadcast_to(a, (axis_size, *a.shape))
            for a, batched in zip((indptr, columns, data, x), in_batched, strict=True)
        ]
        return jax.lax.scan(one_product, None, tuple(args))[1], True

    # One body for every call (lax.map makes a fresh one): called eagerly, the loop
    # is compiled once per body function, and a fresh one compiled it on every call.
    def one_product(carry, args):
        return carry, product(*args)

    return product


_PRODUCTS = {kernel: _batched_product(kernel) for kernel in CSR_KERNELS}
# The default product, for callers that hold CSR arrays rather than a layout.
_csr_product = _PRODUCTS["auto"]
