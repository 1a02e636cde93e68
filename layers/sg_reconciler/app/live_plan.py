"""Compose a live plan: read the account, derive the desired rules, plan make-before-break.

The planner Lambda, the state machine's "refresh plan" step and `sg-reconciler plan --live`
all call `compute_live_plan`, so a plan refreshed under the lock is computed exactly as the
one that started the execution.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from sg_reconciler.app.planned import Planned
from sg_reconciler.collector import paused_collector
from sg_reconciler.core.account import Inventory
from sg_reconciler.core.brake import (
    BrakeFacts,
    BrakeVerdict,
    binding_scope,
    by_scope,
    check_brake,
    check_lookup_misses,
    hold_revokes,
    net_removals,
    taken_away,
    withhold_revokes,
)
from sg_reconciler.core.desired import (
    DesiredState,
    compute_desired,
    touched_groups,
)
from sg_reconciler.core.narrow import leaves_room, stands
from sg_reconciler.core.plan import Plan, Refusal
from sg_reconciler.core.planner import defer_revokes, make_plan
from sg_reconciler.core.policy import Policy
from sg_reconciler.core.ports import InventoryReader, RevocationWindow
from sg_reconciler.core.quota import Limits
from sg_reconciler.core.revoke_closure import lost_traffic
from sg_reconciler.core.rules import Peer, Rule, rule_to_dict
from sg_reconciler.core.safety import group_bounds
from sg_reconciler.core.scope import Locked, Scope

Released = Callable[[str], bool]  # whether an operator released the brake for a fingerprint


@dataclass(frozen=True)
class LivePlan:
    result: Plan | Refusal
    desired: list[Rule]
    current: list[Rule]
    groups: list[str]  # the groups in play after scoping, sorted
    notes: list[str] = field(default_factory=list)
    state: DesiredState | None = None  # exposure report and links, for callers that report
    brake: BrakeVerdict | None = None  # set when the brake held (or a release let go) revokes
    released: bool = False  # an operator released this exact set of revocations
    unreached: tuple[str, ...] = ()  # groups with owned rules the policy does not reach
    # group id -> Name tag or GroupName, for the groups in play and the groups they admit
    names: Mapping[str, str] = field(default_factory=dict)
    narrowed: Scope | None = None  # planned from this event scope's read alone (it stands)
    vpcs: Mapping[str, str] = field(default_factory=dict)  # group id -> VPC, of the read

    def planned(self, plan: Plan, groups: Collection[str] | None = None) -> Planned:
        """What the steps under the locks need of `plan`: the desired rules of its groups (or
        of `groups`, the locked ones) and the rules it takes away."""
        kept = set(plan.groups if groups is None else groups)
        return Planned(
            tuple(r for r in self.desired if r.group_id in kept),
            frozenset(taken_away(plan, self.current)),
        )

    def needed_by(self, rule: Rule) -> tuple[str, ...]:
        """What needs a desired rule (target groups and their load balancers, static rules)."""
        return () if self.state is None else self.state.needed_by.get(rule.key, ())

    def to_dict(self) -> dict[str, Any]:
        """The plan contract (docs/contracts.md) plus, additively, the desired rules, the
        groups in play, their names and what needs each desired rule."""
        doc = self.result.to_dict()
        if self.notes:
            doc["notes"] = [*doc.get("notes", []), *self.notes]
        doc["groups"] = list(self.groups)
        doc["group_names"] = dict(self.names)
        doc["desired"] = [rule_to_dict(r, with_identity=False) for r in self.desired]
        doc["desired_needed_by"] = [list(self.needed_by(r)) for r in self.desired]
        return doc


@paused_collector()
def plan_from_inventory(
    inventory: Inventory,
    policy: Policy,
    scope: Scope | None = None,
    *,
    partial: bool = False,
    released: Released | None = None,
    window: RevocationWindow | None = None,
) -> LivePlan:
    """The pure half of `compute_live_plan` (no AWS): scope, desired state, plan and brake.

    `partial` (the Lambdas): a group that cannot be planned holds back the revokes, not the
    whole reconcile; see `make_plan`. Owned rules in groups the policy does not reach
    (another VPC) are reported and never touched (invariant 10). `released` says whether an
    operator released the brake for a set of revocations (invariant 12); `window`, the
    brake's memory of the removals it let through (invariant 14), is read, and told of this
    plan's removals when they may go."""
    state = compute_desired(inventory, policy.desired_settings())
    conflicts = [f"policy: {why}" for why in state.conflicts.values()]
    if conflicts and not partial:
        notes = [*inventory.notes, *state.notes]  # a missing group's among them
        return LivePlan(Refusal("; ".join(conflicts)), [], [], [], notes=notes)
    unreached = _unreached(inventory, policy, state)
    in_play = ({r.group_id for r in state.rules} | set(inventory.owned_groups)) - set(unreached)
    in_play -= set(state.conflicts)  # left as they are until the bindings agree
    touched = touched_groups(inventory, state, scope, policy.owner)
    groups = in_play if touched is None else in_play & touched
    desired = [r for r in state.rules if r.group_id in groups]
    current = [r for r in inventory.rules if r.group_id in groups]
    if inventory.narrowed_to is not None:
        desired = _narrowed(desired, current, inventory.narrowed_to, policy)
    limits = _limits(policy, inventory)
    adopt = policy.adopts if policy.adopt_descriptions else None
    result = make_plan(current, desired, policy.owner, limits, partial=partial, adopt=adopt)
    if conflicts and isinstance(result, Plan):
        # As for a group that cannot be planned: a rule moving out of a refused group must
        # not go anywhere, so every revoke waits (see make_plan's `partial`).
        result = defer_revokes(result, conflicts)
    notes = [*inventory.notes, *state.notes]
    if inventory.narrowed_to is None:  # a full read sees every load balancer it selects
        notes += _selecting_nothing(inventory, policy)
    notes += [
        f"{g} holds rules with this deployment's owner tag but the policy does not reach it "
        "(another VPC): reported, never touched"
        for g in unreached
    ]
    verdict, was_released = None, False
    if isinstance(result, Plan):
        if inventory.narrowed_to is not None:
            window = None  # an event's read does not see every owned rule
        owned = [r for r in inventory.rules if r.owned_by(policy.owner)]
        scopes = brake_scopes(inventory, policy)
        counts = {scope: len(rules) for scope, rules in by_scope(owned, scopes).items()}
        facts = BrakeFacts(
            owned_rules=len(owned),
            selected_load_balancers=len(inventory.load_balancers),
            groups_with_targets=frozenset(
                g for tg in inventory.target_groups for t in tg.targets for g in t.group_ids
            ),
            max_revoke_percent=policy.brake.max_revoke_percent,
            min_revokes=policy.brake.min_revokes,
            window={} if window is None else window.current(counts),
            scopes=scopes,
            owned_now=counts,
        )
        verdict = check_brake(result, current, desired, policy.owner, facts)
        missed = check_lookup_misses(
            result,
            current,
            state.lookup_misses,
            {g: sg.vpc_id for g, sg in inventory.groups.items()},
        )
        if verdict is None:
            verdict = missed
        elif missed is not None:
            verdict = BrakeVerdict(f"{verdict.reason}; {missed.reason}", verdict.fingerprint)
        if verdict is not None:
            was_released = released is not None and released(verdict.fingerprint)
            if was_released:
                notes.append(
                    f"the brake would hold these revokes ({verdict.reason}) but an operator "
                    f"released them (fingerprint {verdict.fingerprint})"
                )
            else:
                result = hold_revokes(result, verdict, current)
        if window is not None and (verdict is None or was_released):
            removed = net_removals(result, current, desired, policy.owner)
            if removed:
                window.record(
                    {
                        scope: [r.rule_id or "" for r in rules]
                        for scope, rules in by_scope(removed, scopes).items()
                        if rules
                    }
                )
    return LivePlan(
        result=result,
        desired=desired,
        current=current,
        groups=sorted(groups),
        notes=notes,
        state=state,
        brake=verdict,
        released=was_released,
        unreached=tuple(unreached),
        names=_names(inventory, groups, desired),
        vpcs={g: sg.vpc_id for g, sg in inventory.groups.items()},
    )


