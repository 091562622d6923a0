"""The default backend: gather rows by sender, ``segment_sum`` into receivers."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import jax
import jax.numpy as jnp

from sparsegcn.backends.base import Backend, edge_weights_like
from sparsegcn.backends.csr import check_csr_kernel
from sparsegcn.backends.packed import PackedGraph, packed_matmul
from sparsegcn.graph import Graph
from sparsegcn.ops.gather import gather_rows
from sparsegcn.ops.segment import accumulation_dtype

STORAGE_DTYPES = (None, "bfloat16", "float16")


def gather_scatter(
    senders: jax.Array,
    receivers: jax.Array,
    weights: jax.Array | None,
    x: jax.Array,
    num_segments: int,
    *,
    indices_are_sorted: bool = False,
    storage_dtype=None,
) -> jax.Array:
    """``y[r] = sum over e with receivers[e] == r of weights[e] * x[senders[e]]``.

    The sparse-dense product behind both message passing (square ``A``) and
    sparse features (rectangular ``X``). Ids must already be validated:
    out-of-range ids are silently dropped by ``segment_sum``.

    Args:
      senders: int ``[E]`` rows of ``x`` to gather.
      receivers: int ``[E]`` output rows, each in ``[0, num_segments)``.
      weights: ``[E]`` per-edge factors, or None for ones.
      x: ``[M, ...]`` values to gather from.
      num_segments: static number of output rows.
      indices_are_sorted: promise that ``receivers`` is non-decreasing.
      storage_dtype: gather rows in this dtype (e.g. ``jnp.bfloat16``),
        accumulate in ``x.dtype``.

    Returns:
      ``[num_segments, ...]`` with ``x``'s trailing shape and dtype.
    """
    source = x if storage_dtype is None else x.astype(storage_dtype)
    wide = accumulation_dtype(x.dtype)  # bfloat16 or float16 rows: summed in float32
    messages = gather_rows(source, senders).astype(wide)
    if weights is not None:
        messages = messages * weights.reshape(weights.shape + (1,) * (x.ndim - 1)).astype(wide)
    return jax.ops.segment_sum(
        messages, receivers, num_segments=num_segments, indices_are_sorted=indices_are_sorted
    ).astype(x.dtype)


@dataclasses.dataclass(frozen=True)
class Segment(Backend):
    """Gather ``x[senders]``, scale by the weights, ``jax.ops.segment_sum`` by receiver.

    On a plain :class:`~sparsegcn.Graph` this materialises the ``[E, F]``
    messages: memory ``O(E F)``, one gather and one scatter-add. On a
    :class:`~sparsegcn.backends.PackedGraph` (see
    :func:`~sparsegcn.backends.pack`) it runs the same sum on the graph's
    layout instead: sliced ELL, where XLA fuses gathers and additions, or
    CSR, a native sparse kernel (cuSPARSE on GPU); neither writes anything
    of size ``E x F``, and the gradient with respect to ``x`` uses the
    layout of ``A^T``. Both paths agree with the dense
    reference. Works on every platform and under jit, grad and vmap (the
    packed path is reverse-mode only: ``jax.jvp`` needs the plain graph,
    ``packed.unpack()``).

    Attributes:
      use_sorted: pass ``indices_are_sorted`` to ``segment_sum`` when the
        graph's ``edges_sorted`` flag is set. ``None`` (default) decides by
        platform: on an accelerator, where the sorted scatter is faster,
        and not on CPU, where it is no faster (figures on the documentation's
        performance page).
      use_layout: use a packed graph's layout (default). ``False`` forces
        the gather/scatter path, for comparisons.
      storage_dtype: ``None`` (gather in ``x``'s dtype), ``"bfloat16"`` or
        ``"float16"``: rows are gathered in that dtype and summed in
        ``x``'s, halving the bytes read. Meant for accelerators, where the
        gather is bandwidth bound; results are then rounded to ~3 digits.
        float16 holds ``|x| <= 65504`` only: a larger feature becomes
        ``inf`` (bfloat16 keeps float32's range).
      csr_kernel: the kernel of a CSR-packed graph's product, forward and
        gradient: ``"auto"`` (default; sparsegcn's native kernel on CPU
        when it was built, XLA's elsewhere), ``"xla"`` (always XLA's) or
        ``"native"`` (as auto, but an error when the library is missing).
        Chosen when the program is lowered (see
        :mod:`sparsegcn.backends.csr`).
    """

    use_sorted: bool | None = None
    use_layout: bool = True
    storage_dtype: str | None = None
    csr_kernel: str = "auto"
    name: ClassVar[str] = "segment"

    def __post_init__(self):
        if self.storage_dtype not in STORAGE_DTYPES:
            raise ValueError(
                f"storage_dtype must be one of {STORAGE_DTYPES}, got {self.storage_dtype!r}"
            )
        check_csr_kernel(self.csr_kernel)

    def promises_sorted(self, edges_sorted: bool) -> bool:
        """Whether ``segment_sum`` is told the receivers are sorted, for a graph
        whose ``edges_sorted`` flag is ``edges_sorted``."""
        if not edges_sorted:
            return False
        if self.use_sorted is None:
            return jax.default_backend() != "cpu"
        return self.use_sorted

    def matmul(self, graph: Graph, x: jax.Array) -> jax.Array:
        storage = None if self.storage_dtype is None else jnp.dtype(self.storage_dtype)
        if self.use_layout and isinstance(graph, PackedGraph):
            return packed_matmul(graph, x, storage_dtype=storage, csr_kernel=self.csr_kernel)
        return gather_scatter(
            graph.senders,
            graph.receivers,
            edge_weights_like(graph, x),
            x,
            graph.num_nodes,
            indices_are_sorted=self.promises_sorted(graph.edges_sorted),
            storage_dtype=storage,
        )
