"""The logic of the state machine's Lambda steps, one function per step.

Each function takes the step's input (validated by a pydantic model of app/contracts.py)
and the ports it needs (`sg_reconciler.core.ports`: the adapters in Lambda, in-memory fakes
in tests), and returns the JSON the state machine stores (its output model, dumped). Errors
are the typed errors of sg_reconciler.errors, so Retry and Catch in the ASL match them by
name.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import ValidationError

from sg_reconciler.app.contracts import (
    ApplyInput,
    ApplyItem,
    ApplyOutput,
    BatchRefs,
    CheckOutput,
    CheckRequest,
    GroupsInput,
    Input,
    JanitorOutput,
    LeftoverBatchesOutput,
    LeftoverCheckInput,
    LeftoverItemOutput,
    LeftoverListInput,
    LeftoverRecord,
    LeftoversOutput,
    LockInput,
    LocksOutput,
    PacingOutput,
    RefreshInput,
    RefreshOutput,
    ReleaseOutput,
    RevokesOutput,
    RollbackInput,
    RollbackItemOutput,
    RollbackOutput,
    RollbackRecord,
    RollbackReportInput,
    StatusChangeEvent,
    Summary,
    VerifyInput,
    VerifyOutput,
)
from sg_reconciler.app.planned import Planned, planned_by, put_planned, stored_planned
from sg_reconciler.app.scope_store import stored_scope
from sg_reconciler.core.guard import call_would_lose, what_is_left
from sg_reconciler.core.pacing import Pacing
from sg_reconciler.core.phases import (
    ADDING,
    PHASE_NAMES,
    Phases,
    applied_problems,
    batch_refs,
    batched,
    phase_batches,
    split_phases,
)
from sg_reconciler.core.plan import (
    Adopt,
    Authorize,
    Modify,
    Plan,
    Refusal,
    Revoke,
    Step,
    plan_from_dict,
    step_from_dict,
)
from sg_reconciler.core.ports import Guard, LockStore, PlanStorage, RuleStore
from sg_reconciler.core.rules import Rule, RuleError, rule_from_dict
from sg_reconciler.core.scope import Scope
from sg_reconciler.errors import (
    AuthorizeFailed,
    ExecutionStopped,
    GroupNotFound,
    InvalidPlan,
    LockLost,
    NotYetVisible,
    PlanRefused,
    ReconcilerError,
    RevokeFailed,
    RollbackIncomplete,
    WouldLoseTraffic,
    validation_message,
)

if TYPE_CHECKING:
    # Only the re-planning steps import the live planner (docs/extending.md, "Cold start").
    from sg_reconciler.app.live_plan import LivePlan, LockedReplan, Replan

_PLAN_ID = re.compile(r"^[A-Za-z0-9_-]{1,80}$")


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


def check_plan(event: object, store: PlanStorage) -> dict[str, Any]:
    """'Check the plan input': a valid plan, before any lock or write.

    The plan id that tags new rules (and finds them for a rollback) is the execution's name,
    unique for 90 days, never a value from the input: a re-run of an old input must not
    claim the rules an earlier execution created. A plan given inline (an execution started
    by hand) has its groups stored under that name; from here on the state carries counts.
    """
    request = parse(CheckRequest, event)
    if not _PLAN_ID.match(request.execution):
        raise InvalidPlan(
            f"execution name {request.execution!r} must be 1-80 letters, digits, '-' or '_'"
        )
    given = request.input
    if given.plan_ref is not None:
        ref = given.plan_ref
        store.groups(ref.groups_key, ref.groups)  # it must be there, whole
        return CheckOutput(
            plan_id=request.execution, groups_key=ref.groups_key, groups=ref.groups
        ).model_dump()
    if given.plan is None:
        raise InvalidPlan("input: give plan_ref (from the planner) or plan (inline)")
    try:
        plan = plan_from_dict(given.plan)
    except RuleError as err:
        raise InvalidPlan(str(err)) from None
    if not plan.steps:
        raise InvalidPlan("the plan has no steps")
    count = store.put_groups(request.execution, plan.groups)
    return CheckOutput(
        plan_id=request.execution, groups_key=request.execution, groups=count
    ).model_dump()


def _groups(request: GroupsInput, store: PlanStorage) -> list[str]:
    return store.groups(request.groups_key, request.groups)


def acquire_locks(
    event: object, store: PlanStorage, locks: LockStore, lease_seconds: int
) -> dict[str, Any]:
    """'Lock the groups'. A lock taken for an execution that has already ended would outlive
    it by a whole lease (the janitor came and went before it was taken), so the step checks,
    after taking them, whether the janitor recorded the execution as ended, and if so gives
    them back (invariant 13). The janitor writes its record before it scans for locks: either
    this check sees the record, or the janitor's scan sees these locks."""
    request = parse(LockInput, event)
    held = locks.acquire(_groups(request, store), request.holder, lease_seconds)
    if locks.stopped(request.holder):
        given_back = locks.release(held, request.holder)
        raise ExecutionStopped(
            f"execution {request.holder} ended while its groups were being locked; "
            f"the {len(given_back)} lock(s) taken were given back"
        )
    return LocksOutput(held=len(held)).model_dump()


