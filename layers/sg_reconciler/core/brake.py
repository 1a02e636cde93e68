"""The brake on mass revocation (invariant 12).

A desired state that is suddenly empty or much smaller is more often a wrong read than a
wish: a stale cache, a selector tag the LBC stripped, a policy that selects nothing. As
Cloud Custodian's `max-resources-percent` stops a runaway policy, a plan that would take
away an outsized share of the deployment's rules is held: its authorizations go ahead, its
revokes wait, an alarm fires, until an operator releases exactly that set of revocations.

A revoke that only makes way for a rule allowing the same traffic (31000-32000 replaced by
31000-32500) takes nothing away, so the brake counts *net* removals: owned rules whose
traffic the group's new rules do not allow.

The brake remembers (invariant 14): load balancers leaving the selection one at a time
(the LBC strips tags it did not set, one Service reconcile at a time) make a series of
plans that each take away a small share. The removals let through are counted over a
window (a day by default) against the owned rules at the window's start, for the whole
deployment and for each binding, so the series is held once together it crosses the share.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from sg_reconciler.core.desired import LookupMiss
from sg_reconciler.core.phases import split_phases
from sg_reconciler.core.plan import Modify, Plan, Revoke
from sg_reconciler.core.rules import Rule
from sg_reconciler.core.safety import group_bounds
from sg_reconciler.core.traffic import Traffic

DEFAULT_MAX_REVOKE_PERCENT = 50
DEFAULT_MIN_REVOKES = 10  # below this many net removals the share alone never holds a plan


DEPLOYMENT = "deployment"  # the window's scope of every owned rule


def binding_scope(name: str) -> str:
    """The window's scope of one binding's rules."""
    return f"binding {name}"


@dataclass(frozen=True)
class WindowCount:
    """One scope's window: the owned rules when it started, and the ids of the rules taken
    away since (a set: a plan checked again, under the lock and after the settle, counts its
    rules once)."""

    started_at: int
    owned_at_start: int
    revoked: frozenset[str] = frozenset()


def by_scope(rules: Iterable[Rule], scopes: Mapping[str, frozenset[str]]) -> dict[str, list[Rule]]:
    """The rules of each scope: every rule for the deployment, a binding's by their group."""
    listed = list(rules)
    found = {DEPLOYMENT: listed}
    for scope, groups in scopes.items():
        found[scope] = [r for r in listed if r.group_id in groups]
    return found


@dataclass(frozen=True)
class BrakeFacts:
    """What the brake weighs a plan against, from the whole read (not only the scope)."""

    owned_rules: int  # every rule of the deployment (owner tag) in the account read
    selected_load_balancers: int
    groups_with_targets: frozenset[str]  # groups hosting a registered target
    max_revoke_percent: int = DEFAULT_MAX_REVOKE_PERCENT
    min_revokes: int = DEFAULT_MIN_REVOKES
    # The window so far per scope (DEPLOYMENT, binding_scope(name)); empty: no memory
    window: Mapping[str, WindowCount] = field(default_factory=dict)
    scopes: Mapping[str, frozenset[str]] = field(default_factory=dict)  # binding -> groups
    owned_now: Mapping[str, int] = field(default_factory=dict)  # owned rules per scope now


@dataclass(frozen=True)
class BrakeVerdict:
    reason: str
    fingerprint: str  # names exactly this set of revocations, for a release


def net_removals(
    plan: Plan, current: Sequence[Rule], desired: Sequence[Rule], owner: str
) -> list[Rule]:
    """Owned rules the plan revokes or rewrites whose traffic the group's new rules do not allow."""
    gone = taken_away(plan, current)
    bounds = group_bounds(current, desired, owner)
    removed = [r for r in current if r.rule_id in gone]
    return [r for r in removed if Traffic.of([r]) - Traffic.of(bounds[r.group_id].new_keys)]


def taken_away(plan: Plan, current: Sequence[Rule]) -> set[str]:
    """Ids of the rules the plan revokes or rewrites into other traffic."""
    gone = {i for s in plan.steps if isinstance(s, Revoke) for i in s.rule_ids}
    gone |= {s.rule_id for s in plan.steps if isinstance(s, Modify) and _moves(s, current)}
    return gone


def _moves(step: Modify, current: Sequence[Rule]) -> bool:
    before = next((r for r in current if r.rule_id == step.rule_id), None)
    return before is None or before.key != step.rule.key


