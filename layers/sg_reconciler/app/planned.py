"""What the planner planned, kept in the plan store for the steps under the locks: the
desired rules of the plan's groups and the ids of the rules its plan revokes or rewrites
(under the plan's hash), and the same of the refresh's plan (under the execution's name) for
the re-plan after the settle.

With them the refresh and the re-plan after the settle read only the locked groups' rules
and the closure of what they revoke, not the account (docs/architecture.md, "Reads"): the
desired rules from peers nothing revokes are the planner's (an extra rule is cleaned up by a
later run), and only rules the planner planned to take away may go. A plan without them (one
started by hand, inline) is refreshed from a full read, as before."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sg_reconciler.core.ports import PlanStorage
from sg_reconciler.core.rules import Rule, RuleError, rule_from_dict, rule_to_dict
from sg_reconciler.errors import InvalidPlan

PLANNED_PART = "planned"  # one item: how many desired rules and stale ids follow
DESIRED_PART = "desired"
STALE_PART = "stale"

RULES_PER_PART = 400  # about 100 KB, far under DynamoDB's 400 KB item
IDS_PER_PART = 2_000


@dataclass(frozen=True)
class Planned:
    """The planner's desired rules of its plan's groups, and what its plan takes away."""

    desired: tuple[Rule, ...]
    stale: frozenset[str]  # rule ids its plan revokes or rewrites into other traffic


def put_planned(store: PlanStorage, key: str, planned: Planned) -> None:
    rules = [rule_to_dict(r, with_identity=False) for r in planned.desired]
    ids = [{"id": i} for i in sorted(planned.stale)]
    store.put_phase(key, DESIRED_PART, _parts(rules, RULES_PER_PART))
    store.put_phase(key, STALE_PART, _parts(ids, IDS_PER_PART))
    store.put_phase(key, PLANNED_PART, [[{"desired": len(rules), "stale": len(ids)}]])


def stored_planned(store: PlanStorage, key: str) -> Planned | None:
    """What the planner stored under `key`; None for a plan it did not store (inline)."""
    head = store.phase(key, PLANNED_PART)
    if not head:
        return None
    docs = store.phase(key, DESIRED_PART)
    ids = {str(item["id"]) for item in store.phase(key, STALE_PART)}
    if len(docs) != head[0].get("desired") or len(ids) != head[0].get("stale"):
        raise InvalidPlan(f"the plan store holds part of what the planner planned for {key}")
    try:
        desired = tuple(rule_from_dict(doc) for doc in docs)
    except RuleError as err:
        raise InvalidPlan(f"planned desired rules of {key}: {err}") from None
    return Planned(desired, frozenset(ids))


def _parts(items: Sequence[dict[str, Any]], size: int) -> list[list[dict[str, Any]]]:
    return [list(items[i : i + size]) for i in range(0, len(items), size)]
