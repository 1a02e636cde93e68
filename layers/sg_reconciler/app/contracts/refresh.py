"""'Refresh the plan under the locks' and 'Re-plan the revokes after the settle'."""

from __future__ import annotations

from sg_reconciler.app.contracts.base import GroupsInput, Output


class RefreshInput(GroupsInput):
    plan_id: str


class OrderedRef(Output):
    """One call of the ordered phase: its batch, and the wait before it."""

    batch: int
    settle_seconds: int


class BatchRefs(Output):
    """The Maps' items: batch numbers (the revoke phase's come from the re-plan)."""

    authorize: list[int]
    ordered: list[OrderedRef]


class PacingOutput(Output):
    concurrency: int  # the Maps' MaxConcurrencyPath
    writes_per_second: float


class Summary(Output):
    """What changed, in numbers and the first notes: the execution's output (contracts.md)."""

    groups: int
    rules_authorized: int
    rules_revoked: int
    rules_modified: int
    rules_adopted: int
    calls: int
    notes: list[str]
    refused: list[str]
    held: str


class RefreshOutput(Output):
    """'Refresh the plan under the locks' -> `$.work.result`."""

    changed: bool
    batches: BatchRefs
    settle_seconds: int
    owner: str
    pacing: PacingOutput
    summary: Summary


class RevokesOutput(Output):
    """'Re-plan the revokes after the settle' -> `$.work.result.revokes`: the revoke
    batches, or why there are none (`deferred`, empty when the revokes go ahead)."""

    revoke: list[int]
    deferred: str
