"""Desired ingress rules derived from load balancers and their targets, plus static rules.

The policy is a list of bindings. Each binding selects load balancers by tag and says where
their traffic comes from (the rule source) and which groups receive the rules (the
destination). For each of its load balancers, target groups and registered targets, the
destination groups must allow the traffic port and the health-check port from the source.
Ports are gathered per flow (group, peer, protocol) and covered with at most `rule_budget`
ranges by `compact`, which exposes fewer unneeded ports than the single min..max range the
AWS Load Balancer Controller opens. Two bindings that shape one flow must agree on how
(docs/configuration.md, Bindings): otherwise that group is refused, naming both.

Sources follow AWS's rules for Network Load Balancers: a load balancer with security groups
is referenced by group; one without is admitted by address. Its own addresses (its subnets'
CIDRs) carry health checks, and all traffic when client IP preservation is off; when it is
on, the traffic's source is the client, so the binding's client CIDRs are admitted instead.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from sg_reconciler.core.account import (
    Inventory,
    LoadBalancer,
    SecurityGroup,
    Tags,
    Target,
    TargetGroup,
)
from sg_reconciler.core.compaction import PortRange, compact, merge_ranges
from sg_reconciler.core.rules import DEFAULT_OWNER, Peer, Rule, RuleKey, cidr_peer
from sg_reconciler.core.scope import Scope

SourceKind = Literal["load_balancer_groups", "backend_group", "load_balancer_addresses"]
DestinationKind = Literal["target_enis", "named_groups", "tagged_groups", "cluster_group"]
CLUSTER_TAG_PREFIX = "kubernetes.io/cluster/"

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
class Binding:
    """One set of load balancers and how their targets' rules are derived.

    The empty selector here selects every load balancer of the inventory; the policy model
    supplies its own default (the managed tag)."""

    name: str = "default"
    load_balancer_tags: Tags = ()  # all must match; the value "*" matches any value
    source: SourceKind = "load_balancer_groups"
    backend_group: str | None = None
    # CIDRs admitted for client traffic when client IP preservation is on (addresses
    # source only); None: an internal load balancer's VPC CIDRs, nothing for an
    # internet-facing one (docs/configuration.md explains why).
    client_cidrs: tuple[str, ...] | None = None
    destination: DestinationKind = "target_enis"
    named_groups: tuple[str, ...] = ()
    tag_key: str | None = None
    tag_value: str | None = None
    cluster_name: str | None = None
    include_health_checks: bool = True
    rule_budget: int = 3

    def selects(self, tags: Tags | Mapping[str, str]) -> bool:
        """Whether a load balancer with these tags belongs to this binding."""
        have = dict(tags)
        return all(
            key in have and (want == "*" or have[key] == want)
            for key, want in self.load_balancer_tags
        )

    @property
    def needs_interfaces(self) -> bool:
        """Whether targets' interfaces must be read to place their rules."""
        return self.destination != "named_groups"

    @property
    def shaping(self) -> int:
        """What two bindings shaping one flow must agree on: how its ports are covered (the
        ports themselves add up, health checks included)."""
        return self.rule_budget


def disagreement(first: Binding, second: Binding, what: str) -> str | None:
    """Why two bindings that derive `what` cannot both shape it, or None if they agree."""
    if first.shaping == second.shaping:
        return None
    return (
        f"bindings {first.name!r} and {second.name!r} both derive {what} but disagree "
        f"(rule_budget {first.rule_budget} and {second.rule_budget}): make them agree"
    )


@dataclass(frozen=True)
class DesiredSettings:
    """The parts of the policy that shape desired rules (the policy model builds this)."""

    owner: str = DEFAULT_OWNER
    bindings: tuple[Binding, ...] = (Binding(),)
    static_rules: tuple[Rule, ...] = ()

    @property
    def description(self) -> str:
        """One description for every derived rule: it stays stable while ports move."""
        return f"{self.owner}: load balancer targets"


Flow = tuple[str, Peer, str]  # (group that gets the rule, peer, protocol)


@dataclass(frozen=True)
class Exposure:
    """Ports one group opens beyond what its targets need, ours against one range per flow."""

    group_id: str
    rules: int
    needed_ports: int
    exposed_ports: int
    single_range_exposed_ports: int


