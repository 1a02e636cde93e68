"""The inventory index's pure logic: versions, events applied out of order, fresh reads over
events, the schedule's slice and what is stale (core/inventory_index.py)."""

from __future__ import annotations

from sg_reconciler.core.account import LoadBalancer, Target, TargetGroup, tags_of
from sg_reconciler.core.index_events import TargetChange, Version
from sg_reconciler.core.inventory_index import (
    Entry,
    IndexView,
    apply_change,
    drift,
    entry_from_item,
    entry_to_item,
    gone_entry,
    index_inventory,
    load_balancer_entry,
    merge,
    slice_size,
    target_entry,
    target_group_entry,
    to_verify,
)

TG = "arn:aws:elasticloadbalancing:eu-west-1:123456789012:targetgroup/web/1"
LB = "arn:aws:elasticloadbalancing:eu-west-1:123456789012:loadbalancer/net/web/1"
T0 = 1_800_000_000.0


def _tg(*targets: tuple[str, int]) -> TargetGroup:
    return TargetGroup(
        arn=TG,
        name="web",
        protocol="TCP",
        port=80,
        target_type="instance",
        load_balancer_arns=(LB,),
        vpc_id="vpc-1",
        targets=tuple(Target(t, p) for t, p in targets),
    )


def _event(at: float, event_id: str) -> Version:
    version = Version.of_event(Version.of_read(at).time, event_id)
    assert version is not None
    return version


def _present(entry: Entry | None) -> set[tuple[str, int | None]]:
    assert entry is not None
    return {(m.target_id, m.port) for m in entry.members if m.present}


def test_an_event_version_orders_by_time_then_id_and_a_read_before_events_of_its_second() -> None:
    assert Version.of_event("2026-12-02T10:00:01Z", "b") > Version.of_event(
        "2026-12-02T10:00:01Z", "a"
    )  # type: ignore[operator]
    read = Version.of_read(T0)
    assert _event(T0, "x") > read > _event(T0 - 1, "z")
    assert Version.of_event(None, "a") is None
    assert Version.of_event("yesterday", "a") is None
    assert Version.parse(read.text()) == read
    assert read.seconds() == T0


def test_a_later_read_of_the_same_second_replaces_an_earlier_one() -> None:
    # Given a load balancer read with its selection tag, then read again without it, both
    # within one second (a verification and an event's read)
    first, later = Version.of_read(T0 + 0.2), Version.of_read(T0 + 0.7)
    tagged = load_balancer_entry(LoadBalancer("lb", "web", "network", tags=(("k", "v"),)), first)
    untagged = load_balancer_entry(LoadBalancer("lb", "web", "network"), later)
    # Then the later read is the newer word, and both come before an event of that second
    assert _event(T0, "0") > later > first
    assert merge(tagged, untagged) == untagged
    assert merge(untagged, tagged) is None


def test_deregister_before_its_register_leaves_the_target_out() -> None:
    # Given a target group read with one target
    entry = target_group_entry(_tg(("i-1", 80)), Version.of_read(T0))
    register = TargetChange(TG, True, (("i-2", 8080),), _event(T0 + 10, "r"))
    deregister = TargetChange(TG, False, (("i-2", 8080),), _event(T0 + 20, "d"))
    # When the deregistration arrives first, then the (older) registration
    after = apply_change(apply_change(entry, deregister), register)
    # Then the target stays out, as in the order the calls were made
    assert _present(after) == {("i-1", 80)}
    in_order = apply_change(apply_change(entry, register), deregister)
    assert _present(in_order) == _present(after)


def test_a_registration_on_a_new_port_is_applied_and_the_entry_version_moves_on() -> None:
    entry = target_group_entry(_tg(("i-1", 80)), Version.of_read(T0))
    change = TargetChange(TG, True, (("i-1", 31_000),), _event(T0 + 5, "e"))
    after = apply_change(entry, change)
    assert _present(after) == {("i-1", 80), ("i-1", 31_000)}
    assert after is not None and after.version == change.version
    assert after.verified == entry.verified  # an event is not a verification
    assert apply_change(None, change) is None  # unknown target group: its first read fills it


def test_an_event_older_than_the_read_does_not_undo_it() -> None:
    read = Version.of_read(T0)
    entry = target_group_entry(_tg(("i-1", 80)), read)
    late = TargetChange(TG, False, (("i-1", 80),), _event(T0 - 30, "old"))
    assert _present(apply_change(entry, late)) == {("i-1", 80)}


