"""Which target groups a revoke under the locks reads fresh, chosen from the inventory index
(core/revoke_closure.py; docs/architecture.md, "Reads"): those whose load balancer admits the
rule's peer and whose targets could use the ports it takes away in its group; when the index
is unsure, a candidate, and a missing or old entry holds the revokes."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from sg_reconciler.core.account import Target, TargetGroup
from sg_reconciler.core.index_events import Version
from sg_reconciler.core.inventory_index import Entry, IndexView, target_entry, target_group_entry
from sg_reconciler.core.revoke_closure import candidates, contradictions, lost_traffic
from sg_reconciler.core.rules import Peer, Rule, RuleKey

T0 = 1_800_000_000.0
PERIOD = 43_200.0
BACKEND = Peer("group", "sg-backend")
OTHER = Peer("group", "sg-other")
NODES, ELSEWHERE = "sg-nodes", "sg-elsewhere"
LB = "arn:aws:elasticloadbalancing:eu-west-1:1:loadbalancer/net/a/1"


def _rule(port: int, to: int | None = None, peer: Peer = BACKEND, group: str = NODES) -> Rule:
    return Rule(RuleKey(group, "tcp", port, port if to is None else to, peer), "", "sgr-1")


def _tg(
    name: str, port: int, *targets: tuple[str, int], health: str = "traffic-port"
) -> TargetGroup:
    return TargetGroup(
        arn=f"arn:tg/{name}",
        name=name,
        protocol="TCP",
        port=port,
        target_type="instance",
        health_check_port=health,
        load_balancer_arns=(LB,),
        vpc_id="vpc-1",
        targets=tuple(Target(t, p) for t, p in targets),
    )


def _view(
    tgs: list[TargetGroup],
    groups: dict[str, str],
    at: float = T0,
    targets_at: float | None = None,
) -> IndexView:
    read = Version.of_read(at)
    entries: list[Entry] = [target_group_entry(tg, read) for tg in tgs]
    seen = Version.of_read(at if targets_at is None else targets_at)
    entries += [target_entry(i, [g], i, seen) for i, g in groups.items()]
    return IndexView.of(entries)


def _listed(tgs: list[TargetGroup]) -> list[TargetGroup]:
    """The fresh listing: ports and load balancers, no targets."""
    return [TargetGroup(**{**tg.__dict__, "targets": ()}) for tg in tgs]


def _chosen(
    lost_rules: list[Rule],
    tgs: list[TargetGroup],
    view: IndexView,
    staying: list[RuleKey] | None = None,
    sending: frozenset[Peer] = frozenset({BACKEND}),
    now: float = T0 + 60,
) -> tuple[set[str], dict[str, str]]:
    lost = lost_traffic(lost_rules, staying or [])
    found = candidates(lost, {tg.arn: sending for tg in tgs}, _listed(tgs), view, now, PERIOD)
    return {a.removeprefix("arn:tg/") for a in found.read}, {
        a.removeprefix("arn:tg/"): why for a, why in found.doubts.items()
    }


# An LBC cluster: every target group behind the shared backend, targets on their NodePorts
CLUSTER = [_tg(f"svc{p}", p, ("i-a", p), ("i-b", p)) for p in range(30000, 30010)]
NODES_OF = {"i-a": NODES, "i-b": ELSEWHERE}


def test_only_target_groups_with_a_target_in_the_group_on_a_lost_port_are_read() -> None:
    view = _view(CLUSTER, NODES_OF)
    assert _chosen([_rule(30003)], CLUSTER, view) == ({"svc30003"}, {})
    assert _chosen([_rule(40000)], CLUSTER, view) == (set(), {})


def test_a_port_still_allowed_by_the_rules_that_stay_is_not_lost() -> None:
    # 30000-30009 narrows to 30000-30008: only 30009 goes
    view = _view(CLUSTER, NODES_OF)
    staying = [RuleKey(NODES, "tcp", 30000, 30008, BACKEND)]
    assert _chosen([_rule(30000, 30009)], CLUSTER, view, staying) == ({"svc30009"}, {})


def test_a_target_in_another_group_does_not_make_a_candidate() -> None:
    only_b = [_tg("b", 80, ("i-b", 30020))]  # its port is not the lost one
    view = _view(only_b, NODES_OF)
    assert _chosen([_rule(30020)], only_b, view) == (set(), {})
    # ... unless the lost rule is in that group
    assert _chosen([_rule(30020, group=ELSEWHERE)], only_b, view) == ({"b"}, {})


def test_the_target_groups_own_port_or_health_check_port_makes_a_candidate() -> None:
    tgs = [
        _tg("port", 40000, ("i-b", 30100)),  # its port is lost, its targets elsewhere
        _tg("health", 30200, ("i-b", 30200), health="40001"),
        _tg("neither", 30300, ("i-b", 30300), health="30301"),
    ]
    view = _view(tgs, NODES_OF)
    assert _chosen([_rule(40000, 40001)], tgs, view) == ({"port", "health"}, {})


def test_a_load_balancer_that_admits_another_peer_is_never_read() -> None:
    view = _view(CLUSTER, NODES_OF)
    assert _chosen([_rule(30003)], CLUSTER, view, sending=frozenset({OTHER})) == (set(), {})


def test_a_missing_or_old_entry_is_read_and_holds() -> None:
    new = _tg("new", 31000, ("i-a", 31000))
    view = _view(CLUSTER, NODES_OF)
    # Not in the index: whatever its ports, read and doubted
    read, doubts = _chosen([_rule(40000)], [*CLUSTER, new], view)
    assert read == {"new"} and "not in the inventory index" in doubts["new"]
    # Verified longer ago than the period: every target group read, every one doubted
    old = _view(CLUSTER, NODES_OF, at=T0 - PERIOD - 1)
    read, doubts = _chosen([_rule(40000)], CLUSTER, old)
    assert read == {tg.name for tg in CLUSTER} == set(doubts)
    assert all("older than the verification period" in why for why in doubts.values())


def test_a_target_whose_groups_are_unknown_or_old_is_a_candidate_on_a_lost_port() -> None:
    tgs = [_tg("x", 30500, ("i-new", 30500))]
    unknown = _view(tgs, {})
    assert _chosen([_rule(30500)], tgs, unknown) == ({"x"}, {})
    assert _chosen([_rule(30501)], tgs, unknown) == (set(), {})
    old = _view(tgs, {"i-new": ELSEWHERE}, targets_at=T0 - PERIOD - 1)
    assert _chosen([_rule(30500)], tgs, old) == ({"x"}, {})


def test_a_fresh_read_contradicts_the_index_on_targets_and_groups() -> None:
    tg = _tg("x", 40000)
    view = _view([tg], {"i-a": ELSEWHERE})
    entry = view.target_groups[tg.arn]
    fresh = TargetGroup(**{**tg.__dict__, "targets": (Target("i-a", 40000, (NODES,)),)})
    found = contradictions(entry, fresh, view)
    assert any("the index lacked" in f for f in found)
    assert any("other groups than the index held" in f for f in found)
    same = TargetGroup(**{**tg.__dict__, "targets": ()})
    assert contradictions(entry, same, view) == []


PORTS = (30000, 30001, 30002, 30005, 40000)
HOSTS = (NODES, ELSEWHERE, "sg-third")


@st.composite
def clusters(draw: st.DrawFn) -> tuple[list[TargetGroup], dict[str, str], list[Rule]]:
    """Target groups behind the backend (their targets on random ports in random groups,
    their own and health-check ports random), and random rules of ours that go."""
    nodes = {f"i-{n}": draw(st.sampled_from(HOSTS)) for n in range(4)}
    tgs = [
        _tg(
            f"t{n}",
            draw(st.sampled_from(PORTS)),
            *draw(
                st.lists(
                    st.tuples(st.sampled_from(sorted(nodes)), st.sampled_from(PORTS)), max_size=3
                )
            ),
            health=draw(st.sampled_from(["traffic-port", *map(str, PORTS)])),
        )
        for n in range(draw(st.integers(1, 6)))
    ]
    gone = [
        _rule(lo, lo + draw(st.integers(0, 3)), group=draw(st.sampled_from(HOSTS)))
        for lo in draw(st.lists(st.sampled_from(PORTS), min_size=1, max_size=3))
    ]
    return tgs, nodes, gone


@given(clusters())
def test_a_target_group_not_chosen_needs_none_of_the_lost_traffic(
    case: tuple[list[TargetGroup], dict[str, str], list[Rule]],
) -> None:
    # Given an index that is right (fresh, every target's group known)
    tgs, nodes, gone = case
    view = _view(tgs, nodes)
    lost = lost_traffic(gone, [])
    # When the candidates are chosen
    found = candidates(lost, {tg.arn: {BACKEND} for tg in tgs}, _listed(tgs), view, T0, PERIOD)
    # Then every flow a target group not chosen carries (backend to a target's group on its
    # port, or on the health-check port) stays allowed
    assert not found.doubts
    for tg in tgs:
        if tg.arn in found.read:
            continue
        for target in tg.targets:
            ports = {target.port if target.port is not None else tg.port}
            if tg.health_check_port != "traffic-port":
                ports.add(int(tg.health_check_port))
            for port in ports:
                assert port is not None
                assert not lost.allows(nodes[target.target_id], BACKEND, 6, port), (tg, port)
