"""The central stack's recorder: each deployment's outcomes and alarm changes, as they arrive
on the organization's bus, become its item in the fleet table and a metric of how many
outcomes need an operator (the central alarm watches it)."""

from typing import Any

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext
from sg_reconciler.adapters.aws import client
from sg_reconciler.adapters.fleet import FleetTable
from sg_reconciler.core.fleet import (
    ALARM_DETAIL_TYPE,
    AlarmChange,
    ExecutionOutcome,
    alarm_change,
)
from sg_reconciler.observability import logger, metrics, tracer
from sg_reconciler.settings import FleetRecorderSettings, load_settings


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    config = load_settings(FleetRecorderSettings)
    outcome: ExecutionOutcome | AlarmChange
    if event.get("detail-type") == ALARM_DETAIL_TYPE:
        outcome = alarm_change(event)
    else:
        outcome = ExecutionOutcome.from_dict(event.get("detail") or {})
    status = FleetTable(client("dynamodb", 3), config.fleet_table).record(outcome)
    reasons = status.attention()
    metrics.add_metric(name="NeedsAttention", unit=MetricUnit.Count, value=int(bool(reasons)))
    extra = {"account": status.account, "region": status.region, "attention": reasons}
    (logger.warning if reasons else logger.info)("deployment status", extra=extra)
    return {"account": status.account, "region": status.region, "attention": reasons}
