"""The planner's read through the inventory index, on moto (adapters/index_reads.py): what an
event reads of EC2 once the schedule has filled the index (docs/architecture.md, "The
inventory index"). The schedule scans the account for the groups that hold our rules and
keeps them; an event takes them, and the interfaces of targets the index knows, from there,
and reads fresh only a target it does not know and an instance whose own groups changed."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from integration.live_plan.world import World, build_world
from sg_reconciler.adapters.index_reads import read_through_index
from sg_reconciler.core.inventory_index import IndexedRead, IndexView, load_balancer_of, owned_of
from sg_reconciler.core.rules import DEFAULT_OWNER, OWNER_TAG_KEY
from sg_reconciler.core.scope import Scope
from sg_reconciler.policy import parse_policy

NOW = 1_800_000_000.0
PERIOD = 43_200.0
Call = tuple[str, dict[str, Any]]


@pytest.fixture
def world(aws: tuple[Any, Any]) -> World:
    return build_world(*aws)


def read(
    aws: tuple[Any, Any], view: IndexView, scope: Scope | None, now: float = NOW
) -> IndexedRead:
    ec2, elbv2 = aws
    return read_through_index(
        ec2,
        elbv2,
        parse_policy(""),
        view,
        scope=scope,
        now=now,
        period_seconds=PERIOD,
        max_fresh=1_000,
    )


def scheduled_index(aws: tuple[Any, Any]) -> IndexView:
    """The index after the schedule's first run (it lists the account and reads all of it)."""
    return IndexView.of(read(aws, IndexView.of([]), None).fresh)


def api_calls(client: Any) -> list[Call]:
    """The client's calls from now on, with their parameters."""
    calls: list[Call] = []
    lock = threading.Lock()

    def hook(model: Any, params: dict[str, Any], **_: Any) -> None:
        with lock:
            calls.append((model.name, params))

    client.meta.events.register("before-parameter-build", hook)
    return calls


def owned_scans(calls: list[Call]) -> int:
    """The account-wide scans for our rules (DescribeSecurityGroupRules by owner tag)."""
    return sum(
        1
        for name, params in calls
        if name == "DescribeSecurityGroupRules"
        and any(f["Name"].startswith("tag:") for f in params.get("Filters", []))
    )


def described_instances(calls: list[Call]) -> set[str]:
    return {
        i
        for name, params in calls
        if name == "DescribeInstances"
        for f in params.get("Filters", [])
        if f["Name"] == "instance-id"
        for i in f["Values"]
    }


def test_the_schedule_keeps_the_groups_that_hold_our_rules(
    aws: tuple[Any, Any], world: World
) -> None:
    view = scheduled_index(aws)
    owned = owned_of(view.owned[DEFAULT_OWNER])
    g = world.groups
    assert owned == {g["nodes_a"]: {g["backend"]}, g["orphan"]: {g["backend"]}}


def test_an_event_takes_our_groups_and_its_known_targets_from_the_index(
    aws: tuple[Any, Any], world: World
) -> None:
    # Given the index the schedule filled
    view = scheduled_index(aws)
    calls = api_calls(aws[0])
    # When a target the index knows is registered on web-tcp
    i = world.instances
    found = read(
        aws,
        view,
        Scope(
            target_group_arns=frozenset({world.target_groups["web-tcp"]}),
            instance_ids=frozenset({i["b1"]}),
        ),
    )
    # Then EC2 is neither scanned for our rules nor asked for the target's interface, and the
    # orphan group, which only the scan finds, is still read (its stale rule can go)
    assert owned_scans(calls) == 0
    assert described_instances(calls) == set()
    assert world.groups["orphan"] in found.inventory.owned_groups
    assert {n for n, _ in calls} == {"DescribeSecurityGroupRules", "DescribeSecurityGroups"}


