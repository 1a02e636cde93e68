"""An independent judge of plans, for the planning-core tests.

The judge re-states the safety invariants of docs/invariants.md straight from rule fields, without the
planner's own checker or traffic algebra (`sg_reconciler.core.safety` / `.traffic` are not
imported here): a rule set allows a flow when some rule's group, peer, protocol and ports
match it. Flows are judged on a finite set of probes built from every rule involved: each
port boundary and its neighbours, the first and last address of each CIDR and the addresses
just outside it, each referenced group, each protocol number used plus one that no rule
names. Between two neighbouring probes no rule changes its verdict, so a difference in
allowed traffic shows up at some probe.
"""

from __future__ import annotations

import functools
import ipaddress
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# The ownership tag is a contract (docs/contracts.md); restated so the judge stands alone.
OWNER_TAG = "sg-reconciler/owner"
OWNER = "sg-reconciler"
PROTOCOL_NUMBERS = {"tcp": 6, "udp": 17, "icmp": 1, "icmpv6": 58}
UNUSED_PROTOCOL = 50  # ESP: no generated rule names it, only "-1" covers it

Doc = dict[str, Any]
Source = tuple[str, int | str]  # ("ipv4" | "ipv6", address) or ("group" | "prefix_list", id)
Probe = tuple[str, Source, int, int | tuple[int, int] | None]  # group, source, protocol, port
Key = tuple[str, str, int, int, str, str]  # EC2's duplicate identity of a rule


def peer(doc: Mapping[str, Any]) -> tuple[str, str]:
    """(kind, value) of a rule's one peer field."""
    if doc.get("CidrIpv4"):
        return "cidr4", str(doc["CidrIpv4"])
    if doc.get("CidrIpv6"):
        return "cidr6", str(doc["CidrIpv6"])
    if doc.get("PrefixListId"):
        return "prefix_list", str(doc["PrefixListId"])
    return "group", str(doc["ReferencedGroupInfo"]["GroupId"])


def protocol(doc: Mapping[str, Any]) -> int | None:
    """The rule's protocol number; None for -1 (every protocol)."""
    raw = str(doc["IpProtocol"]).lower()
    if raw == "-1":
        return None
    return PROTOCOL_NUMBERS[raw] if raw in PROTOCOL_NUMBERS else int(raw)


def key(doc: Mapping[str, Any]) -> Key:
    proto = protocol(doc)
    ported = proto in (6, 17, 1, 58)
    lo, hi = (int(doc["FromPort"]), int(doc["ToPort"])) if ported else (-1, -1)
    kind, value = peer(doc)
    return (doc["GroupId"], "-1" if proto is None else str(proto), lo, hi, kind, value)


def owned(doc: Mapping[str, Any], owner: str = OWNER) -> bool:
    return any(t["Key"] == OWNER_TAG and t["Value"] == owner for t in doc.get("Tags", []))


@functools.cache
def _network(value: str) -> tuple[int, int]:
    """First and last address of a CIDR, as integers."""
    net = ipaddress.ip_network(value, strict=False)
    return int(net.network_address), int(net.broadcast_address)


def allows(doc: Mapping[str, Any], probe: Probe) -> bool:
    """Whether this one rule lets the probe's flow in: EC2's matching, field by field."""
    group, (source_kind, source), proto, port = probe
    if doc["GroupId"] != group:
        return False
    kind, value = peer(doc)
    if kind in ("cidr4", "cidr6"):
        if source_kind != ("ipv4" if kind == "cidr4" else "ipv6"):
            return False
        lo, hi = _network(value)
        if not (isinstance(source, int) and lo <= source <= hi):
            return False
    elif (source_kind, source) != (kind, value):
        return False
    rule_proto = protocol(doc)
    if rule_proto is None:
        return True
    if rule_proto != proto:
        return False
    if proto in (6, 17):
        assert isinstance(port, int)
        return int(doc["FromPort"]) <= port <= int(doc["ToPort"])
    if proto in (1, 58):
        assert isinstance(port, tuple)
        icmp_type, code = int(doc["FromPort"]), int(doc["ToPort"])
        return icmp_type == -1 or (icmp_type == port[0] and code in (-1, port[1]))
    return True


def _family(doc: Mapping[str, Any]) -> str:
    kind, value = peer(doc)
    return {"cidr4": "ipv4", "cidr6": "ipv6"}.get(kind, value)


def _span(doc: Mapping[str, Any]) -> tuple[tuple[int, int], ...]:
    """The (first, last) protocol, port or ICMP type, and ICMP code the rule admits."""
    proto = protocol(doc)
    anything = (0, 255), (0, 65535), (0, 255)
    if proto is None:
        return anything
    if proto in (6, 17):
        return (proto, proto), (int(doc["FromPort"]), int(doc["ToPort"])), (0, 255)
    if proto in (1, 58):
        icmp_type, code = int(doc["FromPort"]), int(doc["ToPort"])
        types = (0, 255) if icmp_type == -1 else (icmp_type, icmp_type)
        codes = (0, 255) if icmp_type == -1 or code == -1 else (code, code)
        return (proto, proto), types, codes
    return (proto, proto), *anything[1:]


