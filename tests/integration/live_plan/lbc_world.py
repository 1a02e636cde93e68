"""An account as the AWS Load Balancer Controller leaves it, for `init --live`: two clusters,
NLBs with and without security groups, instance and pod targets, the controller's rules.

The controller's tags are its own (pkg/networking/backend_sg_provider.go: the backend group
carries elbv2.k8s.aws/cluster and elbv2.k8s.aws/resource=backend-sg; load balancers carry
the cluster and their Service's stack, namespace/name), and so is its rule description.

- VPC 10.0.0.0/16; subnets 10.0.1.0/24 and 10.0.2.0/24, where every NLB lives.
- Cluster alpha: nodes a1 (nodes_alpha, tagged kubernetes.io/cluster/alpha) and a2
  (nodes_alpha and ssh_alpha: the controller picks the tagged one).
  - `alpha-web` (groups front_alpha, backend_alpha): instance target group, TCP 30080.
  - `alpha-legacy` (internet-facing, no groups): instance target group, TCP 30500, client
    addresses preserved (AWS's default for instance targets). The controller's rules show
    its clients, 203.0.113.0/24, and its VPC-wide health-check rule, 10.0.0.0/16.
  - The controller's rules in nodes_alpha: backend_alpha tcp 30080; 203.0.113.0/24 and
    10.0.0.0/16 tcp 30500.
- Cluster beta: node b1 (nodes_beta), a pod interface (pods_beta) with 10.0.1.20 and
  10.0.1.21.
  - `beta-api` (groups front_beta, backend_beta): ip target group TCP 8080 on the pod
    10.0.1.21, instance target group TCP 31000 on b1.
  - `beta-dns` (internal, no groups): instance target group TCP 31053 on b1, clients
    preserved; no rule shows them.
  - `beta-metrics` (internal, no groups): ip target group TCP 9100 on the pod 10.0.1.20,
    client IP preservation off.
  - The controller's rule in pods_beta: backend_beta tcp 8080 (none yet for 31000).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sg_reconciler.policy import LBC_SHARED_DESCRIPTION

if TYPE_CHECKING:
    from mypy_boto3_ec2 import EC2Client
    from mypy_boto3_elbv2 import ElasticLoadBalancingv2Client

IMAGE = "ami-12c6146b"  # one of moto's stock AMIs
VPC_CIDR = "10.0.0.0/16"
SUBNETS = ("10.0.1.0/24", "10.0.2.0/24")
CLIENTS = "203.0.113.0/24"
POD_METRICS, POD_API = "10.0.1.20", "10.0.1.21"


@dataclass
class LbcWorld:
    vpc_id: str
    groups: dict[str, str]  # role -> id
    instances: dict[str, str]
    load_balancers: dict[str, str]  # name -> ARN
    controller_rules: dict[str, str]  # what it admits -> rule id

    def role(self, group_id: str) -> str:
        return {g: r for r, g in self.groups.items()}.get(group_id, group_id)


def build_lbc_world(ec2: EC2Client, elbv2: ElasticLoadBalancingv2Client) -> LbcWorld:
    region = ec2.meta.region_name
    vpc_id = ec2.create_vpc(CidrBlock=VPC_CIDR)["Vpc"]["VpcId"]
    subnets = [
        ec2.create_subnet(VpcId=vpc_id, CidrBlock=cidr, AvailabilityZone=f"{region}{zone}")[
            "Subnet"
        ]["SubnetId"]
        for cidr, zone in zip(SUBNETS, "ab", strict=True)
    ]

    def group(name: str, **tags: str) -> str:
        extra: dict[str, Any] = {}
        if tags:
            extra["TagSpecifications"] = [
                {
                    "ResourceType": "security-group",
                    "Tags": [{"Key": k, "Value": v} for k, v in tags.items()],
                }
            ]
        return ec2.create_security_group(GroupName=name, Description=name, VpcId=vpc_id, **extra)[
            "GroupId"
        ]

    groups: dict[str, str] = {}
    for cluster in ("alpha", "beta"):
        tagged = {f"kubernetes.io/cluster/{cluster}": "owned"}
        groups[f"nodes_{cluster}"] = group(f"{cluster}-nodes", **tagged)
        groups[f"backend_{cluster}"] = group(
            f"k8s-traffic-{cluster}",
            **{"elbv2.k8s.aws/cluster": cluster, "elbv2.k8s.aws/resource": "backend-sg"},
        )
        groups[f"front_{cluster}"] = group(
            f"k8s-front-{cluster}", **{"elbv2.k8s.aws/cluster": cluster}
        )
    groups["ssh_alpha"] = group("alpha-ssh")
    groups["pods_beta"] = group("beta-pods", **{"kubernetes.io/cluster/beta": "owned"})

    def instance(*roles: str) -> str:
        return ec2.run_instances(
            ImageId=IMAGE,
            MinCount=1,
            MaxCount=1,
            SecurityGroupIds=[groups[r] for r in roles],
            SubnetId=subnets[0],
        )["Instances"][0]["InstanceId"]

    instances = {
        "a1": instance("nodes_alpha"),
        "a2": instance("nodes_alpha", "ssh_alpha"),
        "b1": instance("nodes_beta"),
    }
    pod_eni = ec2.create_network_interface(
        SubnetId=subnets[0], PrivateIpAddress=POD_METRICS, Groups=[groups["pods_beta"]]
    )["NetworkInterface"]["NetworkInterfaceId"]
    ec2.assign_private_ip_addresses(NetworkInterfaceId=pod_eni, PrivateIpAddresses=[POD_API])

    def nlb(name: str, cluster: str, stack: str, roles: list[str], scheme: str) -> str:
        extra: dict[str, Any] = {}
        if roles:
            extra["SecurityGroups"] = [groups[r] for r in roles]
        tags = {
            "elbv2.k8s.aws/cluster": cluster,
            "service.k8s.aws/stack": stack,
            "service.k8s.aws/resource": "LoadBalancer",
        }
        return elbv2.create_load_balancer(
            Name=name,
            Subnets=subnets,
            Type="network",
            Scheme=scheme,  # type: ignore[arg-type]
            Tags=[{"Key": k, "Value": v} for k, v in tags.items()],
            **extra,
        )["LoadBalancers"][0]["LoadBalancerArn"]

    lbs = {
        "alpha-web": nlb(
            "alpha-web", "alpha", "shop/web", ["front_alpha", "backend_alpha"], "internal"
        ),
        "alpha-legacy": nlb("alpha-legacy", "alpha", "shop/legacy", [], "internet-facing"),
        "beta-api": nlb("beta-api", "beta", "api/api", ["front_beta", "backend_beta"], "internal"),
        "beta-dns": nlb("beta-dns", "beta", "dns/dns", [], "internal"),
        "beta-metrics": nlb("beta-metrics", "beta", "mon/metrics", [], "internal"),
    }

    def serve(lb: str, name: str, kind: str, port: int, targets: list[str]) -> str:
        arn = elbv2.create_target_group(
            Name=name,
            Protocol="TCP",
            Port=port,
            VpcId=vpc_id,
            TargetType=kind,  # type: ignore[arg-type]
        )["TargetGroups"][0]["TargetGroupArn"]
        elbv2.create_listener(
            LoadBalancerArn=lbs[lb],
            Protocol="TCP",
            Port=port,
            DefaultActions=[{"Type": "forward", "TargetGroupArn": arn}],
        )
        elbv2.register_targets(TargetGroupArn=arn, Targets=[{"Id": t} for t in targets])
        return arn

    serve("alpha-web", "alpha-web", "instance", 30080, [instances["a1"], instances["a2"]])
    serve("alpha-legacy", "alpha-legacy", "instance", 30500, [instances["a1"], instances["a2"]])
    serve("beta-api", "beta-api-pods", "ip", 8080, [POD_API])
    serve("beta-api", "beta-api-nodes", "instance", 31000, [instances["b1"]])
    serve("beta-dns", "beta-dns", "instance", 31053, [instances["b1"]])
    metrics = serve("beta-metrics", "beta-metrics", "ip", 9100, [POD_METRICS])
    elbv2.modify_target_group_attributes(
        TargetGroupArn=metrics,
        Attributes=[{"Key": "preserve_client_ip.enabled", "Value": "false"}],
    )

    def controller_rule(role: str, port: int, peer: dict[str, Any]) -> str:
        permission = {"IpProtocol": "tcp", "FromPort": port, "ToPort": port, **peer}
        return ec2.authorize_security_group_ingress(
            GroupId=groups[role],
            IpPermissions=[permission],  # type: ignore[list-item]
        )["SecurityGroupRules"][0]["SecurityGroupRuleId"]

    def from_group(role: str) -> dict[str, Any]:
        return {
            "UserIdGroupPairs": [{"GroupId": groups[role], "Description": LBC_SHARED_DESCRIPTION}]
        }

    def from_cidr(cidr: str) -> dict[str, Any]:
        return {"IpRanges": [{"CidrIp": cidr, "Description": LBC_SHARED_DESCRIPTION}]}

    controller_rules = {
        "backend_alpha 30080": controller_rule("nodes_alpha", 30080, from_group("backend_alpha")),
        f"{CLIENTS} 30500": controller_rule("nodes_alpha", 30500, from_cidr(CLIENTS)),
        f"{VPC_CIDR} 30500": controller_rule("nodes_alpha", 30500, from_cidr(VPC_CIDR)),
        "backend_beta 8080": controller_rule("pods_beta", 8080, from_group("backend_beta")),
    }
    return LbcWorld(vpc_id, groups, instances, lbs, controller_rules)
