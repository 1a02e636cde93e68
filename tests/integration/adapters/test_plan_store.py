"""The plan store on moto's DynamoDB, and the guard that keeps execution inputs small."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from integration.adapters.tables import create_table
from moto import mock_aws
from sg_reconciler.adapters import plan_store as plan_store_module
from sg_reconciler.adapters.executions import MAX_RESTARTS, start_execution
from sg_reconciler.adapters.plan_store import PlanStore
from sg_reconciler.errors import InvalidPlan

TABLE = "plans"


@pytest.fixture
def store() -> Iterator[PlanStore]:
    with mock_aws():
        dynamodb = boto3.client("dynamodb", region_name="eu-west-1")
        create_table(dynamodb, TABLE, "plan", "part")
        yield PlanStore(dynamodb, TABLE, clock=lambda: 1_000_000.0)


def test_groups_round_trip_over_several_parts(
    store: PlanStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(plan_store_module, "GROUPS_PER_PART", 7)
    groups = [f"sg-{i:05d}" for i in range(30, 0, -1)] + ["sg-00003"]
    assert store.put_groups("p1", groups) == 30
    assert store.groups("p1", 30) == sorted(set(groups))


def test_missing_or_partial_groups_are_an_invalid_plan(store: PlanStore) -> None:
    with pytest.raises(InvalidPlan, match="holds 0 group"):
        store.groups("nope")
    store.put_groups("p1", ["sg-a", "sg-b"])
    with pytest.raises(InvalidPlan, match="not the 3 the execution expects"):
        store.groups("p1", 3)


def test_a_phase_is_replaced_whole_and_read_by_batch(store: PlanStore) -> None:
    first = [[{"group_id": f"sg-{b}{i}"} for i in range(3)] for b in "abcd"]
    assert store.put_phase("exec-1", "revoke", first) == 4
    assert store.batch("exec-1", "revoke", 2) == first[2]
    # A re-plan stores fewer batches: the old ones are gone, not read again
    assert store.put_phase("exec-1", "revoke", first[:1]) == 1
    assert store.phase("exec-1", "revoke") == first[0]
    with pytest.raises(InvalidPlan, match="no batch revoke #3"):
        store.batch("exec-1", "revoke", 3)
    # Another phase and another execution are separate
    store.put_phase("exec-1", "authorize", first[1:2])
    assert store.phase("exec-2", "revoke") == [] and store.phase("exec-1", "authorize") == first[1]


class Recording:
    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def start_execution(self, **request: Any) -> dict[str, Any]:
        self.calls.append(request)
        return {}


def test_an_oversized_execution_input_is_refused_before_any_call() -> None:
    sfn = Recording()
    payload = {"plan_id": "x", "trigger": {"event_ids": ["e" * 100] * 400}}
    with pytest.raises(InvalidPlan, match="over 32768"):
        start_execution(sfn, "arn:aws:states:eu-west-1:1:stateMachine:m", "x", payload)
    assert sfn.calls == []
    started = start_execution(
        sfn, "arn:aws:states:eu-west-1:1:stateMachine:m", "x", {"plan_id": "x"}
    )
    assert started == "started"


class NamesTaken:
    """Step Functions where `taken` names exist already, each with its status."""

    def __init__(self, taken: dict[str, str]) -> None:
        self.taken = taken
        self.tried: list[str] = []

    def start_execution(self, **request: Any) -> dict[str, Any]:
        self.tried.append(request["name"])
        if request["name"] in self.taken:
            error = {"Error": {"Code": "ExecutionAlreadyExists", "Message": "taken"}}
            raise ClientError(error, "StartExecution")  # type: ignore[arg-type]
        return {}

    def describe_execution(self, executionArn: str) -> dict[str, Any]:
        return {"status": self.taken[executionArn.rsplit(":", 1)[1]]}


MACHINE = "arn:aws:states:eu-west-1:1:stateMachine:m"


def test_a_plan_whose_executions_ended_restarts_until_the_window_has_no_name_left() -> None:
    # Given "x" failed and its first restart succeeded: the next start is the second restart
    sfn = NamesTaken({"x": "FAILED", "x-r1": "SUCCEEDED"})
    assert start_execution(sfn, MACHINE, "x", {"plan_id": "x"}) == "started"
    assert sfn.tried == ["x", "x-r1", "x-r2"]
    # Given a restart still running: the start is a duplicate
    sfn = NamesTaken({"x": "FAILED", "x-r1": "RUNNING"})
    assert start_execution(sfn, MACHINE, "x", {"plan_id": "x"}) == "duplicate"
    # Given every name of the window taken by ended executions: the limit, nothing started
    names = ["x", *(f"x-r{n}" for n in range(1, MAX_RESTARTS + 1))]
    sfn = NamesTaken(dict.fromkeys(names, "FAILED"))
    assert start_execution(sfn, MACHINE, "x", {"plan_id": "x"}) == "restart limit"
    assert sfn.tried == names
