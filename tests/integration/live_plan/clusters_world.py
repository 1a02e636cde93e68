"""An EKS-shaped account for live-read tests: two clusters, NLBs without security groups, pods.

- VPC 10.0.0.0/16 with an IPv6 block; subnet `s1` (10.0.1.0/24 and an IPv6 /64) and `s2`
  (10.0.2.0/24).
- Cluster a: NLB `a-web` (groups front_a, back_a; tag cluster=a), target group `a-nodes`
  (instance, TCP 30080) on instance `a1` (group nodes_a).
- Cluster b: NLB `b-web` (groups front_b, back_b; tag cluster=b). Target group `b-pods`
  (ip, TCP 8080) on a pod's secondary address (interface `pod_eni`, group pods_b) and on a
  pod inside a delegated /28 of instance `b2` (group pods_b). Target group `b-nodes`
  (instance, TCP 30090) on `b1` (nodes_b, cluster-tagged, and extra_b) and on `b_bad` (two
  cluster-tagged groups: the LBC's choice fails there).
- NLB `legacy` (internal, no security groups, tag legacy=true): `legacy-inst` (instance, TCP
  30500, client IP preserved by default) on a1 and `legacy-ip` (ip, TCP 9000, preservation
  off) on the pod interface's primary address.
- NLB `dual` (internal, dualstack, no security groups, tag legacy=true): `dual-ip` (ip, IPv6,
  TCP 9100, preservation off) on an IPv6 address of interface `v6_eni` (group pods_b).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mypy_boto3_ec2 import EC2Client
    from mypy_boto3_elbv2 import ElasticLoadBalancingv2Client

CLUSTER_B = "kubernetes.io/cluster/b"
IMAGE = "ami-12c6146b"  # one of moto's stock AMIs
POD_PRIMARY, POD_SECONDARY = "10.0.1.20", "10.0.1.21"
PREFIX, PREFIX_POD = "10.0.1.64/28", "10.0.1.70"


@dataclass
class ClustersWorld:
    vpc_id: str
    vpc_ipv6: str
    subnet_ipv6: str
    groups: dict[str, str]  # role -> id
    instances: dict[str, str]  # name -> id
    load_balancers: dict[str, str]  # name -> ARN
    v6_pod: str

    def role(self, group_id: str) -> str:
        return {g: r for r, g in self.groups.items()}.get(group_id, group_id)

    def policy(self) -> str:
        return f"""\
bindings:
  - name: a
    load_balancers: {{tags: {{cluster: a}}}}
    rule_source: {{kind: backend_group, group_id: {self.groups["back_a"]}}}
  - name: b
    load_balancers: {{tags: {{cluster: b}}}}
    rule_source: {{kind: backend_group, group_id: {self.groups["back_b"]}}}
    destination: {{kind: cluster_group, cluster_name: b}}
  - name: legacy
    load_balancers: {{tags: {{legacy: "true"}}}}
    rule_source: {{kind: load_balancer_addresses}}
