"""The three acts of the demo, each on a fresh local runtime.

1. A new Service gets NodePort 32500: the CloudTrail events flow EventBridge -> SQS ->
   planner -> state machine, which grows the backend rule make-before-break.
2. The same change while AuthorizeSecurityGroupIngress is denied (#3639's IAM case): the
   execution rolls back and nothing between the NLB and the nodes is ever missing.
3. For contrast, the controller's revoke-then-authorize order under the same fault: the
   monitor records the gap, the outage #3639 describes; then the fault clears and the
   reconciler's drift repair closes it.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from botocore.exceptions import ClientError
from sg_reconciler.adapters.inventory import AccountInventory
from sg_reconciler.adapters.plan_store import PlanStore
from sg_reconciler.adapters.security_groups import ip_permission
from sg_reconciler.app.live_plan import compute_live_plan
from sg_reconciler.app.steps.common import stored_phases
from sg_reconciler.core.plan import Authorize, Plan, Revoke
from sg_reconciler.core.rules import Rule, describe_ports
from sg_reconciler.observability import logger
from sg_reconciler.policy import parse_policy

from sg_reconciler_tools.demo.large_world import LargeWorld
from sg_reconciler_tools.demo.world import DemoWorld, build_world, scheduled_event
from sg_reconciler_tools.local import Fault, FaultInjector, InvariantMonitor, LocalRuntime
from sg_reconciler_tools.local.functions import drop_unpublished_metrics

TEMPLATE = Path(__file__).resolve().parents[3] / "template.yaml"
NEW_NODE_PORT = 32500
DENIED = Fault(
    "ec2",
    "AuthorizeSecurityGroupIngress",
    "UnauthorizedOperation",
    count=1000,
    message="You are not authorized to perform this operation.",
)
EXECUTION_TIMEOUT = 60.0

Say = Callable[[str, str], None]  # (kind, text): kind is "step", "ok", "bad", "info", "detail"


@dataclass
class ActResult:
    act: int
    title: str
    outcome: str  # execution status and error, or what the naive order did
    violations: int
    snapshots: int
    old_rules_kept: bool
    converged: bool
    rules_before: list[str]
    rules_after: list[str]
    rules_repaired: list[str] = field(default_factory=list)
    history: list[str] = field(default_factory=list)
    plan: list[str] = field(default_factory=list)
    violation_details: list[str] = field(default_factory=list)
    transitions: int = 0
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def rule_line(rule: Rule, groups: dict[str, str]) -> str:
    names = {v: k for k, v in groups.items()}
    key = rule.key
    owner = "owned" if rule.tag("sg-reconciler/owner") else "unmanaged"
    return (
        f"{names.get(key.group_id, key.group_id)}: "
        f"{describe_ports(key.protocol, key.from_port, key.to_port)} from "
        f"{names.get(key.peer.value, key.peer.value)} ({owner})"
    )


def with_names(text: str, groups: dict[str, str]) -> str:
    """Group ids replaced by the demo's names, for the terminal."""
    for name, group_id in groups.items():
        text = text.replace(group_id, name)
    return text


def plan_lines(plan: Plan, groups: dict[str, str]) -> list[str]:
    names = {v: k for k, v in groups.items()}
    lines = []
    for step in plan.steps:
        group = names.get(step.group_id, step.group_id)
        if isinstance(step, Authorize):
            ports = ", ".join(
                describe_ports(r.key.protocol, r.key.from_port, r.key.to_port) for r in step.rules
            )
            lines.append(f"authorize in {group}: {ports}")
        elif isinstance(step, Revoke):
            lines.append(f"revoke in {group}: {', '.join(step.rule_ids)}")
        else:
            lines.append(f"modify in {group}: {step.rule_id}")
    return lines


