"""Step 'Check the plan input'."""

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext
from sg_reconciler.app.steps import check_plan
from sg_reconciler.observability import logger, tracer
from sg_reconciler.settings import StepSettings, load_settings
from sg_reconciler.wiring import plan_store


@logger.inject_lambda_context
@tracer.capture_lambda_handler
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return check_plan.check_plan(event, plan_store(load_settings(StepSettings)))
