"""Group locks in DynamoDB: one item per security group, taken with a lease.

Two executions never change one group at once (invariant 7). Locks are taken in sorted
order, so two executions over overlapping groups cannot deadlock; a lease lets a dead
execution's locks be taken over once it expires (the item's TTL attribute cleans up later).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from botocore.exceptions import ClientError

from sg_reconciler.adapters.aws import typed_aws_errors
from sg_reconciler.errors import LockBusy, LockLost

STOPPED_PREFIX = "stopped#"  # the janitor's record of an ended execution: no lock of it
_FREE_OR_MINE = "attribute_not_exists(group_id) OR lease_expires_at < :now OR holder = :me"


def _conditional(call: Callable[..., object], **request: Any) -> bool:
    """Run a conditional DynamoDB write; False when its condition did not hold."""
    with typed_aws_errors():
        try:
            call(**request)
        except ClientError as err:
            if err.response.get("Error", {}).get("Code") != "ConditionalCheckFailedException":
                raise
            return False
    return True


class GroupLocks:
    def __init__(self, dynamodb: Any, table: str, clock: Callable[[], float] = time.time) -> None:
        self.dynamodb, self.table, self.clock = dynamodb, table, clock

    def holder(self, group_id: str) -> str:
        with typed_aws_errors():
            item = self.dynamodb.get_item(
                TableName=self.table, Key={"group_id": {"S": group_id}}, ConsistentRead=True
            ).get("Item", {})
        return str(item.get("holder", {}).get("S", "nobody"))

    def acquire(self, group_ids: Sequence[str], holder: str, lease_seconds: int) -> list[str]:
        """Take (or renew) every lock in sorted order; LockBusy names the first one held elsewhere."""
        taken = []
        for group_id in sorted(set(group_ids)):
            now = int(self.clock())
            if not _conditional(
                self.dynamodb.put_item,
                TableName=self.table,
                Item={
                    "group_id": {"S": group_id},
                    "holder": {"S": holder},
                    "lease_expires_at": {"N": str(now + lease_seconds)},
                },
                ConditionExpression=_FREE_OR_MINE,
                ExpressionAttributeValues={":now": {"N": str(now)}, ":me": {"S": holder}},
            ):
                raise LockBusy(f"{group_id} is locked by {self.holder(group_id)}")
            taken.append(group_id)
        return taken

    def renew(self, group_id: str, holder: str, lease_seconds: int) -> None:
        """Extend this holder's lease before a write; LockLost if another execution took it."""
        until = int(self.clock()) + lease_seconds
        if not _conditional(
            self.dynamodb.update_item,
            TableName=self.table,
            Key={"group_id": {"S": group_id}},
            UpdateExpression="SET lease_expires_at = :until",
            ConditionExpression="holder = :me",
            ExpressionAttributeValues={":me": {"S": holder}, ":until": {"N": str(until)}},
        ):
            raise LockLost(f"{group_id} is no longer locked by {holder}")

    def fence(self, group_id: str, holder: str, lease_seconds: int) -> None:
        """The fencing check before each attempt of a revoke or modify: renew only a live
        lease of `holder`. The holder is the execution's name, unique for 90 days, so the
        condition is the fencing token: a lock freed by the janitor (item gone), taken over
        (another holder) or run out (lease past) fails it, and the write is not made."""
        now = int(self.clock())
        if not _conditional(
            self.dynamodb.update_item,
            TableName=self.table,
            Key={"group_id": {"S": group_id}},
            UpdateExpression="SET lease_expires_at = :until",
            ConditionExpression="holder = :me AND lease_expires_at >= :now",
            ExpressionAttributeValues={
                ":me": {"S": holder},
                ":now": {"N": str(now)},
                ":until": {"N": str(now + lease_seconds)},
            },
        ):
            raise LockLost(
                f"{group_id} is no longer locked by {holder} (freed, expired or taken over): "
                "no call made"
            )

    def release(self, group_ids: Sequence[str], holder: str) -> list[str]:
        """Delete this holder's locks; locks held by others are left alone."""
        released = []
        for group_id in sorted(set(group_ids)):
            if _conditional(
                self.dynamodb.delete_item,
                TableName=self.table,
                Key={"group_id": {"S": group_id}},
                ConditionExpression="holder = :me",
                ExpressionAttributeValues={":me": {"S": holder}},
            ):
                released.append(group_id)
        return released

    def release_held_by(self, holder: str) -> list[str]:
        """Delete every lock `holder` still has (a stopped execution's), wherever it is: a scan,
        since a stopped execution cannot say which groups it held; the table is small."""
        pages = self.dynamodb.get_paginator("scan").paginate(
            TableName=self.table,
            FilterExpression="holder = :me",
            ExpressionAttributeValues={":me": {"S": holder}},
            ProjectionExpression="group_id",
            ConsistentRead=True,
        )
        with typed_aws_errors():
            held = [item["group_id"]["S"] for page in pages for item in page.get("Items", [])]
        return self.release(held, holder)

    def mark_stopped(self, holder: str, lease_seconds: int) -> None:
        """The janitor's record that `holder`'s execution ended, written before it frees the
        locks; it expires with a lease (the TTL attribute), long after any lock step ends."""
        now = int(self.clock())
        with typed_aws_errors():
            self.dynamodb.put_item(
                TableName=self.table,
                Item={
                    "group_id": {"S": STOPPED_PREFIX + holder},
                    "holder": {"S": "the lock janitor"},
                    "lease_expires_at": {"N": str(now + lease_seconds)},
                },
            )

    def stopped(self, holder: str) -> bool:
        with typed_aws_errors():
            item = self.dynamodb.get_item(
                TableName=self.table,
                Key={"group_id": {"S": STOPPED_PREFIX + holder}},
                ConsistentRead=True,
            ).get("Item")
        return item is not None
