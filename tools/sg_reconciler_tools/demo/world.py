"""The world of LBC issue #3639 on the local runtime, and the CloudTrail events it emits.

An EKS-like cluster: two node groups tagged with the cluster tag, the controller's shared
backend security group, an NLB with its own group plus the backend group, and NodePort
target groups (instance targets) behind TCP listeners. The policy mirrors the controller:
one min..max range per (node group, backend group, protocol), so the backend rule is
tcp 31000-32000 until a new Service gets NodePort 32500.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sg_reconciler.core.rules import Rule, ingress_rules

from sg_reconciler_tools.local import LocalRuntime

ACCOUNT_ID = "123456789012"
REGION = "eu-west-1"
CLUSTER_TAG = "kubernetes.io/cluster/demo"
CONTROLLER_ROLE = "arn:aws:iam::123456789012:role/eks-demo-aws-load-balancer-controller"
INITIAL_NODE_PORTS = (31000, 31450, 32000)
IMAGE_ID = "ami-12c6146b"


@dataclass
class DemoWorld:
    runtime: LocalRuntime
    vpc_id: str
    subnet_ids: list[str]
    backend_group: str
    nlb_group: str
    node_groups: dict[str, str]  # name -> group id
    instances: list[str]
    load_balancer_arn: str
    target_groups: dict[int, str] = field(default_factory=dict)  # NodePort -> ARN

    @property
    def names(self) -> dict[str, str]:
        """Readable names of the groups, for the terminal."""
        return {**self.node_groups, "backend": self.backend_group, "nlb": self.nlb_group}

    @property
    def policy(self) -> str:
        return json.dumps(
            {
                "owner": "sg-reconciler",
                "load_balancers": {"tags": {"sg-reconciler/managed": "true"}},
                "rule_source": {"kind": "backend_group", "group_id": self.backend_group},
                "destination": {"kind": "tagged_groups", "tag_key": CLUSTER_TAG},
                "rule_budget": 1,
                "settle_seconds": 5,
            }
        )

    def node_rules(self) -> list[Rule]:
        """The ingress rules of both node groups, as describe prints them."""
        ec2 = self.runtime.clients.ec2
        docs = ec2.describe_security_group_rules(
            Filters=[{"Name": "group-id", "Values": sorted(self.node_groups.values())}]
        )["SecurityGroupRules"]
        return ingress_rules(docs, "described")

    def add_service(
        self, node_port: int, instances: list[str] | None = None
    ) -> list[dict[str, Any]]:
        """What the controller does for a new LoadBalancer Service (targets: every node unless
        `instances` says otherwise); returns its CloudTrail events."""
        nodes = self.instances if instances is None else instances
        elbv2: Any = self.runtime.clients.elbv2
        name = f"k8s-demo-svc{node_port}"
        tg = elbv2.create_target_group(
            Name=name,
            Protocol="TCP",
            Port=node_port,
            VpcId=self.vpc_id,
            TargetType="instance",
            HealthCheckPort="traffic-port",
            HealthCheckProtocol="TCP",
        )["TargetGroups"][0]["TargetGroupArn"]
        targets = [{"Id": i, "Port": node_port} for i in nodes]
        elbv2.register_targets(TargetGroupArn=tg, Targets=targets)
        listener_port = 8000 + len(self.target_groups)
        elbv2.create_listener(
            LoadBalancerArn=self.load_balancer_arn,
            Protocol="TCP",
            Port=listener_port,
            DefaultActions=[{"Type": "forward", "TargetGroupArn": tg}],
        )
        self.target_groups[node_port] = tg
        where = (self.runtime.account_id, self.runtime.region)
        return [
            cloudtrail_event(
                "CreateTargetGroup",
                {"name": name, "protocol": "TCP", "port": node_port, "vpcId": self.vpc_id},
                {"targetGroups": [{"targetGroupArn": tg, "targetGroupName": name}]},
                *where,
            ),
            cloudtrail_event(
                "RegisterTargets",
                {
                    "targetGroupArn": tg,
                    "targets": [{"id": i, "port": node_port} for i in nodes],
                },
                None,
                *where,
            ),
            cloudtrail_event(
                "CreateListener",
                {
                    "loadBalancerArn": self.load_balancer_arn,
                    "protocol": "TCP",
                    "port": listener_port,
                    "defaultActions": [{"type": "forward", "targetGroupArn": tg}],
                },
                None,
                *where,
            ),
        ]


def cloudtrail_event(
    event_name: str,
    request: dict[str, Any],
    response: dict[str, Any] | None,
    account: str = ACCOUNT_ID,
    region: str = REGION,
) -> dict[str, Any]:
    """An 'AWS API Call via CloudTrail' event as EventBridge delivers it (ELBv2 call by the controller)."""
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "version": "0",
        "id": str(uuid.uuid4()),
        "detail-type": "AWS API Call via CloudTrail",
        "source": "aws.elasticloadbalancing",
        "account": account,
        "time": now,
        "region": region,
        "resources": [],
        "detail": {
            "eventVersion": "1.11",
            "userIdentity": {
                "type": "AssumedRole",
                "principalId": "AROADEMOCONTROLLER:session",
                "arn": f"arn:aws:sts::{account}:assumed-role/eks-demo-aws-load-balancer-controller/session",
                "accountId": account,
                "sessionContext": {
                    "sessionIssuer": {
                        "type": "Role",
                        "principalId": "AROADEMOCONTROLLER",
                        "arn": CONTROLLER_ROLE.replace(ACCOUNT_ID, account),
                        "accountId": account,
                        "userName": "eks-demo-aws-load-balancer-controller",
                    },
                    "attributes": {"creationDate": now, "mfaAuthenticated": "false"},
                },
            },
            "eventTime": now,
            "eventSource": "elasticloadbalancing.amazonaws.com",
            "eventName": event_name,
            "awsRegion": region,
            "sourceIPAddress": "203.0.113.10",
            "userAgent": "elbv2.k8s.aws/v2.13.2",
            "requestParameters": request,
            "responseElements": response,
            "requestID": str(uuid.uuid4()),
            "eventID": str(uuid.uuid4()),
            "readOnly": False,
            "eventType": "AwsApiCall",
            "managementEvent": True,
            "recipientAccountId": account,
            "eventCategory": "Management",
        },
    }


def scheduled_event(account: str = ACCOUNT_ID, region: str = REGION) -> dict[str, Any]:
    """The drift-repair schedule's event (an EventBridge 'Scheduled Event')."""
    return {
        "version": "0",
        "id": f"schedule-{uuid.uuid4()}",
        "detail-type": "Scheduled Event",
        "source": "aws.events",
        "account": account,
        "region": region,
        "time": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "resources": [],
        "detail": {},
    }


