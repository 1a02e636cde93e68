"""Regression tests for the failure paths a safety review found (each lost traffic before).

1. A quota-bound plan revokes old rules in its ordered phase; a later failure must never
   roll back (the rollback would revoke the only rules left).
2. An execution whose lease expired must not roll back in a group another execution holds.
3. The rollback finds "its" rules by the execution's own name, so re-running an old input
   cannot revoke rules an earlier execution created.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from sg_reconciler.adapters.inventory import AccountInventory
from sg_reconciler.app.live_plan import LivePlan, compute_live_plan
from sg_reconciler.app.steps import verify_rules
from sg_reconciler.core.plan import Modify, Plan, Revoke
from sg_reconciler.errors import NotYetVisible
from sg_reconciler.policy import parse_policy
from sg_reconciler_tools.demo.play import TEMPLATE, quiet_handlers, reconcile
from sg_reconciler_tools.demo.world import DemoWorld, build_world
from sg_reconciler_tools.local import Fault, FaultInjector, InvariantMonitor, LocalRuntime

MACHINE = "ApplyPlanStateMachine"
TIMEOUT = 120.0


@pytest.fixture
def runtime() -> Iterator[LocalRuntime]:
    quiet_handlers()
    with LocalRuntime(TEMPLATE) as local:
        yield local


def stage(runtime: LocalRuntime, **policy: Any) -> tuple[DemoWorld, str]:
    world = build_world(runtime)
    text = json.dumps({**json.loads(world.policy), **policy})
    runtime.clients.ssm.put_parameter(
        Name=runtime.ref("PolicyParameter"), Value=text, Type="String", Overwrite=True
    )
    assert (reconcile(world) or {}).get("status") == "SUCCEEDED"
    return world, text


def plan(world: DemoWorld, policy: str) -> LivePlan:
    clients = world.runtime.clients
    parsed = parse_policy(policy)
    live = compute_live_plan(AccountInventory(clients.ec2, clients.elbv2, parsed), parsed, None)
    assert isinstance(live.result, Plan) and live.result.steps
    return live


def run(world: DemoWorld, live: LivePlan, name: str) -> dict[str, Any]:
    assert isinstance(live.result, Plan)
    arn = world.runtime.start_execution(MACHINE, {"plan": live.result.to_dict()}, name)
    return world.runtime.wait_for(arn, TIMEOUT)


def quota_bound(runtime: LocalRuntime) -> tuple[DemoWorld, LivePlan]:
    """Groups at a quota of 3 rules: the plan interleaves (authorize, revoke, authorize)."""
    world, policy = stage(runtime, rule_budget=2, quota=3, include_health_checks=False)
    world.add_service(33000)
    world.add_service(34000)
    live = plan(world, policy)
    assert isinstance(live.result, Plan)
    assert any(isinstance(s, Revoke | Modify) for s in live.result.steps[:-1])
    return world, live


def test_a_verify_failure_in_a_quota_bound_plan_rolls_back_before_any_revoke(
    runtime: LocalRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    world, live = quota_bound(runtime)
    before = {(r.key, r.rule_id) for r in world.node_rules()}
    real = verify_rules.verify

    def lagging(event: dict[str, Any], rules: Any) -> dict[str, Any]:
        if event.get("mode") == "visible":
            raise NotYetVisible("describe still lags")
        return real(event, rules)

    monkeypatch.setattr(verify_rules, "verify", lagging)
    with InvariantMonitor(
        runtime.clients.ec2, world.node_groups.values(), None, live.desired
    ) as watch:
        described = run(world, live, "lagging-verify")
    assert described["error"] == "RolledBack"
    assert watch.violations == []
    assert {(r.key, r.rule_id) for r in world.node_rules()} == before


def test_a_failure_inside_the_ordered_phase_stops_in_a_safe_state(runtime: LocalRuntime) -> None:
    world, live = quota_bound(runtime)
    denied = Fault("ec2", "RevokeSecurityGroupIngress", "UnauthorizedOperation", count=100)
    modify_denied = Fault("ec2", "ModifySecurityGroupRules", "UnauthorizedOperation", count=100)
    with (
        FaultInjector(denied, modify_denied),
        InvariantMonitor(
            runtime.clients.ec2, world.node_groups.values(), None, live.desired
        ) as watch,
    ):
        described = run(world, live, "ordered-denied")
    assert described["error"] == "RevokeIncomplete"
    assert watch.violations == []
    assert (reconcile(world) or {}).get("status") == "SUCCEEDED"
    assert not plan_steps(world)


def plan_steps(world: DemoWorld) -> int:
    clients = world.runtime.clients
    policy = clients.ssm.get_parameter(Name=world.runtime.ref("PolicyParameter"))["Parameter"][
        "Value"
    ]
    parsed = parse_policy(policy)
    result = compute_live_plan(
        AccountInventory(clients.ec2, clients.elbv2, parsed), parsed, None
    ).result
    return len(result.steps) if isinstance(result, Plan) else -1


def test_a_lost_lease_is_never_rolled_back_in_a_group_another_execution_holds(
    runtime: LocalRuntime,
) -> None:
    # Given a one-group change whose first authorize applies but loses its response
    world, policy = stage(runtime)
    world.add_service(32500, instances=world.instances[:2])
    live = plan(world, policy)
    group = world.node_groups["nodes-a"]
    table, ec2 = runtime.ref("LockTable"), runtime.clients.ec2
    taken: list[str] = []

    def take_over(_seconds: float) -> None:
        # While the step backs off, its lease expires and execution B takes the group,
        # sees the new rule and revokes the old one.
        if taken:
            return
        runtime.clients.dynamodb.put_item(
            TableName=table,
            Item={
                "group_id": {"S": group},
                "holder": {"S": "execution-B"},
                "lease_expires_at": {"N": str(int(time.time()) + 900)},
            },
        )
        docs = ec2.describe_security_group_rules(Filters=[{"Name": "group-id", "Values": [group]}])
        taken.extend(
            d["SecurityGroupRuleId"]
            for d in docs["SecurityGroupRules"]
            if not d["IsEgress"] and d.get("ToPort") == 32000
        )
        ec2.revoke_security_group_ingress(GroupId=group, SecurityGroupRuleIds=taken)

    lost = Fault("ec2", "AuthorizeSecurityGroupIngress", "InternalError", count=1, mode="after")
    with (
        runtime.retry_sleeps.subscribe(take_over),
        FaultInjector(lost),
        InvariantMonitor(ec2, [group], None, live.desired) as watch,
    ):
        described = run(world, live, "lease-lost")
    # Then A reports an incomplete rollback and leaves B's group as B needs it
    assert described["error"] == "RollbackIncomplete" and "another execution" in described["cause"]
    assert [
        (r.key.from_port, r.key.to_port) for r in world.node_rules() if r.group_id == group
    ] == [(31000, 32500)]
    assert watch.violations == []


def test_re_running_an_old_input_never_revokes_the_rules_of_the_earlier_execution(
    runtime: LocalRuntime,
) -> None:
    world, policy = stage(runtime)
    world.add_service(32500)
    live = plan(world, policy)
    assert run(world, live, "first-run")["status"] == "SUCCEEDED"
    after_first = {(r.key, r.rule_id) for r in world.node_rules()}
    # The operator re-runs the same input (the console copies it) while authorize is denied
    world.add_service(33000)
    denied = Fault("ec2", "AuthorizeSecurityGroupIngress", "UnauthorizedOperation", count=100)
    with (
        FaultInjector(denied),
        InvariantMonitor(
            runtime.clients.ec2, world.node_groups.values(), None, plan(world, policy).desired
        ) as watch,
    ):
        described = run(world, live, "second-run")
    assert described["error"] == "RolledBack"
    assert {(r.key, r.rule_id) for r in world.node_rules()} == after_first
    assert watch.violations == []
