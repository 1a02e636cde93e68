"""Pacing at EC2's rate limit and the batching of phases: pure rules, checked directly."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sg_reconciler.core.pacing import (
    BURST,
    EC2_READ_BUCKET,
    ELBV2_READ_BUCKET,
    MAX_CONCURRENCY,
    full_jitter,
    pacing_for,
    read_pace,
)
from sg_reconciler.core.phases import batch_refs, batched, phase_batches


def test_the_default_rate_runs_three_items_that_share_the_burst() -> None:
    pacing = pacing_for(5.0)
    assert pacing.concurrency == 3
    first, later = pacing.for_item(0, 25), pacing.for_item(5, 25)
    assert first.interval == pytest.approx(0.6) and first.free_writes == BURST // 3
    assert later.free_writes == 0
    # A phase of one batch runs alone: it may make the whole rate and the whole burst
    alone = pacing.for_item(0, 1)
    assert alone.interval == pytest.approx(0.2) and alone.free_writes == BURST


@given(st.floats(0.5, 1000), st.integers(1, 500))
def test_items_running_together_make_exactly_the_rate(rate: float, batches: int) -> None:
    pacing = pacing_for(rate)
    assert 1 <= pacing.concurrency <= MAX_CONCURRENCY
    together = min(pacing.concurrency, batches)
    item = pacing.for_item(0, batches)
    assert together / item.interval == pytest.approx(rate)
    # and the first round never spends more than the burst
    assert together * item.free_writes <= BURST


def test_a_rate_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        pacing_for(0)


@given(st.integers(0, 12), st.floats(0, 1))
def test_full_jitter_is_uniform_under_the_capped_exponential(attempt: int, draw: float) -> None:
    # The draw scales the whole span: a draw of 1 waits the cap, never more
    wait = full_jitter(attempt, lambda: draw)
    assert wait == pytest.approx(draw * min(20.0, 0.5 * 2**attempt))


def items(count: int, size: int = 10) -> list[dict[str, object]]:
    return [{"group_id": f"sg-{i:05d}", "pad": "x" * size} for i in range(count)]


@given(st.integers(0, 400), st.integers(1, 10))
def test_batches_are_even_at_most_twenty_and_a_multiple_of_the_concurrency(
    count: int, parallel: int
) -> None:
    found = batched(items(count), parallel=parallel)
    assert [i for b in found for i in b] == items(count)  # every item once, in order
    sizes = [len(b) for b in found]
    assert all(1 <= s <= 20 for s in sizes)
    if sizes:
        assert max(sizes) - min(sizes) <= 1
        assert len(found) % parallel == 0 or len(found) == count  # fewer items than slots


def test_a_batch_never_exceeds_its_byte_budget() -> None:
    found = batched(items(10, size=1000), max_bytes=3000)
    assert all(len(json.dumps(b)) <= 3000 + 100 for b in found) and len(found) >= 4


def test_the_state_carries_batch_numbers_and_each_ordered_calls_settle() -> None:
    doc = {
        "authorize": items(45),
        "ordered": [
            {"group_id": "sg-q", "steps": [], "settle_seconds": 0},
            {"group_id": "sg-q", "steps": [], "settle_seconds": 10},
        ],
        "revoke": items(3),
    }
    refs = batch_refs(phase_batches(doc, parallel=3))
    assert refs == {
        "authorize": [0, 1, 2],
        "ordered": [{"batch": 0, "settle_seconds": 0}, {"batch": 1, "settle_seconds": 10}],
        "revoke": [0, 1, 2],
    }
    # The references stay small however many groups change: a few bytes per batch
    big = batch_refs(phase_batches({"authorize": items(10_000), "revoke": items(10_000)}, 3))
    assert len(json.dumps(big)) < 8 * 1024


def test_the_default_read_pace_leaves_nine_tenths_of_each_documented_bucket() -> None:
    pace = read_pace()
    elbv2, ec2 = pace.bucket("elbv2"), pace.bucket("ec2")
    assert elbv2 is not None and ec2 is not None
    # ELBv2 Describe*: 40 tokens, 10 a second; EC2 reads: 100 tokens, 20 a second per API
    assert (elbv2.per_second, elbv2.burst) == (pytest.approx(1.0), 4)
    assert (ec2.per_second, ec2.burst) == (pytest.approx(2.0), 10)
    assert elbv2.per_second <= 0.1 * ELBV2_READ_BUCKET[1] and elbv2.burst <= 0.1 * 40
    assert ec2.per_second <= 0.1 * EC2_READ_BUCKET[1] and ec2.burst <= 0.1 * 100
    assert pace.bucket("ssm") is None  # a few reads an invocation: not paced


@given(st.floats(0.1, 1000))
def test_every_bucket_gets_the_same_share_and_at_least_one_token(rate: float) -> None:
    pace = read_pace(rate)
    for service, (capacity, refill) in (("elbv2", ELBV2_READ_BUCKET), ("ec2", EC2_READ_BUCKET)):
        bucket = pace.bucket(service)
        assert bucket is not None
        assert bucket.per_second == pytest.approx(refill * rate / 10)
        assert 1 <= bucket.burst <= max(1, capacity * rate / 10)


def test_a_read_pace_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        read_pace(0)
