"""The real ASL (statemachine/apply_plan.asl.json) executed by moto, with our real step handlers.

Each test builds the #3639 world (two node groups, a shared backend group, an NLB with
NodePort target groups), reconciles it, adds a Service with NodePort 32500 (so the backend
rule must grow from 31000-32000 to 31000-32500 in both node groups), and then applies that
change under a fault while the invariant monitor checks every intermediate state.
"""

from __future__ import annotations

import json
import time

import pytest
from sg_reconciler.adapters.inventory import AccountInventory
from sg_reconciler.adapters.pacing import Pacer
from sg_reconciler.app.live_plan import LivePlan, compute_live_plan
from sg_reconciler.app.plan_batch import execution_name
from sg_reconciler.core.pacing import Pacing
from sg_reconciler.core.plan import Plan
from sg_reconciler.policy import parse_policy
from sg_reconciler_tools.demo.play import reconcile
from sg_reconciler_tools.demo.world import DemoWorld
from sg_reconciler_tools.local import Fault, FaultInjector, InvariantMonitor

MACHINE = "ApplyPlanStateMachine"
TIMEOUT = 60.0


def live_plan(world: DemoWorld) -> LivePlan:
    clients = world.runtime.clients
    parsed = parse_policy(world.policy)
    return compute_live_plan(AccountInventory(clients.ec2, clients.elbv2, parsed), parsed, None)


def grow(world: DemoWorld) -> LivePlan:
    """The #3639 change: a new NodePort above the range."""
    world.add_service(32500)
    live = live_plan(world)
    assert isinstance(live.result, Plan) and live.result.steps
    return live


def start(world: DemoWorld, live: LivePlan, suffix: str = "") -> str:
    assert isinstance(live.result, Plan)
    name = execution_name(live.result, time.time()) + suffix
    return world.runtime.start_execution(
        MACHINE, {"plan_id": name, "plan": live.result.to_dict()}, name
    )


def monitor(world: DemoWorld, live: LivePlan) -> InvariantMonitor:
    return InvariantMonitor(
        world.runtime.clients.ec2, world.node_groups.values(), None, live.desired
    )


def states(world: DemoWorld, arn: str) -> list[str]:
    return [
        e["stateEnteredEventDetails"]["name"]
        for e in world.runtime.events(arn)
        if e["type"].endswith("StateEntered")
    ]


def ranges(world: DemoWorld) -> set[tuple[str, int, int]]:
    return {(r.group_id, r.key.from_port, r.key.to_port) for r in world.node_rules()}


def both(world: DemoWorld, lo: int, hi: int) -> set[tuple[str, int, int]]:
    return {(g, lo, hi) for g in world.node_groups.values()}


def test_success_authorizes_everywhere_before_revoking_and_converges(world: DemoWorld) -> None:
    live = grow(world)
    with monitor(world, live) as watch:
        described = world.runtime.wait_for(start(world, live), TIMEOUT)
    assert described["status"] == "SUCCEEDED"
    output = json.loads(described["output"])
    assert output["status"] == "applied"
    assert output["summary"]["rules_authorized"] == 2 and output["summary"]["rules_revoked"] == 2
    assert ranges(world) == both(world, 31000, 32500)
    assert watch.violations == [] and len(watch.snapshots) >= 4
    # Make-before-break across groups: both authorizations are applied before the first revoke.
    operations = [s.operation for s in watch.snapshots]
    first_revoke = operations.index(next(o for o in operations if "Revoke" in o))
    assert operations[:first_revoke].count("AuthorizeSecurityGroupIngress") == 2
    visited = states(world, described["executionArn"])
    assert visited.index("Authorize new rules") < visited.index("Revoke stale rules")
    assert not live_plan(world).result.steps  # type: ignore[union-attr]


def test_authorize_throttled_three_times_is_retried_with_backoff_then_accepted(
    world: DemoWorld,
) -> None:
    live = grow(world)
    throttled = Fault("ec2", "AuthorizeSecurityGroupIngress", "RequestLimitExceeded", count=3)
    world.runtime.pacer_sleeps.clear()
    with FaultInjector(throttled) as faults, monitor(world, live) as watch:
        described = world.runtime.wait_for(start(world, live), TIMEOUT)
    assert described["status"] == "SUCCEEDED"
    assert len(faults.fired) == 3
    # The step's pacer (not boto3, which makes one attempt) backed off with full jitter,
    # growing: each wait at most 0.5 s * 2^attempt
    waits = world.runtime.pacer_sleeps.snapshot()
    assert len(waits) >= 3 and all(w <= 0.5 * 2**i for i, w in enumerate(waits[:3]))
    assert not [
        e for e in world.runtime.events(described["executionArn"]) if e["type"] == "TaskFailed"
    ]
    assert watch.violations == []


