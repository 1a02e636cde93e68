"""The planner Lambda end to end on the local runtime: events in, one execution out.

The template is deployed into moto by `LocalRuntime`; the sample events of `events/` are
rewritten to the ids of the moto world (`live.world.build_world`), delivered to the real
handler through the Lambda API as SQS batches, and the executions they start run the real
state machine to completion. Each scenario makes the change its event reports, so the plan
the handler starts is the one `compute_live_plan` computes for the event's scope, and the
world is converged afterwards.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from event_samples import ACCOUNT_ID, REGION, load_event
from integration.live_plan.world import World, build_world
from moto.elbv2.models import elbv2_backends
from sg_reconciler.adapters.deployment import WINDOW_PREFIX
from sg_reconciler.adapters.index_table import IndexTable
from sg_reconciler.adapters.inventory import AccountInventory
from sg_reconciler.adapters.plan_store import PlanStore
from sg_reconciler.adapters.security_groups import SecurityGroupRules
from sg_reconciler.app.live_plan import LivePlan, compute_live_plan
from sg_reconciler.app.steps.common import stored_phases
from sg_reconciler.core.plan import Authorize, Modify, Plan, Revoke, Step, step_to_dict
from sg_reconciler.core.policy import Policy
from sg_reconciler.core.rules import Rule
from sg_reconciler.core.scope import Scope
from sg_reconciler.policy import parse_policy
from sg_reconciler.trigger.classify import Relevant, parse_record
from sg_reconciler_tools.local import LocalRuntime, interception, moto_state

TEMPLATE_PATH = Path(__file__).resolve().parents[3] / "template.yaml"
EXECUTION_TIMEOUT = 60.0

# Ids of the samples' fake world (events/README.md), rewritten to the moto world's.
SAMPLE_NODE_GROUP = "sg-0a1b2c3d4e5f60001"
SAMPLE_LB_GROUP = "sg-0a1b2c3d4e5f60002"
SAMPLE_EXTRA_GROUP = "sg-0a1b2c3d4e5f60004"
SAMPLE_NLB = (
    "arn:aws:elasticloadbalancing:eu-west-1:123456789012:"
    "loadbalancer/net/k8s-shop-frontend-7d5f1a2b3c/0a1b2c3d4e5f6001"
)
SAMPLE_TARGET_GROUP = (
    "arn:aws:elasticloadbalancing:eu-west-1:123456789012:"
    "targetgroup/k8s-shop-frontend-31001/5e6f708192a3b001"
)
SAMPLE_INSTANCES = ("i-0a1b2c3d4e5f60001", "i-0a1b2c3d4e5f60002")
SAMPLE_VPC = "vpc-0a1b2c3d4e5f60001"


# ---------------------------------------------------------------- fixtures and helpers


@pytest.fixture(scope="module")
def runtime() -> Iterator[LocalRuntime]:
    """template.yaml deployed once per module; each test resets EC2 and ELBv2 (see `world`)."""
    with LocalRuntime(TEMPLATE_PATH) as local:
        local.clients.ssm.put_parameter(
            Name=local.ref("PolicyParameter"),
            Value=local.ref("PolicyDocument"),  # the template's default policy
            Type="String",
            Overwrite=True,
        )
        yield local


@pytest.fixture
def world(runtime: LocalRuntime) -> World:
    """A fresh world in the running runtime: the stack stays, EC2 and ELBv2 start empty, and
    so does the brake's window (it counts the rules of the account it was started in)."""
    moto_state.ec2_backend(REGION).reset()
    elbv2_backends[ACCOUNT_ID][REGION].reset()
    table = runtime.ref("LockTable")
    for item in runtime.clients.dynamodb.scan(TableName=table)["Items"]:
        if item["group_id"]["S"].startswith(WINDOW_PREFIX):
            runtime.clients.dynamodb.delete_item(
                TableName=table, Key={"group_id": item["group_id"]}
            )
    IndexTable(runtime.clients.dynamodb, runtime.ref("IndexTable")).clear()  # the old world's
    return build_world(runtime.clients.ec2, runtime.clients.elbv2)


