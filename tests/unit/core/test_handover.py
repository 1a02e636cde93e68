"""Adoption in the pure core: the planner's Adopt step, its checks, phases and the hand-over."""

from __future__ import annotations

from dataclasses import replace

import pytest
from pydantic import ValidationError
from sg_reconciler.app.contracts.plan import PlanDocument
from sg_reconciler.core.desired import LookupMiss
from sg_reconciler.core.handover import TargetPorts, hand_over
from sg_reconciler.core.phases import split_phases
from sg_reconciler.core.plan import Adopt, Authorize, Modify, Plan, Revoke, step_to_dict
from sg_reconciler.core.planner import make_plan
from sg_reconciler.core.quota import Limits
from sg_reconciler.core.rules import (
    ADOPTED_BY_TAG_KEY,
    OWNER_TAG_KEY,
    Peer,
    Rule,
    RuleKey,
    rule_from_dict,
)
from sg_reconciler.core.safety import check_plan
from sg_reconciler.core.traffic import Traffic
from sg_reconciler_tools.render import handover_to_dict, render_handover

OWNER = "sg-reconciler"
THEIRS = "elbv2.k8s.aws/targetGroupBinding=shared"
OURS = f"{OWNER}: load balancer targets"


BACKEND = Peer("group", "sg-backend")


def key(lo: int, hi: int, group: str = "sg-nodes") -> RuleKey:
    return RuleKey(group, "tcp", lo, hi, BACKEND)


def existing(rule_id: str, lo: int, hi: int, description: str = THEIRS, **tags: str) -> Rule:
    return Rule(key(lo, hi), description, rule_id, tuple(tags.items()))


def adopts(rule: Rule) -> bool:
    return rule.description == THEIRS


def test_an_unmanaged_rule_equal_to_a_desired_rule_is_adopted_only_when_the_policy_says_so() -> (
    None
):
    current = [existing("sgr-1", 31000, 32000), existing("sgr-2", 30000, 30001)]
    desired = [Rule(key(31000, 32000), OURS), Rule(key(10250, 10250), OURS)]
    left = make_plan(current, desired, OWNER)
    assert isinstance(left, Plan)
    assert not any(isinstance(s, Adopt) for s in left.steps)
    assert any("already allowed by unmanaged rule sgr-1" in n for n in left.notes)
    plan = make_plan(current, desired, OWNER, adopt=adopts)
    assert isinstance(plan, Plan)
    assert Adopt("sg-nodes", "sgr-1", desired[0], THEIRS) in plan.steps
    # adoption and authorization are the first phase; sgr-2 (not desired) is never touched
    phases = split_phases(plan.steps)
    assert [s for _, steps in phases.authorize for s in steps] == list(plan.steps)
    assert not any("sgr-2" in str(s) for s in plan.steps)
    # another description is never adopted, even with the same key
    other = [existing("sgr-1", 31000, 32000, description="hand-made")]
    kept = make_plan(other, desired[:1], OWNER, adopt=adopts)
    assert isinstance(kept, Plan) and kept.steps == ()


def test_the_checker_accepts_an_adoption_and_refuses_a_wrong_one() -> None:
    current = [existing("sgr-1", 31000, 32000)]
    desired = [Rule(key(31000, 32000), OURS)]
    good = Plan((Adopt("sg-nodes", "sgr-1", desired[0], THEIRS),))
    assert check_plan(good, current, desired, OWNER, Limits()) == []
    for wrong in (
        Adopt("sg-nodes", "sgr-1", Rule(key(31000, 31999), OURS), THEIRS),  # another key
        Adopt("sg-nodes", "sgr-1", desired[0], "hand-made"),  # another description
    ):
        violations = check_plan(Plan((wrong,)), current, desired, OWNER, Limits())
        assert any("adopts rule" in v.detail for v in violations)
    owned = [existing("sgr-1", 31000, 32000, **{OWNER_TAG_KEY: OWNER})]
    assert any(
        "already owned" in v.detail for v in check_plan(good, owned, desired, OWNER, Limits())
    )


