"""Shared tooling of the evidence suites: the #3639 world on one runtime, faults, outcomes.

The fault matrix, the stateful property test and the concurrency test all drive the real
template, ASL and handlers on one `LocalRuntime` per module. This module holds what they
share: changing the world (services, targets, policy), starting and judging executions,
converging, and `ScenarioFault`, a fault built on the same moto hook as `FaultInjector`
(`interception.intercept_api_call`) with three additions the matrix needs: skip the first
calls (to aim at one step of the flow), ELBv2 operations, and the "process died" kind.
"""

from __future__ import annotations

import itertools
import json
import os
import sys
import threading
import time
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

from sg_reconciler.adapters.deployment import HELD_PREFIX, WINDOW_PREFIX
from sg_reconciler.adapters.inventory import AccountInventory
from sg_reconciler.adapters.plan_store import PlanStore
from sg_reconciler.app.live_plan import LivePlan, compute_live_plan
from sg_reconciler.app.planned import stored_planned
from sg_reconciler.core.plan import Plan
from sg_reconciler.core.rules import Rule
from sg_reconciler.policy import parse_policy
from sg_reconciler_tools.demo.play import run_planner
from sg_reconciler_tools.demo.world import DemoWorld, scheduled_event
from sg_reconciler_tools.local import (
    FunctionFailed,
    InvariantMonitor,
    LocalRuntime,
    interception,
    patching,
)
from sg_reconciler_tools.local.functions import module_name

MACHINE = "ApplyPlanStateMachine"
EXECUTION_TIMEOUT = 90.0
POLL_SECONDS = 0.05  # polling less often leaves the interpreter's thread more of the GIL
Kind = Literal["throttled", "denied", "server_error", "response_lost", "died"]
KINDS: tuple[Kind, ...] = ("throttled", "denied", "server_error", "response_lost", "died")

# The AWS error code each service answers per fault kind ("died" raises no AWS error).
ERROR_CODES: dict[str, dict[str, str]] = {
    "ec2": {
        "throttled": "RequestLimitExceeded",
        "denied": "UnauthorizedOperation",
        "server_error": "InternalError",
    },
    "elbv2": {
        "throttled": "Throttling",
        "denied": "AccessDenied",
        "server_error": "InternalFailure",
    },
    "dynamodb": {
        "throttled": "ThrottlingException",
        "denied": "AccessDeniedException",
        "server_error": "InternalServerError",
    },
    "lambda": {
        "throttled": "TooManyRequestsException",
        "denied": "AccessDeniedException",
        "server_error": "ServiceException",
    },
    "stepfunctions": {
        "throttled": "ThrottlingException",
        "denied": "AccessDeniedException",
        "server_error": "ServiceUnavailable",
    },
}
# The HTTP status of an injected server error: AWS answers one with a 5xx (and botocore's
# standard retries retry a 5xx where a client allows more than one attempt).
SERVER_ERROR_STATUS = 500
# What Lambda reports when the sandbox is killed mid-invocation (timeout, OOM, crash): an
# unhandled function error whose errorType Step Functions uses as the error name.
DIED_ERROR_TYPE = "Sandbox.Timedout"
# Rows of the fault matrix, printed by tests/evidence/conftest.py at the end of the session.
MATRIX_ROWS: list[dict[str, Any]] = []


class ProcessKilled(Exception):
    """Unwinds a handler right after a call took effect, as if its process had stopped there.

    It is not an AWS error, so no adapter maps it; `ScenarioFault` turns the invocation's
    answer into Lambda's `Sandbox.Timedout` failure.
    """


