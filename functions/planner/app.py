"""Planner Lambda: SQS batches of CloudTrail events (and the drift-repair schedule) to one plan."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools.logging.utils import copy_config_to_registered_loggers
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext
from sg_reconciler.app.plan_batch import plan_batch
from sg_reconciler.core.scope import Scope
from sg_reconciler.observability import logger, metrics, tracer
from sg_reconciler.settings import PlannerSettings, load_settings
from sg_reconciler.trigger.classify import Ignored, Parsed, parse_record, parse_sqs_record
from sg_reconciler.wiring import execution_starter, index_table, live_planner, plan_store

if TYPE_CHECKING:  # the live planner is loaded by the first batch that plans (cold start)
    from sg_reconciler.app.live_plan import LivePlan

# The trigger module logs each ignored event with the standard library; give it our format.
copy_config_to_registered_loggers(source_logger=logger, include={"sg_reconciler.trigger.classify"})


def _records(event: Any, settings: PlannerSettings) -> list[tuple[str, Parsed]]:
    """SQS records (message id, parsed body), or the scheduled event itself.

    Lambda's SQS and schedule triggers always send objects, but a direct invoke may send any
    JSON: what is not an object, or not an SQS record in a batch, is ignored like any
    unreadable trigger instead of failing.
    """
    where = {"account_id": settings.account_id, "region": settings.region}
    own = settings.own_roles
    if not isinstance(event, dict):
        return [("event", Ignored(None, f"event is a JSON {type(event).__name__}, not an object"))]
    if isinstance(event.get("Records"), list):
        return [
            parse_sqs_record(r, i, **where, own_role_arns=own)
            for i, r in enumerate(event["Records"])
        ]
    return [(str(event.get("id", "event")), parse_record(event, **where, own_role_arns=own))]


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: Any, context: LambdaContext) -> dict[str, Any]:
    settings = load_settings(PlannerSettings)
    records = _records(event, settings)
    event_ids = sorted({p.event_id for _, p in records if p.event_id})
    if event_ids:
        logger.set_correlation_id(event_ids[0])
    logger.append_keys(event_ids=event_ids[:20])

    def replan(scope: Scope, narrow: Scope | None = None) -> LivePlan:
        seconds_left = context.get_remaining_time_in_millis() / 1000
        plan_live, _ = live_planner(settings, attempts=5, seconds_left=seconds_left)
        return plan_live(scope, narrow)

    index = index_table(settings)
    if index is not None:  # the events' targets and ports, before the read (the index)
        from sg_reconciler.app.indexed_plan import record_changes, target_changes

        changed = record_changes(index, target_changes(records))
        metrics.add_metric(name="IndexEntriesFromEvents", unit=MetricUnit.Count, value=changed)
    store = plan_store(settings)
    start = execution_starter(settings, attempts=5)
    result = plan_batch(records, replan, start, time.time(), store)
    metrics.add_metric(name="EventsReceived", unit=MetricUnit.Count, value=result.received)
    metrics.add_metric(name="EventsIgnored", unit=MetricUnit.Count, value=result.ignored)
    metrics.add_metric(name="RulesToAdd", unit=MetricUnit.Count, value=result.rules_to_add)
    metrics.add_metric(name="RulesToRemove", unit=MetricUnit.Count, value=result.rules_to_remove)
    metrics.add_metric(
        name="PlansStarted", unit=MetricUnit.Count, value=int(result.outcome == "started")
    )
    refused = result.outcome == "refused" or result.refused_groups > 0
    metrics.add_metric(name="PlansRefused", unit=MetricUnit.Count, value=int(refused))
    metrics.add_metric(
        name="PlansFailed", unit=MetricUnit.Count, value=int(result.outcome == "failed")
    )
    metrics.add_metric(name="RevokesHeld", unit=MetricUnit.Count, value=int(bool(result.held)))
    if result.unreached_groups is not None:  # a narrow read does not count them
        metrics.add_metric(
            name="OwnedRulesOutsideScope", unit=MetricUnit.Count, value=result.unreached_groups
        )
    if result.held:
        logger.error(f"revokes held by the brake: {result.held}")
    if result.released:
        logger.warning(f"brake released by an operator: {result.released}")
    log = logger.info
    if refused or result.outcome == "failed":
        log = logger.error
    elif result.outcome == "restart limit":
        log = logger.warning
    log(
        f"batch of {result.received}: {result.outcome}",
        extra={
            "relevant": result.relevant,
            "ignored": result.ignored,
            "execution_name": result.execution_name,
            "reason": result.reason,
        },
    )
    if result.outcome == "failed" and not isinstance(event.get("Records"), list):
        # A scheduled run has no queue to redeliver it: fail the invocation, so Lambda retries
        # it and its Errors metric shows it.
        raise PlanningFailed(result.reason)
    return {"batchItemFailures": [{"itemIdentifier": mid} for mid in result.failed_message_ids]}


class PlanningFailed(Exception):
    """The drift-repair run could not plan (the reason is the underlying error)."""
