"""What a rule store checks against a group's live rules before it revokes, modifies or
adopts (the RuleStore contract in `core/ports.py`): one definition for the EC2 adapter and
the tests' in-memory fake, so the fake-backed step tests exercise the adapter's own rules.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from sg_reconciler.core.plan import Adopt
from sg_reconciler.core.rules import ADOPTED_BY_TAG_KEY, OWNER_TAG_KEY, Rule
from sg_reconciler.errors import NotOwned, RuleChanged

AdoptCalls = Literal["none", "tag", "describe"]


def revocable(live: Sequence[Rule], rule_ids: Sequence[str], owner: str) -> list[str]:
    """The ids among `rule_ids` still live, sorted: what a revoke removes. A rule that is
    gone is no error (a revoke is idempotent); one that is not ours is (NotOwned)."""
    wanted = set(rule_ids)
    present = {r.rule_id: r for r in live if r.rule_id in wanted}
    foreign = [str(r) for r in present.values() if not r.owned_by(owner)]
    if foreign:
        raise NotOwned(f"refusing to revoke rules without the owner tag: {', '.join(foreign)}")
    return sorted(i for i in present if i)


def modify_target(live: Sequence[Rule], rule_id: str, owner: str) -> Rule | None:
    """The live rule a modify rewrites; None when it is gone (the call then reports it). A
    rule that is not ours is NotOwned."""
    target = next((r for r in live if r.rule_id == rule_id), None)
    if target is not None and not target.owned_by(owner):
        raise NotOwned(f"refusing to modify rule {target} without the owner tag")
    return target


def modify_needed(target: Rule | None, rule: Rule) -> bool:
    """Whether a modify must call AWS: not when the live rule already is `rule`."""
    return target is None or target.key != rule.key or target.description != rule.description


def adopt_calls(
    group_id: str, target: Rule | None, step: Adopt, owner: str, plan_id: str
) -> AdoptCalls:
    """What adopting `step`'s rule still takes: "tag" (owner tags, then our description),
    "describe" (a retry of this execution: the tags are there, the description may not
    be) or "none" (ours already). Only the planned rule is taken: same key, still described
    as planned; another deployment's rule never (NotOwned)."""
    rule_id, rule = step.rule_id, step.rule
    if target is None or target.key != rule.key:
        raise RuleChanged(
            f"{group_id}: rule {rule_id} to adopt is "
            + ("gone" if target is None else f"now {target.key}, not {rule.key}")
        )
    other = target.tag(OWNER_TAG_KEY)
    if other is not None and other != owner:
        raise NotOwned(f"refusing to adopt rule {target}: deployment {other!r} owns it")
    if other == owner:
        return "describe" if target.tag(ADOPTED_BY_TAG_KEY) == plan_id else "none"
    if target.description != step.was:
        raise RuleChanged(
            f"{group_id}: rule {rule_id} to adopt is now described {target.description!r}, "
            f"not {step.was!r}"
        )
    return "tag"
