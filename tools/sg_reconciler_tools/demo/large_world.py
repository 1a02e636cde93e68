"""The #3639 cluster at scale, for the scale tests and benchmarks: many node groups, one node
each, behind one NLB whose backend group must reach `ports` NodePorts on every node.

The policy keeps one rule per NodePort (a budget of `ports`, NodePorts 100 apart), so a
first reconcile authorizes `groups * ports` rules in `groups` calls.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from sg_reconciler_tools.demo.world import CLUSTER_TAG, IMAGE_ID, REGION
from sg_reconciler_tools.local import LocalRuntime, interception, patching

FIRST_NODE_PORT = 30000


@dataclass
class LargeWorld:
    runtime: LocalRuntime
    backend_group: str
    node_groups: list[str]
    load_balancer_arn: str
    ports: int

    @property
    def policy(self) -> str:
        return json.dumps(
            {
                "load_balancers": {"tags": {"sg-reconciler/managed": "true"}},
                "rule_source": {"kind": "backend_group", "group_id": self.backend_group},
                "destination": {"kind": "tagged_groups", "tag_key": CLUSTER_TAG},
                "rule_budget": self.ports,
                "include_health_checks": False,
                "settle_seconds": 5,
            }
        )


def build_large_world(runtime: LocalRuntime, groups: int, ports: int = 5) -> LargeWorld:
    """Create the network, `groups` node groups with one instance each, the NLB and its
    `ports` NodePort target groups; store the policy."""
    if not 1 <= ports <= 60:
        raise ValueError(f"ports must be 1-60 (one rule each), not {ports}")
    ec2, elbv2 = runtime.clients.ec2, runtime.clients.elbv2
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    subnets = [
        ec2.create_subnet(VpcId=vpc, CidrBlock=cidr, AvailabilityZone=f"{REGION}{az}")["Subnet"][
            "SubnetId"
        ]
        for cidr, az in (("10.0.0.0/17", "a"), ("10.0.128.0/17", "b"))
    ]

    def group(name: str, tags: dict[str, str]) -> str:
        spec: Any = [
            {
                "ResourceType": "security-group",
                "Tags": [{"Key": k, "Value": v} for k, v in tags.items()],
            }
        ]
        return str(
            ec2.create_security_group(
                GroupName=name, Description=name, VpcId=vpc, TagSpecifications=spec
            )["GroupId"]
        )

    backend = group("k8s-traffic-large-backend", {"elbv2.k8s.aws/resource": "backend-sg"})
    node_groups = [group(f"eks-large-nodes-{i:05d}", {CLUSTER_TAG: "owned"}) for i in range(groups)]
    reservation = ec2.run_instances(
        ImageId=IMAGE_ID, MinCount=groups, MaxCount=groups, SubnetId=subnets[0]
    )
    instances = [i["InstanceId"] for i in reservation["Instances"]]
    for instance, group_id in zip(instances, node_groups, strict=True):
        ec2.modify_instance_attribute(InstanceId=instance, Groups=[group_id])
    lb = elbv2.create_load_balancer(
        Name="k8s-large-web",
        Type="network",
        Scheme="internal",
        Subnets=subnets,
        SecurityGroups=[backend],
        Tags=[{"Key": "sg-reconciler/managed", "Value": "true"}],
    )["LoadBalancers"][0]["LoadBalancerArn"]
    for index in range(ports):
        port = FIRST_NODE_PORT + 100 * index
        tg = elbv2.create_target_group(
            Name=f"k8s-large-svc{port}",
            Protocol="TCP",
            Port=port,
            VpcId=vpc,
            TargetType="instance",
            HealthCheckPort="traffic-port",
            HealthCheckProtocol="TCP",
        )["TargetGroups"][0]["TargetGroupArn"]
        for start in range(0, len(instances), 500):
            elbv2.register_targets(
                TargetGroupArn=tg,
                Targets=[{"Id": i, "Port": port} for i in instances[start : start + 500]],
            )
        elbv2.create_listener(
            LoadBalancerArn=lb,
            Protocol="TCP",
            Port=8000 + index,
            DefaultActions=[{"Type": "forward", "TargetGroupArn": tg}],
        )
    world = LargeWorld(runtime, backend, node_groups, lb, ports)
    runtime.clients.ssm.put_parameter(
        Name=runtime.ref("PolicyParameter"), Value=world.policy, Type="String", Overwrite=True
    )
    return world


def group_rules(world: LargeWorld) -> dict[str, list[dict[str, Any]]]:
    """Every rule of every node group as describe shows it (ingress and egress, ids,
    descriptions and tags), by group: to compare a world before and after a change."""
    ec2 = world.runtime.clients.ec2
    found: dict[str, list[dict[str, Any]]] = {g: [] for g in world.node_groups}
    for start in range(0, len(world.node_groups), 200):
        chunk = world.node_groups[start : start + 200]
        pages = ec2.get_paginator("describe_security_group_rules").paginate(
            Filters=[{"Name": "group-id", "Values": chunk}]
        )
        for page in pages:
            for rule in page["SecurityGroupRules"]:
                found[rule["GroupId"]].append(dict(rule))
    return {g: sorted(rules, key=lambda r: r["SecurityGroupRuleId"]) for g, rules in found.items()}


def deny_authorize_in(group_id: str) -> patching.Patch:
    """AuthorizeSecurityGroupIngress into `group_id` is denied (as IAM denies it), until
    undone. The authorize phase's batches are consecutive groups in id order, so the group
    that sorts last is in the last batch."""

    def deny(service: str, operation: str, proceed: interception.Proceed) -> Any:
        if interception.current_request_params().get("GroupId") == [group_id]:
            raise interception.AwsError(
                "UnauthorizedOperation",
                "You are not authorized to perform this operation.",
            )
        return proceed()

    return interception.intercept_api_call(
        "ec2", "AuthorizeSecurityGroupIngress", deny, layer=interception.FAULT_LAYER
    )
