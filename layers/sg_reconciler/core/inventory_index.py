"""The inventory kept from events: what each target group holds, which load balancers send
to it, and which groups its targets' interfaces carry, kept between runs instead of re-read
(docs/architecture.md, "The inventory index"). Pure logic, no boto3: the entries, their
versions, applying an event to an entry, a fresh read over an entry, what is stale and which
slice the schedule verifies. `adapters/index_table.py` keeps the entries in DynamoDB with
conditional writes on the version.

Versions order what is applied. CloudTrail to EventBridge is best effort and unordered, so an
event carries its `eventTime` and `eventID`; a verification read carries its own time. A
target group's members each keep the version of the last event or read that set them (last
writer wins per target), so a DeregisterTargets applied before its RegisterTargets leaves the
target out, and a late, older event never undoes a newer one. An entry's own version is the
newest of its members' and of its last verification; the store writes an entry only on the
condition that the version it read is still there.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, cast

from sg_reconciler.core.account import (
    Inventory,
    LoadBalancer,
    Target,
    TargetGroup,
    TargetKind,
    tags_of,
)
from sg_reconciler.core.index_events import TargetChange, Version

Kind = Literal["tg", "lb", "target", "owned"]
KINDS: tuple[Kind, ...] = ("tg", "lb", "target", "owned")
# The owned groups' entry stays well inside a DynamoDB item (400 KB, name and body together):
# about 6,000 groups with one peer each.
OWNED_ENTRY_BYTES = 300_000


@dataclass(frozen=True)
class Member:
    """A target of a target group as the index knows it; `present` False is a deregistration
    kept so that an older registration arriving later does not bring the target back."""

    target_id: str
    port: int | None
    present: bool
    version: Version


@dataclass(frozen=True)
class Entry:
    """One item of the index: `kind` and `key` name it, `doc` holds its fields (JSON-able),
    `version` orders writes, `verified` is the last fresh read of it (None: events only)."""

    kind: Kind
    key: str
    doc: Mapping[str, Any]
    version: Version
    verified: Version | None = None
    members: tuple[Member, ...] = field(default=())  # target groups only

    @property
    def gone(self) -> bool:
        """The mark of a deleted object (kept so that a late event does not revive it)."""
        return bool(self.doc.get("gone"))

    def stale(self, now: float, period_seconds: float) -> bool:
        """Never verified, or verified longer ago than the verification period: such an
        entry never lets a revoke go (invariant 15)."""
        return self.verified is None or now - self.verified.seconds() > period_seconds


# ---- entries from what a read or an event saw --------------------------------------------


def target_group_entry(tg: TargetGroup, read: Version, old: Entry | None = None) -> Entry:
    """A target group as a fresh read found it, over what the index held: members an event
    set after the read keep that event's word, the rest are the read's."""
    doc = {
        "name": tg.name,
        "protocol": tg.protocol,
        "port": tg.port,
        "target_type": tg.target_type,
        "health_check_port": tg.health_check_port,
        "health_check_protocol": tg.health_check_protocol,
        "health_check_enabled": tg.health_check_enabled,
        "load_balancer_arns": list(tg.load_balancer_arns),
        "vpc_id": tg.vpc_id,
        "ip_address_type": tg.ip_address_type,
    }
    later = {_member_key(m): m for m in (old.members if old else ()) if m.version > read}
    members = {(t.target_id, t.port): Member(t.target_id, t.port, True, read) for t in tg.targets}
    members.update(later)
    return _with_members(Entry("tg", tg.arn, doc, read, read), members.values(), old)


def apply_change(entry: Entry | None, change: TargetChange) -> Entry | None:
    """A RegisterTargets or DeregisterTargets event applied to its target group's entry:
    each target it names is set unless a newer event or read already set it. None when the
    index does not know the target group (its first read fills it)."""
    if entry is None:
        return None
    members = {_member_key(m): m for m in entry.members}
    for target_id, port in change.targets:
        key = (target_id, port)
        held = members.get(key)
        if held is None or held.version < change.version:
            members[key] = Member(target_id, port, change.registered, change.version)
    return _with_members(entry, members.values(), entry)


def load_balancer_entry(lb: LoadBalancer, read: Version) -> Entry:
    doc = {
        "name": lb.name,
        "type": lb.type,
        "security_groups": list(lb.security_groups),
        "tags": [list(t) for t in lb.tags],
        "vpc_id": lb.vpc_id,
        "scheme": lb.scheme,
        "ip_address_type": lb.ip_address_type,
    }
    return Entry("lb", lb.arn, doc, read, read)


def gone_entry(kind: Kind, key: str, read: Version) -> Entry:
    """The mark of an object a read found deleted."""
    return Entry(kind, key, {"gone": True}, read, read)


def merge(stored: Entry | None, fresh: Entry) -> Entry | None:
    """What to write when `fresh` meets what the index holds now; None: nothing (the stored
    entry is newer). A target group's members set by an event after the read keep that
    event's word (last writer wins per target)."""
    if stored is None:
        return fresh
    if fresh.kind != "tg" or stored.gone or fresh.gone:
        return fresh if fresh.version > stored.version else None
    read = fresh.verified or fresh.version
    members = {_member_key(m): m for m in fresh.members}
    for m in stored.members:
        held = members.get(_member_key(m))
        if m.version > read and (held is None or m.version > held.version):
            members[_member_key(m)] = m
    merged = _with_members(fresh, members.values(), stored)
    return None if merged == stored else merged