def test_an_adopt_step_round_trips_through_the_plan_contract() -> None:
    step = Adopt("sg-nodes", "sgr-1", Rule(key(80, 80), OURS), THEIRS)
    doc = step_to_dict(step)
    assert doc["action"] == "adopt" and doc["previous_description"] == THEIRS
    assert PlanDocument.model_validate({"feasible": True, "steps": [doc]}).to_plan().steps == (
        step,
    )
    del doc["previous_description"]
    with pytest.raises(ValidationError, match="previous_description"):
        PlanDocument.model_validate({"feasible": True, "steps": [doc]})


def test_a_plan_and_its_notes_round_trip_through_the_plan_contract() -> None:
    rule = Rule(key(80, 80), OURS)
    plan = Plan(
        (
            Authorize("sg-nodes", (rule,)),
            Modify("sg-nodes", "sgr-2", rule),
            Adopt("sg-nodes", "sgr-1", rule, THEIRS),
            Revoke("sg-nodes", ("sgr-3", "sgr-4")),
        ),
        notes=("a note for the reader",),
    )
    assert PlanDocument.model_validate(plan.to_dict()).to_plan() == plan


def test_the_hand_over_is_ready_once_every_desired_rule_is_in_place_and_ours() -> None:
    desired = [Rule(key(31000, 32000), OURS), Rule(key(10250, 10250), OURS)]
    current = [existing("sgr-1", 31000, 32000), existing("sgr-2", 30000, 30001)]
    plan = make_plan(current, desired, OWNER, adopt=adopts)
    assert isinstance(plan, Plan)
    ports = {"sg-nodes": frozenset({("tcp", 31500), ("tcp", 10250)})}
    state = hand_over(plan, current, desired, [THEIRS], ports)
    assert not state.ready
    assert [s.rule_id for s in state.to_adopt] == ["sgr-1"]
    assert [r.key for r in state.to_authorize] == [key(10250, 10250)]
    assert [r.rule_id for r in state.left_to_owner] == ["sgr-2"]
    assert "tcp 30000-30001" in state.beyond_desired.describe()
    # after the run: sgr-1 is ours (tagged), the kubelet rule exists
    tags = {OWNER_TAG_KEY: OWNER, ADOPTED_BY_TAG_KEY: "run-1"}
    done = [
        replace(existing("sgr-1", 31000, 32000, **tags), description=OURS),
        existing("sgr-2", 30000, 30001),
        Rule(key(10250, 10250), OURS, "sgr-3", ((OWNER_TAG_KEY, OWNER),)),
    ]
    after = make_plan(done, desired, OWNER, adopt=adopts)
    assert isinstance(after, Plan) and after.steps == ()
    state = hand_over(after, done, desired, [THEIRS], ports)
    assert state.ready and [r.rule_id for r in state.adopted] == ["sgr-1"]
    # Not ready while a target's port is admitted only by a rule its owner will revoke
    # (the controller opened 0.0.0.0/0 to a NodePort that no desired rule admits)
    public = Rule(
        RuleKey("sg-nodes", "tcp", 30080, 30080, Peer("cidr4", "0.0.0.0/0")), THEIRS, "sgr-9"
    )
    reached = {"sg-nodes": frozenset({*ports["sg-nodes"], ("tcp", 30080)})}
    state = hand_over(after, [*done, public], desired, [THEIRS], reached)
    assert not state.ready and "tcp 30080 from 0.0.0.0-255.255.255.255" in state.cut.describe()
    # nor while a target of unknown group could be reached through the other tool's rules
    # (a port of theirs in its VPC); one they cannot admit is listed, not blocking
    related = LookupMiss("vpc-1", "pods", "10.0.1.9", "tcp", frozenset({30001}))
    elsewhere = LookupMiss("vpc-2", "pods", "10.9.0.9", "tcp", frozenset({30001}))
    unrelated = LookupMiss("vpc-1", "web", "10.0.1.8", "tcp", frozenset({8080}))
    vpcs = {"sg-nodes": "vpc-1"}
    state = hand_over(after, done, desired, [THEIRS], ports, [related, unrelated], vpcs)
    assert not state.ready and state.unknown_targets == ("10.0.1.9 in pods",)
    assert state.unrelated_unknown == ("10.0.1.8 in web",)
    state = hand_over(after, done, desired, [THEIRS], ports, [elsewhere, unrelated], vpcs)
    assert state.ready and state.unrelated_unknown == ("10.9.0.9 in pods", "10.0.1.8 in web")
    # nor while a run that could hand the adopted rules back is in flight
    state = hand_over(after, done, desired, [THEIRS], ports, waiting_for=["run-1 (running)"])
    assert not state.ready and state.waiting_for == ("run-1 (running)",)