def console_history(runtime: LocalRuntime, execution_arn: str) -> list[str]:
    """The states in the order the console lists them, with failures and retries marked."""
    lines: list[str] = []
    for event in runtime.events(execution_arn):
        kind = str(event["type"])
        if kind.endswith("StateEntered"):
            lines.append(event["stateEnteredEventDetails"]["name"])
        elif kind in ("LambdaFunctionFailed", "TaskFailed"):
            details = (
                event.get("lambdaFunctionFailedEventDetails")
                or event.get("taskFailedEventDetails")
                or {}
            )
            lines.append(f"  ! {details.get('error', 'error')}")
        elif kind == "ExecutionFailed":
            details = event.get("executionFailedEventDetails", {})
            lines.append(f"Execution failed: {details.get('error', '')}")
        elif kind == "ExecutionSucceeded":
            lines.append("Execution succeeded")
    return lines


def publish(world: DemoWorld, events: list[dict[str, Any]]) -> None:
    """put_events to EventBridge (10 entries per call); the template's rule routes them to SQS."""
    for first in range(0, len(events), 10):
        world.runtime.clients.events.put_events(
            Entries=[
                {
                    "Source": e["source"],
                    "DetailType": e["detail-type"],
                    "Detail": json.dumps(e["detail"]),
                    "Resources": e["resources"],
                }
                for e in events[first : first + 10]
            ]
        )


def poll_queue(world: DemoWorld, batch_size: int = 100) -> dict[str, Any]:
    """What the Lambda SQS poller hands the planner: up to `batch_size` messages (the template's
    BatchSize; its 20 s batching window lets a burst arrive first)."""
    clients = world.runtime.clients
    queue_url = world.runtime.ref("EventQueue")
    records: list[dict[str, Any]] = []
    while len(records) < batch_size:
        wanted = min(10, batch_size - len(records))
        messages = clients.sqs.receive_message(
            QueueUrl=queue_url, MaxNumberOfMessages=wanted, AttributeNames=["All"]
        ).get("Messages", [])
        if not messages:
            break
        for m in messages:
            records.append(
                {
                    "messageId": m["MessageId"],
                    "receiptHandle": m["ReceiptHandle"],
                    "body": m["Body"],
                    "attributes": m.get("Attributes", {}),
                    "messageAttributes": {},
                    "md5OfBody": m["MD5OfBody"],
                    "eventSource": "aws:sqs",
                    "eventSourceARN": world.runtime.arn("EventQueue"),
                    "awsRegion": world.runtime.region,
                }
            )
            clients.sqs.delete_message(QueueUrl=queue_url, ReceiptHandle=m["ReceiptHandle"])
    return {"Records": records}


def deliver_events(world: DemoWorld, events: list[dict[str, Any]]) -> dict[str, Any]:
    """CloudTrail events through EventBridge and SQS: the batch the planner Lambda receives."""
    publish(world, events)
    return poll_queue(world)


def run_planner(world: DemoWorld | LargeWorld, event: dict[str, Any]) -> str | None:
    """Invoke the planner Lambda; returns the ARN of the execution it started, if any."""
    runtime = world.runtime
    sfn = runtime.clients.stepfunctions
    arn = runtime.arn("ApplyPlanStateMachine")
    before = {e["executionArn"] for e in sfn.list_executions(stateMachineArn=arn)["executions"]}
    response = runtime.invoke("PlannerFunction", event)
    if response.get("batchItemFailures"):
        raise RuntimeError(f"the planner failed records: {response['batchItemFailures']}")
    started = [
        e["executionArn"]
        for e in sfn.list_executions(stateMachineArn=arn)["executions"]
        if e["executionArn"] not in before
    ]
    return started[0] if started else None


def desired_rules(world: DemoWorld) -> list[Rule]:
    clients = world.runtime.clients
    parsed = parse_policy(world.policy)
    return compute_live_plan(
        AccountInventory(clients.ec2, clients.elbv2, parsed), parsed, None
    ).desired


def reconcile(world: DemoWorld) -> dict[str, Any] | None:
    """A scheduled drift-repair run: the planner with the schedule's event, then its execution."""
    scheduled = scheduled_event(world.runtime.account_id, world.runtime.region)
    execution = run_planner(world, scheduled)
    return None if execution is None else world.runtime.wait_for(execution, EXECUTION_TIMEOUT)