@dataclass
class Planner:
    """Drives the deployed planner and observes what it starts."""

    runtime: LocalRuntime
    world: World
    policy: Policy
    _sequence: int = 0

    @property
    def ec2(self) -> Any:
        return self.runtime.clients.ec2

    @property
    def elbv2(self) -> Any:
        return self.runtime.clients.elbv2

    def own_role_arns(self) -> list[str]:
        return [
            self.runtime.arn(f"{function}Role")
            for function in ("ApplyStepsFunction", "RollBackFunction")
        ]

    def event(self, name: str, ids: dict[str, str] | None = None) -> dict[str, Any]:
        """The `eventbridge/<name>` sample with the sample ids replaced by `ids` and fresh event ids."""
        text = json.dumps(load_event(f"eventbridge/{name}"))
        for sample_id, world_id in sorted((ids or {}).items(), key=lambda kv: -len(kv[0])):
            # Whole ids only: an instance id is also the tail of an interface id (eni-...).
            text = re.sub(rf"(?<![\w-]){re.escape(sample_id)}(?![\w-])", world_id, text)
        event: dict[str, Any] = json.loads(text)
        self._sequence += 1
        event["id"] = f"test-event-{time.time_ns()}-{self._sequence}"
        event["detail"]["eventID"] = f"test-cloudtrail-{time.time_ns()}-{self._sequence}"
        return event

    def sqs(self, *events: dict[str, Any]) -> dict[str, Any]:
        """One SQS batch (as Lambda delivers it) carrying the events."""
        template = load_event("sqs/RegisterTargets")["Records"][0]
        records = []
        for index, event in enumerate(events):
            body = json.dumps(event)
            records.append(
                {
                    **template,
                    "messageId": f"message-{self._sequence}-{index}",
                    "body": body,
                    "md5OfBody": hashlib.md5(body.encode()).hexdigest(),
                }
            )
        return {"Records": records}

    def scope_of(self, *events: dict[str, Any]) -> Scope:
        """What the handler will see: the merged scope of the relevant events."""
        parsed = [
            parse_record(
                e,
                account_id=ACCOUNT_ID,
                region=REGION,
                own_role_arns=frozenset(self.own_role_arns()),
            )
            for e in events
        ]
        assert all(isinstance(p, Relevant) for p in parsed), parsed
        return Scope.merge(p.scope for p in parsed if isinstance(p, Relevant))

    def plan(self, scope: Scope | None = None) -> LivePlan:
        return compute_live_plan(
            AccountInventory(self.ec2, self.elbv2, self.policy), self.policy, scope
        )

    def steps(self, scope: Scope | None = None) -> tuple[Step, ...]:
        result = self.plan(scope).result
        assert isinstance(result, Plan), result
        return result.steps

    def executions(self) -> dict[str, str]:
        """Execution name -> ARN, for every execution of the apply state machine so far."""
        paginator = self.runtime.clients.stepfunctions.get_paginator("list_executions")
        pages = paginator.paginate(stateMachineArn=self.runtime.arn("ApplyPlanStateMachine"))
        return {e["name"]: e["executionArn"] for page in pages for e in page["executions"]}

    def invoke(self, event: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
        """Run the handler; returns its answer and the ARNs of the executions it started."""
        before = self.executions()
        answer = self.runtime.invoke("PlannerFunction", event)
        started = [arn for name, arn in self.executions().items() if name not in before]
        return answer, started

    def execution_input(self, arn: str) -> dict[str, Any]:
        described = self.runtime.clients.stepfunctions.describe_execution(executionArn=arn)
        document: dict[str, Any] = json.loads(described["input"])
        return document

    def stored_groups(self, arn: str) -> list[str]:
        """The groups the planner stored for an execution (its input holds the reference)."""
        ref = self.execution_input(arn)["plan_ref"]
        return PlanStore(self.runtime.clients.dynamodb, self.runtime.ref("PlanTable")).groups(
            ref["groups_key"], ref["groups"]
        )

    def executed_steps(self, arn: str) -> list[str]:
        """The calls the execution planned under its locks (from the store), comparable."""
        name = arn.rsplit(":", 1)[1]
        store = PlanStore(self.runtime.clients.dynamodb, self.runtime.ref("PlanTable"))
        return sorted(json.dumps(step_to_dict(s)) for s in stored_phases(store, name)[0].steps)

    def finish(self, arn: str) -> dict[str, Any]:
        described = self.runtime.wait_for(arn, timeout=EXECUTION_TIMEOUT)
        assert described["status"] == "SUCCEEDED", (described.get("error"), described.get("cause"))
        return described

    def converge(self) -> None:
        """Apply the full plan directly (faster than an execution) so a scenario starts clean."""
        plan = self.plan().result
        assert isinstance(plan, Plan), plan
        rules = SecurityGroupRules(self.ec2)
        for step in plan.steps:
            if isinstance(step, Authorize):
                rules.authorize(step.group_id, step.rules, self.policy.owner, "converged-by-test")
            elif isinstance(step, Revoke):
                rules.revoke(step.group_id, step.rule_ids, self.policy.owner)
            elif isinstance(step, Modify):
                rules.modify(step.group_id, step.rule_id, step.rule, self.policy.owner)

    def assert_converged(self, scope: Scope | None = None) -> None:
        assert self.steps(scope) == ()

    def rules(self, group: str) -> list[Rule]:
        """The group's ingress rules, read directly (one call, unlike a whole plan)."""
        return SecurityGroupRules(self.ec2).describe([group])

    def owned_rules(self, group: str) -> list[Rule]:
        return [r for r in self.rules(group) if r.owned_by(self.policy.owner)]


@pytest.fixture
def planner(runtime: LocalRuntime, world: World) -> Planner:
    return Planner(runtime, world, parse_policy(str(runtime.ref("PolicyDocument"))))


def expect_one_execution(
    planner: Planner, event: dict[str, Any], scope: Scope
) -> tuple[Plan, dict[str, Any]]:
    """Invoke with one SQS batch; exactly one execution starts, with the plan for `scope`."""
    expected = planner.plan(scope).result
    assert isinstance(expected, Plan) and expected.steps, "the scenario must need a change"
    answer, started = planner.invoke(event)
    assert answer == {"batchItemFailures": []}
    assert len(started) == 1
    document = planner.execution_input(started[0])
    assert document["plan_ref"]["groups_key"] == expected.plan_id()
    assert planner.stored_groups(started[0]) == sorted(expected.groups)
    assert document["plan_id"] == started[0].rsplit(":", 1)[1]
    planner.finish(started[0])
    assert planner.executed_steps(started[0]) == sorted(
        json.dumps(step_to_dict(s)) for s in expected.steps
    )
    return expected, document


def step_groups(plan: Plan) -> dict[str, set[str]]:
    """Action -> groups it touches."""
    found: dict[str, set[str]] = {}
    for step in plan.steps:
        found.setdefault(type(step).__name__, set()).add(step.group_id)
    return found


def as_iam_user(event: dict[str, Any]) -> dict[str, Any]:
    """A person signed in as an IAM user: CloudTrail logs an empty `sessionIssuer`."""
    event["detail"]["userIdentity"] = {
        "type": "IAMUser",
        "principalId": "AIDAEXAMPLEUSER00001",
        "arn": f"arn:aws:iam::{ACCOUNT_ID}:user/bob",
        "accountId": ACCOUNT_ID,
        "userName": "bob",
        "sessionContext": {"sessionIssuer": {}, "attributes": {"mfaAuthenticated": "true"}},
    }
    return event


def as_role(event: dict[str, Any], role_arn: str) -> dict[str, Any]:
    identity = event["detail"]["userIdentity"]
    identity["sessionContext"]["sessionIssuer"]["arn"] = role_arn
    identity["arn"] = role_arn.replace(":iam::", ":sts::").replace(":role/", ":assumed-role/")
    return event


# ---------------------------------------------------------------- each event kind


def test_register_targets_widens_the_node_group(planner: Planner) -> None:
    # Given a converged world, when b1 and b2 join the TLS target group (port 31443)
    w = planner.world
    planner.converge()
    b1, b2 = w.instances["b1"], w.instances["b2"]
    planner.elbv2.register_targets(
        TargetGroupArn=w.target_groups["web-tls"], Targets=[{"Id": b1}, {"Id": b2}]
    )
    event = planner.event(
        "RegisterTargets",
        {
            SAMPLE_TARGET_GROUP: w.target_groups["web-tls"],
            SAMPLE_INSTANCES[0]: b1,
            SAMPLE_INSTANCES[1]: b2,
        },
    )
    scope = planner.scope_of(event)
    assert scope == Scope(
        target_group_arns=frozenset({w.target_groups["web-tls"]}), instance_ids=frozenset({b1, b2})
    )

    # Then one execution adds the rules on the nodes' group, and nothing else changes
    plan, _ = expect_one_execution(planner, planner.sqs(event), scope)
    assert step_groups(plan)["Authorize"] == {w.groups["nodes_b"]}
    assert set(step_groups(plan)) <= {"Authorize", "Revoke"}
    planner.assert_converged()


def test_create_target_group_adds_its_node_port(planner: Planner) -> None:
    # Given a converged world, when a new Service gets NodePort 32500 on the web NLB
    w = planner.world
    planner.converge()
    new_tg = planner.elbv2.create_target_group(
        Name="web-new", Protocol="TCP", Port=32500, VpcId=w.vpc_id, TargetType="instance"
    )["TargetGroups"][0]["TargetGroupArn"]
    planner.elbv2.create_listener(
        LoadBalancerArn=w.load_balancers["web"],
        Protocol="TCP",
        Port=8443,
        DefaultActions=[{"Type": "forward", "TargetGroupArn": new_tg}],
    )
    planner.elbv2.register_targets(TargetGroupArn=new_tg, Targets=[{"Id": w.instances["b1"]}])
    event = planner.event("CreateTargetGroup", {SAMPLE_TARGET_GROUP: new_tg, SAMPLE_VPC: w.vpc_id})
    scope = planner.scope_of(event)
    assert scope == Scope(target_group_arns=frozenset({new_tg}))

    # Then the execution authorizes the new port (make-before-break: nothing is revoked)
    plan, _ = expect_one_execution(planner, planner.sqs(event), scope)
    assert step_groups(plan) == {"Authorize": {w.groups["nodes_b"]}}
    added = {
        (r.key.from_port, r.key.to_port)
        for s in plan.steps
        if isinstance(s, Authorize)
        for r in s.rules
    }
    assert (32500, 32500) in added
    planner.assert_converged()


def test_a_person_authorizing_on_a_node_group_replans_only_that_group(planner: Planner) -> None:
    # Given a world never reconciled, when an IAM user adds a rule to nodes_b by hand
    w = planner.world
    nodes_b, nlb_web = w.groups["nodes_b"], w.groups["nlb_web"]
    manual = planner.ec2.authorize_security_group_ingress(
        GroupId=nodes_b,
        IpPermissions=[
            {
                "IpProtocol": "tcp",
                "FromPort": 31000,
                "ToPort": 32500,
                "UserIdGroupPairs": [
                    {"GroupId": nlb_web, "Description": "elbv2.k8s.aws/targetGroupBinding=shared"}
                ],
            }
        ],
    )["SecurityGroupRules"][0]["SecurityGroupRuleId"]
    event = as_iam_user(
        planner.event(
            "AuthorizeSecurityGroupIngress",
            {SAMPLE_NODE_GROUP: nodes_b, SAMPLE_LB_GROUP: nlb_web, "sgr-0a1b2c3d4e5f60011": manual},
        )
    )
    scope = planner.scope_of(event)
    assert scope == Scope(group_ids=frozenset({nodes_b}))

    # Then the execution reconciles nodes_b alone and keeps the person's rule
    plan, _ = expect_one_execution(planner, planner.sqs(event), scope)
    assert {s.group_id for s in plan.steps} == {nodes_b}
    assert manual in {r.rule_id for r in planner.rules(nodes_b)}
    planner.assert_converged(scope)
    assert planner.steps()  # other groups were left for their own triggers


def test_revoking_an_owned_rule_by_hand_is_repaired(planner: Planner) -> None:
    # Given a converged world, when someone revokes the reconciler's rule for port 31080
    w = planner.world
    planner.converge()
    nodes_b, nlb_web = w.groups["nodes_b"], w.groups["nlb_web"]
    victim = next(r for r in planner.owned_rules(nodes_b) if r.key.peer.value == nlb_web)
    planner.ec2.revoke_security_group_ingress(
        GroupId=nodes_b, SecurityGroupRuleIds=[victim.rule_id or ""]
    )
    event = planner.event(
        "RevokeSecurityGroupIngress", {SAMPLE_NODE_GROUP: nodes_b, SAMPLE_LB_GROUP: nlb_web}
    )
    permission = event["detail"]["requestParameters"]["ipPermissions"]["items"][0]
    permission["fromPort"], permission["toPort"] = victim.key.from_port, victim.key.to_port
    scope = planner.scope_of(event)
    assert scope == Scope(group_ids=frozenset({nodes_b}))

    # Then the execution puts exactly that rule back
    plan, _ = expect_one_execution(planner, planner.sqs(event), scope)
    assert len(plan.steps) == 1 and isinstance(plan.steps[0], Authorize)
    assert [r.key for r in plan.steps[0].rules] == [victim.key]
    planner.assert_converged()


def test_deleting_a_load_balancer_revokes_its_rules(planner: Planner) -> None:
    # Given a converged world, when the dns NLB is deleted
    w = planner.world
    planner.converge()
    dns = w.load_balancers["dns"]
    planner.elbv2.delete_load_balancer(LoadBalancerArn=dns)
    event = planner.event("DeleteLoadBalancer", {SAMPLE_NLB: dns})
    scope = planner.scope_of(event)
    assert scope == Scope(load_balancer_arns=frozenset({dns}))

    # Then only revokes run, on the pods' group, which nothing else targets
    pods_rules_before = planner.owned_rules(w.groups["pods"])
    plan, _ = expect_one_execution(planner, planner.sqs(event), scope)
    assert step_groups(plan) == {"Revoke": {w.groups["pods"]}}
    revoked = {i for s in plan.steps if isinstance(s, Revoke) for i in s.rule_ids}
    assert revoked == {r.rule_id for r in pods_rules_before}
    assert planner.owned_rules(w.groups["pods"]) == []
    planner.assert_converged()


def test_set_security_groups_drops_the_removed_source(planner: Planner) -> None:
    # Given a converged world, when the shared backend group is removed from the web NLB
    w = planner.world
    planner.converge()
    web, nlb_web, backend = w.load_balancers["web"], w.groups["nlb_web"], w.groups["backend"]
    planner.elbv2.set_security_groups(LoadBalancerArn=web, SecurityGroups=[nlb_web])
    event = planner.event("SetSecurityGroups", {SAMPLE_NLB: web, SAMPLE_LB_GROUP: nlb_web})
    event["detail"]["requestParameters"]["securityGroups"] = [nlb_web]
    event["detail"]["responseElements"]["securityGroupIds"] = [nlb_web]
    scope = planner.scope_of(event)
    assert scope == Scope(group_ids=frozenset({nlb_web}), load_balancer_arns=frozenset({web}))

    # Then the backend-sourced rules for web's ports go; the dns NLB still uses backend
    plan, _ = expect_one_execution(planner, planner.sqs(event), scope)
    assert step_groups(plan) == {
        "Revoke": {w.groups["nodes_a"], w.groups["extra"], w.groups["nodes_b"]}
    }
    still = {r.key.peer.value for r in planner.owned_rules(w.groups["pods"])}
    assert backend in still
    planner.assert_converged()


def test_modify_instance_attribute_adds_rules_to_the_new_group(planner: Planner) -> None:
    # Given a converged world, when instance b1 also joins the (now empty) orphan group
    w = planner.world
    planner.converge()
    b1, nodes_b, orphan = w.instances["b1"], w.groups["nodes_b"], w.groups["orphan"]
    planner.ec2.modify_instance_attribute(InstanceId=b1, Groups=[nodes_b, orphan])
    event = planner.event(
        "ModifyInstanceAttribute",
        {SAMPLE_INSTANCES[0]: b1, SAMPLE_NODE_GROUP: nodes_b, SAMPLE_EXTRA_GROUP: orphan},
    )
    scope = planner.scope_of(event)
    assert scope == Scope(
        group_ids=frozenset({nodes_b, orphan}),
        instance_ids=frozenset({b1}),
        regrouped_instances=frozenset({b1}),
    )

    # Then b1's ports are authorized on orphan
    plan, _ = expect_one_execution(planner, planner.sqs(event), scope)
    assert step_groups(plan) == {"Authorize": {orphan}}
    planner.assert_converged()


# ---------------------------------------------------------------- batches and special cases


def test_own_role_events_start_nothing(planner: Planner) -> None:
    # Given the calls the reconciler's own roles make while applying a plan
    w = planner.world
    ids = {SAMPLE_NODE_GROUP: w.groups["nodes_b"], SAMPLE_LB_GROUP: w.groups["nlb_web"]}
    own = [
        as_role(planner.event(name, ids), role)
        for name in ("AuthorizeSecurityGroupIngress", "RevokeSecurityGroupIngress")
        for role in planner.own_role_arns()
    ]
    assert planner.steps(Scope(group_ids=frozenset({w.groups["nodes_b"]})))

    # When they reach the planner (the world does need changes), then nothing starts
    answer, started = planner.invoke(planner.sqs(*own))
    assert (answer, started) == ({"batchItemFailures": []}, [])

    # And the deployed EventBridge rule does not even deliver them; a person's call it does
    person = as_iam_user(planner.event("AuthorizeSecurityGroupIngress", ids))
    clients = planner.runtime.clients
    reply = clients.events.put_events(
        Entries=[
            {
                "Source": e["source"],
                "DetailType": e["detail-type"],
                "Detail": json.dumps(e["detail"]),
                "Resources": e["resources"],
            }
            for e in [*own, person]
        ]
    )
    assert reply["FailedEntryCount"] == 0
    queue = planner.runtime.ref("EventQueue")
    delivered: list[dict[str, Any]] = []
    deadline = time.monotonic() + 5
    while len(delivered) < 1 and time.monotonic() < deadline:
        got = clients.sqs.receive_message(QueueUrl=queue, MaxNumberOfMessages=10)
        delivered += [json.loads(m["Body"]) for m in got.get("Messages", [])]
    assert [d["detail"]["eventID"] for d in delivered] == [person["detail"]["eventID"]]
    got = clients.sqs.receive_message(QueueUrl=queue, MaxNumberOfMessages=10)
    assert got.get("Messages", []) == []


def test_fifty_events_in_one_batch_start_one_execution(planner: Planner) -> None:
    # Given a burst: a Helm release touching many target groups, instances and groups
    w = planner.world
    kinds = [
        (
            "RegisterTargets",
            {
                SAMPLE_TARGET_GROUP: w.target_groups["web-tcp"],
                SAMPLE_INSTANCES[0]: w.instances["a1"],
                SAMPLE_INSTANCES[1]: w.instances["b1"],
            },
        ),
        ("RegisterTargets", {SAMPLE_TARGET_GROUP: w.target_groups["dns"]}),
        (
            "AuthorizeSecurityGroupIngress",
            {SAMPLE_NODE_GROUP: w.groups["nodes_a"], SAMPLE_LB_GROUP: w.groups["nlb_web"]},
        ),
        (
            "ModifyInstanceAttribute",
            {
                SAMPLE_INSTANCES[0]: w.instances["b2"],
                SAMPLE_NODE_GROUP: w.groups["nodes_b"],
                SAMPLE_EXTRA_GROUP: w.groups["nodes_b"],
            },
        ),
        ("DeleteSecurityGroup", {"sg-0a1b2c3d4e5f60003": w.groups["orphan"]}),
    ]
    events = [planner.event(*kinds[i % len(kinds)]) for i in range(50)]
    scope = planner.scope_of(*events)

    # Then one plan over the merged scope, one execution, and every event id is recorded
    _, document = expect_one_execution(planner, planner.sqs(*events), scope)
    assert sorted(document["trigger"]["event_ids"]) == sorted(e["id"] for e in events)
    planner.assert_converged(scope)


def test_a_group_deleted_before_planning_is_left_out(planner: Planner) -> None:
    # Given two events: a rule added to orphan, and a target registered on web-tcp
    w = planner.world
    orphan = w.groups["orphan"]
    on_orphan = planner.event(
        "AuthorizeSecurityGroupIngress",
        {SAMPLE_NODE_GROUP: orphan, SAMPLE_LB_GROUP: w.groups["backend"]},
    )
    registered = planner.event(
        "RegisterTargets",
        {
            SAMPLE_TARGET_GROUP: w.target_groups["web-tcp"],
            SAMPLE_INSTANCES[0]: w.instances["b1"],
            SAMPLE_INSTANCES[1]: w.instances["b2"],
        },
    )
    assert orphan in {s.group_id for s in planner.steps(planner.scope_of(on_orphan))}

    # When orphan is deleted before the batch is planned
    planner.ec2.delete_security_group(GroupId=orphan)
    scope = planner.scope_of(on_orphan, registered)
    plan, _ = expect_one_execution(planner, planner.sqs(on_orphan, registered), scope)

    # Then the plan leaves the missing group out, the rest applies, nothing is redelivered
    assert orphan not in {s.group_id for s in plan.steps}
    assert w.groups["nodes_b"] in {s.group_id for s in plan.steps}
    planner.assert_converged(scope)

    # And a batch naming only the deleted group starts nothing and fails nothing
    alone = planner.event("DeleteSecurityGroup", {"sg-0a1b2c3d4e5f60003": orphan})
    assert planner.invoke(planner.sqs(alone)) == ({"batchItemFailures": []}, [])


def test_the_schedule_reconciles_everything(planner: Planner) -> None:
    scheduled = load_event("scheduled")
    expected = planner.plan(None).result
    assert isinstance(expected, Plan)
    answer, started = planner.invoke(scheduled)
    assert answer == {"batchItemFailures": []} and len(started) == 1
    assert planner.stored_groups(started[0]) == sorted(expected.groups)
    touched = {s.group_id for s in expected.steps}
    w = planner.world
    assert touched == {w.groups[g] for g in ("nodes_a", "nodes_b", "extra", "pods", "orphan")}
    planner.finish(started[0])
    planner.assert_converged()
    # A second run finds nothing to do and starts nothing
    assert planner.invoke(load_event("scheduled")) == ({"batchItemFailures": []}, [])


@contextmanager
def executions_held() -> Iterator[threading.Event]:
    """Hold every Lambda call made by another thread (the interpreter) until the event is set.

    So the executions a test starts cannot change the world until it lets them run.
    """
    caller = threading.get_ident()
    release = threading.Event()

    def hold(service: str, operation: str, proceed: interception.Proceed) -> Any:
        if threading.get_ident() != caller:
            release.wait(timeout=EXECUTION_TIMEOUT)
        return proceed()

    with interception.intercept_api_call("lambda", "Invoke", hold):
        try:
            yield release
        finally:
            release.set()


@contextmanager
def start_calls() -> Iterator[list[str]]:
    """Each StartExecution moto served: 'ok' or the AWS error code it answered."""
    seen: list[str] = []

    def observe(service: str, operation: str, proceed: interception.Proceed) -> Any:
        try:
            result = proceed()
        except Exception as error:
            seen.append(str(getattr(error, "code", type(error).__name__)))
            raise
        seen.append("ok")
        return result

    with interception.intercept_api_call(
        "stepfunctions", "StartExecution", observe, layer=interception.OBSERVER_LAYER
    ):
        yield seen


def test_the_same_plan_started_twice_is_one_execution(planner: Planner) -> None:
    w = planner.world
    ids = {
        SAMPLE_TARGET_GROUP: w.target_groups["web-tcp"],
        SAMPLE_INSTANCES[0]: w.instances["b1"],
        SAMPLE_INSTANCES[1]: w.instances["b2"],
    }
    first = planner.event("RegisterTargets", ids)
    later = planner.event("RegisterTargets", ids)  # another event, same scope: same plan
    with executions_held() as release, start_calls() as calls:
        # When the first batch starts an execution and, before it changes anything, the same
        # batch is redelivered and another event for the same scope arrives
        answer, started = planner.invoke(planner.sqs(first))
        assert answer == {"batchItemFailures": []} and len(started) == 1
        assert planner.invoke(planner.sqs(first)) == ({"batchItemFailures": []}, [])
        assert planner.invoke(planner.sqs(later)) == ({"batchItemFailures": []}, [])
        # Then the redelivery was idempotent (same name and input) and the other event's
        # start was refused by name, which the planner treats as success
        assert calls == ["ok", "ok", "ExecutionAlreadyExists"]
        release.set()
        planner.finish(started[0])
    assert list(planner.executions()).count(started[0].rsplit(":", 1)[1]) == 1
    planner.assert_converged(planner.scope_of(first))


def test_a_group_deleted_after_planning_drops_out_under_the_lock(planner: Planner) -> None:
    # Given a batch whose plan revokes the stale rule of orphan and widens nodes_b
    w = planner.world
    orphan = w.groups["orphan"]
    on_orphan = planner.event(
        "AuthorizeSecurityGroupIngress",
        {SAMPLE_NODE_GROUP: orphan, SAMPLE_LB_GROUP: w.groups["backend"]},
    )
    registered = planner.event(
        "RegisterTargets",
        {
            SAMPLE_TARGET_GROUP: w.target_groups["web-tcp"],
            SAMPLE_INSTANCES[0]: w.instances["b1"],
            SAMPLE_INSTANCES[1]: w.instances["b2"],
        },
    )
    with executions_held() as release:
        answer, started = planner.invoke(planner.sqs(on_orphan, registered))
        assert answer == {"batchItemFailures": []} and len(started) == 1
        assert orphan in planner.stored_groups(started[0])

        # When orphan is deleted after the plan was made, before the execution runs
        planner.ec2.delete_security_group(GroupId=orphan)
        release.set()
        described = planner.runtime.wait_for(started[0], timeout=EXECUTION_TIMEOUT)

    # Then the execution still ends well: the refreshed plan leaves the missing group out
    assert described["status"] == "SUCCEEDED", (described.get("error"), described.get("cause"))
    output = json.loads(described["output"])
    executed = {json.loads(step)["group_id"] for step in planner.executed_steps(started[0])}
    assert output["status"] == "applied" and orphan not in executed
    assert w.groups["nodes_b"] in executed
    planner.assert_converged(planner.scope_of(on_orphan, registered))
