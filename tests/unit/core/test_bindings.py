"""Bindings, address sources and the LBC's destination choice, on the pure desired state."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest
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
from sg_reconciler.core.desired import (
    Binding,
    DesiredSettings,
    DesiredState,
    Flow,
    compute_desired,
    touched_groups,
)
from sg_reconciler.core.rules import OWNER_TAG_KEY, Peer, Rule, RuleKey
from sg_reconciler.core.scope import Scope

VPC = "vpc-1"
VPC_CIDRS = ("10.0.0.0/16", "2600:1f14:abcd::/56")
SUBNETS = ("10.0.1.0/24", "10.0.2.0/24", "2600:1f14:abcd:1::/64")


def desired(inventory: Inventory, *bindings: Binding) -> DesiredState:
    return compute_desired(inventory, DesiredSettings(bindings=bindings))


def flows(state: DesiredState) -> set[Flow]:
    return {(r.group_id, r.key.peer, r.key.protocol) for r in state.rules}


def ports_of(state: DesiredState, group: str, peer: Peer, protocol: str = "tcp") -> set[int]:
    return {
        port
        for r in state.rules
        if (r.group_id, r.key.peer, r.key.protocol) == (group, peer, protocol)
        for port in range(r.key.from_port, r.key.to_port + 1)
    }


def group(group_id: str, **tags: str) -> SecurityGroup:
    return SecurityGroup(group_id, VPC, tags=tags_of(tags))


def lb(name: str, *sgs: str, **fields: object) -> LoadBalancer:
    base = LoadBalancer(
        f"arn:lb/{name}", name, "network", tuple(sgs), tags=tags_of({"cluster": name[0]})
    )
    return replace(base, vpc_id=VPC, **fields)  # type: ignore[arg-type]


def tg(name: str, lbs: list[LoadBalancer], targets: list[Target], **fields: object) -> TargetGroup:
    base = TargetGroup(
        arn=f"arn:tg/{name}",
        name=name,
        protocol="TCP",
        port=30000,
        target_type="instance",
        load_balancer_arns=tuple(x.arn for x in lbs),
        vpc_id=VPC,
        targets=tuple(targets),
    )
    return replace(base, **fields)  # type: ignore[arg-type]


def cluster_binding(name: str, backend: str, nodes: str, **fields: object) -> Binding:
    base = Binding(
        name=name,
        load_balancer_tags=(("cluster", name),),
        backend_group=backend,
        destination="named_groups",
        named_groups=(nodes,),
    )
    return replace(base, **fields)  # type: ignore[arg-type]


def two_clusters() -> Inventory:
    """Cluster a and cluster b, each with a backend group, a node group and one NLB."""
    a, b = lb("a-web", "sg-back-a"), lb("b-web", "sg-back-b")
    return Inventory(
        load_balancers=(a, b),
        target_groups=(
            tg("a", [a], [Target("i-a", 30001, ("sg-nodes-a",), "i-a")]),
            tg("b", [b], [Target("i-b", 30002, ("sg-nodes-b",), "i-b")]),
        ),
        groups={g: group(g) for g in ("sg-back-a", "sg-back-b", "sg-nodes-a", "sg-nodes-b")},
    )


def test_each_binding_derives_its_own_load_balancers_rules() -> None:
    state = desired(
        two_clusters(),
        cluster_binding("a", "sg-back-a", "sg-nodes-a"),
        cluster_binding("b", "sg-back-b", "sg-nodes-b"),
    )
    assert flows(state) == {
        ("sg-nodes-a", Peer("group", "sg-back-a"), "tcp"),
        ("sg-nodes-b", Peer("group", "sg-back-b"), "tcp"),
    }
    assert ports_of(state, "sg-nodes-a", Peer("group", "sg-back-a")) == {30001}
    only_a = desired(two_clusters(), cluster_binding("a", "sg-back-a", "sg-nodes-a"))
    assert flows(only_a) == {("sg-nodes-a", Peer("group", "sg-back-a"), "tcp")}


def test_bindings_sharing_a_group_and_peer_merge_when_they_agree_and_are_refused_otherwise() -> (
    None
):
    shared = [
        cluster_binding("a", "sg-shared", "sg-nodes"),
        cluster_binding("b", "sg-shared", "sg-nodes"),
    ]
    world = two_clusters()
    world = replace(
        world,
        load_balancers=tuple(
            replace(x, security_groups=("sg-shared",)) for x in world.load_balancers
        ),
        target_groups=tuple(
            replace(t, targets=tuple(replace(x, group_ids=("sg-nodes",)) for x in t.targets))
            for t in world.target_groups
        ),
        groups={g: group(g) for g in ("sg-shared", "sg-nodes")},
    )
    merged = desired(world, *shared)
    assert ports_of(merged, "sg-nodes", Peer("group", "sg-shared")) == {30001, 30002}
    assert merged.conflicts == {}
    # health checks are only ports: bindings that differ there still agree
    assert desired(world, shared[0], replace(shared[1], include_health_checks=False)).rules
    refused = desired(world, shared[0], replace(shared[1], rule_budget=1))
    assert refused.rules == ()  # the group's rules are left as they are
    assert re.search(
        r"bindings 'a' and 'b'.*sg-nodes from sg-shared", refused.conflicts["sg-nodes"]
    )


@st.composite
def binding_sets(draw: st.DrawFn) -> list[Binding]:
    count = draw(st.integers(1, 4))
    return [
        Binding(
            name=f"b{i}",
            load_balancer_tags=(("cluster", draw(st.sampled_from("ab"))),),
            backend_group=draw(st.sampled_from(["sg-back-a", "sg-back-b"])),
            destination="named_groups",
            named_groups=tuple(
                draw(st.sets(st.sampled_from(["sg-nodes-a", "sg-nodes-b"]), min_size=1))
            ),
            rule_budget=draw(st.sampled_from([1, 3])),
            include_health_checks=draw(st.booleans()),  # never a conflict: ports add up
        )
        for i in range(count)
    ]


@given(binding_sets())
def test_a_group_is_refused_exactly_when_two_bindings_shape_one_of_its_flows_differently(
    bindings: list[Binding],
) -> None:
    world = two_clusters()
    alone = {b.name: flows(desired(world, b)) for b in bindings}
    clash: dict[str, list[tuple[str, str]]] = {}  # group -> pairs of bindings at odds there
    for i, first in enumerate(bindings):
        for second in bindings[i + 1 :]:
            if first.shaping != second.shaping:
                for host, _, _ in alone[first.name] & alone[second.name]:
                    clash.setdefault(host, []).append((first.name, second.name))
    for order in (bindings, bindings[::-1]):
        state = desired(world, *order)
        assert set(state.conflicts) == set(clash)
        for group, why in state.conflicts.items():  # each names two bindings at odds there
            named = {n for n in alone if f"'{n}'" in why}
            assert any(named == set(pair) for pair in clash[group])
        assert not any(r.group_id in clash for r in state.rules)
        agreed = {f for f in set().union(*alone.values()) if f[0] not in clash}
        assert flows(state) == agreed
        for b in bindings:  # every port a binding needs alone is still admitted
            single = desired(world, b)
            for host, peer, protocol in flows(single) & agreed:
                assert ports_of(single, host, peer, protocol) <= ports_of(
                    state, host, peer, protocol
                )
    assert desired(world, *bindings).rules == desired(world, *bindings[::-1]).rules


# --- load balancers without security groups: admitted by address --------------------------


def addressed(**lb_fields: object) -> tuple[Inventory, LoadBalancer]:
    nlb = lb("n-legacy", subnet_cidrs=SUBNETS, **lb_fields)
    return (
        Inventory(
            load_balancers=(nlb,),
            groups={"sg-nodes": group("sg-nodes")},
            vpc_cidrs={VPC: VPC_CIDRS},
        ),
        nlb,
    )


ADDRESSES = Binding(name="legacy", source="load_balancer_addresses")
V4_SUBNETS = {Peer("cidr4", "10.0.1.0/24"), Peer("cidr4", "10.0.2.0/24")}


def peers_by_port(state: DesiredState) -> dict[int, set[Peer]]:
    found: dict[int, set[Peer]] = {}
    for r in state.rules:
        for port in range(r.key.from_port, r.key.to_port + 1):
            found.setdefault(port, set()).add(r.key.peer)
    return found


def test_client_ip_preserved_admits_clients_on_the_traffic_port_and_the_nlb_for_health() -> None:
    inventory, nlb = addressed(scheme="internal")
    node = Target("i-1", 30001, ("sg-nodes",), "i-1")
    checked = tg("inst", [nlb], [node], health_check_port="10256")
    state = desired(replace(inventory, target_groups=(checked,)), ADDRESSES)
    by_port = peers_by_port(state)
    assert by_port[30001] == {Peer("cidr4", "10.0.0.0/16")}  # internal: the VPC's clients
    assert by_port[10256] == V4_SUBNETS  # health checks come from the NLB itself
    declared = replace(ADDRESSES, client_cidrs=("192.0.2.0/24", "::/0"))
    by_port = peers_by_port(desired(replace(inventory, target_groups=(checked,)), declared))
    # an IPv4-only NLB never brings IPv6 clients to an IPv4 target group: ::/0 is not opened
    assert by_port[30001] == {Peer("cidr4", "192.0.2.0/24")}


def test_client_ip_not_preserved_admits_only_the_nlbs_subnets() -> None:
    inventory, nlb = addressed(scheme="internal")
    pod = Target("10.0.1.9", 8080, ("sg-nodes",))
    off = tg("pods", [nlb], [pod], target_type="ip", preserve_client_ip=False)
    default_ip_tcp = tg("pods2", [nlb], [pod], target_type="ip")  # AWS default: off
    for target_group in (off, default_ip_tcp):
        state = desired(replace(inventory, target_groups=(target_group,)), ADDRESSES)
        assert peers_by_port(state) == {8080: V4_SUBNETS}
    udp = tg("dns", [nlb], [pod], target_type="ip", protocol="UDP")  # always preserved
    state = desired(replace(inventory, target_groups=(udp,)), ADDRESSES)
    assert {r.key.peer for r in state.rules if r.key.protocol == "udp"} == {
        Peer("cidr4", "10.0.0.0/16")
    }


def test_an_internet_facing_nlb_without_declared_clients_opens_nothing_to_the_world() -> None:
    inventory, nlb = addressed()
    node = Target("i-1", 30001, ("sg-nodes",), "i-1")
    state = desired(replace(inventory, target_groups=(tg("t", [nlb], [node]),)), ADDRESSES)
    assert {r.key.peer for r in state.rules} == V4_SUBNETS  # the health check only
    assert any("declares no client_cidrs" in n for n in state.notes)


def test_a_dualstack_nlb_admits_each_target_group_in_its_own_family() -> None:
    inventory, nlb = addressed(scheme="internal", ip_address_type="dualstack")
    v6_subnet, v6_vpc = Peer("cidr6", "2600:1f14:abcd:1::/64"), Peer("cidr6", "2600:1f14:abcd::/56")
    # An IPv4 target group: IPv6 clients arrive from the NLB's own IPv4 addresses (its
    # subnets), so no IPv6 rule at all (before: the VPC's IPv6 block reached the node port)
    node = Target("i-1", 30001, ("sg-nodes",), "i-1")
    checked = tg("t", [nlb], [node], health_check_port="10256")
    state = desired(replace(inventory, target_groups=(checked,)), ADDRESSES)
    assert peers_by_port(state) == {
        10256: V4_SUBNETS,
        30001: {Peer("cidr4", "10.0.0.0/16"), *V4_SUBNETS},
    }
    # An IPv6 target group: its subnets' and its VPC's IPv6 blocks only
    pods = Target("2600:1f14:abcd:1::9", 8080, ("sg-nodes",))
    v6 = {"target_type": "ip", "ip_address_type": "ipv6"}
    off = tg("p", [nlb], [pods], preserve_client_ip=False, **v6)
    state = desired(replace(inventory, target_groups=(off,)), ADDRESSES)
    assert peers_by_port(state) == {8080: {v6_subnet}}
    on = tg("p", [nlb], [pods], preserve_client_ip=True, health_check_port="8081", **v6)
    state = desired(replace(inventory, target_groups=(on,)), ADDRESSES)
    assert peers_by_port(state) == {8080: {v6_vpc, v6_subnet}, 8081: {v6_subnet}}


def test_unknown_subnets_hold_the_target_groups_ports_and_udp_always_preserves() -> None:
    inventory, nlb = addressed(scheme="internal")
    blind = replace(nlb, subnet_cidrs=())
    pod = Target("10.0.1.9", 8080, ("sg-nodes",))
    dns = tg("dns", [blind], [pod], target_type="ip", protocol="UDP", health_check_port="8081")
    state = desired(replace(inventory, load_balancers=(blind,), target_groups=(dns,)), ADDRESSES)
    assert state.rules == ()
    # held like a lookup miss, with the traffic port and the (TCP) health-check port
    assert {(m.protocol, m.ports) for m in state.lookup_misses} == {
        ("udp", frozenset({8080})),
        ("tcp", frozenset({8081})),
    }
    off = replace(dns, load_balancer_arns=(nlb.arn,), preserve_client_ip=False)
    state = desired(replace(inventory, target_groups=(off,)), ADDRESSES)
    udp = {r.key.peer for r in state.rules if r.key.protocol == "udp"}
    assert udp == {Peer("cidr4", "10.0.0.0/16")}  # the clients, whatever the attribute says


def test_a_scope_on_an_addressed_nlb_touches_groups_holding_its_old_cidr_rules() -> None:
    inventory, nlb = addressed(scheme="internal")
    node = Target("i-1", 30001, ("sg-nodes",), "i-1")
    stale = Rule(
        RuleKey("sg-old", "tcp", 30001, 30001, Peer("cidr4", "10.0.1.0/24")),
        rule_id="sgr-1",
        tags=((OWNER_TAG_KEY, "sg-reconciler"),),
    )
    inventory = replace(
        inventory,
        target_groups=(tg("t", [nlb], [node]),),
        rules=(stale,),
        groups={**inventory.groups, "sg-old": group("sg-old")},
    )
    state = desired(inventory, ADDRESSES)
    touched = touched_groups(
        inventory, state, Scope(load_balancer_arns=frozenset({nlb.arn})), "sg-reconciler"
    )
    assert touched == {"sg-nodes", "sg-old"}


# --- the AWS Load Balancer Controller's destination choice ----------------------------------

CLUSTER_TAG = "kubernetes.io/cluster/prod"


def enis(*group_sets: tuple[str, ...]) -> tuple[Inventory, Binding]:
    front = lb("p-web", "sg-lb")
    targets = [Target(f"10.0.1.{i}", 8080, groups) for i, groups in enumerate(group_sets)]
    inventory = Inventory(
        load_balancers=(front,),
        target_groups=(tg("pods", [front], targets, target_type="ip"),),
        groups={
            "sg-lb": group("sg-lb"),
            "sg-only": group("sg-only"),
            "sg-tagged": group("sg-tagged", **{CLUSTER_TAG: "owned"}),
            "sg-tagged-2": group("sg-tagged-2", **{CLUSTER_TAG: "shared"}),
            "sg-plain": group("sg-plain"),
        },
    )
    return inventory, Binding(name="prod", destination="cluster_group", cluster_name="prod")


def test_cluster_group_takes_the_only_group_else_the_one_tagged_for_the_cluster() -> None:
    inventory, binding = enis(("sg-only",), ("sg-tagged", "sg-plain"))
    state = desired(inventory, binding)
    assert {r.group_id for r in state.rules} == {"sg-only", "sg-tagged"}
    assert state.lookup_misses == ()
    everywhere = desired(inventory, replace(binding, destination="target_enis", cluster_name=None))
    assert {r.group_id for r in everywhere.rules} == {"sg-only", "sg-tagged", "sg-plain"}


@pytest.mark.parametrize(
    "ambiguous", [("sg-tagged", "sg-tagged-2"), ("sg-plain", "sg-only")], ids=["two", "none"]
)
def test_cluster_group_that_cannot_be_chosen_is_an_error_and_a_lookup_miss(
    ambiguous: tuple[str, ...],
) -> None:
    inventory, binding = enis(ambiguous)
    state = desired(inventory, binding)
    assert state.rules == ()
    assert any("expected exactly one security group tagged" in n for n in state.notes)
    assert {(m.target_id, m.ports) for m in state.lookup_misses} == {
        ("10.0.1.0", frozenset({8080}))
    }


def test_named_destinations_need_no_interface_so_unfound_pods_are_no_lookup_miss() -> None:
    inventory, _ = enis(())
    named = Binding(name="n", destination="named_groups", named_groups=("sg-only",))
    assert desired(inventory, named).lookup_misses == ()
    assert len(desired(inventory, Binding(name="e")).lookup_misses) == 1


# --- a cluster-wide selection by address never over-opens -----------------------------------


def cluster_with_both_kinds() -> tuple[Inventory, Binding, Binding]:
    """One cluster's NLBs carry the same tags; one has security groups, one has none."""
    grouped = lb("c-grouped", "sg-lb", subnet_cidrs=SUBNETS, scheme="internal")
    bare = lb("c-bare", subnet_cidrs=SUBNETS, scheme="internal")
    node = Target("i-1", 30001, ("sg-nodes",), "i-1")
    other = Target("i-2", 30002, ("sg-nodes",), "i-2")
    inventory = Inventory(
        load_balancers=(grouped, bare),
        target_groups=(tg("grouped", [grouped], [node]), tg("bare", [bare], [other])),
        groups={g: group(g) for g in ("sg-lb", "sg-nodes")},
        vpc_cidrs={VPC: VPC_CIDRS},
    )
    by_groups = Binding(
        name="c-groups",
        load_balancer_tags=(("cluster", "c"),),
        destination="named_groups",
        named_groups=("sg-nodes",),
    )
    by_address = replace(by_groups, name="c-addresses", source="load_balancer_addresses")
    return inventory, by_groups, by_address


