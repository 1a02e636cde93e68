"""Reads under the locks, on the real ASL: the refresh and the re-plan after the settle read
the locked groups' rules and only the plan's closure (docs/architecture.md, "Reads").

The #3639 cluster ("demo") shares the account with another cluster of `n` NLBs, each with a
target group, behind a backend group of its own. Every describe the steps make from the
refresh on is counted where moto serves it, whatever client makes it."""

from __future__ import annotations

import json
from typing import Any

from sg_reconciler.core.rules import OWNER_TAG_KEY
from sg_reconciler_tools.demo.play import deliver_events, reconcile, run_planner
from sg_reconciler_tools.demo.world import CLUSTER_TAG, IMAGE_ID, DemoWorld, scheduled_event
from workflow.read_counts import Reads, counted_reads
from workflow.test_apply_plan import TIMEOUT, ranges
from workflow.world_moves import admits, set_policy

OTHER_TAG = "kubernetes.io/cluster/other"


def two_clusters(world: DemoWorld, backend: str) -> str:
    """The policy: the demo cluster as before, and the other cluster with its own backend."""

    def binding(name: str, group: str, tag: str) -> dict[str, Any]:
        return {
            "name": name,
            "load_balancers": {"tags": {"elbv2.k8s.aws/cluster": name}},
            "rule_source": {"kind": "backend_group", "group_id": group},
            "destination": {"kind": "tagged_groups", "tag_key": tag},
            "rule_budget": 10,  # a rule per port: a new port only authorizes
        }

    return json.dumps(
        {
            "owner": "sg-reconciler",
            "settle_seconds": 5,
            "bindings": [
                binding("demo", world.backend_group, CLUSTER_TAG),
                binding("other", backend, OTHER_TAG),
            ],
        }
    )


def add_other_cluster(world: DemoWorld, load_balancers: int) -> None:
    """`load_balancers` NLBs of the other cluster, each with a NodePort target group."""
    ec2, elbv2 = world.runtime.clients.ec2, world.runtime.clients.elbv2
    vpc = world.vpc_id

    def group(name: str, tags: dict[str, str] | None = None) -> str:
        spec: Any = (
            [
                {
                    "ResourceType": "security-group",
                    "Tags": [{"Key": k, "Value": v} for k, v in tags.items()],
                }
            ]
            if tags
            else []
        )
        return str(
            ec2.create_security_group(
                GroupName=name, Description=name, VpcId=vpc, TagSpecifications=spec
            )["GroupId"]
        )

    found = ec2.describe_security_groups(
        Filters=[{"Name": "group-name", "Values": ["other-backend"]}]
    )["SecurityGroups"]
    backend = found[0]["GroupId"] if found else group("other-backend")
    if not found:
        nodes = group("other-nodes", {OTHER_TAG: "owned"})
        ec2.run_instances(
            ImageId=IMAGE_ID,
            MinCount=2,
            MaxCount=2,
            SecurityGroupIds=[nodes],
            SubnetId=world.subnet_ids[0],
        )
    instances = [
        i["InstanceId"]
        for r in ec2.describe_instances(
            Filters=[{"Name": "instance.group-name", "Values": ["other-nodes"]}]
        )["Reservations"]
        for i in r["Instances"]
    ]
    have = len(elbv2.describe_load_balancers()["LoadBalancers"]) - 1
    for n in range(have, have + load_balancers):
        lb = elbv2.create_load_balancer(
            Name=f"other-{n}",
            Type="network",
            Subnets=world.subnet_ids,
            SecurityGroups=[group(f"other-nlb-{n}"), backend],
            Tags=[
                {"Key": "sg-reconciler/managed", "Value": "true"},
                {"Key": "elbv2.k8s.aws/cluster", "Value": "other"},
            ],
        )["LoadBalancers"][0]["LoadBalancerArn"]
        tg = elbv2.create_target_group(
            Name=f"other-{n}", Protocol="TCP", Port=30000 + n, VpcId=vpc, TargetType="instance"
        )["TargetGroups"][0]["TargetGroupArn"]
        elbv2.register_targets(
            TargetGroupArn=tg, Targets=[{"Id": i, "Port": 30000 + n} for i in instances]
        )
        elbv2.create_listener(
            LoadBalancerArn=lb,
            Protocol="TCP",
            Port=80,
            DefaultActions=[{"Type": "forward", "TargetGroupArn": tg}],
        )
    set_policy(world, two_clusters(world, backend))


def run(world: DemoWorld, event: dict[str, Any]) -> tuple[dict[str, Any], Reads]:
    with counted_reads(world, under_the_locks=True) as seen:
        execution = run_planner(world, event)
        assert execution is not None
        described = world.runtime.wait_for(execution, TIMEOUT)
    assert described["status"] == "SUCCEEDED", described.get("cause")
    return described, seen


