"""Parametrizations whose default run covers the product, and whose slow run is all of it.

A test parametrized over several axes (layout x aggregation x variant, say)
runs every combination with ``pytest -m slow``. By default it runs a
*covering* subset: every ``strength``-tuple of values (every pair, for
``strength=2``; every single value, for ``strength=1``) appears in at least
one default row. The rows are chosen greedily and deterministically, so the
default ids are stable between runs and between xdist workers.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pytest


def _axis(values: Sequence[Any] | Mapping[str, Any]) -> list[tuple[str, Any]]:
    if isinstance(values, Mapping):
        return [(str(k), v) for k, v in values.items()]
    return [(str(v), v) for v in values]


def covering(
    *axes: Sequence[Any] | Mapping[str, Any],
    strength: int = 2,
    within: Callable[..., bool] | None = None,
) -> list[Any]:
    """``pytest.param`` rows of the product of ``axes``; rows the cover does not need are slow.

    Args:
      axes: each a sequence of values (ids: ``str(value)``) or a mapping
        ``{id: value}``; a row's id joins its values' ids with ``-``, axes
        in the given order.
      strength: every combination of this many axes' values runs by default.
      within: ``within(*values)`` false: the row is slow whatever the cover
        (the cover is drawn from the other rows, over their values).

    Returns:
      one ``pytest.param`` per combination, in product order, for
      ``pytest.mark.parametrize("a,b,...", covering(...))``.
    """
    columns = [_axis(a) for a in axes]
    if not columns or any(not c for c in columns):
        raise ValueError("covering needs at least one axis, each with a value")
    t = min(strength, len(columns))
    rows = list(itertools.product(*(range(len(c)) for c in columns)))
    values = {r: [columns[a][i][1] for a, i in enumerate(r)] for r in rows}
    candidates = [r for r in rows if within is None or within(*values[r])]

    def tuples(row):
        return {
            (subset, tuple(row[i] for i in subset))
            for subset in itertools.combinations(range(len(columns)), t)
        }

    uncovered = set().union(set(), *(tuples(r) for r in candidates))
    default: set[tuple[int, ...]] = set()
    while uncovered:
        best = max(candidates, key=lambda r: (len(tuples(r) & uncovered), -rows.index(r)))
        default.add(best)
        uncovered -= tuples(best)
    params = []
    for row in rows:
        picked = [columns[a][i] for a, i in enumerate(row)]
        params.append(
            pytest.param(
                *(value for _, value in picked),
                id="-".join(name for name, _ in picked),
                marks=() if row in default else pytest.mark.slow,
            )
        )
    return params
