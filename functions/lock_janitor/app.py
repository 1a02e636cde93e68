"""Release the locks of an apply execution that stopped, timed out or failed past its Catch.

Triggered by EventBridge on Step Functions "Execution Status Change" (FAILED, TIMED_OUT,
ABORTED) of this stack's state machine; not a step of the state machine.
"""

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext
from sg_reconciler.app.steps import release_locks
from sg_reconciler.observability import logger, tracer
from sg_reconciler.settings import JanitorSettings, load_settings
from sg_reconciler.wiring import group_locks


@logger.inject_lambda_context
@tracer.capture_lambda_handler
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    config = load_settings(JanitorSettings)
    result = release_locks.release_after_stop(
        event, group_locks(config), config.state_machine_arn, config.lease_seconds
    )
    logger.info("locks of a stopped execution", extra=result)
    return result
