"""Steps 'Roll back the rules of a batch of groups' (a Map item) and 'Sum up the rollback'."""

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext
from sg_reconciler.app.steps import roll_back
from sg_reconciler.observability import logger, tracer
from sg_reconciler.settings import StepSettings, load_settings
from sg_reconciler.wiring import group_locks, group_rules, plan_store


@logger.inject_lambda_context
@tracer.capture_lambda_handler
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    config = load_settings(StepSettings)
    rules = group_rules(config, context.get_remaining_time_in_millis() / 1000)
    return roll_back.roll_back(
        event,
        plan_store(config),
        rules,
        group_locks(config),
        config.lease_seconds,
    )
