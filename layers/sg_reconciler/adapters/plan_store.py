"""The plan store: a plan's groups and per-phase batches of calls, outside the execution state.

Step Functions caps a state at 256 KiB and `States.DataLimitExceeded` is terminal (no Catch
matches it), so the execution carries references and counts only (invariant 13, docs/
architecture.md). One DynamoDB table, key (plan, part): `groups#0000...` hold the group ids
of a plan, `<phase>#0000...` the batches of one execution's phases. DynamoDB over S3: the
stack already uses it, items are read by exact key in a few ms, a TTL clears old plans, and
`sam delete` removes a table whatever it holds (a bucket must be emptied first).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from sg_reconciler.adapters.aws import typed_aws_errors
from sg_reconciler.errors import InvalidPlan

KEEP_SECONDS = 7 * 86_400  # a plan outlives its execution (at most a day) by a week
GROUPS_PER_PART = 2_000
PHASES = ("authorize", "ordered", "revoke")
Batch = list[dict[str, Any]]


def stored_groups(plan: str, ids: list[str], expected: int | None) -> list[str]:
    """A plan's group ids as a PlanStorage read them: all `expected` of them, or InvalidPlan."""
    if not ids or (expected is not None and len(ids) != expected):
        raise InvalidPlan(
            f"the plan store holds {len(ids)} group(s) for {plan}"
            + ("" if expected is None else f", not the {expected} the execution expects")
            + ": it expired or was never written"
        )
    return ids


class PlanStore:
    def __init__(self, dynamodb: Any, table: str, clock: Callable[[], float] = time.time) -> None:
        self.dynamodb, self.table, self.clock = dynamodb, table, clock

    # Groups ----------------------------------------------------------------------------

    def put_groups(self, plan: str, groups: Sequence[str]) -> int:
        """Store a plan's group ids; returns how many (the state carries the count only)."""
        ids = sorted(set(groups))
        chunks = [ids[i : i + GROUPS_PER_PART] for i in range(0, len(ids), GROUPS_PER_PART)]
        self._put_parts(plan, "groups", chunks)
        return len(ids)

    def groups(self, plan: str, expected: int | None = None) -> list[str]:
        ids = [g for part in self._parts(plan, "groups") for g in part]
        return stored_groups(plan, ids, expected)

    # Phases ----------------------------------------------------------------------------

    def put_phase(self, plan: str, phase: str, batches: Sequence[Batch]) -> int:
        """Replace one phase's batches; returns how many there are."""
        self._delete_parts(plan, phase)
        self._put_parts(plan, phase, batches)
        return len(batches)

    def batch(self, plan: str, phase: str, index: int) -> Batch:
        with typed_aws_errors():
            item = self.dynamodb.get_item(
                TableName=self.table,
                Key={"plan": {"S": plan}, "part": {"S": _part(phase, index)}},
                ConsistentRead=True,
            ).get("Item")
        if item is None:
            raise InvalidPlan(f"the plan store has no batch {phase} #{index} of {plan}")
        return list(_body(item))

    def put_batch(self, plan: str, phase: str, index: int, batch: Batch) -> None:
        """Write (or replace) one batch: one PutItem, so Map items write their own parts."""
        with typed_aws_errors():
            self.dynamodb.put_item(TableName=self.table, Item=self._item(plan, phase, index, batch))

    def phase(self, plan: str, phase: str) -> Batch:
        """Every item of a phase, in batch order."""
        return [entry for part in self._parts(plan, phase) for entry in part]

    # Items -----------------------------------------------------------------------------

    def _put_parts(self, plan: str, prefix: str, parts: Sequence[Sequence[Any]]) -> None:
        requests = [
            {"PutRequest": {"Item": self._item(plan, prefix, index, part)}}
            for index, part in enumerate(parts)
        ]
        self._write(requests)

    def _item(self, plan: str, prefix: str, index: int, part: Sequence[Any]) -> dict[str, Any]:
        return {
            "plan": {"S": plan},
            "part": {"S": _part(prefix, index)},
            "body": {"S": json.dumps(list(part), separators=(",", ":"))},
            "expires_at": {"N": str(int(self.clock()) + KEEP_SECONDS)},
        }

    def _delete_parts(self, plan: str, prefix: str) -> None:
        keys = [
            {"DeleteRequest": {"Key": {"plan": {"S": plan}, "part": item["part"]}}}
            for item in self._query(plan, prefix, keys_only=True)
        ]
        self._write(keys)

    def _write(self, requests: list[dict[str, Any]]) -> None:
        """BatchWriteItem in 25s, resending what DynamoDB leaves unprocessed."""
        for start in range(0, len(requests), 25):
            pending: dict[str, Any] = {self.table: requests[start : start + 25]}
            for attempt in range(8):
                with typed_aws_errors():
                    pending = self.dynamodb.batch_write_item(RequestItems=pending).get(
                        "UnprocessedItems", {}
                    )
                if not pending:
                    break
                time.sleep(min(0.05 * 2**attempt, 1.0))
            if pending:
                raise InvalidPlan(f"the plan store left {len(pending[self.table])} write(s) undone")

    def _parts(self, plan: str, prefix: str) -> Iterator[list[Any]]:
        for item in self._query(plan, prefix):
            yield list(_body(item))

    def _query(self, plan: str, prefix: str, keys_only: bool = False) -> Iterator[dict[str, Any]]:
        request: dict[str, Any] = {
            "TableName": self.table,
            "KeyConditionExpression": "#plan = :plan AND begins_with(#part, :prefix)",
            "ExpressionAttributeNames": {"#plan": "plan", "#part": "part"},
            "ExpressionAttributeValues": {":plan": {"S": plan}, ":prefix": {"S": prefix + "#"}},
            "ConsistentRead": True,
        }
        if keys_only:
            request["ProjectionExpression"] = "#part"
        pages = self.dynamodb.get_paginator("query").paginate(**request)
        with typed_aws_errors():
            for page in pages:
                yield from page.get("Items", [])


def _part(prefix: str, index: int) -> str:
    return f"{prefix}#{index:06d}"


def _body(item: dict[str, Any]) -> list[Any]:
    body = json.loads(item["body"]["S"])
    if not isinstance(body, list):
        raise InvalidPlan(f"plan store part {item['part']['S']} is not a list")
    return body