@dataclass(frozen=True)
class LookupMiss:
    """A target whose security group is unknown: its interface was not found (a pod on an
    unknown address, an interface mid-replacement, an address outside the VPC) or, with the
    cluster_group destination, the group cannot be chosen (as the LBC, which stops there)."""

    vpc_id: str
    target_group: str
    target_id: str
    protocol: str  # "tcp" or "udp"
    ports: frozenset[int]  # traffic and health-check ports


@dataclass(frozen=True)
class DesiredState:
    rules: tuple[Rule, ...]
    exposure: Mapping[str, Exposure]
    notes: tuple[str, ...] = ()
    # Load balancer ARN, target group ARN or instance id -> groups whose rules it shapes.
    links: Mapping[str, frozenset[str]] = field(default_factory=dict)
    # Load balancer or target group ARN -> the peers of the rules it shapes.
    sources: Mapping[str, frozenset[Peer]] = field(default_factory=dict)
    # Each desired rule -> what needs it ("target group web (load balancer k8s-web)", or
    # "static rule"), so that a plan can say why a rule exists.
    needed_by: Mapping[RuleKey, tuple[str, ...]] = field(default_factory=dict)
    lookup_misses: tuple[LookupMiss, ...] = ()
    # Groups where two bindings disagree on how to shape a flow -> why: no rule of theirs is
    # derived, and the planner leaves them alone (and holds every revoke) until they agree.
    conflicts: Mapping[str, str] = field(default_factory=dict)
    # Group -> (protocol, port) its targets are reached on (traffic and health checks).
    target_ports: Mapping[str, frozenset[tuple[str, int]]] = field(default_factory=dict)


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


ALWAYS_PRESERVED = frozenset({"UDP", "TCP_UDP"})  # AWS: client IP preservation cannot be off


def preserves_client_ip(lb: LoadBalancer, tg: TargetGroup) -> bool:
    """Whether targets see the client's address: always for UDP and TCP_UDP; else the
    attribute, or AWS's default when it is unread (on for instance targets). An ALB proxies."""
    if lb.type != "network":
        return False
    if tg.protocol.upper() in ALWAYS_PRESERVED:
        return True
    if tg.preserve_client_ip is not None:
        return tg.preserve_client_ip
    return tg.target_type == "instance"


def source_groups(lb: LoadBalancer, binding: Binding) -> tuple[str, ...]:
    """The groups a binding admits a load balancer's traffic from (group sources only)."""
    if binding.source == "load_balancer_addresses":
        return ()
    if binding.backend_group is not None:
        return (binding.backend_group,)
    return lb.security_groups


_NAMED_TARGETS = 10  # a note names this many targets, then counts the rest


@dataclass(frozen=True)
class _Peers:
    traffic: tuple[Peer, ...]
    health: tuple[Peer, ...]