def test_the_hand_over_does_not_wait_for_rules_the_other_tool_never_had() -> None:
    # The controller's rule is adopted; a static rule of ours is still to be authorized:
    # nothing the controller admits depends on it, so the controller may stop
    desired = [Rule(key(31000, 32000), OURS), Rule(key(10250, 10250), OURS)]
    tags = {OWNER_TAG_KEY: OWNER, ADOPTED_BY_TAG_KEY: "run-1"}
    done = [replace(existing("sgr-1", 31000, 32000, **tags), description=OURS)]
    plan = make_plan(done, desired, OWNER, adopt=adopts)
    assert isinstance(plan, Plan) and any(isinstance(s, Authorize) for s in plan.steps)
    ports = {"sg-nodes": frozenset({("tcp", 31500), ("tcp", 10250)})}
    state = hand_over(plan, done, desired, [THEIRS], ports)
    assert state.ready and [r.key for r in state.to_authorize] == [key(10250, 10250)]


def not_adopting() -> tuple[list[Rule], list[Rule], Plan, TargetPorts]:
    """The controller's 31000-32500 in place, ours (31000-32000) to authorize, no adoption."""
    desired = [Rule(key(31000, 32000), OURS)]
    current = [existing("sgr-1", 31000, 32500)]
    plan = make_plan(current, desired, OWNER, adopt=lambda r: False)
    assert isinstance(plan, Plan)
    return desired, current, plan, {"sg-nodes": frozenset({("tcp", 31500)})}


def test_a_misnamed_description_is_not_ready_while_targets_depend_on_unlisted_rules() -> None:
    # The policy mistypes the controller's description: its rule is not seen as the
    # controller's, so nothing reads as cut, yet it goes when the controller stops
    desired, current, plan, ports = not_adopting()
    typo = THEIRS.replace("shared", "Shared")
    state = hand_over(plan, current, desired, [typo], ports)
    assert not state.cut and not state.left_to_owner and state.unmatched == (typo,)
    assert not state.ready and state.unlisted_only.allows("sg-nodes", BACKEND, 6, 31500)
    # nor while a rule another deployment adopted sits in the group: adopting is not knowing
    theirs_adopted = Rule(
        key(10250, 10250), "kubelet", "sgr-7", ((OWNER_TAG_KEY, "other"), (ADOPTED_BY_TAG_KEY, "x"))
    )
    state = hand_over(plan, [*current, theirs_adopted], desired, [typo], ports)
    assert state.adopted and not state.ready
    # once our rule carries the flow, no target depends on an unlisted rule: ready, and the
    # description is still named (a tool with no rules here has nothing to hand over)
    ours = Rule(key(31000, 32000), OURS, "sgr-2", ((OWNER_TAG_KEY, OWNER),))
    after = make_plan([*current, ours], desired, OWNER, adopt=lambda r: False)
    assert isinstance(after, Plan)
    state = hand_over(after, [*current, ours], desired, [typo], ports)
    assert state.ready and state.unmatched == (typo,) and not state.unlisted_only
    # a second description for a tool with no rules in this account does not block: the
    # listed one is seen, and ready follows what it cuts
    state = hand_over(plan, current, desired, [THEIRS, "other-tool"], ports)
    assert state.unmatched == ("other-tool",) and not state.unlisted_only
    assert not state.ready and state.cut  # our rule is not there yet
    state = hand_over(after, [*current, ours], desired, [THEIRS, "other-tool"], ports)
    assert state.ready
    # after the hand-over, the controller's rules gone: nothing carries its description, and
    # nothing depends on an unlisted rule: ready, not blocked for ever
    state = hand_over(after, [ours], desired, [THEIRS], ports)
    assert state.ready and state.unmatched == (THEIRS,)


