"""Invariant 9 (flow safety by concrete source, whatever the peers) and the quota as AWS counts it."""

from __future__ import annotations

from sg_reconciler.core.guard import call_would_lose
from sg_reconciler.core.plan import Authorize, Plan, Refusal, Revoke
from sg_reconciler.core.planner import make_plan
from sg_reconciler.core.quota import Limits, PrefixListSize
from sg_reconciler.core.safety import check_plan, flow_conflict
from unit.core.sg_judge import OWNER, judge_plan
from unit.core.sg_sources import judge_flows, order_exists, source_worlds
from unit.core.sg_worlds import NODES, owned, parse, rule

OLD_BACKEND, NEW_BACKEND = "sg-0oldbackend0000001", "sg-0newbackend0000001"


def filler(count: int, *, v6: bool = False) -> list[dict[str, object]]:
    """Unmanaged rules that only take quota (ssh from distinct addresses)."""
    if v6:
        return [
            rule(NODES, (22, 22), rule_id=f"sgr-f6-{n}", CidrIpv6=f"2001:db8::{n + 1:x}/128")
            for n in range(count)
        ]
    return [
        rule(NODES, (22, 22), rule_id=f"sgr-f4-{n}", CidrIpv4=f"10.9.{n // 250}.{n % 250}/32")
        for n in range(count)
    ]


def repointed(quota_room: int) -> tuple[list[dict[str, object]], list[dict[str, object]]]:
    """The backend group changes while the NLB carries both: same ports, another peer."""
    old = owned(NODES, (30000, 32767), "sgr-old", ReferencedGroupInfo={"GroupId": OLD_BACKEND})
    current = [old, *filler(quota_room)]
    desired = [rule(NODES, (30000, 32767), ReferencedGroupInfo={"GroupId": NEW_BACKEND})]
    return current, desired


def test_a_repointed_peer_with_room_is_authorized_before_the_old_peer_is_revoked() -> None:
    current, desired = repointed(5)
    plan = make_plan(parse(current), parse(desired), OWNER, Limits(60))
    assert isinstance(plan, Plan)
    assert [type(s) for s in plan.steps] == [Authorize, Revoke]
    assert judge_plan(current, desired, plan.to_dict(), lambda _g: 60) == []


def test_a_repointed_peer_at_a_tight_quota_is_refused_never_revoked_or_modified_first() -> None:
    # Given a group at its quota whose backend rule moves from one group peer to another
    current, desired = repointed(1)
    # When it is planned with no free slot
    result = make_plan(parse(current), parse(desired), OWNER, Limits(2))
    # Then it is refused (before: revoke first or a modify between peers), naming both rules
    assert isinstance(result, Refusal), result
    assert NODES in result.reason and OLD_BACKEND in result.reason and NEW_BACKEND in result.reason
    assert "admitted by both peers" in result.reason


def test_a_cidr_moved_to_a_group_at_a_tight_quota_is_refused() -> None:
    current = [owned(NODES, (443, 443), "sgr-cidr", CidrIpv4="10.0.0.0/16"), *filler(1)]
    desired = [rule(NODES, (443, 443), ReferencedGroupInfo={"GroupId": NEW_BACKEND})]
    assert isinstance(make_plan(parse(current), parse(desired), OWNER, Limits(2)), Refusal)
    # with one free slot the addition comes first
    plan = make_plan(parse(current), parse(desired), OWNER, Limits(3))
    assert isinstance(plan, Plan) and [type(s) for s in plan.steps] == [Authorize, Revoke]


def test_disjoint_ports_from_another_peer_need_no_order() -> None:
    current = [owned(NODES, (80, 80), "sgr-80", ReferencedGroupInfo={"GroupId": OLD_BACKEND})]
    desired = [rule(NODES, (443, 443), ReferencedGroupInfo={"GroupId": NEW_BACKEND})]
    plan = make_plan(parse(current), parse(desired), OWNER, Limits(1))
    assert isinstance(plan, Plan)
    assert [type(s) for s in plan.steps] == [Revoke, Authorize]


