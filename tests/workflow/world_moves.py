"""The world moving under a running plan, for the real-ASL tests and the fault matrix: an
outside writer right before the first revoke, a change during the settle, and the flow
check that judges both (a concrete source and port, not only the plan)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sg_reconciler.adapters.plan_store import PlanStore
from sg_reconciler.core.rules import Peer, ingress_rules
from sg_reconciler.core.traffic import Traffic
from sg_reconciler_tools.demo.world import DemoWorld
from sg_reconciler_tools.local.patching import Patch

TCP = 6


def admits(world: DemoWorld, group_id: str, port: int, source: str | None = None) -> bool:
    """Flow check: `source` (by default the backend group, carried by the NLB) reaches
    `port` on the group now."""
    docs = world.runtime.clients.ec2.describe_security_group_rules(
        Filters=[{"Name": "group-id", "Values": [group_id]}]
    )["SecurityGroupRules"]
    traffic = Traffic.of(ingress_rules(docs, "live"))
    return traffic.allows(group_id, Peer("group", source or world.backend_group), TCP, port)


def before_revoke(world: DemoWorld, group_id: str, act: Callable[[], object]) -> Patch:
    """Run `act` once, right before the revoke batch holding `group_id` starts (after the
    visibility check). Aimed at that batch: the guard reads a group right before its calls,
    and a write in the milliseconds between that read and the call is beyond any check (EC2
    has no conditional revoke)."""
    done: list[bool] = []

    def listener(function: str, event: Any) -> None:
        if function != "ApplyStepsFunction" or done or not isinstance(event, dict):
            return
        if event.get("phase") != "revoke":
            return
        store = PlanStore(world.runtime.clients.dynamodb, world.runtime.ref("PlanTable"))
        items = store.batch(event["plan_id"], "revoke", event["batch"])
        if any(item["group_id"] == group_id for item in items):
            done.append(True)
            act()

    return world.runtime.before_invoke(listener)


def at_the_settle(world: DemoWorld, act: Callable[[], object]) -> Patch:
    """Run `act` once, when the first Wait state starts (the settle)."""
    done: list[bool] = []

    def listener(_seconds: float) -> None:
        if not done:
            done.append(True)
            act()

    return world.runtime.waits.subscribe(listener)


def new_rule_id(world: DemoWorld, group_id: str, to_port: int) -> str:
    """The id of the backend rule 31000-`to_port` in the group (the one a change adds)."""
    return next(
        r.rule_id or ""
        for r in world.node_rules()
        if r.group_id == group_id and (r.key.from_port, r.key.to_port) == (31000, to_port)
    )


def set_policy(world: DemoWorld, text: str) -> None:
    """An operator's edit of the policy parameter."""
    world.runtime.clients.ssm.put_parameter(
        Name=world.runtime.ref("PolicyParameter"), Value=text, Type="String", Overwrite=True
    )


MANAGED = "sg-reconciler/managed"  # the demo policy's selector tag


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
