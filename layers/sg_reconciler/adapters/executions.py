"""Start apply executions: one per plan, named so that a duplicate start is a no-op."""

from __future__ import annotations

import json
from typing import Any

from botocore.exceptions import ClientError

from sg_reconciler.adapters.security_groups import typed_aws_errors

ENDED_BADLY = frozenset({"FAILED", "TIMED_OUT", "ABORTED"})
MAX_RESTARTS = 9


def execution_arn(state_machine_arn: str, name: str) -> str:
    return f"{state_machine_arn.replace(':stateMachine:', ':execution:', 1)}:{name}"


def start_execution(
    stepfunctions: Any, state_machine_arn: str, name: str, payload: dict[str, Any]
) -> bool:
    """Start `name`; False when that plan is already running or applied (a duplicate trigger).

    A plan whose earlier execution of the same name failed (rolled back, aborted) is started
    again under `<name>-r<n>`: the fault that stopped it may be gone.
    """
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
        if status not in ENDED_BADLY:
            return False
    return False
