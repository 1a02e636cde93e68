"""Desired ingress rules derived from load balancers and their targets, plus static rules.

For each managed load balancer that has security groups, each of its target groups and each
registered target: the groups the target lives in (per policy) must allow the traffic port
and the health-check port from the rule source (the load balancer's own groups, or one
shared backend group). Ports are gathered per (group, peer, protocol) and covered with at
most `rule_budget` ranges by `compact`, which exposes fewer unneeded ports than the single
min..max range the AWS Load Balancer Controller opens.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from sg_reconciler.core.compaction import PortRange, compact, merge_ranges
from sg_reconciler.core.inventory import Inventory, LoadBalancer, SecurityGroup, TargetGroup
from sg_reconciler.core.rules import DEFAULT_OWNER, Peer, Rule, RuleKey
from sg_reconciler.core.scope import Scope

DestinationKind = Literal["target_enis", "named_groups", "tagged_groups"]

# Target-group protocol -> the IP protocols its traffic uses.
TRAFFIC_PROTOCOLS: Mapping[str, tuple[str, ...]] = {
    "TCP": ("tcp",),
    "TLS": ("tcp",),
    "HTTP": ("tcp",),
    "HTTPS": ("tcp",),
    "UDP": ("udp",),
    "TCP_UDP": ("tcp", "udp"),
}
# Health checks are TCP, HTTP or HTTPS, all carried over TCP (a UDP target group too).
HEALTH_CHECK_PROTOCOLS: Mapping[str, str] = {"TCP": "tcp", "HTTP": "tcp", "HTTPS": "tcp"}


@dataclass(frozen=True)
class DesiredSettings:
    """The parts of the policy that shape desired rules (the policy model builds this)."""

    owner: str = DEFAULT_OWNER
    backend_group: str | None = None  # None: each load balancer's own groups are the peers
    destination: DestinationKind = "target_enis"
    named_groups: tuple[str, ...] = ()
    tag_key: str | None = None
    tag_value: str | None = None
    include_health_checks: bool = True
    rule_budget: int = 3
    static_rules: tuple[Rule, ...] = ()

    @property
    def description(self) -> str:
        """One description for every derived rule: it stays stable while ports move."""
        return f"{self.owner}: load balancer targets"


Flow = tuple[str, str, str]  # (group that gets the rule, peer group, protocol)


@dataclass(frozen=True)
class Exposure:
    """Ports one group opens beyond what its targets need, ours against one range per flow."""

    group_id: str
    rules: int
    needed_ports: int
    exposed_ports: int
    single_range_exposed_ports: int


@dataclass(frozen=True)
class DesiredState:
    rules: tuple[Rule, ...]
    exposure: Mapping[str, Exposure]
    notes: tuple[str, ...] = ()
    # Load balancer ARN, target group ARN or instance id -> groups whose rules it shapes.
    links: Mapping[str, frozenset[str]] = field(default_factory=dict)
    # Load balancer or target group ARN -> the peers of the rules it shapes.
    sources: Mapping[str, frozenset[str]] = field(default_factory=dict)
    # Each desired rule -> what needs it ("target group web (load balancer k8s-web)", or
    # "static rule"), so that a plan can say why a rule exists.
    needed_by: Mapping[RuleKey, tuple[str, ...]] = field(default_factory=dict)


def subtract_ranges(ranges: Iterable[PortRange], cover: Iterable[PortRange]) -> list[PortRange]:
    """The ports of `ranges` outside `cover`, as merged ranges."""
    remaining = merge_ranges(ranges)
    for c_lo, c_hi in merge_ranges(cover):
        pieces: list[PortRange] = []
        for lo, hi in remaining:
            if hi < c_lo or lo > c_hi:
                pieces.append((lo, hi))
                continue
            if lo < c_lo:
                pieces.append((lo, c_lo - 1))
            if hi > c_hi:
                pieces.append((c_hi + 1, hi))
        remaining = pieces
    return remaining


def _port_ranges(ports: set[int]) -> list[PortRange]:
    return merge_ranges((p, p) for p in ports)


class _Builder:
    """One pass over the inventory; collects needed ports per flow and what links to what."""

    def __init__(self, inventory: Inventory, settings: DesiredSettings) -> None:
        self.inventory = inventory
        self.settings = settings
        self.groups: Mapping[str, SecurityGroup] = inventory.groups
        self.needed: dict[Flow, set[int]] = {}
        self.why: dict[Flow, dict[str, set[int]]] = {}  # a flow -> what needs which ports
        self.notes: list[str] = []
        self.links: dict[str, set[str]] = {}
        self.sources: dict[str, set[str]] = {}
        self._missing_noted: set[str] = set()

    def note_missing(self, group_id: str, role: str) -> None:
        if group_id not in self._missing_noted:
            self._missing_noted.add(group_id)
            self.notes.append(
                f"{group_id} ({role}) does not exist (deleted?): left out of the plan"
            )

    def exists(self, group_id: str, role: str) -> bool:
        if group_id in self.groups:
            return True
        self.note_missing(group_id, role)
        return False

    def peers_of(self, lb: LoadBalancer) -> list[str]:
        if not lb.security_groups:
            self.notes.append(
                f"load balancer {lb.name} has no security groups: no rule can name it as a "
                "source, so its targets are skipped"
            )
            return []
        if self.settings.backend_group is not None:
            backend = self.settings.backend_group
            if backend not in lb.security_groups:
                self.notes.append(
                    f"load balancer {lb.name} does not carry the backend group {backend}: "
                    "rules from that group will not admit its traffic"
                )
            candidates = [backend]
        else:
            candidates = list(lb.security_groups)
        return [g for g in candidates if self.exists(g, f"rule source of {lb.name}")]

    def hosts_of(self, target_groups: tuple[str, ...]) -> list[str]:
        settings = self.settings
        if settings.destination == "named_groups":
            candidates = list(settings.named_groups)
        elif settings.destination == "tagged_groups":
            candidates = [
                g
                for g in target_groups
                if g in self.groups
                and (value := self.groups[g].tag(settings.tag_key or "")) is not None
                and (settings.tag_value is None or value == settings.tag_value)
            ]
        else:
            candidates = list(target_groups)
        return [g for g in candidates if self.exists(g, "target group destination")]

    def add_target_group(self, tg: TargetGroup, lbs: list[LoadBalancer]) -> None:
        traffic = TRAFFIC_PROTOCOLS.get(tg.protocol.upper())
        if tg.target_type not in ("instance", "ip"):
            if tg.target_type == "alb":
                self.notes.append(f"target group {tg.name}: ALB targets are not managed")
            return  # lambda targets have no security group
        if traffic is None:
            self.notes.append(f"target group {tg.name}: protocol {tg.protocol} is not managed")
            return
        peers = sorted({p for lb in lbs for p in self.peers_of(lb)})
        if not peers:
            return
        health_protocol = HEALTH_CHECK_PROTOCOLS.get(tg.health_check_protocol.upper(), "tcp")
        explicit_health_port = None
        if tg.health_check_port.isdigit():
            explicit_health_port = int(tg.health_check_port)
        elif tg.health_check_port != "traffic-port":
            self.notes.append(
                f"target group {tg.name}: health-check port {tg.health_check_port!r} not "
                "understood; the traffic port is used"
            )
        check_health = self.settings.include_health_checks and tg.health_check_enabled
        need = f"target group {tg.name} ({', '.join(lb.name for lb in lbs)})"
        tg_hosts: set[str] = set()
        unplaced = 0
        for target in tg.targets:
            port = target.port if target.port is not None else tg.port
            if port is None:
                continue
            hosts = self.hosts_of(target.group_ids)
            if not hosts:
                unplaced += 1
                continue
            tg_hosts.update(hosts)
            health_port = port if explicit_health_port is None else explicit_health_port
            for host in hosts:
                for peer in peers:
                    wants = [(protocol, port) for protocol in traffic]
                    if check_health:
                        wants.append((health_protocol, health_port))
                    for protocol, wanted in wants:
                        flow = (host, peer, protocol)
                        self.needed.setdefault(flow, set()).add(wanted)
                        self.why.setdefault(flow, {}).setdefault(need, set()).add(wanted)
        if unplaced:
            self.notes.append(
                f"target group {tg.name}: {unplaced} target(s) in no destination group "
                "(interface not found or no matching group): no rules for them"
            )
        self.links.setdefault(tg.arn, set()).update(tg_hosts)
        self.sources.setdefault(tg.arn, set()).update(peers)
        for lb in lbs:
            self.links.setdefault(lb.arn, set()).update(tg_hosts)
            self.sources.setdefault(lb.arn, set()).update(peers)
        for target in tg.targets:
            if target.instance_id:
                self.links.setdefault(target.instance_id, set()).update(tg_hosts)

    def build(self) -> DesiredState:
        lbs = {lb.arn: lb for lb in self.inventory.load_balancers}
        for tg in sorted(self.inventory.target_groups, key=lambda t: t.arn):
            attached = [lbs[a] for a in tg.load_balancer_arns if a in lbs]
            if attached:
                self.add_target_group(tg, attached)
        return self.finish()

    def finish(self) -> DesiredState:
        settings = self.settings
        statics: list[Rule] = []
        static_cover: dict[Flow, list[PortRange]] = {}
        for rule in settings.static_rules:
            key = rule.key
            if not self.exists(key.group_id, "static rule group"):
                continue
            if key.peer.kind == "group" and not self.exists(key.peer.value, "static rule source"):
                continue
            statics.append(rule)
            if key.peer.kind == "group":
                flow = (key.group_id, key.peer.value, key.protocol)
                static_cover.setdefault(flow, []).append((key.from_port, key.to_port))
        rules: list[Rule] = list(statics)
        per_group: dict[str, list[int]] = {}
        for flow in sorted(self.needed):
            host, peer, protocol = flow
            needed = subtract_ranges(_port_ranges(self.needed[flow]), static_cover.get(flow, ()))
            if not needed:
                continue
            cover = compact(needed, settings.rule_budget)
            lbc = compact(needed, 1)
            for lo, hi in cover.ranges:
                rules.append(
                    Rule(
                        RuleKey(host, protocol, lo, hi, Peer("group", peer)),
                        settings.description,
                    )
                )
            totals = per_group.setdefault(host, [0, 0, 0, 0])
            totals[0] += len(cover.ranges)
            totals[1] += cover.needed_ports
            totals[2] += cover.exposed_ports
            totals[3] += lbc.exposed_ports
        for rule in statics:
            per_group.setdefault(rule.group_id, [0, 0, 0, 0])[0] += 1
        exposure = {g: Exposure(g, t[0], t[1], t[2], t[3]) for g, t in sorted(per_group.items())}
        needed_by: dict[RuleKey, set[str]] = {r.key: {"static rule"} for r in statics}
        by_flow: dict[Flow, list[RuleKey]] = {}
        for rule in rules:
            flow = (rule.group_id, rule.key.peer.value, rule.key.protocol)
            by_flow.setdefault(flow, []).append(rule.key)
        for flow, needs in self.why.items():
            keys = by_flow.get(flow, [])
            for need, ports in needs.items():
                for key in keys:
                    if any(key.from_port <= port <= key.to_port for port in ports):
                        needed_by.setdefault(key, set()).add(need)
        return DesiredState(
            rules=tuple(sorted(rules, key=lambda r: r.key)),
            exposure=exposure,
            notes=tuple(dict.fromkeys(self.notes)),  # once each, in order
            links={k: frozenset(v) for k, v in self.links.items()},
            sources={k: frozenset(v) for k, v in self.sources.items()},
            needed_by={k: tuple(sorted(v)) for k, v in needed_by.items()},
        )


def compute_desired(inventory: Inventory, settings: DesiredSettings) -> DesiredState:
    """Desired managed ingress rules of every group the policy covers, with an exposure report."""
    return _Builder(inventory, settings).build()


def touched_groups(
    inventory: Inventory, state: DesiredState, scope: Scope | None, owner: str
) -> frozenset[str] | None:
    """The groups a scope touches; None means every group in play.

    A group is touched when the scope names it, when it gets rules for a load balancer or
    target group in scope, or when it hosts an instance in scope. Groups holding owned rules
    whose peer is a touched rule source are touched too, so a rule that moves away from a
    group is revoked there. A load balancer or target group the inventory does not know
    (deleted, or no longer managed) widens the scope to everything: its old rules can only
    be found by a full pass.
    """
    if scope is None or scope.full:
        return None
    known = {lb.arn for lb in inventory.load_balancers} | {tg.arn for tg in inventory.target_groups}
    touched = set(scope.group_ids)
    sources = set(scope.group_ids)
    for arn in scope.load_balancer_arns | scope.target_group_arns:
        if arn not in known:
            return None
        touched |= state.links.get(arn, frozenset())
        sources |= state.sources.get(arn, frozenset())
    for instance_id in scope.instance_ids:
        touched |= state.links.get(instance_id, frozenset())
    for rule in (*inventory.rules, *state.rules):
        peer = rule.key.peer
        ours = rule.rule_id is None or rule.owned_by(owner)  # desired, or owned current
        if ours and peer.kind == "group" and peer.value in sources:
            touched.add(rule.group_id)
    return frozenset(touched)
