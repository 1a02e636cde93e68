"""'Lock the groups', 'Release the group locks' and the lock janitor."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from sg_reconciler.app.contracts.base import GroupsInput, Input, Output


class LockInput(GroupsInput):
    holder: str = Field(min_length=1)


class LocksOutput(Output):
    """'Lock the groups' -> `$.locks.held`."""

    held: int


class ReleaseOutput(Output):
    """'Release the group locks' -> `$.released`."""

    released: int


class StatusChange(Input):
    """The part of a Step Functions "Execution Status Change" event the janitor needs."""

    name: str = Field(min_length=1)
    status: str
    stateMachineArn: str


class StatusChangeEvent(Input):
    detail: StatusChange


class JanitorOutput(Output):
    """The lock janitor's answer (no state machine reads it): `execution` when it released
    a stopped execution's locks, `ignored` when the event was not one."""

    released: int
    execution: str | None = None
    ignored: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(exclude_none=True)
