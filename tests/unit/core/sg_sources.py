"""An independent judge of flow safety by concrete sources, and an exhaustive order search.

A real packet comes from one source: an address, plus the security groups its interface
carries (and the prefix lists its address is in). A rule admits it when the protocol and
port match and the rule's peer is a CIDR holding the address, or one of those groups or
lists. A state of a group is flow-safe when every flow that OLD admits and NEW admits is
admitted. This module restates that from rule fields (`core.sg_judge.allows` for one
peer at a time), without the planner's traffic algebra or its checker.

Sources probed: every address at a CIDR boundary and just outside it (both families, plus
one address per family that no probe CIDR names), each with 0, 1 or 2 of the groups and
prefix lists the rules reference. Two labels suffice: a flow OLD and NEW both admit has a
witness rule on each side, and dropping the labels neither witness uses only makes a
source harder to admit. Protocols and ports come from `core.sg_judge.probes`.
"""

from __future__ import annotations

import ipaddress
import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from unit.core.sg_judge import (
    OWNER,
    OWNER_TAG,
    Doc,
    Key,
    allows,
    key,
    must_follow,
    owned,
    peer,
    probes,
)

Address = tuple[str, int]  # ("ipv4" | "ipv6", address)
Source = tuple[Address, frozenset[tuple[str, str]]]  # address, labels (kind, id)
PortProbe = tuple[int, int | tuple[int, int] | None]  # protocol, port


def _span(value: str) -> tuple[int, int]:
    net = ipaddress.ip_network(value, strict=False)
    return int(net.network_address), int(net.broadcast_address)


def concrete_sources(docs: Iterable[Mapping[str, Any]]) -> list[Source]:
    """Every source the judge tries for these rules (see the module docstring)."""
    addresses: set[Address] = {("ipv4", 1), ("ipv6", 1)}
    labels: set[tuple[str, str]] = set()
    for doc in docs:
        kind, value = peer(doc)
        if kind in ("cidr4", "cidr6"):
            family = "ipv4" if kind == "cidr4" else "ipv6"
            top = 2**32 - 1 if kind == "cidr4" else 2**128 - 1
            lo, hi = _span(value)
            addresses.update((family, a) for a in (lo - 1, lo, hi, hi + 1) if 0 <= a <= top)
        else:
            labels.add((kind, value))
    label_sets = [
        frozenset(c) for size in (0, 1, 2) for c in itertools.combinations(sorted(labels), size)
    ]
    return [(a, s) for a in sorted(addresses) for s in label_sets]


def admits(doc: Mapping[str, Any], group: str, source: Source, probe: PortProbe) -> bool:
    """Whether one rule admits one concrete flow: by the address or by one of the labels."""
    address, labels = source
    proto, port = probe
    if allows(doc, (group, address, proto, port)):
        return True
    return any(allows(doc, (group, label, proto, port)) for label in labels)


