"""Helpers the step modules share: parsing a step's input, the failure text of a Catch,
the phases the refresh stored, and the records a Map's items keep in the plan store."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import ValidationError

from sg_reconciler.app.contracts.base import BatchRecord, GroupsInput, Input
from sg_reconciler.core.ports import PlanStorage
from sg_reconciler.errors import InvalidPlan, validation_message

if TYPE_CHECKING:
    from sg_reconciler.core.phases import Phases


def failure_text(error: dict[str, Any] | None) -> str:
    """'Error: message' from a Catch's error object, whose Cause is the Lambda's error JSON."""
    if not error:
        return "an error"
    cause = str(error.get("Cause", ""))
    try:
        message = json.loads(cause).get("errorMessage", cause)
    except (ValueError, AttributeError):
        message = cause
    return (
        f"{error.get('Error', 'Error')}: {message}"
        if message
        else str(error.get("Error", "an error"))
    )


def parse(model: type[Input], event: object) -> Any:
    """Validate a step's input; a bad one is an InvalidPlan that names the field."""
    try:
        return model.model_validate(event)
    except ValidationError as err:
        raise InvalidPlan(validation_message(err, root="input")) from None


def plan_groups(request: GroupsInput, store: PlanStorage) -> list[str]:
    """The execution's groups, read whole from the plan store (the state carries a count)."""
    return store.groups(request.groups_key, request.groups)


def stored_phases(store: PlanStorage, plan_id: str) -> tuple[Phases, dict[str, Any]]:
    """The phases the refresh stored, parsed, and their raw items (with desired rules)."""
    # Imported here: the lock and rollback steps never read phases (the refresh only when it
    # re-plans the revokes), so their imports create neither the plan's dataclasses nor its
    # models (docs/architecture.md, "Cold start").
    from sg_reconciler.app.contracts.plan import StoredPhases
    from sg_reconciler.core.phases import PHASE_NAMES

    doc = {phase: store.phase(plan_id, phase) for phase in PHASE_NAMES}
    try:
        return StoredPhases.model_validate(doc).to_phases(), doc
    except ValidationError as err:
        raise InvalidPlan(validation_message(err, at=("phases",))) from None


def failed_part(phase: str) -> str:
    """The plan store's part where the apply step notes a failed batch's error for verify."""
    return f"{phase}-failed"


MAX_FAILURES = 5  # failures a cause names; the rest are counted


Recorded = TypeVar("Recorded", bound=BatchRecord)


def batch_records(
    store: PlanStorage, plan_id: str, phase: str, model: type[Recorded], root: str
) -> dict[int, Recorded]:
    """What a Map's items recorded in the plan store, by batch (the last record of a batch
    wins); a record that does not parse is an InvalidPlan naming it."""
    records: dict[int, Recorded] = {}
    for raw in store.phase(plan_id, phase):
        try:
            record = model.model_validate(raw)
        except ValidationError as err:
            raise InvalidPlan(validation_message(err, root=root)) from None
        records[record.batch] = record
    return records
