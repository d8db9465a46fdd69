"""A histogram series puts each value in the bucket ``bisect_left`` names (its search is written out
in ``server.metrics._Series.observe``, compiled, rather than called)."""

from __future__ import annotations

import math
from bisect import bisect_left

from hypothesis import given
from hypothesis import strategies as st

from oaishim.server.metrics import _Series

BOUNDS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


@given(
    st.lists(st.floats(allow_nan=False) | st.integers(-10, 10**6), max_size=30),
    st.lists(st.floats(-1e6, 1e6), min_size=0, max_size=12, unique=True).map(sorted),
)
def test_each_value_lands_where_bisect_left_says(values: list[float], bounds: list[float]) -> None:
    series = _Series(tuple(bounds))
    expected = [0] * (len(bounds) + 1)
    for value in values:
        series.observe(value)
        expected[bisect_left(bounds, value)] += 1
    assert series.counts == expected


def test_edges_and_nan() -> None:
    series = _Series(BOUNDS)
    for value in (0.0, 0.005, 0.0051, 10.0, 10.5, math.inf, -math.inf):
        series.observe(value)
    # 0.0, 0.005 (a bound is its own bucket's top) and -inf in the first; 10.5 and inf above every bound
    assert series.counts == [3, 1, 0, 0, 0, 0, 0, 0, 0, 0, 1, 2]
    nan = _Series(BOUNDS)
    nan.observe(math.nan)
    assert nan.counts[bisect_left(BOUNDS, math.nan)] == 1