def brake_scopes(inventory: Inventory, policy: Policy) -> dict[str, frozenset[str]]:
    """The groups each binding puts rules in, for the brake's window per binding: its named
    groups, the groups with its tag, or the groups that host the targets of the load
    balancers it selects now (a load balancer gone from the selection takes its targets'
    groups out of its binding; the deployment's window still counts their rules)."""
    scopes: dict[str, frozenset[str]] = {}
    for binding in policy.desired_settings().bindings:
        if binding.destination == "named_groups":
            groups = frozenset(binding.named_groups)
        elif binding.destination == "tagged_groups" and binding.tag_key:
            groups = frozenset(
                g
                for g, sg in inventory.groups.items()
                if (value := sg.tag(binding.tag_key)) is not None
                and binding.tag_value in (None, value)
            )
        else:
            selected = {lb.arn for lb in inventory.load_balancers if binding.selects(lb.tags)}
            groups = frozenset(
                g
                for tg in inventory.target_groups
                if selected & set(tg.load_balancer_arns)
                for t in tg.targets
                for g in t.group_ids
            )
        scopes[binding_scope(binding.name)] = groups
    return scopes


def _limits(policy: Policy, inventory: Inventory) -> Limits:
    quota = policy.rule_quota(inventory.account_rule_quota) - policy.quota_headroom
    return Limits(quota, per_family=True, prefix_lists=inventory.prefix_lists)


