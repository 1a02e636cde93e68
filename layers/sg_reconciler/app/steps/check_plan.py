"""Step 'Check the plan input' (functions/steps/check_plan.py)."""

from __future__ import annotations

import re
from typing import Any

from sg_reconciler.app.contracts.execution import CheckOutput, CheckRequest
from sg_reconciler.app.steps.common import parse
from sg_reconciler.core.ports import PlanStorage
from sg_reconciler.errors import InvalidPlan

_PLAN_ID = re.compile(r"^[A-Za-z0-9_-]{1,80}$")


def check_plan(event: object, store: PlanStorage) -> dict[str, Any]:
    """'Check the plan input': a valid plan, before any lock or write.

    The plan id that tags new rules (and finds them for a rollback) is the execution's name,
    unique for 90 days, never a value from the input: a re-run of an old input must not
    claim the rules an earlier execution created. A plan given inline (an execution started
    by hand) has its groups stored under that name; from here on the state carries counts.
    """
    request = parse(CheckRequest, event)
    if not _PLAN_ID.match(request.execution):
        raise InvalidPlan(
            f"execution name {request.execution!r} must be 1-80 letters, digits, '-' or '_'"
        )
    given = request.input
    if given.plan_ref is not None:
        ref = given.plan_ref
        store.groups(ref.groups_key, ref.groups)  # it must be there, whole
        return CheckOutput(
            plan_id=request.execution, groups_key=ref.groups_key, groups=ref.groups
        ).model_dump()
    if given.plan is None:
        raise InvalidPlan("input: give plan_ref (from the planner) or plan (inline)")
    plan = given.plan.to_plan()  # parsed with the input: a bad step is named there
    if not plan.steps:
        raise InvalidPlan("the plan has no steps")
    count = store.put_groups(request.execution, plan.groups)
    return CheckOutput(
        plan_id=request.execution, groups_key=request.execution, groups=count
    ).model_dump()
