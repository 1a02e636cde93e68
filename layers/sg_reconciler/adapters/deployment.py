"""What one deployment keeps about itself: the claim on its owner name and brake releases.

The owner claim is an SSM parameter the stack creates, named for the owner
(`/sg-reconciler/owners/<owner>`) and holding the stack id: a second stack with the same
owner fails to deploy, and a run refuses to start when the claim names another stack
(invariant 10). Brake releases live in the lock table, one item per released set of
revocations, expiring after a day (invariant 12).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from botocore.exceptions import ClientError

from sg_reconciler.adapters.security_groups import typed_aws_errors
from sg_reconciler.errors import BadConfiguration

RELEASE_PREFIX = "brake-release#"
RELEASE_SECONDS = 86_400


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
    """An operator's one-off release of a held set of revocations, by its fingerprint."""

    def __init__(self, dynamodb: Any, table: str, clock: Callable[[], float] = time.time) -> None:
        self.dynamodb, self.table, self.clock = dynamodb, table, clock

    def released(self, fingerprint: str) -> bool:
        with typed_aws_errors():
            item = self.dynamodb.get_item(
                TableName=self.table,
                Key={"group_id": {"S": RELEASE_PREFIX + fingerprint}},
                ConsistentRead=True,
            ).get("Item")
        if not item:
            return False
        return int(item.get("lease_expires_at", {}).get("N", "0")) > self.clock()

    def release(self, fingerprint: str, by: str) -> None:
        now = int(self.clock())
        with typed_aws_errors():
            self.dynamodb.put_item(
                TableName=self.table,
                Item={
                    "group_id": {"S": RELEASE_PREFIX + fingerprint},
                    "holder": {"S": f"released by {by}"},
                    "released_at": {"N": str(now)},
                    "lease_expires_at": {"N": str(now + RELEASE_SECONDS)},
                },
            )