def test_a_cluster_wide_address_binding_opens_client_cidrs_only_for_nlbs_without_groups() -> None:
    # Given both bindings select every NLB of the cluster by its tag
    inventory, by_groups, by_address = cluster_with_both_kinds()
    state = desired(inventory, by_groups, by_address)
    by_port = peers_by_port(state)
    # Then the NLB with groups is admitted by its group only, on its port
    assert by_port[30001] == {Peer("group", "sg-lb")}
    # And the NLB without groups by address (its VPC's clients, internal; its subnets for
    # health checks), on its port
    assert by_port[30002] == {Peer("cidr4", "10.0.0.0/16"), *V4_SUBNETS}
    # And the notes say why, naming both bindings, and claim no NLB is skipped
    assert any(
        "c-grouped has security groups (binding c-addresses): binding c-groups admits it" in n
        for n in state.notes
    )
    assert not any("skipped" in n for n in state.notes)
    # The order of the bindings does not matter
    assert desired(inventory, by_address, by_groups).rules == state.rules


def test_an_address_binding_alone_still_admits_an_nlb_with_groups_and_says_so() -> None:
    # Given only the address binding selects the NLB with groups, its targets keep their traffic
    inventory, _, by_address = cluster_with_both_kinds()
    state = desired(inventory, by_address)
    assert peers_by_port(state)[30001] == {Peer("cidr4", "10.0.0.0/16"), *V4_SUBNETS}
    notes = [n for n in state.notes if "c-grouped has security groups" in n]
    assert len(notes) == 1 and "load_balancer_groups would admit it" in notes[0]


def test_a_group_binding_names_itself_when_it_skips_an_nlb_no_binding_admits() -> None:
    inventory, by_groups, _ = cluster_with_both_kinds()
    notes = [n for n in desired(inventory, by_groups).notes if "skipped" in n]
    assert notes == [
        "load balancer c-bare has no security groups (binding c-groups): no rule can name it as "
        "a source, so its targets are skipped (a binding with rule_source "
        "load_balancer_addresses admits it by address)"
    ]


def test_targets_in_no_destination_group_are_named_with_their_port() -> None:
    inventory, by_groups, _ = cluster_with_both_kinds()
    lost = [Target(f"10.9.0.{i}", 8080) for i in range(12)]
    pods = tg("pods", [inventory.load_balancers[0]], lost, target_type="ip")
    state = desired(
        replace(inventory, target_groups=(pods,)), replace(by_groups, destination="target_enis")
    )
    (note,) = [n for n in state.notes if "in no destination group" in n]
    assert note.startswith(
        "target group pods (binding c-groups): target(s) 10.9.0.0:8080, 10.9.0.1:8080, "
    )
    assert "10.9.0.9:8080 and 2 more in no destination group" in note