def must_follow(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """Invariant 9, restated: `old` may go only after `new` exists when their peers differ in
    family (one source can sit in both) and they overlap on protocol and ports."""
    if old["GroupId"] != new["GroupId"] or _family(old) == _family(new):
        return False
    return all(a[0] <= b[1] and b[0] <= a[1] for a, b in zip(_span(old), _span(new), strict=True))


def probes(group: str, docs: Iterable[Mapping[str, Any]]) -> list[Probe]:
    """Representative flows into `group` for the given rules (see the module docstring)."""
    sources: set[Source] = set()
    ports = {0, 65535}
    types, codes = {0, 255}, {0, 255}
    named: set[int | None] = set()
    for doc in docs:
        kind, value = peer(doc)
        if kind in ("cidr4", "cidr6"):
            family = "ipv4" if kind == "cidr4" else "ipv6"
            top = 2**32 - 1 if kind == "cidr4" else 2**128 - 1
            lo, hi = _network(value)
            sources.update((family, a) for a in (lo - 1, lo, hi, hi + 1) if 0 <= a <= top)
        else:
            sources.add((kind, value))
        proto = protocol(doc)
        named.add(proto)
        if proto in (6, 17):
            for edge in (int(doc["FromPort"]), int(doc["ToPort"])):
                ports.update(p for p in (edge - 1, edge, edge + 1) if 0 <= p <= 65535)
        elif proto in (1, 58):
            for edge, into in ((int(doc["FromPort"]), types), (int(doc["ToPort"]), codes)):
                into.update(p for p in (edge - 1, edge, edge + 1) if 0 <= p <= 255)
    sources.add(("group", "sg-judge-unreferenced"))
    # A protocol no rule names is matched by "-1" rules only, whatever the port: one probe.
    port_probes: dict[int, list[int | tuple[int, int] | None]] = {}
    for proto in (6, 17):
        port_probes[proto] = list(sorted(ports) if proto in named else [0])
    for proto in (1, 58):
        port_probes[proto] = (
            [(t, c) for t in sorted(types) for c in sorted(codes)] if proto in named else [(0, 0)]
        )
    port_probes[UNUSED_PROTOCOL] = [None]
    flows: list[Probe] = []
    for source in sorted(sources, key=repr):
        flows.extend(
            (group, source, proto, port) for proto, each in port_probes.items() for port in each
        )
    return flows


class Masks:
    """Allowed probes of a rule as a bit set (an int), memoised by the rule's identity."""

    def __init__(self, flows: Sequence[Probe]) -> None:
        self.flows = flows
        self.memo: dict[Key, int] = {}

    def of(self, doc: Mapping[str, Any]) -> int:
        k = key(doc)
        if k not in self.memo:
            self.memo[k] = sum(1 << n for n, f in enumerate(self.flows) if allows(doc, f))
        return self.memo[k]

    def union(self, docs: Iterable[Mapping[str, Any]]) -> int:
        mask = 0
        for doc in docs:
            mask |= self.of(doc)
        return mask


@dataclass
class GroupWorld:
    """One group's OLD and NEW, as rule documents and as allowed-probe masks."""

    group: str
    current: list[Doc]
    desired: list[Doc]  # desired managed rules of this group, one per key
    masks: Masks
    owner: str = OWNER

    @property
    def unmanaged(self) -> list[Doc]:
        return [d for d in self.current if not owned(d, self.owner)]

    @property
    def old(self) -> int:
        return self.masks.union(self.current)

    @property
    def new(self) -> int:
        return self.masks.union([*self.unmanaged, *self.desired])

    def new_keys(self) -> set[Key]:
        return {key(d) for d in [*self.unmanaged, *self.desired]}

    def safety(self, docs: Iterable[Mapping[str, Any]]) -> list[str]:
        """Invariants 1 and 2 for one state of the group."""
        now = self.masks.union(docs)
        must, may = self.old & self.new, self.old | self.new
        problems = []
        if must & ~now:
            problems.append(f"loses traffic of OLD ∩ NEW at {self.first(must & ~now)}")
        if now & ~may:
            problems.append(f"allows traffic outside OLD ∪ NEW at {self.first(now & ~may)}")
        return problems

    def first(self, mask: int) -> Probe:
        return self.masks.flows[(mask & -mask).bit_length() - 1]


def worlds(
    current: Sequence[Mapping[str, Any]],
    desired: Sequence[Mapping[str, Any]],
    extra: Sequence[Mapping[str, Any]] = (),
    owner: str = OWNER,
) -> dict[str, GroupWorld]:
    """Per group in scope: its world; `extra` adds rules whose boundaries must be probed too."""
    groups = sorted({d["GroupId"] for d in [*current, *desired]})
    out = {}
    for group in groups:
        cur = [dict(d) for d in current if d["GroupId"] == group and not d.get("IsEgress")]
        want: dict[Key, Doc] = {}
        for doc in desired:
            if doc["GroupId"] == group:
                want.setdefault(key(doc), dict(doc))
        involved = [*cur, *want.values(), *(d for d in extra if d.get("GroupId") == group)]
        out[group] = GroupWorld(
            group, cur, list(want.values()), Masks(probes(group, involved)), owner
        )
    return out


def plan_rules(plan_doc: Mapping[str, Any]) -> list[Doc]:
    """Every rule a plan document writes (authorized or modified into)."""
    rules: list[Doc] = []
    for step in plan_doc["steps"]:
        rules.extend(step.get("rules", []))
        if "rule" in step:
            rules.append(step["rule"])
    return rules


def judge_plan(
    current: Sequence[Mapping[str, Any]],
    desired: Sequence[Mapping[str, Any]],
    plan_doc: Mapping[str, Any],
    quota: Callable[[str], int],
    owner: str = OWNER,
    *,
    reaches_desired: bool = True,
) -> list[str]:
    """Simulate the plan JSON call by call; every broken invariant, in call order.

    `reaches_desired` False judges a partial plan: every state, but not the final outcome.
    """
    from unit.core.sg_sources import source_worlds  # it builds on this module

    scope = worlds(current, desired, plan_rules(plan_doc), owner)
    sources = source_worlds(current, desired, plan_rules(plan_doc), owner)
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
        present = {key(d) for d in rules.values()}
        if step["action"] == "authorize":
            for n, doc in enumerate(step["rules"]):
                if doc["GroupId"] != group or doc.get("IsEgress"):
                    problems.append(f"{where}: rule for another group or egress")
                if key(doc) in present:
                    problems.append(f"{where}: duplicate of an existing rule {key(doc)}")
                present.add(key(doc))
                new_id = f"judge-{index}-{n}"
                tags = [{"Key": OWNER_TAG, "Value": owner}]
                rules[new_id] = {**doc, "SecurityGroupRuleId": new_id, "Tags": tags}
        elif step["action"] == "revoke":
            for rule_id in step["rule_ids"]:
                if rule_id not in rules:
                    problems.append(f"{where}: revokes missing rule {rule_id}")
                elif not owned(rules[rule_id], owner):
                    problems.append(f"{where}: revokes unowned rule {rule_id}")
                else:
                    del rules[rule_id]
        elif step["action"] == "modify":
            rule_id, doc = step["rule_id"], step["rule"]
            target = rules.get(rule_id)
            if target is None or not owned(target, owner):
                problems.append(f"{where}: modifies missing or unowned rule {rule_id}")
            elif peer(target)[0] != peer(doc)[0] or doc["GroupId"] != group:
                problems.append(f"{where}: modify changes the peer kind or group")
            elif key(doc) != key(target) and key(doc) in present:
                problems.append(f"{where}: modify makes a duplicate {key(doc)}")
            else:
                if key(doc) != key(target) and must_follow(target, doc):
                    problems.append(f"{where}: rewrites {rule_id} into another peer (flow)")
                rules[rule_id] = {**doc, "SecurityGroupRuleId": rule_id, "Tags": target["Tags"]}
        else:
            problems.append(f"{where}: unknown action")
        if len(rules) > before and len(rules) > quota(group):
            problems.append(f"{where}: {len(rules)} rules exceed the quota of {quota(group)}")
        problems.extend(f"{where}: {p}" for p in scope[group].safety(rules.values()))
        lost = sources[group].lost(rules.values())
        if lost:
            shown = sources[group].masks.describe(lost)
            problems.append(f"{where}: denies {shown}, which OLD and NEW admit (flow)")
    for group, world in scope.items() if reaches_desired else ():
        final = list(state[group].values())
        keys = [key(d) for d in final]
        if len(set(keys)) != len(keys) or set(keys) != world.new_keys():
            problems.append(f"final state of {group} is not unmanaged + desired")
        wanted = {key(d): d.get("Description", "") for d in world.desired}
        for doc in final:
            stale = key(doc) in wanted and wanted[key(doc)] != doc.get("Description", "")
            if owned(doc, owner) and stale:
                problems.append(f"final rule {doc['SecurityGroupRuleId']} has a stale description")
    return problems


def order_exists(world: GroupWorld, quota: int) -> bool:
    """Whether a flow-safe order within `quota` takes the group from OLD to NEW: the
    exhaustive search of `core.sg_sources`, which judges every state by concrete sources."""
    from unit.core.sg_sources import SourceWorld
    from unit.core.sg_sources import order_exists as search

    return search(SourceWorld(world.group, world.current, world.desired, world.owner), quota)