def test_a_fresh_read_keeps_what_events_after_it_set_and_replaces_the_rest() -> None:
    stored = target_group_entry(_tg(("i-1", 80), ("i-9", 80)), Version.of_read(T0))
    stored = apply_change(stored, TargetChange(TG, True, (("i-2", 81),), _event(T0 + 50, "a")))
    # The read happened at T0 + 40: before i-2's registration, after i-9 left
    fresh = target_group_entry(_tg(("i-1", 80)), Version.of_read(T0 + 40))
    merged = merge(stored, fresh)
    assert _present(merged) == {("i-1", 80), ("i-2", 81)}
    assert merged is not None and merged.verified == Version.of_read(T0 + 40)
    assert merge(merged, fresh) is None  # nothing new: no write


def test_a_deleted_object_stays_deleted_for_older_writes() -> None:
    mark = gone_entry("lb", LB, Version.of_read(T0 + 100))
    old = load_balancer_entry(LoadBalancer(LB, "web", "network"), Version.of_read(T0))
    assert merge(mark, old) is None
    assert IndexView.of([mark]).load_balancers == {}


def test_the_index_as_an_inventory_joins_targets_to_their_interfaces() -> None:
    lb = LoadBalancer(LB, "web", "network", ("sg-lb",), tags_of({"team": "a"}), "vpc-1")
    view = IndexView.of(
        [
            load_balancer_entry(lb, Version.of_read(T0)),
            target_group_entry(_tg(("i-1", 80), ("i-2", 80)), Version.of_read(T0)),
            target_entry("i-1", ["sg-node"], "i-1", Version.of_read(T0)),
        ]
    )
    inventory = index_inventory(view)
    assert inventory.load_balancers == (lb,)
    (tg,) = inventory.target_groups
    assert {(t.target_id, t.group_ids) for t in tg.targets} == {
        ("i-1", ("sg-node",)),
        ("i-2", ()),  # unknown interface: a lookup miss
    }
    assert index_inventory(view, selected=()).target_groups == ()


def test_the_stored_form_round_trips() -> None:
    entry = apply_change(
        target_group_entry(_tg(("i-1", 80)), Version.of_read(T0)),
        TargetChange(TG, False, (("i-1", 80),), _event(T0 + 1, "e")),
    )
    assert entry is not None
    assert entry_from_item(entry_to_item(entry)) == entry


def test_the_slice_covers_the_account_within_the_period() -> None:
    # 3,000 target groups, 6 hours, a run every 15 minutes: 125 a run, 24 runs
    assert slice_size(3_000, 21_600, 900) == 125
    assert slice_size(3_001, 21_600, 900) == 126  # rounded up: 24 runs still cover them all
    assert slice_size(0, 21_600, 900) == 0
    assert slice_size(5, 21_600, 900) == 1
    assert slice_size(5, 900, 3_600) == 5


def test_a_run_verifies_the_missing_first_then_the_oldest() -> None:
    arns = [f"{TG}{i}" for i in range(48)]
    entries = [
        Entry("tg", a, {}, Version.of_read(T0 + i), Version.of_read(T0 + i))
        for i, a in enumerate(arns[:40])
    ]
    view = IndexView.of(entries)
    due = to_verify(arns, view, 21_600, 900)
    assert due[:8] == sorted(arns[40:])  # not in the index
    assert due[8:] == arns[:2]  # the two verified longest ago (48 / 24 runs)


def test_a_stale_entry_is_one_never_verified_or_older_than_the_period() -> None:
    read = Entry("tg", TG, {}, Version.of_read(T0), Version.of_read(T0))
    assert not read.stale(T0 + 100, 3_600)
    assert read.stale(T0 + 3_601, 3_600)
    assert Entry("tg", TG, {}, Version.of_read(T0)).stale(T0, 3_600)


def test_drift_names_what_the_index_had_wrong() -> None:
    entry = target_group_entry(_tg(("i-1", 80)), Version.of_read(T0))
    assert drift(entry, _tg(("i-1", 80))) == []
    found = drift(entry, _tg(("i-2", 80)))
    assert len(found) == 2 and "lacked" in found[0] and "gone" in found[1]
    assert drift(None, _tg()) == [f"{TG}: not in the index"]
