"""Start apply executions: one per plan, named so that a duplicate start is a no-op."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from sg_reconciler.adapters.aws import typed_aws_errors
from sg_reconciler.errors import InvalidPlan

if TYPE_CHECKING:
    from sg_reconciler.core.ports import StartOutcome

# Only a running execution makes a start a duplicate. One that ended (failed, or succeeded
# and then the world drifted back to need the same steps within the name's 10-minute bucket)
# is started again: the execution re-plans under its locks, so a needless restart only
# finds nothing to change. A plan that ended MAX_RESTARTS + 1 times in one window (it fails
# every time) waits for the next window: "restart limit".
STILL_RUNNING = frozenset({"RUNNING", "PENDING_REDRIVE"})
MAX_RESTARTS = 9
MAX_INPUT_BYTES = 32 * 1024  # far under Step Functions' 256 KiB: the plan is in the store


def execution_arn(state_machine_arn: str, name: str) -> str:
    return f"{state_machine_arn.replace(':stateMachine:', ':execution:', 1)}:{name}"


def start_execution(
    stepfunctions: Any, state_machine_arn: str, name: str, payload: dict[str, Any]
) -> StartOutcome:
    """Start `name`: "started", or "duplicate" when that plan is running already (a
    duplicate trigger), or "restart limit" when `name` and all its restarts have ended.

    A plan whose earlier execution of the same name ended is started again under
    `<name>-r<n>`: a failed one's fault may be gone, and after a succeeded one the world has
    drifted back (a redelivered trigger of an applied plan plans nothing and starts nothing).
    """
    size = len(json.dumps(payload).encode())
    if size > MAX_INPUT_BYTES:
        raise InvalidPlan(
            f"execution input of {size} bytes is over {MAX_INPUT_BYTES}: the plan belongs in "
            "the plan store, the input carries its reference"
        )
    for attempt in range(MAX_RESTARTS + 1):
        current = name if attempt == 0 else f"{name}-r{attempt}"
        with typed_aws_errors():
            try:
                stepfunctions.start_execution(
                    stateMachineArn=state_machine_arn,
                    name=current,
                    input=json.dumps({**payload, "plan_id": current}),
                )
                return "started"
            except ClientError as err:
                if err.response.get("Error", {}).get("Code") != "ExecutionAlreadyExists":
                    raise
            status = stepfunctions.describe_execution(
                executionArn=execution_arn(state_machine_arn, current)
            )["status"]
        if status in STILL_RUNNING:
            return "duplicate"
    return "restart limit"


def in_flight_hand_backs(
    stepfunctions: Any, adopters: Sequence[str], state_machine_arn: str | None
) -> list[str]:
    """The executions a hand-over waits for before it is ready (`adopt --live`): an adopting
    execution still running (its rollback would hand the adopted rules back), and, when one
    ended without success (its adoptions unverified), every execution of the machine in
    flight. An adopter found nowhere is waited for too: nobody can tell. `state_machine_arn`
    None looks for each adopter in every state machine of the account and region."""
    waiting: list[str] = []
    unsettled = False
    machines = [state_machine_arn] if state_machine_arn else None
    for name in sorted(set(adopters)):
        with typed_aws_errors():
            found = _find_execution(stepfunctions, name, machines)
        if found is None:
            waiting.append(
                f"{name} (adopted rules, but no such execution was found: give --state-machine)"
            )
            continue
        machine, status = found
        machines = machines or [machine]
        if status in STILL_RUNNING:
            waiting.append(
                f"{name} ({status.lower()}: if it fails, its rollback hands the adopted rules back)"
            )
        elif status != "SUCCEEDED":
            unsettled = True
    if unsettled and machines:
        with typed_aws_errors():
            pages = stepfunctions.get_paginator("list_executions").paginate(
                stateMachineArn=machines[0], statusFilter="RUNNING"
            )
            running = [e["name"] for page in pages for e in page.get("executions", [])]
        waiting += [
            f"{name} (running while the adopting run ended without success)"
            for name in running
            if not any(w.startswith(f"{name} ") for w in waiting)
        ]
    return waiting


def _find_execution(
    stepfunctions: Any, name: str, machines: list[str] | None
) -> tuple[str, str] | None:
    """(state machine ARN, status) of the execution named `name`, or None."""
    if machines is None:
        pages = stepfunctions.get_paginator("list_state_machines").paginate()
        machines = [m["stateMachineArn"] for page in pages for m in page.get("stateMachines", [])]
    for machine in machines:
        try:
            described = stepfunctions.describe_execution(executionArn=execution_arn(machine, name))
        except ClientError as err:
            if err.response.get("Error", {}).get("Code") != "ExecutionDoesNotExist":
                raise
            continue
        return machine, str(described["status"])
    return None
