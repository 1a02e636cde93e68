"""Named planning cases: each plan is also run past the independent judge."""

from __future__ import annotations

import pytest
from sg_reconciler.core.plan import Authorize, Modify, Plan, Refusal, Revoke, Step
from sg_reconciler.core.planner import Limits, make_plan
from sg_reconciler.core.rules import RuleError
from unit.core.sg_judge import OWNER, Doc, judge_plan
from unit.core.sg_worlds import NODES, lbc_3639, owned, parse, plan_for, rule


def judged(current: list[Doc], desired: list[Doc], quota: int = 60) -> Plan:
    """Plan, and insist the judge finds nothing wrong with the plan."""
    result = plan_for(current, desired, quota)
    assert isinstance(result, Plan), result
    assert judge_plan(current, desired, result.to_dict(), lambda _g: quota) == []
    return result


def shape(plan: Plan) -> list[tuple[str, str]]:
    return [(type(step).__name__.lower(), step.group_id) for step in plan.steps]


def test_lbc_3639_authorizes_the_wider_range_then_revokes_the_old_one() -> None:
    # Given the LBC issue #3639 world: 31000-32000 from the backend group must become 31000-32500
    current, desired = lbc_3639()
    # When it is planned with room to spare
    plan = judged(current, desired)
    # Then the new rule is authorized first and the old one revoked after
    assert shape(plan) == [("authorize", NODES), ("revoke", NODES)]
    authorize, revoke = plan.steps
    assert isinstance(authorize, Authorize) and isinstance(revoke, Revoke)
    assert [(r.key.from_port, r.key.to_port) for r in authorize.rules] == [(31000, 32500)]
    assert authorize.rules[0].description == "NodePorts"
    assert revoke.rule_ids == ("sgr-nodeports",)
    assert plan.notes == ()


def test_lbc_3639_at_the_quota_becomes_a_modify_with_a_note() -> None:
    # Given the same world in a group already at its quota of 2 rules
    current, desired = lbc_3639()
    # When it is planned
    plan = judged(current, desired, quota=2)
    # Then the owned rule is rewritten in place, and the plan says so
    assert len(plan.steps) == 1
    step = plan.steps[0]
    assert isinstance(step, Modify) and step.rule_id == "sgr-nodeports"
    assert (step.rule.key.from_port, step.rule.key.to_port) == (31000, 32500)
    assert len(plan.notes) == 1 and "sgr-nodeports" in plan.notes[0]
    assert "ModifySecurityGroupRules" in plan.notes[0]


def test_a_port_moving_between_node_groups_is_authorized_before_it_is_revoked() -> None:
    # Given NodePort 30080 moves from node group A to node group B
    group_a, group_b = "sg-0nodesa", "sg-0nodesb"
    current = [
        owned(group_a, (30080, 30080), "sgr-a-30080"),
        owned(group_a, (30443, 30443), "sgr-a-30443"),
    ]
    desired = [rule(group_a, (30443, 30443)), rule(group_b, (30080, 30080))]
    # When it is planned
    plan = judged(current, desired)
    # Then B gets the rule before A loses it
    assert shape(plan) == [("authorize", group_b), ("revoke", group_a)]
    revoke = plan.steps[1]
    assert isinstance(revoke, Revoke) and revoke.rule_ids == ("sgr-a-30080",)


def test_a_group_whose_managed_rules_all_go_is_in_scope_through_the_current_rules() -> None:
    current = [owned("sg-0gone", (80, 80), "sgr-gone", CidrIpv4="10.0.0.0/8")]
    plan = judged(current, [])
    assert shape(plan) == [("revoke", "sg-0gone")]


def test_an_unmanaged_twin_satisfies_a_desired_rule() -> None:
    # Given an unmanaged rule equal to a desired one (description aside)
    twin = rule(NODES, (443, 443), rule_id="sgr-handmade", CidrIpv4="10.0.0.0/16")
    desired = [rule(NODES, (443, 443), CidrIpv4="10.0.0.0/16", description="HTTPS")]
    # When it is planned
    plan = judged([twin], desired)
    # Then nothing is authorized (EC2 would reject the duplicate) nor revoked, and a note says why
    assert plan.steps == ()
    assert len(plan.notes) == 1
    assert "sgr-handmade" in plan.notes[0] and "already allowed" in plan.notes[0]


def test_an_all_traffic_rule_is_narrowed_to_tcp() -> None:
    # Given a managed all-traffic rule from the backend group, narrowed to TCP 8080
    current = [owned(NODES, None, "sgr-all", protocol="-1")]
    desired = [rule(NODES, (8080, 8080))]
    # When it is planned with room, then at the quota
    roomy = judged(current, desired)
    tight = judged(current, desired, quota=1)
    # Then TCP 8080 is authorized before all traffic is revoked; at the quota it is modified
    assert shape(roomy) == [("authorize", NODES), ("revoke", NODES)]
    assert shape(tight) == [("modify", NODES)]


def test_a_group_near_its_quota_interleaves_authorize_and_revoke() -> None:
    # Given a group with one free slot under its quota of 5: one unmanaged rule and three
    # managed single ports
    current = [
        rule(NODES, (22, 22), rule_id="sgr-ssh", CidrIpv4="10.0.0.0/16"),
        owned(NODES, (31000, 31000), "sgr-1"),
        owned(NODES, (31100, 31100), "sgr-2"),
        owned(NODES, (31200, 31200), "sgr-3"),
    ]
    # And each port becomes a small range
    desired = [
        rule(NODES, (31000, 31001)),
        rule(NODES, (31100, 31101)),
        rule(NODES, (31200, 31201)),
    ]
    # When it is planned
    plan = judged(current, desired, quota=5)
    # Then it authorizes what fits, revokes what is now covered, and repeats; no modify
    assert [kind for kind, _ in shape(plan)] == ["authorize", "revoke"] * 3
    revoked = [s.rule_ids for s in plan.steps if isinstance(s, Revoke)]
    assert sorted(revoked) == [("sgr-1",), ("sgr-2",), ("sgr-3",)]
    assert not plan.notes
    # And with no free slot at all, each rule is modified in place, each with a note
    at_quota = judged(current, desired, quota=4)
    assert [kind for kind, _ in shape(at_quota)] == ["modify"] * 3
    assert len(at_quota.notes) == 3