def _narrowed(
    desired: list[Rule], current: list[Rule], peers: frozenset[Peer], policy: Policy
) -> list[Rule]:
    """The desired rules an event-scoped read knows exactly (from the closure's peers, and
    the static rules), plus our rules from other peers as they are: those are not judged."""
    static = {r.key for r in policy.desired_settings().static_rules}
    exact = [r for r in desired if r.key.peer in peers or r.key in static]
    known = {r.key for r in exact}
    kept = [
        Rule(r.key, r.description)
        for r in current
        if r.owned_by(policy.owner) and r.key.peer not in peers and r.key not in known
    ]
    return exact + kept


def _names(inventory: Inventory, groups: set[str], desired: list[Rule]) -> dict[str, str]:
    """Names of the groups in play and of the groups their desired rules admit."""
    peers = {r.key.peer.value for r in desired if r.key.peer.kind == "group"}
    return {
        g: sg.tag("Name") or sg.name
        for g in sorted(groups | peers)
        if (sg := inventory.groups.get(g)) is not None
    }


def _selecting_nothing(inventory: Inventory, policy: Policy) -> list[str]:
    """Notes for a policy, or a binding of it, that selects no load balancer: a tag typo
    would otherwise read as a plan with nothing to change."""
    if not inventory.load_balancers:
        return [
            "the policy selects no load balancer in this account and region: no load "
            "balancer carries the tags its selectors give; check them, and the region"
        ]
    return [
        f"binding {b.name} selects no load balancer: none carries the tags it gives"
        for b in policy.bindings
        if not any(b.selects(lb.tags) for lb in inventory.load_balancers)
    ]


def _unreached(inventory: Inventory, policy: Policy, state: DesiredState) -> list[str]:
    """Groups with owned rules outside the VPCs the policy works in; none when it selects
    nothing at all (then the brake, not the scope, keeps the rules)."""
    named = {r.group_id for r in state.rules} | policy.named_groups
    vpcs = {lb.vpc_id for lb in inventory.load_balancers if lb.vpc_id}
    vpcs |= {inventory.groups[g].vpc_id for g in named if g in inventory.groups}
    vpcs.discard("")
    if not vpcs:
        return []
    return sorted(
        g
        for g in inventory.owned_groups
        if g in inventory.groups and inventory.groups[g].vpc_id not in vpcs
    )


