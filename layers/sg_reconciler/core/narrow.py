"""Event-scoped reads: which target groups an event's plan reads, and when that plan stands.

A group's rules from one peer are shaped by every target group whose load balancer that peer
admits, so an event's read covers every target group that shares a peer with the event's
own (the peer closure): for those peers the desired rules are exactly the full read's.
Rules from other peers are neither derived nor revoked. A plan from such a read stands only
when it just authorizes: the traffic it judges is incomplete, so it never takes traffic
away; anything else is planned again from the full read (docs/architecture.md, "Reads").
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from sg_reconciler.core.account import LoadBalancer
from sg_reconciler.core.desired import Binding, DesiredSettings, source_groups
from sg_reconciler.core.plan import Authorize, Plan, Refusal
from sg_reconciler.core.quota import Limits, add
from sg_reconciler.core.rules import Peer, Rule, RuleKey
from sg_reconciler.core.scope import Scope


@dataclass(frozen=True)
class Narrowing:
    """The peers an event-scoped read is exact for, and the target groups it reads."""

    peers: frozenset[Peer]
    target_groups: frozenset[str]


def narrowable(scope: Scope | None, settings: DesiredSettings) -> bool:
    """Whether a scope can be read narrowly: it names load balancers or target groups and
    nothing else that only a full read settles (groups whose rules changed by hand, the
    schedule), every binding admits traffic by group (address sources depend on subnets
    and client settings the closure does not follow), and the bindings shape flows alike
    (a conflict in a flow the read does not cover would refuse a group it cannot see)."""
    return (
        scope is not None
        and not scope.full
        and not scope.group_ids
        and bool(scope.load_balancer_arns or scope.target_group_arns)
        and all(b.source != "load_balancer_addresses" for b in settings.bindings)
        and len({b.shaping for b in settings.bindings}) == 1
    )


def narrow(
    scope: Scope,
    bindings: Iterable[Binding],
    load_balancers: Iterable[LoadBalancer],
    attached: Mapping[str, Collection[str]],
) -> Narrowing | None:
    """The peer closure of a scope over the account's listings: `load_balancers` selected
    by the policy, `attached` target group ARN -> its load balancers' ARNs.

    None when the scope names one the listings lack (deleted, or no longer selected): its
    old rules are found only by a full read."""
    by_arn = {lb.arn: lb for lb in load_balancers}
    if not scope.load_balancer_arns <= by_arn.keys() or not scope.target_group_arns <= set(
        attached
    ):
        return None
    peers_by_tg = _peers_by_target_group(bindings, by_arn, attached)
    seeds = set(scope.target_group_arns)
    seeds |= {tg for tg, lbs in attached.items() if scope.load_balancer_arns.intersection(lbs)}
    peers = frozenset(p for tg in seeds for p in peers_by_tg[tg])
    closure = seeds | {tg for tg, found in peers_by_tg.items() if found & peers}
    return Narrowing(peers, frozenset(closure))


def admitting(
    peers: Collection[Peer],
    bindings: Iterable[Binding],
    load_balancers: Iterable[LoadBalancer],
    attached: Mapping[str, Collection[str]],
) -> frozenset[str]:
    """The target groups whose load balancer admits one of `peers` (the closure of a revoke
    under the locks, docs/architecture.md "Reads"): only their traffic can need a rule from
    those peers, so for those peers their desired rules are exactly the full read's."""
    by_arn = {lb.arn: lb for lb in load_balancers}
    wanted = frozenset(peers)
    return frozenset(
        tg
        for tg, found in _peers_by_target_group(bindings, by_arn, attached).items()
        if found & wanted
    )


def sending_peers(
    bindings: Iterable[Binding],
    load_balancers: Iterable[LoadBalancer],
    attached: Mapping[str, Collection[str]],
) -> dict[str, frozenset[Peer]]:
    """Target group ARN -> the group peers its load balancers send from (what a revoke under
    the locks checks each target group's ports against, core/revoke_closure.py)."""
    return _peers_by_target_group(bindings, {lb.arn: lb for lb in load_balancers}, attached)


def _peers_by_target_group(
    bindings: Iterable[Binding],
    by_arn: Mapping[str, LoadBalancer],
    attached: Mapping[str, Collection[str]],
) -> dict[str, frozenset[Peer]]:
    """Target group ARN -> the group peers its load balancers send from."""
    rules = tuple(bindings)

    def peers_of(lb_arns: Collection[str]) -> frozenset[Peer]:
        return frozenset(
            Peer("group", g)
            for arn in lb_arns
            if (lb := by_arn.get(arn)) is not None
            for binding in rules
            if binding.selects(lb.tags)
            for g in source_groups(lb, binding)
        )

    return {tg: peers_of(lbs) for tg, lbs in attached.items()}


def stands(result: Plan | Refusal, within: Collection[str] = ()) -> bool:
    """Whether a plan from a narrow read may run: it only authorizes, refuses no group, the
    brake held nothing of it (the brake's counts need the full read) and, when `within`
    names groups (the refresh's locks), it changes only those."""
    return (
        isinstance(result, Plan)
        and not result.refused
        and not result.held
        and all(isinstance(step, Authorize) for step in result.steps)
        and (not within or set(result.groups) <= set(within))
    )


def leaves_room(
    plan: Plan, current: Iterable[Rule], peers: frozenset[Peer], owner: str, limits: Limits
) -> bool:
    """Whether each group the plan adds to keeps room to replace, make-before-break, every
    rule of ours the narrow read did not judge: only the full read knows whether they must
    change, and an addition must not take the room that change needs (invariant 9)."""
    added: dict[str, list[RuleKey]] = {}
    for step in plan.steps:
        if isinstance(step, Authorize):
            added.setdefault(step.group_id, []).extend(r.key for r in step.rules)
    for group, keys in added.items():
        rules = [r for r in current if r.group_id == group]
        unjudged = [r.key for r in rules if r.owned_by(owner) and r.key.peer not in peers]
        used = limits.usage([*(r.key for r in rules), *keys])
        if not limits.fits(add(used, limits.usage(unjudged)), group):
            return False
    return True