def release_locks(event: object, store: PlanStorage, locks: LockStore) -> dict[str, Any]:
    request = parse(LockInput, event)
    released = locks.release(_groups(request, store), request.holder)
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


def refresh_plan(
    event: object,
    store: PlanStorage,
    replan: Replan,
    settle_seconds: int,
    owner: str,
    pacing: Pacing,
    locked: LockedReplan | None = None,
) -> dict[str, Any]:
    """'Refresh the plan under the locks': the plan as the account is now, for the locked
    groups, stored in batches; the state gets the batch numbers, and the Map concurrency
    that keeps the writes at the deployment's rate. A plan from the planner is refreshed
    from the locked groups' rules and its closure (`locked`); one given inline, from the
    planner's read."""
    request = parse(RefreshInput, event)
    groups = _groups(request, store)
    planned = stored_planned(store, request.groups_key) if locked is not None else None
    if locked is not None and planned is not None:
        live = locked(groups, planned)
    else:
        live = replan(Scope(group_ids=frozenset(groups)), stored_scope(store, request.groups_key))
    result = _locked_plan(live, groups)
    if planned is not None:  # what "Re-plan the revokes after the settle" starts from
        put_planned(store, request.plan_id, planned_by(live, result, groups))
    doc = split_phases(result.steps).to_dict(_by_group(live.desired), settle_seconds)
    batches = phase_batches(doc, pacing.concurrency)
    for phase in PHASE_NAMES:
        store.put_phase(request.plan_id, phase, batches[phase])
    refs = batch_refs(batches)
    return RefreshOutput(
        changed=bool(result.steps),
        # The revoke batches are numbered by "Re-plan the revokes after the settle".
        batches=BatchRefs(authorize=refs["authorize"], ordered=refs["ordered"]),
        settle_seconds=settle_seconds,
        owner=owner,
        pacing=PacingOutput(
            concurrency=pacing.concurrency, writes_per_second=pacing.writes_per_second
        ),
        summary=summarize(result),
    ).model_dump()


def stored_phases(store: PlanStorage, plan_id: str) -> tuple[Phases, dict[str, Any]]:
    """The phases the refresh stored, parsed, and their raw items (with desired rules)."""
    doc = {phase: store.phase(plan_id, phase) for phase in PHASE_NAMES}
    try:
        return Phases.from_dict(doc), doc
    except RuleError as err:
        raise InvalidPlan(str(err)) from None


def replan_revokes(
    event: object,
    store: PlanStorage,
    replan: Replan,
    pacing: Pacing,
    locked: LockedReplan | None = None,
) -> dict[str, Any]:
    """'Re-plan the revokes after the settle' (invariant 11): the desired state read again,
    under the locks, after the wait. Only rules stale in both plans are revoked, each guarded
    by the new desired rules; when the new plan wants rules that do not exist yet (or the
    brake holds it), nothing is revoked and the next run takes over. A refreshed plan with
    nothing to revoke or rewrite has nothing to re-plan here and reads nothing; a plan from
    the planner reads the locked groups' rules and the closure of its revokes (`locked`)."""
    request = parse(RefreshInput, event)
    groups = _groups(request, store)
    before, _ = stored_phases(store, request.plan_id)
    stale_before = {i for s in before.steps if isinstance(s, Revoke) for i in s.rule_ids}
    if not before.revoke:
        store.put_phase(request.plan_id, "revoke", [])
        return RevokesOutput(revoke=[], deferred="").model_dump()
    planned = stored_planned(store, request.plan_id) if locked is not None else None
    if locked is not None and planned is not None:  # from the refresh's desired rules
        rewritten = {
            s.rule_id for _, steps in before.revoke for s in steps if isinstance(s, Modify)
        }
        live = locked(groups, Planned(planned.desired, frozenset(stale_before | rewritten)))
    else:
        live = replan(Scope(group_ids=frozenset(groups)))
    now = _locked_plan(live, groups)
    after = split_phases(now.steps)
    wanted = [s for _, steps in after.authorize for s in steps] + list(after.ordered)
    deferred = ""
    if wanted:
        deferred = (
            f"the desired state changed during the settle: {len(wanted)} call(s) that add or "
            "rewrite rules are needed first; nothing was revoked, the next run takes over"
        )
    elif now.held:
        deferred = f"revokes held by the brake: {now.held}"
    revoke: list[tuple[str, tuple[Step, ...]]] = []
    for group_id, steps in () if deferred else after.revoke:
        kept: list[Step] = []
        for step in steps:
            if isinstance(step, Revoke):
                ids = tuple(i for i in step.rule_ids if i in stale_before)
                if ids:
                    kept.append(Revoke(group_id, ids))
            else:
                kept.append(step)  # a description-only modify
        if kept:
            revoke.append((group_id, tuple(kept)))
    doc = Phases((), (), tuple(revoke)).to_dict(_by_group(live.desired))
    batches = phase_batches(doc, pacing.concurrency)["revoke"]
    store.put_phase(request.plan_id, "revoke", batches)
    return RevokesOutput(revoke=list(range(len(batches))), deferred=deferred).model_dump()


