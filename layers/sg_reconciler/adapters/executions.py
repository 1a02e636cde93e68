"""Start apply executions: one per plan, named so that a duplicate start is a no-op."""

from __future__ import annotations

import json
from typing import Any

from botocore.exceptions import ClientError

from sg_reconciler.adapters.aws import typed_aws_errors
from sg_reconciler.errors import InvalidPlan

# Only a running execution makes a start a duplicate. One that ended (failed, or succeeded
# and then the world drifted back to need the same steps within the name's 10-minute bucket)
# is started again: the execution re-plans under its locks, so a needless restart only
# finds nothing to change.
STILL_RUNNING = frozenset({"RUNNING", "PENDING_REDRIVE"})
MAX_RESTARTS = 9
MAX_INPUT_BYTES = 32 * 1024  # far under Step Functions' 256 KiB: the plan is in the store


def execution_arn(state_machine_arn: str, name: str) -> str:
    return f"{state_machine_arn.replace(':stateMachine:', ':execution:', 1)}:{name}"


def start_execution(
    stepfunctions: Any, state_machine_arn: str, name: str, payload: dict[str, Any]
) -> bool:
    """Start `name`; False when that plan is already running (a duplicate trigger).

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
                return True
            except ClientError as err:
                if err.response.get("Error", {}).get("Code") != "ExecutionAlreadyExists":
                    raise
            status = stepfunctions.describe_execution(
                executionArn=execution_arn(state_machine_arn, current)
            )["status"]
        if status in STILL_RUNNING:
            return False
    return False
