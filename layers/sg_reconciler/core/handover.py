"""Where a hand-over of rules from another tool (the AWS Load Balancer Controller) stands.

Adoption itself is a plan step (`Adopt`, run by the state machine with the authorizations);
this says, from a live plan, what the next run will adopt and authorize, what is already
adopted, and which of the other tool's rules stay its own: when it stops managing rules it
revokes those. Readiness is scoped to the hand-over and must not be undone: ready when
every flow the other tool's rules admit to a registered target is admitted by what stays
once they go (our rules, others'), no target of unknown group could be reached through
them, and no execution that could still hand adopted rules back is in flight. The other
tool's rules are known by their description only: when a listed description is carried by
no rule (a typo in the policy, or a tool with no rules here) and some registered target is
reached only through rules that no deployment owns and no listed description names, one of
those may be the other tool's, unseen, so it is not ready.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from sg_reconciler.core.desired import LookupMiss
from sg_reconciler.core.plan import Adopt, Authorize, Plan
from sg_reconciler.core.rules import ADOPTED_BY_TAG_KEY, OWNER_TAG_KEY, Rule, RuleKey
from sg_reconciler.core.traffic import Traffic

TargetPorts = Mapping[str, frozenset[tuple[str, int]]]  # group -> (protocol, port)


@dataclass(frozen=True)
class HandOver:
    to_adopt: tuple[Adopt, ...]  # taken over in place by the next run
    to_authorize: tuple[Rule, ...]  # authorized by the next run, before anything goes
    adopted: tuple[Rule, ...]  # already taken over by an earlier run
    left_to_owner: tuple[Rule, ...]  # the other tool's rules that nothing desires
    beyond_desired: Traffic  # what only those rules admit: it goes when their owner stops
    cut: Traffic  # of that, what registered targets are reached on: the owner must not stop
    # targets of unknown group that the other tool's rules may admit (a port and VPC of
    # theirs): nobody can tell whether they lose a flow
    unknown_targets: tuple[str, ...] = ()
    unrelated_unknown: tuple[str, ...] = ()  # other targets of unknown group: listed only
    waiting_for: tuple[str, ...] = ()  # executions that could still hand adopted rules back
    unmatched: tuple[str, ...] = ()  # listed descriptions no rule carries (a typo?)
    # what registered targets are reached on only through rules no deployment owns whose
    # description is not listed: one of them may be the other tool's, under another text
    unlisted_only: Traffic = field(default_factory=lambda: Traffic.of([]))

    @property
    def doubtful(self) -> bool:
        """A listed description matches nothing while targets depend on unlisted rules."""
        return bool(self.unmatched) and bool(self.unlisted_only)

    @property
    def ready(self) -> bool:
        """Whether the other tool may stop: no target would lose a flow when its rules go,
        none could through a rule of it the policy misnames, none of unknown group could,
        and no run in flight could hand adopted rules back."""
        return not (self.doubtful or self.cut or self.unknown_targets or self.waiting_for)


def hand_over(
    plan: Plan,
    current: Sequence[Rule],
    desired: Iterable[Rule],
    descriptions: Iterable[str],
    target_ports: TargetPorts,
    misses: Sequence[LookupMiss] = (),
    vpc_of: Mapping[str, str] | None = None,
    waiting_for: Sequence[str] = (),
) -> HandOver:
    """The hand-over from the rules whose description is one of `descriptions`. `vpc_of`
    (group -> VPC) ties a lookup miss to the other tool's rules in its VPC (without it, by
    port alone); `waiting_for` names the runs in flight that could hand adopted rules back."""
    theirs = set(descriptions)
    wanted = list(desired)
    to_adopt = tuple(s for s in plan.steps if isinstance(s, Adopt))
    adopting = {s.rule_id for s in to_adopt}
    keys = {r.key for r in wanted}
    left = tuple(
        r
        for r in current
        if r.description in theirs
        and r.rule_id not in adopting
        and r.tag(ADOPTED_BY_TAG_KEY) is None
        and r.key not in keys
    )
    gone = {r.rule_id for r in left}
    after = Traffic.of([*(r for r in current if r.rule_id not in gone), *wanted])
    # Every rule still the other tool's (to adopt or left) goes when it stops; what stays
    # is what exists now without them, not what the next run would add.
    theirs_now = [r for r in left] + [r for r in current if r.rule_id in adopting]
    going = {r.rule_id for r in theirs_now}
    stays = Traffic.of([r for r in current if r.rule_id not in going])
    related = [m for m in misses if _admitted_by(m, theirs_now, vpc_of)]
    unlisted = [r for r in current if r.tag(OWNER_TAG_KEY) is None and r.description not in theirs]
    unlisted_ids = {r.rule_id for r in unlisted}
    others = Traffic.of([r for r in current if r.rule_id not in unlisted_ids])
    return HandOver(
        to_adopt=to_adopt,
        to_authorize=tuple(r for s in plan.steps if isinstance(s, Authorize) for r in s.rules),
        adopted=tuple(r for r in current if r.tag(ADOPTED_BY_TAG_KEY) is not None),
        left_to_owner=left,
        beyond_desired=Traffic.of(current) - after,
        cut=Traffic.of(_reached(theirs_now, target_ports)) - stays,
        unknown_targets=_named(related),
        unrelated_unknown=_named(m for m in misses if m not in related),
        waiting_for=tuple(waiting_for),
        unmatched=tuple(sorted(theirs - {r.description for r in current})),
        unlisted_only=Traffic.of(_reached(unlisted, target_ports)) - others,
    )


def _named(misses: Iterable[LookupMiss]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(f"{m.target_id} in {m.target_group}" for m in misses))


def _admitted_by(miss: LookupMiss, rules: Iterable[Rule], vpc_of: Mapping[str, str] | None) -> bool:
    """Whether one of `rules` may admit the target: a port of it, in its VPC (or any group
    whose VPC is not known)."""
    for rule in rules:
        key = rule.key
        vpc = (vpc_of or {}).get(rule.group_id)
        if vpc is not None and vpc != miss.vpc_id:
            continue
        if key.protocol == "-1" or (
            key.protocol == miss.protocol
            and any(key.from_port <= p <= key.to_port for p in miss.ports)
        ):
            return True
    return False


def _reached(rules: Iterable[Rule], target_ports: TargetPorts) -> list[RuleKey]:
    """The flows of `rules` that land on a port a target of their group is reached on."""
    flows = []
    for rule in rules:
        key = rule.key
        for protocol, port in target_ports.get(key.group_id, ()):
            if key.protocol in ("-1", protocol) and key.from_port <= port <= key.to_port:
                flows.append(RuleKey(key.group_id, protocol, port, port, key.peer))
    return flows
