"""The planner's use of the inventory index without moto (app/indexed_plan.py): events
applied through conditional writes that can lose a race, and revokes held while the index
lacks target groups the listing shows."""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field

from sg_reconciler.app.indexed_plan import IndexedReads, held_while_unread, record_changes
from sg_reconciler.app.live_plan import LivePlan
from sg_reconciler.core.account import Inventory, Target, TargetGroup
from sg_reconciler.core.index_events import TargetChange, Version
from sg_reconciler.core.inventory_index import Entry, IndexedRead, Kind, target_group_entry
from sg_reconciler.core.plan import Authorize, Plan, Revoke
from sg_reconciler.core.ports import InventoryIndex, InventoryReader
from sg_reconciler.core.rules import rule_from_dict

TG = "arn:aws:elasticloadbalancing:eu-west-1:123456789012:targetgroup/web/1"
T0 = 1_800_000_000.0


@dataclass
class MemoryIndex:
    """An InventoryIndex in memory; `lose` makes the next puts lose to another writer, whose
    entry (`rival`) is then what the index holds."""

    items: dict[tuple[str, str], Entry] = field(default_factory=dict)
    lose: int = 0
    rival: Entry | None = None

    def entries(self, kind: Kind) -> list[Entry]:
        return [e for (k, _), e in sorted(self.items.items()) if k == kind]

    def get(self, kind: Kind, keys: list[str]) -> dict[str, Entry]:
        return {k: self.items[(kind, k)] for k in keys if (kind, k) in self.items}

    def put(self, entry: Entry, replacing: Version | None) -> bool:
        if self.lose:
            self.lose -= 1
            if self.rival is not None:
                self.items[(self.rival.kind, self.rival.key)] = self.rival
            return False
        held = self.items.get((entry.kind, entry.key))
        if (held.version if held else None) != replacing:
            return False
        self.items[(entry.kind, entry.key)] = entry
        return True


def _tg(*targets: tuple[str, int]) -> TargetGroup:
    return TargetGroup(
        TG, "web", "TCP", 80, "instance", targets=tuple(Target(t, p) for t, p in targets)
    )


def _at(seconds: float, event_id: str) -> Version:
    version = Version.of_event(Version.of_read(seconds).time, event_id)
    assert version is not None
    return version


def test_the_memory_index_has_the_inventory_index_s_methods() -> None:
    # mypy does not check this file: compare the signatures here
    methods = [n for n, v in vars(InventoryIndex).items() if inspect.isfunction(v) and n[0] != "_"]
    assert sorted(methods) == ["entries", "get", "put"]
    for name in methods:
        wanted = inspect.signature(getattr(InventoryIndex, name))
        assert inspect.signature(getattr(MemoryIndex, name)) == wanted, name


def test_an_event_that_loses_a_race_is_merged_into_the_winner_s_entry() -> None:
    # Given the index holds a read of the target group
    first = target_group_entry(_tg(("i-1", 80)), Version.of_read(T0))
    index = MemoryIndex({("tg", TG): first})
    # and another planner writes a newer read (i-2 registered) just before this one's write
    index.rival = target_group_entry(_tg(("i-1", 80), ("i-2", 80)), Version.of_read(T0 + 5), first)
    index.lose = 1
    # When this planner applies a registration on a new port
    change = TargetChange(TG, True, (("i-1", 31000),), _at(T0 + 10, "e"))
    assert record_changes(index, [change]) == 1
    # Then both writers' words are kept
    (entry,) = index.entries("tg")
    assert {(m.target_id, m.port) for m in entry.members if m.present} == {
        ("i-1", 80),
        ("i-2", 80),
        ("i-1", 31000),
    }


def _rule(group: str, port: int, rule_id: str | None = None) -> dict[str, object]:
    doc: dict[str, object] = {
        "GroupId": group,
        "IsEgress": False,
        "IpProtocol": "tcp",
        "FromPort": port,
        "ToPort": port,
        "ReferencedGroupInfo": {"GroupId": "sg-lb"},
        "Description": "d",
    }
    if rule_id:
        doc["SecurityGroupRuleId"] = rule_id
    return doc


def _unread(*args: object, **kwargs: object) -> IndexedRead:
    raise AssertionError("this test reads nothing")


def _unread_account() -> InventoryReader:
    from unittest.mock import create_autospec

    return create_autospec(InventoryReader, instance=True)


def test_revokes_wait_while_the_index_lacks_listed_target_groups() -> None:
    new, old = rule_from_dict(_rule("sg-a", 81)), rule_from_dict(_rule("sg-a", 80, "sgr-1"))
    plan = Plan((Authorize("sg-a", (new,)), Revoke("sg-a", ("sgr-1",))))
    live = LivePlan(plan, [new], [old], ["sg-a"])
    reads = IndexedReads(MemoryIndex(), _unread, _unread_account(), T0, 43_200, 100)
    reads.last = IndexedRead(Inventory(), unread=3)
    held = held_while_unread(live, reads)
    assert isinstance(held.result, Plan)
    assert [type(s) for s in held.result.steps] == [Authorize]
    assert "does not hold 3 target group(s)" in held.result.held
    reads.last = IndexedRead(Inventory(), stale=2)
    stale = held_while_unread(live, reads).result
    assert isinstance(stale, Plan) and "2 target group(s) older than" in stale.held
    reads.last = IndexedRead(Inventory(), unread=0)
    assert held_while_unread(live, reads) is live
