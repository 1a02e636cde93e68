"""Steps 'Roll back the rules of a batch of groups' and 'Sum up the rollback'
(functions/steps/roll_back.py)."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from sg_reconciler.app.contracts.rollback import (
    RollbackInput,
    RollbackItemOutput,
    RollbackOutput,
    RollbackRecord,
    RollbackReportInput,
)
from sg_reconciler.app.steps.common import MAX_FAILURES, batch_records, failure_text, parse
from sg_reconciler.core.ports import LockStore, PlanStorage, RuleStore
from sg_reconciler.errors import GroupNotFound, InvalidPlan, LockLost, RollbackIncomplete

ROLLBACK = "rollback"  # the plan store's parts of the rollback items' records


def roll_back(
    event: object,
    store: PlanStorage,
    rules: RuleStore,
    locks: LockStore,
    lease_seconds: int,
) -> dict[str, Any]:
    """'Roll back the rules this execution added' (one Map item) and 'Sum up the rollback'."""
    if isinstance(event, dict) and event.get("mode") == "report":
        return report_rollback(event, store)
    return roll_back_batch(event, store, rules, locks, lease_seconds)


def roll_back_batch(
    event: object,
    store: PlanStorage,
    rules: RuleStore,
    locks: LockStore,
    lease_seconds: int,
) -> dict[str, Any]:
    """Compensation for one batch of the authorize phase (only it adds rules before a
    rollback): revoke exactly the rules this execution created in its groups, found by
    their tags (a write can apply while its caller sees an error), and hand back the rules
    it adopted, as they were. Paced as the apply Maps are.

    Only in groups this execution still holds: where its lease expired and another execution
    took the group, that execution may already rely on the new rules, so they stay (a safe
    superset) and the item fails with LockLost. What the item did goes to the plan store
    (merged with an earlier attempt's), never to the execution state (invariant 13).
    """
    request = parse(RollbackInput, event)
    if rules.pacer is not None:
        rules.pacer.fit(request.batch, request.batches)
    try:
        earlier = RollbackRecord.model_validate(
            store.batch(request.plan_id, ROLLBACK, request.batch)[0]
        )
    except (InvalidPlan, IndexError, ValidationError):
        earlier = RollbackRecord(
            batch=request.batch, done=False, revoked=[], handed_back=[], lost=[]
        )
    groups = [
        str(item.get("group_id"))
        for item in store.batch(request.plan_id, "authorize", request.batch)
        if isinstance(item, dict)
    ]
    owner = request.owner
    revoked: list[str] = []
    handed_back: list[str] = []
    lost: list[str] = []
    failure = "the step stopped before its end"  # unless it ends, or says why it did not
    try:
        held = []
        for group_id in groups:
            try:
                locks.renew(group_id, request.holder, lease_seconds)
                held.append(group_id)
            except LockLost:
                lost.append(group_id)
        by_group: dict[str, list[str]] = {}
        for rule in rules.tagged(held, owner, request.plan_id) if held else []:
            by_group.setdefault(rule.group_id, []).append(rule.rule_id or "")
        for group_id, ids in sorted(by_group.items()):
            try:
                revoked += rules.revoke(group_id, ids, owner)
            except GroupNotFound:
                continue  # the group and its rules are gone
        handed_back = rules.hand_back(held, owner, request.plan_id) if held else []
        if lost:
            raise LockLost(
                f"not rolled back in {', '.join(lost)}: another execution holds "
                f"{'it' if len(lost) == 1 else 'them'} now; the new rules stay there (a safe "
                "superset)"
            )
        failure = ""
    except Exception as err:
        failure = f"{type(err).__name__}: {err}"
        raise
    finally:
        record = RollbackRecord(
            batch=request.batch,
            done=not failure,
            revoked=sorted({*earlier.revoked, *revoked}),
            handed_back=sorted({*earlier.handed_back, *handed_back}),
            lost=lost,
            error=failure,
        )
        store.put_batch(request.plan_id, ROLLBACK, request.batch, [record.model_dump()])
    return RollbackItemOutput(
        groups=len(groups), revoked=len(revoked), handed_back=len(handed_back)
    ).model_dump()


def report_rollback(event: object, store: PlanStorage) -> dict[str, Any]:
    """'Sum up the rollback': the items' records, read from the plan store. Complete when
    every batch recorded a rollback done; otherwise RollbackIncomplete names the first
    batches that were not (an item that failed without a record, e.g. a timeout, counts),
    and the groups keep some new rules: a safe superset."""
    request = parse(RollbackReportInput, event)
    records = batch_records(store, request.plan_id, ROLLBACK, RollbackRecord, "rollback record")
    revoked = sum(len(r.revoked) for r in records.values())
    handed_back = sum(len(r.handed_back) for r in records.values())
    failures = [
        f"batch {batch}: "
        + (records[batch].error if batch in records else "no record (the step did not finish)")
        for batch in range(request.batches)
        if batch not in records or not records[batch].done
    ]
    adopted = f" and handed back the {handed_back} rule(s) it had adopted" if handed_back else ""
    if failures:
        more = len(failures) - MAX_FAILURES
        raise RollbackIncomplete(
            f"rolled back {revoked} rule(s){adopted} but not in {len(failures)} of "
            f"{request.batches} batch(es): "
            + "; ".join(failures[:MAX_FAILURES])
            + (f"; ... and {more} more" if more > 0 else "")
            + f"; after {failure_text(request.error)}"
        )
    cause = (
        f"{failure_text(request.error)} before any revoke; revoked the {revoked} rule(s) "
        f"this execution had added{adopted}, the groups are as before"
    )
    return RollbackOutput(revoked=revoked, handed_back=handed_back, cause=cause).model_dump()
