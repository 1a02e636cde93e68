"""What one deployment keeps about itself: the claim on its owner name and brake releases.

The owner claim is an SSM parameter the stack creates, named for the owner
(`/sg-reconciler/owners/<owner>`) and holding the stack id: a second stack with the same
owner fails to deploy, and a run refuses to start when the claim names another stack
(invariant 10). Brake releases live in the lock table, one item per released set of
revocations, expiring after a day (invariant 12), and so does the brake's window, one item
per scope (the deployment, each binding), expiring when the window ends (invariant 14).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

from sg_reconciler.adapters.aws import typed_aws_errors
from sg_reconciler.core.brake import WindowCount
from sg_reconciler.errors import BadConfiguration

HELD_PREFIX = "brake-held#"
RELEASE_PREFIX = "brake-release#"
WINDOW_PREFIX = "brake-window#"
RECORD_SECONDS = 86_400


class BrakeNotHeld(Exception):
    """A release names revocations the brake does not hold: nothing is written."""


@dataclass(frozen=True)
class HeldRevokes:
    fingerprint: str
    reason: str
    held_at: int


def check_owner_claim(ssm: Any, parameter: str, stack_id: str, owner: str) -> None:
    """Raise BadConfiguration unless this stack holds the claim on its owner name."""
    if not parameter:
        return  # outside a stack (the CLI, tests): nothing to claim
    try:
        value = ssm.get_parameter(Name=parameter)["Parameter"].get("Value", "")
    except ClientError as err:
        code = err.response.get("Error", {}).get("Code", "Error")
        raise BadConfiguration(
            f"owner claim {parameter} could not be read ({code}): refusing to run"
        ) from None
    if value != stack_id:
        raise BadConfiguration(
            f"owner name {owner!r} is claimed by {value or 'nobody'}, not this stack ({stack_id}): "
            "two deployments must never share an owner; refusing to run"
        )


class BrakeReleases:
    """Which sets of revocations the brake holds, and an operator's one-off release of one."""

    def __init__(self, dynamodb: Any, table: str, clock: Callable[[], float] = time.time) -> None:
        self.dynamodb, self.table, self.clock = dynamodb, table, clock

    def released(self, fingerprint: str) -> bool:
        return self._live_item(RELEASE_PREFIX + fingerprint) is not None

    def record_held(self, fingerprint: str, reason: str) -> None:
        """Note that the brake holds this set, so that an operator can see and release it."""
        self._put(
            HELD_PREFIX + fingerprint, {"holder": {"S": "the brake"}, "reason": {"S": reason}}
        )

    def held(self) -> list[HeldRevokes]:
        """Every set held within the last day, newest first (a scan: the table is small)."""
        pages = self.dynamodb.get_paginator("scan").paginate(
            TableName=self.table,
            FilterExpression="begins_with(group_id, :held) AND lease_expires_at > :now",
            ExpressionAttributeValues={
                ":held": {"S": HELD_PREFIX},
                ":now": {"N": str(int(self.clock()))},
            },
            ConsistentRead=True,
        )
        with typed_aws_errors():
            items = [item for page in pages for item in page.get("Items", [])]
        return sorted((_held(item) for item in items), key=lambda h: (-h.held_at, h.fingerprint))

    def release(self, fingerprint: str, by: str) -> HeldRevokes:
        """Release one held set for a day; BrakeNotHeld (nothing written) when it is not held."""
        item = self._live_item(HELD_PREFIX + fingerprint)
        if item is None:
            held = ", ".join(h.fingerprint for h in self.held()) or "none"
            raise BrakeNotHeld(
                f"the brake holds no revocations with fingerprint {fingerprint!r} "
                f"(held now: {held}); nothing released"
            )
        self._put(RELEASE_PREFIX + fingerprint, {"holder": {"S": f"released by {by}"}})
        return _held(item)

    def _live_item(self, key: str) -> dict[str, Any] | None:
        with typed_aws_errors():
            item = self.dynamodb.get_item(
                TableName=self.table, Key={"group_id": {"S": key}}, ConsistentRead=True
            ).get("Item")
        if not item or int(item.get("lease_expires_at", {}).get("N", "0")) <= self.clock():
            return None
        return dict(item)

    def _put(self, key: str, attributes: dict[str, Any]) -> None:
        now = int(self.clock())
        with typed_aws_errors():
            self.dynamodb.put_item(
                TableName=self.table,
                Item={
                    "group_id": {"S": key},
                    "recorded_at": {"N": str(now)},
                    "lease_expires_at": {"N": str(now + RECORD_SECONDS)},
                    **attributes,
                },
            )


