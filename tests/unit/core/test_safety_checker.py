"""The safety checker reports every hand-made bad plan; so does the independent judge."""

from __future__ import annotations

import pytest
from hypothesis import event, given, note
from hypothesis import strategies as st
from sg_reconciler.core.plan import Authorize, Modify, Plan, Revoke, Step
from sg_reconciler.core.planner import Limits, dedupe_desired, make_plan
from sg_reconciler.core.rules import RuleKey, rule_from_dict
from sg_reconciler.core.safety import GroupBounds, Violation, check_plan, group_bounds
from sg_reconciler.core.traffic import Traffic
from unit.core.sg_judge import OWNER, Doc, judge_plan
from unit.core.sg_strategies import cases, rule_docs
from unit.core.sg_worlds import BACKEND, NODES, lbc_3639, owned, parse, rule

CURRENT, DESIRED = lbc_3639()
NEW = rule_from_dict(DESIRED[0])
SSH = rule_from_dict(rule(NODES, (22, 22), CidrIpv4="10.0.0.0/8")).key


def check(steps: list[Step], quota: int = 60) -> tuple[list[Violation], list[str]]:
    """The checker's and the judge's verdicts on one plan over the LBC world."""
    plan = Plan(tuple(steps))
    current, desired = parse(CURRENT), dedupe_desired(parse(DESIRED))
    violations = check_plan(plan, current, desired, OWNER, Limits(quota))
    return violations, judge_plan(CURRENT, DESIRED, plan.to_dict(), lambda _g: quota)


def test_the_make_before_break_plan_is_clean() -> None:
    violations, problems = check([Authorize(NODES, (NEW,)), Revoke(NODES, ("sgr-nodeports",))])
    assert violations == [] and problems == []


def test_revoke_first_is_reported_as_loss() -> None:
    # Given the LBC's order: revoke the old range, then authorize the new one
    steps: list[Step] = [Revoke(NODES, ("sgr-nodeports",)), Authorize(NODES, (NEW,))]
    # When it is checked
    violations, problems = check(steps)
    # Then the gap after the first call is a loss of OLD ∩ NEW traffic
    assert [(v.step, v.invariant) for v in violations] == [(0, "1 no loss")]
    assert "31000" in violations[0].detail
    assert any(p.startswith("step 0") and "loses traffic" in p for p in problems)


def test_revoking_an_unmanaged_rule_is_reported() -> None:
    steps: list[Step] = [
        Authorize(NODES, (NEW,)),
        Revoke(NODES, ("sgr-nodeports", "sgr-ssh")),
    ]
    violations, problems = check(steps)
    assert ("3 ownership", 1) in [(v.invariant, v.step) for v in violations]
    assert any("revokes unowned rule sgr-ssh" in p for p in problems)


def test_modifying_an_unmanaged_rule_is_reported() -> None:
    ssh_wider = rule_from_dict(rule(NODES, (22, 23), CidrIpv4="10.0.0.0/16"))
    steps: list[Step] = [
        Authorize(NODES, (NEW,)),
        Revoke(NODES, ("sgr-nodeports",)),
        Modify(NODES, "sgr-ssh", ssh_wider),
    ]
    violations, problems = check(steps)
    assert ("3 ownership", 2) in [(v.invariant, v.step) for v in violations]
    assert any("modifies missing or unowned rule sgr-ssh" in p for p in problems)


def test_going_over_the_quota_is_reported() -> None:
    # Given a quota of 2 and a group with 2 rules, authorizing first makes 3
    violations, problems = check(
        [Authorize(NODES, (NEW,)), Revoke(NODES, ("sgr-nodeports",))], quota=2
    )
    assert [(v.step, v.invariant) for v in violations] == [(0, "5 quota")]
    assert any("exceed the quota of 2" in p for p in problems)


def test_a_duplicate_authorize_is_reported() -> None:
    same_as_ssh = rule_from_dict(rule(NODES, (22, 22), CidrIpv4="10.0.0.0/16", description="x"))
    steps: list[Step] = [
        Authorize(NODES, (NEW, same_as_ssh)),
        Revoke(NODES, ("sgr-nodeports",)),
    ]
    violations, problems = check(steps)
    assert any(v.invariant == "call shape" and "already exists" in v.detail for v in violations)
    assert any("duplicate of an existing rule" in p for p in problems)