def test_the_checker_flags_a_revoke_before_the_replacement_from_another_peer() -> None:
    current, desired = repointed(0)
    revoke_first = Plan(
        (
            Revoke(NODES, ("sgr-old",)),
            Authorize(NODES, tuple(parse(desired))),
        )
    )
    violations = check_plan(revoke_first, parse(current), parse(desired), OWNER, Limits(60))
    assert [v.invariant for v in violations] == ["9 flow"]
    judged = judge_plan(current, desired, revoke_first.to_dict(), lambda _g: 60)
    assert judged and "flow" in judged[0]


def test_flow_conflict_is_about_ports_and_peer_families() -> None:
    [a, b, c, d] = [
        r.key
        for r in parse(
            [
                rule(NODES, (80, 90), ReferencedGroupInfo={"GroupId": OLD_BACKEND}),
                rule(NODES, (90, 95), ReferencedGroupInfo={"GroupId": NEW_BACKEND}),
                rule(NODES, (91, 95), ReferencedGroupInfo={"GroupId": NEW_BACKEND}),
                rule(NODES, (85, 85), CidrIpv4="10.0.0.0/8"),
            ]
        )
    ]
    assert flow_conflict(a, b) and not flow_conflict(a, c) and flow_conflict(a, d)
    assert not flow_conflict(b, c)  # one peer: the traffic algebra judges it exactly


def test_ipv4_and_ipv6_rules_are_counted_apart() -> None:
    # Given 59 IPv4 rules, and a new IPv6 rule at a quota of 60
    current = filler(59)
    desired = [rule(NODES, (443, 443), CidrIpv6="2001:db8:1::/64")]
    # When counted as AWS does, it fits; counted as one pool (the CLI's contract), it fits too
    aws = make_plan(parse(current), parse(desired), OWNER, Limits(60, per_family=True))
    assert isinstance(aws, Plan) and [type(s) for s in aws.steps] == [Authorize]
    pooled = make_plan(parse(current), parse(desired), OWNER, Limits(60))
    assert isinstance(pooled, Plan) and [type(s) for s in pooled.steps] == [Authorize]
    # And 60 IPv6 rules beside 60 IPv4 rules fit only per family
    full6 = [*filler(60), *filler(59, v6=True)]
    assert isinstance(
        make_plan(parse(full6), parse(desired), OWNER, Limits(60, per_family=True)), Plan
    )
    assert isinstance(make_plan(parse(full6), parse(desired), OWNER, Limits(60)), Refusal)


def test_a_group_reference_counts_in_both_families() -> None:
    current = filler(60, v6=True)
    desired = [rule(NODES, (443, 443), ReferencedGroupInfo={"GroupId": NEW_BACKEND})]
    result = make_plan(parse(current), parse(desired), OWNER, Limits(60, per_family=True))
    assert isinstance(result, Refusal) and "61 IPv6" in result.reason


def test_a_prefix_list_counts_as_its_max_entries_in_its_family() -> None:
    # Given 45 IPv4 rules and a new rule from a prefix list of up to 20 entries
    current = filler(45)
    desired = [rule(NODES, (443, 443), PrefixListId="pl-0abc")]
    sizes = {"pl-0abc": PrefixListSize("IPv4", 20)}
    # When the list's weight is known, 45 + 20 > 60: refused before any call
    result = make_plan(
        parse(current), parse(desired), OWNER, Limits(60, prefix_lists=sizes, per_family=True)
    )
    assert isinstance(result, Refusal) and "65 IPv4" in result.reason
    # An IPv6 list of the same size fits beside them
    v6 = {"pl-0abc": PrefixListSize("IPv6", 20)}
    assert isinstance(
        make_plan(
            parse(current), parse(desired), OWNER, Limits(60, prefix_lists=v6, per_family=True)
        ),
        Plan,
    )
    # The checker counts the same way: the plain authorize breaks the quota
    plan = Plan((Authorize(NODES, tuple(parse(desired))),))
    violations = check_plan(
        plan, parse(current), parse(desired), OWNER, Limits(60, prefix_lists=sizes, per_family=True)
    )
    assert [v.invariant for v in violations] == ["5 quota"]


# Flow safety is judged on the traffic that remains, by concrete source.


