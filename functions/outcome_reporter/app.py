"""Report how an apply execution ended to the organization's central bus.

Triggered by EventBridge on this stack's Step Functions "Execution Status Change" to an end
(the event carries no error, so the execution is described); deployed only with a
FleetEventBusArn."""

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext
from sg_reconciler.adapters.aws import client
from sg_reconciler.adapters.fleet import report_outcome
from sg_reconciler.core.fleet import execution_outcome
from sg_reconciler.observability import logger, tracer
from sg_reconciler.settings import ReporterSettings, load_settings


@logger.inject_lambda_context
@tracer.capture_lambda_handler
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    config = load_settings(ReporterSettings)
    arn = str((event.get("detail") or {}).get("executionArn") or "")
    description = client("stepfunctions", 3).describe_execution(executionArn=arn)
    outcome = execution_outcome(
        description, account=config.account_id, region=config.region, stack=config.stack_name
    )
    report_outcome(client("events", 3), config.fleet_event_bus_arn, outcome)
    logger.info("outcome reported to the fleet", extra=outcome.to_dict())
    return outcome.to_dict()