def build_world(runtime: LocalRuntime) -> DemoWorld:
    """Create the cluster's network, groups, nodes, NLB and initial Services in moto."""
    ec2, elbv2 = runtime.clients.ec2, runtime.clients.elbv2
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    subnets = [
        ec2.create_subnet(VpcId=vpc, CidrBlock=cidr, AvailabilityZone=f"{runtime.region}{az}")[
            "Subnet"
        ]["SubnetId"]
        for cidr, az in (("10.0.1.0/24", "a"), ("10.0.2.0/24", "b"))
    ]

    def group(name: str, tags: dict[str, str] | None = None) -> str:
        extra: dict[str, Any] = {}
        if tags:
            extra["TagSpecifications"] = [
                {
                    "ResourceType": "security-group",
                    "Tags": [{"Key": k, "Value": v} for k, v in tags.items()],
                }
            ]
        return str(
            ec2.create_security_group(GroupName=name, Description=name, VpcId=vpc, **extra)[
                "GroupId"
            ]
        )

    backend = group("k8s-traffic-demo-backend", {"elbv2.k8s.aws/resource": "backend-sg"})
    nlb_group = group("k8s-demo-web-nlb")
    nodes = {
        "nodes-a": group("eks-demo-nodes-a", {CLUSTER_TAG: "owned"}),
        "nodes-b": group("eks-demo-nodes-b", {CLUSTER_TAG: "owned"}),
    }
    instances: list[str] = []
    for subnet, group_id in zip(subnets, nodes.values(), strict=True):
        reservation = ec2.run_instances(
            ImageId=IMAGE_ID, MinCount=2, MaxCount=2, SecurityGroupIds=[group_id], SubnetId=subnet
        )
        instances += [i["InstanceId"] for i in reservation["Instances"]]
    lb = elbv2.create_load_balancer(
        Name="k8s-demo-web",
        Type="network",
        Scheme="internet-facing",
        Subnets=subnets,
        SecurityGroups=[nlb_group, backend],
        Tags=[
            {"Key": "sg-reconciler/managed", "Value": "true"},
            {"Key": "elbv2.k8s.aws/cluster", "Value": "demo"},
        ],
    )["LoadBalancers"][0]["LoadBalancerArn"]
    world = DemoWorld(runtime, vpc, subnets, backend, nlb_group, nodes, instances, lb)
    for port in INITIAL_NODE_PORTS:
        world.add_service(port)
    runtime.clients.ssm.put_parameter(
        Name=runtime.ref("PolicyParameter"), Value=world.policy, Type="String", Overwrite=True
    )
    return world
