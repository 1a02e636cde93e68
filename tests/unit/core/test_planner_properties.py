"""Property tests: every plan the planner emits passes an independent judge; every refusal of
a small case is confirmed by a brute-force search over all orders."""

from __future__ import annotations

from collections.abc import Iterable
from unittest.mock import patch

from hypothesis import event, example, given, note
from hypothesis import strategies as st
from sg_reconciler.core import planner
from sg_reconciler.core.plan import Authorize, Modify, Plan, Refusal, Revoke
from sg_reconciler.core.planner import Limits, make_plan
from sg_reconciler.core.rules import Rule, RuleKey, ingress_rules, rule_to_dict
from sg_reconciler.core.safety import flow_conflict
from unit.core.sg_judge import OWNER, Doc, judge_plan, key, order_exists, owned, worlds
from unit.core.sg_sources import FlowMasks
from unit.core.sg_strategies import GROUPS, cases, crosswise_cases


def plan(current: list[Doc], desired: list[Doc], quota: int) -> Plan | Refusal:
    return make_plan(
        ingress_rules(current, "current"), ingress_rules(desired, "desired"), OWNER, Limits(quota)
    )


def kind_of(result: Plan | Refusal) -> str:
    """How a case was decided, for hypothesis statistics."""
    if isinstance(result, Refusal):
        return (
            "refused: over the quota" if "over the quota" in result.reason else "refused: no order"
        )
    return "plan with modify" if any(isinstance(s, Modify) for s in result.steps) else "plan"


def largest_group(current: list[Doc]) -> int:
    return max([sum(1 for d in current if d["GroupId"] == g) for g in GROUPS] + [1])


@given(st.one_of(cases(), crosswise_cases()), st.integers(-1, 3))
def test_emitted_plans_pass_the_judge_and_refusals_have_no_order(
    case: tuple[list[Doc], list[Doc]], slack: int
) -> None:
    current, desired = case
    quota = max(1, largest_group(current) + slack)
    result = plan(current, desired, quota)
    note(f"quota {quota}: {result}")
    event(kind_of(result))
    if isinstance(result, Plan):
        assert judge_plan(current, desired, result.to_dict(), lambda _g: quota) == []
        assert_untouched_rules_stay(current, desired, result)
        return
    assert "internal safety check failed" not in result.reason
    # Refused: the desired state is over the quota, or no order exists in some group.
    scope = worlds(current, desired)
    # (a group with neither managed nor desired rules is not planned, whatever its count)
    planned = {g: w for g, w in scope.items() if w.desired or any(owned(d) for d in w.current)}
    over = [g for g, w in planned.items() if len(w.new_keys()) > quota]
    stuck = [g for g, w in scope.items() if not order_exists(w, quota)]
    assert over or stuck, result.reason
    assert {g for g in over + stuck} <= {g for g in scope if g in result.reason}


def assert_untouched_rules_stay(current: list[Doc], desired: list[Doc], result: Plan) -> None:
    """Rules present in both states (same identity and description) are never touched, but
    for desired rules the notes say are revoked and authorized again (the only order)."""
    wanted = {key(d): d.get("Description", "") for d in desired}
    again = " ".join(n for n in result.notes if "authorizing them again" in n)
    stays = {
        d["SecurityGroupRuleId"]
        for d in current
        if not owned(d)
        or (
            wanted.get(key(d)) == d.get("Description", "") and d["SecurityGroupRuleId"] not in again
        )
    }
    for step in result.to_dict()["steps"]:
        touched = step.get("rule_ids", []) + ([step["rule_id"]] if "rule_id" in step else [])
        assert not stays & set(touched), step


@given(cases(max_current=5, max_new=4))
def test_with_enough_quota_every_authorize_precedes_every_revoke(
    case: tuple[list[Doc], list[Doc]],
) -> None:
    current, desired = case
    result = plan(current, desired, 1000)
    assert isinstance(result, Plan)
    assert judge_plan(current, desired, result.to_dict(), lambda _g: 1000) == []
    assert_untouched_rules_stay(current, desired, result)
    kinds = [type(step) for step in result.steps]
    authorizes = [n for n, k in enumerate(kinds) if k is Authorize]
    revokes = [n for n, k in enumerate(kinds) if k is Revoke]
    if authorizes and revokes:
        assert max(authorizes) < min(revokes)


# Found by hypothesis: ICMP type 3 code 0 and type 3 code 4 are different traffic, so the
# stale group rule may go before the CIDR rule comes (the judge once compared types only).
TAGS = [{"Key": "sg-reconciler/owner", "Value": OWNER}]
LB = {"ReferencedGroupInfo": {"GroupId": "sg-0lb"}}
ICMP_CODES_APART = (
    [
        {
            "GroupId": "sg-0aaa",
            "IsEgress": False,
            "IpProtocol": "icmp",
            "FromPort": 3,
            "ToPort": 0,
            **LB,
            "SecurityGroupRuleId": "sgr-00000",
            "Tags": TAGS,
        },
        {
            "GroupId": "sg-0aaa",
            "IsEgress": False,
            "IpProtocol": "-1",
            "FromPort": -1,
            "ToPort": -1,
            **LB,
            "SecurityGroupRuleId": "sgr-00001",
            "Tags": TAGS,
        },
    ],
    [
        {
            "GroupId": "sg-0aaa",
            "IsEgress": False,
            "IpProtocol": "-1",
            "FromPort": -1,
            "ToPort": -1,
            **LB,
        },
        {
            "GroupId": "sg-0aaa",
            "IsEgress": False,
            "IpProtocol": "icmp",
            "FromPort": 3,
            "ToPort": 4,
            "CidrIpv4": "10.0.0.0/15",
        },
    ],
)


