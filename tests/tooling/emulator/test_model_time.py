"""The model of a Map's items run `concurrency` at a time (`local/model_time.makespan`), with
which the rollback's time is measured (benchmarks/bench_rollback.py)."""

from __future__ import annotations

import pytest
from sg_reconciler_tools.local.model_time import makespan


@pytest.mark.parametrize(
    ("durations", "concurrency", "expected"),
    [
        ([], 3, 0.0),
        ([5.0], 3, 5.0),
        ([3.0, 3.0, 3.0, 3.0], 3, 6.0),  # the fourth waits for the first slot
        ([10.0, 1.0, 1.0, 1.0], 2, 10.0),  # short items fill the other slot meanwhile
        ([2.0, 2.0, 2.0], 1, 6.0),  # one at a time: the sum
    ],
)
def test_items_start_in_order_as_soon_as_a_slot_is_free(
    durations: list[float], concurrency: int, expected: float
) -> None:
    assert makespan(durations, concurrency) == expected