def _locked_plan(live: LivePlan, groups: list[str]) -> Plan:
    result = live.result
    if isinstance(result, Refusal):
        raise PlanRefused(result.reason)
    outside = sorted(set(result.groups) - set(groups))
    if outside:
        raise PlanRefused(
            f"the refreshed plan also changes {', '.join(outside)}, which this execution has not locked; the next run plans them"
        )
    return result


def _by_group(rules: list[Rule]) -> dict[str, list[Rule]]:
    groups: dict[str, list[Rule]] = {}
    for rule in rules:
        groups.setdefault(rule.group_id, []).append(rule)
    return groups


MAX_NOTES = 10


def summarize(plan: Plan) -> Summary:
    """The execution's output: what changed, in numbers and the first notes (the planner's
    log has them all), so that its size does not grow with the plan."""

    def first(lines: tuple[str, ...]) -> list[str]:
        more = len(lines) - MAX_NOTES
        return [*lines[:MAX_NOTES], *([f"... and {more} more"] if more > 0 else [])]

    return Summary(
        groups=len(plan.groups),
        rules_authorized=sum(len(s.rules) for s in plan.steps if isinstance(s, Authorize)),
        rules_revoked=sum(len(s.rule_ids) for s in plan.steps if isinstance(s, Revoke)),
        rules_modified=sum(1 for s in plan.steps if isinstance(s, Modify)),
        rules_adopted=sum(1 for s in plan.steps if isinstance(s, Adopt)),
        calls=len(plan.steps),
        notes=first(plan.notes),
        refused=first(plan.refused),
        held=plan.held,
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
        item = parse(ApplyItem, raw)
        try:
            calls += len(_apply_group(item, request, rules, locks, lease_seconds))
        except ReconcilerError as err:
            failed = type(err)(f"{item.group_id}: {err}")
            note = {"batch": request.batch, "error": f"{type(err).__name__}: {failed}"}
            with contextlib.suppress(Exception):  # the error itself matters more
                store.put_batch(request.plan_id, _failed(request.phase), request.batch, [note])
            raise failed from None
    return ApplyOutput(groups=len(items), calls=calls).model_dump()


def _failed(phase: str) -> str:
    return f"{phase}-failed"


def _failure_texts(
    store: PlanStorage, plan_id: str, phase: str, failed: list[dict[str, Any]]
) -> str:
    """The first failed batches' errors, as the apply step noted them (or, for an error it
    could not note, a timeout, the name the Map kept), and how many more failed."""
    texts = []
    for result in failed[:MAX_FAILURES]:
        text = failure_text(result.get("error"))
        try:
            noted = store.batch(plan_id, _failed(phase), int(result.get("batch", -1)))
            text = str(noted[0]["error"])
        except (InvalidPlan, IndexError, KeyError, TypeError, ValueError):
            pass
        texts.append(text)
    more = len(failed) - MAX_FAILURES
    return "; ".join(texts) + (f"; ... and {more} more batch(es)" if more > 0 else "")


def _apply_group(
    item: ApplyItem,
    request: ApplyInput,
    rules: RuleStore,
    locks: LockStore,
    lease_seconds: int,
) -> list[dict[str, Any]]:
    group_id = item.group_id
    try:
        steps = [step_from_dict(s) for s in item.steps]
    except RuleError as err:
        raise InvalidPlan(str(err)) from None
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


def _item_desired(item: ApplyItem, steps: list[Step]) -> list[Rule]:
    """The group's desired rules; an item that revokes or modifies must carry them."""
    if item.desired is None:
        if any(not isinstance(s, ADDING) for s in steps):
            raise InvalidPlan(
                f"the item for {item.group_id} revokes or modifies but carries no desired "
                "rules for the live guard"
            )
        return []
    try:
        return [rule_from_dict(doc) for doc in item.desired]
    except RuleError as err:
        raise InvalidPlan(f"desired rules of {item.group_id}: {err}") from None


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
    found = _records(store, request.plan_id, LEFTOVERS_FOUND, LeftoverRecord, "leftover record")
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


ROLLBACK = "rollback"  # the plan store's parts of the rollback items' records
MAX_FAILURES = 5  # failures a cause names; the rest are counted


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
    records = _records(store, request.plan_id, ROLLBACK, RollbackRecord, "rollback record")
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


Recorded = TypeVar("Recorded", LeftoverRecord, RollbackRecord)


def _records(
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
