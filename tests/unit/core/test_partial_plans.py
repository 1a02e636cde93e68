"""A group that cannot be planned holds back revokes everywhere, not the whole reconcile."""

from __future__ import annotations

from sg_reconciler.core.plan import Authorize, Plan, Refusal
from sg_reconciler.core.planner import Limits, make_plan
from sg_reconciler.core.rules import OWNER_TAG_KEY, Rule, rule_from_dict

OWNED = [{"Key": OWNER_TAG_KEY, "Value": "sg-reconciler"}]


def rule(group: str, lo: int, hi: int, rule_id: str | None = None) -> Rule:
    doc = {
        "GroupId": group,
        "IpProtocol": "tcp",
        "FromPort": lo,
        "ToPort": hi,
        "ReferencedGroupInfo": {"GroupId": "sg-lb"},
    }
    if rule_id:
        doc |= {"SecurityGroupRuleId": rule_id, "Tags": OWNED}
    return rule_from_dict(doc)


def test_a_refused_group_defers_every_revoke_but_not_the_authorizations() -> None:
    # Given group a can move 80 -> 81 and group b would need 3 rules under a quota of 2
    current = [rule("sg-a", 80, 80, "sgr-a1"), rule("sg-b", 90, 90, "sgr-b1")]
    desired = [
        rule("sg-a", 81, 81),
        rule("sg-b", 91, 91),
        rule("sg-b", 93, 93),
        rule("sg-b", 95, 95),
    ]
    limits = Limits(default=10, per_group={"sg-b": 2})

    # When planned whole, the answer is a refusal naming group b (the CLI contract)
    whole = make_plan(current, desired, limits=limits)
    assert isinstance(whole, Refusal) and "sg-b" in whole.reason

    # When planned partially, group a gets its new rule and nothing is revoked anywhere
    partial = make_plan(current, desired, limits=limits, partial=True)
    assert isinstance(partial, Plan)
    assert [type(s) for s in partial.steps] == [Authorize]
    assert partial.steps[0].group_id == "sg-a"
    assert len(partial.refused) == 1 and "sg-b" in partial.refused[0]
    assert partial.to_dict()["refused"] == list(partial.refused)
    assert any("revokes deferred" in note for note in partial.notes)


def test_without_refusals_a_partial_plan_is_the_whole_plan() -> None:
    current = [rule("sg-a", 80, 80, "sgr-a1")]
    desired = [rule("sg-a", 81, 81)]
    assert make_plan(current, desired, partial=True) == make_plan(current, desired)
