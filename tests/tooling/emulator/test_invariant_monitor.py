"""The invariant monitor judges every real state moto passes through, as the planner's checker does."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from botocore.exceptions import ClientError
from hypothesis import given
from hypothesis import strategies as st
from sg_reconciler.core.plan import Authorize, Modify, Plan, Revoke
from sg_reconciler.core.planner import Limits, make_plan
from sg_reconciler.core.rules import (
    DEFAULT_OWNER,
    OWNER_TAG_KEY,
    Peer,
    Rule,
    RuleKey,
    ingress_rules,
)
from sg_reconciler_tools.local import Fault, FaultInjector, InvariantMonitor, LocalRuntime

OWNED = [
    {
        "ResourceType": "security-group-rule",
        "Tags": [{"Key": OWNER_TAG_KEY, "Value": DEFAULT_OWNER}],
    }
]
_names = itertools.count()


class Groups:
    """Fresh groups in one VPC of the shared runtime, and small EC2 helpers."""

    def __init__(self, runtime: LocalRuntime) -> None:
        self.ec2: Any = runtime.clients.ec2  # untyped: the tests pass plain dicts
        self.vpc = self.ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
        self.lb = self.new("lb")

    def new(self, prefix: str = "node") -> str:
        name = f"{prefix}-{next(_names)}"
        created = self.ec2.create_security_group(GroupName=name, Description=name, VpcId=self.vpc)
        return str(created["GroupId"])

    def authorize(self, group: str, rule: Rule, *, owned: bool = True) -> str:
        tags = {"TagSpecifications": OWNED} if owned else {}
        response = self.ec2.authorize_security_group_ingress(
            GroupId=group,
            IpPermissions=[permission(rule)],
            **tags,
        )
        return str(response["SecurityGroupRules"][0]["SecurityGroupRuleId"])

    def revoke(self, group: str, *rule_ids: str) -> None:
        self.ec2.revoke_security_group_ingress(GroupId=group, SecurityGroupRuleIds=list(rule_ids))

    def rules(self, group: str) -> list[Rule]:
        docs = self.ec2.describe_security_group_rules(
            Filters=[{"Name": "group-id", "Values": [group]}]
        )["SecurityGroupRules"]
        return ingress_rules(docs, "describe")


def tcp(group: str, low: int, high: int, peer: Peer, description: str = "") -> Rule:
    return Rule(RuleKey(group, "tcp", low, high, peer), description)


def permission(rule: Rule) -> dict[str, Any]:
    """The IpPermission that creates `rule` (the test's own tiny adapter)."""
    key = rule.key
    doc: dict[str, Any] = {"IpProtocol": key.protocol}
    if key.protocol != "-1":
        doc.update(FromPort=key.from_port, ToPort=key.to_port)
    text = {"Description": rule.description} if rule.description else {}
    if key.peer.kind == "cidr4":
        doc["IpRanges"] = [{"CidrIp": key.peer.value, **text}]
    elif key.peer.kind == "cidr6":
        doc["Ipv6Ranges"] = [{"CidrIpv6": key.peer.value, **text}]
    elif key.peer.kind == "group":
        doc["UserIdGroupPairs"] = [{"GroupId": key.peer.value, **text}]
    else:
        doc["PrefixListIds"] = [{"PrefixListId": key.peer.value, **text}]
    return doc


@pytest.fixture(scope="module")
def groups(runtime: LocalRuntime) -> Groups:
    return Groups(runtime)


def test_make_before_break_keeps_every_invariant(groups: Groups) -> None:
    # Given the node group's owned rule for NodePorts 31000-32000 from the load balancer
    node, lb = groups.new(), Peer("group", groups.lb)
    old_id = groups.authorize(node, tcp(node, 31000, 32000, lb))
    wider = tcp(node, 31000, 32500, lb)

    # When the rule grows authorize-first
    with InvariantMonitor(groups.ec2, [node], None, [wider]) as monitor:
        groups.authorize(node, wider)
        groups.revoke(node, old_id)

    # Then both intermediate states were safe
    assert monitor.summary() == "2 snapshots, 0 violations"
    assert [s.operation for s in monitor.snapshots] == [
        "AuthorizeSecurityGroupIngress",
        "RevokeSecurityGroupIngress",
    ]
    assert {r.key for r in monitor.last.rules} == {wider.key}
    monitor.assert_clean()


def test_revoke_first_loses_traffic_in_between(groups: Groups) -> None:
    node, lb = groups.new(), Peer("group", groups.lb)
    old_id = groups.authorize(node, tcp(node, 31000, 32000, lb))
    wider = tcp(node, 31000, 32500, lb)

    with InvariantMonitor(groups.ec2, [node], None, [wider]) as monitor:
        groups.revoke(node, old_id)  # the dangerous order of issue #3639
        groups.authorize(node, wider)

    assert monitor.summary() == "2 snapshots, 1 violations"
    (violation,) = monitor.violations
    assert (violation.snapshot, violation.operation, violation.invariant) == (
        1,
        "RevokeSecurityGroupIngress",
        "1 no loss",
    )
    assert violation.traffic is not None
    assert violation.traffic.allows(node, Peer("group", groups.lb), 6, 31500)
    with pytest.raises(AssertionError, match="1 no loss"):
        monitor.assert_clean()


def test_traffic_is_judged_semantically_not_rule_by_rule(groups: Groups) -> None:
    # Two halves allow exactly what the one desired rule allows: no loss, no exposure.
    node, lb = groups.new(), Peer("group", groups.lb)
    old_id = groups.authorize(node, tcp(node, 31000, 32000, lb))
    with InvariantMonitor(groups.ec2, [node], None, [tcp(node, 31000, 32500, lb)]) as monitor:
        groups.authorize(node, tcp(node, 31000, 31999, lb))
        groups.authorize(node, tcp(node, 32000, 32500, lb))
        groups.revoke(node, old_id)
    assert monitor.summary() == "3 snapshots, 0 violations"


def test_allowing_more_than_old_or_new_is_over_exposure(groups: Groups) -> None:
    node = groups.new()
    vpn = Peer("cidr4", "10.1.0.0/16")
    groups.authorize(node, tcp(node, 443, 443, vpn))
    with InvariantMonitor(groups.ec2, [node], None, [tcp(node, 443, 443, vpn)]) as monitor:
        groups.authorize(node, tcp(node, 443, 443, Peer("cidr4", "10.0.0.0/8")))
    (violation,) = monitor.violations
    assert violation.invariant == "2 no over-exposure"
    assert violation.traffic is not None
    assert violation.traffic.allows(node, Peer("cidr4", "10.200.0.1/32"), 6, 443)
    assert not violation.traffic.allows(node, Peer("cidr4", "10.1.0.1/32"), 6, 443)  # in OLD


def test_the_states_seen_can_be_judged_again_against_a_desired_state_known_later(
    groups: Groups,
) -> None:
    # Given a run watched against a NEW that lacks what the run's own plan wanted
    node, lb = groups.new(), Peer("group", groups.lb)
    old_id = groups.authorize(node, tcp(node, 31000, 31000, lb))
    with InvariantMonitor(groups.ec2, [node], None, [tcp(node, 31000, 31000, lb)]) as monitor:
        groups.authorize(node, tcp(node, 31000, 32000, lb))
        groups.revoke(node, old_id)
    assert [v.invariant for v in monitor.violations] == ["2 no over-exposure"] * 2
    # When the same states are judged with the plan's desired rule in NEW, they are safe
    assert monitor.violations_against([tcp(node, 31000, 32000, lb)]) == []
    # And judged against another NEW, each state after the widening is judged on its own
    other = monitor.violations_against([tcp(node, 31000, 31500, lb)])
    assert [(v.snapshot, v.invariant) for v in other] == [
        (1, "2 no over-exposure"),
        (2, "2 no over-exposure"),
    ]
    assert other[0].traffic is not None and other[0].traffic.allows(node, lb, 6, 31501)
    assert not other[0].traffic.allows(node, lb, 6, 31500)


def test_touching_an_unmanaged_rule_breaks_ownership(groups: Groups) -> None:
    node = groups.new()
    ssh = tcp(node, 22, 22, Peer("cidr4", "10.2.0.0/16"), "bastion")
    ssh_id = groups.authorize(node, ssh, owned=False)
    with InvariantMonitor(groups.ec2, [node]) as monitor:  # NEW keeps the unmanaged rule
        groups.ec2.modify_security_group_rules(
            GroupId=node,
            SecurityGroupRules=[
                {
                    "SecurityGroupRuleId": ssh_id,
                    "SecurityGroupRule": {
                        "IpProtocol": "tcp",
                        "FromPort": 22,
                        "ToPort": 22,
                        "CidrIpv4": "10.2.0.0/16",
                        "Description": "renamed",
                    },
                }
            ],
        )
        groups.revoke(node, ssh_id)
    found = [(v.snapshot, v.invariant) for v in monitor.violations]
    assert found == [(1, "3 ownership"), (2, "1 no loss"), (2, "3 ownership")]


def test_a_write_that_applied_but_failed_is_still_recorded(groups: Groups) -> None:
    node = groups.new()
    rule = tcp(node, 80, 80, Peer("cidr4", "10.3.0.0/16"))
    with (
        InvariantMonitor(groups.ec2, [node], None, [rule]) as monitor,
        FaultInjector(
            Fault("ec2", "AuthorizeSecurityGroupIngress", "RequestLimitExceeded", count=1),
            Fault("ec2", "AuthorizeSecurityGroupIngress", "InternalError", mode="after"),
        ),
    ):
        for _ in range(2):
            with pytest.raises(ClientError):
                groups.authorize(node, rule)
        with pytest.raises(ClientError) as duplicate:
            groups.authorize(node, rule)
    # The before-fault never reached moto; the after-fault applied (moto itself succeeded, the
    # injected error came later); the duplicate reached moto and failed there.
    assert [(s.operation, s.error) for s in monitor.snapshots] == [
        ("AuthorizeSecurityGroupIngress", None),
        ("AuthorizeSecurityGroupIngress", "InvalidPermission.Duplicate"),
    ]
    assert duplicate.value.response["Error"]["Code"] == "InvalidPermission.Duplicate"
    assert [r.key for r in monitor.last.rules] == [rule.key]
    assert monitor.violations == []


def test_the_monitor_sees_writes_made_by_a_state_machine(
    groups: Groups, runtime: LocalRuntime
) -> None:
    node = groups.new()
    old_id = groups.authorize(node, tcp(node, 80, 80, Peer("cidr4", "10.4.0.0/16")))
    payload = {
        "group_id": node,
        "permissions": [permission(tcp(node, 80, 81, Peer("cidr4", "10.4.0.0/16")))],
        "old_rule_ids": [old_id],
    }
    desired = [tcp(node, 80, 81, Peer("cidr4", "10.4.0.0/16"))]
    with InvariantMonitor(runtime.clients.ec2, [node], None, desired) as monitor:
        result = runtime.run("RulesStateMachine", payload)
    assert result["status"] == "SUCCEEDED", result
    assert monitor.summary() == "2 snapshots, 0 violations"


def test_writes_to_other_groups_do_not_count_as_changes(groups: Groups) -> None:
    node, other = groups.new(), groups.new()
    with InvariantMonitor(groups.ec2, [node]) as monitor:
        groups.authorize(other, tcp(other, 22, 22, Peer("cidr4", "0.0.0.0/0")))
    assert monitor.summary() == "1 snapshots, 0 violations"
    assert monitor.last.rules == ()


def test_a_write_the_monitor_did_not_see_is_reported(groups: Groups) -> None:
    # A clean record must mean every write was judged: one made while the hook is not yet
    # listening (here, between the baseline and entering) is reported when monitoring ends
    node, ssh = groups.new(), Peer("cidr4", "10.0.0.0/8")
    unseen = InvariantMonitor(groups.ec2, [node], None, [tcp(node, 22, 22, ssh)])
    groups.authorize(node, tcp(node, 22, 22, ssh))
    with unseen:
        pass
    assert [(v.invariant, v.group_id) for v in unseen.violations] == [
        ("0 every write observed", node)
    ]
    with pytest.raises(AssertionError, match="changed after the last state the monitor saw"):
        unseen.assert_clean()
    # judged again against another desired state, it is still there
    again = unseen.violations_against([tcp(node, 22, 22, ssh)])
    assert [v.invariant for v in again] == ["0 every write observed"]

    # A snapshot taken by hand after such a write (`check`) covers it
    web = tcp(node, 80, 80, ssh)
    covered = InvariantMonitor(groups.ec2, [node], None, [tcp(node, 22, 22, ssh), web])
    groups.authorize(node, web)
    with covered:
        covered.check("a write made past the hook")
    assert covered.summary() == "1 snapshots, 0 violations"


# Property: whatever the planner plans, executed on moto, keeps the monitor clean -----------

PORTS = st.tuples(st.integers(100, 108), st.integers(0, 4)).map(lambda p: (p[0], p[0] + p[1]))
CIDRS = st.sampled_from(["10.0.0.0/8", "10.1.0.0/16", "10.1.2.0/24", "192.168.0.0/24"])


@st.composite
def rule_sets(draw: st.DrawFn) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """(current, desired) as (ports, peer, description, owned) tuples for one group."""
    peer = st.one_of(CIDRS.map(lambda c: ("cidr4", c)), st.just(("group", "lb")))
    text = st.sampled_from(["", "a", "b"])
    current = draw(st.lists(st.tuples(PORTS, peer, text, st.booleans()), max_size=5))
    desired = draw(st.lists(st.tuples(PORTS, peer, text), max_size=5))
    return current, desired


def execute(groups: Groups, plan: Plan) -> None:
    tags = [
        {
            **OWNED[0],
            "Tags": [*OWNED[0]["Tags"], {"Key": "sg-reconciler/plan-id", "Value": plan.plan_id()}],
        }
    ]
    for step in plan.steps:
        if isinstance(step, Authorize):
            groups.ec2.authorize_security_group_ingress(
                GroupId=step.group_id,
                IpPermissions=[permission(rule) for rule in step.rules],
                TagSpecifications=tags,
            )
        elif isinstance(step, Revoke):
            groups.revoke(step.group_id, *step.rule_ids)
        elif isinstance(step, Modify):
            key = step.rule.key
            target: dict[str, Any] = {
                "IpProtocol": key.protocol,
                "FromPort": key.from_port,
                "ToPort": key.to_port,
                "Description": step.rule.description,
            }
            if key.peer.kind == "group":
                target["ReferencedGroupId"] = key.peer.value
            else:
                target["CidrIpv4"] = key.peer.value
            groups.ec2.modify_security_group_rules(
                GroupId=step.group_id,
                SecurityGroupRules=[
                    {"SecurityGroupRuleId": step.rule_id, "SecurityGroupRule": target}
                ],
            )


@given(rule_sets())
def test_planned_changes_executed_on_moto_keep_the_monitor_clean(
    groups: Groups, sets: tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]
) -> None:
    current_spec, desired_spec = sets
    node = groups.new()

    def peer(spec: tuple[str, str]) -> Peer:
        return Peer("group", groups.lb) if spec[0] == "group" else Peer(*spec)  # type: ignore[arg-type]

    seen = set()
    for (low, high), peer_spec, text, owned in current_spec:
        rule = tcp(node, low, high, peer(peer_spec), text)
        if rule.key not in seen:  # EC2 would reject the duplicate
            seen.add(rule.key)
            groups.authorize(node, rule, owned=owned)
    current = groups.rules(node)
    by_key: dict[RuleKey, Rule] = {}
    for (low, high), p, text in desired_spec:  # a key listed twice keeps one description
        rule = tcp(node, low, high, peer(p), text)
        by_key.setdefault(rule.key, rule)
    desired = list(by_key.values())

    plan = make_plan(current, desired, DEFAULT_OWNER, Limits())
    assert isinstance(plan, Plan), plan  # the quota is far away: always feasible
    with InvariantMonitor(groups.ec2, [node], current, desired) as monitor:
        execute(groups, plan)

    monitor.assert_clean()
    assert len(monitor.snapshots) == len(plan.steps)
    expected = {r.key for r in current if not r.owned_by(DEFAULT_OWNER)} | {r.key for r in desired}
    assert {r.key for r in groups.rules(node)} == expected
