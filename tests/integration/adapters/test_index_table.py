"""The inventory index on moto's DynamoDB: entries by kind, conditional writes on the version,
and events applied through it out of order (adapters/index_table.py, app/indexed_plan.py)."""

from __future__ import annotations

from collections.abc import Iterator

import boto3
import pytest
from integration.adapters.tables import create_table
from moto import mock_aws
from sg_reconciler.adapters.index_table import IndexTable
from sg_reconciler.app.indexed_plan import load_view, record_changes, write_entries
from sg_reconciler.core.account import LoadBalancer, Target, TargetGroup
from sg_reconciler.core.index_events import TargetChange, Version
from sg_reconciler.core.inventory_index import IndexView, load_balancer_entry, target_group_entry

TABLE = "index"
TG = "arn:aws:elasticloadbalancing:eu-west-1:123456789012:targetgroup/web/1"
LB = "arn:aws:elasticloadbalancing:eu-west-1:123456789012:loadbalancer/net/web/1"
T0 = 1_800_000_000.0


@pytest.fixture
def index() -> Iterator[IndexTable]:
    with mock_aws():
        dynamodb = boto3.client("dynamodb", region_name="eu-west-1")
        create_table(dynamodb, TABLE, "kind", "key")
        yield IndexTable(dynamodb, TABLE)


def _tg(*targets: tuple[str, int]) -> TargetGroup:
    return TargetGroup(
        TG, "web", "TCP", 80, "instance", load_balancer_arns=(LB,),
        targets=tuple(Target(t, p) for t, p in targets),
    )  # fmt: skip


def _at(seconds: float, event_id: str) -> Version:
    version = Version.of_event(Version.of_read(seconds).time, event_id)
    assert version is not None
    return version


def test_a_write_needs_the_version_it_read(index: IndexTable) -> None:
    first = target_group_entry(_tg(("i-1", 80)), Version.of_read(T0))
    assert index.put(first, None)
    assert not index.put(first, None)  # it exists now: a second creator loses
    newer = target_group_entry(_tg(("i-2", 80)), Version.of_read(T0 + 60), first)
    assert not index.put(newer, Version.of_read(T0 - 1))  # not what is stored
    assert index.put(newer, first.version)
    assert index.get("tg", [TG, "other"]) == {TG: newer}
    assert index.entries("tg") == [newer]


def test_events_out_of_order_and_a_late_read_converge(index: IndexTable) -> None:
    # Given the index holds a target group read at T0 with one target
    write_entries(
        index, [target_group_entry(_tg(("i-1", 80)), Version.of_read(T0))], IndexView.of([])
    )
    register = TargetChange(TG, True, (("i-2", 31000),), _at(T0 + 10, "r"))
    deregister = TargetChange(TG, False, (("i-2", 31000),), _at(T0 + 20, "d"))
    # When the deregistration is delivered before its registration
    assert record_changes(index, [deregister]) == 1
    assert record_changes(index, [register]) == 0  # older than what the target holds
    # Then the target is out, and a read made before both does not bring it back
    stale_read = target_group_entry(_tg(("i-1", 80), ("i-2", 31000)), Version.of_read(T0 + 5))
    write_entries(index, [stale_read], load_view(index))
    (entry,) = index.entries("tg")
    assert {(m.target_id, m.port) for m in entry.members if m.present} == {("i-1", 80)}
    # A registration by a service (Auto Scaling, ECS) is an event like any other
    by_service = TargetChange(TG, True, (("i-3", 80),), _at(T0 + 30, "asg"))
    assert record_changes(index, [by_service]) == 1
    (entry,) = index.entries("tg")
    assert ("i-3", 80) in {(m.target_id, m.port) for m in entry.members if m.present}


def test_an_event_for_an_unknown_target_group_waits_for_its_read(index: IndexTable) -> None:
    change = TargetChange(TG, True, (("i-1", 80),), _at(T0, "e"))
    assert record_changes(index, [change]) == 0
    assert index.entries("tg") == []


def test_clear_empties_every_kind(index: IndexTable) -> None:
    write_entries(
        index,
        [
            target_group_entry(_tg(("i-1", 80)), Version.of_read(T0)),
            load_balancer_entry(LoadBalancer(LB, "web", "network"), Version.of_read(T0)),
        ],
        IndexView.of([]),
    )
    assert index.clear() == 2
    assert not load_view(index)
