"""The inventory index in DynamoDB (docs/architecture.md, "The inventory index").

One table, key (`kind`, `key`): `tg` items per target group (its targets and ports, load
balancers, protocol, port and health-check port), `lb` items per load balancer (type,
scheme, groups, tags), `target` items per target interface or instance (its groups) and
one `owned` item per owner (the groups that hold its rules, with their peers).
Each item's `version` attribute is the newest event or read it reflects; a write is
conditional on the version the writer read (or on the item being absent), so two planners,
or an event and a verification, never overwrite each other's newer word: the loser reads
again and merges (`app/indexed_plan.py`).

DynamoDB over the plan store's table or S3: items are small and read by kind with one paged
Query (a few hundred KB at 3,000 target groups), a conditional PutItem is the version check
without a lock, reads and writes cost no API budget another tool shares (ELBv2 and EC2 do),
and `sam delete` removes it whatever it holds.
"""

from __future__ import annotations

import json
from typing import Any

from botocore.exceptions import ClientError

from sg_reconciler.adapters.aws import typed_aws_errors
from sg_reconciler.core.index_events import Version
from sg_reconciler.core.inventory_index import KINDS, Entry, Kind, entry_from_item, entry_to_item

BATCH_GET = 100  # BatchGetItem's limit


class IndexTable:
    def __init__(self, dynamodb: Any, table: str) -> None:
        self.dynamodb, self.table = dynamodb, table

    def entries(self, kind: Kind) -> list[Entry]:
        """Every entry of one kind (one paged Query)."""
        found: list[Entry] = []
        with typed_aws_errors():
            paginator = self.dynamodb.get_paginator("query")
            pages = paginator.paginate(
                TableName=self.table,
                KeyConditionExpression="#k = :k",
                ExpressionAttributeNames={"#k": "kind"},
                ExpressionAttributeValues={":k": {"S": kind}},
                ConsistentRead=True,
            )
            for page in pages:
                found.extend(_entry(item) for item in page.get("Items", []))
        return found

    def get(self, kind: Kind, keys: list[str]) -> dict[str, Entry]:
        """The entries of `kind` among `keys` (a key the index lacks is absent)."""
        found: dict[str, Entry] = {}
        unique = sorted(set(keys))
        with typed_aws_errors():
            for start in range(0, len(unique), BATCH_GET):
                request = {
                    self.table: {
                        "Keys": [
                            {"kind": {"S": kind}, "key": {"S": k}}
                            for k in unique[start : start + BATCH_GET]
                        ],
                        "ConsistentRead": True,
                    }
                }
                while request:
                    response = self.dynamodb.batch_get_item(RequestItems=request)
                    for item in response.get("Responses", {}).get(self.table, []):
                        entry = _entry(item)
                        found[entry.key] = entry
                    request = response.get("UnprocessedKeys") or {}
        return found

    def put(self, entry: Entry, replacing: Version | None) -> bool:
        """Write the entry on the condition that the item still holds `replacing` (None: that
        there is none); False when another writer changed it first (read it again)."""
        item = {
            "kind": {"S": entry.kind},
            "key": {"S": entry.key},
            "version": {"S": entry.version.text()},
            "body": {"S": json.dumps(entry_to_item(entry), separators=(",", ":"))},
        }
        if replacing is None:
            condition: dict[str, Any] = {"ConditionExpression": "attribute_not_exists(#k)"}
            condition["ExpressionAttributeNames"] = {"#k": "key"}
        else:
            condition = {
                "ConditionExpression": "#v = :v",
                "ExpressionAttributeNames": {"#v": "version"},
                "ExpressionAttributeValues": {":v": {"S": replacing.text()}},
            }
        with typed_aws_errors():
            try:
                self.dynamodb.put_item(TableName=self.table, Item=item, **condition)
            except ClientError as err:
                if err.response.get("Error", {}).get("Code") == "ConditionalCheckFailedException":
                    return False
                raise
        return True

    def clear(self) -> int:
        """Delete every entry (tests and the operator's reset); how many there were."""
        count = 0
        for kind in KINDS:
            for entry in self.entries(kind):
                with typed_aws_errors():
                    self.dynamodb.delete_item(
                        TableName=self.table,
                        Key={"kind": {"S": kind}, "key": {"S": entry.key}},
                    )
                count += 1
        return count


def _entry(item: dict[str, Any]) -> Entry:
    return entry_from_item(json.loads(item["body"]["S"]))
