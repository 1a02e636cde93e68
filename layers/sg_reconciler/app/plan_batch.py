"""The planner Lambda's logic: a batch of triggers becomes at most one plan and one execution.

A burst of events (a Helm release touching 30 Services) arrives as one SQS batch; their
scopes merge, the account is read once, and one execution starts. Events that start no work
(failed calls, other accounts, the reconciler's own calls, unreadable ones) never fail the
batch. When planning itself fails, only the relevant records are reported as failures so SQS
delivers them again (and the dead-letter queue catches a poison batch).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sg_reconciler.core.scope import Scope
from sg_reconciler.trigger.classify import SCHEDULED_DETAIL_TYPE, Ignored, Parsed, Relevant

if TYPE_CHECKING:
    from sg_reconciler.app.live_plan import Replan
    from sg_reconciler.core.plan import Plan
    from sg_reconciler.core.ports import ExecutionStarter, PlanStorage

EXECUTION_NAME_BUCKET_SECONDS = 600


@dataclass
class BatchResult:
    """What one batch did; `failed_message_ids` go back to SQS for redelivery."""

    received: int = 0
    relevant: int = 0
    ignored: int = 0
    # started | duplicate | restart limit | unchanged | refused | failed
    outcome: str = "nothing to do"
    execution_name: str | None = None
    reason: str = ""
    rules_to_add: int = 0
    rules_to_remove: int = 0
    refused_groups: int = 0  # groups a partial plan holds back (their revokes wait)
    held: str = ""  # the brake holds the revokes: why
    released: str = ""  # an operator released the brake: the fingerprint let through
    # groups with owned rules the policy does not reach; None: a narrow read does not know
    unreached_groups: int | None = 0
    failed_message_ids: list[str] = field(default_factory=list)


# EventBridge's ids are 36 characters; a longer one (a forged or broken event) is cut, so the
# execution input stays within its size however the events look (invariant 13).
EVENT_ID_CHARS = 80


def execution_name(plan: Plan, now: float) -> str:
    """Plan hash plus a 10-minute bucket: a redelivered trigger is a no-op, a recurrence next
    week is not (Standard workflow names stay taken for 90 days)."""
    bucket = time.strftime("%Y%m%dT%H%M", time.gmtime(now - now % EXECUTION_NAME_BUCKET_SECONDS))
    return f"{plan.plan_id()}-{bucket}"


def plan_batch(
    records: Sequence[tuple[str, Parsed]],
    replan: Replan,
    start: ExecutionStarter,
    now: float,
    store: PlanStorage,
) -> BatchResult:
    """Merge the relevant records' scopes, plan once, start at most one execution.

    An event scope is tried narrowly first (`compute_live_plan`). The plan's groups go to
    the plan store first (keyed by the plan's hash), with the event scope when the plan came
    from its narrow read, and its desired rules and what it takes away (the steps under the
    locks read only its closure, app/planned.py), and the execution gets a
    reference and counts, so its input does not grow with the plan (invariant 13)."""
    result = BatchResult(received=len(records))
    relevant = [(mid, p) for mid, p in records if isinstance(p, Relevant)]
    result.relevant = len(relevant)
    result.ignored = sum(1 for _, p in records if isinstance(p, Ignored))
    if not relevant:
        return result
    scope = Scope.merge(p.scope for _, p in relevant)
    from sg_reconciler.core.plan import Authorize, Refusal, Revoke  # a batch that plans

    try:
        live = replan(scope, scope)
        plan = live.result
        result.unreached_groups = None if live.narrowed else len(live.unreached)
        if live.brake is not None:
            result.held = "" if live.released else live.brake.reason
            result.released = live.brake.fingerprint if live.released else ""
        if isinstance(plan, Refusal):
            result.outcome, result.reason = "refused", plan.reason
            return result
        if plan.refused:
            result.refused_groups = len(plan.refused)
            result.reason = "; ".join(plan.refused)
        result.rules_to_add = sum(len(s.rules) for s in plan.steps if isinstance(s, Authorize))
        result.rules_to_remove = sum(len(s.rule_ids) for s in plan.steps if isinstance(s, Revoke))
        if not plan.steps:
            result.outcome = "unchanged"
            return result
        # Only a batch that starts an execution loads these (cold start: an ignored event,
        # the most frequent, needs none of them).
        from sg_reconciler.app.contracts.execution import ExecutionInput, PlanRef, Trigger
        from sg_reconciler.app.planned import put_planned
        from sg_reconciler.app.scope_store import put_scope

        name = execution_name(plan, now)
        key = plan.plan_id()
        put_scope(store, key, live.narrowed)
        put_planned(store, key, live.planned(plan))
        execution_input = ExecutionInput(
            plan_id=name,
            plan_ref=PlanRef(
                groups_key=key,
                groups=store.put_groups(key, plan.groups),
                calls=len(plan.steps),
                rules_to_add=result.rules_to_add,
                rules_to_remove=result.rules_to_remove,
            ),
            trigger=Trigger(
                event_ids=sorted({p.event_id[:EVENT_ID_CHARS] for _, p in relevant})[:50],
                scheduled=any(p.event_name == SCHEDULED_DETAIL_TYPE for _, p in relevant) or None,
            ),
        )
        result.execution_name = name
        result.outcome = start(name, execution_input.model_dump(exclude_none=True))
        if result.outcome == "restart limit":
            limit = (
                f"{name} and each of its restarts in this {EXECUTION_NAME_BUCKET_SECONDS // 60}"
                "-minute window ran and ended: the same plan starts again in the next window"
            )
            result.reason = "; ".join(filter(None, [result.reason, limit]))
    except Exception as err:  # any failure: SQS redelivers the relevant records
        result.outcome, result.reason = "failed", f"{type(err).__name__}: {err}"
        result.failed_message_ids = [mid for mid, _ in relevant]
    return result
