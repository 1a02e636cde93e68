"""Steps 'Check the plan input', 'Lock the groups', 'Release the group locks' and the lock
janitor, on in-memory fakes."""

from __future__ import annotations

from typing import Any

import pytest
from fakes import rule
from sg_reconciler.app.steps import acquire_locks, check_plan, release_locks
from sg_reconciler.core.plan import Authorize, Plan
from sg_reconciler.core.rules import rule_to_dict
from sg_reconciler.errors import ExecutionStopped, InvalidPlan, LockBusy
from unit.app.steps_world import LEASE, World

G1, G2 = "sg-01", "sg-02"
PLAN = Plan((Authorize(G1, (rule(G1, 443),)), Authorize(G2, (rule(G2, 443),))))
RULE_OF_G2 = rule_to_dict(rule(G2, 443), with_identity=False)


def inline(*steps: dict[str, Any]) -> dict[str, Any]:
    return {"plan": {"feasible": True, "steps": list(steps)}}


MACHINE = "arn:aws:states:eu-west-1:123456789012:stateMachine:apply"


def check(world: World, given: Any, execution: str = "exec-1") -> dict[str, Any]:
    return check_plan.check_plan({"input": given, "execution": execution}, world.plans)


# ---------------------------------------------------------------- check the plan input


def test_a_stored_plan_is_checked_by_reference_and_named_by_the_execution(world: World) -> None:
    world.plans.put_groups("abc123", [G1, G2])
    given = {"plan_id": "old-name", "plan_ref": {"groups_key": "abc123", "groups": 2}}

    assert check(world, given, "exec-7") == {
        "plan_id": "exec-7",  # the execution's name, never the input's
        "groups_key": "abc123",
        "groups": 2,
    }


@pytest.mark.parametrize("stored", [[], [G1]], ids=["expired", "partial"])
def test_a_reference_to_groups_not_all_stored_is_an_invalid_plan(
    world: World, stored: list[str]
) -> None:
    world.plans.put_groups("abc123", stored)

    with pytest.raises(InvalidPlan, match="expired or was never written"):
        check(world, {"plan_ref": {"groups_key": "abc123", "groups": 2}})


def test_an_inline_plan_stores_its_groups_under_the_execution_name(world: World) -> None:
    assert check(world, {"plan": PLAN.to_dict()}, "by-hand") == {
        "plan_id": "by-hand",
        "groups_key": "by-hand",
        "groups": 2,
    }
    assert world.plans.groups("by-hand") == [G1, G2]


@pytest.mark.parametrize(
    ("given", "execution", "message"),
    [
        ({"plan": PLAN.to_dict()}, "has space", "execution name 'has space'"),
        ({}, "exec-1", "give plan_ref"),
        ({"plan": {"feasible": True, "steps": []}}, "exec-1", "no steps"),
        ({"plan": {"feasible": False}}, "exec-1", "input.plan.feasible: Input should be True"),
        (
            {"plan": {"feasible": True, "steps": [{"action": "revoke", "group_id": G1}]}},
            "exec-1",
            "input.plan.steps.0.revoke.rule_ids: Field required",
        ),
        (
            inline({"action": "authorize", "group_id": G1, "rules": [RULE_OF_G2]}),
            "exec-1",
            "input.plan.steps.0.authorize: a step for sg-01 carries a rule of another group",
        ),
        (
            inline({"action": "modify", "group_id": G1, "rule_id": "sgr-1", "rule": RULE_OF_G2}),
            "exec-1",
            "input.plan.steps.0.modify: a step for sg-01 carries a rule of another group",
        ),
        (
            inline(
                {
                    "action": "adopt",
                    "group_id": G1,
                    "rule_id": "sgr-1",
                    "rule": RULE_OF_G2,
                    "previous_description": "theirs",
                }
            ),
            "exec-1",
            "input.plan.steps.0.adopt: a step for sg-01 carries a rule of another group",
        ),
        (
            inline({"action": "authorize", "group_id": G1, "rules": []}),
            "exec-1",
            "input.plan.steps.0.authorize.rules: List should have at least 1 item",
        ),
        (
            inline({"action": "revoke", "group_id": G1, "rule_ids": []}),
            "exec-1",
            "input.plan.steps.0.revoke.rule_ids: List should have at least 1 item",
        ),
        (
            inline({"action": "revoke", "group_id": G1, "rule_ids": [""]}),
            "exec-1",
            "input.plan.steps.0.revoke.rule_ids.0: String should have at least 1 character",
        ),
        ({"plan_ref": {"groups_key": "k", "groups": 0}}, "exec-1", "input.plan_ref.groups"),
        ({"plan_ref": {"groups_key": "a/b", "groups": 1}}, "exec-1", "plan_ref.groups_key"),
        ("text", "exec-1", "input: Input should be a valid dictionary"),
    ],
    ids=[
        "bad name",
        "nothing",
        "no steps",
        "infeasible",
        "bad step",
        "authorize: rule of another group",
        "modify: rule of another group",
        "adopt: rule of another group",
        "authorize: no rules",
        "revoke: no rule ids",
        "revoke: empty rule id",
        "no groups",
        "bad key",
        "not an object",
    ],
)
def test_a_bad_input_is_an_invalid_plan_before_anything_is_written(
    world: World, given: Any, execution: str, message: str
) -> None:
    with pytest.raises(InvalidPlan, match=message):
        check(world, given, execution)

    assert world.plans.parts == {}


