"""A pod's interface that cannot be found never reads as "nobody needs this port".

IP targets are found through their interface; a pod on a delegated prefix, an interface
being replaced or a lookup that misses leaves the target without a security group. Before,
the rules it needed were revoked as stale; now the revokes that could take away its ports
in its VPC are held, with the target named.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from integration.live_plan.world import POD_IPS, World, build_world
from moto import mock_aws
from sg_reconciler.adapters.inventory import AccountInventory
from sg_reconciler.adapters.security_groups import SecurityGroupRules
from sg_reconciler.app.live_plan import compute_live_plan
from sg_reconciler.core.plan import Authorize, Modify, Plan, Revoke
from sg_reconciler.policy import parse_policy

REGION = "us-east-1"


@pytest.fixture
def aws() -> Iterator[tuple[Any, Any]]:
    with pytest.MonkeyPatch.context() as env:
        env.setenv("AWS_ACCESS_KEY_ID", "testing")
        env.setenv("AWS_SECRET_ACCESS_KEY", "testing")
        with mock_aws():
            yield boto3.client("ec2", region_name=REGION), boto3.client("elbv2", region_name=REGION)


def converge(ec2: Any, elbv2: Any) -> None:
    policy = parse_policy("")
    plan = compute_live_plan(AccountInventory(ec2, elbv2, policy), policy).result
    assert isinstance(plan, Plan)
    rules = SecurityGroupRules(ec2)
    for step in plan.steps:
        if isinstance(step, Authorize):
            rules.authorize(step.group_id, step.rules, policy.owner, "converge")
        elif isinstance(step, Revoke):
            rules.revoke(step.group_id, step.rule_ids, policy.owner)
        elif isinstance(step, Modify):
            rules.modify(step.group_id, step.rule_id, step.rule, policy.owner)


def test_pods_whose_interfaces_are_not_found_keep_their_rules(aws: tuple[Any, Any]) -> None:
    # Given a converged world whose dns target group has two pod addresses in `pods`
    ec2, elbv2 = aws
    world: World = build_world(ec2, elbv2)
    converge(ec2, elbv2)
    pods = world.groups["pods"]
    owned = {r.rule_id for r in SecurityGroupRules(ec2).describe([pods]) if r.rule_id}
    # When both pod interfaces can no longer be found (the targets stay registered)
    for eni in world.pod_enis:
        ec2.delete_network_interface(NetworkInterfaceId=eni)
    parsed = parse_policy("")
    live = compute_live_plan(AccountInventory(ec2, elbv2, parsed), parsed)
    # Then nothing of `pods` is revoked (before: its dns rules were revoked as stale), and
    # the plan says which targets were not found and how to release it if that is wanted
    assert isinstance(live.result, Plan)
    revoked = {i for s in live.result.steps if isinstance(s, Revoke) for i in s.rule_ids}
    assert not revoked & owned
    assert live.brake is not None and "was not found" in live.result.held
    assert all(ip in live.result.held for ip in POD_IPS), live.result.held
    assert live.brake.fingerprint in live.result.notes[-1]