def test_authorize_throttled_past_the_steps_time_is_retried_by_the_state_machine(
    world: DemoWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a throttle that outlasts the step (its pacer has no time left to back off)
    live = grow(world)
    throttled = Fault("ec2", "AuthorizeSecurityGroupIngress", "RequestLimitExceeded", count=2)
    world.runtime.retry_sleeps.clear()
    paced = Pacer.__init__

    def out_of_time(self: Pacer, pacing: Pacing, deadline: float | None = None) -> None:
        paced(self, pacing, float("-inf"))

    monkeypatch.setattr(Pacer, "__init__", out_of_time)
    with FaultInjector(throttled) as faults:
        described = world.runtime.wait_for(start(world, live), TIMEOUT)
    # Then Step Functions' Retry takes over, visibly in the console, and the change applies
    assert described["status"] == "SUCCEEDED" and len(faults.fired) == 2
    failures = [
        e for e in world.runtime.events(described["executionArn"]) if e["type"] == "TaskFailed"
    ]
    assert [e["taskFailedEventDetails"]["error"] for e in failures] == ["Throttled"] * 2
    assert len(world.runtime.retry_sleeps.snapshot()) >= 2
    assert ranges(world) == both(world, 31000, 32500)


def test_authorize_denied_rolls_back_with_the_old_rules_intact(world: DemoWorld) -> None:
    live = grow(world)
    before = {(r.key, r.rule_id) for r in world.node_rules()}
    denied = Fault("ec2", "AuthorizeSecurityGroupIngress", "UnauthorizedOperation", count=100)
    with FaultInjector(denied), monitor(world, live) as watch:
        described = world.runtime.wait_for(start(world, live), TIMEOUT)
    assert described["status"] == "FAILED" and described["error"] == "RolledBack"
    assert "AccessDenied" in described["cause"] and "the groups are as before" in described["cause"]
    assert {(r.key, r.rule_id) for r in world.node_rules()} == before
    assert watch.violations == []
    assert "Roll back the rules this execution added" in states(world, described["executionArn"])
    # The locks were released: the next run (fault gone) converges.
    assert reconcile(world)["status"] == "SUCCEEDED"  # type: ignore[index]
    assert ranges(world) == both(world, 31000, 32500)


def test_an_authorize_that_applied_but_lost_its_response_is_rolled_back_by_tag(
    world: DemoWorld,
) -> None:
    # Given the first authorize takes effect but its caller sees an error, and the second is denied
    live = grow(world)
    before = {(r.key, r.rule_id) for r in world.node_rules()}
    lost = Fault(
        "ec2", "AuthorizeSecurityGroupIngress", "UnauthorizedOperation", count=1, mode="after"
    )
    denied = Fault("ec2", "AuthorizeSecurityGroupIngress", "UnauthorizedOperation", count=100)
    with FaultInjector(lost, denied), monitor(world, live) as watch:
        described = world.runtime.wait_for(start(world, live), TIMEOUT)
    # Then the rollback finds the applied rule by its plan-id tag and revokes it
    assert described["error"] == "RolledBack"
    assert "revoked the 1 rule(s)" in described["cause"]
    assert {(r.key, r.rule_id) for r in world.node_rules()} == before
    assert watch.violations == []


def test_an_authorize_whose_response_was_lost_is_retried_idempotently(world: DemoWorld) -> None:
    live = grow(world)
    lost = Fault("ec2", "AuthorizeSecurityGroupIngress", "InternalError", count=1, mode="after")
    with FaultInjector(lost), monitor(world, live) as watch:
        described = world.runtime.wait_for(start(world, live), TIMEOUT)
    assert described["status"] == "SUCCEEDED"
    assert ranges(world) == both(world, 31000, 32500)  # no duplicate rule, nothing left over
    assert len(world.node_rules()) == 2
    assert watch.violations == []


def test_revoke_denied_stops_in_a_safe_superset_and_the_next_run_converges(
    world: DemoWorld,
) -> None:
    live = grow(world)
    denied = Fault("ec2", "RevokeSecurityGroupIngress", "UnauthorizedOperation", count=100)
    with FaultInjector(denied), monitor(world, live) as watch:
        described = world.runtime.wait_for(start(world, live), TIMEOUT)
    assert described["status"] == "FAILED" and described["error"] == "RevokeIncomplete"
    leftovers = sorted(r.rule_id or "" for r in world.node_rules() if r.key.to_port == 32000)
    assert len(leftovers) == 2 and all(i in described["cause"] for i in leftovers)
    assert ranges(world) == both(world, 31000, 32000) | both(world, 31000, 32500)
    assert watch.violations == []
    assert reconcile(world)["status"] == "SUCCEEDED"  # type: ignore[index]
    assert ranges(world) == both(world, 31000, 32500)


def test_an_execution_aborted_between_authorize_and_revoke_leaves_a_safe_superset(
    world: DemoWorld,
) -> None:
    # Given an execution that is stopped while it waits for the new rules to settle
    runtime = world.runtime
    live = grow(world)
    arns: list[str] = []

    def stop_on_wait(seconds: float) -> None:
        runtime.clients.stepfunctions.stop_execution(
            executionArn=arns[0], error="Aborted", cause="operator"
        )

    with runtime.waits.subscribe(stop_on_wait), monitor(world, live) as watch:
        arns.append(start(world, live))
        described = runtime.wait_for(arns[0], TIMEOUT)
    # Then the groups hold the old and the new rules (a safe superset), and no state lost traffic
    assert described["status"] == "ABORTED"
    assert ranges(world) == both(world, 31000, 32000) | both(world, 31000, 32500)
    assert watch.violations == []
    # And once the dead execution's lease has expired, the next run converges
    table = runtime.ref("LockTable")
    for group in world.node_groups.values():
        runtime.clients.dynamodb.update_item(
            TableName=table,
            Key={"group_id": {"S": group}},
            UpdateExpression="SET lease_expires_at = :past",
            ExpressionAttributeValues={":past": {"N": "1"}},
        )
    assert reconcile(world)["status"] == "SUCCEEDED"  # type: ignore[index]
    assert ranges(world) == both(world, 31000, 32500)


def test_two_executions_on_one_group_run_one_after_the_other(world: DemoWorld) -> None:
    live = grow(world)
    first, second = start(world, live, "-a"), start(world, live, "-b")
    done = [world.runtime.wait_for(arn, TIMEOUT) for arn in (first, second)]
    assert [d["status"] for d in done] == ["SUCCEEDED", "SUCCEEDED"]
    outcomes = sorted(json.loads(d["output"])["status"] for d in done)
    assert outcomes == ["applied", "unchanged"]  # the later one re-planned under the lock

    def window(arn: str) -> tuple[float, float]:
        events = world.runtime.events(arn)
        locked = next(
            e
            for e in events
            if e["type"] == "TaskStateExited"
            and e["stateExitedEventDetails"]["name"] == "Lock the groups"
        )
        released = next(
            e
            for e in events
            if e["type"] == "TaskStateEntered"
            and e["stateEnteredEventDetails"]["name"] == "Release the group locks"
        )
        return locked["timestamp"].timestamp(), released["timestamp"].timestamp()

    (a0, a1), (b0, b1) = window(first), window(second)
    assert a1 <= b0 or b1 <= a0  # the critical sections never overlap
    assert ranges(world) == both(world, 31000, 32500)


def test_an_expired_lease_is_taken_over_and_a_live_one_is_waited_for(world: DemoWorld) -> None:
    runtime = world.runtime
    table = runtime.ref("LockTable")
    group = world.node_groups["nodes-a"]
    live = grow(world)

    def lock(expires: int) -> None:
        runtime.clients.dynamodb.put_item(
            TableName=table,
            Item={
                "group_id": {"S": group},
                "holder": {"S": "dead-execution"},
                "lease_expires_at": {"N": str(expires)},
            },
        )

    lock(int(time.time()) + 3600)
    held = runtime.wait_for(start(world, live, "-held"), TIMEOUT)
    assert held["status"] == "FAILED" and "LockBusy" in held["error"]
    assert ranges(world) == both(world, 31000, 32000)  # nothing was written
    lock(int(time.time()) - 1)
    taken = runtime.wait_for(start(world, live, "-taken"), TIMEOUT)
    assert taken["status"] == "SUCCEEDED"
    assert ranges(world) == both(world, 31000, 32500)


def test_an_input_that_is_not_a_plan_fails_before_any_lock_or_write(world: DemoWorld) -> None:
    runtime = world.runtime
    before = ranges(world)
    bad = {
        "plan": {
            "feasible": True,
            "steps": [{"action": "revoke", "group_id": "sg-1", "rule_ids": "oops"}],
        }
    }
    described = runtime.wait_for(runtime.start_execution(MACHINE, bad, "bad-input"), TIMEOUT)
    assert described["status"] == "FAILED" and described["error"] == "InvalidPlan"
    assert "input.plan.steps.0.revoke.rule_ids: Input should be a valid list" in described["cause"]
    assert states(world, described["executionArn"]) == [
        "Check the plan input",
        "Reject the invalid input",
    ]
    items = runtime.clients.dynamodb.scan(TableName=runtime.ref("LockTable"))["Items"]
    # no group lock (the table also keeps the brake's window and the janitor's records)
    assert [i for i in items if i["group_id"]["S"].startswith("sg-")] == []
    assert ranges(world) == before


def test_one_group_change_costs_at_most_25_state_transitions(world: DemoWorld) -> None:
    # Given a new Service whose targets are only the nodes of node group a
    world.add_service(32500, instances=world.instances[:2])
    live = live_plan(world)
    assert isinstance(live.result, Plan) and live.result.groups == [world.node_groups["nodes-a"]]
    # When its change is applied, Then the success path stays within 25 transitions ($0.025 per 1,000)
    described = world.runtime.wait_for(start(world, live), TIMEOUT)
    assert described["status"] == "SUCCEEDED"
    assert world.runtime.transitions(described["executionArn"]) <= 25
