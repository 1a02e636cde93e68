"""compute_live_plan on the moto world (read only): desired rules, a safe plan, scope, refusal."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from integration.live_plan.world import (
    CLUSTER_TAG,
    EXPECTED_DEFAULT_DESIRED,
    World,
    assert_safe,
    build_world,
    rows,
)
from moto import mock_aws
from sg_reconciler.adapters.inventory import AccountInventory
from sg_reconciler.app.live_plan import compute_live_plan
from sg_reconciler.core.plan import Plan, Revoke
from sg_reconciler.core.scope import Scope
from sg_reconciler.policy import parse_policy

REGION = "us-east-1"
EXPECTED_DEFAULT = set(EXPECTED_DEFAULT_DESIRED)
BACKEND_TAGGED = f"""
rule_source: {{kind: backend_group, group_id: %s}}
destination: {{kind: tagged_groups, tag_key: {CLUSTER_TAG}}}
"""


@pytest.fixture(scope="module")
def aws() -> Iterator[tuple[Any, Any]]:
    """One moto account per module: these tests only read it."""
    with pytest.MonkeyPatch.context() as env:
        env.setenv("AWS_ACCESS_KEY_ID", "testing")
        env.setenv("AWS_SECRET_ACCESS_KEY", "testing")
        with mock_aws():
            yield boto3.client("ec2", region_name=REGION), boto3.client("elbv2", region_name=REGION)


@pytest.fixture(scope="module")
def world(aws: tuple[Any, Any]) -> World:
    return build_world(*aws)


def test_desired_rules_and_a_make_before_break_plan(aws: tuple[Any, Any], world: World) -> None:
    ec2, elbv2 = aws
    policy = parse_policy("")
    live = compute_live_plan(AccountInventory(ec2, elbv2, policy), policy)
    assert rows(live.desired, world) == EXPECTED_DEFAULT
    g = world.groups
    assert live.groups == sorted(
        g[name] for name in ("nodes_a", "nodes_b", "extra", "pods", "orphan")
    )
    plan = assert_safe(live, policy)
    kinds = [type(step).__name__ for step in plan.steps]
    assert kinds == sorted(kinds)  # every Authorize before any Revoke
    revoked = {i for s in plan.steps if isinstance(s, Revoke) for i in s.rule_ids}
    assert revoked == {world.stale_rule_id, world.orphan_rule_id}  # never the SSH rule
    assert any("legacy has no security groups" in note for note in live.notes)
    document = live.to_dict()
    assert document["feasible"] is True and len(document["desired"]) == len(EXPECTED_DEFAULT)
    assert all("SecurityGroupRuleId" not in rule for rule in document["desired"])


def test_backend_group_and_tagged_destination(aws: tuple[Any, Any], world: World) -> None:
    ec2, elbv2 = aws
    policy = parse_policy(BACKEND_TAGGED % world.groups["backend"])
    live = compute_live_plan(AccountInventory(ec2, elbv2, policy), policy)
    assert rows(live.desired, world) == {
        ("nodes_a", "tcp", 31080, 31081, "backend"),
        ("nodes_a", "tcp", 31443, 31443, "backend"),
        ("nodes_b", "tcp", 31080, 31080, "backend"),
        ("pods", "tcp", 53, 53, "backend"),
        ("pods", "udp", 53, 53, "backend"),
        ("pods", "tcp", 8080, 8080, "backend"),
    }
    assert world.groups["extra"] not in live.groups  # untagged: no rules there
    assert_safe(live, policy)


def test_scope_restricts_the_plan(aws: tuple[Any, Any], world: World) -> None:
    ec2, elbv2 = aws
    policy = parse_policy("")
    g = world.groups
    only_b = compute_live_plan(
        AccountInventory(ec2, elbv2, policy), policy, Scope(group_ids=frozenset({g["nodes_b"]}))
    )
    assert only_b.groups == [g["nodes_b"]]
    assert {r.group_id for r in only_b.desired + only_b.current} == {g["nodes_b"]}
    assert_safe(only_b, policy)
    gone = Scope(load_balancer_arns=frozenset({world.load_balancers["web"] + "-deleted"}))
    assert (
        compute_live_plan(AccountInventory(ec2, elbv2, policy), policy, gone).groups
        == compute_live_plan(AccountInventory(ec2, elbv2, policy), policy, None).groups
    )  # an unknown load balancer widens to a full pass


def test_a_refusal_when_the_quota_has_no_room(aws: tuple[Any, Any], world: World) -> None:
    ec2, elbv2 = aws
    policy = parse_policy("quota: 3")
    live = compute_live_plan(AccountInventory(ec2, elbv2, policy), policy)
    assert not isinstance(live.result, Plan)
    assert "quota" in live.result.reason
    assert live.to_dict()["feasible"] is False
