"""Start apply executions: one per plan, named so that a duplicate start is a no-op."""

from __future__ import annotations

import json
from typing import Any

from botocore.exceptions import ClientError

from sg_reconciler.adapters.security_groups import typed_aws_errors


def start_execution(
    stepfunctions: Any, state_machine_arn: str, name: str, payload: dict[str, Any]
) -> bool:
    """Start `name`; False when an execution of that name exists already (a duplicate trigger)."""
    with typed_aws_errors():
        try:
            stepfunctions.start_execution(
                stateMachineArn=state_machine_arn, name=name, input=json.dumps(payload)
            )
        except ClientError as err:
            if err.response.get("Error", {}).get("Code") == "ExecutionAlreadyExists":
                return False
            raise
    return True
