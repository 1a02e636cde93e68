"""How the state machine runs a plan: three phases, and what each must leave behind.

- authorize: the leading authorize calls, one item per group, all groups in parallel. A
  failure here, or before the next phase starts, is rolled back (only additions happened).
- ordered: the quota-bound interleaving of groups without headroom, one call at a time in
  plan order. It starts only after the authorize phase is verified, and every state between
  its calls is safe, so a failure stops where it is (never a rollback: old rules are gone).
- revoke: the trailing revokes and description changes, one item per group (its calls in
  order), all groups in parallel.

The phases live in the plan store, in batches of groups (`batched`); the execution state
carries only the batch numbers (invariant 13). Every item that revokes or modifies carries
its group's desired rules, for the live guard (invariant 11); an ordered item that follows
an authorize waits `settle_seconds` first, so the rule it relies on is visible before
anything goes.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sg_reconciler.core.plan import (
    Adopt,
    Authorize,
    Modify,
    Revoke,
    Step,
    step_to_dict,
)
from sg_reconciler.core.rules import Rule, rule_to_dict

Items = tuple[tuple[str, tuple[Step, ...]], ...]  # (group, its calls in order)


@dataclass(frozen=True)
class Phases:
    authorize: Items
    ordered: tuple[Step, ...]
    revoke: Items

    @property
    def steps(self) -> list[Step]:
        """Every call, in the order the state machine makes them."""
        return [
            *(s for _, steps in self.authorize for s in steps),
            *self.ordered,
            *(s for _, steps in self.revoke for s in steps),
        ]

    def to_dict(
        self, desired: Mapping[str, Sequence[Rule]] | None = None, settle_seconds: int = 0
    ) -> dict[str, Any]:
        """The phases as the state machine reads them; `desired` feeds the live guard."""
        wanted = desired or {}

        def guarded(group_id: str, steps: Sequence[Step]) -> dict[str, Any]:
            item: dict[str, Any] = {
                "group_id": group_id,
                "steps": [step_to_dict(s) for s in steps],
            }
            if any(not isinstance(s, ADDING) for s in steps):
                item["desired"] = [
                    rule_to_dict(r, with_identity=False) for r in wanted.get(group_id, ())
                ]
            return item

        def items(groups: Iterable[tuple[str, tuple[Step, ...]]]) -> list[dict[str, Any]]:
            return [guarded(g, steps) for g, steps in groups]

        ordered = []
        for index, step in enumerate(self.ordered):
            item = guarded(step.group_id, (step,))
            follows_authorize = index > 0 and isinstance(self.ordered[index - 1], Authorize)
            waits = follows_authorize and not isinstance(step, Authorize)
            item["settle_seconds"] = settle_seconds if waits else 0
            ordered.append(item)
        return {
            "authorize": items(self.authorize),
            "ordered": ordered,
            "revoke": items(self.revoke),
        }


PHASE_NAMES = ("authorize", "ordered", "revoke")
GROUPS_PER_BATCH = 20  # transitions grow 2 per batch, not per group (docs/architecture.md)
MAX_BATCH_BYTES = 300_000  # under DynamoDB's 400 KB item, with room for the key


def batched(
    items: Sequence[dict[str, Any]],
    max_items: int = GROUPS_PER_BATCH,
    max_bytes: int = MAX_BATCH_BYTES,
    parallel: int = 1,
) -> list[list[dict[str, Any]]]:
    """Consecutive items in batches of at most `max_items` and `max_bytes` of JSON each,
    their number a multiple of `parallel` where the items allow, sizes as even as can be
    (so that the Map's last round is as full as its first)."""
    if not items:
        return []
    count = -(-len(items) // max_items)
    count = min(len(items), -(-count // parallel) * parallel)
    share, extra = divmod(len(items), count)
    batches: list[list[dict[str, Any]]] = []
    start = 0
    for index in range(count):
        end = start + share + (1 if index < extra else 0)
        batches += _by_bytes(items[start:end], max_bytes)
        start = end
    return batches


def _by_bytes(items: Sequence[dict[str, Any]], max_bytes: int) -> list[list[dict[str, Any]]]:
    batches: list[list[dict[str, Any]]] = [[]]
    size = 0
    for item in items:
        weight = len(json.dumps(item, separators=(",", ":")))
        if batches[-1] and size + weight > max_bytes:
            batches.append([])
            size = 0
        batches[-1].append(item)
        size += weight
    return batches


def phase_batches(
    doc: Mapping[str, Sequence[dict[str, Any]]], parallel: int = 1
) -> dict[str, list[list[dict[str, Any]]]]:
    """The phases of `Phases.to_dict` in batches: groups of the parallel phases together (a
    multiple of the Map's concurrency `parallel`), the ordered phase one call per batch
    (each may wait for the settle first)."""
    return {
        "authorize": batched(doc.get("authorize", ()), parallel=parallel),
        "ordered": [[item] for item in doc.get("ordered", ())],
        "revoke": batched(doc.get("revoke", ()), parallel=parallel),
    }


def batch_refs(batches: Mapping[str, Sequence[Sequence[dict[str, Any]]]]) -> dict[str, Any]:
    """What the execution state carries of the phases: batch numbers, and the ordered phase's
    settle per call (quota-bound calls are few: groups at their quota)."""
    return {
        "authorize": list(range(len(batches.get("authorize", ())))),
        "ordered": [
            {"batch": index, "settle_seconds": int(batch[0].get("settle_seconds", 0))}
            for index, batch in enumerate(batches.get("ordered", ()))
        ],
        "revoke": list(range(len(batches.get("revoke", ())))),
    }


def _by_group(steps: Sequence[Step]) -> Items:
    groups: dict[str, list[Step]] = {}
    for step in steps:
        groups.setdefault(step.group_id, []).append(step)
    return tuple((g, tuple(s)) for g, s in sorted(groups.items()))


# Steps that never take traffic away: they run in the first phase, before any revoke.
ADDING = (Authorize, Adopt)


def split_phases(steps: Sequence[Step]) -> Phases:
    steps = list(steps)
    head = 0
    while head < len(steps) and isinstance(steps[head], ADDING):
        head += 1
    tail = len(steps)
    while tail > head and not isinstance(steps[tail - 1], ADDING):
        tail -= 1
    # The tail runs per group in parallel: it must not reorder a group's calls that the
    # ordered phase interleaves, so a group that appears in the middle keeps its tail there.
    middle_groups = {s.group_id for s in steps[head:tail]}
    tail_steps = [s for s in steps[tail:] if s.group_id not in middle_groups]
    ordered = steps[head:tail] + [s for s in steps[tail:] if s.group_id in middle_groups]
    return Phases(_by_group(steps[:head]), tuple(ordered), _by_group(tail_steps))


def applied_problems(phases: Phases, rules_now: Sequence[Rule], *, final: bool) -> list[str]:
    """What of the plan is not (yet) visible in `rules_now`: empty when it took effect.

    After the authorize phase (`final` False) its rules must be visible; at the end every
    authorized rule must be visible, every revoked rule gone, every modified rule rewritten.
    """
    present = {r.key for r in rules_now}
    by_id = {r.rule_id: r for r in rules_now if r.rule_id}
    steps = phases.steps if final else [s for _, steps in phases.authorize for s in steps]
    problems: list[str] = []
    for step in steps:
        if isinstance(step, Authorize):
            problems += [f"{r.key} is not visible" for r in step.rules if r.key not in present]
        elif isinstance(step, Revoke):
            problems += [
                f"{i} in {step.group_id} still exists" for i in step.rule_ids if i in by_id
            ]
        elif isinstance(step, Modify | Adopt):
            now = by_id.get(step.rule_id)
            if now is None or now.key != step.rule.key or now.description != step.rule.description:
                problems.append(f"{step.rule_id} in {step.group_id} is not yet {step.rule.key}")
    return problems
