"""Which target groups a revoke under the locks reads fresh, chosen from the inventory index
(docs/architecture.md, "Reads"; invariant 15). Pure logic, no boto3.

A revoke can take traffic only from target groups whose load balancer admits the rule's peer
and whose targets could use the ports it takes away in the rule's group. Behind a shared
backend group the first condition holds for every target group of the cluster, so the
second, from the index, picks the few to read: a target group is a candidate when its entry
says a target sits in the group (by its interface or instance groups) on a port the revoke
takes away, or when its own port or health-check port (from the fresh listing) is one of
them. When the index cannot say (no entry, an entry older than the verification period, a
target whose groups are unknown) the target group is a candidate too; a missing or old entry,
or one the fresh read contradicts, also holds the revokes (like a lookup miss) and the fresh
read repairs it. The target groups not read keep the index's targets, which by their
selection use none of the ports taken away.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field

from sg_reconciler.core.account import Inventory, TargetGroup
from sg_reconciler.core.inventory_index import Entry, IndexView, drift, target_key
from sg_reconciler.core.rules import Peer, Rule, RuleKey
from sg_reconciler.core.traffic import Traffic

PROTOCOLS = (6, 17)  # TCP and UDP: a target group's traffic is one of them; either counts


def lost_traffic(taken: Iterable[Rule], staying: Iterable[RuleKey]) -> Traffic:
    """The traffic the revokes take away: the rules that go, less what the groups' new rules
    (ours and everyone else's) still allow."""
    return Traffic.of(taken) - Traffic.of(staying)


@dataclass(frozen=True)
class Candidates:
    """The target groups to read fresh under the locks, and why the index cannot vouch for
    some of them (target group ARN -> reason): those hold the revokes."""

    read: frozenset[str]
    doubts: Mapping[str, str]


def _port(text: str | int | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None  # "traffic-port": the targets' own ports


def _takes(lost: Traffic, groups: Iterable[str], peers: Iterable[Peer], port: int | None) -> bool:
    return port is not None and any(
        lost.allows(g, p, proto, port) for g in groups for p in peers for proto in PROTOCOLS
    )


def candidates(
    lost: Traffic,
    sending: Mapping[str, Collection[Peer]],
    listed: Iterable[TargetGroup],
    view: IndexView,
    now: float,
    period_seconds: float,
) -> Candidates:
    """The candidates among `listed` (the fresh listing, without targets); `sending`: target
    group ARN -> the peers its load balancers send from (core/narrow.py `sending_peers`)."""
    groups = lost.groups()
    lost_from = {fam for (_, fam), _ in lost.parts}
    read: set[str] = set()
    doubts: dict[str, str] = {}
    for tg in listed:
        peers = [p for p in sending.get(tg.arn, ()) if p.value in lost_from]
        if not peers:
            continue  # its load balancers admit no peer whose traffic goes
        entry = view.target_groups.get(tg.arn)
        if entry is None:
            read.add(tg.arn)
            doubts[tg.arn] = "not in the inventory index"
            continue
        if entry.stale(now, period_seconds):
            read.add(tg.arn)
            doubts[tg.arn] = "its inventory index entry is older than the verification period"
            continue
        if _could_use(tg, entry, view, lost, groups, peers, now, period_seconds):
            read.add(tg.arn)
    return Candidates(frozenset(read), doubts)


def _could_use(
    tg: TargetGroup,
    entry: Entry,
    view: IndexView,
    lost: Traffic,
    groups: Collection[str],
    peers: Collection[Peer],
    now: float,
    period_seconds: float,
) -> bool:
    """The listing's ports, then the index's targets (their ports in their groups)."""
    if _takes(lost, groups, peers, tg.port) or _takes(
        lost, groups, peers, _port(tg.health_check_port)
    ):
        return True
    for member in entry.members:
        if not member.present:
            continue
        port = member.port if member.port is not None else tg.port
        where = view.targets.get(target_key(tg.target_type, tg.vpc_id, member.target_id))
        if where is None or where.stale(now, period_seconds):
            if _takes(lost, groups, peers, port):  # its groups unknown: any group counts
                return True
            continue
        if _takes(lost, set(where.doc.get("groups", ())) & set(groups), peers, port):
            return True
    return False


def contradictions(
    entry: Entry | None,
    fresh: TargetGroup,
    view: IndexView,
) -> list[str]:
    """What a fresh read under the locks shows that the index did not hold: targets, ports
    and load balancers (`drift`), and targets whose groups differ from the index's."""
    if entry is None:
        return []  # a missing entry is a doubt already
    found = drift(entry, fresh)
    changed = []
    for target in fresh.targets:
        where = view.targets.get(target_key(fresh.target_type, fresh.vpc_id, target.target_id))
        if where is not None and set(where.doc.get("groups", ())) != set(target.group_ids):
            changed.append(target.target_id)
    if changed:
        found.append(f"{fresh.arn}: {len(changed)} target(s) in other groups than the index held")
    return found


@dataclass
class LockedIndexRead:
    """A read under the locks through the index: the inventory (its `doubts` set), and the
    entries read fresh, for the index."""

    inventory: Inventory
    fresh: list[Entry] = field(default_factory=list)
    read_fresh: int = 0  # target groups whose targets were read (DescribeTargetHealth)
    closure: int = 0  # target groups whose load balancer admits a peer whose rule would go
