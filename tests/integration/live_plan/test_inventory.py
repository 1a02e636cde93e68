"""The inventory reader against moto: what it reads, how many calls, and groups that vanish."""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from integration.live_plan.world import MANAGED, POD_IPS, World, build_world
from sg_reconciler.adapters import inventory as inventory_module
from sg_reconciler.adapters.inventory import AccountInventory, read_inventory, split_on_missing
from sg_reconciler.app.live_plan import LivePlan, compute_live_plan
from sg_reconciler.core.plan import Plan
from sg_reconciler.policy import parse_policy

from benchmarks.call_estimate import WorldSize, describe_call_estimate

REGION = "us-east-1"


@pytest.fixture
def world(aws: tuple[Any, Any]) -> World:
    return build_world(*aws)


def count_calls(*clients: Any) -> Counter[str]:
    """Count API calls per operation name through botocore's event hooks."""
    calls: Counter[str] = Counter()
    lock = threading.Lock()  # target health is read by a few threads

    def hook(model: Any, **_: Any) -> None:
        with lock:
            calls[model.name] += 1

    for client in clients:
        client.meta.events.register("before-call", hook)
    return calls


def test_reads_managed_load_balancers_targets_and_groups(
    aws: tuple[Any, Any], world: World
) -> None:
    ec2, elbv2 = aws
    inventory = read_inventory(ec2, elbv2, parse_policy(""))
    assert {lb.name for lb in inventory.load_balancers} == {"web", "dns", "legacy"}
    tgs = {tg.name: tg for tg in inventory.target_groups}
    assert set(tgs) == {"web-tcp", "web-tls", "dns", "legacy"}
    g, i = world.groups, world.instances
    tls = tgs["web-tls"]
    assert (tls.protocol, tls.port, tls.health_check_port) == ("TLS", 31443, "31081")
    assert {t.target_id: set(t.group_ids) for t in tls.targets} == {
        i["a1"]: {g["nodes_a"], g["extra"]},
        i["a2"]: {g["nodes_a"], g["extra"]},
    }
    dns = tgs["dns"]
    assert dns.target_type == "ip" and dns.protocol == "TCP_UDP"
    assert {t.target_id: (t.port, t.group_ids) for t in dns.targets} == {
        ip: (53, (g["pods"],)) for ip in POD_IPS
    }
    assert inventory.owned_groups == {g["nodes_a"], g["orphan"]}
    assert {r.rule_id for r in inventory.rules} >= {
        world.stale_rule_id,
        world.orphan_rule_id,
        world.ssh_rule_id,
    }
    assert not any(r.group_id == g["other_lb"] for r in inventory.rules)  # not a host


def delete_after_its_rules_are_read(ec2: Any, group_id: str) -> None:
    """Delete `group_id` just after the next read of rules by group id (a race with the read)."""
    deleter = boto3.client("ec2", region_name=REGION)
    armed = []

    def arm(params: dict[str, Any], **_: Any) -> None:
        if any(f["Name"] == "group-id" for f in params.get("Filters", [])):
            armed.append(True)

    def delete(**_: Any) -> None:
        if armed and armed.pop():
            deleter.delete_security_group(GroupId=group_id)

    ec2.meta.events.register("before-parameter-build.ec2.DescribeSecurityGroupRules", arm)
    ec2.meta.events.register("after-call.ec2.DescribeSecurityGroupRules", delete)


def default_live_plan(ec2: Any, elbv2: Any) -> LivePlan:
    """`plan --live` with an empty policy: the whole account, no narrowing."""
    parsed = parse_policy("")
    return compute_live_plan(AccountInventory(ec2, elbv2, parsed), parsed)


def test_a_group_deleted_mid_read_is_dropped_not_a_crash(
    aws: tuple[Any, Any], world: World
) -> None:
    ec2, elbv2 = aws
    doomed = world.groups["nodes_b"]
    delete_after_its_rules_are_read(ec2, doomed)
    live = default_live_plan(ec2, elbv2)
    assert isinstance(live.result, Plan)
    assert doomed not in live.groups
    assert all(r.group_id != doomed for r in live.desired + live.current)
    assert all(step.group_id != doomed for step in live.result.steps)
    # noted once, as what it is to the policy (the inventory's note and the desired state's
    # were two on one group)
    (note,) = [note for note in live.notes if doomed in note]
    assert note.startswith(f"{doomed} (target group destination) does not exist (deleted?)")
    assert world.groups["nodes_a"] in live.groups  # the rest is still planned


