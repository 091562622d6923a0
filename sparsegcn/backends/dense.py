"""The reference backend: materialise ``A`` as a dense ``N x N`` matrix."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import jax
import jax.numpy as jnp

from sparsegcn.backends.base import Backend
from sparsegcn.graph import Graph

DEFAULT_MAX_BYTES = 4 * 2**30


def _format_bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if n < 1024 or unit == "PiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{n} B"
        n /= 1024
    raise AssertionError("unreachable")


@dataclasses.dataclass(frozen=True)
class Dense(Backend):
    """Builds ``A`` densely (duplicates summed) and multiplies with ``A @ x``.

    The oracle for every sparse path: simple enough to trust, ``O(N^2)``
    memory. It refuses, before allocating, when the matrix would exceed
    ``max_bytes``.

    Attributes:
      max_bytes: the largest dense matrix allowed, in bytes (default 4 GiB).
    """

    max_bytes: int = DEFAULT_MAX_BYTES
    name: ClassVar[str] = "dense"

    def matmul(self, graph: Graph, x: jax.Array) -> jax.Array:
        n = graph.num_nodes
        needed = n * n * jnp.dtype(x.dtype).itemsize
        if needed > self.max_bytes:
            raise ValueError(
                f"the dense backend would materialise a {n} x {n} {jnp.dtype(x.dtype).name} "
                f"matrix needing {_format_bytes(needed)}, over its limit of "
                f"{_format_bytes(self.max_bytes)}; use backend='segment' or 'bcoo', or raise "
                f"the limit with sparsegcn.backends.Dense(max_bytes=...)"
            )
        adjacency = graph.to_dense(x.dtype)
        flat = x.reshape(n, -1)
        return (adjacency @ flat).reshape(x.shape)
