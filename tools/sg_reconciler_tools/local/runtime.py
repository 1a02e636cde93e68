"""The whole app on moto in this process: the real stack, real ASL, our handlers.

`LocalRuntime(template_path)` starts moto with the hooks of `moto_hooks`, deploys the
template (`deployment`; `update` moves it to another, as an upgrade does), runs its Lambda
functions in this process (`functions.HandlerHost`) and executions of the real state
machine in moto's interpreter. Wait states and Retry backoff do not sleep (their seconds
are recorded in `waits` and `retry_sleeps`); executions run in moto's background thread,
so `wait_for` polls with a timeout. Dev tooling only: nothing here is deployed.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from sg_reconciler import wiring
from sg_reconciler.adapters import aws, pacing

from sg_reconciler_tools.local import (
    cfn_workarounds,
    executions,
    moto_hooks,
    moto_state,
    patching,
    recorder,
)
from sg_reconciler_tools.local.deployment import (
    FUNCTION_TYPE,
    REGION,
    RULE_TYPE,
    STATE_MACHINE_TYPE,
    Deployment,
    SkippedResource,
    session,
)
from sg_reconciler_tools.local.functions import FunctionSpec, HandlerHost, Invocation
from sg_reconciler_tools.local.stack import TemplateError

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_ec2 import EC2Client
    from mypy_boto3_elbv2 import ElasticLoadBalancingv2Client
    from mypy_boto3_sqs import SQSClient
    from mypy_boto3_ssm import SSMClient
    from mypy_boto3_stepfunctions import SFNClient

FINISHED = frozenset({"SUCCEEDED", "FAILED", "TIMED_OUT", "ABORTED"})
_FAKE_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
}


@dataclass(frozen=True)
class Clients:
    """boto3 clients on the mock, one per service the app uses (the runtime's region)."""

    ec2: EC2Client
    elbv2: ElasticLoadBalancingv2Client
    dynamodb: DynamoDBClient
    sqs: SQSClient
    stepfunctions: SFNClient
    events: Any
    ssm: SSMClient
    lambda_: Any  # `lambda` is a keyword; also reachable as clients["lambda"]

    def __getitem__(self, service: str) -> Any:
        return getattr(self, "lambda_" if service == "lambda" else service)


class LocalRuntime:
    """Context manager: deploys a SAM template as a moto CloudFormation stack and runs its
    state machines, with its functions' handlers in this process.

    One runtime at a time per process: moto's state and the hooks are process-wide.
    """

    _running: LocalRuntime | None = None

    def __init__(
        self,
        template_path: str | Path,
        *,
        handlers_root: str | Path | None = None,
        parameters: Mapping[str, str] | None = None,
        stack_name: str = "sg-reconciler-local",
        account_id: str = moto_hooks.ACCOUNT_ID,
        region: str = REGION,
    ) -> None:
        self.deployment = Deployment(
            template_path,
            handlers_root=handlers_root,
            parameters=parameters or {},
            stack_name=stack_name,
            account_id=account_id,
            region=region,
        )
        # botocore retries throttling with real sleeps: a handler's client makes one attempt
        # (AWS_MAX_ATTEMPTS; a client's own retry Config wins), so an injected fault reaches
        # the code under test exactly once per count.
        # moto files every call under MOTO_ACCOUNT_ID: the stack, its functions' calls and
        # its executions all live in this account and region, as one deployment does.
        self._environment = {
            **_FAKE_CREDENTIALS,
            "AWS_DEFAULT_REGION": region,
            "AWS_REGION": region,
            "MOTO_ACCOUNT_ID": account_id,
            "AWS_MAX_ATTEMPTS": "1",
        }
        self.waits = recorder.Recorder()
        self.retry_sleeps = recorder.Recorder()
        self.pacer_sleeps = recorder.Recorder()
        self._mock: Any = None
        self._stopping = False
        self._deliveries = 0  # status-change events being delivered right now
        self._status_targets: list[tuple[str, dict[str, Any]]] = []  # functions, patterns
        self._delivering = threading.Condition()
        self._patches: list[patching.Patch] = []
        self._saved_environment: dict[str, str | None] = {}
        self._clients: Clients | None = None
        self._host: HandlerHost | None = None
        self._invoke_patch: patching.Patch | None = None
        self._deployed = False  # this start created the stack: its executions are ours

    # Lifecycle --------------------------------------------------------------------------

    def __enter__(self) -> LocalRuntime:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> None:
        self._stopping = False
        if LocalRuntime._running is not None:
            raise RuntimeError(
                "another LocalRuntime is running; moto and the hooks are process-wide, so stop it first"
            )
        LocalRuntime._running = self
        self._saved_environment = {key: os.environ.get(key) for key in self._environment}
        os.environ.update(self._environment)
        try:
            self._mock = moto_hooks.new_mock()
            self._mock.start()
            cold_start(self.region)
            self._clients = _make_clients(self.region)
            self._patches = [
                moto_hooks.patch_wait_states(self.waits),
                moto_hooks.patch_retry_sleep(self.retry_sleeps),
                moto_hooks.patch_states_all_as_aws(),
                # The steps' pacer records its waits instead of sleeping, as Retry and Wait
                # do here (`Ec2RateLimit` makes them take simulated time).
                patch_pacer(self.pacer_sleeps),
            ]
            # Speed only (moto's answers unchanged): tag and rule lookups by id, not by
            # scanning the region, so a describe costs the groups it names.
            self._patches += moto_hooks.patch_ec2_lookups()
            self._patches += moto_hooks.patch_ec2_fidelity()
            self._patches.append(moto_hooks.patch_events_envelope())
            self._patches.append(moto_hooks.patch_target_group_pages())
            self._patches.append(moto_hooks.patch_atomic_writes())
            self._deploy()
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        with self._delivering:
            self._stopping = True
            # An execution that just ended may still be delivering its status change: let
            # it finish before the handlers are unloaded.
            self._delivering.wait_for(lambda: self._deliveries == 0, timeout=30)
        try:
            if self._clients is not None:
                self.abort_running()
        finally:
            self._tear_down()

    def _tear_down(self) -> None:
        for patch in reversed(self._patches):
            patch.undo()
        self._patches = []
        if self._host is not None:
            self._host.unload()
            self._host = None
        if self._mock is not None:
            self._mock.stop()
            self._mock = None
        for key, value in self._saved_environment.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        self._saved_environment = {}
        self._clients = None
        self._deployed = False
        if LocalRuntime._running is self:
            LocalRuntime._running = None

    def abort_running(self, timeout: float = 2.0) -> list[str]:
        """Stop every running execution (as `stop` does, so no interpreter thread outlives
        the mock); returns their ARNs.

        moto 5.2.5 fails a StopExecution that comes before the execution's thread set up
        its environment; such a stop is retried until `timeout`, then given up.
        """
        sfn = self.clients.stepfunctions
        aborted: list[str] = []
        deadline = time.monotonic() + timeout
        pause = threading.Event()
        machines = self.deployment.of_type(STATE_MACHINE_TYPE) if self._deployed else {}
        for arn in machines.values():
            running = sfn.list_executions(stateMachineArn=arn, statusFilter="RUNNING")
            for execution in running["executions"]:
                while True:
                    try:
                        sfn.stop_execution(
                            executionArn=execution["executionArn"],
                            error="LocalRuntimeStopped",
                            cause="the local runtime stopped while the execution was running",
                        )
                        aborted.append(execution["executionArn"])
                        break
                    except Exception:
                        if time.monotonic() >= deadline:
                            break
                        pause.wait(0.01)
        return aborted

    @property
    def clients(self) -> Clients:
        if self._clients is None:
            raise RuntimeError("the local runtime is not started")
        return self._clients

    # The stack, read from `deployment` (names stay readable after stop) ----------------

    @property
    def stack_name(self) -> str:
        return self.deployment.stack_name

    @property
    def account_id(self) -> str:
        return self.deployment.account_id

    @property
    def region(self) -> str:
        return self.deployment.region

    @property
    def deployed_template(self) -> dict[str, Any]:
        """What CreateStack (or the last UpdateStack) got."""
        return self.deployment.template

    def physical_name(self, logical_id: str) -> str:
        """A resource's name in the stack (`Deployment.physical_name`)."""
        return self.deployment.physical_name(logical_id)

    def arn(self, logical_id: str) -> str:
        """What `!GetAtt logical_id.Arn` resolves to (`Deployment.arn`)."""
        return self.deployment.arn(logical_id)

    def ref(self, logical_id: str) -> Any:
        """What `!Ref logical_id` resolves to (`Deployment.ref`)."""
        return self.deployment.ref(logical_id)

    @property
    def skipped(self) -> list[SkippedResource]:
        """The resources moto's CloudFormation did not create (`Deployment.skipped`)."""
        return self.deployment.skipped

    @property
    def functions(self) -> list[FunctionSpec]:
        return self._handlers.functions

    @property
    def invocations(self) -> list[Invocation]:
        """Every handler call so far, in order."""
        return self._handlers.invocations

    # Executions -------------------------------------------------------------------------

    def start_execution(
        self, state_machine_logical_id: str, input: Any = None, name: str | None = None
    ) -> str:
        """Start an execution (always named, as moto needs); returns its ARN."""
        stepfunctions = self.clients.stepfunctions  # "not started" before an unknown name
        arn = self.deployment.of_type(STATE_MACHINE_TYPE).get(state_machine_logical_id)
        if arn is None:
            raise KeyError(f"no state machine {state_machine_logical_id!r} in the template")
        document = input if isinstance(input, str) else json.dumps({} if input is None else input)
        response = stepfunctions.start_execution(
            stateMachineArn=arn, name=name or f"local-{uuid.uuid4().hex[:12]}", input=document
        )
        return response["executionArn"]

    def wait_for(
        self, execution_arn: str, timeout: float = 10.0, poll: float = 0.01
    ) -> dict[str, Any]:
        """Poll describe_execution until the execution ends; TimeoutError after `timeout` s."""
        deadline = time.monotonic() + timeout
        pause = threading.Event()
        while True:
            described = dict(
                self.clients.stepfunctions.describe_execution(executionArn=execution_arn)
            )
            if described["status"] in FINISHED:
                return described
            if time.monotonic() >= deadline:
                raise TimeoutError(
                    f"execution {execution_arn} still {described['status']} after {timeout} s"
                )
            pause.wait(poll)

    def run(
        self,
        state_machine_logical_id: str,
        input: Any = None,
        name: str | None = None,
        timeout: float = 10.0,
    ) -> dict[str, Any]:
        """Start an execution and wait for its end; returns describe_execution's answer."""
        return self.wait_for(self.start_execution(state_machine_logical_id, input, name), timeout)

    def events(self, execution_arn: str) -> list[dict[str, Any]]:
        """The execution's full history, every page."""
        return executions.events(self.clients.stepfunctions, execution_arn)

    def history(self, execution_arn: str) -> list[tuple[str, str]]:
        """(state name, event type) per history event, as the console lists them."""
        return executions.history(self.events(execution_arn))

    def transitions(self, execution_arn: str) -> int:
        """State transitions billed for a Standard workflow (`executions.transitions`)."""
        return executions.transitions(self.events(execution_arn))

    def largest_state(self, execution_arn: str) -> tuple[int, str]:
        """The largest state input or output in bytes, and its state (256 KiB is the limit)."""
        return executions.largest_state(self.events(execution_arn))

    def invoke(self, function_logical_id: str, event: Any = None) -> Any:
        """Invoke a function through the Lambda API; raises `FunctionFailed` on an error."""
        response = self.clients.lambda_.invoke(
            FunctionName=self.physical_name(function_logical_id),
            Payload=json.dumps({} if event is None else event).encode("utf-8"),
        )
        payload = json.loads(response["Payload"].read() or b"null")
        if response.get("FunctionError"):
            raise FunctionFailed(str(payload.get("errorType")), str(payload.get("errorMessage")))
        return payload

    @contextlib.contextmanager
    def step_aside(self) -> Iterator[None]:
        """Inside a handler (a listener of `retry_sleeps` or `pacer_sleeps`, say): let the other
        functions run meanwhile, as separate Lambda sandboxes do, then take the turn back. A
        test plays what happens while an invocation backs off: a stop, the janitor, another
        execution from start to end."""
        with self._handlers.step_aside():
            yield

    def before_invoke(self, listener: Callable[[str, Any], None]) -> patching.Patch:
        """Call `listener(logical id, event)` right before each handler runs, until undone."""
        host = self._handlers
        host.before_invoke.append(listener)
        return patching.Patch("before-invoke listener", lambda: host.before_invoke.remove(listener))

    # Hosting the stack: its functions, its status-change rules ------------------------

    @property
    def _handlers(self) -> HandlerHost:
        if self._host is None:
            raise RuntimeError("the local runtime is not started")
        return self._host

    def _deploy(self) -> None:
        """Create the stack with moto's CloudFormation bridged; then host its functions and
        deliver Step Functions' status changes to the rules that want them."""
        self._patches += [
            cfn_workarounds.create_state_machines_in_the_executing_backend(),
            cfn_workarounds.update_state_machines_in_the_executing_backend(),
            cfn_workarounds.ref_layer_versions_as_arns(),
            cfn_workarounds.apply_table_time_to_live(),
            cfn_workarounds.match_events_as_eventbridge(),
            cfn_workarounds.parse_json_templates_as_json(),
        ]
        self.deployment.create()
        self._deployed = True
        self._host_functions()
        self._patches.append(moto_hooks.on_execution_end(self._status_changed))

    def update(
        self, template_path: str | Path, *, parameters: Mapping[str, str] | None = None
    ) -> None:
        """Update the running stack to another template (`Deployment.update`: what keeps its
        value, what moto does not roll back) and run its functions from then on."""
        self.deployment.update(template_path, parameters or {})
        if self._invoke_patch is not None:
            self._invoke_patch.undo()
            self._patches.remove(self._invoke_patch)
        if self._host is not None:
            self._host.unload()
        self._host_functions()

    def _host_functions(self) -> None:
        """The stack's functions as moto created them (name, handler, environment, timeout,
        memory), each run from the directory its CodeUri named."""
        specs: list[FunctionSpec] = []
        code_dirs = self.deployment.code_dirs
        for logical_id, name in self.deployment.of_type(FUNCTION_TYPE).items():
            if logical_id not in code_dirs:
                raise TemplateError(
                    f"{logical_id}: a local function needs a local CodeUri (a directory)"
                )
            configuration = self.clients.lambda_.get_function_configuration(FunctionName=name)
            variables = (configuration.get("Environment") or {}).get("Variables") or {}
            specs.append(
                FunctionSpec(
                    logical_id=logical_id,
                    name=name,
                    arn=str(configuration["FunctionArn"]),
                    code_dir=code_dirs[logical_id],
                    handler=str(configuration["Handler"]),
                    environment=cfn_workarounds.environment_strings(variables),
                    timeout_seconds=int(configuration.get("Timeout", 3)),
                    memory_mb=int(configuration.get("MemorySize", 128)),
                )
            )
        self._host = HandlerHost(specs, self._environment)
        self._invoke_patch = moto_hooks.patch_lambda_invoke(self._host.dispatch)
        self._patches.append(self._invoke_patch)
        rules = list(self.deployment.of_type(RULE_TYPE).values())
        by_name = {spec.name: spec.logical_id for spec in specs}
        self._status_targets = [
            (by_name[function], pattern)
            for function, pattern in cfn_workarounds.lambda_rule_targets(self.clients.events, rules)
            if function in by_name
        ]

    def _status_changed(self, execution: Any) -> None:
        """Deliver Step Functions' "Execution Status Change" event to the functions whose
        rules match it, as EventBridge would (moto sends none, and its EventBridge cannot
        deliver to a Lambda target: `cfn_workarounds.lambda_rule_targets`)."""
        with self._delivering:
            if self._stopping:
                return
            self._deliveries += 1
        try:
            event = status_change_event(execution)
            for logical_id, pattern in self._status_targets:
                if moto_state.matches_event_pattern(pattern, event):
                    try:
                        self.invoke(logical_id, event)
                    except Exception as err:
                        logging.getLogger(__name__).warning(
                            f"{logical_id} failed on {event}: {err}"
                        )
        finally:
            with self._delivering:
                self._deliveries -= 1
                self._delivering.notify_all()


_CLIENTS_REGION: list[str] = []  # the region the library's cached clients were made in


def cold_start(region: str | None = None) -> None:
    """The library's process-wide clients are made for one region: when a runtime (or a
    test) runs in another, they are dropped, as its read buckets always are. Clients of the
    same region are kept (moto serves them whatever the account: MOTO_ACCOUNT_ID is read per
    call): making them again cost about a tenth of a workflow test's time."""
    wiring.forget_read_pacers()
    if region is not None and [region] == _CLIENTS_REGION:
        return
    aws.client.cache_clear()
    aws.read_client.cache_clear()
    _CLIENTS_REGION[:] = [region] if region is not None else []


def patch_pacer(
    sleep: Callable[[float], None], clock: Callable[[], float] | None = None
) -> patching.Patch:
    """Run the steps' pacer (`sg_reconciler.adapters.pacing`) on another sleep and clock.

    The process's read pacer is dropped on the way in and out: its buckets hold times of the
    clock they were filled on, which mean nothing on another (a model clock runs ahead of the
    wall clock, and a bucket filled on it would owe reads for hours on the wall clock)."""

    def patches() -> Iterator[patching.Patch]:
        yield patching.Patch("the read pacers", wiring.forget_read_pacers)  # undone last
        yield patching.replace(pacing, "sleep", sleep)
        if clock is not None:
            yield patching.replace(pacing, "clock", clock)

    patch = patching.together("sg_reconciler.adapters.pacing", patches())
    wiring.forget_read_pacers()
    return patch


def status_change_event(execution: Any) -> dict[str, Any]:
    """The EventBridge event Step Functions sends when an execution's status changes."""
    status = str(
        execution.exec_status.value
        if hasattr(execution.exec_status, "value")
        else execution.exec_status
    )
    return {
        "version": "0",
        "id": str(uuid.uuid4()),
        "detail-type": "Step Functions Execution Status Change",
        "source": "aws.states",
        "account": execution.account_id,
        "region": execution.region_name,
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "resources": [execution.exec_arn],
        "detail": {
            "executionArn": execution.exec_arn,
            "stateMachineArn": execution.state_machine.arn,
            "name": execution.name,
            "status": status,
        },
    }


class FunctionFailed(Exception):
    """A function invoked through `LocalRuntime.invoke` raised; carries Lambda's error type."""

    def __init__(self, error_type: str, message: str) -> None:
        super().__init__(f"{error_type}: {message}")
        self.error_type = error_type
        self.error_message = message


def _make_clients(region: str) -> Clients:
    clients_of: Any = session(region)
    return Clients(**{f.name: clients_of.client(f.name.rstrip("_")) for f in fields(Clients)})