def test_authorizing_the_same_rule_twice_in_one_call_is_reported() -> None:
    violations, problems = check([Authorize(NODES, (NEW, NEW)), Revoke(NODES, ("sgr-nodeports",))])
    assert any(v.invariant == "call shape" for v in violations)
    assert any("duplicate" in p for p in problems)


def test_over_exposure_is_reported() -> None:
    # Given a plan that opens every port to the internet on its way
    wide_open = rule_from_dict(rule(NODES, (0, 65535), CidrIpv4="0.0.0.0/0"))
    steps: list[Step] = [Authorize(NODES, (NEW, wide_open)), Revoke(NODES, ("sgr-nodeports",))]
    violations, problems = check(steps)
    assert (0, "2 no over-exposure") in [(v.step, v.invariant) for v in violations]
    assert any(v.step == -1 and v.invariant == "outcome" for v in violations)
    assert any("outside OLD ∪ NEW" in p for p in problems)
    assert any("not unmanaged + desired" in p for p in problems)


def test_an_incomplete_plan_is_reported() -> None:
    violations, problems = check([Authorize(NODES, (NEW,))])
    assert [(v.step, v.invariant) for v in violations] == [(-1, "outcome")]
    assert "extra sg-0node0000000000001 tcp 31000-32000" in violations[0].detail
    assert problems == [f"final state of {NODES} is not unmanaged + desired"]


def test_touching_a_group_outside_the_scope_is_reported() -> None:
    elsewhere = rule_from_dict(rule("sg-0elsewhere", (80, 80), CidrIpv4="10.0.0.0/8"))
    violations, problems = check(
        [
            Authorize(NODES, (NEW,)),
            Revoke(NODES, ("sgr-nodeports",)),
            Authorize("sg-0elsewhere", (elsewhere,)),
        ]
    )
    assert any(v.invariant == "scope" for v in violations)
    assert any("outside the scope" in p for p in problems)


def test_a_modify_that_changes_the_peer_kind_is_reported() -> None:
    as_cidr = rule_from_dict(rule(NODES, (31000, 32500), CidrIpv4="10.0.0.0/16"))
    violations, problems = check([Modify(NODES, "sgr-nodeports", as_cidr)])
    assert any("peer type" in v.detail for v in violations)
    assert any("peer kind" in p for p in problems)


def test_a_stale_description_is_reported() -> None:
    # Given a managed rule whose desired description changed, and a plan that does nothing
    relabelled = [rule(NODES, (31000, 32000), description="renamed")]
    current = [owned(NODES, (31000, 32000), "sgr-1", description="old")]
    violations = check_plan(Plan(()), parse(current), parse(relabelled), OWNER, Limits())
    # Then the final state is reported for its stale description
    assert [v.invariant for v in violations] == ["outcome"]
    assert "keeps description 'old'" in violations[0].detail
    problems = judge_plan(current, relabelled, Plan(()).to_dict(), lambda _g: 60)
    assert problems == ["final rule sgr-1 has a stale description"]


def test_group_bounds_loss_and_exposure() -> None:
    current, desired = parse(CURRENT), parse(DESIRED)
    bounds = group_bounds(current, desired, OWNER)[NODES]
    old_rule, ssh = current
    new_rule = desired[0]
    # Only the ssh rule: the NodePorts 31000-32000 both states allow are lost
    lost = bounds.loses_traffic(frozenset({ssh.key}))
    assert lost == Traffic.of([old_rule.key])
    # Old, ssh and new together: nothing lost, nothing exposed
    everything = frozenset({old_rule.key, ssh.key, new_rule.key})
    assert not bounds.loses_traffic(everything) and not bounds.over_exposes(everything)
    # A wider rule from the backend group exposes 32501-33000
    wider = rule_from_dict(rule(NODES, (31000, 33000))).key
    exposed = bounds.over_exposes(frozenset({wider, ssh.key}))
    assert exposed == Traffic.of([rule_from_dict(rule(NODES, (32501, 33000))).key])
    assert not bounds.loses_traffic(frozenset({wider, ssh.key}))