def test_a_group_at_its_quota_with_no_safe_order_is_refused_naming_group_and_rules() -> None:
    # Given two managed rules that each cover half of what both new rules need (crosswise),
    # in a group at its quota of 2
    current = [
        owned(NODES, (80, 80), "sgr-port80", CidrIpv4="10.0.0.0/15"),
        owned(NODES, (81, 81), "sgr-port81", CidrIpv4="10.0.0.0/15"),
    ]
    desired = [
        rule(NODES, (80, 81), CidrIpv4="10.0.0.0/16"),
        rule(NODES, (80, 81), CidrIpv4="10.1.0.0/16"),
    ]
    # When it is planned
    result = plan_for(current, desired, quota=2)
    # Then it is refused (never revoke-first) and the reason names the group and every rule
    assert isinstance(result, Refusal)
    assert result.group_id == NODES
    for part in (NODES, "quota of 2", "sgr-port80", "sgr-port81", "10.0.0.0/16", "10.1.0.0/16"):
        assert part in result.reason
    assert result.to_dict() == {"feasible": False, "reason": result.reason}
    # And one more slot is enough
    judged(current, desired, quota=3)


def test_a_desired_state_over_the_quota_is_refused() -> None:
    current, desired = lbc_3639()
    result = plan_for(current, desired, quota=1)
    assert isinstance(result, Refusal)
    assert result.reason.startswith(f"{NODES}: the desired state needs 2 ingress rules")


def test_a_description_only_change_becomes_a_modify() -> None:
    current = [owned(NODES, (31000, 32000), "sgr-nodeports", description="old words")]
    desired = [rule(NODES, (31000, 32000), description="new words")]
    plan = judged(current, desired)
    assert len(plan.steps) == 1
    step = plan.steps[0]
    assert isinstance(step, Modify) and step.rule_id == "sgr-nodeports"
    assert step.rule.description == "new words"


def test_rules_present_in_both_states_are_never_touched() -> None:
    # Given kept managed rules, an unmanaged rule, and one change among them
    current = [
        owned(NODES, (80, 80), "sgr-keep-1", description="http"),
        owned(NODES, (443, 443), "sgr-keep-2", CidrIpv6="2001:db8::/32"),
        rule(NODES, (22, 22), rule_id="sgr-theirs", CidrIpv4="10.0.0.0/16"),
        owned(NODES, (8080, 8080), "sgr-change"),
    ]
    desired = [
        rule(NODES, (80, 80), description="http"),
        rule(NODES, (443, 443), CidrIpv6="2001:db8::/32"),
        rule(NODES, (8080, 8081)),
    ]
    for quota in (60, 4):
        plan = judged(current, desired, quota=quota)
        touched = set(referenced_ids(plan.steps))
        # Then only the changed rule is revoked or modified
        assert touched == {"sgr-change"}, quota
        authorized = [r for s in plan.steps if isinstance(s, Authorize) for r in s.rules]
        assert all(r.key.from_port == 8080 for r in authorized)


def referenced_ids(steps: tuple[Step, ...]) -> list[str]:
    ids: list[str] = []
    for step in steps:
        if isinstance(step, Revoke):
            ids.extend(step.rule_ids)
        elif isinstance(step, Modify):
            ids.append(step.rule_id)
    return ids


def test_no_change_is_an_empty_plan() -> None:
    current, _ = lbc_3639()
    desired = [rule(NODES, (31000, 32000), description="NodePorts")]
    plan = judged(current, desired)
    assert plan.steps == () and plan.to_dict() == {"feasible": True, "steps": [], "notes": []}


def test_a_rule_listed_twice_counts_once_but_two_descriptions_are_an_error() -> None:
    current, desired = lbc_3639()
    assert plan_for(current, desired * 2) == plan_for(current, desired)
    relabelled = {**desired[0], "Description": "other"}
    with pytest.raises(RuleError, match="listed twice with different descriptions"):
        plan_for(current, [*desired, relabelled])


def test_per_group_quota_overrides_apply() -> None:
    current, desired = lbc_3639()
    result = make_plan(parse(current), parse(desired), OWNER, Limits(60, {NODES: 2}))
    assert isinstance(result, Plan) and [type(s) for s in result.steps] == [Modify]


def test_plan_ids_are_stable_and_depend_on_the_steps() -> None:
    current, desired = lbc_3639()
    first, again = judged(current, desired), judged(current, desired)
    assert first.plan_id() == again.plan_id() and len(first.plan_id()) == 32
    assert first.plan_id() != judged(current, desired, quota=2).plan_id()
    # every step counts, in its place: the first, the last and their order
    a, b = Revoke(NODES, ("sgr-1",)), Revoke(NODES, ("sgr-2",))
    assert len({Plan(steps).plan_id() for steps in [(a, b), (b, b), (a, a), (b, a)]}) == 4


def test_a_current_rule_without_an_id_that_must_go_is_an_input_error() -> None:
    current = [rule(NODES, (80, 80), owner=OWNER)]
    with pytest.raises(RuleError, match="has no SecurityGroupRuleId"):
        plan_for(current, [])