class ScenarioFault(patching.PatchSet):
    """Context manager: the calls `skip+1 .. skip+count` of one AWS action fail as `kind` says.

    - throttled / denied / server_error: the call fails before moto runs it.
    - response_lost: moto applies the call, then the caller sees the server error.
    - died: moto applies the call, then the calling handler's process dies: the handler
      unwinds at once (`ProcessKilled`) and the Lambda invocation answers `Sandbox.Timedout`,
      as Lambda does for a sandbox killed mid-invocation. For `lambda:Invoke` itself the
      handler runs to the end and its answer is replaced by that failure.
    """

    def __init__(
        self, service: str, operation: str, kind: Kind, *, count: int = 1, skip: int = 0
    ) -> None:
        self.service, self.operation, self.kind = service, operation, kind
        self.count, self.skip = count, skip
        self.fired: list[int] = []  # the call numbers (1-based) that failed
        self.calls = 0
        self._lock = threading.Lock()
        self._died = threading.local()

    def _install(self) -> Iterator[patching.Patch]:
        yield interception.intercept_api_call(self.service, self.operation, self._intercept)
        if self.kind == "died" and (self.service, self.operation) != ("lambda", "Invoke"):
            yield interception.intercept_api_call(
                "lambda", "Invoke", self._invocation, layer=interception.FAULT_LAYER + 1
            )

    def _take(self) -> int | None:
        with self._lock:
            self.calls += 1
            if self.skip < self.calls <= self.skip + self.count:
                self.fired.append(self.calls)
                return self.calls
            return None

    def _intercept(self, service: str, operation: str, proceed: interception.Proceed) -> Any:
        if self._take() is None:
            return proceed()
        message = f"injected {self.kind}"
        server = ERROR_CODES[service]["server_error"]
        if self.kind in ("throttled", "denied"):
            raise interception.AwsError(ERROR_CODES[service][self.kind], message)
        if self.kind == "server_error":
            raise interception.AwsError(server, message, SERVER_ERROR_STATUS)
        result = proceed()  # the call takes effect
        if self.kind == "response_lost":
            raise interception.AwsError(server, message, SERVER_ERROR_STATUS)
        if (service, operation) == ("lambda", "Invoke"):
            return died_response(result)
        self._died.flag = True
        raise ProcessKilled(f"the process died right after {operation}")

    def _invocation(self, service: str, operation: str, proceed: interception.Proceed) -> Any:
        self._died.flag = False
        result = proceed()
        if getattr(self._died, "flag", False):
            self._died.flag = False
            return died_response(result)
        return result


def died_response(result: Any) -> Any:
    """moto's Invoke answer (a botocore `AWSResponse`) turned into a killed-sandbox failure."""
    from botocore.awsrequest import AWSResponse
    from moto.core.botocore_stubber import MockRawResponse

    body = json.dumps(
        {"errorType": DIED_ERROR_TYPE, "errorMessage": "Task timed out (sandbox killed)"}
    ).encode()
    headers = {**result.headers, "x-amz-function-error": "Unhandled"}
    headers["Content-Length"] = str(len(body))
    headers.pop("x-amz-crc32", None)
    return AWSResponse(result.url, result.status_code, headers, MockRawResponse(body))


# The runtime ---------------------------------------------------------------------------

# Variables the local runtime's handler host sets around every handler call, besides the
# function's own Environment.Variables (sg_reconciler_tools/local/functions.py).
HOST_VARIABLES = (
    "AWS_LAMBDA_FUNCTION_NAME",
    "AWS_LAMBDA_FUNCTION_VERSION",
    "AWS_LAMBDA_FUNCTION_MEMORY_SIZE",
    "_HANDLER",
    "LAMBDA_TASK_ROOT",
    "POWERTOOLS_TRACE_DISABLED",
)


@contextmanager
def handler_variables_kept(runtime: LocalRuntime) -> Iterator[None]:
    """Work around a race in the local runtime: keep the handlers' variables in os.environ.

    The handler host sets a function's variables in os.environ for the call and removes the
    ones that were not there before. Another thread that copies os.environ at that moment
    (the interpreter creates a boto3 client per task) iterates its keys and then fails on
    the removed one: `KeyError: 'AWS_LAMBDA_FUNCTION_NAME'` inside the interpreter, an
    execution failing with States.Runtime. With every such variable already present, the
    host only overwrites and restores values, and no key ever disappears.
    """
    names = set(HOST_VARIABLES)
    for spec in runtime.functions:
        names |= set(spec.environment)
    missing = [name for name in sorted(names) if name not in os.environ]
    for name in missing:
        os.environ[name] = ""
    try:
        yield
    finally:
        for name in missing:
            os.environ.pop(name, None)


