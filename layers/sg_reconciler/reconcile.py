"""Compose a live plan: read the account, derive the desired rules, plan make-before-break.

The planner Lambda, the state machine's "refresh plan" step and `sg-reconciler plan --live`
all call `compute_live_plan`, so a plan refreshed under the lock is computed exactly as the
one that started the execution.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sg_reconciler.adapters.inventory import read_inventory
from sg_reconciler.core.desired import DesiredState, compute_desired, touched_groups
from sg_reconciler.core.inventory import Inventory
from sg_reconciler.core.plan import Plan, Refusal
from sg_reconciler.core.planner import Limits, make_plan
from sg_reconciler.core.rules import Rule, rule_to_dict
from sg_reconciler.core.scope import Scope
from sg_reconciler.policy import Policy

if TYPE_CHECKING:
    from mypy_boto3_ec2 import EC2Client
    from mypy_boto3_elbv2 import ElasticLoadBalancingv2Client


@dataclass(frozen=True)
class LivePlan:
    result: Plan | Refusal
    desired: list[Rule]
    current: list[Rule]
    groups: list[str]  # the groups in play after scoping, sorted
    notes: list[str] = field(default_factory=list)
    state: DesiredState | None = None  # exposure report and links, for callers that report

    def to_dict(self) -> dict[str, Any]:
        """The plan contract of DESIGN.md plus the desired rules and the groups in play."""
        doc = self.result.to_dict()
        if self.notes:
            doc["notes"] = [*doc.get("notes", []), *self.notes]
        doc["groups"] = list(self.groups)
        doc["desired"] = [rule_to_dict(r, with_identity=False) for r in self.desired]
        return doc


def plan_from_inventory(
    inventory: Inventory, policy: Policy, scope: Scope | None = None, *, partial: bool = False
) -> LivePlan:
    """The pure half of `compute_live_plan` (no AWS): scope, desired state and plan.

    `partial` (the Lambdas): a group that cannot be planned holds back the revokes, not the
    whole reconcile; see `make_plan`."""
    state = compute_desired(inventory, policy.desired_settings())
    in_play = {r.group_id for r in state.rules} | set(inventory.owned_groups)
    touched = touched_groups(inventory, state, scope, policy.owner)
    groups = in_play if touched is None else in_play & touched
    desired = [r for r in state.rules if r.group_id in groups]
    current = [r for r in inventory.rules if r.group_id in groups]
    result = make_plan(current, desired, policy.owner, Limits(policy.rule_limit), partial=partial)
    return LivePlan(
        result=result,
        desired=desired,
        current=current,
        groups=sorted(groups),
        notes=[*inventory.notes, *state.notes],
        state=state,
    )


def compute_live_plan(
    ec2: EC2Client,
    elbv2: ElasticLoadBalancingv2Client,
    policy: Policy,
    scope: Scope | None = None,
    *,
    partial: bool = False,
) -> LivePlan:
    """Read, derive and plan; `scope` None or full plans every group the policy covers."""
    return plan_from_inventory(read_inventory(ec2, elbv2, policy), policy, scope, partial=partial)
