"""Desired state from an inventory (pure core): ports, protocols, destinations, budget, scope."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st
from sg_reconciler.core.account import (
    Inventory,
    LoadBalancer,
    SecurityGroup,
    Target,
    TargetGroup,
    tags_of,
)
from sg_reconciler.core.compaction import compact
from sg_reconciler.core.desired import (
    Binding,
    DesiredSettings,
    DesiredState,
    compute_desired,
    subtract_ranges,
    touched_groups,
)
from sg_reconciler.core.rules import OWNER_TAG_KEY, Peer, Rule, RuleKey, protocol_number
from sg_reconciler.core.scope import Scope
from sg_reconciler.core.traffic import Traffic


def desired(inventory: Inventory, *bindings: Binding) -> DesiredState:
    return compute_desired(inventory, DesiredSettings(bindings=bindings))


LB_SG, BACKEND, NODES, EXTRA, PODS = "sg-lb", "sg-backend", "sg-nodes", "sg-extra", "sg-pods"
CLUSTER = "kubernetes.io/cluster/demo"


def groups(*ids: str, tagged: tuple[str, ...] = ()) -> dict[str, SecurityGroup]:
    return {
        g: SecurityGroup(g, tags=tags_of({CLUSTER: "owned"} if g in tagged else {})) for g in ids
    }


def lb(name: str, *sgs: str) -> LoadBalancer:
    return LoadBalancer(f"arn:lb/{name}", name, "network", tuple(sgs))


def tg(name: str, lbs: list[LoadBalancer], targets: list[Target], **fields: object) -> TargetGroup:
    base = TargetGroup(
        arn=f"arn:tg/{name}",
        name=name,
        protocol="TCP",
        port=30000,
        target_type="instance",
        load_balancer_arns=tuple(x.arn for x in lbs),
        targets=tuple(targets),
    )
    return replace(base, **fields)  # type: ignore[arg-type]


def node(instance: str, port: int | None = None, *sgs: str) -> Target:
    return Target(instance, port, sgs or (NODES,), instance)


def keys(rules: tuple[Rule, ...] | list[Rule]) -> set[tuple[str, str, int, int, str]]:
    return {
        (r.group_id, r.key.protocol, r.key.from_port, r.key.to_port, r.key.peer.value)
        for r in rules
    }


def test_traffic_and_health_ports_per_protocol() -> None:
    web = lb("web", LB_SG)
    inventory = Inventory(
        load_balancers=(web,),
        target_groups=(
            tg("tcp", [web], [node("i-1", 31080), node("i-2")], port=31080),
            tg(
                "dns",
                [web],
                [Target("10.0.0.9", 53, (PODS,))],
                protocol="TCP_UDP",
                port=53,
                target_type="ip",
                health_check_port="8080",
                health_check_protocol="HTTP",
            ),
            tg("quic", [web], [node("i-1", 31443)], protocol="UDP", port=31443),
            tg(
                "quiet",
                [web],
                [node("i-1", 31500)],
                port=31500,
                health_check_port="10256",
                health_check_enabled=False,
            ),
        ),
        groups=groups(LB_SG, NODES, PODS),
    )
    state = compute_desired(inventory, DesiredSettings(bindings=(Binding(rule_budget=5),)))
    assert keys(state.rules) == {
        (NODES, "tcp", 31080, 31080, LB_SG),  # traffic and traffic-port health check
        (NODES, "udp", 31443, 31443, LB_SG),
        (NODES, "tcp", 31443, 31443, LB_SG),  # a UDP group's health check runs over TCP
        (NODES, "tcp", 31500, 31500, LB_SG),  # health checks off: no 10256
        (PODS, "tcp", 53, 53, LB_SG),
        (PODS, "udp", 53, 53, LB_SG),
        (PODS, "tcp", 8080, 8080, LB_SG),
    }
    assert {r.description for r in state.rules} == {"sg-reconciler: load balancer targets"}
    assert state.exposure[NODES].exposed_ports == 0


def test_backend_group_named_and_tagged_destinations() -> None:
    web = lb("web", LB_SG, BACKEND)
    inventory = Inventory(
        load_balancers=(web,),
        target_groups=(tg("t", [web], [node("i-1", 30001, NODES, EXTRA)]),),
        groups=groups(LB_SG, BACKEND, NODES, EXTRA, tagged=(NODES,)),
    )
    own = compute_desired(inventory, DesiredSettings())
    assert {(r.group_id, r.key.peer.value) for r in own.rules} == {
        (g, p) for g in (NODES, EXTRA) for p in (LB_SG, BACKEND)
    }
    backend = Binding(backend_group=BACKEND)
    assert {r.key.peer.value for r in desired(inventory, backend).rules} == {BACKEND}
    tagged = replace(backend, destination="tagged_groups", tag_key=CLUSTER)
    assert {r.group_id for r in desired(inventory, tagged).rules} == {NODES}
    state = desired(inventory, replace(tagged, tag_value="shared"))
    assert state.rules == () and any("no destination group" in n for n in state.notes)
    named = replace(backend, destination="named_groups", named_groups=(EXTRA,))
    assert {r.group_id for r in desired(inventory, named).rules} == {EXTRA}


def test_skipped_load_balancers_target_groups_and_missing_groups_are_noted() -> None:
    bare, web, other = lb("bare"), lb("web", LB_SG), lb("other", "sg-other")
    inventory = Inventory(
        load_balancers=(bare, web),  # `other` is not managed
        target_groups=(
            tg("bare", [bare], [node("i-1")]),
            tg("bare-2", [bare], [node("i-2")]),
            tg("fn", [web], [Target("arn:fn", None)], target_type="lambda", port=None),
            tg("alb", [web], [Target("arn:alb", 80)], target_type="alb"),
            tg("geneve", [web], [node("i-1")], protocol="GENEVE"),
            tg("unmanaged", [other], [node("i-1", 30999)]),
            tg("gone", [web], [node("i-2", 30002, "sg-deleted")]),
        ),
        groups=groups(LB_SG, NODES),
    )
    state = compute_desired(inventory, DesiredSettings())
    assert state.rules == ()
    assert len(state.notes) == len(set(state.notes))
    text = " | ".join(state.notes)
    assert "bare has no security groups" in text
    assert "ALB targets are not managed" in text
    assert "GENEVE is not managed" in text
    assert "sg-deleted" in text


def test_backend_group_missing_from_the_load_balancer_is_noted() -> None:
    web = lb("web", LB_SG)
    inventory = Inventory(
        load_balancers=(web,),
        target_groups=(tg("t", [web], [node("i-1")]),),
        groups=groups(LB_SG, BACKEND, NODES),
    )
    state = compute_desired(inventory, DesiredSettings(bindings=(Binding(backend_group=BACKEND),)))
    assert keys(state.rules) == {(NODES, "tcp", 30000, 30000, BACKEND)}
    assert any("does not carry the backend group" in n for n in state.notes)


def test_static_rules_are_kept_and_cover_derived_ports() -> None:
    web = lb("web", BACKEND)
    static_range = Rule(RuleKey(NODES, "tcp", 30000, 32767, Peer("group", BACKEND)), "NodePorts")
    static_cidr = Rule(RuleKey(NODES, "tcp", 10250, 10250, Peer("cidr4", "10.0.0.0/16")), "kubelet")
    inventory = Inventory(
        load_balancers=(web,),
        target_groups=(
            tg("t", [web], [node("i-1", 30080), node("i-1", 8080)], health_check_port="10256"),
        ),
        groups=groups(BACKEND, NODES),
    )
    settings = DesiredSettings(static_rules=(static_range, static_cidr))
    state = compute_desired(inventory, settings)
    assert set(state.rules) >= {static_range, static_cidr}
    assert keys(state.rules) == {
        (NODES, "tcp", 30000, 32767, BACKEND),
        (NODES, "tcp", 10250, 10250, "10.0.0.0/16"),
        (NODES, "tcp", 8080, 8080, BACKEND),  # outside the static range
        (NODES, "tcp", 10256, 10256, BACKEND),
    }
    missing = replace(static_range, key=static_range.key._replace(group_id="sg-gone"))
    state = compute_desired(inventory, DesiredSettings(static_rules=(missing,)))
    assert missing not in state.rules and any("sg-gone" in n for n in state.notes)


def test_subtract_ranges() -> None:
    assert subtract_ranges([(1, 10), (20, 30)], [(5, 22)]) == [(1, 4), (23, 30)]
    assert subtract_ranges([(1, 10)], [(1, 10)]) == []
    assert subtract_ranges([(1, 10)], []) == [(1, 10)]


@given(
    ports=st.lists(
        st.tuples(st.integers(30000, 30100), st.sampled_from(["TCP", "UDP", "TCP_UDP"])),
        min_size=1,
        max_size=25,
    ),
    budget=st.integers(1, 4),
)
def test_every_needed_port_is_allowed_within_the_budget(
    ports: list[tuple[int, str]], budget: int
) -> None:
    web = lb("web", LB_SG)
    target_groups = tuple(
        tg(f"t{i}", [web], [node("i-1", port)], protocol=protocol)
        for i, (port, protocol) in enumerate(ports)
    )
    inventory = Inventory((web,), target_groups, groups(LB_SG, NODES))
    state = compute_desired(inventory, DesiredSettings(bindings=(Binding(rule_budget=budget),)))
    allowed = Traffic.of(state.rules)
    peer = Peer("group", LB_SG)
    needed: dict[str, set[int]] = {"tcp": set(), "udp": set()}
    for port, protocol in ports:
        for p in ("tcp", "udp") if protocol == "TCP_UDP" else (protocol.lower(),):
            needed[p].add(port)
        needed["tcp"].add(port)  # health check on the traffic port, over TCP
    for protocol, wanted in needed.items():
        number = protocol_number(protocol)
        assert number is not None
        for port in wanted:
            assert allowed.allows(NODES, peer, number, port)
        flow = [r for r in state.rules if r.key.protocol == protocol]
        assert len(flow) <= budget
        if wanted:
            assert sum(r.key.to_port - r.key.from_port + 1 for r in flow) == (
                len(wanted) + compact(wanted, budget).exposed_ports
            )
    report = state.exposure[NODES]
    assert report.exposed_ports <= report.single_range_exposed_ports
    assert report.rules == len(state.rules)


def owned(group: str, peer: str, port: int) -> Rule:
    return Rule(
        RuleKey(group, "tcp", port, port, Peer("group", peer)),
        "old",
        f"sgr-{group}-{port}",
        ((OWNER_TAG_KEY, "sg-reconciler"),),
    )


def test_touched_groups() -> None:
    web, dns = lb("web", "sg-web"), lb("dns", "sg-dns")
    inventory = Inventory(
        load_balancers=(web, dns),
        target_groups=(
            tg("web", [web], [node("i-a", 30080, "sg-a"), node("i-b", 30080, "sg-b")]),
            tg("dns", [dns], [Target("10.0.0.5", 53, ("sg-pods",))], target_type="ip"),
        ),
        groups=groups("sg-web", "sg-dns", "sg-a", "sg-b", "sg-pods", "sg-old"),
        rules=(owned("sg-old", "sg-web", 30070), owned("sg-x", "sg-other", 1)),
    )
    state = compute_desired(inventory, DesiredSettings())

    def touched(scope: Scope | None) -> set[str] | None:
        found = touched_groups(inventory, state, scope, "sg-reconciler")
        return None if found is None else set(found)

    assert touched(None) is None and touched(Scope.everything()) is None
    web_groups = {"sg-a", "sg-b", "sg-old"}  # sg-old holds an owned rule from web's group
    assert touched(Scope(load_balancer_arns=frozenset({web.arn}))) == web_groups
    assert touched(Scope(target_group_arns=frozenset({"arn:tg/dns"}))) == {"sg-pods"}
    assert touched(Scope(instance_ids=frozenset({"i-a"}))) == {"sg-a", "sg-b"}
    assert touched(Scope(group_ids=frozenset({"sg-b"}))) == {"sg-b"}
    assert touched(Scope(group_ids=frozenset({"sg-web"}))) == {"sg-web"} | web_groups
    assert touched(Scope(load_balancer_arns=frozenset({"arn:lb/deleted"}))) is None