class _Builder:
    """One pass over the inventory per binding; collects needed ports per flow and links."""

    def __init__(self, inventory: Inventory, settings: DesiredSettings) -> None:
        self.inventory = inventory
        self.settings = settings
        self.groups: Mapping[str, SecurityGroup] = inventory.groups
        self.needed: dict[Flow, set[int]] = {}
        self.why: dict[Flow, dict[str, set[int]]] = {}  # a flow -> what needs which ports
        self.shaped_by: dict[Flow, Binding] = {}  # the first binding that shaped each flow
        self.notes: list[str] = []
        self.links: dict[str, set[str]] = {}
        self.sources: dict[str, set[Peer]] = {}
        self.misses: list[LookupMiss] = []
        self.conflicts: dict[str, str] = {}  # group -> why two bindings disagree there
        self.target_ports: dict[str, set[tuple[str, int]]] = {}
        self._missing_noted: set[str] = set()
        self._noted: set[str] = set()

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

    def note_once(self, note: str) -> None:
        """A note about a load balancer is true once per plan, not once per target group."""
        if note not in self._noted:
            self._noted.add(note)
            self.notes.append(note)

    def other_binding(self, lb: LoadBalancer, binding: Binding, by_address: bool) -> str | None:
        """Another binding that admits this load balancer by address (or by its groups)."""
        for other in self.settings.bindings:
            if (
                other is not binding
                and (other.source == "load_balancer_addresses") == by_address
                and other.selects(lb.tags)
            ):
                return other.name
        return None

    def group_peers(self, lb: LoadBalancer, binding: Binding) -> list[Peer]:
        if not lb.security_groups:
            covered = self.other_binding(lb, binding, by_address=True)
            if covered is None:
                self.note_once(
                    f"load balancer {lb.name} has no security groups (binding {binding.name}): "
                    "no rule can name it as a source, so its targets are skipped (a binding "
                    "with rule_source load_balancer_addresses admits it by address)"
                )
            return []
        backend = binding.backend_group
        if backend is not None and backend not in lb.security_groups:
            self.notes.append(
                f"load balancer {lb.name} does not carry the backend group {backend}: "
                "rules from that group will not admit its traffic"
            )
        return [
            Peer("group", g)
            for g in source_groups(lb, binding)
            if self.exists(g, f"rule source of {lb.name}")
        ]

    def client_peers(self, lb: LoadBalancer, binding: Binding) -> list[Peer]:
        """Every client CIDR of both families; the caller keeps the target group's."""
        if binding.client_cidrs is not None:
            return [cidr_peer(c) for c in binding.client_cidrs]
        if lb.scheme == "internal":
            return [cidr_peer(c) for c in self.inventory.vpc_cidrs.get(lb.vpc_id, ())]
        self.notes.append(
            f"load balancer {lb.name} is internet-facing and preserves client addresses, but "
            f"binding {binding.name} declares no client_cidrs: client traffic is not admitted "
            "(declare the clients, e.g. 0.0.0.0/0 and ::/0, to admit them)"
        )
        return []

    def peers_of(self, lb: LoadBalancer, tg: TargetGroup, binding: Binding) -> _Peers | None:
        """The traffic and health-check peers of one load balancer for one target group;
        None when they cannot be known (its subnets' CIDRs are missing).

        By address, only the target group's family reaches its targets: an IPv4 target group
        behind a dualstack NLB gets IPv6 clients from the NLB's own IPv4 address."""
        if binding.source != "load_balancer_addresses":
            peers = tuple(self.group_peers(lb, binding))
            return _Peers(peers, peers)
        if lb.security_groups:
            by_groups = self.other_binding(lb, binding, by_address=False)
            if by_groups is not None:
                # Its groups admit it (binding `by_groups`): client CIDRs on its targets would
                # open traffic the account never needed.
                self.note_once(
                    f"load balancer {lb.name} has security groups (binding {binding.name}): "
                    f"binding {by_groups} admits it by them, so it is not admitted by address"
                )
                return _Peers((), ())
            self.note_once(
                f"load balancer {lb.name} has security groups (binding {binding.name}) but only "
                "this binding selects it, so it is admitted by address; a binding with "
                "rule_source load_balancer_groups would admit it without client CIDRs"
            )
        family = "cidr6" if tg.ip_address_type == "ipv6" else "cidr4"
        own = tuple(p for p in map(cidr_peer, lb.subnet_cidrs) if p.kind == family)
        if not own:
            self.notes.append(
                f"load balancer {lb.name}: the {'IPv6 ' if family == 'cidr6' else ''}CIDRs of "
                f"its subnets are unknown, so the ports of target group {tg.name} are held"
            )
            return None
        if not preserves_client_ip(lb, tg):
            return _Peers(own, own)
        clients = self.client_peers(lb, binding)
        same = tuple(p for p in clients if p.kind == family)
        translated = len(same) < len(clients) and lb.ip_address_type != "ipv4"
        return _Peers(same + (own if translated else ()), own)

    def hosts_of(self, target: Target, tg: TargetGroup, binding: Binding) -> list[str] | None:
        """The groups that receive a target's rules; None when they cannot be chosen."""
        if binding.destination == "named_groups":
            candidates = list(binding.named_groups)
        elif binding.destination == "tagged_groups":
            candidates = [
                g
                for g in target.group_ids
                if g in self.groups
                and (value := self.groups[g].tag(binding.tag_key or "")) is not None
                and (binding.tag_value is None or value == binding.tag_value)
            ]
        elif binding.destination == "cluster_group":
            chosen = self.cluster_group(target, tg, binding)
            if chosen is None:
                return None
            candidates = chosen
        else:
            candidates = list(target.group_ids)
        return [g for g in candidates if self.exists(g, "target group destination")]

    def cluster_group(self, target: Target, tg: TargetGroup, binding: Binding) -> list[str] | None:
        """The AWS Load Balancer Controller's choice: the interface's only group, else its
        one group tagged kubernetes.io/cluster/<name>; anything else is an error there too
        (None). No interface at all is a lookup miss, which the caller reports."""
        ids = target.group_ids
        if len(ids) <= 1:
            return list(ids)
        key = CLUSTER_TAG_PREFIX + (binding.cluster_name or "")
        tagged = [g for g in ids if g in self.groups and self.groups[g].tag(key) is not None]
        if len(tagged) == 1:
            return tagged
        self.notes.append(
            f"target {target.target_id} in {tg.name}: expected exactly one security group "
            f"tagged {key} on its interface, found {len(tagged)} of {len(ids)} "
            f"(binding {binding.name}): its rules are not derived and revokes that could "
            "take its ports are held"
        )
        return None

    def miss(
        self,
        tg: TargetGroup,
        target: Target,
        protocols: Iterable[str],
        port: int,
        health: tuple[str, int],
    ) -> None:
        """A target whose group is unknown: its traffic and health-check ports are held."""
        by_protocol: dict[str, set[int]] = {protocol: {port} for protocol in protocols}
        by_protocol.setdefault(health[0], set()).add(health[1])
        self.misses += [
            LookupMiss(tg.vpc_id, tg.name, target.target_id, protocol, frozenset(ports))
            for protocol, ports in sorted(by_protocol.items())
        ]

    def need(self, flow: Flow, port: int, why: str, binding: Binding) -> None:
        first = self.shaped_by.setdefault(flow, binding)
        host, peer, protocol = flow
        conflict = disagreement(first, binding, f"{protocol} rules in {host} from {peer}")
        if conflict:
            self.conflicts.setdefault(host, conflict)
        self.needed.setdefault(flow, set()).add(port)
        self.why.setdefault(flow, {}).setdefault(why, set()).add(port)

    def add_target_group(self, tg: TargetGroup, lbs: list[LoadBalancer], binding: Binding) -> None:
        traffic = TRAFFIC_PROTOCOLS.get(tg.protocol.upper())
        if tg.target_type not in ("instance", "ip"):
            if tg.target_type == "alb":
                self.notes.append(f"target group {tg.name}: ALB targets are not managed")
            return  # lambda targets have no security group
        if traffic is None:
            self.notes.append(f"target group {tg.name}: protocol {tg.protocol} is not managed")
            return
        by_lb = [self.peers_of(lb, tg, binding) for lb in lbs]
        health_protocol = HEALTH_CHECK_PROTOCOLS.get(tg.health_check_protocol.upper(), "tcp")
        if any(peers is None for peers in by_lb):  # unknown sources: nothing may go
            for target in tg.targets:
                port = target.port if target.port is not None else tg.port
                if port is not None:
                    health = int(tg.health_check_port) if tg.health_check_port.isdigit() else port
                    self.miss(tg, target, traffic, port, (health_protocol, health))
            return
        known = [peers for peers in by_lb if peers is not None]
        traffic_peers = sorted({p for peers in known for p in peers.traffic})
        health_peers = sorted({p for peers in known for p in peers.health})
        if not traffic_peers and not health_peers:
            return
        explicit_health_port = None
        if tg.health_check_port.isdigit():
            explicit_health_port = int(tg.health_check_port)
        elif tg.health_check_port != "traffic-port":
            self.notes.append(
                f"target group {tg.name}: health-check port {tg.health_check_port!r} not "
                "understood; the traffic port is used"
            )
        check_health = binding.include_health_checks and tg.health_check_enabled
        why = f"target group {tg.name} ({', '.join(lb.name for lb in lbs)})"
        tg_hosts: set[str] = set()
        unplaced: list[str] = []
        for target in tg.targets:
            port = target.port if target.port is not None else tg.port
            if port is None:
                continue
            health_port = port if explicit_health_port is None else explicit_health_port
            hosts = self.hosts_of(target, tg, binding)
            unknown = tg.target_type == "ip" and not target.group_ids and binding.needs_interfaces
            if hosts is None or unknown:
                self.miss(tg, target, traffic, port, (health_protocol, health_port))
            if not hosts:
                unplaced.append(f"{target.target_id}:{port}")
                continue
            tg_hosts.update(hosts)
            wants = [(protocol, port, traffic_peers) for protocol in traffic]
            if check_health:
                wants.append((health_protocol, health_port, health_peers))
            for host in hosts:
                ports = self.target_ports.setdefault(host, set())
                ports.update((protocol, port) for protocol in traffic)
                if tg.health_check_enabled:
                    ports.add((health_protocol, health_port))
                for protocol, wanted, peers in wants:
                    for peer in peers:
                        self.need((host, peer, protocol), wanted, why, binding)
        if unplaced:
            shown = ", ".join(unplaced[:_NAMED_TARGETS])
            more = len(unplaced) - _NAMED_TARGETS
            self.notes.append(
                f"target group {tg.name} (binding {binding.name}): target(s) {shown}"
                f"{f' and {more} more' if more > 0 else ''} in no destination group "
                "(interface not found or no matching group): no rules for them"
            )
        all_peers = {*traffic_peers, *health_peers}
        self.links.setdefault(tg.arn, set()).update(tg_hosts)
        self.sources.setdefault(tg.arn, set()).update(all_peers)
        for lb in lbs:
            self.links.setdefault(lb.arn, set()).update(tg_hosts)
            self.sources.setdefault(lb.arn, set()).update(all_peers)
        for target in tg.targets:
            if target.instance_id:
                self.links.setdefault(target.instance_id, set()).update(tg_hosts)

    def build(self) -> DesiredState:
        for binding in self.settings.bindings:
            lbs = {lb.arn: lb for lb in self.inventory.load_balancers if binding.selects(lb.tags)}
            for tg in sorted(self.inventory.target_groups, key=lambda t: t.arn):
                attached = [lbs[a] for a in tg.load_balancer_arns if a in lbs]
                if attached:
                    self.add_target_group(tg, attached, binding)
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
            flow = (key.group_id, key.peer, key.protocol)
            static_cover.setdefault(flow, []).append((key.from_port, key.to_port))
        for group_id in sorted(self.inventory.missing_groups):  # those no role above names
            self.note_missing(group_id, "read for its rules")
        rules: list[Rule] = list(statics)
        per_group: dict[str, list[int]] = {}
        for flow in sorted(self.needed):
            host, peer, protocol = flow
            if host in self.conflicts:
                continue  # refused: its rules stay as they are
            needed = subtract_ranges(_port_ranges(self.needed[flow]), static_cover.get(flow, ()))
            if not needed:
                continue
            cover = compact(needed, self.shaped_by[flow].rule_budget)
            lbc = compact(needed, 1)
            for lo, hi in cover.ranges:
                rules.append(Rule(RuleKey(host, protocol, lo, hi, peer), settings.description))
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
            by_flow.setdefault((rule.group_id, rule.key.peer, rule.key.protocol), []).append(
                rule.key
            )
        for flow, needs in self.why.items():
            keys = by_flow.get(flow, [])
            for why, ports in needs.items():
                for key in keys:
                    if any(key.from_port <= port <= key.to_port for port in ports):
                        needed_by.setdefault(key, set()).add(why)
        return DesiredState(
            rules=tuple(sorted(rules, key=lambda r: r.key)),
            exposure=exposure,
            notes=tuple(dict.fromkeys(self.notes)),  # once each, in order
            links={k: frozenset(v) for k, v in self.links.items()},
            sources={k: frozenset(v) for k, v in self.sources.items()},
            needed_by={k: tuple(sorted(v)) for k, v in needed_by.items()},
            lookup_misses=tuple(dict.fromkeys(self.misses)),
            conflicts=dict(sorted(self.conflicts.items())),
            target_ports={g: frozenset(p) for g, p in sorted(self.target_ports.items())},
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
    whose peer is a touched rule source (a group or an address) are touched too, so a rule
    that moves away from a group is revoked there. A load balancer or target group the
    inventory does not know (deleted, or no longer managed) widens the scope to everything:
    its old rules can only be found by a full pass.
    """
    if scope is None or scope.full:
        return None
    known = {lb.arn for lb in inventory.load_balancers} | {tg.arn for tg in inventory.target_groups}
    touched = set(scope.group_ids)
    sources = {Peer("group", g) for g in scope.group_ids}
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
        if ours and peer in sources:
            touched.add(rule.group_id)
    return frozenset(touched)
