"""Steps 'Authorize ...', 'Apply one quota-bound call' and 'Revoke ...': one batch of groups'
EC2 calls (functions/steps/apply_steps.py)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from pydantic import ValidationError

from sg_reconciler.app.contracts.apply import ApplyInput, ApplyItem, ApplyOutput
from sg_reconciler.app.steps.common import failed_part, parse
from sg_reconciler.core.guard import call_would_lose
from sg_reconciler.core.phases import ADDING
from sg_reconciler.core.plan import Adopt, Authorize, Revoke, Step
from sg_reconciler.core.ports import Guard, LockStore, PlanStorage, RuleStore
from sg_reconciler.core.rules import Rule
from sg_reconciler.errors import (
    GroupNotFound,
    InvalidPlan,
    ReconcilerError,
    WouldLoseTraffic,
    validation_message,
)


def apply_steps(
    event: object,
    store: PlanStorage,
    rules: RuleStore,
    locks: LockStore,
    lease_seconds: int,
) -> dict[str, Any]:
    """One batch of groups, each group's calls in order. Each call is idempotent, so a retry
    re-runs the batch safely; an error names the group it stopped at. The error's text also
    goes to the plan store (part `<phase>-failed#<batch>`): the Map keeps only the error's
    name of a failed batch, as its Cause (with the stack) would make the state grow with the
    failures (invariant 13), and the verify step reads the text back for the cause."""
    request = parse(ApplyInput, event)
    if rules.pacer is not None:
        rules.pacer.fit(request.batch, request.batches)
    items = store.batch(request.plan_id, request.phase, request.batch)
    calls = 0
    for raw in items:
        item = _item(raw)
        try:
            calls += len(_apply_group(item, request, rules, locks, lease_seconds))
        except ReconcilerError as err:
            failed = type(err)(f"{item.group_id}: {err}")
            note = {"batch": request.batch, "error": f"{type(err).__name__}: {failed}"}
            with contextlib.suppress(Exception):  # the error itself matters more
                store.put_batch(request.plan_id, failed_part(request.phase), request.batch, [note])
            raise failed from None
    return ApplyOutput(groups=len(items), calls=calls).model_dump()


def _apply_group(
    item: ApplyItem,
    request: ApplyInput,
    rules: RuleStore,
    locks: LockStore,
    lease_seconds: int,
) -> list[dict[str, Any]]:
    group_id = item.group_id
    steps = item.to_steps()
    if any(s.group_id != group_id for s in steps):
        raise InvalidPlan(f"an item for {group_id} carries a step of another group")
    desired = _item_desired(item, steps)
    owner = request.owner
    locks.renew(group_id, request.holder, lease_seconds)

    def fence() -> None:
        locks.fence(group_id, request.holder, lease_seconds)

    done: list[dict[str, Any]] = []
    for step in steps:
        if isinstance(step, Authorize):
            ids = rules.authorize(group_id, step.rules, owner, request.plan_id)
            done.append({"action": "authorize", "rule_ids": sorted(ids.values())})
        elif isinstance(step, Adopt):
            rules.adopt(group_id, step, owner, request.plan_id)
            done.append({"action": "adopt", "rule_ids": [step.rule_id]})
        elif isinstance(step, Revoke):
            guard = _guard(group_id, set(step.rule_ids), (), desired, fence)
            try:
                revoked = rules.revoke(group_id, step.rule_ids, owner, guard)
            except GroupNotFound:
                revoked = []  # the group and its rules are gone: nothing left to revoke
            done.append({"action": "revoke", "rule_ids": revoked})
        else:
            guard = _guard(group_id, {step.rule_id}, (step.rule,), desired, fence)
            rules.modify(group_id, step.rule_id, step.rule, owner, guard)
            done.append({"action": "modify", "rule_ids": [step.rule_id]})
    return done


def _item(raw: object) -> ApplyItem:
    """A stored item, parsed; a bad one is an InvalidPlan naming its group and field."""
    try:
        return ApplyItem.model_validate(raw)
    except ValidationError as err:
        group = raw.get("group_id") if isinstance(raw, dict) else None
        raise InvalidPlan(f"the item for {group}: {validation_message(err)}") from None


def _item_desired(item: ApplyItem, steps: tuple[Step, ...]) -> list[Rule]:
    """The group's desired rules; an item that revokes or modifies must carry them."""
    if item.desired is None:
        if any(not isinstance(s, ADDING) for s in steps):
            raise InvalidPlan(
                f"the item for {item.group_id} revokes or modifies but carries no desired "
                "rules for the live guard"
            )
        return []
    return item.desired


def _guard(
    group_id: str,
    removed: set[str],
    added: tuple[Rule, ...],
    desired: list[Rule],
    fence: Callable[[], None],
) -> Guard:
    """What runs before each attempt of a revoke or modify (the first and every retry after
    a backoff): the lock is still ours with a live lease (fencing: LockLost, no call), then
    the live rules keep the desired traffic (WouldLoseTraffic, no call)."""

    def check(live: list[Rule]) -> None:
        fence()
        problems = call_would_lose(live, removed, added, desired)
        if problems:
            raise WouldLoseTraffic(
                f"{group_id}: no call made to remove {', '.join(sorted(removed))}: "
                + "; ".join(problems[:3])
            )

    return check
