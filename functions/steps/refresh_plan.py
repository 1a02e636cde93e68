"""Steps 'Refresh the plan under the locks' and 'Re-plan the revokes after the settle': the
planner's own code, run again under the locks on the locked groups' rules and the plan's
closure."""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools.utilities.typing import LambdaContext
from sg_reconciler.adapters.aws import typed_aws_errors
from sg_reconciler.app.steps import refresh_plan
from sg_reconciler.core.pacing import pacing_for
from sg_reconciler.core.scope import Scope
from sg_reconciler.observability import logger, tracer
from sg_reconciler.settings import StepSettings, load_settings
from sg_reconciler.wiring import plan_store, planners

if TYPE_CHECKING:  # the live planner is loaded when a step re-plans (cold start)
    from sg_reconciler.app.live_plan import LivePlan, LockedReplan, Replan
    from sg_reconciler.app.planned import Planned


@logger.inject_lambda_context
@tracer.capture_lambda_handler
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    config = load_settings(StepSettings)

    @cache
    def built() -> tuple[Replan, LockedReplan, int]:
        # The policy and the live planner, read and loaded once a re-plan needs them: a
        # re-plan after the settle with nothing to revoke reads nothing.
        return planners(config, seconds_left=context.get_remaining_time_in_millis() / 1000)

    def replan(scope: Scope, narrow: Scope | None = None) -> LivePlan:
        # Typed errors, so the state machine retries a throttled or failed read (a bare
        # ClientError matches no Retry and ended the execution).
        with typed_aws_errors():
            return built()[0](scope, narrow)

    def locked(groups: Sequence[str], planned: Planned) -> LivePlan:
        with typed_aws_errors():
            return built()[1](groups, planned)

    store = plan_store(config)
    pacing = pacing_for(config.writes_per_second)
    if isinstance(event, dict) and event.get("mode") == "revokes":
        return refresh_plan.replan_revokes(event, store, replan, pacing, locked)
    return refresh_plan.refresh_plan(event, store, replan, built()[2], config.owner, pacing, locked)
