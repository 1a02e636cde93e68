"""Apply a live plan to the moto world and plan again: nothing left; a new NodePort widens."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from integration.live_plan.world import (
    EXPECTED_DEFAULT_DESIRED,
    World,
    apply_plan,
    assert_safe,
    build_world,
    rows,
)
from moto import mock_aws
from sg_reconciler.adapters.inventory import AccountInventory
from sg_reconciler.app.live_plan import compute_live_plan
from sg_reconciler.core.plan import Authorize, Plan
from sg_reconciler.core.scope import Scope
from sg_reconciler.policy import parse_policy
from sg_reconciler_tools.local.moto_hooks import patch_group_rule_description

REGION = "us-east-1"
EXPECTED_DEFAULT = set(EXPECTED_DEFAULT_DESIRED)


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Any, Any]]:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    with mock_aws():
        yield boto3.client("ec2", region_name=REGION), boto3.client("elbv2", region_name=REGION)


@pytest.fixture
def world(aws: tuple[Any, Any]) -> World:
    return build_world(*aws)


def test_applying_the_plan_converges(aws: tuple[Any, Any], world: World) -> None:
    ec2, elbv2 = aws
    policy = parse_policy("")
    apply_plan(
        ec2,
        assert_safe(compute_live_plan(AccountInventory(ec2, elbv2, policy), policy), policy),
        policy.owner,
    )
    # moto 5.2.5 drops the description of group-referencing rules on describe (EC2 keeps
    # it); without the local runtime's fix every rule would look like it needs a relabel.
    with patch_group_rule_description():
        again = compute_live_plan(AccountInventory(ec2, elbv2, policy), policy)
    assert isinstance(again.result, Plan) and again.result.steps == ()
    assert rows([r for r in again.current if r.owned_by(policy.owner)], world) == EXPECTED_DEFAULT

    # When a new NodePort appears (LBC issue #3639), the next plan widens without a gap.
    new_tg = elbv2.create_target_group(
        Name="web-new", Protocol="TCP", Port=32500, VpcId=world.vpc_id, TargetType="instance"
    )["TargetGroups"][0]["TargetGroupArn"]
    elbv2.create_listener(
        LoadBalancerArn=world.load_balancers["web"],
        Protocol="TCP",
        Port=8443,
        DefaultActions=[{"Type": "forward", "TargetGroupArn": new_tg}],
    )
    elbv2.register_targets(TargetGroupArn=new_tg, Targets=[{"Id": world.instances["b1"]}])
    scope = Scope(target_group_arns=frozenset({new_tg}))
    with patch_group_rule_description():
        grown = compute_live_plan(AccountInventory(ec2, elbv2, policy), policy, scope)
    # The groups in play are those holding rules from the target group's sources (nlb_web
    # and the shared backend group); only nodes_b changes.
    g = world.groups
    assert grown.groups == sorted(g[n] for n in ("nodes_a", "nodes_b", "extra", "pods"))
    plan = assert_safe(grown, policy)
    assert [(type(s).__name__, s.group_id) for s in plan.steps] == [("Authorize", g["nodes_b"])]
    assert isinstance(plan.steps[0], Authorize)
    assert rows(list(plan.steps[0].rules), world) == {
        ("nodes_b", "tcp", 32500, 32500, peer) for peer in ("nlb_web", "backend")
    }
