"""Steps 'Refresh the plan under the locks' and 'Re-plan the revokes after the settle'
(functions/steps/refresh_plan.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sg_reconciler.app.contracts.refresh import (
    BatchRefs,
    PacingOutput,
    RefreshInput,
    RefreshOutput,
    RevokesOutput,
    Summary,
)
from sg_reconciler.app.scope_store import stored_scope
from sg_reconciler.app.steps.common import parse, plan_groups, stored_phases
from sg_reconciler.core.pacing import Pacing
from sg_reconciler.core.phases import PHASE_NAMES, Phases, batch_refs, phase_batches, split_phases
from sg_reconciler.core.plan import Adopt, Authorize, Modify, Plan, Refusal, Revoke, Step
from sg_reconciler.core.ports import PlanStorage
from sg_reconciler.core.rules import Rule
from sg_reconciler.core.scope import Scope
from sg_reconciler.errors import PlanRefused

if TYPE_CHECKING:
    # Types only: the handler passes the live planner in, and loads it (cold start).
    from sg_reconciler.app.live_plan import LivePlan, LockedReplan, Replan


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
    from sg_reconciler.app.planned import put_planned, stored_planned

    request = parse(RefreshInput, event)
    groups = plan_groups(request, store)
    planned = stored_planned(store, request.groups_key) if locked is not None else None
    if locked is not None and planned is not None:
        live = locked(groups, planned)
    else:
        live = replan(Scope(group_ids=frozenset(groups)), stored_scope(store, request.groups_key))
    result = _locked_plan(live, groups)
    if planned is not None:  # what "Re-plan the revokes after the settle" starts from
        put_planned(store, request.plan_id, live.planned(result, groups))
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
    groups = plan_groups(request, store)
    before, _ = stored_phases(store, request.plan_id)
    stale_before = {i for s in before.steps if isinstance(s, Revoke) for i in s.rule_ids}
    if not before.revoke:
        store.put_phase(request.plan_id, "revoke", [])
        return RevokesOutput(revoke=[], deferred="").model_dump()
    # Loaded past the return above: a plan with nothing to revoke loads no planner (cold start).
    from sg_reconciler.app.planned import Planned, stored_planned

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
