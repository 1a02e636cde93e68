"""A plan from an event's narrow read (core/narrow.py), run under faults of its writes.

World: the demo cluster with the policy admitting each load balancer by its own groups (one
rule per port), plus a second NLB with a group of its own and a Service on the same nodes.
Each scenario is a new Service on the demo NLB, delivered as CloudTrail events through
EventBridge and SQS to the planner: its read covers the demo NLB's target groups only, its
plan only authorizes, and the refresh under the locks reads the same way. The execution
runs on the real ASL while AuthorizeSecurityGroupIngress fails as the fault matrix makes it
fail; the invariant monitor checks every state of the node groups between calls; then the
fault clears and scheduled (full) reconciles must converge, with the second NLB's traffic
admitted throughout.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from evidence.evidence_kit import (
    KINDS,
    Kind,
    ScenarioFault,
    converge,
    handler_variables_kept,
    live_plan,
    monitor_for,
    outcome_of,
    wait_for,
)
from sg_reconciler.adapters.plan_store import PlanStore
from sg_reconciler.app.planned import stored_planned
from sg_reconciler.app.scope_store import stored_scope
from sg_reconciler.core.plan import Authorize, Plan
from sg_reconciler_tools.demo.play import TEMPLATE, deliver_events, quiet_handlers, run_planner
from sg_reconciler_tools.demo.world import CLUSTER_TAG, DemoWorld, build_world
from sg_reconciler_tools.local import LocalRuntime
from workflow.world_moves import admits, set_policy

OTHER_PORT = 30500
EXPECTED: dict[Kind, str] = {  # as the fault matrix's AuthorizeSecurityGroupIngress row
    "throttled": "SUCCEEDED",
    "denied": "RolledBack",
    "server_error": "SUCCEEDED",
    "response_lost": "SUCCEEDED",
    "died": "RolledBack",
}
COUNTS: dict[Kind, int] = {
    "throttled": 2,
    "denied": 1000,
    "server_error": 2,
    "response_lost": 1,
    "died": 1,
}


@dataclass
class Stage:
    world: DemoWorld
    other_group: str
    port: int = 32500


def by_own_groups(world: DemoWorld) -> str:
    return json.dumps(
        {
            "owner": "sg-reconciler",
            "load_balancers": {"tags": {"sg-reconciler/managed": "true"}},
            "rule_source": {"kind": "load_balancer_groups"},
            "destination": {"kind": "tagged_groups", "tag_key": CLUSTER_TAG},
            "rule_budget": 10,
            "settle_seconds": 5,
        }
    )


def add_other_load_balancer(world: DemoWorld) -> str:
    """A second NLB with a group of its own and a Service on every node; its group."""
    ec2, elbv2 = world.runtime.clients.ec2, world.runtime.clients.elbv2
    group = ec2.create_security_group(GroupName="other-nlb", Description="o", VpcId=world.vpc_id)
    lb = elbv2.create_load_balancer(
        Name="other",
        Subnets=world.subnet_ids,
        Type="network",
        SecurityGroups=[group["GroupId"]],
        Tags=[{"Key": "sg-reconciler/managed", "Value": "true"}],
    )["LoadBalancers"][0]["LoadBalancerArn"]
    tg = elbv2.create_target_group(
        Name="other", Protocol="TCP", Port=OTHER_PORT, VpcId=world.vpc_id, TargetType="instance"
    )["TargetGroups"][0]["TargetGroupArn"]
    elbv2.register_targets(TargetGroupArn=tg, Targets=[{"Id": i} for i in world.instances])
    elbv2.create_listener(
        LoadBalancerArn=lb,
        Protocol="TCP",
        Port=80,
        DefaultActions=[{"Type": "forward", "TargetGroupArn": tg}],
    )
    return str(group["GroupId"])


def other_reaches_every_node_group(stage: Stage) -> bool:
    """Flow check: the second NLB's group reaches its port on every node group."""
    world = stage.world
    return all(admits(world, g, OTHER_PORT, stage.other_group) for g in world.node_groups.values())


@pytest.fixture(scope="module")
def stage() -> Iterator[Stage]:
    quiet_handlers()
    with LocalRuntime(TEMPLATE) as runtime, handler_variables_kept(runtime):
        world = build_world(runtime)
        set_policy(world, by_own_groups(world))
        other = add_other_load_balancer(world)
        assert converge(world, rounds=3), live_plan(world).to_dict()
        yield Stage(world, other)


@pytest.mark.parametrize("kind", KINDS)
def test_a_narrow_plan_under_a_failing_authorize_keeps_the_invariants_and_converges(
    stage: Stage, kind: Kind
) -> None:
    world, runtime = stage.world, stage.world.runtime
    stage.port += 10
    before = {(r.key, r.rule_id) for r in world.node_rules()}
    events = world.add_service(stage.port)
    full = live_plan(world)
    assert isinstance(full.result, Plan) and full.result.steps
    assert all(isinstance(s, Authorize) for s in full.result.steps)
    store = PlanStore(runtime.clients.dynamodb, runtime.ref("PlanTable"))

    # When the events reach the planner and its execution runs while authorize fails
    fault = ScenarioFault("ec2", "AuthorizeSecurityGroupIngress", kind, count=COUNTS[kind])
    with monitor_for(world, full.desired) as watch, fault:
        execution = run_planner(world, deliver_events(world, events))
        assert execution is not None
        described = wait_for(runtime, execution)
    after_fault = {(r.key, r.rule_id) for r in world.node_rules()}

    # Then: the plan came from the narrow read and its refresh from the locked groups'
    # rules (what the planner planned was stored), the fault fired, no state
    # between calls lost needed traffic, and the run ended as the matrix says
    key = json.loads(
        runtime.clients.stepfunctions.describe_execution(executionArn=execution)["input"]
    )["plan_ref"]["groups_key"]
    assert stored_scope(store, key) is not None, "planned from the full read"
    assert stored_planned(store, key) is not None, "refreshed from the whole account"
    assert fault.fired, f"{kind}: the fault never fired ({fault.calls} calls)"
    watch.assert_clean()
    assert outcome_of(described) == EXPECTED[kind]
    if EXPECTED[kind] == "RolledBack":
        assert after_fault == before  # exactly the old rules, with their ids
    assert other_reaches_every_node_group(stage)
    # And once the fault clears, scheduled full reads converge
    assert converge(world), live_plan(world).to_dict()
    assert other_reaches_every_node_group(stage)
