"""Step 'Release the group locks'."""

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext
from sg_reconciler.app.steps import release_locks
from sg_reconciler.observability import logger, tracer
from sg_reconciler.settings import StepSettings, load_settings
from sg_reconciler.wiring import group_locks, plan_store


@logger.inject_lambda_context
@tracer.capture_lambda_handler
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    config = load_settings(StepSettings)
    return release_locks.release_locks(event, plan_store(config), group_locks(config))