def target_entry(key: str, groups: Sequence[str], instance_id: str | None, read: Version) -> Entry:
    """The interface a target's traffic reaches: its groups (and its instance)."""
    return Entry("target", key, {"groups": list(groups), "instance_id": instance_id}, read, read)


def owned_entry(owner: str, owned: Mapping[str, Iterable[str]], read: Version) -> Entry | None:
    """The groups that hold a rule with `owner`'s tag, each with the groups those rules admit,
    as the schedule's scan found them: an event's plan takes them from here instead of
    scanning the account (they only widen what it reads; the schedule scans every run).
    None when it would not fit in one item (events then scan)."""
    groups = {g: sorted(set(peers)) for g, peers in sorted(owned.items())}
    if len(json.dumps(groups, separators=(",", ":"))) > OWNED_ENTRY_BYTES:
        return None
    return Entry("owned", owner, {"groups": groups}, read, read)


def owned_of(entry: Entry) -> dict[str, set[str]]:
    return {str(g): {str(p) for p in peers} for g, peers in entry.doc.get("groups", {}).items()}


def target_key(kind: str, vpc_id: str, target_id: str) -> str:
    """An instance by its id; an address by its VPC and address (one address may be in two
    VPCs)."""
    return target_id if kind == "instance" else f"{vpc_id}|{target_id}"


def _member_key(member: Member) -> tuple[str, int | None]:
    return (member.target_id, member.port)


def _with_members(entry: Entry, members: Iterable[Member], old: Entry | None) -> Entry:
    ordered = tuple(sorted(members, key=lambda m: (m.target_id, m.port or 0)))
    newest = max([entry.version, *(m.version for m in ordered)])
    if old is not None:
        newest = max(newest, old.version)
    verified = entry.verified
    if (
        old is not None
        and old.verified is not None
        and (verified is None or old.verified > verified)
    ):
        verified = old.verified
    return replace(entry, members=ordered, version=newest, verified=verified)


# ---- the index as an inventory -----------------------------------------------------------


