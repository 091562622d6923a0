"""The covering parametrization (tests/sweep.py) against a brute-force check."""

from __future__ import annotations

import itertools

import pytest
from sweep import covering


def split(params):
    fast = [p.values for p in params if not p.marks]
    slow = [p.values for p in params if p.marks]
    assert all(m.name == "slow" for p in params for m in p.marks)
    return fast, slow


@pytest.mark.parametrize("strength", [1, 2, 3])
def test_default_rows_cover_every_tuple_and_all_rows_are_the_product(strength):
    axes = (["a", "b", "c", "d"], [0, 1, 2], [False, True])
    fast, slow = split(covering(*axes, strength=strength))
    assert sorted(fast + slow, key=repr) == sorted(itertools.product(*axes), key=repr)
    for subset in itertools.combinations(range(3), strength):
        want = set(itertools.product(*(axes[i] for i in subset)))
        assert {tuple(row[i] for i in subset) for row in fast} == want
    # Greedy covers are small: pairs of a 4 x 3 x 2 product need 12 rows at least.
    assert len(fast) == {1: 4, 2: 12, 3: 24}[strength]


def test_ids_join_the_value_ids_and_within_keeps_the_cover_inside():
    params = covering({"x": 1, "y": 2}, ["p", "q"], within=lambda v, _: v == 1)
    assert [p.id for p in params] == ["x-p", "x-q", "y-p", "y-q"]
    fast, _ = split(params)
    assert fast == [(1, "p"), (1, "q")]
    with pytest.raises(ValueError, match="at least one axis"):
        covering([])