def test_a_whole_account_plan_notes_no_group_that_exists_as_missing(
    aws: tuple[Any, Any], world: World
) -> None:
    # Given every group of the world exists, and the plan reads the whole account (no narrowing)
    ec2, elbv2 = aws
    live = default_live_plan(ec2, elbv2)
    assert isinstance(live.result, Plan)
    # Then no note calls a group missing: the owned and target groups read are all found
    assert world.groups["orphan"] in live.groups and world.groups["nodes_a"] in live.groups
    assert [n for n in live.notes if "does not exist" in n or "not found" in n] == []


def test_an_owned_group_deleted_mid_read_is_noted_once_as_read_for_its_rules(
    aws: tuple[Any, Any], world: World
) -> None:
    # Given the group that holds only a stale owned rule (no target's, no static rule's) goes
    # away just after its rules were read
    ec2, elbv2 = aws
    doomed = world.groups["orphan"]
    delete_after_its_rules_are_read(ec2, doomed)
    live = default_live_plan(ec2, elbv2)

    # Then no step touches it, and one note names it, as a group read for its rules
    assert isinstance(live.result, Plan)
    assert all(step.group_id != doomed for step in live.result.steps)
    assert [n for n in live.notes if doomed in n] == [
        f"{doomed} (read for its rules) does not exist (deleted?): left out of the plan"
    ]


def test_a_missing_named_group_is_dropped(aws: tuple[Any, Any], world: World) -> None:
    ec2, elbv2 = aws
    named = f"[{world.groups['nodes_b']}, sg-0000000000000dead]"
    policy = parse_policy(f"destination: {{kind: named_groups, group_ids: {named}}}")
    live = compute_live_plan(AccountInventory(ec2, elbv2, policy), policy)
    assert {r.group_id for r in live.desired} == {world.groups["nodes_b"]}
    assert any("sg-0000000000000dead" in note for note in live.notes)


def test_a_target_group_deleted_mid_read_is_skipped(aws: tuple[Any, Any], world: World) -> None:
    ec2, elbv2 = aws
    legacy_tg = world.target_groups["legacy"]
    other = boto3.client("elbv2", region_name=REGION)

    def delete_legacy(model: Any, params: dict[str, Any], **_: Any) -> None:
        if model.name == "DescribeTargetHealth" and params.get("TargetGroupArn") == legacy_tg:
            listeners = other.describe_listeners(LoadBalancerArn=world.load_balancers["legacy"])
            for listener in listeners["Listeners"]:
                other.delete_listener(ListenerArn=listener["ListenerArn"])
            other.delete_target_group(TargetGroupArn=legacy_tg)

    elbv2.meta.events.register("before-parameter-build", delete_legacy)
    inventory = read_inventory(ec2, elbv2, parse_policy(""))
    assert {tg.name for tg in inventory.target_groups} == {"web-tcp", "web-tls", "dns"}
    assert any("legacy vanished" in note for note in inventory.notes)


def test_split_on_missing_isolates_missing_ids() -> None:
    def fetch(batch: list[str]) -> list[str]:
        if any(item.startswith("gone") for item in batch):
            raise ClientError({"Error": {"Code": "InvalidGroup.NotFound"}}, "DescribeX")
        return [item.upper() for item in batch]

    dropped: list[str] = []
    items = ["a", "gone-1", "b", "c", "gone-2", "d"]
    codes = frozenset({"InvalidGroup.NotFound"})
    assert split_on_missing(fetch, items, codes, dropped) == ["A", "B", "C", "D"]
    assert dropped == ["gone-1", "gone-2"]

    def denied(batch: list[str]) -> list[str]:
        raise ClientError({"Error": {"Code": "UnauthorizedOperation"}}, "DescribeX")

    with pytest.raises(ClientError):
        split_on_missing(denied, items, codes, [])