def quiet_handlers() -> None:
    """The demo speaks for itself: keep the functions' JSON logs, EMF metrics and the
    emulator's warnings off the terminal."""
    os.environ["POWERTOOLS_METRICS_DISABLED"] = "true"
    drop_unpublished_metrics()  # values an earlier run in this process left behind
    logger.setLevel(logging.CRITICAL)
    logging.getLogger("moto").setLevel(logging.CRITICAL)
    logging.getLogger("sg_reconciler").setLevel(logging.CRITICAL)


def set_stage(say: Say) -> tuple[LocalRuntime, DemoWorld]:
    quiet_handlers()
    say("info", "deploying template.yaml on the emulator and building the cluster (seconds)...")
    runtime = LocalRuntime(TEMPLATE)
    runtime.start()
    world = build_world(runtime)
    reconcile(
        world
    )  # the rules as they stand before the act: tcp 31000-32000 from the backend group
    say(
        "info",
        "cluster: 2 node groups, shared backend SG, NLB with NodePorts "
        f"{', '.join(str(p) for p in world.target_groups)}",
    )
    return runtime, world


def _rules(world: DemoWorld) -> list[str]:
    return sorted(rule_line(r, world.names) for r in world.node_rules())


def _old_kept(world: DemoWorld, before: list[Rule]) -> bool:
    now = {(r.key, r.rule_id) for r in world.node_rules()}
    return all((r.key, r.rule_id) in now for r in before)


def act_one(say: Say) -> ActResult:
    started = time.monotonic()
    runtime, world = set_stage(say)
    try:
        before = world.node_rules()
        say("step", f"A new Service gets NodePort {NEW_NODE_PORT}, above every NodePort so far")
        events = world.add_service(NEW_NODE_PORT)
        desired = desired_rules(world)
        with InvariantMonitor(
            runtime.clients.ec2, world.node_groups.values(), before, desired
        ) as monitor:
            batch = deliver_events(world, events)
            say(
                "info",
                f"CloudTrail -> EventBridge -> SQS: {len(events)} events, one batch of {len(batch['Records'])}",
            )
            execution = run_planner(world, batch)
            if execution is None:
                raise RuntimeError("the planner started no execution")
            described = runtime.wait_for(execution, EXECUTION_TIMEOUT)
        say("info", f"planner -> Step Functions execution {described['name']}")
        return ActResult(
            act=1,
            title=f"New NodePort {NEW_NODE_PORT}: authorize everywhere, then revoke",
            outcome=described["status"],
            violations=len(monitor.violations),
            snapshots=len(monitor.snapshots),
            old_rules_kept=False,
            converged=not compute_plan_steps(world),
            rules_before=sorted(rule_line(r, world.names) for r in before),
            rules_after=_rules(world),
            history=console_history(runtime, execution),
            plan=plan_lines(executed_plan(runtime, described["name"]), world.node_groups),
            violation_details=[with_names(str(v), world.names) for v in monitor.violations],
            transitions=runtime.transitions(execution),
            seconds=time.monotonic() - started,
        )
    finally:
        runtime.stop()


def act_two(say: Say) -> ActResult:
    started = time.monotonic()
    runtime, world = set_stage(say)
    try:
        before = world.node_rules()
        say(
            "step",
            f"The same change (NodePort {NEW_NODE_PORT}) while AuthorizeSecurityGroupIngress is denied",
        )
        say(
            "info",
            "EC2 answers UnauthorizedOperation; the step raises it as AccessDenied, the name "
            "the state machine's Retry and Catch match",
        )
        events = world.add_service(NEW_NODE_PORT)
        desired = desired_rules(world)
        with (
            FaultInjector(DENIED),
            InvariantMonitor(
                runtime.clients.ec2, world.node_groups.values(), before, desired
            ) as monitor,
        ):
            execution = run_planner(world, deliver_events(world, events))
            if execution is None:
                raise RuntimeError("the planner started no execution")
            described = runtime.wait_for(execution, EXECUTION_TIMEOUT)
        error = described.get("error", "")
        return ActResult(
            act=2,
            title="Authorize denied (IAM): roll back, nothing ever missing",
            outcome=f"{described['status']} {error}".strip(),
            violations=len(monitor.violations),
            snapshots=len(monitor.snapshots),
            old_rules_kept=_old_kept(world, before),
            converged=False,
            rules_before=sorted(rule_line(r, world.names) for r in before),
            rules_after=_rules(world),
            history=console_history(runtime, execution),
            plan=plan_lines(executed_plan(runtime, described["name"]), world.node_groups),
            violation_details=[with_names(str(v), world.names) for v in monitor.violations],
            transitions=runtime.transitions(execution),
            seconds=time.monotonic() - started,
        )
    finally:
        runtime.stop()