@paused_collector()
def compute_live_plan(
    reader: InventoryReader,
    policy: Policy,
    scope: Scope | None = None,
    *,
    narrow: Scope | None = None,
    partial: bool = False,
    released: Released | None = None,
    window: RevocationWindow | None = None,
) -> LivePlan:
    """Read, derive and plan; `scope` None or full plans every group the policy covers.

    `narrow` (an event's scope) first reads only its peer closure; that plan is returned
    when it stands (core/narrow.py: it only authorizes, within `scope`'s groups if it names
    any) and leaves room to replace our rules it did not judge, else the account is read in
    full. `reader` reads the account (adapters/inventory.py, a fake in tests); `window` is
    the brake's memory, used by a full read only (an event's read does not see every owned
    rule)."""
    inventory = reader.read(narrow)
    peers = inventory.narrowed_to
    if peers is not None and narrow is not None:
        live = plan_from_inventory(inventory, policy, narrow, partial=partial, released=released)
        within = scope.group_ids if scope is not None else frozenset()
        if (
            live.state is not None
            and not live.state.conflicts
            and stands(live.result, within)
            and isinstance(live.result, Plan)
            and leaves_room(
                live.result, live.current, peers, policy.owner, _limits(policy, inventory)
            )
        ):
            return replace(live, narrowed=narrow)
        inventory = reader.read()  # the full read decides
    return plan_from_inventory(
        inventory, policy, scope, partial=partial, released=released, window=window
    )


class Replan(Protocol):
    """The live planner as the use cases call it: `scope` to plan, `narrow` an event's scope
    to try first (see `compute_live_plan`)."""

    def __call__(self, scope: Scope, narrow: Scope | None = None) -> LivePlan: ...


@paused_collector()
def compute_locked_plan(
    reader: InventoryReader,
    policy: Policy,
    groups: Collection[str],
    planned: Planned,
    *,
    released: Released | None = None,
) -> LivePlan:
    """The plan under the locks from the locked groups' rules and the plan's closure only
    (docs/architecture.md, "Reads"), never the account.

    First the locked groups' rules (EC2 only), planned against the planner's desired rules:
    when that plan takes no traffic away (nothing to revoke, or a rule replaced by one that
    allows at least as much, as in #3639), it is the plan, and no load balancer or target
    group is read. Otherwise the closure of what it takes away (the target groups whose
    load balancer admits the peer of a rule whose traffic would go) is read with the rules
    again: for those peers the desired rules are derived afresh, exactly as a full read
    would, so a rule their traffic still needs stays. Address sources (no group closure)
    read the account, as before."""
    wanted = frozenset(groups)
    first = reader.read_locked(Locked(wanted, frozenset()))
    raw = _locked_raw(first, policy, wanted, planned)
    net = raw.net_removals(policy.owner)
    if not net or any(r.rule_id not in planned.stale for r in net):
        # Nothing goes, or what goes was not planned: held without a read (plan_locked).
        return plan_locked(first, policy, wanted, planned, released=released)
    peers = frozenset(r.key.peer for r in net)
    bindings = policy.desired_settings().bindings
    if any(p.kind != "group" for p in peers) or any(
        b.source == "load_balancer_addresses" for b in bindings
    ):
        inventory = reader.read()
        return plan_from_inventory(
            inventory, policy, Scope(group_ids=wanted), partial=True, released=released
        )
    staying = [
        k for b in group_bounds(raw.current, raw.desired, policy.owner).values() for k in b.new_keys
    ]
    closure = reader.read_locked(Locked(wanted, peers, lost_traffic(net, staying)))
    return plan_locked(closure, policy, wanted, planned, released=released)


@dataclass(frozen=True)
class _LockedRaw:
    """The locked groups' plan before its guards (see `plan_locked`)."""

    result: Plan | Refusal
    current: list[Rule]
    desired: list[Rule]
    state: DesiredState
    present: frozenset[str]

    def net_removals(self, owner: str) -> list[Rule]:
        """Rules the plan takes away whose traffic the groups' new rules do not allow."""
        if not isinstance(self.result, Plan):
            return []
        return net_removals(self.result, self.current, self.desired, owner)


