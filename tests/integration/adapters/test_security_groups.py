"""The EC2 rules adapter on moto: idempotent writes, tags, ownership and typed errors."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import EndpointConnectionError, ReadTimeoutError
from moto import mock_aws
from sg_reconciler.adapters import pacing
from sg_reconciler.adapters.pacing import Pacer
from sg_reconciler.adapters.security_groups import SecurityGroupRules, typed_aws_errors
from sg_reconciler.core.guard import call_would_lose
from sg_reconciler.core.pacing import pacing_for
from sg_reconciler.core.plan import Adopt
from sg_reconciler.core.rules import OWNER_TAG_KEY, PLAN_TAG_KEY, Rule, rule_from_dict
from sg_reconciler.errors import (
    GroupNotFound,
    NotOwned,
    RuleChanged,
    TransientAwsError,
    WouldLoseTraffic,
)
from sg_reconciler_tools.local import moto_hooks
from sg_reconciler_tools.local.faults import Fault, FaultInjector

OWNER = "sg-reconciler"


@pytest.fixture
def ec2() -> Iterator[Any]:
    with mock_aws():
        yield boto3.client("ec2", region_name="eu-west-1")


@pytest.fixture
def groups(ec2: Any) -> tuple[str, str]:
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    node = ec2.create_security_group(GroupName="nodes", Description="nodes", VpcId=vpc)["GroupId"]
    lb = ec2.create_security_group(GroupName="nlb", Description="nlb", VpcId=vpc)["GroupId"]
    return node, lb


def rule(group: str, peer: str, lo: int, hi: int, description: str = "") -> Rule:
    return rule_from_dict(
        {
            "GroupId": group,
            "IpProtocol": "tcp",
            "FromPort": lo,
            "ToPort": hi,
            "ReferencedGroupInfo": {"GroupId": peer},
            "Description": description,
        }
    )


def test_authorize_tags_new_rules_and_returns_existing_ids(
    ec2: Any, groups: tuple[str, str]
) -> None:
    node, lb = groups
    sg = SecurityGroupRules(ec2)
    first = sg.authorize(node, [rule(node, lb, 31000, 32000)], OWNER, "plan-1")
    again = sg.authorize(
        node, [rule(node, lb, 31000, 32000), rule(node, lb, 8080, 8080)], OWNER, "plan-2"
    )
    assert len(first) == 1 and len(again) == 2
    assert set(first.values()) < set(again.values())  # the existing rule kept its id
    described = {r.rule_id: r for r in sg.describe([node])}
    created = described[next(iter(first.values()))]
    assert created.tag(OWNER_TAG_KEY) == OWNER and created.tag(PLAN_TAG_KEY) == "plan-1"
    assert [r.rule_id for r in sg.tagged([node], OWNER, "plan-2")] == [
        i for i in again.values() if i not in first.values()
    ]


def test_revoke_is_idempotent_and_refuses_unowned_rules(ec2: Any, groups: tuple[str, str]) -> None:
    node, lb = groups
    sg = SecurityGroupRules(ec2)
    ids = sg.authorize(node, [rule(node, lb, 80, 80)], OWNER, "plan-1")
    rule_id = next(iter(ids.values()))
    assert sg.revoke(node, [rule_id], OWNER) == [rule_id]
    assert sg.revoke(node, [rule_id], OWNER) == []  # gone already: success, nothing to do
    ec2.authorize_security_group_ingress(
        GroupId=node,
        IpPermissions=[
            {
                "IpProtocol": "tcp",
                "FromPort": 22,
                "ToPort": 22,
                "IpRanges": [{"CidrIp": "10.0.0.0/16"}],
            }
        ],
    )
    unowned = next(r.rule_id for r in sg.describe([node]) if r.key.from_port == 22)
    assert unowned is not None
    with pytest.raises(NotOwned):
        sg.revoke(node, [unowned], OWNER)
    assert any(r.rule_id == unowned for r in sg.describe([node]))


def test_modify_rewrites_an_owned_rule_in_place(ec2: Any, groups: tuple[str, str]) -> None:
    node, lb = groups
    sg = SecurityGroupRules(ec2)
    rule_id = next(iter(sg.authorize(node, [rule(node, lb, 31000, 32000)], OWNER, "p").values()))
    sg.modify(node, rule_id, rule(node, lb, 31000, 32500, "wider"), OWNER)
    (now,) = sg.describe([node])
    assert now.rule_id == rule_id
    assert (now.key.from_port, now.key.to_port, now.description) == (31000, 32500, "wider")
    assert now.owned_by(OWNER)


def test_a_missing_group_is_a_typed_error(ec2: Any, groups: tuple[str, str]) -> None:
    _, lb = groups
    sg = SecurityGroupRules(ec2)
    with pytest.raises(GroupNotFound):
        sg.authorize("sg-0000000000000dead", [rule("sg-0000000000000dead", lb, 80, 80)], OWNER, "p")


@pytest.mark.parametrize(
    "error",
    [
        EndpointConnectionError(endpoint_url="https://ec2.eu-west-1.amazonaws.com"),
        ReadTimeoutError(endpoint_url="https://ec2.eu-west-1.amazonaws.com"),
    ],
)
def test_a_lost_connection_is_a_transient_error_the_state_machine_retries(error: Exception) -> None:
    with pytest.raises(TransientAwsError), typed_aws_errors():
        raise error


@pytest.fixture
def described_as_aws() -> Iterator[None]:
    """moto alone prints no description on group-referencing rules; AWS does."""
    with moto_hooks.patch_group_rule_description():
        yield


def their_rule(ec2: Any, node: str, lb: str, description: str) -> str:
    pair: dict[str, str] = {"GroupId": lb}
    if description:
        pair["Description"] = description
    return str(
        ec2.authorize_security_group_ingress(
            GroupId=node,
            IpPermissions=[
                {"IpProtocol": "tcp", "FromPort": 80, "ToPort": 80, "UserIdGroupPairs": [pair]}
            ],
        )["SecurityGroupRules"][0]["SecurityGroupRuleId"]
    )


@pytest.mark.parametrize("was", ["theirs=shared", ""], ids=["described", "no description"])
def test_adopt_tags_then_rewrites_in_place_is_idempotent_and_hand_back_restores_it(
    ec2: Any, groups: tuple[str, str], described_as_aws: None, was: str
) -> None:
    node, lb = groups
    theirs = their_rule(ec2, node, lb, was)
    rules = SecurityGroupRules(ec2)
    before = rules.describe([node])
    step = Adopt(node, theirs, rule(node, lb, 80, 80, "sg-reconciler: load balancer targets"), was)
    for _ in range(2):  # a retried step changes nothing more
        rules.adopt(node, step, OWNER, "plan-1")
    [adopted] = rules.describe([node])
    assert adopted.rule_id == theirs and adopted.key == step.rule.key
    assert adopted.description == step.rule.description and adopted.owned_by(OWNER)
    assert rules.hand_back([node], OWNER, "plan-2") == []  # another execution's: untouched
    assert rules.hand_back([node], OWNER, "plan-1") == [theirs]
    assert rules.describe([node]) == before


def test_adopting_a_rule_that_changed_or_that_another_deployment_owns_is_refused(
    ec2: Any, groups: tuple[str, str], described_as_aws: None
) -> None:
    node, lb = groups
    rules = SecurityGroupRules(ec2)
    ids = rules.authorize(node, [rule(node, lb, 80, 80)], "someone-else", "p")
    [rule_id] = ids.values()
    ours = rule(node, lb, 80, 80, "ours")
    with pytest.raises(NotOwned, match="'someone-else' owns it"):
        rules.adopt(node, Adopt(node, rule_id, ours, ""), OWNER, "plan-1")
    with pytest.raises(RuleChanged, match="now"):
        rules.adopt(node, Adopt(node, rule_id, rule(node, lb, 81, 81), ""), OWNER, "plan-1")
    with pytest.raises(RuleChanged, match="gone"):
        rules.adopt(node, Adopt(node, "sgr-0000000000000000", ours, ""), OWNER, "plan-1")
    # a rule whose description changed since the plan is not the planned rule any more
    rules.revoke(node, [rule_id], "someone-else")
    theirs = their_rule(ec2, node, lb, "hand-made, keep")
    with pytest.raises(RuleChanged, match="now described 'hand-made, keep'"):
        rules.adopt(node, Adopt(node, theirs, ours, "theirs=shared"), OWNER, "plan-1")
    assert not rules.describe([node])[0].tags  # untouched


def test_a_retried_revoke_is_guarded_again_after_its_backoff(
    ec2: Any, groups: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given our old rule 31000-32000 and the new 31000-32500 that replaces it
    node, lb = groups
    sg = SecurityGroupRules(ec2, Pacer(pacing_for(1000)))
    (old,) = sg.authorize(node, [rule(node, lb, 31000, 32000)], OWNER, "p0").values()
    (new,) = sg.authorize(node, [rule(node, lb, 31000, 32500)], OWNER, "p1").values()
    desired = [rule(node, lb, 31000, 32500)]
    guarded: list[int] = []

    def guard(live: list[Rule]) -> None:
        guarded.append(len(live))
        problems = call_would_lose(live, {old}, (), desired)
        if problems:
            raise WouldLoseTraffic("; ".join(problems))

    # When the revoke of the old rule is throttled and, during its backoff, someone revokes
    # the new rule by hand
    fault = Fault("ec2", "RevokeSecurityGroupIngress", "RequestLimitExceeded")
    with FaultInjector(fault) as faults:
        moved: list[float] = []

        def backoff(seconds: float) -> None:
            if faults.fired and not moved:
                moved.append(seconds)
                ec2.revoke_security_group_ingress(GroupId=node, SecurityGroupRuleIds=[new])

        monkeypatch.setattr(pacing, "sleep", backoff)
        with pytest.raises(WouldLoseTraffic):
            sg.revoke(node, [old], OWNER, guard)
    # Then the retry read the group again, its guard saw the change and no call was made:
    # the old rule still admits the traffic
    assert moved and guarded == [2, 1]
    assert faults.calls("ec2", "RevokeSecurityGroupIngress") == 2  # ours (throttled), theirs
    assert [r.rule_id for r in sg.describe([node])] == [old]
