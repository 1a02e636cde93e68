"""`sg-reconciler status`: how one deployment is doing (its stack's recent executions, what
the brake holds, the last drift the schedule repaired, the policy's bindings), or, from the
central stack's table, every account and region of the fleet. Reads only."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sg_reconciler.adapters.aws import Clients
from sg_reconciler.adapters.deployment import BrakeReleases
from sg_reconciler.adapters.fleet import FleetTable
from sg_reconciler.core.fleet import DeploymentStatus, ExecutionOutcome, execution_outcome
from sg_reconciler.policy import PolicyError, parse_policy

from sg_reconciler_tools.plan_files import InputError
from sg_reconciler_tools.render import SECONDS, UTC_SECONDS

EXIT_NEEDS_ATTENTION = 3


@dataclass
class StackStatus:
    """One deployment as read from its own account."""

    stack: str
    account: str
    region: str
    executions: list[ExecutionOutcome] = field(default_factory=list)
    held: list[str] = field(default_factory=list)  # what the brake holds, one line each
    bindings: list[str] = field(default_factory=list)
    policy_error: str = ""

    def attention(self) -> list[str]:
        status = DeploymentStatus(self.account, self.region)
        for outcome in reversed(self.executions):  # oldest first: the newest ends as last
            status.record(outcome)
        reasons = status.attention()
        reasons += [f"the brake holds {h}" for h in self.held]
        if self.policy_error:
            reasons.append(f"the policy does not load: {self.policy_error}")
        return reasons

    def last_drift(self) -> str:
        drifts = [o.stopped_at for o in self.executions if o.scheduled and o.status == "SUCCEEDED"]
        return max(drifts, default="")

    def to_dict(self) -> dict[str, Any]:
        return {
            "stack": self.stack,
            "account": self.account,
            "region": self.region,
            "executions": [o.to_dict() for o in self.executions],
            "brake_holds": self.held,
            "last_drift": self.last_drift(),
            "bindings": self.bindings,
            "attention": self.attention(),
        }


def read_stack_status(clients: Clients, stack: str, executions: int) -> StackStatus:
    """The stack's outputs name its state machine, lock table and policy parameter."""
    described = clients.cloudformation.describe_stacks(StackName=stack)["Stacks"][0]
    outputs = {o["OutputKey"]: o["OutputValue"] for o in described.get("Outputs", [])}
    missing = {"StateMachineArn", "LockTableName", "PolicyParameterName"} - set(outputs)
    if missing:
        raise InputError(
            f"stack {stack} is not an SG Reconciler stack (no {', '.join(sorted(missing))} output)"
        )
    arn = outputs["StateMachineArn"]
    account, region = arn.split(":")[4], arn.split(":")[3]
    status = StackStatus(stack, account, region)
    listed = clients.stepfunctions.list_executions(stateMachineArn=arn, maxResults=executions)
    for item in listed.get("executions", []):
        description = clients.stepfunctions.describe_execution(executionArn=item["executionArn"])
        status.executions.append(
            execution_outcome(description, account=account, region=region, stack=stack)
        )
    brake = BrakeReleases(clients.dynamodb, outputs["LockTableName"])
    status.held = [f"{h.fingerprint}: {h.reason}" for h in brake.held()]
    text = clients.ssm.get_parameter(Name=outputs["PolicyParameterName"])["Parameter"]["Value"]
    try:
        status.bindings = [b.name for b in parse_policy(text, "policy").bindings]
    except PolicyError as err:
        status.policy_error = str(err)
    return status


SEE = " (what each means and what to do: docs/troubleshooting.md)"


def _shown(stamp: str) -> str:
    """A stored ISO time as a person reads it: to the second, in UTC (one without a zone is
    shown as it is written, to the second)."""
    try:
        moment = datetime.fromisoformat(stamp)
    except ValueError:
        return stamp
    if moment.tzinfo is None:
        return moment.strftime(SECONDS)
    return moment.astimezone(UTC).strftime(UTC_SECONDS)


def render_stack_status(status: StackStatus) -> str:
    lines = [f"{status.stack} in {status.account} {status.region}"]
    lines.append(f"  bindings: {', '.join(status.bindings) or '(none)'}")
    drift = _shown(status.last_drift()) or "none in the executions shown"
    lines.append(f"  last drift repaired: {drift}")
    lines.append(f"  brake: {'; '.join(status.held) or 'holds nothing'}")
    lines.append("  executions (newest first):")
    for outcome in status.executions:
        lines.append(
            f"    {_shown(outcome.stopped_at) or 'running':<24} {outcome.execution:<48} "
            f"{outcome.summary()}"
        )
    if not status.executions:
        lines.append("    none")
    reasons = status.attention()
    lines.append(f"needs attention: {'; '.join(reasons)}{SEE}" if reasons else "all well")
    return "\n".join(lines)


def render_fleet(statuses: list[DeploymentStatus]) -> str:
    header = f"{'ACCOUNT':<14}{'REGION':<16}{'LAST EXECUTION':<44}{'LAST DRIFT':<28}ATTENTION"
    lines = [header]
    for s in statuses:
        last = s.last.summary() if s.last else "none yet"
        reasons = "; ".join(s.attention()) or "-"
        drift = _shown(s.last_drift) or "-"
        lines.append(f"{s.account:<14}{s.region:<16}{last:<44}{drift:<28}{reasons}")
    needing = sum(1 for s in statuses if s.attention())
    lines.append(
        f"{len(statuses)} deployment(s), {needing} needing attention{SEE if needing else ''}"
    )
    return "\n".join(lines)


def fleet_to_json(statuses: list[DeploymentStatus]) -> str:
    return json.dumps(
        [
            {
                "account": s.account,
                "region": s.region,
                "last_execution": s.last.to_dict() if s.last else None,
                "alarms": s.alarms,
                "last_drift": s.last_drift,
                "attention": s.attention(),
            }
            for s in statuses
        ],
        indent=2,
    )


def read_fleet(clients: Clients, table: str) -> list[DeploymentStatus]:
    return FleetTable(clients.dynamodb, table).all()