def _locked_raw(
    inventory: Inventory, policy: Policy, groups: Collection[str], planned: Planned
) -> _LockedRaw:
    """Desired rules from the read's closure peers (and the policy's static rules) derived
    afresh, the others the planner's; planned make-before-break against the rules read."""
    peers = inventory.narrowed_to or frozenset()
    settings = policy.desired_settings()
    state = compute_desired(inventory, settings)
    present = frozenset(groups) & inventory.groups.keys()
    static = {r.key for r in settings.static_rules}
    exact = [
        r for r in state.rules if r.group_id in present and (r.key.peer in peers or r.key in static)
    ]
    known = {r.key for r in exact}
    others = [
        r
        for r in planned.desired
        if r.group_id in present and r.key.peer not in peers and r.key not in known
    ]
    desired = [*exact, *others]
    current = [r for r in inventory.rules if r.group_id in present]
    adopt = policy.adopts if policy.adopt_descriptions else None
    limits = _limits(policy, inventory)
    result = make_plan(current, desired, policy.owner, limits, partial=True, adopt=adopt)
    return _LockedRaw(result, current, desired, state, present)


@paused_collector()
def plan_locked(
    inventory: Inventory,
    policy: Policy,
    groups: Collection[str],
    planned: Planned,
    *,
    released: Released | None = None,
) -> LivePlan:
    """The pure half of `compute_locked_plan`: the locked groups' plan from a read of their
    rules and of the closure of `inventory.narrowed_to` (none: their rules only).

    Desired rules from the closure's peers (and the policy's static rules) are derived from
    the read; those from other peers are the planner's. Only rules the planner planned to
    take away may go (its brake weighed exactly those, invariant 12), and one whose traffic
    the new rules do not allow only when the read covered its peer's closure; a lookup miss
    in the closure holds the revokes as in the planner; a planned revoke the closure shows
    is still needed is not made, and the plan says so."""
    peers = inventory.narrowed_to or frozenset()
    raw = _locked_raw(inventory, policy, groups, planned)
    result, current, desired = raw.result, raw.current, raw.desired
    state, present = raw.state, raw.present
    notes = [*inventory.notes, *state.notes]
    conflicts = [f"policy: {why}" for g, why in state.conflicts.items() if g in present]
    if conflicts and isinstance(result, Plan):
        result = defer_revokes(result, conflicts)
    verdict, was_released = None, False
    if isinstance(result, Plan):
        gone = taken_away(result, current)
        unjudged = {
            r.rule_id or ""
            for r in net_removals(result, current, desired, policy.owner)
            if r.key.peer not in peers
        }
        unplanned = sorted((gone - planned.stale) | unjudged)
        if unplanned:
            reason = (
                f"the plan under the locks would take away {len(unplanned)} rule(s) the "
                "planner did not plan to, or whose closure it did not read "
                f"({', '.join(unplanned[:5])}): the next run plans them"
            )
            result = withhold_revokes(result, reason, reason, current)
        elif peers:
            kept = sorted(
                r.rule_id or ""
                for r in current
                if r.rule_id in planned.stale and r.rule_id not in gone
            )
            if kept:
                note = (
                    f"kept {len(kept)} rule(s) the planner would revoke ({', '.join(kept[:5])}): "
                    "the read under the locks shows traffic that still needs them"
                )
                result = replace(result, notes=(*result.notes, note))
        if inventory.doubts and net_removals(result, current, desired, policy.owner):
            # The index chose what was read, and it was wrong or unsure on a target group it
            # chose: its word on the ones not read is doubtful too (invariant 15).
            reason = (
                f"the inventory index cannot vouch for the read under the locks "
                f"({'; '.join(inventory.doubts[:5])}): revokes held, the index repaired, "
                "the next run plans them"
            )
            result = withhold_revokes(result, reason, reason, current)
        verdict = check_lookup_misses(
            result,
            current,
            state.lookup_misses,
            {g: sg.vpc_id for g, sg in inventory.groups.items()},
        )
        if verdict is not None:
            was_released = released is not None and released(verdict.fingerprint)
            if not was_released:
                result = hold_revokes(result, verdict, current)
    return LivePlan(
        result=result,
        desired=desired,
        current=current,
        groups=sorted(present),
        notes=notes,
        state=state,
        brake=verdict,
        released=was_released,
        names=_names(inventory, set(present), desired),
    )


class LockedReplan(Protocol):
    """The steps' planner under the locks: the locked groups and what the planner planned
    (see `compute_locked_plan`)."""

    def __call__(self, groups: Sequence[str], planned: Planned) -> LivePlan: ...