@dataclass(frozen=True)
class IndexView:
    """Everything the index holds, by kind and key."""

    target_groups: Mapping[str, Entry]
    load_balancers: Mapping[str, Entry]
    targets: Mapping[str, Entry]
    owned: Mapping[str, Entry] = field(default_factory=dict)  # by owner (`owned_entry`)

    @classmethod
    def of(cls, entries: Iterable[Entry]) -> IndexView:
        """The entries that stand for something (not the marks of deleted objects)."""
        by: dict[str, dict[str, Entry]] = {k: {} for k in KINDS}
        for entry in entries:
            if not entry.gone:
                by[entry.kind][entry.key] = entry
        return cls(by["tg"], by["lb"], by["target"], by["owned"])

    def __bool__(self) -> bool:
        return bool(self.target_groups or self.load_balancers)

    def entries(self) -> list[Entry]:
        return [
            *self.target_groups.values(),
            *self.load_balancers.values(),
            *self.targets.values(),
            *self.owned.values(),
        ]


def overlaid(view: IndexView, fresh: Iterable[Entry]) -> IndexView:
    """The index with what was just read over it (a deleted object's mark removes it)."""
    entries = {(e.kind, e.key): e for e in view.entries()}
    entries.update(((e.kind, e.key), e) for e in fresh)
    return IndexView.of(entries.values())


@dataclass
class IndexedRead:
    """What one read through the index did: the inventory, the entries read fresh (for the
    index), the drift a verification found, and whether some listed target group is still
    missing from the index (then the plan's revokes wait)."""

    inventory: Inventory
    fresh: list[Entry] = field(default_factory=list)
    drift: list[str] = field(default_factory=list)
    gone: list[tuple[Kind, str]] = field(default_factory=list)  # (kind, key) no longer there
    unread: int = 0  # listed target groups the index lacks and this run did not read
    stale: int = 0  # target groups taken from entries older than the verification period


def load_balancer_of(entry: Entry) -> LoadBalancer:
    doc = entry.doc
    return LoadBalancer(
        arn=entry.key,
        name=str(doc.get("name", entry.key)),
        type=str(doc.get("type", "")),
        security_groups=tuple(doc.get("security_groups", ())),
        tags=tags_of({str(k): str(v) for k, v in doc.get("tags", ())}),
        vpc_id=str(doc.get("vpc_id", "")),
        scheme=str(doc.get("scheme", "internet-facing")),
        ip_address_type=str(doc.get("ip_address_type", "ipv4")),
    )


def target_group_of(entry: Entry, targets: Mapping[str, Entry]) -> TargetGroup:
    """A target group from its entry; a target whose interface the index does not know has
    no groups (a lookup miss: revokes that could take its ports wait)."""
    doc = entry.doc
    kind = cast(TargetKind, doc.get("target_type", "instance"))
    vpc = str(doc.get("vpc_id", ""))
    members = []
    for m in entry.members:
        if not m.present:
            continue
        where = targets.get(target_key(kind, vpc, m.target_id))
        groups = tuple(where.doc.get("groups", ())) if where else ()
        instance = where.doc.get("instance_id") if where else None
        if kind == "instance":
            instance = m.target_id
        members.append(Target(m.target_id, m.port, groups, instance))
    return TargetGroup(
        arn=entry.key,
        name=str(doc.get("name", entry.key)),
        protocol=str(doc.get("protocol", "")),
        port=doc.get("port"),
        target_type=kind,
        health_check_port=str(doc.get("health_check_port", "traffic-port")),
        health_check_protocol=str(doc.get("health_check_protocol", "TCP")),
        health_check_enabled=bool(doc.get("health_check_enabled", True)),
        load_balancer_arns=tuple(doc.get("load_balancer_arns", ())),
        vpc_id=vpc,
        targets=tuple(members),
        ip_address_type=str(doc.get("ip_address_type", "ipv4")),
    )