class NoSleep:
    """Stands in for `time` in `botocore.endpoint`: the retries of the planner's own clients
    (5 attempts, backoff with jitter) record their delay instead of sleeping."""

    def __init__(self) -> None:
        self.slept: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)


# The world ---------------------------------------------------------------------------


def policy_doc(world: DemoWorld, **overrides: Any) -> str:
    return json.dumps({**json.loads(world.policy), **overrides})


def current_policy(world: DemoWorld) -> str:
    ssm = world.runtime.clients.ssm
    return str(ssm.get_parameter(Name=world.runtime.ref("PolicyParameter"))["Parameter"]["Value"])


def live_plan(world: DemoWorld, **policy_overrides: Any) -> LivePlan:
    """A full plan from the account as it is, under the current policy (with overrides)."""
    clients = world.runtime.clients
    policy = parse_policy(json.dumps({**json.loads(current_policy(world)), **policy_overrides}))
    return compute_live_plan(AccountInventory(clients.ec2, clients.elbv2, policy), policy, None)


def exact_needs(world: DemoWorld) -> list[Rule]:
    """The desired rules with every needed port range its own rule (the policy's largest
    rule budget): the traffic live targets use, without the ports a smaller budget adds to
    join ranges."""
    return live_plan(world, rule_budget=60).desired


def planned_desired(world: DemoWorld, executions: list[dict[str, Any]]) -> list[Rule]:
    """The desired rules the executions were planned toward: what the planner stored under
    each plan's hash and the refresh under each execution's name (app/planned.py)."""
    store = PlanStore(world.runtime.clients.dynamodb, world.runtime.physical_name("PlanTable"))
    rules: list[Rule] = []
    for described in executions:
        key = json.loads(described["input"])["plan_ref"]["groups_key"]
        for stored in (stored_planned(store, key), stored_planned(store, described["name"])):
            rules += stored.desired if stored is not None else ()
    return rules


def plan_steps(world: DemoWorld) -> int:
    """Steps a fresh full plan still has (-1 when it is refused)."""
    result = live_plan(world).result
    return len(result.steps) if isinstance(result, Plan) else -1


def drop_service(world: DemoWorld, node_port: int) -> None:
    """Delete a Service: its listener and target group (as the controller does)."""
    elbv2 = world.runtime.clients.elbv2
    tg = world.target_groups.pop(node_port)
    for listener in elbv2.describe_listeners(LoadBalancerArn=world.load_balancer_arn)["Listeners"]:
        forwards = [a.get("TargetGroupArn") for a in listener.get("DefaultActions", [])]
        if tg in forwards:
            elbv2.delete_listener(ListenerArn=listener["ListenerArn"])
    elbv2.delete_target_group(TargetGroupArn=tg)


def expire_locks(runtime: LocalRuntime) -> list[str]:
    """Let every lock's lease run out (time passing for a dead holder); returns the groups."""
    table = runtime.ref("LockTable")
    dynamodb = runtime.clients.dynamodb
    groups = held_locks(runtime)
    for group in groups:
        dynamodb.update_item(
            TableName=table,
            Key={"group_id": {"S": group}},
            UpdateExpression="SET lease_expires_at = :past",
            ExpressionAttributeValues={":past": {"N": "1"}},
        )
    return groups


def end_the_brake_window(runtime: LocalRuntime) -> None:
    """Let a day pass for the brake: its windows and held plans expire (their TTL), so the
    removals counted so far no longer count."""
    table = runtime.ref("LockTable")
    dynamodb = runtime.clients.dynamodb
    for item in dynamodb.scan(TableName=table).get("Items", []):
        key = item["group_id"]["S"]
        if key.startswith((WINDOW_PREFIX, HELD_PREFIX)):
            dynamodb.delete_item(TableName=table, Key={"group_id": {"S": key}})


def held_locks(runtime: LocalRuntime) -> list[str]:
    """The groups locked now (the table also keeps the brake's records, which are no locks)."""
    items = runtime.clients.dynamodb.scan(TableName=runtime.ref("LockTable")).get("Items", [])
    return sorted(i["group_id"]["S"] for i in items if i["group_id"]["S"].startswith("sg-"))


