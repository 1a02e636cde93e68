"""How the state machine runs a plan: three phases, and what each must leave behind.

- authorize: the leading authorize calls, one item per group, all groups in parallel. A
  failure here is rolled back (only additions happened).
- ordered: the quota-bound interleaving of groups without headroom, one call at a time in
  plan order. Every state between its calls is safe, so a failure stops where it is.
- revoke: the trailing revokes and description changes, one item per group (its calls in
  order), all groups in parallel.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from sg_reconciler.core.plan import Authorize, Modify, Plan, Revoke, Step, step_to_dict
from sg_reconciler.core.rules import Rule, RuleKey


@dataclass(frozen=True)
class Phases:
    authorize: tuple[tuple[str, tuple[Step, ...]], ...]
    ordered: tuple[Step, ...]
    revoke: tuple[tuple[str, tuple[Step, ...]], ...]

    def to_dict(self) -> dict[str, Any]:
        def items(groups: Iterable[tuple[str, tuple[Step, ...]]]) -> list[dict[str, Any]]:
            return [
                {"group_id": g, "steps": [step_to_dict(s) for s in steps]} for g, steps in groups
            ]

        return {
            "authorize": items(self.authorize),
            "ordered": [{"group_id": s.group_id, "steps": [step_to_dict(s)]} for s in self.ordered],
            "revoke": items(self.revoke),
        }


def _by_group(steps: Sequence[Step]) -> tuple[tuple[str, tuple[Step, ...]], ...]:
    groups: dict[str, list[Step]] = {}
    for step in steps:
        groups.setdefault(step.group_id, []).append(step)
    return tuple((g, tuple(s)) for g, s in sorted(groups.items()))


def split_phases(plan: Plan) -> Phases:
    steps = list(plan.steps)
    head = 0
    while head < len(steps) and isinstance(steps[head], Authorize):
        head += 1
    tail = len(steps)
    while tail > head and not isinstance(steps[tail - 1], Authorize):
        tail -= 1
    # The tail runs per group in parallel: it must not reorder a group's calls that the
    # ordered phase interleaves, so a group that appears in the middle keeps its tail there.
    middle_groups = {s.group_id for s in steps[head:tail]}
    tail_steps = [s for s in steps[tail:] if s.group_id not in middle_groups]
    ordered = steps[head:tail] + [s for s in steps[tail:] if s.group_id in middle_groups]
    return Phases(_by_group(steps[:head]), tuple(ordered), _by_group(tail_steps))


def applied_problems(plan: Plan, rules_now: Sequence[Rule], *, final: bool) -> list[str]:
    """What of the plan is not (yet) visible in `rules_now`: empty when it took effect.

    Before the revoke phase (`final` False) every authorized rule must be visible; at the end
    also every revoked rule must be gone and every modified rule rewritten.
    """
    present = {r.key for r in rules_now}
    by_id = {r.rule_id: r for r in rules_now if r.rule_id}
    revoked_in_ordered = {
        i for s in split_phases(plan).ordered if isinstance(s, Revoke) for i in s.rule_ids
    }
    problems: list[str] = []
    for step in plan.steps:
        if isinstance(step, Authorize):
            problems += [f"{r.key} is not visible" for r in step.rules if r.key not in present]
        elif isinstance(step, Revoke) and (final or revoked_in_ordered & set(step.rule_ids)):
            problems += [
                f"{i} in {step.group_id} still exists" for i in step.rule_ids if i in by_id
            ]
        elif isinstance(step, Modify) and final:
            now = by_id.get(step.rule_id)
            if now is None or now.key != step.rule.key or now.description != step.rule.description:
                problems.append(f"{step.rule_id} in {step.group_id} is not yet {step.rule.key}")
    return problems


def leftover_rule_ids(plan: Plan, rules_now: Sequence[Rule]) -> list[str]:
    """Rules the plan revokes that still exist: the next run removes them."""
    ids = {r.rule_id for r in rules_now}
    return sorted(i for s in plan.steps if isinstance(s, Revoke) for i in s.rule_ids if i in ids)


def authorized_keys(plan: Plan) -> set[RuleKey]:
    return {r.key for s in plan.steps if isinstance(s, Authorize) for r in s.rules}