class RevocationLog:
    """The brake's window in the lock table: per scope, when it started, the owned rules
    then, and the ids of the rules taken away since (a string set). The item expires with
    the window (the table's TTL attribute); the next plan starts a new one."""

    def __init__(
        self, dynamodb: Any, table: str, seconds: int, clock: Callable[[], float] = time.time
    ) -> None:
        self.dynamodb, self.table, self.seconds, self.clock = dynamodb, table, seconds, clock

    def current(self, owned: Mapping[str, int]) -> dict[str, WindowCount]:
        counts: dict[str, WindowCount] = {}
        for scope, rules in owned.items():
            found = self._read(scope)
            if found is None:
                found = self._start(scope, rules)
            counts[scope] = found
        return counts

    def record(self, removed: Mapping[str, Sequence[str]]) -> None:
        now = int(self.clock())
        for scope, ids in removed.items():
            if not ids:
                continue
            with typed_aws_errors():
                try:  # only into a window still open; a closed one is started again later
                    self.dynamodb.update_item(
                        TableName=self.table,
                        Key={"group_id": {"S": WINDOW_PREFIX + scope}},
                        UpdateExpression="ADD revoked :ids",
                        ConditionExpression="lease_expires_at > :now",
                        ExpressionAttributeValues={
                            ":ids": {"SS": sorted(set(ids))},
                            ":now": {"N": str(now)},
                        },
                    )
                except ClientError as err:
                    if (
                        err.response.get("Error", {}).get("Code")
                        != "ConditionalCheckFailedException"
                    ):
                        raise

    def _read(self, scope: str) -> WindowCount | None:
        with typed_aws_errors():
            item = self.dynamodb.get_item(
                TableName=self.table,
                Key={"group_id": {"S": WINDOW_PREFIX + scope}},
                ConsistentRead=True,
            ).get("Item")
        if not item or int(item.get("lease_expires_at", {}).get("N", "0")) <= self.clock():
            return None
        return WindowCount(
            started_at=int(item["recorded_at"]["N"]),
            owned_at_start=int(item["owned_at_start"]["N"]),
            revoked=frozenset(item.get("revoked", {}).get("SS", [])),
        )

    def _start(self, scope: str, owned: int) -> WindowCount:
        """A new window from now; when another invocation started one meanwhile, that one."""
        now = int(self.clock())
        with typed_aws_errors():
            try:
                self.dynamodb.put_item(
                    TableName=self.table,
                    Item={
                        "group_id": {"S": WINDOW_PREFIX + scope},
                        "holder": {"S": "the brake"},
                        "recorded_at": {"N": str(now)},
                        "lease_expires_at": {"N": str(now + self.seconds)},
                        "owned_at_start": {"N": str(owned)},
                    },
                    ConditionExpression="attribute_not_exists(group_id) OR lease_expires_at <= :now",
                    ExpressionAttributeValues={":now": {"N": str(now)}},
                )
            except ClientError as err:
                if err.response.get("Error", {}).get("Code") != "ConditionalCheckFailedException":
                    raise
                return self._read(scope) or WindowCount(now, owned)
        return WindowCount(now, owned)


def _held(item: dict[str, Any]) -> HeldRevokes:
    return HeldRevokes(
        fingerprint=item["group_id"]["S"].removeprefix(HELD_PREFIX),
        reason=item.get("reason", {}).get("S", ""),
        held_at=int(item.get("recorded_at", {}).get("N", "0")),
    )
