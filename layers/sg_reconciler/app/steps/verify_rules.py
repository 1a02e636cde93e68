"""Steps 'Verify the new rules are visible', 'Verify the final state' and the leftover report
(functions/steps/verify_rules.py)."""

from __future__ import annotations

from typing import Any

from sg_reconciler.app.contracts.verify import (
    LeftoverBatchesOutput,
    LeftoverCheckInput,
    LeftoverItemOutput,
    LeftoverListInput,
    LeftoverRecord,
    LeftoversOutput,
    VerifyInput,
    VerifyOutput,
)
from sg_reconciler.app.steps.common import (
    MAX_FAILURES,
    batch_records,
    failed_part,
    failure_text,
    parse,
    stored_phases,
)
from sg_reconciler.core.guard import what_is_left
from sg_reconciler.core.phases import ADDING, applied_problems, batched
from sg_reconciler.core.plan import Revoke
from sg_reconciler.core.ports import PlanStorage, RuleStore
from sg_reconciler.core.rules import RuleError, rule_from_dict
from sg_reconciler.errors import AuthorizeFailed, InvalidPlan, NotYetVisible, RevokeFailed


def _failure_texts(
    store: PlanStorage, plan_id: str, phase: str, failed: list[dict[str, Any]]
) -> str:
    """The first failed batches' errors, as the apply step noted them (or, for an error it
    could not note, a timeout, the name the Map kept), and how many more failed."""
    texts = []
    for result in failed[:MAX_FAILURES]:
        text = failure_text(result.get("error"))
        try:
            noted = store.batch(plan_id, failed_part(phase), int(result.get("batch", -1)))
            text = str(noted[0]["error"])
        except (InvalidPlan, IndexError, KeyError, TypeError, ValueError):
            pass
        texts.append(text)
    more = len(failed) - MAX_FAILURES
    return "; ".join(texts) + (f"; ... and {more} more batch(es)" if more > 0 else "")


def verify(event: object, store: PlanStorage, rules: RuleStore) -> dict[str, Any]:
    """'Verify ...': compare the stored phases with what describe shows, for the groups the
    phases change; and the three states of the leftover report (`mode`).

    Each Map iteration catches its own failure (so no sibling is still writing when the next
    state starts) and reports it in `results`; a failed batch is raised here, with its group.
    """
    mode = event.get("mode") if isinstance(event, dict) else None
    if mode == "leftover_batches":
        return list_leftover_batches(event, store)
    if mode == "leftover_batch":
        return check_leftover_batch(event, store, rules)
    request = parse(VerifyInput, event)
    if request.mode == "leftovers":
        return report_leftovers(request, store)
    phases, _ = stored_phases(store, request.plan_id)
    failed = [r for r in request.results if r.get("failed")]
    if failed:  # the cause stays small however many failed
        if request.mode == "visible":
            raise AuthorizeFailed(_failure_texts(store, request.plan_id, "authorize", failed))
        raise RevokeFailed(_failure_texts(store, request.plan_id, "revoke", failed))
    changed = phases.authorize if request.mode == "visible" else phases.authorize + phases.revoke
    groups = {g for g, _ in changed} | {s.group_id for s in phases.ordered}
    now = rules.describe(sorted(groups)) if groups else []
    problems = applied_problems(phases, now, final=request.mode == "final")
    if problems:
        raise NotYetVisible("; ".join(problems[:5]))
    return VerifyOutput(mode=request.mode, checked_rules=len(now)).model_dump()


LEFTOVERS = "leftovers"  # the plan store's parts: the groups to check, in batches


LEFTOVERS_FOUND = "leftovers-found"  # ... and what each batch's check found


MAX_LISTED = 10  # rules or groups a cause lists; the rest are counted