def test_a_rule_whose_traffic_a_staying_rule_admits_goes_first_even_before_another_peer() -> None:
    # Given all traffic from a CIDR that stays, and tcp 443 from the same CIDR moving to a
    # group peer, with no free slot
    every = owned(NODES, None, "sgr-all", IpProtocol="-1", CidrIpv4="10.0.0.0/16")
    https = owned(NODES, (443, 443), "sgr-443", CidrIpv4="10.0.0.0/16")
    current = [every, https]
    desired = [
        rule(NODES, None, IpProtocol="-1", CidrIpv4="10.0.0.0/16"),
        rule(NODES, (443, 443), ReferencedGroupInfo={"GroupId": NEW_BACKEND}),
    ]
    # When it is planned (before: refused, "must stay until ... exists, since one source
    # can be admitted by both peers")
    plan = make_plan(parse(current), parse(desired), OWNER, Limits(2))
    # Then tcp 443 from the CIDR goes first: every source it admits, the staying rule admits
    assert isinstance(plan, Plan), plan
    assert plan.steps == (
        Revoke(NODES, ("sgr-443",)),
        Authorize(NODES, (parse(desired)[1],)),
    )
    assert judge_flows(current, desired, plan.to_dict(), 2) == []
    assert judge_plan(current, desired, plan.to_dict(), lambda _g: 2) == []


def test_the_only_order_revokes_a_covered_desired_rule_and_authorizes_it_again() -> None:
    # Given, at the quota of 3: tcp 80 from a /16 (going), tcp 80 from a /24 inside it
    # (wanted), tcp 80 from one group (going), and tcp 80 from another group (new). Both
    # going rules must wait for the new one (a source in the /16 or in the first group can
    # carry the new group), and there is no slot for it.
    wide = owned(NODES, (80, 80), "sgr-wide", CidrIpv4="10.0.0.0/16")
    narrow = owned(NODES, (80, 80), "sgr-narrow", CidrIpv4="10.0.0.0/24")
    old_group = owned(NODES, (80, 80), "sgr-oldgroup", ReferencedGroupInfo={"GroupId": OLD_BACKEND})
    current = [wide, narrow, old_group]
    desired = [
        rule(NODES, (80, 80), CidrIpv4="10.0.0.0/24"),
        rule(NODES, (80, 80), ReferencedGroupInfo={"GroupId": NEW_BACKEND}),
    ]
    # When it is planned (before: refused)
    plan = make_plan(parse(current), parse(desired), OWNER, Limits(3))
    # Then the /24 rule, which the /16 admits meanwhile, is revoked to make room and
    # authorized again before the /16 goes; the notes say so, with the extra calls
    assert isinstance(plan, Plan), plan
    doc = plan.to_dict()
    assert judge_flows(current, desired, doc, 3) == []
    assert judge_plan(current, desired, doc, lambda _g: 3) == []
    revoked = [rid for step in doc["steps"] for rid in step.get("rule_ids", [])]
    assert revoked.index("sgr-narrow") < revoked.index("sgr-wide")
    (note,) = [n for n in plan.notes if "authorizing them again" in n]
    assert "sgr-narrow" in note and "2 extra calls" in note
    # And without the room the first revoke makes, no order exists at all
    assert not order_exists(source_worlds(current, desired)[NODES], 2)


def test_the_live_guard_judges_what_remains_by_concrete_source() -> None:
    # Given the live rules of the re-authorize case above: /16 and /24 on tcp 80, and tcp 80
    # from the old group, with the new group's rule not in place yet
    live = parse(
        [
            owned(NODES, (80, 80), "sgr-wide", CidrIpv4="10.0.0.0/16"),
            owned(NODES, (80, 80), "sgr-narrow", CidrIpv4="10.0.0.0/24"),
            owned(NODES, (80, 80), "sgr-old", ReferencedGroupInfo={"GroupId": OLD_BACKEND}),
        ]
    )
    desired = parse(
        [
            rule(NODES, (80, 80), CidrIpv4="10.0.0.0/24"),
            rule(NODES, (80, 80), ReferencedGroupInfo={"GroupId": NEW_BACKEND}),
        ]
    )
    # Then the /24 may go (the /16 admits every source it admits; before: refused by pair)
    assert call_would_lose(live, {"sgr-narrow"}, (), desired) == []
    # But not the /16 (a source in it carrying the new group is wanted) nor the old group
    # (a source carrying both groups), while the new group's rule is missing
    for rule_id in ("sgr-wide", "sgr-old"):
        (problem,) = call_would_lose(live, {rule_id}, (), desired)
        assert "a source (an address and the groups it carries)" in problem
        assert NEW_BACKEND in problem