def index_inventory(view: IndexView, selected: Iterable[str] | None = None) -> Inventory:
    """The load balancers and target groups the index holds, as an inventory without rules
    (the caller reads the groups and their rules fresh). `selected`: the load balancers the
    policy selects (None: every one the index holds)."""
    lbs = [load_balancer_of(e) for e in view.load_balancers.values()]
    if selected is not None:
        wanted = set(selected)
        lbs = [lb for lb in lbs if lb.arn in wanted]
    arns = {lb.arn for lb in lbs}
    tgs = [
        target_group_of(e, view.targets)
        for e in view.target_groups.values()
        if arns.intersection(e.doc.get("load_balancer_arns", ()))
    ]
    return Inventory(
        load_balancers=tuple(sorted(lbs, key=lambda lb: lb.arn)),
        target_groups=tuple(sorted(tgs, key=lambda tg: tg.arn)),
    )


# ---- verification ------------------------------------------------------------------------


def slice_size(total: int, period_seconds: float, interval_seconds: float) -> int:
    """How many target groups one scheduled run verifies so that all `total` are read within
    the period: `ceil(total * interval / period)` (at least one when there are any)."""
    if total <= 0:
        return 0
    runs = max(1.0, period_seconds / max(1.0, interval_seconds))
    return min(total, max(1, math.ceil(total / runs)))


def to_verify(
    listed: Iterable[str],
    view: IndexView,
    period_seconds: float,
    interval_seconds: float,
) -> list[str]:
    """The target groups a scheduled run reads fresh: every listed one the index lacks (a
    missed CreateTargetGroup or RegisterTargets), then the ones verified longest ago, as many
    as the period asks of one run."""
    names = sorted(set(listed))
    missing = [a for a in names if a not in view.target_groups]
    known = [a for a in names if a in view.target_groups]

    def age(arn: str) -> str:
        verified = view.target_groups[arn].verified
        return verified.text() if verified is not None else ""

    known.sort(key=lambda a: (age(a), a))
    return missing + known[: slice_size(len(names), period_seconds, interval_seconds)]


def drift(entry: Entry | None, fresh: TargetGroup) -> list[str]:
    """What a verification read found that the index did not hold (reported, then repaired):
    targets registered or gone, and a change of load balancers or ports."""
    if entry is None:
        return [f"{fresh.arn}: not in the index"]
    held = {_member_key(m) for m in entry.members if m.present}
    seen = {(t.target_id, t.port) for t in fresh.targets}
    found = []
    if seen - held:
        found.append(f"{fresh.arn}: {len(seen - held)} target(s) the index lacked")
    if held - seen:
        found.append(f"{fresh.arn}: {len(held - seen)} target(s) the index held that are gone")
    if set(entry.doc.get("load_balancer_arns", ())) != set(fresh.load_balancer_arns):
        found.append(f"{fresh.arn}: its load balancers changed")
    if entry.doc.get("port") != fresh.port or entry.doc.get("health_check_port") != str(
        fresh.health_check_port
    ):
        found.append(f"{fresh.arn}: its ports changed")
    return found


# ---- the stored form -----------------------------------------------------------------------


def entry_to_item(entry: Entry) -> dict[str, Any]:
    """The JSON-able form the store keeps (members as [id, port, present, version])."""
    item: dict[str, Any] = {
        "kind": entry.kind,
        "key": entry.key,
        "doc": dict(entry.doc),
        "version": entry.version.text(),
    }
    if entry.verified is not None:
        item["verified"] = entry.verified.text()
    if entry.members:
        item["members"] = [
            [m.target_id, m.port, m.present, m.version.text()] for m in entry.members
        ]
    return item


def entry_from_item(item: Mapping[str, Any]) -> Entry:
    kind = str(item["kind"])
    if kind not in KINDS:
        raise ValueError(f"unknown index kind {kind!r}")
    verified = item.get("verified")
    return Entry(
        kind=kind,
        key=str(item["key"]),
        doc=dict(item.get("doc", {})),
        version=Version.parse(str(item["version"])),
        verified=Version.parse(str(verified)) if verified else None,
        members=tuple(
            Member(str(t), None if p is None else int(p), bool(present), Version.parse(str(v)))
            for t, p, present, v in item.get("members", ())
        ),
    )
