"""The fleet's two AWS ends: a member reports an execution's outcome to the central bus, and
the central stack keeps each deployment's last outcomes in its table."""

from __future__ import annotations

import json
from typing import Any

from sg_reconciler.core.fleet import (
    OUTCOME_DETAIL_TYPE,
    OUTCOME_SOURCE,
    AlarmChange,
    DeploymentStatus,
    ExecutionOutcome,
)
from sg_reconciler.errors import ReconcilerError


class FleetUnreachable(ReconcilerError):
    """The central bus refused the outcome; EventBridge retries the reporter."""


def report_outcome(events: Any, bus_arn: str, outcome: ExecutionOutcome) -> None:
    """PutEvents to the central bus (its policy admits the organization's accounts)."""
    answer = events.put_events(
        Entries=[
            {
                "Source": OUTCOME_SOURCE,
                "DetailType": OUTCOME_DETAIL_TYPE,
                "Detail": json.dumps(outcome.to_dict()),
                "EventBusName": bus_arn,
                "Resources": [],
            }
        ]
    )
    if answer.get("FailedEntryCount"):
        entry = answer["Entries"][0]
        raise FleetUnreachable(f"{entry.get('ErrorCode')}: {entry.get('ErrorMessage')}")


class FleetTable:
    """One item per account and region: the last execution, the alarms' states, last drift."""

    def __init__(self, dynamodb: Any, table: str) -> None:
        self.dynamodb, self.table = dynamodb, table

    def load(self, account: str, region: str) -> DeploymentStatus:
        item = self.dynamodb.get_item(
            TableName=self.table,
            Key={"deployment": {"S": f"{account}/{region}"}},
            ConsistentRead=True,
        ).get("Item")
        return _status(item) if item else DeploymentStatus(account, region)

    def record(self, outcome: ExecutionOutcome | AlarmChange) -> DeploymentStatus:
        status = self.load(outcome.account, outcome.region)
        status.record(outcome)
        self.dynamodb.put_item(TableName=self.table, Item=_item(status))
        return status

    def all(self) -> list[DeploymentStatus]:
        statuses: list[DeploymentStatus] = []
        for page in self.dynamodb.get_paginator("scan").paginate(TableName=self.table):
            statuses += [_status(item) for item in page.get("Items", [])]
        return sorted(statuses, key=lambda s: (s.account, s.region))


def _item(status: DeploymentStatus) -> dict[str, Any]:
    item: dict[str, Any] = {
        "deployment": {"S": f"{status.account}/{status.region}"},
        "account": {"S": status.account},
        "region": {"S": status.region},
        "alarms": {"S": json.dumps(status.alarms, sort_keys=True)},
        "needs_attention": {"BOOL": bool(status.attention())},
    }
    if status.last is not None:
        item["last_execution"] = {"S": json.dumps(status.last.to_dict(), sort_keys=True)}
    if status.last_drift:
        item["last_drift"] = {"S": status.last_drift}
    return item


def _status(item: dict[str, Any]) -> DeploymentStatus:
    last = item.get("last_execution", {}).get("S")
    return DeploymentStatus(
        account=item["account"]["S"],
        region=item["region"]["S"],
        last=ExecutionOutcome.from_dict(json.loads(last)) if last else None,
        alarms=json.loads(item.get("alarms", {}).get("S") or "{}"),
        last_drift=item.get("last_drift", {}).get("S", ""),
    )