def revoke_then_authorize(world: DemoWorld, plan: Plan) -> list[str]:
    """The controller's order: per group, revoke the old rule, then authorize the new one."""
    ec2: Any = world.runtime.clients.ec2  # plain dicts, as the adapter builds them
    errors: list[str] = []
    revokes = {s.group_id: s for s in plan.steps if isinstance(s, Revoke)}
    for step in plan.steps:
        if not isinstance(step, Authorize):
            continue
        if step.group_id in revokes:
            ec2.revoke_security_group_ingress(
                GroupId=step.group_id, SecurityGroupRuleIds=list(revokes[step.group_id].rule_ids)
            )
        try:
            ec2.authorize_security_group_ingress(
                GroupId=step.group_id, IpPermissions=[ip_permission(r) for r in step.rules]
            )
        except ClientError as err:  # the point of the act: the error leaves the gap open
            errors.append(f"{err.response['Error']['Code']}: {err.response['Error']['Message']}")
    return errors


def act_three(say: Say) -> ActResult:
    started = time.monotonic()
    runtime, world = set_stage(say)
    try:
        before = world.node_rules()
        say(
            "step",
            "For contrast: the controller's revoke-then-authorize order under the same fault",
        )
        world.add_service(NEW_NODE_PORT)
        clients = runtime.clients
        parsed = parse_policy(world.policy)
        live = compute_live_plan(AccountInventory(clients.ec2, clients.elbv2, parsed), parsed, None)
        assert isinstance(live.result, Plan)
        with (
            InvariantMonitor(
                clients.ec2, world.node_groups.values(), before, live.desired
            ) as monitor,
            FaultInjector(DENIED),
        ):
            errors = revoke_then_authorize(world, live.result)
        gap = _rules(world)
        say(
            "bad",
            f"{len(errors)} authorize call(s) failed after the revoke: the NodePorts are unreachable",
        )
        say("step", "The fault clears; the reconciler's drift repair runs make-before-break")
        repaired = reconcile(world)
        return ActResult(
            act=3,
            title="Revoke-then-authorize (the LBC's order) under the same fault",
            outcome=f"gap left open ({errors[0].split(':')[0] if errors else 'no error'})",
            violations=len(monitor.violations),
            snapshots=len(monitor.snapshots),
            old_rules_kept=False,
            converged=repaired is not None
            and repaired["status"] == "SUCCEEDED"
            and not compute_plan_steps(world),
            rules_before=sorted(rule_line(r, world.names) for r in before),
            rules_after=gap,
            rules_repaired=_rules(world),
            plan=["revoke the old rule, then authorize the new one (per group)"],
            violation_details=[with_names(str(v), world.names) for v in monitor.violations],
            seconds=time.monotonic() - started,
        )
    finally:
        runtime.stop()


def compute_plan_steps(world: DemoWorld) -> int:
    clients = world.runtime.clients
    parsed = parse_policy(world.policy)
    result = compute_live_plan(
        AccountInventory(clients.ec2, clients.elbv2, parsed), parsed, None
    ).result
    return len(result.steps) if isinstance(result, Plan) else -1


def executed_plan(runtime: LocalRuntime, execution_name: str) -> Plan:
    """The calls an execution planned under its locks, as its steps read them from the store."""
    store = PlanStore(runtime.clients.dynamodb, runtime.ref("PlanTable"))
    phases, _ = stored_phases(store, execution_name)
    return Plan(steps=tuple(phases.steps))


ACTS: dict[int, Callable[[Say], ActResult]] = {1: act_one, 2: act_two, 3: act_three}