@pytest.mark.parametrize("group", [NODES, BACKEND])
def test_violations_print_where_they_hold(group: str) -> None:
    assert str(Violation(2, "1 no loss", group, "denies x")) == (
        f"after step 2: 1 no loss in {group}: denies x"
    )
    assert str(Violation(-1, "outcome", group, "d")).startswith("final state: outcome")


# Property: on plans with one random fault injected, the checker and the judge agree.


@st.composite
def faulty_plans(draw: st.DrawFn) -> tuple[list[Doc], list[Doc], list[Step], int]:
    """A small world, its plan with enough quota, and one fault injected into that plan."""
    current, desired = draw(cases())
    quota = draw(st.integers(1, 8))
    result = make_plan(parse(current), dedupe_desired(parse(desired)), OWNER, Limits(100))
    assert isinstance(result, Plan)
    steps = list(result.steps)
    groups = sorted({d["GroupId"] for d in [*current, *desired]})
    ids = [d["SecurityGroupRuleId"] for d in current]
    group = draw(st.sampled_from(groups or ["sg-0aaa"]))
    candidate = rule_from_dict(draw(rule_docs(group)))
    fault = draw(st.sampled_from(["none", "swap", "drop", "authorize", "revoke", "modify"]))
    if fault == "swap" and len(steps) > 1:
        i = draw(st.integers(0, len(steps) - 2))
        steps[i], steps[i + 1] = steps[i + 1], steps[i]
    elif fault == "drop" and steps:
        steps.pop(draw(st.integers(0, len(steps) - 1)))
    elif fault == "authorize":
        steps.insert(draw(st.integers(0, len(steps))), Authorize(group, (candidate,)))
    elif fault == "revoke" and ids:
        steps.insert(draw(st.integers(0, len(steps))), Revoke(group, (draw(st.sampled_from(ids)),)))
    elif fault == "modify" and ids:
        at = draw(st.integers(0, len(steps)))
        steps.insert(at, Modify(group, draw(st.sampled_from(ids)), candidate))
    return current, desired, steps, quota


@given(faulty_plans())
def test_the_checker_and_the_judge_agree_on_faulty_plans(
    case: tuple[list[Doc], list[Doc], list[Step], int],
) -> None:
    current, desired, steps, quota = case
    plan = Plan(tuple(steps))
    violations = check_plan(
        plan, parse(current), dedupe_desired(parse(desired)), OWNER, Limits(quota)
    )
    problems = judge_plan(current, desired, plan.to_dict(), lambda _g: quota)
    note(f"checker: {[str(v) for v in violations]}\njudge: {problems}")
    event("unsafe plan" if problems else "safe plan")
    assert bool(violations) == bool(problems)


# Property: the bounds' shortcuts answer as the traffic algebra's plain definitions.

keys_of = st.lists(rule_docs(NODES), max_size=5).map(lambda ds: [rule_from_dict(d).key for d in ds])


@given(keys_of, keys_of, keys_of, st.data())
def test_group_bounds_answer_as_the_plain_definitions(
    stable: list[RuleKey], old: list[RuleKey], new: list[RuleKey], data: st.DataObject
) -> None:
    # Given OLD and NEW sharing some stable rules, and a state of the group's rules (often with
    # every stable rule, as in a make-before-break change)
    bounds = GroupBounds(frozenset(stable + old), frozenset(stable + new))
    kept = (
        stable if data.draw(st.booleans()) else data.draw(st.lists(st.sampled_from([SSH, *stable])))
    )
    keys = frozenset(kept + data.draw(st.lists(st.sampled_from([SSH, *old, *new]))))
    # Then what it loses and what it exposes are OLD ∩ NEW and OLD ∪ NEW against the state
    both = Traffic.of(bounds.old_keys) & Traffic.of(bounds.new_keys)
    either = Traffic.of(bounds.old_keys | bounds.new_keys)
    assert bounds.loses_traffic(keys) == both - Traffic.of(keys)
    assert bounds.over_exposes(keys) == Traffic.of(keys) - either
