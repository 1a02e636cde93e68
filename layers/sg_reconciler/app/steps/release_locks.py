"""Step 'Release the group locks' (functions/steps/release_locks.py), and the lock janitor's
release after an execution stopped (functions/lock_janitor/app.py)."""

from __future__ import annotations

from typing import Any

from sg_reconciler.app.contracts.locks import (
    JanitorOutput,
    LockInput,
    ReleaseOutput,
    StatusChangeEvent,
)
from sg_reconciler.app.steps.common import parse, plan_groups
from sg_reconciler.core.ports import LockStore, PlanStorage


def release_locks(event: object, store: PlanStorage, locks: LockStore) -> dict[str, Any]:
    request = parse(LockInput, event)
    released = locks.release(plan_groups(request, store), request.holder)
    return ReleaseOutput(released=len(released)).model_dump()


STOPPED = frozenset({"FAILED", "TIMED_OUT", "ABORTED"})


def release_after_stop(
    event: object, locks: LockStore, state_machine_arn: str, lease_seconds: int
) -> dict[str, Any]:
    """Release the locks an execution still holds once it ended without its last state (a
    stop by hand, a timeout, a failure past every Catch), instead of waiting out the lease
    (invariant 13). At once: an invocation of it still running is stopped by fencing
    (invariant 14). The record that it ended comes first, so a lock step still in flight
    gives back what it takes. Idempotent: only this execution's locks, each deleted on that
    condition."""
    detail = parse(StatusChangeEvent, event).detail
    if detail.status not in STOPPED or detail.stateMachineArn != state_machine_arn:
        return JanitorOutput(
            released=0, ignored=f"{detail.status} of {detail.stateMachineArn}"
        ).to_dict()
    locks.mark_stopped(detail.name, lease_seconds)
    released = locks.release_held_by(detail.name)
    return JanitorOutput(released=len(released), execution=detail.name).to_dict()
