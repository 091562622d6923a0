"""Embeddings of categorical feature columns: OGB's atom and bond encoders.

A row of ``C`` integer columns, column ``j`` taking values in ``[0, d_j)``
(an atom's element, chirality, degree, ...; a bond's type, stereo,
conjugation), becomes one ``W``-wide vector: the sum of one learnt
embedding per column,

.. math::

    \\mathrm{enc}(x) = \\sum_{j=0}^{C-1} T^{(j)}_{x_j}, \\qquad
    T^{(j)} \\in \\mathbb{R}^{d_j \\times W}

which equals a linear map of the concatenated one-hot columns, but gathers
``C`` rows instead of multiplying by a ``[Σ d_j, W]`` matrix. Every table is
Xavier-uniform initialised, as OGB's ``AtomEncoder`` and ``BondEncoder``
(``ogb.graphproppred.mol_encoder``) do. Any ``feature_dims`` tuple works
(:class:`~sparsegcn.datasets.graphs.GraphDataset`'s ``feature_dims`` and
``edge_feature_dims``); OGB's are ``get_atom_feature_dims()`` (9 columns)
and ``get_bond_feature_dims()`` (3 columns).

References:
  Hu, Fey, Zitnik, Dong, Ren, Liu, Catasta & Leskovec, *Open Graph
  Benchmark: Datasets for Machine Learning on Graphs*, NeurIPS 2020.
  https://arxiv.org/abs/2005.00687
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from sparsegcn import _checks
from sparsegcn.nn.initializers import glorot_uniform


def check_feature_dims(dims: Sequence[int]) -> tuple[int, ...]:
    """``dims`` as a tuple of positive Python ints, or a ValueError naming it."""
    if isinstance(dims, (str, bytes)) or not isinstance(dims, Sequence) or not dims:
        raise ValueError(f"feature_dims must be a non-empty sequence of ints, got {dims!r}")
    return tuple(
        _checks.check_static_int(f"feature_dims[{j}]", d, minimum=1) for j, d in enumerate(dims)
    )


def atom_encoder_params(key: jax.Array, dims: Sequence[int], width: int) -> dict:
    """One Xavier-uniform embedding table per categorical column.

    Args:
      key: PRNG key.
      dims: ``(d_0, ..., d_{C-1})``, each column's vocabulary size.
      width: ``W``, the embedding width.

    Returns:
      ``{"tables": [[d_0, W], ..., [d_{C-1}, W]]}``; each entry
      ``U(-a, a)`` with ``a = sqrt(6 / (d_j + W))`` (``torch.nn.init.xavier_uniform_``
      on a ``[d_j, W]`` ``Embedding`` weight).

    Raises:
      ValueError: an empty ``dims``, a size below 1, or ``width`` below 1.
    """
    dims = check_feature_dims(dims)
    width = _checks.check_static_int("width", width, minimum=1)
    keys = jax.random.split(key, len(dims))
    return {"tables": [glorot_uniform(k, (d, width)) for k, d in zip(keys, dims, strict=True)]}


bond_encoder_params = atom_encoder_params
"""OGB's ``BondEncoder`` has the atom encoder's form: :func:`atom_encoder_params`."""


def encode(params: dict, x_int: ArrayLike) -> jax.Array:
    """The sum of each column's embedding: ``[n, C]`` categories to ``[n, W]``.

    .. math:: \\mathrm{enc}(x)_i = \\sum_j T^{(j)}_{x_{ij}}

    Args:
      params: :func:`atom_encoder_params` (or :func:`bond_encoder_params`).
      x_int: ``[n, C]`` category indices, int or float holding whole numbers
        (a padded :class:`~sparsegcn.batch.GraphBatch` stores them as
        float32; they are cast to int32). An index outside ``[0, d_j)`` is
        clipped into it (XLA's gather); a dataset's loader checks ranges.

    Returns:
      float32 ``[n, W]``.

    Raises:
      ValueError: ``x_int`` is not ``[n, C]`` with ``C`` the number of tables.
    """
    tables = params["tables"]
    x = jnp.asarray(x_int)
    if x.ndim != 2 or x.shape[1] != len(tables):
        raise ValueError(
            f"encode needs [n, {len(tables)}] category columns (one per table), got {x.shape}"
        )
    index = x.astype(jnp.int32)
    total = jnp.take(tables[0], index[:, 0], axis=0, mode="clip")
    for j in range(1, len(tables)):
        total = total + jnp.take(tables[j], index[:, j], axis=0, mode="clip")
    return total


__all__ = ["atom_encoder_params", "bond_encoder_params", "check_feature_dims", "encode"]