def test_a_step_input_that_is_not_an_object_names_the_input(world: World) -> None:
    with pytest.raises(InvalidPlan, match=r"^input: Input should be a valid dictionary"):
        acquire_locks.acquire_locks(["not", "an", "object"], world.plans, world.locks, LEASE)


# ---------------------------------------------------------------- lock, renew, release


def locked(world: World, holder: str = "exec-1") -> dict[str, Any]:
    world.plans.put_groups("key", [G2, G1])
    event = {"groups_key": "key", "groups": 2, "holder": holder}
    return acquire_locks.acquire_locks(event, world.plans, world.locks, LEASE)


def test_locks_are_taken_for_every_group_and_taken_again_by_their_holder(world: World) -> None:
    assert locked(world) == {"held": 2}
    assert locked(world) == {"held": 2}  # a retry renews
    assert {g: world.locks.holder(g) for g in (G1, G2)} == {G1: "exec-1", G2: "exec-1"}


def test_a_group_locked_by_another_execution_is_busy_until_its_lease_ends(world: World) -> None:
    world.locks.acquire([G2], "exec-0", LEASE)

    with pytest.raises(LockBusy, match=f"{G2} is locked by exec-0"):
        locked(world)

    world.locks.now += LEASE + 1  # exec-0 died: its lease runs out
    assert locked(world) == {"held": 2}


def test_a_lock_step_of_an_execution_that_already_ended_gives_back_what_it_took(
    world: World,
) -> None:
    # Given the janitor already ran for exec-1 (stopped while its lock step was in flight)
    release_locks.release_after_stop(status_change("ABORTED"), world.locks, MACHINE, LEASE)
    # When the lock step goes on, it takes the locks, sees the record and gives them back
    with pytest.raises(ExecutionStopped, match="2 lock\\(s\\) taken were given back"):
        locked(world)
    assert world.locks.items == {}
    # And another execution's lock step is not concerned
    assert locked(world, "exec-2") == {"held": 2}


def test_release_frees_only_the_holders_locks(world: World) -> None:
    locked(world)
    world.locks.now += LEASE + 1
    world.locks.acquire([G2], "exec-2", LEASE)

    released = release_locks.release_locks(
        {"groups_key": "key", "groups": 2, "holder": "exec-1"}, world.plans, world.locks
    )

    assert released == {"released": 1}
    assert world.locks.holder(G1) == "nobody"
    assert world.locks.holder(G2) == "exec-2"


def status_change(status: str, name: str = "exec-1", arn: str = MACHINE) -> dict[str, Any]:
    return {"detail": {"name": name, "status": status, "stateMachineArn": arn}}


@pytest.mark.parametrize("status", ["FAILED", "TIMED_OUT", "ABORTED"])
def test_the_janitor_frees_a_stopped_executions_locks(world: World, status: str) -> None:
    locked(world)
    world.locks.acquire(["sg-03"], "exec-2", LEASE)

    answer = release_locks.release_after_stop(status_change(status), world.locks, MACHINE, LEASE)

    assert answer == {"released": 2, "execution": "exec-1"}
    assert set(world.locks.items) == {"sg-03"}


@pytest.mark.parametrize(
    ("status", "arn"),
    [("RUNNING", MACHINE), ("SUCCEEDED", MACHINE), ("FAILED", MACHINE + "-2")],
)
def test_the_janitor_ignores_other_status_changes(world: World, status: str, arn: str) -> None:
    locked(world)

    answer = release_locks.release_after_stop(
        status_change(status, arn=arn), world.locks, MACHINE, LEASE
    )

    assert answer == {"released": 0, "ignored": f"{status} of {arn}"}
    assert len(world.locks.items) == 2


def test_the_janitor_refuses_an_event_without_a_detail(world: World) -> None:
    with pytest.raises(InvalidPlan, match="detail: Field required"):
        release_locks.release_after_stop({"detail-type": "x"}, world.locks, MACHINE, LEASE)