def monitor_for(
    world: DemoWorld, desired: list[Rule], groups: list[str] | None = None
) -> InvariantMonitor:
    ids = groups if groups is not None else list(world.node_groups.values())
    return InvariantMonitor(world.runtime.clients.ec2, ids, None, desired)


def start_plan(world: DemoWorld, live: LivePlan, name: str) -> str:
    assert isinstance(live.result, Plan)
    payload = {"plan_id": name, "plan": live.result.to_dict()}
    return world.runtime.start_execution(MACHINE, payload, name)


def outcome_of(described: dict[str, Any]) -> str:
    """SUCCEEDED, or the error name a FAILED execution ended with (RolledBack, ...)."""
    if described["status"] == "SUCCEEDED":
        return "SUCCEEDED"
    return str(described.get("error") or described["status"])


def last_state(runtime: LocalRuntime, execution_arn: str) -> str:
    entered = [s for s, kind in runtime.history(execution_arn) if kind.endswith("StateEntered")]
    return entered[-1] if entered else ""


@dataclass
class PlannerRun:
    """One planner invocation: what it answered and the executions it started."""

    answer: str  # "ok", "batch item failures" or the function's error type
    executions: list[dict[str, Any]] = field(default_factory=list)


def wait_for(runtime: LocalRuntime, execution_arn: str) -> dict[str, Any]:
    return runtime.wait_for(execution_arn, EXECUTION_TIMEOUT, POLL_SECONDS)


def planner_run(
    world: DemoWorld, wait: Callable[[str], dict[str, Any]] | None = None
) -> PlannerRun:
    """A scheduled planner run; waits for every execution it started (even if it failed)."""
    runtime = world.runtime
    if wait is None:
        wait = lambda arn: wait_for(runtime, arn)  # noqa: E731
    sfn = runtime.clients.stepfunctions
    machine = runtime.arn(MACHINE)
    before = {e["executionArn"] for e in sfn.list_executions(stateMachineArn=machine)["executions"]}
    scheduled = scheduled_event()
    try:
        run_planner(world, scheduled)
        answer = "ok"
    except FunctionFailed as failed:
        answer = failed.error_type
    except RuntimeError:
        answer = "batch item failures"
    started = [
        e["executionArn"]
        for e in sfn.list_executions(stateMachineArn=machine)["executions"]
        if e["executionArn"] not in before
    ]
    return PlannerRun(answer, [wait(arn) for arn in started])


SCHEDULE_SECONDS = 900  # the drift-repair schedule's period (template.yaml)
# Scheduled runs this process has modelled: each converge round is the schedule's next run.
_schedule_runs = itertools.count(1)


def converge(world: DemoWorld, rounds: int = 2, pause: float = 0.0) -> bool:
    """Scheduled reconciles (at most `rounds`) until a fresh plan has no steps left; `pause`
    seconds between them lets each run's verification be its own (the inventory index's
    versions count whole seconds). A schedule's runs are minutes apart: the planner sees
    each round one period later than the round before, in this call or any earlier one, so
    a plan that failed more often than its execution name's window allows restarts
    (`restart limit`) runs again, as on AWS."""
    for round_ in range(rounds):
        if plan_steps(world) == 0:
            return True
        if round_ and pause:
            time.sleep(pause)
        with planner_clock_ahead(world.runtime, next(_schedule_runs) * SCHEDULE_SECONDS):
            planner_run(world)
    return plan_steps(world) == 0


@contextmanager
def planner_clock_ahead(runtime: LocalRuntime, seconds: float) -> Iterator[None]:
    """The planner handler's `time.time()` runs `seconds` ahead (it names executions by it).
    Before the planner's first run in this runtime its module is not imported: that run
    keeps the real time, and no plan has used up a window yet."""
    spec = next(f for f in runtime.functions if f.logical_id == "PlannerFunction")
    module = sys.modules.get(module_name(spec))  # the name the runtime's host imports it as
    if module is None:
        yield
        return
    real = module.time
    module.time = types.SimpleNamespace(time=lambda: real.time() + seconds)
    try:
        yield
    finally:
        module.time = real