def test_an_event_that_only_authorizes_reads_no_load_balancer_under_the_locks(
    world: DemoWorld,
) -> None:
    # Given the demo cluster beside another one, reconciled, at two account sizes
    counts = []
    for size in (1, 6):
        add_other_cluster(world, size if not counts else size - 1)
        reconcile(world)
        # When a Service gets a NodePort of its own (only an authorization:
        # nothing to revoke), delivered as the controller's events
        port = 32600 + 10 * len(counts)  # not adjacent: no range merges
        batch = deliver_events(world, world.add_service(port))
        described, seen = run(world, batch)
        # Then under the locks no ELBv2 describe at all, and a few EC2 ones
        assert json.loads(described["output"])["status"] == "applied"
        assert seen.elbv2() == 0, seen.calls
        counts.append(seen.ec2())
    assert counts[0] == counts[1], counts  # the same, whatever the account's size


def test_a_revoke_reads_only_the_target_groups_that_could_use_its_ports(world: DemoWorld) -> None:
    # Given the demo cluster (4 target groups after the change below) beside another one
    health = []
    for size in (1, 6):
        add_other_cluster(world, size if not health else size - 1)
        reconcile(world)
        # When a drift-repair run takes away a stale owned rule from the demo's backend
        node_a = world.node_groups["nodes-a"]
        stale = world.runtime.clients.ec2.authorize_security_group_ingress(
            GroupId=node_a,
            IpPermissions=[
                {
                    "IpProtocol": "tcp",
                    "FromPort": 40000 + size,
                    "ToPort": 40000 + size,
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
        described, seen = run(world, scheduled_event())
        # Then it is gone, and under the locks (the refresh and the re-plan after the
        # settle) no target group had its targets read: of the demo's (the other's admit
        # another peer) the inventory index says none could use port 4000x in that group
        # (docs/architecture.md, "Reads"; tests/workflow/test_revoke_closure.py reads some)
        assert json.loads(described["output"])["summary"]["rules_revoked"] == 1
        assert stale not in {r.rule_id for r in world.node_rules()}
        health.append(seen.elbv2("DescribeTargetHealth"))
        assert health[-1] == 0, seen.calls
    assert health[0] == health[1]


def test_a_revoke_whose_closure_shows_its_traffic_still_needed_is_held(world: DemoWorld) -> None:
    # Given a stale owned rule from the backend on port 40000 in one node group, which the
    # planner plans to revoke
    add_other_cluster(world, 1)
    reconcile(world)
    node_a = world.node_groups["nodes-a"]
    world.runtime.clients.ec2.authorize_security_group_ingress(
        GroupId=node_a,
        IpPermissions=[
            {
                "IpProtocol": "tcp",
                "FromPort": 40000,
                "ToPort": 40000,
                "UserIdGroupPairs": [{"GroupId": world.backend_group}],
            }
        ],
        TagSpecifications=[
            {
                "ResourceType": "security-group-rule",
                "Tags": [{"Key": OWNER_TAG_KEY, "Value": "sg-reconciler"}],
            }
        ],
    )
    # and a Service created on NodePort 40000 after the planner's read, before the refresh
    added: list[bool] = []

    def service(function: str, _event: Any) -> None:
        if function == "RefreshPlanFunction" and not added:
            added.append(True)
            world.add_service(40000)

    patch = world.runtime.before_invoke(service)
    try:
        described, seen = run(world, scheduled_event())
    finally:
        patch.undo()
    # Then the refresh read the closure, saw the traffic and revoked nothing: the backend
    # still reaches the new Service's port
    assert added and seen.elbv2("DescribeTargetHealth") > 0
    output = json.loads(described["output"])
    assert output["summary"]["rules_revoked"] == 0, output
    assert admits(world, node_a, 40000)
    assert (node_a, 40000, 40000) in ranges(world)
    assert any("still needs them" in note for note in output["summary"]["notes"]), output


def test_the_3639_change_reads_no_load_balancer_under_the_locks(world: DemoWorld) -> None:
    # Given the #3639 change found by the schedule (a Service whose events were missed):
    # 31000-32000 must become 31000-32500 behind the shared backend group
    world.add_service(32500)
    # When the drift-repair run plans it and its execution runs
    described, seen = run(world, scheduled_event())
    # Then the range grew in both node groups (authorize, then revoke) and under the locks
    # (refresh, re-plan after the settle) nothing but the node groups' rules was read: the
    # old rule's traffic is all allowed by the new one, so no revoke takes anything away
    summary = json.loads(described["output"])["summary"]
    assert summary["rules_authorized"] == 2 and summary["rules_revoked"] == 2
    assert ranges(world) == {(g, 31000, 32500) for g in world.node_groups.values()}
    assert seen.elbv2() == 0, seen.calls
