"""Step 'Refresh the plan under the locks': the planner's own code, run again under the locks."""

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext
from sg_reconciler import workflow
from sg_reconciler.adapters.aws_clients import client
from sg_reconciler.adapters.security_groups import typed_aws_errors
from sg_reconciler.core.plan import Plan, Refusal
from sg_reconciler.core.scope import Scope
from sg_reconciler.observability import logger, tracer
from sg_reconciler.policy import load_policy_from_ssm
from sg_reconciler.reconcile import compute_live_plan
from sg_reconciler.settings import StepSettings, load_settings


@logger.inject_lambda_context
@tracer.capture_lambda_handler
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    config = load_settings(StepSettings)
    policy = load_policy_from_ssm(client("ssm"), config.policy_parameter)

    def replan(scope: Scope) -> Plan | Refusal:
        # Typed errors, so the state machine retries a throttled or failed read (a bare
        # ClientError matches no Retry and ended the execution).
        with typed_aws_errors():
            live = compute_live_plan(client("ec2"), client("elbv2"), policy, scope, partial=True)
            return live.result

    return workflow.refresh_plan(event, replan, policy.settle_seconds, policy.owner)
