"""Steps 'Roll back the rules of a batch of groups' and 'Sum up the rollback', on in-memory
fakes: in the groups it still holds, by tag; a lost lock leaves that group's new rules (a
safe superset); adopted rules are handed back; what each item did is kept in the plan store,
and the sum is read from there."""

from __future__ import annotations

from typing import Any

import pytest
from fakes import rule
from sg_reconciler.app.steps import roll_back
from sg_reconciler.core.plan import Adopt, Authorize, Plan
from sg_reconciler.core.rules import ADOPTED_BY_TAG_KEY
from sg_reconciler.errors import (
    GroupNotFound,
    LockLost,
    RollbackIncomplete,
    Throttled,
    TransientAwsError,
)
from unit.app.steps_world import World, caught

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
    assert answer["handed_back"] == 0
    assert answer["revoked"] == 2
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
    assert answer["revoked"] == 1


def test_a_rollback_is_idempotent_and_a_retry_keeps_the_count(world: World) -> None:
    checked, before = authorized(world)
    world.roll_back(checked, DENIED)

    again = world.roll_back(checked, DENIED)

    # The retry finds nothing left to revoke; the plan store still knows what the first did
    assert again["revoked"] == 2
    assert {r.rule_id for r in world.rules.rules()} == before


def test_an_item_that_fails_midway_records_what_it_did_and_its_retry_finishes(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    checked, before = authorized(world)

    def throttled(*_: Any) -> list[str]:
        raise Throttled("RequestLimitExceeded: slow down")

    # The revokes went through, then the hand-back was throttled past the step's time
    with monkeypatch.context() as patched:
        patched.setattr(world.rules, "hand_back", throttled)
        with pytest.raises(Throttled):
            world.roll_back_batch(checked, 0)
    with pytest.raises(RollbackIncomplete, match=r"rolled back 2 rule.*batch 0: Throttled"):
        steps_report(world, checked)

    world.roll_back_batch(checked, 0)  # Step Functions' Retry

    assert steps_report(world, checked)["revoked"] == 2
    assert {r.rule_id for r in world.rules.rules()} == before


def test_an_item_that_left_no_record_makes_the_rollback_incomplete(world: World) -> None:
    checked, _ = authorized(world)
    event = {"mode": "report", "plan_id": checked["plan_id"], "batches": 1, "error": DENIED}

    with pytest.raises(RollbackIncomplete, match="batch 0: no record"):
        world_report(world, event)


def steps_report(world: World, checked: dict[str, Any]) -> dict[str, Any]:
    event = {"mode": "report", "plan_id": checked["plan_id"], "batches": 1, "error": DENIED}
    return world_report(world, event)


def world_report(world: World, event: dict[str, Any]) -> dict[str, Any]:
    return roll_back.roll_back(event, world.plans, world.rules, world.locks, 900)


def test_a_group_whose_lock_was_lost_keeps_its_new_rules_and_the_rollback_says_so(
    world: World,
) -> None:
    checked, before = authorized(world)
    world.locks.now += 901
    world.locks.renew(G1, world.execution, 900)  # G1 still held; G2's lease ran out
    world.locks.acquire([G2], "exec-2", 900)

    with pytest.raises(LockLost, match=f"not rolled back in {G2}: another execution holds it"):
        world.roll_back_batch(checked, 0)
    with pytest.raises(RollbackIncomplete, match="rolled back 1 rule\\(s\\) but not in 1 of 1"):
        world.roll_back(checked, DENIED)

    assert {r.group_id for r in world.rules.rules() if r.rule_id not in before} == {G2}
    assert world.locks.holder(G2) == "exec-2"


def test_a_group_deleted_meanwhile_is_skipped(world: World) -> None:
    checked, _ = authorized(world)
    world.rules.fail("revoke", GroupNotFound("InvalidGroup.NotFound: gone"))

    answer = world.roll_back(checked, DENIED)

    assert answer["revoked"] == 1  # the other group's


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
    assert answer["handed_back"] == 1
    assert "and handed back the 1 rule(s) it had adopted" in answer["cause"]


def test_a_rollback_never_touches_rules_another_execution_added(world: World) -> None:
    checked, _ = authorized(world)
    other = world.rules.put(rule(G1, 9000), owner=world.owner, plan_id="exec-0")
    foreign = world.rules.put(rule(G1, 9001), owner="other-stack", plan_id="exec-1")

    world.roll_back(checked, DENIED)

    ids = {r.rule_id for r in world.rules.rules(G1)}
    assert {other.rule_id, foreign.rule_id} <= ids  # another execution's, another stack's


def test_an_unexpected_error_is_recorded_as_not_rolled_back(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    checked, _ = authorized(world)

    def broken(*_: Any) -> list[Any]:
        raise KeyError("a bug")

    monkeypatch.setattr(world.rules, "tagged", broken)
    with pytest.raises(KeyError):
        world.roll_back_batch(checked, 0)

    with pytest.raises(RollbackIncomplete, match="batch 0: KeyError: 'a bug'"):
        steps_report(world, checked)