def test_describe_calls_grow_with_pages_not_objects(
    aws: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given batches scaled down (8 ARNs per describe_tags, 25 values per filter) so that a
    # small world spans several batches: 12 managed NLBs, 3 unmanaged, 60 instance targets
    # and 20 ip targets.
    monkeypatch.setattr(inventory_module, "TAG_CHUNK", 8)
    monkeypatch.setattr(inventory_module, "FILTER_CHUNK", 25)
    ec2, elbv2 = aws
    vpc = ec2.create_vpc(CidrBlock="10.1.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.1.0.0/20", AvailabilityZone="us-east-1a")
    subnet_id = subnet["Subnet"]["SubnetId"]
    nodes = ec2.create_security_group(GroupName="n", Description="n", VpcId=vpc)["GroupId"]
    pods = ec2.create_security_group(GroupName="p", Description="p", VpcId=vpc)["GroupId"]
    instances = [
        i["InstanceId"]
        for i in ec2.run_instances(
            ImageId="ami-12c6146b",
            MinCount=60,
            MaxCount=60,
            SecurityGroupIds=[nodes],
            SubnetId=subnet_id,
        )["Instances"]
    ]
    pod_ips = [f"10.1.1.{10 + n}" for n in range(20)]
    for ip in pod_ips:
        ec2.create_network_interface(SubnetId=subnet_id, PrivateIpAddress=ip, Groups=[pods])
    managed, ip_tgs = 12, (0, 6)
    for n in range(managed + 3):
        sg = ec2.create_security_group(GroupName=f"lb{n}", Description="lb", VpcId=vpc)["GroupId"]
        arn = elbv2.create_load_balancer(
            Name=f"lb{n}",
            Subnets=[subnet_id],
            Type="network",
            SecurityGroups=[sg],
            **({"Tags": MANAGED} if n < managed else {}),
        )["LoadBalancers"][0]["LoadBalancerArn"]
        tg = elbv2.create_target_group(
            Name=f"tg{n}",
            Protocol="TCP",
            Port=30000 + n,
            VpcId=vpc,
            TargetType="ip" if n in ip_tgs else "instance",
        )["TargetGroups"][0]["TargetGroupArn"]
        elbv2.create_listener(
            LoadBalancerArn=arn,
            Protocol="TCP",
            Port=80,
            DefaultActions=[{"Type": "forward", "TargetGroupArn": tg}],
        )
        if n in ip_tgs:
            targets = pod_ips[:10] if n == 0 else pod_ips[10:]
        else:  # the managed instance groups share out the 60 instances
            k = n - sum(1 for i in ip_tgs if i < n)
            targets = instances[k * 6 : k * 6 + 6] if n < managed else instances[:5]
        elbv2.register_targets(TargetGroupArn=tg, Targets=[{"Id": t} for t in targets])
    calls = count_calls(ec2, elbv2)

    # When the reconciler reads everything.
    inventory = read_inventory(ec2, elbv2, parse_policy(""))

    # Then the calls match the page-size estimate, and only target health is per object.
    kinds = Counter(tg.target_type for tg in inventory.target_groups for _ in tg.targets)
    assert len(inventory.load_balancers) == managed
    assert kinds == {"instance": 60, "ip": 20}
    expected = describe_call_estimate(
        WorldSize(
            load_balancers=managed + 3,
            managed_load_balancers=managed,
            target_groups=managed + 3,
            managed_target_groups=managed,
            instances=60,
            ip_targets=20,
            rule_groups=2,  # nodes and pods host rules
            rules=0,
            groups=2 + managed,  # and the load balancers' groups are described
            owned_rules=0,
        )
    )
    assert expected["DescribeTags"] == 2 and expected["DescribeInstances"] == 3
    assert calls.pop("DescribeTargetHealth") == expected["DescribeTargetHealth"] == managed
    batched = {op: n for op, n in expected.items() if n and op.startswith("Describe")}
    del batched["DescribeTargetHealth"]
    assert dict(calls) == batched
    assert sum(calls.values()) == expected["batched_total"] == 11  # for 144 objects
