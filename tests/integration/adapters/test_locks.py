"""Group locks on moto's DynamoDB: sorted acquisition, lease takeover, renew and release."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from integration.adapters.tables import Clock, create_table
from moto import mock_aws
from sg_reconciler.adapters.locks import GroupLocks
from sg_reconciler.app.steps.release_locks import release_after_stop
from sg_reconciler.errors import InvalidPlan, LockBusy, LockLost

TABLE = "locks"
MACHINE = "arn:aws:states:eu-west-1:123456789012:stateMachine:apply"


@pytest.fixture
def dynamodb() -> Iterator[Any]:
    with mock_aws():
        client = boto3.client("dynamodb", region_name="eu-west-1")
        create_table(client, TABLE, "group_id")
        yield client


def test_acquire_takes_every_lock_in_sorted_order(dynamodb: Any) -> None:
    locks = GroupLocks(dynamodb, TABLE, Clock())
    assert locks.acquire(["sg-b", "sg-a", "sg-b"], "exec-1", 60) == ["sg-a", "sg-b"]
    assert locks.holder("sg-a") == "exec-1"
    assert locks.holder("sg-b") == "exec-1"


def test_a_held_lock_is_busy_for_another_execution_and_reentrant_for_its_holder(
    dynamodb: Any,
) -> None:
    clock = Clock()
    locks = GroupLocks(dynamodb, TABLE, clock)
    locks.acquire(["sg-a"], "exec-1", 60)
    with pytest.raises(LockBusy, match="sg-a is locked by exec-1"):
        locks.acquire(["sg-a", "sg-b"], "exec-2", 60)
    # Sorted order: exec-2 stopped at sg-a and took nothing after it.
    assert locks.holder("sg-b") == "nobody"
    assert locks.acquire(["sg-a"], "exec-1", 60) == ["sg-a"]


def test_an_expired_lease_is_taken_over_and_the_old_holder_loses_it(dynamodb: Any) -> None:
    # Given exec-1 holds sg-a with a 60 s lease and dies
    clock = Clock()
    locks = GroupLocks(dynamodb, TABLE, clock)
    locks.acquire(["sg-a"], "exec-1", 60)
    # When the lease has expired, exec-2 takes the lock
    clock.now += 61
    assert locks.acquire(["sg-a"], "exec-2", 60) == ["sg-a"]
    # Then exec-1 can neither renew nor release it
    with pytest.raises(LockLost):
        locks.renew("sg-a", "exec-1", 60)
    assert locks.release(["sg-a"], "exec-1") == []
    assert locks.holder("sg-a") == "exec-2"


def test_renew_extends_the_lease(dynamodb: Any) -> None:
    clock = Clock()
    locks = GroupLocks(dynamodb, TABLE, clock)
    locks.acquire(["sg-a"], "exec-1", 60)
    clock.now += 50
    locks.renew("sg-a", "exec-1", 60)
    clock.now += 50  # 100 s after acquiring: expired without the renewal
    with pytest.raises(LockBusy):
        locks.acquire(["sg-a"], "exec-2", 60)


def test_release_frees_only_the_holders_locks(dynamodb: Any) -> None:
    locks = GroupLocks(dynamodb, TABLE, Clock())
    locks.acquire(["sg-a"], "exec-1", 60)
    locks.acquire(["sg-b"], "exec-2", 60)
    assert locks.release(["sg-a", "sg-b"], "exec-1") == ["sg-a"]
    assert locks.holder("sg-a") == "nobody"
    assert locks.holder("sg-b") == "exec-2"


def test_a_stopped_execution_frees_exactly_its_own_locks_once(dynamodb: Any) -> None:
    # Given two executions holding locks, and a brake record in the same table
    locks = GroupLocks(dynamodb, TABLE, Clock())
    locks.acquire(["sg-a", "sg-b"], "exec-1", 900)
    locks.acquire(["sg-c"], "exec-2", 900)
    dynamodb.put_item(
        TableName=TABLE, Item={"group_id": {"S": "brake-held#x"}, "holder": {"S": "the brake"}}
    )
    # When exec-1 stops: its locks go, nothing else, and the janitor's record of its end stays
    stopped = {"detail": {"name": "exec-1", "status": "ABORTED", "stateMachineArn": MACHINE}}
    assert release_after_stop(stopped, locks, MACHINE, 900) == {
        "released": 2,
        "execution": "exec-1",
    }
    assert sorted(i["group_id"]["S"] for i in dynamodb.scan(TableName=TABLE)["Items"]) == [
        "brake-held#x",
        "sg-c",
        "stopped#exec-1",
    ]
    assert locks.stopped("exec-1") and not locks.stopped("exec-2")
    # And a second delivery of the same event (EventBridge delivers at least once) is a no-op
    assert release_after_stop(stopped, locks, MACHINE, 900)["released"] == 0


@pytest.mark.parametrize(
    ("status", "machine"),
    [("SUCCEEDED", MACHINE), ("RUNNING", MACHINE), ("ABORTED", MACHINE + "-other")],
)
def test_other_status_changes_free_nothing(dynamodb: Any, status: str, machine: str) -> None:
    locks = GroupLocks(dynamodb, TABLE, Clock())
    locks.acquire(["sg-a"], "exec-1", 900)
    event = {"detail": {"name": "exec-1", "status": status, "stateMachineArn": machine}}
    assert release_after_stop(event, locks, MACHINE, 900)["released"] == 0
    assert locks.holder("sg-a") == "exec-1"


def test_a_malformed_status_event_is_an_invalid_plan_error(dynamodb: Any) -> None:
    with pytest.raises(InvalidPlan, match="detail"):
        release_after_stop({"detail-type": "x"}, GroupLocks(dynamodb, TABLE, Clock()), MACHINE, 900)


def test_fence_passes_only_for_the_holder_of_a_live_lease(dynamodb: Any) -> None:
    # Given exec-1 holds sg-a, sg-b and sg-c with a 60 s lease
    clock = Clock()
    locks = GroupLocks(dynamodb, TABLE, clock)
    locks.acquire(["sg-a", "sg-b", "sg-c"], "exec-1", 60)
    # Then its fence passes (and extends the lease) while it holds the lock
    clock.now += 50
    locks.fence("sg-a", "exec-1", 60)
    clock.now += 50  # 100 s after acquiring: alive only by the fence's renewal
    locks.fence("sg-a", "exec-1", 60)
    # But not once the janitor freed a lock, another execution took one, or a lease ran out
    assert locks.release(["sg-b"], "exec-1") == ["sg-b"]
    with pytest.raises(LockLost):
        locks.fence("sg-b", "exec-1", 60)
    clock.now += 61
    assert locks.acquire(["sg-c"], "exec-2", 60) == ["sg-c"]
    with pytest.raises(LockLost):
        locks.fence("sg-c", "exec-1", 60)
    with pytest.raises(LockLost):  # expired and not taken: renew would pass, the fence not
        locks.fence("sg-a", "exec-1", 60)
    locks.renew("sg-a", "exec-1", 60)