"""


def build_clusters_world(ec2: EC2Client, elbv2: ElasticLoadBalancingv2Client) -> ClustersWorld:
    region = ec2.meta.region_name
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16", AmazonProvidedIpv6CidrBlock=True)["Vpc"]
    vpc_id = vpc["VpcId"]
    vpc_ipv6 = ec2.describe_vpcs(VpcIds=[vpc_id])["Vpcs"][0]["Ipv6CidrBlockAssociationSet"][0][
        "Ipv6CidrBlock"
    ]
    subnet_ipv6 = str(next(ipaddress.ip_network(vpc_ipv6).subnets(new_prefix=64)))
    s1 = ec2.create_subnet(
        VpcId=vpc_id,
        CidrBlock="10.0.1.0/24",
        AvailabilityZone=f"{region}a",
        Ipv6CidrBlock=subnet_ipv6,
    )["Subnet"]["SubnetId"]
    s2 = ec2.create_subnet(VpcId=vpc_id, CidrBlock="10.0.2.0/24", AvailabilityZone=f"{region}b")[
        "Subnet"
    ]["SubnetId"]

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

    cluster_b = {CLUSTER_B: "owned"}
    groups = {
        "front_a": group("front-a"),
        "back_a": group("back-a"),
        "nodes_a": group("nodes-a", **{"kubernetes.io/cluster/a": "owned"}),
        "front_b": group("front-b"),
        "back_b": group("back-b"),
        "nodes_b": group("nodes-b", **cluster_b),
        "extra_b": group("extra-b"),
        "pods_b": group("pods-b", Name="pods of cluster b"),
        "dup_1": group("dup-1", **cluster_b),
        "dup_2": group("dup-2", **cluster_b),
    }

    def instance(groups_of: list[str]) -> str:
        return ec2.run_instances(
            ImageId=IMAGE, MinCount=1, MaxCount=1, SecurityGroupIds=groups_of, SubnetId=s1
        )["Instances"][0]["InstanceId"]

    instances = {
        "a1": instance([groups["nodes_a"]]),
        "b1": instance([groups["nodes_b"], groups["extra_b"]]),
        "b2": instance([groups["pods_b"]]),
        "b_bad": instance([groups["dup_1"], groups["dup_2"]]),
    }
    b2_eni = ec2.describe_instances(InstanceIds=[instances["b2"]])["Reservations"][0]["Instances"][
        0
    ]["NetworkInterfaces"][0]["NetworkInterfaceId"]
    ec2.assign_private_ip_addresses(NetworkInterfaceId=b2_eni, Ipv4Prefixes=[PREFIX])
    pod_eni = ec2.create_network_interface(
        SubnetId=s1, PrivateIpAddress=POD_PRIMARY, Groups=[groups["pods_b"]]
    )["NetworkInterface"]["NetworkInterfaceId"]
    ec2.assign_private_ip_addresses(NetworkInterfaceId=pod_eni, PrivateIpAddresses=[POD_SECONDARY])
    v6_pod = str(ipaddress.ip_network(subnet_ipv6)[9])
    ec2.create_network_interface(
        SubnetId=s1, Groups=[groups["pods_b"]], Ipv6Addresses=[{"Ipv6Address": v6_pod}]
    )

    def nlb(name: str, sgs: list[str], tags: dict[str, str], **extra: Any) -> str:
        if sgs:
            extra["SecurityGroups"] = sgs
        return elbv2.create_load_balancer(
            Name=name,
            Subnets=[s1, s2],
            Type="network",
            Scheme="internal",
            Tags=[{"Key": k, "Value": v} for k, v in tags.items()],
            **extra,
        )["LoadBalancers"][0]["LoadBalancerArn"]

    lbs = {
        "a-web": nlb("a-web", [groups["front_a"], groups["back_a"]], {"cluster": "a"}),
        "b-web": nlb("b-web", [groups["front_b"], groups["back_b"]], {"cluster": "b"}),
        "legacy": nlb("legacy", [], {"legacy": "true"}),
        "dual": nlb("dual", [], {"legacy": "true"}, IpAddressType="dualstack"),
    }

    def serve(
        lb: str,
        name: str,
        kind: str,
        port: int,
        targets: list[dict[str, Any]],
        family: str = "ipv4",
    ) -> str:
        arn = elbv2.create_target_group(
            Name=name,
            Protocol="TCP",
            Port=port,
            VpcId=vpc_id,
            TargetType=kind,  # type: ignore[arg-type]
            IpAddressType=family,  # type: ignore[arg-type]
        )["TargetGroups"][0]["TargetGroupArn"]
        elbv2.create_listener(
            LoadBalancerArn=lbs[lb],
            Protocol="TCP",
            Port=port,
            DefaultActions=[{"Type": "forward", "TargetGroupArn": arn}],
        )
        elbv2.register_targets(TargetGroupArn=arn, Targets=targets)  # type: ignore[arg-type]
        return arn

    def preserve_off(arn: str) -> None:
        elbv2.modify_target_group_attributes(
            TargetGroupArn=arn, Attributes=[{"Key": "preserve_client_ip.enabled", "Value": "false"}]
        )

    serve("a-web", "a-nodes", "instance", 30080, [{"Id": instances["a1"]}])
    serve("b-web", "b-pods", "ip", 8080, [{"Id": POD_SECONDARY}, {"Id": PREFIX_POD}])
    serve("b-web", "b-nodes", "instance", 30090, [{"Id": instances[n]} for n in ("b1", "b_bad")])
    serve("legacy", "legacy-inst", "instance", 30500, [{"Id": instances["a1"]}])
    preserve_off(serve("legacy", "legacy-ip", "ip", 9000, [{"Id": POD_PRIMARY}]))
    preserve_off(serve("dual", "dual-ip", "ip", 9100, [{"Id": v6_pod}], "ipv6"))
    return ClustersWorld(vpc_id, vpc_ipv6, subnet_ipv6, groups, instances, lbs, v6_pod)