def test_not_ready_says_why_and_only_why() -> None:
    desired, current, plan, ports = not_adopting()
    typo = hand_over(plan, current, desired, ["elbv2.k8s.aws/x"], ports)
    text = render_handover(typo)
    assert "no rule carries the description(s) 'elbv2.k8s.aws/x' of adopt_descriptions\n" in text
    assert "targets are reached on sg-nodes tcp 31500 from sg-backend only" in text
    assert "a typo in adopt_descriptions" in text
    assert "targets are still reached" not in text and "in flight" not in text
    doc = handover_to_dict(typo)
    assert doc["unmatched_descriptions"] == ["elbv2.k8s.aws/x"]
    assert doc["unlisted_only"] == [flow(31500, 31500)]
    waiting = hand_over(plan, current, desired, [THEIRS], ports, waiting_for=["run-1 (running)"])
    text = render_handover(waiting)
    assert "an execution in flight (above) must end first" in text
    assert "targets are still reached only through the other tool's rules" in text
    assert "no rule carries" not in text


def flow(lo: int, hi: int, **peer: object) -> dict[str, object]:
    """A flow of adopt's JSON: a rule in describe-security-group-rules shape, no identity."""
    return {
        "GroupId": "sg-nodes",
        "IsEgress": False,
        "IpProtocol": "tcp",
        "FromPort": lo,
        "ToPort": hi,
        **(peer or {"ReferencedGroupInfo": {"GroupId": "sg-backend"}}),
    }


def test_adopt_json_gives_the_traffic_at_stake_as_rules_a_script_reads() -> None:
    # Given the controller's 31000-32500 and a public NodePort, nothing of ours in place yet
    desired, current, plan, _ = not_adopting()
    public = Rule(
        RuleKey("sg-nodes", "tcp", 30080, 30080, Peer("cidr4", "0.0.0.0/0")), THEIRS, "sgr-9"
    )
    ports = {"sg-nodes": frozenset({("tcp", 31500), ("tcp", 30080)})}
    state = hand_over(plan, [*current, public], desired, [THEIRS], ports)
    # When the check is printed as JSON
    doc = handover_to_dict(state)
    # Then what only the other tool's rules admit, and what targets lose with them, are
    # lists of rules, as a plan's rules are written (before: one line of text each)
    assert doc["beyond_desired"] == [
        flow(30080, 30080, CidrIpv4="0.0.0.0/0"),
        flow(32001, 32500),
    ]
    assert doc["cut"] == [flow(30080, 30080, CidrIpv4="0.0.0.0/0"), flow(31500, 31500)]
    assert doc["unlisted_only"] == []  # every description is carried: no doubt
    # and a script reads them back as rules that allow exactly that traffic
    for name, traffic in (("beyond_desired", state.beyond_desired), ("cut", state.cut)):
        assert Traffic.of(rule_from_dict(d) for d in doc[name]) == traffic, name
    ready = hand_over(plan, current, desired, [THEIRS], {"sg-nodes": frozenset()})
    assert handover_to_dict(ready)["cut"] == []


def test_adopt_json_lists_no_unlisted_traffic_when_every_description_is_carried() -> None:
    # Given a target reached on 10250 only through a hand-made rule (no description listed,
    # no owner), and every listed description carried by a rule: nothing misnamed, no doubt
    desired, current, plan, ports = not_adopting()
    kubelet = existing("sgr-8", 10250, 10250, description="kubelet, by hand")
    reached = {"sg-nodes": frozenset({*ports["sg-nodes"], ("tcp", 10250)})}
    state = hand_over(plan, [*current, kubelet], desired, [THEIRS], reached)
    assert state.unlisted_only.allows("sg-nodes", BACKEND, 6, 10250) and not state.doubtful
    # Then the JSON lists none of it: a script reads unlisted_only only as a doubt
    assert handover_to_dict(state)["unlisted_only"] == []
