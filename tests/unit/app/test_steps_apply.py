"""Steps 'Refresh the plan under the locks', the apply steps (authorize, ordered, revoke:
authorize, revoke, modify, adopt), 'Re-plan the revokes after the settle' and the verify
steps (visible, final, leftovers), on in-memory fakes."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import pytest
from fakes import FakePacer, FakeRules, planner, rule
from sg_reconciler.app.live_plan import LivePlan
from sg_reconciler.app.planned import Planned, put_planned
from sg_reconciler.app.scope_store import put_scope
from sg_reconciler.app.steps import refresh_plan, verify_rules
from sg_reconciler.core.plan import (
    Adopt,
    Authorize,
    Modify,
    Plan,
    Refusal,
    Revoke,
    step_to_dict,
)
from sg_reconciler.core.rules import (
    ADOPTED_BY_TAG_KEY,
    OWNER_TAG_KEY,
    PLAN_TAG_KEY,
    Rule,
    rule_to_dict,
)
from sg_reconciler.core.scope import Scope
from sg_reconciler.errors import (
    AccessDenied,
    AuthorizeFailed,
    GroupNotFound,
    InvalidPlan,
    LockLost,
    NotOwned,
    NotYetVisible,
    PlanRefused,
    QuotaExceeded,
    RevokeFailed,
    RuleChanged,
    TransientAwsError,
    WouldLoseTraffic,
)
from unit.app.steps_world import SETTLE, World, caught

G1, G2 = "sg-01", "sg-02"


def stale_and_new(world: World) -> tuple[str, str]:
    """G1: an owned 80-85 to widen to 80-90; G2: an unmanaged 22 to keep, 443 to add."""
    world.rules.add_group(G1, G2)
    old = world.rules.put(rule(G1, 80, to_port=85), owner=world.owner)
    unmanaged = world.rules.put(rule(G2, 22))
    world.desired = [rule(G1, 80, to_port=90, description="web"), rule(G2, 443), rule(G2, 22)]
    return old.rule_id or "", unmanaged.rule_id or ""


def prepared(world: World, plan: Plan | None = None) -> dict[str, Any]:
    """Checked, locked and refreshed: the phases are in the plan store."""
    checked = world.check(plan)
    world.lock(checked)
    world.refresh(checked)
    return checked


# ---------------------------------------------------------------- refresh


def test_the_refresh_stores_the_phases_and_returns_only_numbers(world: World) -> None:
    stale_and_new(world)
    checked = world.check()
    world.lock(checked)

    work = world.refresh(checked)

    assert work == {
        "changed": True,
        "batches": {"authorize": [0], "ordered": []},
        "settle_seconds": SETTLE,
        "owner": world.owner,
        "pacing": {"concurrency": 1, "writes_per_second": 1.0},
        "summary": {
            "groups": 2,
            "rules_authorized": 2,
            "rules_revoked": 1,
            "rules_modified": 0,
            "rules_adopted": 0,
            "calls": 3,
            "notes": [
                f"{G2}: desired {rule(G2, 22).key} is already allowed by unmanaged rule "
                "sgr-00000000000000002; left as is"
            ],
            "refused": [],
            "held": "",
        },
    }
    assert [i["group_id"] for i in world.plans.phase("exec-1", "authorize")] == [G1, G2]
    revoke = world.plans.phase("exec-1", "revoke")
    assert [i["group_id"] for i in revoke] == [G1]
    assert revoke[0]["desired"], "a revoking item carries its desired rules for the guard"


def test_a_refresh_that_finds_nothing_to_change_says_so(world: World) -> None:
    stale_and_new(world)
    checked = world.check()
    world.lock(checked)
    world.desired = world.rules.rules()  # someone else converged it meanwhile

    work = world.refresh(checked)

    assert work["changed"] is False
    assert work["batches"] == {"authorize": [], "ordered": []}
    assert world.plans.phase("exec-1", "authorize") == []


def test_a_refreshed_plan_that_reaches_past_the_locked_groups_is_refused(world: World) -> None:
    stale_and_new(world)
    checked = world.check(Plan((Authorize(G1, (rule(G1, 443),)),)))  # G1 only is locked
    world.lock(checked)

    with pytest.raises(PlanRefused, match=f"also changes {G2}, which this execution has not"):
        refresh_plan.refresh_plan(
            {**world.groups(checked), "plan_id": "exec-1"},
            world.plans,
            lambda scope, narrow=None: planner(world.rules, world.desired)(Scope.everything()),
            SETTLE,
            world.owner,
            world.pacing,
        )


def test_a_refusal_under_the_locks_is_a_refused_plan(world: World) -> None:
    stale_and_new(world)
    checked = world.check()

    def refused(scope: Scope, narrow: Scope | None = None) -> LivePlan:
        return LivePlan(Refusal("no safe order within the quota"), [], [], [])

    with pytest.raises(PlanRefused, match="no safe order"):
        refresh_plan.refresh_plan(
            {**world.groups(checked), "plan_id": "exec-1"},
            world.plans,
            refused,
            SETTLE,
            world.owner,
            world.pacing,
        )


# ---------------------------------------------------------------- apply: authorize


def test_authorize_tags_new_rules_renews_the_lease_and_takes_its_share_of_the_rate(
    world: World,
) -> None:
    stale_and_new(world)
    checked = prepared(world)
    world.locks.now += 100

    assert world.apply("authorize", 0, checked, batches=3) == {"groups": 2, "calls": 2}

    new = world.rules.tagged([G1, G2], world.owner, "exec-1")
    assert {r.key for r in new} == {rule(G1, 80, to_port=90).key, rule(G2, 443).key}
    assert all(r.tag(PLAN_TAG_KEY) == "exec-1" for r in new)
    assert world.rules.pacer is not None and world.rules.pacer.fitted == [(0, 3)]
    assert world.locks.items[G1][1] == world.locks.now + 900


def test_authorize_is_idempotent_a_retry_creates_nothing_twice(world: World) -> None:
    stale_and_new(world)
    checked = prepared(world)
    world.rules.fail("authorize", TransientAwsError("response lost"), applied=True)

    with pytest.raises(TransientAwsError, match=f"^{G1}: response lost"):
        world.apply("authorize", 0, checked)
    (first,) = world.rules.tagged([G1], world.owner, "exec-1")  # it applied all the same
    world.apply("authorize", 0, checked)  # the state machine's retry

    new = world.rules.tagged([G1, G2], world.owner, "exec-1")
    assert len(new) == 2 and first in new
    assert len({r.key for r in world.rules.rules()}) == len(world.rules.rules())


def test_authorize_in_a_group_at_its_quota_is_a_quota_error_naming_the_group(
    world: World,
) -> None:
    stale_and_new(world)
    checked = prepared(world)
    world.rules.quota = 1

    with pytest.raises(QuotaExceeded, match=f"^{G1}: RulesPerSecurityGroupLimitExceeded"):
        world.apply("authorize", 0, checked)


def test_authorize_in_a_deleted_group_is_group_not_found(world: World) -> None:
    stale_and_new(world)
    checked = prepared(world)
    world.rules.delete_group(G1)

    with pytest.raises(GroupNotFound, match=f"^{G1}: InvalidGroup.NotFound"):
        world.apply("authorize", 0, checked)


def test_apply_after_the_lease_was_lost_writes_nothing(world: World) -> None:
    stale_and_new(world)
    checked = prepared(world)
    world.locks.now += 901
    world.locks.acquire([G1], "exec-2", 900)

    with pytest.raises(LockLost, match=f"^{G1}: {G1} is no longer locked by exec-1"):
        world.apply("authorize", 0, checked)

    assert world.rules.writes == []


def test_a_missing_batch_is_an_invalid_plan(world: World) -> None:
    stale_and_new(world)
    checked = prepared(world)

    with pytest.raises(InvalidPlan, match="no batch authorize #4"):
        world.apply("authorize", 4, checked)


@pytest.mark.parametrize(
    ("item", "message"),
    [
        (
            {"group_id": G1, "steps": [{"action": "revoke", "group_id": G2, "rule_ids": ["x"]}]},
            "carries a step of another group",
        ),
        (
            {"group_id": G1, "steps": [{"action": "revoke", "group_id": G1, "rule_ids": ["x"]}]},
            "carries no desired rules for the live guard",
        ),
        (
            {"group_id": G1, "steps": [{"action": "drop", "group_id": G1}]},
            "the item for sg-.*: steps.0: Input tag 'drop' found using 'action' does not match",
        ),
        ({"group_id": G1, "steps": []}, "steps: List should have at least 1 item"),
        (
            {
                "group_id": G1,
                "steps": [{"action": "revoke", "group_id": G1, "rule_ids": ["x"]}],
                "desired": [],
                "settle_seconds": -1,
            },
            "settle_seconds: Input should be greater than or equal to 0",
        ),
    ],
    ids=["other group", "no desired", "bad step", "no steps", "negative settle"],
)
def test_a_bad_stored_item_is_an_invalid_plan_before_any_call(
    world: World, item: dict[str, Any], message: str
) -> None:
    world.locks.acquire([G1], "exec-1", 900)
    world.plans.put_phase("exec-1", "revoke", [[item]])

    with pytest.raises(InvalidPlan, match=message):
        world.apply("revoke", 0, {"plan_id": "exec-1"})

    assert world.rules.writes == []


# ---------------------------------------------------------------- apply: revoke, modify, adopt


def revoke_item(world: World, group_id: str, ids: list[str], desired: list[Any]) -> None:
    world.locks.acquire([group_id], "exec-1", 900)
    steps_ = [{"action": "revoke", "group_id": group_id, "rule_ids": ids}]
    item = {"group_id": group_id, "steps": steps_, "desired": desired}
    world.plans.put_phase("exec-1", "revoke", [[item]])


def test_revoke_removes_the_owned_stale_rule_after_the_guard_saw_the_live_rules(
    world: World,
) -> None:
    old, _ = stale_and_new(world)
    world.run()

    assert old not in {r.rule_id for r in world.rules.rules()}
    assert world.rules.guarded == [G1]
    assert world.rules.keys(G1) == {rule(G1, 80, to_port=90).key}


def test_the_guard_stops_a_revoke_whose_replacement_someone_removed(world: World) -> None:
    old, _ = stale_and_new(world)
    checked = prepared(world)
    world.apply("authorize", 0, checked)
    (new,) = world.rules.tagged([G1], world.owner, "exec-1")
    world.rules.remove(new.rule_id or "")  # someone else revokes the new rule

    with pytest.raises(WouldLoseTraffic, match=f"^{G1}: {G1}: no call made to remove {old}"):
        world.apply("revoke", 0, checked)

    assert old in {r.rule_id for r in world.rules.rules(G1)}
    assert ("revoke", G1) not in world.rules.writes


def test_revoking_a_rule_without_the_owner_tag_is_refused(world: World) -> None:
    _, unmanaged = stale_and_new(world)
    revoke_item(world, G2, [unmanaged], [])

    with pytest.raises(NotOwned, match="without the owner tag"):
        world.apply("revoke", 0, {"plan_id": "exec-1"})

    assert unmanaged in {r.rule_id for r in world.rules.rules(G2)}


def test_revoking_rules_that_are_gone_succeeds(world: World) -> None:
    stale_and_new(world)
    revoke_item(world, G1, ["sgr-0000000000000000f"], [])

    assert world.apply("revoke", 0, {"plan_id": "exec-1"}) == {"groups": 1, "calls": 1}
    assert world.rules.writes == []


def test_a_group_deleted_during_the_revoke_has_nothing_left_to_revoke(world: World) -> None:
    old, _ = stale_and_new(world)
    revoke_item(world, G1, [old], [])
    world.rules.fail("revoke", GroupNotFound("InvalidGroup.NotFound: gone"))

    assert world.apply("revoke", 0, {"plan_id": "exec-1"}) == {"groups": 1, "calls": 1}


def modify_plan(world: World) -> tuple[str, Plan]:
    world.rules.add_group(G1)
    owned = world.rules.put(rule(G1, 443, description="old"), owner=world.owner)
    rule_id = owned.rule_id or ""
    return rule_id, Plan((Modify(G1, rule_id, rule(G1, 443, description="new")),))


def test_modify_rewrites_an_owned_rule_in_place(world: World) -> None:
    rule_id, plan = modify_plan(world)
    world.desired = [rule(G1, 443, description="new")]

    assert world.run(plan)["status"] == "applied"

    (now,) = world.rules.rules(G1)
    assert (now.rule_id, now.description, now.owned_by(world.owner)) == (rule_id, "new", True)
    assert world.rules.guarded == [G1]


def test_modify_of_an_unowned_rule_or_a_guarded_loss_makes_no_call(world: World) -> None:
    rule_id, plan = modify_plan(world)
    checked = world.check(plan)
    world.lock(checked)
    narrower = Modify(G1, rule_id, rule(G1, 444, description="new"))  # 443 would go
    desired = [rule_to_dict(rule(G1, 443))]
    item = {"group_id": G1, "steps": [step_to_dict(narrower)], "desired": desired}
    world.plans.put_phase("exec-1", "revoke", [[item]])

    with pytest.raises(
        WouldLoseTraffic, match=f"it would deny {G1} tcp 443 from 10.0.0.0-10.0.255.255"
    ):
        world.apply("revoke", 0, checked)

    owned = world.rules.groups[G1][rule_id]
    world.rules.groups[G1][rule_id] = replace(owned, tags=())  # the owner tag is gone
    with pytest.raises(NotOwned, match="refusing to modify"):
        world.apply("revoke", 0, checked)
    assert world.rules.writes == []


def adopt_world(world: World) -> tuple[str, Plan]:
    world.rules.add_group(G1)
    theirs = world.rules.put(rule(G1, 443, peer="sg-0lb", description="lbc"))
    rule_id = theirs.rule_id or ""
    desired = rule(G1, 443, peer="sg-0lb", description="reconciler")
    world.desired = [desired]
    world.adopt = lambda r: r.description == "lbc"
    return rule_id, Plan((Adopt(G1, rule_id, desired, "lbc"),))


def test_adopt_takes_the_rule_over_in_place(world: World) -> None:
    rule_id, plan = adopt_world(world)
    checked = prepared(world, plan)

    assert world.apply("authorize", 0, checked) == {"groups": 1, "calls": 1}
    assert world.apply("authorize", 0, checked) == {"groups": 1, "calls": 1}  # a retry

    (now,) = world.rules.rules(G1)
    assert now.rule_id == rule_id and now.description == "reconciler"
    assert now.owned_by(world.owner) and now.tag(ADOPTED_BY_TAG_KEY) == "exec-1"


@pytest.mark.parametrize("change", ["gone", "changed", "owned"])
def test_adopt_refuses_a_rule_that_changed_since_the_plan(world: World, change: str) -> None:
    rule_id, plan = adopt_world(world)
    checked = prepared(world, plan)
    theirs = world.rules.groups[G1][rule_id]
    if change == "gone":
        world.rules.remove(rule_id)
    elif change == "changed":
        world.rules.groups[G1][rule_id] = replace(theirs, key=rule(G1, 444, peer="sg-0lb").key)
    else:
        world.rules.groups[G1][rule_id] = replace(theirs, tags=((OWNER_TAG_KEY, "other"),))

    with pytest.raises(RuleChanged if change != "owned" else NotOwned):
        world.apply("authorize", 0, checked)


# ---------------------------------------------------------------- ordered, re-plan revokes


def test_a_quota_bound_plan_runs_its_ordered_calls_one_by_one(world: World) -> None:
    world.rules.quota = 2
    world.rules.add_group(G1)
    world.rules.put(rule(G1, 80), owner=world.owner)
    world.rules.put(rule(G1, 81), owner=world.owner)
    world.desired = [rule(G1, 90), rule(G1, 91)]
    checked = world.check()
    world.lock(checked)

    work = world.refresh(checked)
    assert work["batches"]["authorize"] == []
    assert [ref["batch"] for ref in work["batches"]["ordered"]] == [0, 1]

    assert world.run()["status"] == "applied"
    assert world.rules.keys(G1) == {rule(G1, 90).key, rule(G1, 91).key}


def test_the_revokes_wait_when_the_desired_state_changed_during_the_settle(
    world: World,
) -> None:
    old, _ = stale_and_new(world)
    checked = prepared(world)
    world.apply("authorize", 0, checked)
    world.desired = [*world.desired, rule(G1, 8443)]  # a new rule is wanted now

    answer = world.replan_revokes(checked)

    assert answer["revoke"] == []
    assert "the desired state changed during the settle: 1 call(s)" in answer["deferred"]
    assert world.plans.phase("exec-1", "revoke") == []
    assert old in {r.rule_id for r in world.rules.rules(G1)}


def test_only_rules_stale_in_both_plans_are_revoked(world: World) -> None:
    old, _ = stale_and_new(world)
    checked = prepared(world)
    world.apply("authorize", 0, checked)
    later = world.rules.put(rule(G2, 8080), owner=world.owner)  # stale, but only now

    answer = world.replan_revokes(checked)

    assert answer == {"revoke": [0], "deferred": ""}
    (item,) = world.plans.phase("exec-1", "revoke")
    assert item["steps"] == [{"action": "revoke", "group_id": G1, "rule_ids": [old]}]
    assert later.rule_id not in str(item)


# ---------------------------------------------------------------- verify


def test_verify_visible_passes_once_the_new_rules_show(world: World) -> None:
    stale_and_new(world)
    checked = prepared(world)

    with pytest.raises(NotYetVisible, match="is not visible"):
        world.verify("visible", checked, [{"failed": False}])

    world.apply("authorize", 0, checked)
    assert world.verify("visible", checked, [{"failed": False}]) == {
        "mode": "visible",
        "checked_rules": 4,
    }


def test_verify_visible_raises_a_failed_authorize_batch_with_its_error(world: World) -> None:
    stale_and_new(world)
    checked = prepared(world)
    failed = {"batch": 0, "failed": True, "error": caught("AccessDenied", f"{G1}: denied")}

    with pytest.raises(AuthorizeFailed, match=f"^AccessDenied: {G1}: denied$"):
        world.verify("visible", checked, [failed, {"failed": False}])


def test_verify_final_checks_revokes_are_gone_and_raises_a_failed_revoke(world: World) -> None:
    old, _ = stale_and_new(world)
    checked = prepared(world)
    world.apply("authorize", 0, checked)
    world.replan_revokes(checked)

    with pytest.raises(NotYetVisible, match=f"{old} in {G1} still exists"):
        world.verify("final", checked, [{"failed": False}])
    with pytest.raises(RevokeFailed, match=r"^Throttled: slow down$"):
        world.verify(
            "final", checked, [{"failed": True, "error": caught("Throttled", "slow down")}]
        )

    world.apply("revoke", 0, checked)
    assert world.verify("final", checked, [{"failed": False}])["mode"] == "final"


def test_leftovers_name_the_stale_rules_left_and_the_traffic_lacking(world: World) -> None:
    old, _ = stale_and_new(world)
    checked = prepared(world)
    world.apply("authorize", 0, checked)
    world.replan_revokes(checked)
    (new,) = world.rules.tagged([G1], world.owner, "exec-1")
    world.rules.remove(new.rule_id or "")

    report = world.verify("leftovers", checked, error=caught("RevokeFailed", "denied"))

    assert report["leftover_rule_ids"] == [old] and report["leftovers"] == 1
    assert report["lacking"] == [f"{G1}: {G1} tcp 86-90 from 10.0.0.0-10.0.255.255"]
    assert report["cause"].startswith("stopped after RevokeFailed: denied; desired traffic not")
    assert report["cause"].endswith(f"1 stale rule(s) left {old}; the next run takes over")


def test_leftovers_count_only_the_stale_rules_still_there(world: World) -> None:
    # Given two stale rules, one of which went before the stop (revoked, by hand or a batch)
    old, _ = stale_and_new(world)
    other = world.rules.put(rule(G1, 2000), owner=world.owner).rule_id or ""
    checked = prepared(world)
    world.apply("authorize", 0, checked)
    world.replan_revokes(checked)
    world.rules.remove(other)

    report = world.verify("leftovers", checked, error=caught("RevokeFailed", "denied"))

    assert report["leftover_rule_ids"] == [old] and report["leftovers"] == 1


def test_leftovers_after_a_clean_stop_say_the_desired_rules_hold(world: World) -> None:
    stale_and_new(world)
    checked = prepared(world)
    world.apply("authorize", 0, checked)
    world.replan_revokes(checked)

    report = world.verify("leftovers", checked, results=[{"failed": True}])

    assert report["lacking"] == []
    assert "every desired rule of the changed groups is in place" in report["cause"]
    assert report["cause"].startswith("stopped after an error;")


def test_verify_refuses_an_unknown_mode(world: World) -> None:
    with pytest.raises(InvalidPlan, match="mode: Input should be 'visible', 'final' or"):
        verify_rules.verify({"mode": "later", "plan_id": "p"}, world.plans, world.rules)


def test_the_whole_run_on_fakes_converges_and_a_second_run_changes_nothing(
    world: World,
) -> None:
    stale_and_new(world)

    assert world.run()["status"] == "applied"
    assert world.rules.keys() == {r.key for r in world.desired}
    assert world.locks.items == {}
    world.execution = "exec-2"
    assert world.run(Plan((Revoke(G1, ("sgr-gone",)),)))["status"] == "unchanged"


def refresh_and_replan_revokes(
    world: World, checked: dict[str, Any], narrowed: bool
) -> tuple[list[tuple[Scope, Scope | None]], dict[str, Any], dict[str, Any]]:
    """The refresh, its authorizations and the revoke re-plan, with a planner that plans
    narrowly (returns its plan marked as from the event's read) or falls back to the full
    read."""
    asked: list[tuple[Scope, Scope | None]] = []
    plan_live = world.replan()

    def replan(scope: Scope, narrow: Scope | None = None) -> LivePlan:
        asked.append((scope, narrow))
        live = plan_live(scope, narrow)
        return replace(live, narrowed=narrow if narrowed else None)

    work = refresh_plan.refresh_plan(
        world.groups(checked, plan_id=checked["plan_id"]),
        world.plans,
        replan,
        SETTLE,
        world.owner,
        world.pacing,
    )
    for batch in work["batches"]["authorize"]:  # "Authorize new rules", as the machine does
        world.apply("authorize", batch, checked, len(work["batches"]["authorize"]))
    revokes = refresh_plan.replan_revokes(
        world.groups(checked, plan_id=checked["plan_id"], mode="revokes"),
        world.plans,
        replan,
        world.pacing,
    )
    return asked, work, revokes


EVENT = Scope(target_group_arns=frozenset({"arn:aws:elasticloadbalancing:r:1:targetgroup/w/1"}))


def test_an_event_scoped_plan_is_refreshed_narrowly_and_reads_nothing_after_the_settle(
    world: World,
) -> None:
    world.rules.add_group(G1)
    world.desired = [rule(G1, 443)]
    checked = world.check(Plan((Authorize(G1, (rule(G1, 443),)),)))
    world.lock(checked)
    put_scope(world.plans, checked["groups_key"], EVENT)

    asked, work, revokes = refresh_and_replan_revokes(world, checked, narrowed=True)

    assert work["changed"] is True
    assert asked == [(Scope(group_ids=frozenset({G1})), EVENT)]  # the refresh only
    assert revokes == {"revoke": [], "deferred": ""}


def test_a_refresh_that_fell_back_to_the_full_read_has_its_revokes_re_planned(
    world: World,
) -> None:
    # The planner's plan came from the event's read (add 80); under the locks our 443 needs
    # a new description too, so the full read decides: its tail (the description) must run.
    world.rules.add_group(G1)
    world.rules.put(rule(G1, 443, description="old"), owner=world.owner)
    world.desired = [rule(G1, 80), rule(G1, 443, description="new")]
    checked = world.check(Plan((Authorize(G1, (rule(G1, 80),)),)))
    world.lock(checked)
    put_scope(world.plans, checked["groups_key"], EVENT)

    asked, work, revokes = refresh_and_replan_revokes(world, checked, narrowed=False)

    assert [narrow for _, narrow in asked] == [EVENT, None]  # tried, then re-planned after
    assert work["summary"]["rules_modified"] == 1
    assert revokes["revoke"] == [0]


def many_stale(world: World, groups: int) -> tuple[dict[str, Any], list[str]]:
    """`groups` groups, each with an owned rule the plan replaces (authorized, not revoked)."""
    ids = []
    for index in range(groups):
        group_id = f"sg-{index:04d}"
        world.rules.add_group(group_id)
        ids.append(world.rules.put(rule(group_id, 80), owner=world.owner).rule_id or "")
        world.desired.append(rule(group_id, 81))
    checked = prepared(world)
    for batch in range(len(world.plans.parts[(checked["plan_id"], "authorize")])):
        world.apply("authorize", batch, checked)
    world.replan_revokes(checked)
    return checked, sorted(ids)


def test_leftovers_at_scale_are_checked_in_batches_and_reported_in_counts(world: World) -> None:
    # Given 45 groups whose stale rules were all left (the revoke phase was denied)
    checked, stale = many_stale(world, 45)

    report = world.verify("leftovers", checked, error=caught("RevokeFailed", "denied"))

    # Then three batches were checked and the report counts every leftover, naming ten
    assert len(world.plans.phase(checked["plan_id"], "leftovers-found")) == 3
    assert report["leftovers"] == 45 and report["leftover_rule_ids"] == stale[:10]
    assert report["cause"].endswith(
        f"45 stale rule(s) left {', '.join(stale[:10])}, ... and 35 more; the next run takes over"
    )


def test_a_batch_whose_check_failed_is_reported_as_not_checked(world: World) -> None:
    checked, _ = many_stale(world, 45)
    plan_id = checked["plan_id"]
    listed = verify_rules.verify(
        {"mode": "leftover_batches", "plan_id": plan_id}, world.plans, world.rules
    )
    for batch in listed["batches"][:-1]:  # the last item's check failed: no record
        event = {"mode": "leftover_batch", "batch": batch, "plan_id": plan_id}
        verify_rules.verify(event, world.plans, world.rules)

    event = {"mode": "leftovers", "plan_id": plan_id, "batches": 3, "error": None}
    report = verify_rules.verify(event, world.plans, world.rules)

    assert "1 of 3 batch(es) of groups could not be checked (batch 2)" in report["cause"]
    assert report["leftovers"] == 30


def test_a_failed_batch_notes_its_error_in_the_plan_store_and_the_map_keeps_its_name_only(
    world: World,
) -> None:
    # Given an authorize batch denied (the Map's Catch keeps only the error's name: its
    # Cause carries the Lambda's stack, kilobytes per failed batch)
    stale_and_new(world)
    checked = prepared(world)
    world.rules.fail("authorize", AccessDenied("UnauthorizedOperation: no"))
    with pytest.raises(AccessDenied):
        world.apply("authorize", 0, checked)
    noted = [{"batch": 0, "failed": True, "error": {"Error": "AccessDenied"}}]

    # Then the verify step names the batch's group and message, read from the plan store
    with pytest.raises(AuthorizeFailed, match=r"^AccessDenied: sg-0\d: UnauthorizedOperation: no$"):
        world.verify("visible", checked, noted)
    # and a batch that could note nothing (a timeout) is named by its error
    timed_out = [{"batch": 7, "failed": True, "error": {"Error": "States.Timeout"}}]
    with pytest.raises(AuthorizeFailed, match=r"^States.Timeout$"):
        world.verify("visible", checked, timed_out)


def locked_run(
    world: World, checked: dict[str, Any], refresh_finds: Sequence[Rule] | None = None
) -> tuple[list[tuple[list[str], Planned]], list[Scope], dict[str, Any], dict[str, Any]]:
    """The refresh, its authorizations and the revoke re-plan, with a planner under the
    locks (the fake's: the locked groups' rules against the planned desired rules, only
    planned removals; at the refresh, against `refresh_finds` when given: the account
    changed since the planner) beside the full one; what each was asked."""
    asked: list[tuple[list[str], Planned]] = []
    full: list[Scope] = []
    plan_live = world.replan()

    def replan(scope: Scope, narrow: Scope | None = None) -> LivePlan:
        full.append(scope)
        return plan_live(scope, narrow)

    def locked(groups: Sequence[str], planned: Planned) -> LivePlan:
        asked.append((list(groups), planned))
        desired = planned.desired if refresh_finds is None or len(asked) > 1 else refresh_finds
        return planner(world.rules, list(desired), world.owner)(Scope(group_ids=frozenset(groups)))

    event = world.groups(checked, plan_id=checked["plan_id"])
    work = refresh_plan.refresh_plan(
        event, world.plans, replan, SETTLE, world.owner, world.pacing, locked
    )
    for batch in work["batches"]["authorize"]:
        world.apply("authorize", batch, checked, len(work["batches"]["authorize"]))
    revokes = refresh_plan.replan_revokes(
        {**event, "mode": "revokes"}, world.plans, replan, world.pacing, locked
    )
    return asked, full, work, revokes


def test_a_planned_plan_is_refreshed_under_the_locks_and_with_nothing_to_revoke_re_plans_nothing(
    world: World,
) -> None:
    # Given a plan from the planner, which stored its desired rules (it only authorizes)
    world.rules.add_group(G1)
    world.desired = [rule(G1, 443)]
    plan = world.plan()
    checked = world.check(plan)
    put_planned(world.plans, checked["groups_key"], Planned(tuple(world.desired), frozenset()))
    world.lock(checked)
    # When the refresh and the re-plan after the settle run
    asked, full, work, revokes = locked_run(world, checked)
    # Then the refresh planned under the locks from what the planner planned, the full
    # planner was never asked, and the re-plan read nothing at all
    assert work["changed"] is True
    assert [(groups, p.desired) for groups, p in asked] == [([G1], (rule(G1, 443),))]
    assert full == []
    assert revokes == {"revoke": [], "deferred": ""}


def test_the_re_plan_after_the_settle_starts_from_the_refresh_and_its_revokes(
    world: World,
) -> None:
    # Given a plan that replaces our 80 by 443
    world.rules.add_group(G1)
    old = world.rules.put(rule(G1, 80), owner=world.owner)
    world.desired = [rule(G1, 443)]
    plan = world.plan()
    checked = world.check(plan)
    put_planned(
        world.plans,
        checked["groups_key"],
        Planned(tuple(world.desired), frozenset({old.rule_id or ""})),
    )
    world.lock(checked)
    # When the refresh finds one more rule wanted than the planner did (the account moved),
    # and the re-plan after the settle runs
    found = (rule(G1, 443), rule(G1, 8443))
    asked, full, _, revokes = locked_run(world, checked, refresh_finds=found)
    # Then the re-plan was asked with the refresh's desired rules, not the planner's, and
    # its revokes only
    assert full == []
    assert len(asked) == 2 and asked[0][1].desired == (rule(G1, 443),)
    assert asked[1][1] == Planned(found, frozenset({old.rule_id or ""}))
    assert revokes["revoke"] == [0] and not revokes["deferred"]


def test_the_re_plan_after_the_settle_may_rewrite_what_the_refresh_rewrites(world: World) -> None:
    # Given a group at its quota whose range grows in place (ModifySecurityGroupRules)
    world.rules = FakeRules(quota=1)
    world.rules.pacer = FakePacer()
    world.rules.add_group(G1)
    old = world.rules.put(rule(G1, 80, to_port=90), owner=world.owner)
    world.desired = [rule(G1, 80, to_port=100)]
    plan = world.plan()
    assert any(isinstance(s, Modify) for s in plan.steps)
    checked = world.check(plan)
    put_planned(world.plans, checked["groups_key"], Planned(tuple(world.desired), frozenset()))
    world.lock(checked)
    # When the refresh and the re-plan after the settle run
    asked, _, _, revokes = locked_run(world, checked)
    # Then the re-plan may rewrite that rule again (the refresh's revoke phase holds it)
    assert len(asked) == 2 and old.rule_id in asked[1][1].stale
    assert revokes["revoke"] == [0] and not revokes["deferred"]
