"""The execution input (docs/contracts.md) and "Check the plan input"."""

from __future__ import annotations

from pydantic import Field

from sg_reconciler.app.contracts.base import Input, Output
from sg_reconciler.app.contracts.plan import PlanDocument

PLAN_KEY_PATTERN = r"^[A-Za-z0-9_-]{1,80}$"


class PlanRef(Input):
    """A plan the planner stored: its groups are in the plan store under `groups_key`; the
    counts are for people reading the input (the execution re-plans)."""

    groups_key: str = Field(pattern=PLAN_KEY_PATTERN)
    groups: int = Field(ge=1)
    calls: int | None = Field(None, ge=0)
    rules_to_add: int | None = Field(None, ge=0)
    rules_to_remove: int | None = Field(None, ge=0)


class Trigger(Input):
    event_ids: list[str] = Field(default_factory=list)  # the first 50, sorted
    scheduled: bool | None = None  # True: the schedule started it (drift it found)


class ExecutionInput(Input):
    """The execution input: a stored plan's reference (the planner), or a plan inline (by
    hand). `plan_id` is informative: the plan id is always the execution's name."""

    plan_id: str | None = None
    plan_ref: PlanRef | None = None
    plan: PlanDocument | None = None
    trigger: Trigger | None = None


class CheckRequest(Input):
    input: ExecutionInput
    execution: str = Field(min_length=1)


class CheckOutput(Output):
    """'Check the plan input' -> `$.checked`."""

    plan_id: str
    groups_key: str
    groups: int