def check_brake(
    plan: Plan, current: Sequence[Rule], desired: Sequence[Rule], owner: str, facts: BrakeFacts
) -> BrakeVerdict | None:
    """Why the plan's revokes must wait, or None when they may go."""
    removed = net_removals(plan, current, desired, owner)
    if not removed:
        return None
    reasons: list[str] = []
    if facts.selected_load_balancers == 0:
        reasons.append(
            f"the policy selects no load balancer, yet the plan would take away {len(removed)} owned rule(s)"
        )
    share = 100 * len(removed) / max(facts.owned_rules, 1)
    if share > facts.max_revoke_percent and len(removed) >= facts.min_revokes:
        reasons.append(
            f"the plan would take away {len(removed)} of the deployment's {facts.owned_rules} owned "
            f"rules ({share:.0f}%, over the brake's {facts.max_revoke_percent}%)"
        )
    reasons += _over_the_window(removed, facts)
    wanted_groups = {r.group_id for r in desired}
    for group_id in sorted(
        {r.group_id for r in removed} & facts.groups_with_targets - wanted_groups
    ):
        owned = [r for r in current if r.group_id == group_id and r.owned_by(owner)]
        if all(r in removed for r in owned):
            reasons.append(
                f"{group_id} still hosts registered targets but would lose every owned rule"
            )
    if not reasons:
        return None
    ids = sorted(r.rule_id or "" for r in removed)
    fingerprint = hashlib.sha256("\n".join(ids).encode()).hexdigest()[:16]
    return BrakeVerdict("; ".join(reasons), fingerprint)


def _over_the_window(removed: list[Rule], facts: BrakeFacts) -> list[str]:
    """Scopes where this plan's removals and those let through earlier in the window
    together take away more than the share of the rules owned at the window's start."""
    reasons = []
    for scope, rules in by_scope(removed, facts.scopes).items():
        count = facts.window.get(scope)
        now = {r.rule_id or "" for r in rules}
        if count is None or not now or not count.revoked - now:
            continue  # nothing here, or nothing earlier: the per-plan check is enough
        total = len(count.revoked | now)
        # Rules added since the window started count too: owned now plus those gone since
        base = max(count.owned_at_start, facts.owned_now.get(scope, 0) + len(count.revoked - now))
        share = 100 * total / max(base, 1)
        if share > facts.max_revoke_percent and total >= facts.min_revokes:
            reasons.append(
                f"{scope}: with this plan, {total} of the {base} rules owned in the brake's "
                f"window (since {count.started_at}) would have been taken away "
                f"({share:.0f}%, over the brake's {facts.max_revoke_percent}%)"
            )
    return reasons


def check_lookup_misses(
    plan: Plan, current: Sequence[Rule], misses: Sequence[LookupMiss], vpc_of: dict[str, str]
) -> BrakeVerdict | None:
    """Hold the revokes when one could take away a port an unresolved target needs in its
    VPC: its group is unknown, so a lookup miss must never read as "nobody needs this"."""
    gone = taken_away(plan, current)
    at_risk: list[str] = []
    targets: dict[str, None] = {}
    for rule in (r for r in current if r.rule_id in gone):
        key = rule.key
        hit = [
            m
            for m in misses
            if vpc_of.get(rule.group_id) == m.vpc_id
            and key.protocol in ("-1", m.protocol)
            and (key.protocol == "-1" or any(key.from_port <= p <= key.to_port for p in m.ports))
        ]
        if hit:
            at_risk.append(rule.rule_id or "")
            targets.update(dict.fromkeys(f"{m.target_id} in {m.target_group}" for m in hit))
    if not at_risk:
        return None
    shown = ", ".join(targets)
    ids = sorted(at_risk)
    return BrakeVerdict(
        f"the interface of target(s) {shown} was not found, so its security group is unknown; "
        f"{len(ids)} owned rule(s) that may admit it would go",
        hashlib.sha256("\n".join(ids).encode()).hexdigest()[:16],
    )


def hold_revokes(plan: Plan, verdict: BrakeVerdict, current: Sequence[Rule]) -> Plan:
    """The plan with its revokes held: the authorize phase and description-only changes."""
    note = (
        f"revokes held by the brake ({verdict.reason}); to release exactly these: "
        f"sg-reconciler release-brake --lock-table <LockTableName> --fingerprint {verdict.fingerprint}"
    )
    return withhold_revokes(plan, verdict.reason, note, current)


def withhold_revokes(plan: Plan, reason: str, note: str, current: Sequence[Rule]) -> Plan:
    """The plan with nothing taken away: the authorize phase and description-only changes,
    `reason` in `held` (the execution reports it) and `note` in its notes."""
    phases = split_phases(plan.steps)
    kept = [s for _, steps in phases.authorize for s in steps]
    kept += [
        s
        for _, steps in phases.revoke
        for s in steps
        if isinstance(s, Modify) and not _moves(s, current)
    ]
    return replace(plan, steps=tuple(kept), notes=(*plan.notes, note), held=reason)
