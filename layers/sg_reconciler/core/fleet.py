"""What one deployment (an account and region) reports to the fleet, and what in it needs an
operator: the same judgement for the central table, its alarm and `sg-reconciler status`.

A deployment's outcomes: each apply execution's end (its status, and for a failure the
error the workflow ended with, e.g. `RolledBack`), and its alarms' state changes (the brake
holding revokes, a refused or failed plan). An execution the schedule started is drift the
schedule found (it only starts one when the account differs from the policy)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

OUTCOME_SOURCE = "sg-reconciler"
OUTCOME_DETAIL_TYPE = "SG Reconciler Execution Outcome"
ALARM_DETAIL_TYPE = "CloudWatch Alarm State Change"

# The workflow's ends that leave nothing for an operator (statemachine: "Changes applied",
# "Nothing to change", "Revokes left to the next run" succeed).
_WELL = frozenset({"SUCCEEDED", "RUNNING"})
# Rolled back: the groups are as they were, the change is not made; an operator reads why.
_ROLLED_BACK = "RolledBack"


@dataclass(frozen=True)
class ExecutionOutcome:
    """How one apply execution ended, as its deployment reports it to the fleet."""

    account: str
    region: str
    stack: str
    execution: str
    status: str
    error: str = ""
    cause: str = ""
    scheduled: bool = False  # started by the schedule: drift it found
    stopped_at: str = ""

    def needs_attention(self) -> bool:
        return self.status not in _WELL

    def summary(self) -> str:
        what = self.status if not self.error else f"{self.status} ({self.error})"
        if self.error == _ROLLED_BACK:
            what = "rolled back to the old rules"
        elif self.status == "SUCCEEDED":
            what = "applied"
        return (
            f"{what}{', drift repaired' if self.scheduled and self.status == 'SUCCEEDED' else ''}"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "account": self.account,
            "region": self.region,
            "stack": self.stack,
            "execution": self.execution,
            "status": self.status,
            "error": self.error,
            "cause": self.cause,
            "scheduled": self.scheduled,
            "stopped_at": self.stopped_at,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ExecutionOutcome:
        return cls(
            account=_text(data, "account"),
            region=_text(data, "region"),
            stack=_text(data, "stack"),
            execution=_text(data, "execution"),
            status=_text(data, "status"),
            error=str(data.get("error") or ""),
            cause=str(data.get("cause") or ""),
            scheduled=bool(data.get("scheduled")),
            stopped_at=str(data.get("stopped_at") or ""),
        )


def execution_outcome(
    description: Mapping[str, Any], *, account: str, region: str, stack: str
) -> ExecutionOutcome:
    """The outcome of a DescribeExecution answer (the status-change event carries no error)."""
    scheduled = False
    try:
        trigger = json.loads(str(description.get("input") or "{}")).get("trigger") or {}
        scheduled = bool(trigger.get("scheduled"))
    except (ValueError, AttributeError):
        scheduled = False
    stop: Any = description.get("stopDate")  # a datetime from boto3, text from a test
    return ExecutionOutcome(
        account=account,
        region=region,
        stack=stack,
        execution=str(description.get("name") or ""),
        status=str(description.get("status") or ""),
        error=str(description.get("error") or ""),
        cause=str(description.get("cause") or "")[:1000],
        scheduled=scheduled,
        stopped_at=_utc(stop) if isinstance(stop, datetime) else str(stop or ""),
    )


def _utc(moment: datetime) -> str:
    """In UTC, so that stored times compare as text: boto3 gives the caller's local offset,
    and two offsets (a daylight-saving change) would order them wrongly."""
    return (moment.astimezone(UTC) if moment.tzinfo is not None else moment).isoformat()


@dataclass(frozen=True)
class AlarmChange:
    """A deployment's alarm changing state (the brake holding, a plan refused or failed)."""

    account: str
    region: str
    alarm: str
    state: str  # OK | ALARM | INSUFFICIENT_DATA
    reason: str = ""

    @property
    def firing(self) -> bool:
        return self.state == "ALARM"


def alarm_change(event: Mapping[str, Any]) -> AlarmChange:
    """CloudWatch's "Alarm State Change" event, forwarded as it is by the member's rule."""
    detail = event.get("detail") or {}
    state = detail.get("state") or {}
    return AlarmChange(
        account=str(event.get("account") or ""),
        region=str(event.get("region") or ""),
        alarm=str(detail.get("alarmName") or ""),
        state=str(state.get("value") or ""),
        reason=str(state.get("reason") or "")[:500],
    )


@dataclass
class DeploymentStatus:
    """One account and region as the fleet sees it: its last execution and its alarms."""

    account: str
    region: str
    last: ExecutionOutcome | None = None
    alarms: dict[str, str] = field(default_factory=dict)  # alarm name -> state
    last_drift: str = ""  # when the schedule last repaired drift

    def record(self, outcome: ExecutionOutcome | AlarmChange) -> None:
        if isinstance(outcome, AlarmChange):
            self.alarms[outcome.alarm] = outcome.state
            return
        if self.last is None or outcome.stopped_at >= self.last.stopped_at:
            self.last = outcome
        if outcome.scheduled and outcome.status == "SUCCEEDED":
            self.last_drift = max(self.last_drift, outcome.stopped_at)

    def attention(self) -> list[str]:
        """Why an operator should look, or nothing."""
        reasons = [
            f"alarm {name} is firing"
            for name, state in sorted(self.alarms.items())
            if state == "ALARM"
        ]
        if self.last is not None and self.last.needs_attention():
            reasons.insert(0, f"last execution {self.last.execution}: {self.last.summary()}")
        return reasons


def _text(data: Mapping[str, Any], key: str) -> str:
    value = data.get(key)
    if not isinstance(value, str) or not value:
        raise ValueError(f"outcome: {key} must be a non-empty string, got {value!r}")
    return value
