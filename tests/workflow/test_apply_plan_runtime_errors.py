"""A runtime error in the real ASL ends the execution at its state, as on AWS, and the lock
janitor frees the locks the ASL's own cleanup never reached.

AWS: "a retry or catch on States.ALL won't catch States.Runtime errors" (AWS Step Functions
Developer Guide, "Handling errors in Step Functions workflows", Error names); a ResultSelector
path that the task's result lacks is such an error. The local runtime has AWS's behaviour
through `moto_hooks.patch_states_all_as_aws` (moto alone catches it: tests/tooling/emulator/test_moto_hooks.py).
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from sg_reconciler.adapters.inventory import AccountInventory
from sg_reconciler.app.live_plan import compute_live_plan
from sg_reconciler.app.plan_batch import execution_name
from sg_reconciler.app.steps import refresh_plan
from sg_reconciler.core.plan import Plan
from sg_reconciler.policy import parse_policy
from sg_reconciler_tools.demo.world import DemoWorld
from sg_reconciler_tools.local import InvariantMonitor

MACHINE = "ApplyPlanStateMachine"
TIMEOUT = 60.0
BROKEN_STATE = "Re-plan the revokes after the settle"


def lock_items(world: DemoWorld) -> list[dict[str, Any]]:
    """The group locks (the table also holds the brake's window and the janitor's records)."""
    table = world.runtime.ref("LockTable")
    items = world.runtime.clients.dynamodb.scan(TableName=table)["Items"]
    return [i for i in items if i["group_id"]["S"].startswith("sg-")]


def wait_until_unlocked(world: DemoWorld, timeout: float = 10.0) -> list[dict[str, Any]]:
    """The janitor runs on the status-change event, after describe_execution already reads
    FAILED: poll the lock table until no group is locked or `timeout` passes."""
    deadline = time.monotonic() + timeout
    pause = threading.Event()
    while (items := lock_items(world)) and time.monotonic() < deadline:
        pause.wait(0.02)
    return items


def test_a_runtime_error_ends_the_execution_at_its_state_and_the_janitor_frees_the_locks(
    world: DemoWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    runtime = world.runtime
    # Given the #3639 change, and a re-plan step whose result lacks the `revoke` field the
    # state's ResultSelector reads ($.Payload.revoke): a States.Runtime error at that state
    world.add_service(32500)
    clients = runtime.clients
    parsed = parse_policy(world.policy)
    live = compute_live_plan(AccountInventory(clients.ec2, clients.elbv2, parsed), parsed, None)
    assert isinstance(live.result, Plan) and live.result.steps
    real = refresh_plan.replan_revokes

    def without_revoke(*args: Any, **kwargs: Any) -> dict[str, Any]:
        answer = real(*args, **kwargs)
        return {key: value for key, value in answer.items() if key != "revoke"}

    monkeypatch.setattr(refresh_plan, "replan_revokes", without_revoke)
    name = execution_name(live.result, time.time())
    before = len(runtime.invocations)

    # When the change runs on the real ASL
    with InvariantMonitor(clients.ec2, world.node_groups.values(), None, live.desired) as watch:
        arn = runtime.start_execution(
            MACHINE, {"plan_id": name, "plan": live.result.to_dict()}, name
        )
        described = runtime.wait_for(arn, TIMEOUT)
        still_locked = wait_until_unlocked(world)

    # Then it fails at that state with States.Runtime: the state's Catch on States.ALL did not
    # run the ASL's cleanup ("Report the leftover rules", "Release the group locks")
    assert (described["status"], described["error"]) == ("FAILED", "States.Runtime")
    entered = [
        e["stateEnteredEventDetails"]["name"]
        for e in runtime.events(arn)
        if e["type"].endswith("StateEntered")
    ]
    assert entered[-1] == BROKEN_STATE, entered
    assert "Report the leftover rules" not in entered
    assert "Release the group locks" not in entered
    # And the groups hold the old and the new rules (a safe superset; nothing was revoked)
    assert watch.violations == []
    ranges = {(r.group_id, r.key.from_port, r.key.to_port) for r in world.node_rules()}
    for group in world.node_groups.values():
        assert {(group, 31000, 32000), (group, 31000, 32500)} <= ranges
    # And the janitor, on the FAILED status change, freed every lock the execution held
    assert still_locked == []
    called = runtime.invocations[before:]
    released = [i for i in called if i.logical_id == "ReleaseLocksFunction"]
    janitor = [i for i in called if i.logical_id == "ReleaseLocksAfterStopFunction"]
    assert released == []
    assert len(janitor) == 1 and not janitor[0].failed, janitor
    answer = janitor[0].result
    assert answer["execution"] == name
    assert answer["released"] == len(live.result.groups) >= 2
