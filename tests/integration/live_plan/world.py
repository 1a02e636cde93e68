"""A small AWS world for live-read tests, built with boto3 clients (moto or a moto server).

Shared by the inventory, reconcile, CLI, planner-handler and workflow tests. The world:

- VPC with two subnets; groups `nlb_web`, `nlb_dns` (load balancers' own), `backend` (a shared
  backend group on both managed NLBs), `nodes_a` and `nodes_b` (node groups, tagged with
  the cluster tag), `extra` (a second, untagged group on the nodes of `nodes_a`), `pods`
  (interfaces of ip targets, cluster-tagged) and `orphan` (holds only a stale owned rule).
- Instances `a1`, `a2` in nodes_a + extra; `b1`, `b2` in nodes_b.
- NLB `web` (managed, groups nlb_web + backend): target group `web-tcp` (instance, TCP 31080,
  health check on the traffic port, all four nodes) and `web-tls` (instance, TLS 31443,
  health check port 31081, nodes a1, a2).
- NLB `dns` (managed, groups nlb_dns + backend): target group `dns` (ip, TCP_UDP 53, health
  check TCP 8080) with two pod addresses whose interfaces are in `pods`.
- NLB `legacy` (managed, no security groups) and NLB `other` (not managed, a target group
  on port 30999 of b1, b2): neither yields rules.
- Existing rules: nodes_a has an unmanaged SSH rule and an owned stale rule (tcp 30000-30100
  from backend); orphan has an owned rule (tcp 32000 from backend) that nothing desires.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sg_reconciler.app.live_plan import LivePlan, Rule, rule_to_dict
from sg_reconciler.core.plan import Authorize, Modify, Plan, Revoke
from sg_reconciler.core.planner import Limits
from sg_reconciler.core.policy import Policy
from sg_reconciler.core.rules import DEFAULT_OWNER, OWNER_TAG_KEY
from sg_reconciler.core.safety import check_plan

if TYPE_CHECKING:
    from mypy_boto3_ec2 import EC2Client
    from mypy_boto3_elbv2 import ElasticLoadBalancingv2Client

CLUSTER_TAG = "kubernetes.io/cluster/demo"
Row = tuple[str, str, int, int, str]
# Desired rules of the default policy (each load balancer's own groups as sources, every
# group of each target's interface as destination, budget 3, health checks), as
# (host role, protocol, from port, to port, peer role).
EXPECTED_DEFAULT_DESIRED: frozenset[Row] = frozenset(
    {
        *(
            (host, "tcp", lo, hi, peer)
            for host in ("nodes_a", "extra")  # web-tcp and web-tls (+ health check 31081)
            for peer in ("nlb_web", "backend")
            for lo, hi in ((31080, 31081), (31443, 31443))
        ),
        *(("nodes_b", "tcp", 31080, 31080, peer) for peer in ("nlb_web", "backend")),
        *(
            ("pods", protocol, port, port, peer)  # dns: TCP_UDP 53, health check TCP 8080
            for peer in ("nlb_dns", "backend")
            for protocol, port in (("tcp", 53), ("udp", 53), ("tcp", 8080))
        ),
    }
)
MANAGED = [{"Key": "sg-reconciler/managed", "Value": "true"}]
POD_IPS = ("10.0.1.50", "10.0.2.50")


@dataclass
class World:
    vpc_id: str
    subnet_ids: list[str]
    groups: dict[str, str]  # role -> group id
    instances: dict[str, str]  # name -> instance id
    load_balancers: dict[str, str]  # name -> ARN
    target_groups: dict[str, str]  # name -> ARN
    pod_enis: list[str] = field(default_factory=list)
    stale_rule_id: str = ""
    orphan_rule_id: str = ""
    ssh_rule_id: str = ""


def _group(ec2: EC2Client, vpc_id: str, name: str, tags: dict[str, str] | None = None) -> str:
    kwargs: dict[str, Any] = {}
    if tags:
        kwargs["TagSpecifications"] = [
            {
                "ResourceType": "security-group",
                "Tags": [{"Key": k, "Value": v} for k, v in tags.items()],
            }
        ]
    return ec2.create_security_group(
        GroupName=name, Description=f"test group {name}", VpcId=vpc_id, **kwargs
    )["GroupId"]


def _owned_rule(ec2: EC2Client, group_id: str, lo: int, hi: int, peer: str, owner: str) -> str:
    response = ec2.authorize_security_group_ingress(
        GroupId=group_id,
        IpPermissions=[
            {
                "IpProtocol": "tcp",
                "FromPort": lo,
                "ToPort": hi,
                "UserIdGroupPairs": [{"GroupId": peer, "Description": f"{owner}: old"}],
            }
        ],
        TagSpecifications=[
            {
                "ResourceType": "security-group-rule",
                "Tags": [{"Key": OWNER_TAG_KEY, "Value": owner}],
            }
        ],
    )
    return response["SecurityGroupRules"][0]["SecurityGroupRuleId"]


def build_world(
    ec2: EC2Client, elbv2: ElasticLoadBalancingv2Client, owner: str = DEFAULT_OWNER
) -> World:
    """Create the world described in the module docstring and return its ids."""
    region = ec2.meta.region_name
    vpc_id = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    subnets = [
        ec2.create_subnet(VpcId=vpc_id, CidrBlock=cidr, AvailabilityZone=f"{region}{az}")["Subnet"][
            "SubnetId"
        ]
        for cidr, az in (("10.0.1.0/24", "a"), ("10.0.2.0/24", "b"))
    ]
    cluster = {CLUSTER_TAG: "owned"}
    groups = {
        "nlb_web": _group(ec2, vpc_id, "nlb-web"),
        "nlb_dns": _group(ec2, vpc_id, "nlb-dns"),
        "backend": _group(ec2, vpc_id, "backend", {"elbv2.k8s.aws/resource": "backend-sg"}),
        "nodes_a": _group(ec2, vpc_id, "nodes-a", cluster),
        "nodes_b": _group(ec2, vpc_id, "nodes-b", cluster),
        "extra": _group(ec2, vpc_id, "extra"),
        "pods": _group(ec2, vpc_id, "pods", cluster),
        "orphan": _group(ec2, vpc_id, "orphan"),
        "other_lb": _group(ec2, vpc_id, "other-lb"),
    }
    image = "ami-12c6146b"  # one of moto's stock AMIs
    instances: dict[str, str] = {}
    for names, group_ids, subnet in (
        (("a1", "a2"), [groups["nodes_a"], groups["extra"]], subnets[0]),
        (("b1", "b2"), [groups["nodes_b"]], subnets[1]),
    ):
        reservation = ec2.run_instances(
            ImageId=image,
            MinCount=len(names),
            MaxCount=len(names),
            SecurityGroupIds=group_ids,
            SubnetId=subnet,
        )
        for name, instance in zip(names, reservation["Instances"], strict=True):
            instances[name] = instance["InstanceId"]
    pod_enis = [
        ec2.create_network_interface(SubnetId=subnet, PrivateIpAddress=ip, Groups=[groups["pods"]])[
            "NetworkInterface"
        ]["NetworkInterfaceId"]
        for subnet, ip in zip(subnets, POD_IPS, strict=True)
    ]

    def nlb(name: str, security_groups: list[str], tags: list[Any]) -> str:
        kwargs: dict[str, Any] = {"SecurityGroups": security_groups} if security_groups else {}
        if tags:
            kwargs["Tags"] = tags
        return elbv2.create_load_balancer(
            Name=name, Subnets=subnets, Type="network", Scheme="internal", **kwargs
        )["LoadBalancers"][0]["LoadBalancerArn"]

    lbs = {
        "web": nlb("web", [groups["nlb_web"], groups["backend"]], MANAGED),
        "dns": nlb("dns", [groups["nlb_dns"], groups["backend"]], MANAGED),
        "legacy": nlb("legacy", [], MANAGED),
        "other": nlb("other", [groups["other_lb"]], []),
    }

    def target_group(name: str, protocol: str, port: int, kind: str, **health: Any) -> str:
        return elbv2.create_target_group(
            Name=name,
            Protocol=protocol,  # type: ignore[arg-type]
            Port=port,
            VpcId=vpc_id,
            TargetType=kind,  # type: ignore[arg-type]
            **health,
        )["TargetGroups"][0]["TargetGroupArn"]

    tgs = {
        "web-tcp": target_group("web-tcp", "TCP", 31080, "instance"),
        "web-tls": target_group(
            "web-tls", "TLS", 31443, "instance", HealthCheckPort="31081", HealthCheckProtocol="TCP"
        ),
        "dns": target_group(
            "dns", "TCP_UDP", 53, "ip", HealthCheckPort="8080", HealthCheckProtocol="TCP"
        ),
        "legacy": target_group("legacy", "TCP", 30500, "instance"),
        "other": target_group("other", "TCP", 30999, "instance"),
    }
    for lb, tg, port, protocol in (
        ("web", "web-tcp", 80, "TCP"),
        ("web", "web-tls", 443, "TCP"),
        ("dns", "dns", 53, "TCP_UDP"),
        ("legacy", "legacy", 80, "TCP"),
        ("other", "other", 80, "TCP"),
    ):
        elbv2.create_listener(
            LoadBalancerArn=lbs[lb],
            Protocol=protocol,  # type: ignore[arg-type]
            Port=port,
            DefaultActions=[{"Type": "forward", "TargetGroupArn": tgs[tg]}],
        )
    every_node = [instances[n] for n in ("a1", "a2", "b1", "b2")]
    for tg, ids in (
        ("web-tcp", every_node),
        ("web-tls", [instances["a1"], instances["a2"]]),
        ("legacy", every_node),
        ("other", [instances["b1"], instances["b2"]]),
    ):
        elbv2.register_targets(TargetGroupArn=tgs[tg], Targets=[{"Id": i} for i in ids])
    elbv2.register_targets(
        TargetGroupArn=tgs["dns"], Targets=[{"Id": ip, "Port": 53} for ip in POD_IPS]
    )

    ssh = ec2.authorize_security_group_ingress(
        GroupId=groups["nodes_a"],
        IpPermissions=[
            {
                "IpProtocol": "tcp",
                "FromPort": 22,
                "ToPort": 22,
                "IpRanges": [{"CidrIp": "10.0.0.0/8"}],
            }
        ],
    )["SecurityGroupRules"][0]["SecurityGroupRuleId"]
    stale = _owned_rule(ec2, groups["nodes_a"], 30000, 30100, groups["backend"], owner)
    orphan = _owned_rule(ec2, groups["orphan"], 32000, 32000, groups["backend"], owner)
    return World(
        vpc_id=vpc_id,
        subnet_ids=subnets,
        groups=groups,
        instances=instances,
        load_balancers=lbs,
        target_groups=tgs,
        pod_enis=pod_enis,
        stale_rule_id=stale,
        orphan_rule_id=orphan,
        ssh_rule_id=ssh,
    )


def rows(rules: list[Rule], world: World) -> set[Row]:
    """Rules as (host role, protocol, from port, to port, peer role), for readable asserts."""
    role = {group_id: name for name, group_id in world.groups.items()}
    return {
        (role[r.group_id], r.key.protocol, r.key.from_port, r.key.to_port, role[r.key.peer.value])
        for r in rules
    }


def apply_plan(ec2: EC2Client, plan: Plan, owner: str = DEFAULT_OWNER) -> None:
    """A minimal executor for tests (the real one is the state machine): calls in plan order.

    Only group-referencing rules and no Modify steps: what the world's plans contain.
    """
    tags = [
        {"ResourceType": "security-group-rule", "Tags": [{"Key": OWNER_TAG_KEY, "Value": owner}]}
    ]
    for step in plan.steps:
        if isinstance(step, Authorize):
            ec2.authorize_security_group_ingress(
                GroupId=step.group_id,
                IpPermissions=[_permission(r) for r in step.rules],
                TagSpecifications=tags,  # type: ignore[arg-type]
            )
        elif isinstance(step, Revoke):
            ec2.revoke_security_group_ingress(
                GroupId=step.group_id, SecurityGroupRuleIds=list(step.rule_ids)
            )
        else:
            assert not isinstance(step, Modify), "the test world has quota to spare"


def _permission(rule: Rule) -> Any:
    doc = rule_to_dict(rule, with_identity=False)
    pair = {"GroupId": doc["ReferencedGroupInfo"]["GroupId"], "Description": doc["Description"]}
    return {
        "IpProtocol": doc["IpProtocol"],
        "FromPort": doc["FromPort"],
        "ToPort": doc["ToPort"],
        "UserIdGroupPairs": [pair],
    }


def assert_safe(live: LivePlan, policy: Policy) -> Plan:
    """The live plan is a plan, and the planner's own checker finds it safe."""
    assert isinstance(live.result, Plan), live.result
    violations = check_plan(
        live.result, live.current, live.desired, policy.owner, Limits(policy.rule_limit)
    )
    assert violations == []
    return live.result