@given(st.one_of(cases(), crosswise_cases()), st.integers(0, 2))
@example(ICMP_CODES_APART, 0)
def test_a_plan_exists_whenever_the_brute_force_finds_an_order(
    case: tuple[list[Doc], list[Doc]], slack: int
) -> None:
    # Given a small world and a tight quota
    current, desired = case
    quota = max(1, largest_group(current) + slack)
    scope = worlds(current, desired)
    # When every group has an order within the quota (by brute force)
    feasible = all(len(w.new_keys()) <= quota and order_exists(w, quota) for w in scope.values())
    # Then the planner finds one too (its search is complete on small cases)
    result = plan(current, desired, quota)
    assert isinstance(result, Plan) == feasible, getattr(result, "reason", result)


@given(crosswise_cases())
def test_at_the_quota_the_planner_refuses_exactly_when_no_order_exists(
    case: tuple[list[Doc], list[Doc]],
) -> None:
    # Given owned rules from a /15 replaced by rules from its halves, with no free slot
    current, desired = case
    quota = len(current)
    world = worlds(current, desired)["sg-0aaa"]
    # When it is planned
    result = plan(current, desired, quota)
    event(kind_of(result))
    # Then it is refused exactly when the brute force finds no order, and a plan is safe
    assert isinstance(result, Plan) == order_exists(world, quota), getattr(result, "reason", "")
    if isinstance(result, Plan):
        assert judge_plan(current, desired, result.to_dict(), lambda _g: quota) == []
    else:
        assert "no make-before-break order" in result.reason and "sg-0aaa" in result.reason


@given(st.one_of(cases(), crosswise_cases()), st.integers(-1, 2))
def test_partial_plans_are_safe_at_every_step_and_revoke_nothing_while_a_group_waits(
    case: tuple[list[Doc], list[Doc]], slack: int
) -> None:
    # Given a small world with a tight quota
    current, desired = case
    quota = max(1, largest_group(current) + slack)
    # When it is planned partially
    rules_now, rules_wanted = ingress_rules(current, "current"), ingress_rules(desired, "desired")
    result = make_plan(rules_now, rules_wanted, OWNER, Limits(quota), partial=True)
    whole = make_plan(rules_now, rules_wanted, OWNER, Limits(quota))
    # Then it is a plan; when no group is refused it is the whole plan
    assert isinstance(result, Plan)
    event("partial" if result.refused else "whole")
    if not result.refused:
        assert result == whole
        return
    # And otherwise the whole answer is a refusal, nothing is revoked anywhere, and every
    # state of the partial plan keeps the invariants
    assert isinstance(whole, Refusal)
    assert not any(isinstance(step, Revoke) for step in result.steps)
    doc = result.to_dict()
    assert doc["refused"] == list(result.refused)
    assert judge_plan(current, desired, doc, lambda _g: quota, reaches_desired=False) == []


# Property: the search judges its states by pieces of the flows at stake; judged instead by
# the independent judge's concrete sources (slower), it plans exactly the same.


class JudgedInterleaver(planner._Interleaver):
    """The planner's search with every state judged by `core.sg_sources`."""

    def covers(self, added: int, removed: int) -> bool:
        changing = {*self.adds, *self.removes}
        present = [k for k in self.bounds.stable_keys if k not in changing]
        present += [k for i, k in enumerate(self.adds) if added >> i & 1]
        present += [k for j, k in enumerate(self.removes) if not removed >> j & 1]
        masks = self.judge()
        must = masks.union(self.docs(self.bounds.old_keys)) & masks.union(
            self.docs(self.bounds.new_keys)
        )
        return not must & ~masks.union(self.docs(present))

    def docs(self, keys: Iterable[RuleKey]) -> list[Doc]:
        return [rule_to_dict(Rule(k), with_identity=False) for k in keys]

    def judge(self) -> FlowMasks:
        if not hasattr(self, "masks"):
            everything = self.bounds.old_keys | self.bounds.new_keys
            self.masks = FlowMasks(self.diff.group_id, self.docs(sorted(everything)))
        return self.masks


def waits_by_flow_conflict(olds: list[RuleKey], news: list[RuleKey]) -> list[int]:
    return [sum(1 << i for i, new in enumerate(news) if flow_conflict(old, new)) for old in olds]


@given(
    st.one_of(cases(), cases(max_current=8, max_new=6), crosswise_cases()),
    st.integers(-2, 3),
    st.booleans(),
)
def test_the_search_plans_as_when_the_judge_judges_every_state(
    case: tuple[list[Doc], list[Doc]], slack: int, per_family: bool
) -> None:
    current, desired = case
    quota = max(1, largest_group(current) + slack)
    limits = Limits(quota, per_family=per_family)  # per family: weighted as AWS counts
    rules_now, rules_wanted = ingress_rules(current, "current"), ingress_rules(desired, "desired")
    for budget in (planner.DEFAULT_SEARCH_BUDGET, 3):  # 3: the budget runs out alike too
        fast = make_plan(rules_now, rules_wanted, OWNER, limits, budget)
        with (
            patch.object(planner, "_Interleaver", JudgedInterleaver),
            patch.object(planner, "flow_waits", waits_by_flow_conflict),
        ):
            reference = make_plan(rules_now, rules_wanted, OWNER, limits, budget)
        event(kind_of(reference))
        assert fast == reference
