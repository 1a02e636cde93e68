"""The brake with memory (issue 19, item 4) on the real ASL: load balancers leave the
selection one at a time (the LBC strips a tag it did not set, one Service reconcile at a
time). Each plan takes away a small share; together, within the brake's window, they take
away more than the policy's share of the rules owned at the window's start, and the plan
that crosses it is held until an operator releases it (docs/invariants.md, 12 and 14).
"""

from __future__ import annotations

import json
from typing import Any

from evidence.evidence_kit import live_plan
from sg_reconciler.adapters.deployment import BrakeReleases
from sg_reconciler.core.rules import DEFAULT_OWNER
from sg_reconciler_tools.demo.play import reconcile
from sg_reconciler_tools.demo.world import DemoWorld
from sg_reconciler_tools.local import InvariantMonitor
from workflow.world_moves import set_policy

MANAGED = "sg-reconciler/managed"
EXTRA = 4  # load balancers beside the demo's NLB, each with a group of its own


def add_load_balancer(world: DemoWorld, index: int) -> tuple[str, str]:
    """A managed NLB with a security group of its own and one NodePort Service on every
    node; returns its ARN and its group."""
    ec2, elbv2 = world.runtime.clients.ec2, world.runtime.clients.elbv2
    name = f"k8s-extra-{index}"
    group = ec2.create_security_group(GroupName=name, Description=name, VpcId=world.vpc_id)
    lb = elbv2.create_load_balancer(
        Name=name,
        Type="network",
        Scheme="internet-facing",
        Subnets=world.subnet_ids,
        SecurityGroups=[group["GroupId"]],
        Tags=[{"Key": MANAGED, "Value": "true"}],
    )["LoadBalancers"][0]["LoadBalancerArn"]
    port = 31100 + index
    tg = elbv2.create_target_group(
        Name=name,
        Protocol="TCP",
        Port=port,
        VpcId=world.vpc_id,
        TargetType="instance",
        HealthCheckPort="traffic-port",
        HealthCheckProtocol="TCP",
    )["TargetGroups"][0]["TargetGroupArn"]
    elbv2.register_targets(
        TargetGroupArn=tg, Targets=[{"Id": i, "Port": port} for i in world.instances]
    )
    elbv2.create_listener(
        LoadBalancerArn=lb,
        Protocol="TCP",
        Port=80,
        DefaultActions=[{"Type": "forward", "TargetGroupArn": tg}],
    )
    return lb, str(group["GroupId"])


def owned_from(world: DemoWorld, peer: str) -> int:
    return sum(
        1
        for r in world.node_rules()
        if r.owned_by(DEFAULT_OWNER) and r.key.peer.kind == "group" and r.key.peer.value == peer
    )


def test_load_balancers_leaving_one_at_a_time_are_held_once_together_they_cross_the_share(
    world: DemoWorld,
) -> None:
    # Given the demo NLB and four more, each admitted by its own group (2 node groups each)
    runtime = world.runtime
    policy = {
        **json.loads(world.policy),
        "brake": {"max_revoke_percent": 50, "min_revokes": 4},
    }
    del policy["rule_source"]  # each load balancer's own groups are the sources
    set_policy(world, json.dumps(policy))
    extra = [add_load_balancer(world, i) for i in range(EXTRA)]
    assert (reconcile(world) or {}).get("status") == "SUCCEEDED"
    owned_at_start = sum(1 for r in world.node_rules() if r.owned_by(DEFAULT_OWNER))
    assert owned_at_start == 12 and all(owned_from(world, g) == 2 for _, g in extra)
    elbv2 = runtime.clients.elbv2
    releases = BrakeReleases(runtime.clients.dynamodb, runtime.ref("LockTable"))
    outcomes: list[Any] = []

    # NEW: only the demo NLB's rules stay; every state must keep them (1) and add nothing (2)
    for lb, _ in extra:
        elbv2.remove_tags(ResourceArns=[lb], TagKeys=[MANAGED])
    final_desired = live_plan(world).desired
    for lb, _ in extra:
        elbv2.add_tags(ResourceArns=[lb], Tags=[{"Key": MANAGED, "Value": "true"}])
    with InvariantMonitor(
        runtime.clients.ec2, world.node_groups.values(), None, final_desired
    ) as watch:
        # When the load balancers leave the selection one at a time, a run after each
        for lb, _ in extra:
            elbv2.remove_tags(ResourceArns=[lb], TagKeys=[MANAGED])
            outcomes.append((reconcile(world) or {}).get("status"))
        left = [owned_from(world, g) for _, g in extra]
        held = releases.held()
        # And an operator releases exactly the held set
        released = releases.release(held[0].fingerprint, "test") if held else None
        outcomes.append((reconcile(world) or {}).get("status"))
    # Then the first three went (2, 4, 6 of the 12 rules owned at the window's start: 50%),
    # the fourth (8 of 12, 67%) is held with a reason naming the window, each plan alone
    # taking away 2 rules (at most a third of what was left)
    assert outcomes[:3] == ["SUCCEEDED"] * 3
    assert outcomes[3] is None  # held: the plan had nothing else to do, no execution
    assert left == [0, 0, 0, 2]
    assert len(held) == 1 and "8 of the 12 rules owned in the brake's window" in held[0].reason
    # And after the release the held revocations went, recorded as a release
    assert released is not None and outcomes[4] == "SUCCEEDED"
    assert all(owned_from(world, g) == 0 for _, g in extra)
    assert watch.violations == []
