"""The desired state of an EKS-shaped account read live: two clusters (two bindings), NLBs
without security groups (client IP preservation on and off, dualstack), pods on secondary
addresses, delegated prefixes and IPv6 addresses, and the LBC's choice of node group."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from integration.live_plan.clusters_world import (
    CLUSTER_B,
    PREFIX_POD,
    ClustersWorld,
    build_clusters_world,
)
from moto import mock_aws
from sg_reconciler.adapters.inventory import AccountInventory
from sg_reconciler.app.live_plan import LivePlan, compute_live_plan
from sg_reconciler.core.plan import Authorize, Plan, Refusal
from sg_reconciler.policy import parse_policy
from sg_reconciler_tools.cli import main

REGION = "us-east-1"
Row = tuple[str, int, int, str]  # (group role, from port, to port, peer role or CIDR)


@pytest.fixture
def world() -> Iterator[tuple[Any, Any, ClustersWorld]]:
    with mock_aws():  # with the EC2 fidelity hooks: conftest.py
        ec2 = boto3.client("ec2", region_name=REGION)
        elbv2 = boto3.client("elbv2", region_name=REGION)
        yield ec2, elbv2, build_clusters_world(ec2, elbv2)


def plan(ec2: Any, elbv2: Any, text: str) -> LivePlan:
    parsed = parse_policy(text)
    return compute_live_plan(AccountInventory(ec2, elbv2, parsed), parsed)


def rows(live: LivePlan, world: ClustersWorld) -> set[Row]:
    return {
        (world.role(r.group_id), r.key.from_port, r.key.to_port, world.role(r.key.peer.value))
        for r in live.desired
        if r.key.protocol == "tcp"
    }


def test_two_clusters_addressed_nlbs_and_every_kind_of_pod_address(
    world: tuple[Any, Any, ClustersWorld],
) -> None:
    ec2, elbv2, w = world
    live = plan(ec2, elbv2, w.policy())
    subnets = {"10.0.1.0/24", "10.0.2.0/24"}
    assert rows(live, w) == {
        # binding a: its backend group to its nodes
        ("nodes_a", 30080, 30080, "back_a"),
        # binding b, the LBC's choice: b1's cluster-tagged group, not extra_b; the pods on a
        # secondary address and on a delegated prefix both live in pods_b
        ("nodes_b", 30090, 30090, "back_b"),
        ("pods_b", 8080, 8080, "back_b"),
        # binding legacy, instance targets (client IP preserved): the VPC's clients on the
        # traffic port, the NLB's subnets for the health check on the same port
        ("nodes_a", 30500, 30500, "10.0.0.0/16"),
        *(("nodes_a", 30500, 30500, cidr) for cidr in subnets),
        # binding legacy, ip target without preservation: the NLB's subnets only
        *(("pods_b", 9000, 9000, cidr) for cidr in subnets),
        # the dualstack NLB reaches an IPv6 target group's pod from its IPv6 subnet only
        ("pods_b", 9100, 9100, w.subnet_ipv6),
    }
    assert not any(w.role(r.group_id) == "extra_b" for r in live.desired)
    # b_bad carries two groups tagged for cluster b: the LBC's error, and its ports are held
    assert any(f"expected exactly one security group tagged {CLUSTER_B}" in n for n in live.notes)
    assert live.state is not None
    assert {m.target_id for m in live.state.lookup_misses} == {w.instances["b_bad"]}
    prefix_rules = [
        r for r in live.desired if r.key.from_port == 8080 and w.role(r.group_id) == "pods_b"
    ]
    assert prefix_rules and "target group b-pods (b-web)" in live.needed_by(prefix_rules[0])


def test_without_the_prefix_lookup_a_pod_on_a_delegated_prefix_is_a_lookup_miss(
    world: tuple[Any, Any, ClustersWorld],
) -> None:
    ec2, elbv2, w = world
    elbv2.deregister_targets(
        TargetGroupArn=elbv2.describe_target_groups(Names=["b-pods"])["TargetGroups"][0][
            "TargetGroupArn"
        ],
        Targets=[{"Id": PREFIX_POD}],
    )
    elbv2.register_targets(
        TargetGroupArn=elbv2.describe_target_groups(Names=["b-pods"])["TargetGroups"][0][
            "TargetGroupArn"
        ],
        Targets=[{"Id": "10.0.3.200"}],  # in the VPC, in no subnet: no interface can hold it
    )
    live = plan(ec2, elbv2, w.policy())
    assert live.state is not None
    assert "10.0.3.200" in {m.target_id for m in live.state.lookup_misses}


def test_bindings_that_disagree_on_one_flow_refuse_the_plan_naming_both(
    world: tuple[Any, Any, ClustersWorld],
) -> None:
    ec2, elbv2, w = world
    text = w.policy() + (
        "  - name: a-strict\n"
        "    load_balancers: {tags: {cluster: a}}\n"
        f"    rule_source: {{kind: backend_group, group_id: {w.groups['back_a']}}}\n"
        "    rule_budget: 1\n"
    )
    gone = "sg-0000000000000dead"
    text += f"static_rules:\n  - {{group_id: {gone}, from_port: 22, to_port: 22, cidr_ipv4: 10.0.0.0/8}}\n"
    live = plan(ec2, elbv2, text)
    assert isinstance(live.result, Refusal)
    assert "bindings 'a' and 'a-strict'" in live.result.reason
    assert w.groups["nodes_a"] in live.result.reason
    # the refusal keeps what the desired state noted: a static rule's missing group, once
    assert [n for n in live.notes if gone in n] == [
        f"{gone} (static rule group) does not exist (deleted?): left out of the plan"
    ]
    # A deployed run (partial) leaves that group alone, authorizes the others' rules and
    # holds every revoke until the bindings agree
    parsed = parse_policy(text)
    live = compute_live_plan(AccountInventory(ec2, elbv2, parsed), parsed, partial=True)
    assert isinstance(live.result, Plan)
    assert any("bindings 'a' and 'a-strict'" in r for r in live.result.refused)
    assert w.groups["nodes_a"] not in {s.group_id for s in live.result.steps}
    assert all(isinstance(s, Authorize) for s in live.result.steps) and live.result.steps


def test_plan_live_names_each_group_and_what_needs_each_rule(
    world: tuple[Any, Any, ClustersWorld],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _, _, w = world
    policy = tmp_path / "policy.yaml"
    policy.write_text(w.policy())
    code = main(["plan", "--live", "--policy", str(policy), "--region", REGION])
    table, _ = capsys.readouterr()
    assert code == 0, table
    assert "pods of cluster b" in table  # the Name tag of pods_b
    assert "target group b-pods (b-web)" in table
    assert "target group legacy-ip (legacy)" in table
    code = main(["plan", "--live", "--policy", str(policy), "--region", REGION, "--output", "json"])
    doc = json.loads(capsys.readouterr()[0])
    assert doc["group_names"][w.groups["pods_b"]] == "pods of cluster b"
    needs = dict(
        zip((json.dumps(r) for r in doc["desired"]), doc["desired_needed_by"], strict=True)
    )
    assert any("target group dual-ip (dual)" in n for n in needs.values())
