"""A plan: the ordered EC2 calls that take the groups from their current to their desired rules.

Each step is one API call. The JSON form (`to_dict`) is the contract of docs/contracts.md;
it is read back at the edge, by the models of app/contracts/plan.py.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from sg_reconciler.core.rules import Rule, rule_to_dict


@dataclass(frozen=True)
class Authorize:
    group_id: str
    rules: tuple[Rule, ...]


@dataclass(frozen=True)
class Revoke:
    group_id: str
    rule_ids: tuple[str, ...]


@dataclass(frozen=True)
class Modify:
    """Rewrite an owned rule in place (same id, no extra quota slot)."""

    group_id: str
    rule_id: str
    rule: Rule


@dataclass(frozen=True)
class Adopt:
    """Take over an unmanaged rule that is exactly a desired rule: tag it with the owner and
    give it the desired description, in place (same id, same key: traffic never changes).
    How a hand-over from another tool, like the AWS Load Balancer Controller, avoids a gap."""

    group_id: str
    rule_id: str
    rule: Rule  # the desired rule: the adopted rule's key, the reconciler's description
    was: str  # the description it had when planned: only that rule is taken over


Step = Authorize | Revoke | Modify | Adopt


@dataclass(frozen=True)
class Plan:
    steps: tuple[Step, ...]
    notes: tuple[str, ...] = field(default=())
    refused: tuple[str, ...] = field(default=())  # partial plans: why some groups wait
    held: str = ""  # the brake holds this plan's revokes (invariant 12): why

    @property
    def groups(self) -> list[str]:
        return sorted({step.group_id for step in self.steps})

    def to_dict(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "feasible": True,
            "steps": [step_to_dict(s) for s in self.steps],
            "notes": list(self.notes),
        }
        if self.refused:
            doc["refused"] = list(self.refused)
        if self.held:
            doc["held"] = self.held
        return doc

    def plan_id(self) -> str:
        """Stable hash of the steps: the execution name, so a duplicate start is a no-op."""
        body = json.dumps(
            [step_to_dict(s) for s in self.steps], sort_keys=True, separators=(",", ":")
        )
        return hashlib.sha256(body.encode()).hexdigest()[:32]


@dataclass(frozen=True)
class Refusal:
    """No make-before-break order exists (or none was found) within the quota."""

    reason: str
    group_id: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"feasible": False, "reason": self.reason}


def step_to_dict(step: Step) -> dict[str, Any]:
    if isinstance(step, Authorize):
        rules = [rule_to_dict(r, with_identity=False) for r in step.rules]
        return {"action": "authorize", "group_id": step.group_id, "rules": rules}
    if isinstance(step, Revoke):
        return {"action": "revoke", "group_id": step.group_id, "rule_ids": list(step.rule_ids)}
    doc = {
        "action": "adopt" if isinstance(step, Adopt) else "modify",
        "group_id": step.group_id,
        "rule_id": step.rule_id,
        "rule": rule_to_dict(step.rule, with_identity=False),
    }
    if isinstance(step, Adopt):
        doc["previous_description"] = step.was
    return doc