class FlowMasks:
    """Each rule's admitted concrete flows of one group as one int (a bit per flow)."""

    def __init__(self, group: str, docs: Sequence[Mapping[str, Any]]) -> None:
        self.group = group
        self.sources = concrete_sources(docs)
        self.ports: list[PortProbe] = sorted({(p[2], p[3]) for p in probes(group, docs)}, key=repr)
        self.memo: dict[Key, int] = {}

    def of(self, doc: Mapping[str, Any]) -> int:
        """A rule's peer and its ports match apart: the ports it admits from its own peer,
        then the sources it admits on one of those ports."""
        k = key(doc)
        if k not in self.memo:
            kind, value = peer(doc)
            own = (
                ("ipv4" if kind == "cidr4" else "ipv6", _span(value)[0])
                if kind in ("cidr4", "cidr6")
                else (kind, value)
            )
            ports, width = 0, len(self.ports)
            for p, (proto, port) in enumerate(self.ports):
                if allows(doc, (self.group, own, proto, port)):
                    ports |= 1 << p
            mask = 0
            if ports:
                probe = self.ports[(ports & -ports).bit_length() - 1]
                for s, source in enumerate(self.sources):
                    if admits(doc, self.group, source, probe):
                        mask |= ports << (s * width)
            self.memo[k] = mask
        return self.memo[k]

    def union(self, docs: Iterable[Mapping[str, Any]]) -> int:
        mask = 0
        for doc in docs:
            mask |= self.of(doc)
        return mask

    def describe(self, mask: int) -> str:
        """The first flow of `mask`, for messages."""
        index = (mask & -mask).bit_length() - 1
        (family, address), labels = self.sources[index // len(self.ports)]
        proto, port = self.ports[index % len(self.ports)]
        shown = ipaddress.IPv4Address(address) if family == "ipv4" else address
        return f"protocol {proto} port {port} from {shown} carrying {sorted(labels) or 'nothing'}"


@dataclass
class SourceWorld:
    """One group's OLD and NEW, judged by concrete sources."""

    group: str
    current: list[Doc]
    desired: list[Doc]  # desired managed rules of this group, one per key
    owner: str = OWNER
    extra: list[Doc] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.masks = FlowMasks(self.group, [*self.current, *self.desired, *self.extra])
        self.unmanaged = [d for d in self.current if not owned(d, self.owner)]
        self.old = self.masks.union(self.current)
        self.new = self.masks.union([*self.unmanaged, *self.desired])

    def new_keys(self) -> set[Key]:
        return {key(d) for d in [*self.unmanaged, *self.desired]}

    def lost(self, docs: Iterable[Mapping[str, Any]]) -> int:
        """The flows OLD and NEW both admit that `docs` do not (0 when flow-safe)."""
        return self.old & self.new & ~self.masks.union(docs)


def source_worlds(
    current: Sequence[Mapping[str, Any]],
    desired: Sequence[Mapping[str, Any]],
    extra: Sequence[Mapping[str, Any]] = (),
    owner: str = OWNER,
) -> dict[str, SourceWorld]:
    out = {}
    for group in sorted({d["GroupId"] for d in [*current, *desired]}):
        cur = [dict(d) for d in current if d["GroupId"] == group and not d.get("IsEgress")]
        want: dict[Key, Doc] = {}
        for doc in desired:
            if doc["GroupId"] == group:
                want.setdefault(key(doc), dict(doc))
        more = [dict(d) for d in extra if d.get("GroupId") == group]
        out[group] = SourceWorld(group, cur, list(want.values()), owner, more)
    return out


def modify_allowed(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """A rule may be rewritten in place into another of the same peer kind (EC2's limit), and
    not into another peer family whose ports it overlaps (`must_follow`): AWS does not
    document that traffic flows during a modify, so a source admitted through both peers is
    never left to one."""
    return peer(old)[0] == peer(new)[0] and not must_follow(old, new)


def order_exists(world: SourceWorld, quota: int) -> bool:
    """Exhaustive search: can single calls take the group from its current rules to NEW with
    every state flow-safe and no call pushing it past `quota`?

    A state is the set of rule keys present. Moves: authorize a desired rule that is missing
    (the count grows by one: never past the quota), revoke any owned rule present (a desired
    one too, to authorize it again later), or modify an owned rule in place into a missing
    desired one (`modify_allowed`; the count stays).
    """
    docs: dict[Key, Doc] = {}
    for doc in [*world.current, *world.desired]:
        docs.setdefault(key(doc), doc)
    universe = sorted(docs)
    index = {k: n for n, k in enumerate(universe)}
    masks = [world.masks.of(docs[k]) for k in universe]
    unmanaged = {key(d) for d in world.unmanaged}
    desired = {key(d) for d in world.desired} - unmanaged
    revocable = {k for k in universe if k not in unmanaged}
    start = sum(1 << index[key(d)] for d in world.current)
    goal = sum(1 << index[k] for k in world.new_keys())
    must = world.old & world.new

    def safe(state: int) -> bool:
        now = 0
        for n, mask in enumerate(masks):
            if state >> n & 1:
                now |= mask
        return not (must & ~now)

    seen = {start}
    frontier = [start]
    while frontier:
        state = frontier.pop()
        if state == goal:
            return True
        count = state.bit_count()
        moves = []
        for k in universe:
            bit = 1 << index[k]
            if state & bit:
                if k in revocable:
                    moves.append(state & ~bit)
                    for target in desired:
                        tbit = 1 << index[target]
                        if not state & tbit and modify_allowed(docs[k], docs[target]):
                            moves.append(state & ~bit | tbit)
            elif k in desired and count + 1 <= quota:
                moves.append(state | bit)
        for nxt in moves:
            if nxt not in seen and safe(nxt):
                seen.add(nxt)
                frontier.append(nxt)
    return False


def judge_flows(
    current: Sequence[Mapping[str, Any]],
    desired: Sequence[Mapping[str, Any]],
    plan_doc: Mapping[str, Any],
    quota: int,
    owner: str = OWNER,
    *,
    reaches_desired: bool = True,
) -> list[str]:
    """Simulate the plan JSON call by call; every state must be flow-safe by concrete sources,
    within the quota, touching only owned rules, and (unless partial) end in NEW."""
    written = [
        doc
        for step in plan_doc["steps"]
        for doc in [*step.get("rules", []), *([step["rule"]] if "rule" in step else [])]
    ]
    scope = source_worlds(current, desired, written, owner)
    state = {g: {d["SecurityGroupRuleId"]: d for d in w.current} for g, w in scope.items()}
    problems: list[str] = []
    for index, step in enumerate(plan_doc["steps"]):
        group = step["group_id"]
        where = f"step {index} ({step['action']} in {group})"
        if group not in scope:
            problems.append(f"{where}: group outside the scope")
            continue
        rules = state[group]
        before = len(rules)
        if step["action"] == "authorize":
            for n, doc in enumerate(step["rules"]):
                if key(doc) in {key(d) for d in rules.values()}:
                    problems.append(f"{where}: duplicate of an existing rule {key(doc)}")
                tags = [{"Key": OWNER_TAG, "Value": owner}]
                rules[f"judge-{index}-{n}"] = {**doc, "Tags": tags}
        elif step["action"] in ("revoke", "modify"):
            ids = step["rule_ids"] if step["action"] == "revoke" else [step["rule_id"]]
            for rule_id in ids:
                if rule_id not in rules or not owned(rules[rule_id], owner):
                    problems.append(f"{where}: touches a missing or unowned rule {rule_id}")
                    continue
                if step["action"] == "revoke":
                    del rules[rule_id]
                    continue
                target = rules[rule_id]
                if key(target) != key(step["rule"]) and not modify_allowed(target, step["rule"]):
                    problems.append(f"{where}: a modify between peers that may admit one source")
                rules[rule_id] = {**step["rule"], "Tags": target["Tags"]}
        elif step["action"] != "adopt":
            problems.append(f"{where}: unknown action")
        if len(rules) > before and len(rules) > quota:
            problems.append(f"{where}: {len(rules)} rules exceed the quota of {quota}")
        world = scope[group]
        lost = world.lost(rules.values())
        if lost:
            problems.append(
                f"{where}: denies {world.masks.describe(lost)}, wanted before and after"
            )
        exposed = world.masks.union(rules.values()) & ~(world.old | world.new)
        if exposed:
            problems.append(f"{where}: admits {world.masks.describe(exposed)}, outside OLD ∪ NEW")
    for group, world in scope.items() if reaches_desired else ():
        keys = [key(d) for d in state[group].values()]
        if len(set(keys)) != len(keys) or set(keys) != world.new_keys():
            problems.append(f"final state of {group} is not unmanaged + desired")
    return problems
