"""Steps 'Verify the new rules are visible', 'Verify the final state', and the leftover
report: 'List the groups to check for leftovers', 'Check a batch of groups for leftovers'
(a Map item), 'Report the leftover rules'."""

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext
from sg_reconciler.app.steps import verify_rules
from sg_reconciler.observability import logger, tracer
from sg_reconciler.settings import StepSettings, load_settings
from sg_reconciler.wiring import group_rules, plan_store


@logger.inject_lambda_context
@tracer.capture_lambda_handler
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return verify_rules.verify(event, plan_store(load_settings(StepSettings)), group_rules())