def list_leftover_batches(event: object, store: PlanStorage) -> dict[str, Any]:
    """'List the groups to check for leftovers': the groups whose rules the stopped plan
    revokes or rewrites (ordered and revoke phases), each with the stale rule ids it revokes
    and its desired rules, stored in batches of up to 20 groups for the check's Map."""
    request = parse(LeftoverListInput, event)
    phases, doc = stored_phases(store, request.plan_id)
    checks: dict[str, dict[str, Any]] = {}

    def check(group_id: str) -> dict[str, Any]:
        return checks.setdefault(group_id, {"group_id": group_id, "stale": [], "desired": None})

    for step in phases.steps:
        if isinstance(step, Revoke):
            check(step.group_id)["stale"] += list(step.rule_ids)
        elif not isinstance(step, ADDING):
            check(step.group_id)
    for name in ("ordered", "revoke"):
        for item in doc.get(name) or []:
            if isinstance(item, dict) and isinstance(item.get("desired"), list):
                check(str(item.get("group_id")))["desired"] = item["desired"]
    batches = batched([checks[g] for g in sorted(checks)])
    store.put_phase(request.plan_id, LEFTOVERS, batches)
    return LeftoverBatchesOutput(batches=list(range(len(batches)))).model_dump()


def check_leftover_batch(event: object, store: PlanStorage, rules: RuleStore) -> dict[str, Any]:
    """One item of 'Check the groups for leftovers': describe its groups (one call per 200),
    note the stale rules still there and the desired traffic not allowed now, and keep that
    in the plan store, not in the execution state (invariant 13)."""
    request = parse(LeftoverCheckInput, event)
    items = [
        i for i in store.batch(request.plan_id, LEFTOVERS, request.batch) if isinstance(i, dict)
    ]
    groups = sorted(str(i.get("group_id")) for i in items)
    now = rules.describe(groups) if groups else []
    present = {r.rule_id for r in now}
    leftovers = sorted(str(i) for item in items for i in item.get("stale") or [] if i in present)
    lacking: list[str] = []
    for item in sorted(items, key=lambda i: str(i.get("group_id"))):
        group_id = str(item.get("group_id"))
        if not isinstance(item.get("desired"), list):
            continue
        try:
            wanted = [rule_from_dict(doc) for doc in item["desired"]]
        except RuleError as err:
            raise InvalidPlan(f"desired rules of {group_id}: {err}") from None
        if missing := what_is_left([r for r in now if r.group_id == group_id], wanted):
            lacking.append(f"{group_id}: {missing.describe()}")
    record = LeftoverRecord(batch=request.batch, leftover_rule_ids=leftovers, lacking=lacking)
    store.put_batch(request.plan_id, LEFTOVERS_FOUND, request.batch, [record.model_dump()])
    return LeftoverItemOutput(groups=len(groups), leftovers=len(leftovers)).model_dump()


def report_leftovers(request: VerifyInput, store: PlanStorage) -> dict[str, Any]:
    """'Report the leftover rules': the checks' records, in counts and the first few; a
    batch without a record (its check failed) is named as not checked, never as clean."""
    found = batch_records(
        store, request.plan_id, LEFTOVERS_FOUND, LeftoverRecord, "leftover record"
    )
    leftovers = [i for b in sorted(found) for i in found[b].leftover_rule_ids]
    lacking = [g for b in sorted(found) for g in found[b].lacking]
    unchecked = [b for b in range(request.batches) if b not in found]

    def first(lines: list[str], sep: str) -> str:
        more = len(lines) - MAX_LISTED
        return sep.join(lines[:MAX_LISTED]) + (f"{sep}... and {more} more" if more > 0 else "")

    held = (
        "every desired rule of the changed groups is in place"
        if not lacking
        else "desired traffic not allowed now (checked just now): " + first(lacking, "; ")
    )
    if unchecked:
        held += (
            f"; {len(unchecked)} of {request.batches} batch(es) of groups could not be checked "
            f"(batch {first([str(b) for b in unchecked], ', ')})"
        )
    cause = (
        f"stopped after {failure_text(request.error)}; {held}; "
        f"{len(leftovers)} stale rule(s) left {first(leftovers, ', ')}".rstrip()
        + "; the next run takes over"
    )
    return LeftoversOutput(
        leftovers=len(leftovers),
        leftover_rule_ids=leftovers[:MAX_LISTED],
        lacking=lacking[:MAX_LISTED],
        cause=cause,
    ).model_dump()
