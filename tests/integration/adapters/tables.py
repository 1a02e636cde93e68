"""DynamoDB tables on moto keyed as the stack creates them (template.yaml), and the clock the
adapters that stamp their items are given in tests."""

from __future__ import annotations

from typing import Any


def create_table(client: Any, name: str, *keys: str) -> None:
    """An on-demand table: the first key is the hash key, a second one the range key."""
    client.create_table(
        TableName=name,
        AttributeDefinitions=[{"AttributeName": k, "AttributeType": "S"} for k in keys],
        KeySchema=[
            {"AttributeName": k, "KeyType": kind}
            for k, kind in zip(keys, ("HASH", "RANGE"), strict=False)
        ],
        BillingMode="PAY_PER_REQUEST",
    )


class Clock:
    """A clock the test moves (`now`), for adapters that take one."""

    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now
