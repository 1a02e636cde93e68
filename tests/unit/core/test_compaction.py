"""Port compaction: optimal covers (checked by brute force over all covers) and their exposure."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sg_reconciler.core.compaction import compact, merge_ranges, single_range_exposure

PortRange = tuple[int, int]


def brute_force_exposure(needed: set[int], budget: int) -> int:
    """The least exposure of any cover of `needed` by at most `budget` ranges.

    Every optimal cover can use ranges whose ends are needed ports (shrinking a range to its
    outermost needed ports never uncovers one), so trying all such ranges is exhaustive.
    """
    ports = sorted(needed)
    candidates = [(a, b) for a in ports for b in ports if a <= b]
    best: int | None = None
    for k in range(1, budget + 1):
        for cover in itertools.combinations(candidates, k):
            covered = {p for lo, hi in cover for p in range(lo, hi + 1)}
            if needed <= covered:
                exposure = len(covered - needed)
                best = exposure if best is None else min(best, exposure)
    assert best is not None
    return best


@given(st.sets(st.integers(0, 40), min_size=1, max_size=7), st.integers(1, 3))
def test_compaction_is_optimal_against_a_brute_force_over_all_covers(
    needed: set[int], budget: int
) -> None:
    result = compact(needed, budget)
    covered = {p for lo, hi in result.ranges for p in range(lo, hi + 1)}
    # Then it covers every needed port, within the budget, with disjoint sorted ranges
    assert needed <= covered
    assert 1 <= len(result.ranges) <= budget
    assert all(lo <= hi for lo, hi in result.ranges)
    assert all(a[1] + 1 < b[0] for a, b in itertools.pairwise(result.ranges))
    # And it reports exactly what it exposes, which no other cover beats
    assert result.needed_ports == len(needed)
    assert result.exposed_ports == len(covered - needed)
    assert result.exposed_ports == brute_force_exposure(needed, budget)


@given(
    st.lists(
        st.tuples(st.integers(0, 65535), st.integers(0, 2000)).map(
            lambda t: (t[0], min(65535, t[0] + t[1]))
        ),
        min_size=1,
        max_size=30,
    ),
    st.integers(1, 8),
)
def test_compaction_accepts_ranges_and_never_exposes_more_than_one_range(
    needed: list[PortRange], budget: int
) -> None:
    result = compact(needed, budget)
    runs = merge_ranges(needed)
    assert result.needed_ports == sum(hi - lo + 1 for lo, hi in runs)
    assert result.exposed_ports <= single_range_exposure(needed)
    assert len(result.ranges) == min(budget, len(runs))
    for lo, hi in runs:  # every needed run lies inside one range of the cover
        assert any(a <= lo and hi <= b for a, b in result.ranges)


def test_the_lbc_nodeports_exposure_is_reported() -> None:
    # Given NodePorts 31000, 31001 and 32500 (a new Service far above the others)
    needed = [31000, 31001, 32500]
    # When one range is allowed (the LBC's min..max), 1497 unneeded ports are open
    assert single_range_exposure(needed) == 32500 - 31000 + 1 - 3
    # Then two ranges close the gap and expose nothing
    result = compact(needed, 2)
    assert result.ranges == ((31000, 31001), (32500, 32500))
    assert result.exposed_ports == 0


def test_compaction_splits_at_the_widest_gaps() -> None:
    result = compact([1, 2, 10, 11, 100, 101, 105], 3)
    assert result.ranges == ((1, 2), (10, 11), (100, 105))
    assert result.exposed_ports == 3


def test_merge_ranges_joins_overlaps_and_neighbours() -> None:
    assert merge_ranges([(5, 9), (1, 3), (4, 4), (20, 30), (25, 26)]) == [(1, 9), (20, 30)]
    assert merge_ranges([]) == []


def test_merge_ranges_rejects_a_reversed_range() -> None:
    with pytest.raises(ValueError, match="reversed port range 9-5"):
        merge_ranges([(9, 5)])


@pytest.mark.parametrize("budget", [0, -1])
def test_the_budget_must_allow_one_range(budget: int) -> None:
    with pytest.raises(ValueError, match="at least 1"):
        compact([80], budget)