def test_a_new_node_and_an_instance_whose_groups_changed_are_read_fresh(
    aws: tuple[Any, Any], world: World
) -> None:
    ec2, elbv2 = aws
    view = scheduled_index(aws)
    # Given a node launched since, registered on web-tcp
    subnet = world.subnet_ids[1]
    node = ec2.run_instances(
        ImageId="ami-12c6146b",
        MinCount=1,
        MaxCount=1,
        SecurityGroupIds=[world.groups["nodes_b"]],
        SubnetId=subnet,
    )["Instances"][0]["InstanceId"]
    tcp = world.target_groups["web-tcp"]
    elbv2.register_targets(TargetGroupArn=tcp, Targets=[{"Id": node, "Port": 31080}])
    calls = api_calls(ec2)
    # When its event is read
    found = read(
        aws, view, Scope(target_group_arns=frozenset({tcp}), instance_ids=frozenset({node}))
    )
    # Then only the new node's interface is described, and the node's group is known
    assert described_instances(calls) == {node}
    read_tcp = next(tg for tg in found.inventory.target_groups if tg.arn == tcp)
    assert {t.target_id: t.group_ids for t in read_tcp.targets}[node] == (world.groups["nodes_b"],)
    # And an instance the index knows whose groups an event changed is described again
    calls.clear()
    a1 = world.instances["a1"]
    read(
        aws,
        view,
        Scope(
            group_ids=frozenset({world.groups["nodes_a"]}),
            instance_ids=frozenset({a1}),
            regrouped_instances=frozenset({a1}),
        ),
    )
    assert described_instances(calls) == {a1}


def test_an_event_scans_for_our_groups_when_the_index_s_word_is_older_than_the_period(
    aws: tuple[Any, Any], world: World
) -> None:
    view = scheduled_index(aws)
    calls = api_calls(aws[0])
    later = NOW + PERIOD + 60
    found = read(
        aws, view, Scope(target_group_arns=frozenset({world.target_groups["web-tcp"]})), later
    )
    assert owned_scans(calls) == 1
    assert [e.kind for e in found.fresh].count("owned") == 1  # kept again, with its new time


def test_the_schedule_scans_again_and_finds_a_group_that_got_our_rule_since(
    aws: tuple[Any, Any], world: World
) -> None:
    # Given the index the schedule filled, then a rule of ours added to nodes-b
    ec2 = aws[0]
    view = scheduled_index(aws)
    g = world.groups
    ec2.authorize_security_group_ingress(
        GroupId=g["nodes_b"],
        IpPermissions=[
            {
                "IpProtocol": "tcp",
                "FromPort": 31999,
                "ToPort": 31999,
                "UserIdGroupPairs": [{"GroupId": g["backend"]}],
            }
        ],
        TagSpecifications=[
            {
                "ResourceType": "security-group-rule",
                "Tags": [{"Key": OWNER_TAG_KEY, "Value": DEFAULT_OWNER}],
            }
        ],
    )
    calls = api_calls(ec2)
    # When the schedule runs (its event's scope is the whole account)
    found = read(aws, view, Scope.everything(), NOW + 900)
    # Then it scans, and keeps what it found for the events after it
    assert owned_scans(calls) == 1
    kept = next(e for e in found.fresh if e.kind == "owned")
    assert owned_of(kept)[g["nodes_b"]] == {g["backend"]}


def test_the_schedule_reads_the_tags_of_a_slice_and_takes_the_rest_from_the_index(
    aws: tuple[Any, Any], world: World
) -> None:
    # Given the index the schedule filled, then a tag added to every load balancer with its
    # event lost
    elbv2 = aws[1]
    view = scheduled_index(aws)
    for arn in world.load_balancers.values():
        elbv2.add_tags(ResourceArns=[arn], Tags=[{"Key": "team", "Value": "edge"}])
    calls = api_calls(elbv2)
    # When the schedule runs 15 minutes later (a 12-hour period: 1 of the 4 a run)
    found = read(aws, view, Scope.everything(), NOW + 900)
    # Then it reads the tags of one load balancer, finds them changed and keeps them; the
    # others' tags come from the index until their turn
    asked = [a for name, p in calls if name == "DescribeTags" for a in p["ResourceArns"]]
    assert len(asked) == 1, asked
    assert found.drift == [f"{asked[0]}: its tags changed"]
    others = [lb for lb in found.inventory.load_balancers if lb.arn not in asked]
    assert others and all(("team", "edge") not in lb.tags for lb in others)
    rewritten = [load_balancer_of(e) for e in found.fresh if e.kind == "lb"]
    assert [lb.arn for lb in rewritten] == asked
    assert ("team", "edge") in rewritten[0].tags
