"""Where a hand-over of rules from another tool (the AWS Load Balancer Controller) stands.

Adoption itself is a plan step (`Adopt`, run by the state machine with the authorizations);
this says, from a live plan, what the next run will adopt and authorize, what is already
adopted, and which of the other tool's rules stay its own: when it stops managing rules it
revokes those. The hand-over is ready only when every desired rule is in place and ours,
and nothing a registered target is reached on would go with the other tool's rules.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from sg_reconciler.core.desired import LookupMiss
from sg_reconciler.core.plan import Adopt, Authorize, Plan
from sg_reconciler.core.rules import ADOPTED_BY_TAG_KEY, Rule, RuleKey
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
    unknown_targets: tuple[str, ...] = ()  # targets whose group is unknown (lookup misses)

    @property
    def ready(self) -> bool:
        """Whether the other tool may stop: every desired rule is in place and ours, and no
        target would lose a flow, or has a group nobody can tell."""
        return not (self.to_adopt or self.to_authorize or self.cut or self.unknown_targets)


def hand_over(
    plan: Plan,
    current: Sequence[Rule],
    desired: Iterable[Rule],
    descriptions: Iterable[str],
    target_ports: TargetPorts,
    misses: Sequence[LookupMiss] = (),
) -> HandOver:
    """The hand-over from the rules whose description is one of `descriptions`."""
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
    return HandOver(
        to_adopt=to_adopt,
        to_authorize=tuple(r for s in plan.steps if isinstance(s, Authorize) for r in s.rules),
        adopted=tuple(r for r in current if r.tag(ADOPTED_BY_TAG_KEY) is not None),
        left_to_owner=left,
        beyond_desired=Traffic.of(current) - after,
        cut=Traffic.of(_reached(left, target_ports)) - after,
        unknown_targets=tuple(dict.fromkeys(f"{m.target_id} in {m.target_group}" for m in misses)),
    )


def _reached(rules: Iterable[Rule], target_ports: TargetPorts) -> list[RuleKey]:
    """The flows of `rules` that land on a port a target of their group is reached on."""
    flows = []
    for rule in rules:
        key = rule.key
        for protocol, port in target_ports.get(key.group_id, ()):
            if key.protocol in ("-1", protocol) and key.from_port <= port <= key.to_port:
                flows.append(RuleKey(key.group_id, protocol, port, port, key.peer))
    return flows
