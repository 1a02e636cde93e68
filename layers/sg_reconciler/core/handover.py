"""Where a hand-over of rules from another tool (the AWS Load Balancer Controller) stands.

Adoption itself is a plan step (`Adopt`, run by the state machine with the authorizations);
this says, from a live plan, what the next run will adopt and authorize, what is already
adopted, and which of the other tool's rules stay its own: when it stops managing rules it
revokes those, so the hand-over is ready only once every desired rule is in place and ours.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from sg_reconciler.core.plan import Adopt, Authorize, Plan
from sg_reconciler.core.rules import ADOPTED_BY_TAG_KEY, Rule
from sg_reconciler.core.traffic import Traffic


@dataclass(frozen=True)
class HandOver:
    to_adopt: tuple[Adopt, ...]  # taken over in place by the next run
    to_authorize: tuple[Rule, ...]  # authorized by the next run, before anything goes
    adopted: tuple[Rule, ...]  # already taken over by an earlier run
    left_to_owner: tuple[Rule, ...]  # the other tool's rules that nothing desires
    beyond_desired: Traffic  # what only those rules admit: it goes when their owner stops

    @property
    def ready(self) -> bool:
        """Whether the other tool may stop: every desired rule is in place and ours."""
        return not self.to_adopt and not self.to_authorize


def hand_over(
    plan: Plan, current: Sequence[Rule], desired: Iterable[Rule], descriptions: Iterable[str]
) -> HandOver:
    """The hand-over from the rules whose description is one of `descriptions`."""
    theirs = set(descriptions)
    to_adopt = tuple(s for s in plan.steps if isinstance(s, Adopt))
    adopting = {s.rule_id for s in to_adopt}
    wanted = {r.key for r in desired}
    left = tuple(
        r
        for r in current
        if r.description in theirs
        and r.rule_id not in adopting
        and r.tag(ADOPTED_BY_TAG_KEY) is None
        and r.key not in wanted
    )
    gone = {r.rule_id for r in left}
    after = Traffic.of([*(r for r in current if r.rule_id not in gone), *desired])
    return HandOver(
        to_adopt=to_adopt,
        to_authorize=tuple(r for s in plan.steps if isinstance(s, Authorize) for r in s.rules),
        adopted=tuple(r for r in current if r.tag(ADOPTED_BY_TAG_KEY) is not None),
        left_to_owner=left,
        beyond_desired=Traffic.of(current) - after,
    )
