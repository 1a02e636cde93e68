"""Step 'Lock the groups' (functions/steps/acquire_locks.py)."""

from __future__ import annotations

from typing import Any

from sg_reconciler.app.contracts.locks import LockInput, LocksOutput
from sg_reconciler.app.steps.common import parse, plan_groups
from sg_reconciler.core.ports import LockStore, PlanStorage
from sg_reconciler.errors import ExecutionStopped


def acquire_locks(
    event: object, store: PlanStorage, locks: LockStore, lease_seconds: int
) -> dict[str, Any]:
    """'Lock the groups'. A lock taken for an execution that has already ended would outlive
    it by a whole lease (the janitor came and went before it was taken), so the step checks,
    after taking them, whether the janitor recorded the execution as ended, and if so gives
    them back (invariant 13). The janitor writes its record before it scans for locks: either
    this check sees the record, or the janitor's scan sees these locks."""
    request = parse(LockInput, event)
    held = locks.acquire(plan_groups(request, store), request.holder, lease_seconds)
    if locks.stopped(request.holder):
        given_back = locks.release(held, request.holder)
        raise ExecutionStopped(
            f"execution {request.holder} ended while its groups were being locked; "
            f"the {len(given_back)} lock(s) taken were given back"
        )
    return LocksOutput(held=len(held)).model_dump()
