"""Revokes under the locks guarded by fresh reads of exactly the target groups whose traffic
they could remove, chosen from the inventory index (docs/architecture.md,
"Reads"), on the real ASL.

The demo cluster is the AWS Load Balancer Controller's layout: every target group behind one
shared backend group, so every target group's load balancer admits the backend's rules. A
stale rule of ours from the backend on a port no target uses is revoked after reading only
the target groups the index says could use that port in that group; an index entry the fresh
read contradicts, or one older than the verification period, holds the revoke and is
repaired, and the next run revokes. The invariant monitor sees no loss throughout."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from typing import Any

from sg_reconciler.adapters.index_table import IndexTable
from sg_reconciler.app.indexed_plan import load_view
from sg_reconciler.core.index_events import Version
from sg_reconciler.core.pacing import DEFAULT_VERIFICATION_PERIOD_SECONDS
from sg_reconciler.core.rules import OWNER_TAG_KEY
from sg_reconciler_tools.demo.play import reconcile
from sg_reconciler_tools.demo.world import DemoWorld, scheduled_event
from workflow.test_inventory_index import watched
from workflow.test_locked_reads import run


def index(world: DemoWorld) -> IndexTable:
    return IndexTable(world.runtime.clients.dynamodb, world.runtime.ref("IndexTable"))


def more_services(world: DemoWorld, count: int) -> None:
    """`count` more Services of the demo cluster (NodePorts inside its range, every node)."""
    for _ in range(count):
        world.add_service(31100 + len(world.target_groups))


def port_target_group(world: DemoWorld, port: int, targets: list[tuple[str, int]]) -> str:
    """A target group on `port` behind the demo's load balancer, its targets on their own
    ports (the listing names `port`: a candidate for a revoke of it)."""
    elbv2 = world.runtime.clients.elbv2
    tg = elbv2.create_target_group(
        Name=f"k8s-demo-port{port}", Protocol="TCP", Port=port, VpcId=world.vpc_id
    )["TargetGroups"][0]["TargetGroupArn"]
    if targets:
        elbv2.register_targets(
            TargetGroupArn=tg, Targets=[{"Id": i, "Port": p} for i, p in targets]
        )
    elbv2.create_listener(
        LoadBalancerArn=world.load_balancer_arn,
        Protocol="TCP",
        Port=9000 + port % 1000,
        DefaultActions=[{"Type": "forward", "TargetGroupArn": tg}],
    )
    return str(tg)


def stale_rule(world: DemoWorld, port: int) -> str:
    """A rule of ours from the backend on `port` in nodes-a that nothing needs."""
    return str(
        world.runtime.clients.ec2.authorize_security_group_ingress(
            GroupId=world.node_groups["nodes-a"],
            IpPermissions=[
                {
                    "IpProtocol": "tcp",
                    "FromPort": port,
                    "ToPort": port,
                    "UserIdGroupPairs": [{"GroupId": world.backend_group}],
                }
            ],
            TagSpecifications=[
                {
                    "ResourceType": "security-group-rule",
                    "Tags": [{"Key": OWNER_TAG_KEY, "Value": "sg-reconciler"}],
                }
            ],
        )["SecurityGroupRules"][0]["SecurityGroupRuleId"]
    )


def node_in(world: DemoWorld, name: str) -> str:
    group = world.node_groups[name]
    for instance in world.instances:
        (reservation,) = world.runtime.clients.ec2.describe_instances(InstanceIds=[instance])[
            "Reservations"
        ]
        if group in {g["GroupId"] for g in reservation["Instances"][0]["SecurityGroups"]}:
            return instance
    raise AssertionError(f"no instance in {name}")


def at_refresh(world: DemoWorld, act: Any) -> Any:
    """Run `act` once, when the refresh step is first invoked (after the planner's read)."""
    done: list[bool] = []

    def hook(function: str, _event: Any) -> None:
        if function == "RefreshPlanFunction" and not done:
            done.append(True)
            act()

    return world.runtime.before_invoke(hook)


def rule_ids(world: DemoWorld) -> set[str | None]:
    return {r.rule_id for r in world.node_rules()}


def test_a_revoke_reads_only_the_candidate_target_groups_whatever_the_clusters_size(
    world: DemoWorld,
) -> None:
    health = []
    for size, services in ((1, 4), (2, 12)):
        # Given the demo cluster with more Services behind its shared backend group, and a
        # target group on port 4000x whose targets use 31100 (a candidate by its port)
        more_services(world, services)
        port = 40000 + size
        port_target_group(world, port, [(i, 31100) for i in world.instances])
        reconcile(world)
        total = len(load_view(index(world)).target_groups)
        # When the schedule finds a stale rule of ours on that port
        stale = stale_rule(world, port)
        with watched(world):
            described, seen = run(world, scheduled_event())
        # Then it is revoked, and under the locks (refresh, re-plan after the settle) only
        # that one target group had its targets read, of them all
        output = json.loads(described["output"])
        assert output["status"] == "applied", output
        assert output["summary"]["rules_revoked"] == 1
        assert stale not in rule_ids(world)
        health.append(seen.elbv2("DescribeTargetHealth"))
        assert health[-1] == 2, seen.calls
        assert total >= 4 + services
    assert health[0] == health[1]


def test_an_entry_the_fresh_read_contradicts_holds_the_revoke_and_is_repaired(
    world: DemoWorld,
) -> None:
    # Given a target group on port 40000 with no targets, in the index, and a stale rule of
    # ours on that port in nodes-a
    tg = port_target_group(world, 40000, [])
    reconcile(world)
    stale = stale_rule(world, 40000)
    node_b = node_in(world, "nodes-b")
    elbv2 = world.runtime.clients.elbv2

    def register() -> None:  # its RegisterTargets event missed: the index says no target
        elbv2.register_targets(TargetGroupArn=tg, Targets=[{"Id": node_b, "Port": 40000}])

    # When a node of the other group is registered on that port after the planner's read
    patch = at_refresh(world, register)
    try:
        with watched(world):
            described, _ = run(world, scheduled_event())
    finally:
        patch.undo()
    # Then nothing is revoked (the fresh read alone would let it go: the target is in
    # nodes-b, but the index was wrong on a target group it chose), the plan says why, and
    # the index now holds the target
    output = json.loads(described["output"])
    assert output["summary"]["rules_revoked"] == 0, output
    assert stale in rule_ids(world)
    notes = " ".join(output["summary"]["notes"])
    assert "cannot vouch" in notes and "contradicted" in notes, notes
    entry = load_view(index(world)).target_groups[tg]
    assert (node_b, 40000) in {(m.target_id, m.port) for m in entry.members if m.present}
    # And the next run, on the repaired index, revokes it
    with watched(world):
        described, _ = run(world, scheduled_event())
    assert stale not in rule_ids(world)


def test_an_entry_older_than_the_verification_period_holds_the_revoke_and_is_repaired(
    world: DemoWorld,
) -> None:
    # Given a target group on port 40000 whose targets use 31100, and a stale rule of ours
    # on 40000 in nodes-a
    tg = port_target_group(world, 40000, [(i, 31100) for i in world.instances])
    reconcile(world)
    stale = stale_rule(world, 40000)
    table = index(world)
    long_ago = Version.of_read(time.time() - 2 * DEFAULT_VERIFICATION_PERIOD_SECONDS)

    def age() -> None:  # its entry last verified two periods ago
        entry = table.get("tg", [tg])[tg]
        assert table.put(replace(entry, verified=long_ago), entry.version)

    # When its execution refreshes the plan under the locks
    patch = at_refresh(world, age)
    try:
        with watched(world):
            described, _ = run(world, scheduled_event())
    finally:
        patch.undo()
    # Then nothing is revoked, the plan says why, and the entry is verified afresh
    output = json.loads(described["output"])
    assert output["summary"]["rules_revoked"] == 0, output
    assert stale in rule_ids(world)
    notes = " ".join(output["summary"]["notes"])
    assert "older than the verification period" in notes, notes
    verified = load_view(index(world)).target_groups[tg].verified
    assert verified is not None and verified > long_ago
    # And the next run revokes it
    with watched(world):
        run(world, scheduled_event())
    assert stale not in rule_ids(world)
