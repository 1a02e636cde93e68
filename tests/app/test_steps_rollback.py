"""Step 'Roll back the rules this execution added', on in-memory fakes: in the groups it
still holds, by tag; a lost lock leaves that group's new rules (a safe superset); adopted
rules are handed back."""

from __future__ import annotations

from typing import Any

import pytest
from app.steps_world import World, caught
from fakes import rule
from sg_reconciler.core.plan import Adopt, Authorize, Plan
from sg_reconciler.core.rules import ADOPTED_BY_TAG_KEY
from sg_reconciler.errors import GroupNotFound, LockLost, TransientAwsError

G1, G2 = "sg-01", "sg-02"
DENIED = caught("AccessDenied", "sg-02: UnauthorizedOperation: no")


def authorized(world: World) -> tuple[dict[str, Any], set[str]]:
    """Both groups had rules, this execution added one to each: the rule ids before."""
    world.rules.add_group(G1, G2)
    world.rules.put(rule(G1, 22))
    world.rules.put(rule(G2, 80, to_port=85), owner=world.owner, plan_id="exec-0")
    before = {r.rule_id or "" for r in world.rules.rules()}
    world.desired = [rule(G1, 443), rule(G2, 80, to_port=85), rule(G2, 443)]
    checked = world.check()
    world.lock(checked)
    world.refresh(checked)
    world.apply("authorize", 0, checked)
    return checked, before


def test_a_rollback_revokes_exactly_the_rules_this_execution_added(world: World) -> None:
    checked, before = authorized(world)

    answer = world.roll_back(checked, DENIED)

    assert {r.rule_id for r in world.rules.rules()} == before
    assert answer["handed_back_rule_ids"] == []
    assert len(answer["revoked_rule_ids"]) == 2
    assert answer["cause"] == (
        "AccessDenied: sg-02: UnauthorizedOperation: no before any revoke; revoked the 2 "
        "rule(s) this execution had added, the groups are as before"
    )


def test_a_write_that_applied_while_its_caller_saw_an_error_is_rolled_back_by_tag(
    world: World,
) -> None:
    world.rules.add_group(G1)
    world.desired = [rule(G1, 443)]
    checked = world.check()
    world.lock(checked)
    world.refresh(checked)
    world.rules.fail("authorize", TransientAwsError("connection reset"), applied=True)
    with pytest.raises(TransientAwsError):
        world.apply("authorize", 0, checked)
    assert world.rules.rules(G1), "the rule exists though the step failed"

    answer = world.roll_back(checked, caught("TransientAwsError", "connection reset"))

    assert world.rules.rules(G1) == []
    assert len(answer["revoked_rule_ids"]) == 1


def test_a_rollback_is_idempotent(world: World) -> None:
    checked, before = authorized(world)
    world.roll_back(checked, DENIED)

    again = world.roll_back(checked, DENIED)

    assert again["revoked_rule_ids"] == []
    assert {r.rule_id for r in world.rules.rules()} == before


def test_a_group_whose_lock_was_lost_keeps_its_new_rules_and_the_rollback_says_so(
    world: World,
) -> None:
    checked, before = authorized(world)
    world.locks.now += 901
    world.locks.renew(G1, world.execution, 900)  # G1 still held; G2's lease ran out
    world.locks.acquire([G2], "exec-2", 900)

    with pytest.raises(LockLost, match=f"rolled back 1 rule\\(s\\) but not in {G2}: another"):
        world.roll_back(checked, DENIED)

    assert {r.group_id for r in world.rules.rules() if r.rule_id not in before} == {G2}
    assert world.locks.holder(G2) == "exec-2"


def test_a_group_deleted_meanwhile_is_skipped(world: World) -> None:
    checked, _ = authorized(world)
    world.rules.fail("revoke", GroupNotFound("InvalidGroup.NotFound: gone"))

    answer = world.roll_back(checked, DENIED)

    assert len(answer["revoked_rule_ids"]) == 1  # the other group's


def test_the_rollback_hands_adopted_rules_back_as_they_were(world: World) -> None:
    world.rules.add_group(G1)
    theirs = world.rules.put(rule(G1, 443, peer="sg-0lb", description="lbc"))
    rule_id = theirs.rule_id or ""
    wanted = rule(G1, 443, peer="sg-0lb", description="reconciler")
    world.desired = [wanted, rule(G1, 8443)]
    world.adopt = lambda r: r.description == "lbc"
    plan = Plan((Adopt(G1, rule_id, wanted, "lbc"), Authorize(G1, (rule(G1, 8443),))))
    checked = world.check(plan)
    world.lock(checked)
    world.refresh(checked)
    world.apply("authorize", 0, checked)
    assert world.rules.groups[G1][rule_id].tag(ADOPTED_BY_TAG_KEY) == "exec-1"

    answer = world.roll_back(checked, DENIED)

    assert world.rules.rules(G1) == [theirs]  # description and tags as before
    assert answer["handed_back_rule_ids"] == [rule_id]
    assert "and handed back the 1 rule(s) it had adopted" in answer["cause"]


def test_a_rollback_never_touches_rules_another_execution_added(world: World) -> None:
    checked, _ = authorized(world)
    other = world.rules.put(rule(G1, 9000), owner=world.owner, plan_id="exec-0")
    foreign = world.rules.put(rule(G1, 9001), owner="other-stack", plan_id="exec-1")

    world.roll_back(checked, DENIED)

    ids = {r.rule_id for r in world.rules.rules(G1)}
    assert {other.rule_id, foreign.rule_id} <= ids  # another execution's, another stack's
