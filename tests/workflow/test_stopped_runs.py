"""Runs that are stopped while a step is still at work (docs/invariants.md, invariant 14, and docs/architecture.md, "The flow": the lock janitor), on the
real ASL.

Stopping an execution does not stop a Lambda invocation already running, and the lock
janitor frees the stopped execution's locks at once (docs/invariants.md, 13 and 14): the
late invocation is stopped by fencing, and a lock step still in flight gives back what it
took. The local runtime stops as AWS does (ABORTED and the status change at once, the task
running on) and lets a test act while an invocation backs off (`LocalRuntime.step_aside`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from evidence.evidence_kit import drop_service, held_locks, live_plan
from sg_reconciler.core.plan import Plan, Revoke
from sg_reconciler_tools.demo.play import reconcile
from sg_reconciler_tools.demo.world import DemoWorld
from sg_reconciler_tools.local import Fault, FaultInjector, InvariantMonitor
from workflow.world_moves import admits

MACHINE = "ApplyPlanStateMachine"
TIMEOUT = 120.0
T = TypeVar("T")


def ranges(world: DemoWorld, group: str) -> list[tuple[int, int]]:
    return sorted(
        (r.key.from_port, r.key.to_port) for r in world.node_rules() if r.group_id == group
    )


def apply_invocations(world: DemoWorld, execution: str, phase: str) -> list[Any]:
    return [
        i
        for i in world.runtime.invocations
        if i.logical_id == "ApplyStepsFunction"
        and i.event.get("holder") == execution
        and i.event.get("phase") == phase
    ]


def settled(found: Callable[[], list[T]], timeout: float = TIMEOUT) -> list[T]:
    """What `found` returns once it is not empty (a late invocation has ended)."""
    deadline = time.monotonic() + timeout
    pause = threading.Event()
    while not (result := found()):
        if time.monotonic() > deadline:
            raise TimeoutError(f"nothing found after {timeout} s")
        pause.wait(0.02)
    return result


def test_a_stopped_execution_whose_revoke_backs_off_never_writes_after_another_run(
    world: DemoWorld,
) -> None:
    # Given the #3639 change in one node group (execution A), whose revoke is throttled
    runtime, sfn = world.runtime, world.runtime.clients.stepfunctions
    group = world.node_groups["nodes-a"]
    world.add_service(32500, instances=world.instances[:2])
    live = live_plan(world)
    assert isinstance(live.result, Plan)
    assert any(isinstance(s, Revoke) for s in live.result.steps)
    throttled = Fault("ec2", "RevokeSecurityGroupIngress", "RequestLimitExceeded", count=1)
    story: dict[str, Any] = {}

    def while_backing_off(_seconds: float) -> None:
        # While A's revoke backs off: an operator stops A (the janitor frees its locks at
        # once), the Service goes away again, and the next run (B) takes the group and
        # revokes the rule A added. A's invocation is still running all the while.
        if story or not faults.fired:
            return
        with runtime.step_aside():
            sfn.stop_execution(executionArn=story.setdefault("A", arn), cause="operator")
            story["locks after the stop"] = held_locks(runtime)
            story["A status"] = sfn.describe_execution(executionArn=arn)["status"]
            drop_service(world, 32500)
            story["B"] = reconcile(world)
            story["after B"] = ranges(world, group)

    with (
        FaultInjector(throttled) as faults,
        runtime.pacer_sleeps.subscribe(while_backing_off),
        InvariantMonitor(runtime.clients.ec2, [group], None, live.desired) as watch,
    ):
        arn = runtime.start_execution(MACHINE, {"plan": live.result.to_dict()}, "run-a")
        described = runtime.wait_for(arn, TIMEOUT)
        # (ABORTED at once; A's invocation goes on until its backoff and next attempt end)
        late = settled(lambda: apply_invocations(world, "run-a", "revoke"))
        revokes = faults.calls("ec2", "RevokeSecurityGroupIngress")

    # Then the stop ended A at once and the janitor freed its lock at once
    assert described["status"] == "ABORTED" and story["A status"] == "ABORTED"
    assert story["locks after the stop"] == []
    # And B took the group and changed it: the rule A added is gone, the old one serves
    assert (story["B"] or {}).get("status") == "SUCCEEDED"
    assert story["after B"] == [(31000, 32000)]
    # And A's invocation, back from its backoff, found its lock gone and made no call: the
    # throttled attempt and B's revoke are the only revoke calls
    (late,) = late
    assert late.error_type == "LockLost" and "no call made" in (late.error_message or "")
    assert revokes == 2
    assert ranges(world, group) == [(31000, 32000)] and admits(world, group, 31500)
    # And no state in between lost traffic or over-exposed the group
    assert watch.snapshots and watch.violations == []


def test_a_late_writer_is_fenced_off_while_the_next_run_holds_the_group(
    world: DemoWorld,
) -> None:
    # Given execution A for a Service's removal in one node group (31000-32500 ->
    # 31000-32000), whose revoke of the old rule is throttled; the live guard alone would
    # let that revoke through later, since A's new rule still admits everything A wants
    runtime, sfn = world.runtime, world.runtime.clients.stepfunctions
    group = world.node_groups["nodes-a"]
    world.add_service(32500, instances=world.instances[:2])
    assert (reconcile(world) or {}).get("status") == "SUCCEEDED"
    as_before = live_plan(world).desired  # what B will want again: the rules of now
    drop_service(world, 32500)
    live = live_plan(world)
    assert isinstance(live.result, Plan)
    throttled = Fault("ec2", "RevokeSecurityGroupIngress", "RequestLimitExceeded", count=1)
    b_revokes, story = threading.Event(), {}  # B waits at its revoke until A's attempt is over

    def b_at_its_revoke(function: str, event: Any) -> None:
        if function == "ApplyStepsFunction" and event.get("holder") == "run-b":
            story["B held at its revoke"] = b_revokes.wait(TIMEOUT)

    def while_backing_off(_seconds: float) -> None:
        # While A backs off: A is stopped (its lock freed), the Service comes back, and the
        # next run (B) takes the group; it wants the old rule again. A goes on while B
        # still holds the group.
        if story or not faults.fired:
            return
        with runtime.step_aside():
            sfn.stop_execution(executionArn=arn, cause="operator")
            world.add_service(32500, instances=world.instances[:2])
            story["B"] = runtime.start_execution(
                MACHINE, {"plan": live_plan(world).result.to_dict()}, "run-b"
            )
            story["B holds"] = settled(lambda: [h for h in lock_holders(world) if h == "run-b"])

    with (
        FaultInjector(throttled) as faults,
        runtime.pacer_sleeps.subscribe(while_backing_off),
        runtime.before_invoke(b_at_its_revoke),
        # NEW is B's desired state, the rules as they are now: a revoke of the old rule by
        # A would cut port 32500 (1 no loss)
        InvariantMonitor(runtime.clients.ec2, [group], None, as_before) as watch,
    ):
        arn = runtime.start_execution(MACHINE, {"plan": live.result.to_dict()}, "run-a")
        assert runtime.wait_for(arn, TIMEOUT)["status"] == "ABORTED"
        (late,) = settled(lambda: apply_invocations(world, "run-a", "revoke"))
        b_revokes.set()
        b_end = runtime.wait_for(story["B"], TIMEOUT)
    # Then A's late attempt met B's lock and made no call
    assert late.error_type == "LockLost" and "no call made" in (late.error_message or "")
    # And B ran to its end: the old rule serves the Service that came back
    assert b_end["status"] == "SUCCEEDED", b_end
    assert ranges(world, group) == [(31000, 32500)]
    assert admits(world, group, 32500) and admits(world, group, 31450)
    # And no state in between lost traffic
    assert watch.snapshots and watch.violations == []


def lock_holders(world: DemoWorld) -> list[str]:
    table = world.runtime.ref("LockTable")
    items = world.runtime.clients.dynamodb.scan(TableName=table).get("Items", [])
    return [i["holder"]["S"] for i in items if i["group_id"]["S"].startswith("sg-")]


def test_an_execution_stopped_during_lock_the_groups_leaves_no_lock_behind(
    world: DemoWorld,
) -> None:
    # Given an execution stopped while its lock step is already invoked: the stop's status
    # change reaches the janitor, which finds no lock yet; then the step takes the locks
    runtime, sfn = world.runtime, world.runtime.clients.stepfunctions
    world.add_service(32500)
    live = live_plan(world)
    assert isinstance(live.result, Plan)
    seen: dict[str, list[str]] = {}

    def stop_at_the_lock_step(function: str, event: Any) -> None:
        if function == "AcquireLocksFunction" and event.get("holder") == "run-a" and not seen:
            sfn.stop_execution(executionArn=arn, cause="operator")
            seen["locks the janitor found"] = held_locks(runtime)

    with (
        runtime.before_invoke(stop_at_the_lock_step),
        InvariantMonitor(runtime.clients.ec2, world.node_groups.values(), None, live.desired) as w,
    ):
        arn = runtime.start_execution(MACHINE, {"plan": live.result.to_dict()}, "run-a")
        assert runtime.wait_for(arn, TIMEOUT)["status"] == "ABORTED"
        (step,) = settled(
            lambda: [
                i
                for i in runtime.invocations
                if i.logical_id == "AcquireLocksFunction" and i.event.get("holder") == "run-a"
            ]
        )
        # Then the lock step gave back what it took: no lock outlives the execution
        assert seen["locks the janitor found"] == []
        assert step.error_type == "ExecutionStopped", step
        assert held_locks(runtime) == []
        # And the next run gets the groups at once (no LockBusy) and applies the change
        assert (reconcile(world) or {}).get("status") == "SUCCEEDED"
    assert all(admits(world, g, 32500) for g in world.node_groups.values())
    assert w.violations == []
