"""The brake's window in the lock table, on moto's DynamoDB (invariant 14)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from integration.adapters.tables import Clock, create_table
from moto import mock_aws
from sg_reconciler.adapters.deployment import RevocationLog
from sg_reconciler.core.brake import WindowCount

TABLE = "locks"
DAY = 86_400


@pytest.fixture
def dynamodb() -> Iterator[Any]:
    with mock_aws():
        client = boto3.client("dynamodb", region_name="eu-west-1")
        create_table(client, TABLE, "group_id")
        yield client


def test_a_window_keeps_its_start_and_counts_each_rule_once_until_it_ends(dynamodb: Any) -> None:
    clock = Clock()
    log = RevocationLog(dynamodb, TABLE, DAY, clock)
    # The first plan starts the windows with the rules owned now
    assert log.current({"deployment": 20, "binding a": 8}) == {
        "deployment": WindowCount(1_000_000, 20),
        "binding a": WindowCount(1_000_000, 8),
    }
    log.record({"deployment": ["sgr-1", "sgr-2"], "binding a": ["sgr-1"]})
    clock.now += 3_600
    log.record({"deployment": ["sgr-2", "sgr-3"]})  # sgr-2 checked again: counted once
    # An hour later the owned count has dropped, the window still says what it started with
    assert log.current({"deployment": 17, "binding a": 7}) == {
        "deployment": WindowCount(1_000_000, 20, frozenset({"sgr-1", "sgr-2", "sgr-3"})),
        "binding a": WindowCount(1_000_000, 8, frozenset({"sgr-1"})),
    }
    # A day after its start the window ends: the next plan starts another from now
    clock.now = 1_000_000 + DAY
    log.record({"deployment": ["sgr-9"]})  # into no open window: not counted
    assert log.current({"deployment": 17}) == {"deployment": WindowCount(1_000_000 + DAY, 17)}
