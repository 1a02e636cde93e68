"""The rollback Map and 'Sum up the rollback'."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from sg_reconciler.app.contracts.base import BatchRecord, Input, Output


class RollbackInput(Input):
    """One Map item of the rollback: the groups of batch `batch` of the authorize phase (only
    that phase adds rules before a rollback), paced as the apply Maps are."""

    batch: int = Field(ge=0)
    batches: int = Field(1, ge=1)  # how many items share the rate
    plan_id: str
    owner: str = Field(min_length=1)
    holder: str = Field(min_length=1)


class RollbackReportInput(Input):
    """'Sum up the rollback': the items' records in the plan store, and the error that
    started the rollback (for the cause)."""

    mode: Literal["report"]
    plan_id: str
    batches: int = Field(ge=0)
    error: dict[str, Any] | None = None


class RollbackRecord(BatchRecord):
    """What one rollback item did, kept in the plan store (part `rollback#<batch>`), not in
    the execution state: the rules it revoked and handed back (merged over its retries), the
    groups another execution holds now, and its error when it failed."""

    done: bool
    revoked: list[str]
    handed_back: list[str]
    lost: list[str]
    error: str = ""


class RollbackItemOutput(Output):
    """A rollback Map item (its output is dropped: the Map's ResultPath is null)."""

    groups: int
    revoked: int
    handed_back: int


class RollbackOutput(Output):
    """'Sum up the rollback' -> `$.outcome.rollback` (its `cause` ends the execution)."""

    revoked: int
    handed_back: int
    cause: str
