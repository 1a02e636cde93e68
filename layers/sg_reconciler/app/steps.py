"""The logic of the state machine's Lambda steps, one function per step.

Each function takes the step's input (validated by a pydantic model of app/contracts.py)
and the ports it needs (`sg_reconciler.core.ports`: the adapters in Lambda, in-memory fakes
in tests), and returns the JSON the state machine stores (its output model, dumped). Errors
are the typed errors of sg_reconciler.errors, so Retry and Catch in the ASL match them by
name.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

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
    LeftoversOutput,
    LockInput,
    LocksOutput,
    PacingOutput,
    RefreshInput,
    RefreshOutput,
    ReleaseOutput,
    RevokesOutput,
    RollbackInput,
    RollbackOutput,
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
    leftover_rule_ids,
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
    GroupNotFound,
    InvalidPlan,
    LockLost,
    NotYetVisible,
    PlanRefused,
    ReconcilerError,
    RevokeFailed,
    WouldLoseTraffic,
    validation_message,
)

if TYPE_CHECKING:
    # Only the re-planning steps import the live planner (cold start, issue 12 item 6).
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
    request = parse(LockInput, event)
    held = locks.acquire(_groups(request, store), request.holder, lease_seconds)
    return LocksOutput(held=len(held)).model_dump()


def release_locks(event: object, store: PlanStorage, locks: LockStore) -> dict[str, Any]:
    request = parse(LockInput, event)
    released = locks.release(_groups(request, store), request.holder)
    return ReleaseOutput(released=len(released)).model_dump()


STOPPED = frozenset({"FAILED", "TIMED_OUT", "ABORTED"})


def release_after_stop(event: object, locks: LockStore, state_machine_arn: str) -> dict[str, Any]:
    """Release the locks an execution still holds once it ended without its last state (a
    stop by hand, a timeout, a failure past every Catch), instead of waiting out the lease
    (invariant 13). Idempotent: only this execution's locks, each deleted on that condition."""
    detail = parse(StatusChangeEvent, event).detail
    if detail.status not in STOPPED or detail.stateMachineArn != state_machine_arn:
        return JanitorOutput(
            released=0, ignored=f"{detail.status} of {detail.stateMachineArn}"
        ).to_dict()
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
    re-runs the batch safely; an error names the group it stopped at."""
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
            raise type(err)(f"{item.group_id}: {err}") from None
    return ApplyOutput(groups=len(items), calls=calls).model_dump()


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
    """'Verify ...' and 'Report the leftover rules': compare the stored phases with what
    describe shows, for the groups the phases change.

    Each Map iteration catches its own failure (so no sibling is still writing when the next
    state starts) and reports it in `results`; a failed batch is raised here, with its group.
    """
    request = parse(VerifyInput, event)
    phases, doc = stored_phases(store, request.plan_id)
    failed = [r for r in request.results if r.get("failed")]
    if failed and request.mode != "leftovers":
        kind = AuthorizeFailed if request.mode == "visible" else RevokeFailed
        raise kind("; ".join(failure_text(r.get("error")) for r in failed))
    changed = phases.authorize if request.mode == "visible" else phases.authorize + phases.revoke
    groups = {g for g, _ in changed} | {s.group_id for s in phases.ordered}
    now = rules.describe(sorted(groups)) if groups else []
    if request.mode == "leftovers":
        leftovers = leftover_rule_ids(phases, now)
        lacking = _lacking(doc, now)
        held = (
            "every desired rule of the changed groups is in place"
            if not lacking
            else "desired traffic not allowed now (checked just now): " + "; ".join(lacking)
        )
        cause = (
            f"stopped after {failure_text(request.error)}; {held}; "
            f"{len(leftovers)} stale rule(s) left {', '.join(leftovers)}".rstrip()
            + "; the next run takes over"
        )
        return LeftoversOutput(
            leftover_rule_ids=leftovers, lacking=lacking, cause=cause
        ).model_dump()
    problems = applied_problems(phases, now, final=request.mode == "final")
    if problems:
        raise NotYetVisible("; ".join(problems[:5]))
    return VerifyOutput(mode=request.mode, checked_rules=len(now)).model_dump()


def _lacking(phases_doc: dict[str, Any], now: list[Rule]) -> list[str]:
    """Per group that revokes or modifies: the desired traffic the live rules do not allow."""
    wanted: dict[str, list[Rule]] = {}
    for name in ("ordered", "revoke"):
        for item in phases_doc.get(name) or []:
            if isinstance(item, dict) and isinstance(item.get("desired"), list):
                try:
                    rules = [rule_from_dict(doc) for doc in item["desired"]]
                except RuleError as err:
                    raise InvalidPlan(f"desired rules of {item.get('group_id')}: {err}") from None
                wanted[str(item.get("group_id"))] = rules
    return [
        f"{group_id}: {missing.describe()}"
        for group_id, rules in sorted(wanted.items())
        if (missing := what_is_left([r for r in now if r.group_id == group_id], rules))
    ]


def roll_back(
    event: object,
    store: PlanStorage,
    rules: RuleStore,
    locks: LockStore,
    lease_seconds: int,
) -> dict[str, Any]:
    """Compensation: revoke exactly the rules this execution created, found by their tags.

    Only in groups this execution still holds: where its lease expired and another execution
    took the group, that execution may already rely on the new rules, so they stay (a safe
    superset) and the rollback reports itself incomplete.
    """
    request = parse(RollbackInput, event)
    owner = request.owner
    held, lost = [], []
    for group_id in _groups(request, store):
        try:
            locks.renew(group_id, request.holder, lease_seconds)
            held.append(group_id)
        except LockLost:
            lost.append(group_id)
    by_group: dict[str, list[str]] = {}
    for rule in rules.tagged(held, owner, request.plan_id) if held else []:
        by_group.setdefault(rule.group_id, []).append(rule.rule_id or "")
    revoked: list[str] = []
    for group_id, ids in sorted(by_group.items()):
        try:
            revoked += rules.revoke(group_id, ids, owner)
        except GroupNotFound:
            continue
    handed_back = rules.hand_back(held, owner, request.plan_id) if held else []
    if lost:
        raise LockLost(
            f"rolled back {len(revoked)} rule(s) but not in {', '.join(lost)}: another execution "
            f"holds {'it' if len(lost) == 1 else 'them'} now; the new rules stay there (a safe "
            f"superset) after {failure_text(request.error)}"
        )
    adopted = (
        f" and handed back the {len(handed_back)} rule(s) it had adopted" if handed_back else ""
    )
    cause = (
        f"{failure_text(request.error)} before any revoke; revoked the {len(revoked)} rule(s) "
        f"this execution had added{adopted}, the groups are as before"
    )
    return RollbackOutput(
        revoked_rule_ids=sorted(revoked), handed_back_rule_ids=handed_back, cause=cause
    ).model_dump()
