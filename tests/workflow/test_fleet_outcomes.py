"""What a deployment reports to the fleet and what in it needs an operator (core/fleet.py)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone

import pytest
from sg_reconciler.core.fleet import (
    AlarmChange,
    DeploymentStatus,
    ExecutionOutcome,
    alarm_change,
    execution_outcome,
)


def described(status: str, error: str = "", scheduled: bool = False, minute: int = 0) -> dict:
    trigger = {"event_ids": ["e1"], **({"scheduled": True} if scheduled else {})}
    return {
        "name": f"plan-{minute}",
        "status": status,
        "error": error,
        "cause": "AuthorizeSecurityGroupIngress denied" if error else "",
        "input": json.dumps({"plan_id": "p", "trigger": trigger}),
        "stopDate": datetime(2026, 12, 2, 12, minute, tzinfo=UTC),
    }


def outcome(
    status: str, error: str = "", scheduled: bool = False, minute: int = 0
) -> ExecutionOutcome:
    return execution_outcome(
        described(status, error, scheduled, minute),
        account="111111111111",
        region="eu-west-1",
        stack="s",
    )


def test_an_execution_that_applied_needs_nothing_and_one_rolled_back_needs_an_operator() -> None:
    applied = outcome("SUCCEEDED")
    rolled_back = outcome("FAILED", "RolledBack")
    assert not applied.needs_attention() and applied.summary() == "applied"
    assert rolled_back.needs_attention()
    assert rolled_back.summary() == "rolled back to the old rules"
    assert outcome("ABORTED").summary() == "ABORTED"
    assert outcome("FAILED", "RevokeIncomplete").summary() == "FAILED (RevokeIncomplete)"


def test_a_scheduled_execution_is_drift_the_schedule_repaired() -> None:
    repaired = outcome("SUCCEEDED", scheduled=True, minute=5)
    assert repaired.scheduled and repaired.summary() == "applied, drift repaired"
    status = DeploymentStatus("111111111111", "eu-west-1")
    status.record(repaired)
    status.record(outcome("SUCCEEDED", minute=7))  # event-driven: not drift
    assert status.last_drift == repaired.stopped_at
    assert status.last is not None and status.last.execution == "plan-7"


def test_the_newest_execution_decides_and_a_late_older_report_does_not_overwrite_it() -> None:
    status = DeploymentStatus("111111111111", "eu-west-1")
    status.record(outcome("FAILED", "RolledBack", minute=1))
    assert status.attention() == ["last execution plan-1: rolled back to the old rules"]
    status.record(outcome("SUCCEEDED", minute=3))
    assert status.attention() == []
    status.record(outcome("FAILED", "RolledBack", minute=2))  # delivered late, out of order
    assert status.attention() == []


def test_a_firing_alarm_needs_attention_until_it_is_ok_again() -> None:
    event = {
        "account": "111111111111",
        "region": "eu-west-1",
        "detail-type": "CloudWatch Alarm State Change",
        "detail": {"alarmName": "s-RevokesHeldAlarm-1", "state": {"value": "ALARM", "reason": "x"}},
    }
    change = alarm_change(event)
    assert change == AlarmChange("111111111111", "eu-west-1", "s-RevokesHeldAlarm-1", "ALARM", "x")
    status = DeploymentStatus("111111111111", "eu-west-1")
    status.record(change)
    assert status.attention() == ["alarm s-RevokesHeldAlarm-1 is firing"]
    event["detail"]["state"]["value"] = "OK"
    status.record(alarm_change(event))
    assert status.attention() == []


def test_an_outcome_round_trips_and_a_report_without_its_account_is_refused() -> None:
    sent = outcome("FAILED", "RolledBack", scheduled=True)
    assert ExecutionOutcome.from_dict(json.loads(json.dumps(sent.to_dict()))) == sent
    with pytest.raises(ValueError, match="account"):
        ExecutionOutcome.from_dict({**sent.to_dict(), "account": ""})


def test_an_unreadable_execution_input_is_not_a_scheduled_run() -> None:
    description = {**described("SUCCEEDED"), "input": "not json"}
    assert not execution_outcome(description, account="1", region="r", stack="s").scheduled


def test_stop_times_are_kept_in_utc_so_they_order_as_text() -> None:
    # boto3 gives stop times in the caller's zone; across a daylight-saving change the later
    # one can read as the earlier (01:10+00:00 is after 01:30+01:00)
    summer = timezone(timedelta(hours=1))
    first = execution_outcome(
        {
            "name": "a",
            "status": "SUCCEEDED",
            "stopDate": datetime(2026, 10, 25, 1, 30, tzinfo=summer),
        },
        account="1",
        region="r",
        stack="s",
    )
    later = execution_outcome(
        {"name": "b", "status": "SUCCEEDED", "stopDate": datetime(2026, 10, 25, 1, 10, tzinfo=UTC)},
        account="1",
        region="r",
        stack="s",
    )
    assert first.stopped_at == "2026-10-25T00:30:00+00:00" and later.stopped_at > first.stopped_at
