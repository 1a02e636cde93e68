"""DynamoDB tables on moto keyed as the stack creates them (template.yaml)."""

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
