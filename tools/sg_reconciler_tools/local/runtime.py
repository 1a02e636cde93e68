"""The whole app on moto in this process: template resources, real ASL, our handlers.

`LocalRuntime(template_path)` starts moto with the hooks of `moto_hooks`, deploys the
template's tables, queues, functions, state machines and event rules, and runs executions
of the real state machine with Lambda tasks dispatched to our handlers. Wait states and
Retry backoff do not sleep (the requested seconds are recorded in `waits` and
`retry_sleeps`); executions run in moto's background thread, so `wait_for` polls with a
timeout. Dev tooling only: nothing here is deployed.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

import boto3
from sg_reconciler.adapters import pacing
from sg_reconciler.core.rules import DEFAULT_OWNER

from sg_reconciler_tools.local import moto_hooks
from sg_reconciler_tools.local.functions import FunctionSpec, HandlerHost, Invocation
from sg_reconciler_tools.local.template import Template, TemplateError, load_yaml

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_ec2 import EC2Client
    from mypy_boto3_elbv2 import ElasticLoadBalancingv2Client
    from mypy_boto3_sqs import SQSClient
    from mypy_boto3_ssm import SSMClient
    from mypy_boto3_stepfunctions import SFNClient

REGION = "eu-west-1"
FUNCTION_TYPES = ("AWS::Serverless::Function",)
TABLE_TYPES = ("AWS::DynamoDB::Table", "AWS::Serverless::SimpleTable")
QUEUE_TYPES = ("AWS::SQS::Queue",)
STATE_MACHINE_TYPES = ("AWS::Serverless::StateMachine", "AWS::StepFunctions::StateMachine")
RULE_TYPES = ("AWS::Events::Rule",)
PARAMETER_TYPES = ("AWS::SSM::Parameter",)
FINISHED = frozenset({"SUCCEEDED", "FAILED", "TIMED_OUT", "ABORTED"})
_EXECUTION_EVENTS = ("Execution",)
_PLACEHOLDER = re.compile(r"\$\{[A-Za-z0-9_]+\}")
_QUEUE_ATTRIBUTES = (
    "DelaySeconds",
    "MaximumMessageSize",
    "MessageRetentionPeriod",
    "ReceiveMessageWaitTimeSeconds",
    "VisibilityTimeout",
    "FifoQueue",
    "ContentBasedDeduplication",
    "KmsMasterKeyId",
    "SqsManagedSseEnabled",
    "RedrivePolicy",
    "RedriveAllowPolicy",
)
_FAKE_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": REGION,
    "AWS_REGION": REGION,
}


@dataclass(frozen=True)
class Clients:
    """boto3 clients on the mock, one per service the app uses (region eu-west-1)."""

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


UNPACED_WRITES_PER_SECOND = 1000


class LocalRuntime:
    """Context manager: deploys a SAM template into moto and runs its state machines.

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
        ec2_fidelity: bool = True,
        sdk_max_attempts: int | None = 1,
    ) -> None:
        # The stack's owner name is the library default unless a test asks for another
        # (the template derives it from the stack name when OwnerName is empty). Writes are
        # not paced unless a test asks (with `Ec2RateLimit`): moto has no rate limit, and
        # the pacer would wait in real time.
        given = {
            "OwnerName": DEFAULT_OWNER,
            "WritesPerSecond": str(UNPACED_WRITES_PER_SECOND),
            **(parameters or {}),
        }
        self.template = Template.load(
            template_path, stack_name=stack_name, region=REGION, parameters=given
        )
        self.handlers_root = Path(handlers_root) if handlers_root else self.template.directory
        self.ec2_fidelity = ec2_fidelity
        # botocore retries throttling with real sleeps; by default a handler's client makes
        # one attempt, so an injected fault reaches the code under test exactly once per
        # count. None keeps botocore's default (a client's own retry Config always wins).
        self._environment = dict(_FAKE_CREDENTIALS)
        if sdk_max_attempts is not None:
            self._environment["AWS_MAX_ATTEMPTS"] = str(sdk_max_attempts)
        self.waits = moto_hooks.Recorder()
        self.retry_sleeps = moto_hooks.Recorder()
        self.pacer_sleeps = moto_hooks.Recorder()
        self._mock: Any = None
        self._stopping = False
        self._deliveries = 0  # status-change events being delivered right now
        self._status_targets: list[tuple[str, dict[str, Any]]] = []  # functions, patterns
        self._delivering = threading.Condition()
        self._patches: list[moto_hooks.Patch] = []
        self._saved_environment: dict[str, str | None] = {}
        self._clients: Clients | None = None
        self._host: HandlerHost | None = None
        self._state_machine_arns: dict[str, str] = {}
        self._role = ""

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
        self._mock = moto_hooks.new_mock()
        self._mock.start()
        try:
            self._clients = _make_clients()
            self._patches = [
                moto_hooks.patch_wait_states(self.waits),
                moto_hooks.patch_retry_sleep(self.retry_sleeps),
                # The steps' pacer records its waits instead of sleeping, as Retry and Wait
                # do here (`Ec2RateLimit` makes them take simulated time).
                patch_pacer(self.pacer_sleeps),
            ]
            if self.ec2_fidelity:
                self._patches += moto_hooks.patch_ec2_fidelity()
            self._patches.append(moto_hooks.patch_events_envelope())
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
        self._state_machine_arns = {}
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
        for arn in self._state_machine_arns.values():
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

    # Names ------------------------------------------------------------------------------

    def physical_name(self, logical_id: str) -> str:
        return self.template.physical_name(logical_id)

    def arn(self, logical_id: str) -> str:
        return self._state_machine_arns.get(logical_id) or self.template.arn(logical_id)

    def ref(self, logical_id: str) -> Any:
        """What `!Ref logical_id` resolves to locally (a queue's URL, a function's name...)."""
        return self.template.ref(logical_id)

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
        arn = self._state_machine_arns.get(state_machine_logical_id)
        if arn is None:
            raise KeyError(f"no state machine {state_machine_logical_id!r} in the template")
        document = input if isinstance(input, str) else json.dumps({} if input is None else input)
        response = self.clients.stepfunctions.start_execution(
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
        paginator = self.clients.stepfunctions.get_paginator("get_execution_history")
        found: list[dict[str, Any]] = []
        for page in paginator.paginate(executionArn=execution_arn):
            found.extend(dict(event) for event in page["events"])
        return found

    def history(self, execution_arn: str) -> list[tuple[str, str]]:
        """(state name, event type) per history event, as the console lists them.

        Execution-level events have no state (""); task and Map events carry the state
        they belong to, found through `previousEventId`.
        """
        events = self.events(execution_arn)
        by_id = {event["id"]: event for event in events}
        return [(_state_of(event, by_id), str(event["type"])) for event in events]

    def transitions(self, execution_arn: str) -> int:
        """State transitions billed for a Standard workflow: one per state entered."""
        return sum(
            1 for event in self.events(execution_arn) if event["type"].endswith("StateEntered")
        )

    def largest_state(self, execution_arn: str) -> tuple[int, str]:
        """The largest input or output any state of the execution carried, in bytes (as
        Step Functions counts against its 256 KiB limit), and the state that carried it."""
        events = self.events(execution_arn)
        by_id = {event["id"]: event for event in events}
        largest = (0, "")
        for event in events:
            for key, details in event.items():
                if not key.endswith("EventDetails") or not isinstance(details, dict):
                    continue
                for field in ("input", "output"):
                    data = details.get(field)
                    if isinstance(data, str) and len(data.encode()) > largest[0]:
                        largest = (len(data.encode()), _state_of(event, by_id) or event["type"])
        return largest

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

    def before_invoke(self, listener: Callable[[str, Any], None]) -> moto_hooks.Patch:
        """Call `listener(logical id, event)` right before each handler runs, until undone."""
        host = self._handlers
        host.before_invoke.append(listener)
        return moto_hooks.Patch(
            "before-invoke listener", lambda: host.before_invoke.remove(listener)
        )

    # Deployment -------------------------------------------------------------------------

    @property
    def _handlers(self) -> HandlerHost:
        if self._host is None:
            raise RuntimeError("the local runtime is not started")
        return self._host

    def _deploy(self) -> None:
        self._role = _create_local_role()
        self.template.queue_url = self._queue_url
        for logical_id in self.template.of_type(*TABLE_TYPES):
            self._create_table(logical_id)
        for logical_id in self.template.of_type(*QUEUE_TYPES):
            self._create_queue(logical_id)
        for logical_id in self.template.of_type(*PARAMETER_TYPES):
            self._create_parameter(logical_id)
        self._create_functions()
        for logical_id in self.template.of_type(*STATE_MACHINE_TYPES):
            self._create_state_machine(logical_id)
        for logical_id in self.template.of_type(*RULE_TYPES):
            self._create_rule(logical_id)
        self._status_targets = self._function_rules()
        self._patches.append(moto_hooks.on_execution_end(self._status_changed))

    def _status_changed(self, execution: Any) -> None:
        """Deliver Step Functions' "Execution Status Change" event to the functions whose
        EventBridgeRule events match it, as EventBridge would (moto sends none)."""
        if self._stopping:
            return
        event = status_change_event(execution)
        for logical_id, pattern in self._function_rules():
            if moto_hooks.matches_event_pattern(pattern, event):
                try:
                    self.invoke(logical_id, event)
                except Exception as err:
                    logging.getLogger(__name__).warning(f"{logical_id} failed on {event}: {err}")

    def _function_rules(self) -> list[tuple[str, dict[str, Any]]]:
        rules = []
        for logical_id in self.template.of_type(*FUNCTION_TYPES):
            events = self.template.properties(logical_id).get("Events") or {}
            for spec in events.values():
                if spec.get("Type") in ("EventBridgeRule", "CloudWatchEvent"):
                    pattern = self.template.resolve((spec.get("Properties") or {}).get("Pattern"))
                    rules.append((logical_id, pattern))
        return rules

    def _queue_url(self, name: str) -> str:
        return self.clients.sqs.get_queue_url(QueueName=name)["QueueUrl"]

    def _create_table(self, logical_id: str) -> None:
        properties = self.template.resolve(self.template.properties(logical_id))
        name = self.physical_name(logical_id)
        if self.template.type_of(logical_id) == "AWS::Serverless::SimpleTable":
            key = properties.get("PrimaryKey") or {"Name": "id", "Type": "String"}
            kind = {"String": "S", "Number": "N", "Binary": "B"}[key.get("Type", "String")]
            properties = {
                "KeySchema": [{"AttributeName": key["Name"], "KeyType": "HASH"}],
                "AttributeDefinitions": [{"AttributeName": key["Name"], "AttributeType": kind}],
            }
        request: dict[str, Any] = {
            "TableName": name,
            "KeySchema": properties["KeySchema"],
            "AttributeDefinitions": properties["AttributeDefinitions"],
            "BillingMode": properties.get("BillingMode", "PAY_PER_REQUEST"),
        }
        for optional in (
            "ProvisionedThroughput",
            "GlobalSecondaryIndexes",
            "LocalSecondaryIndexes",
        ):
            if optional in properties:
                request[optional] = properties[optional]
        if request["BillingMode"] == "PROVISIONED" and "ProvisionedThroughput" not in request:
            request["ProvisionedThroughput"] = {"ReadCapacityUnits": 5, "WriteCapacityUnits": 5}
        self.clients.dynamodb.create_table(**request)
        ttl = properties.get("TimeToLiveSpecification")
        if ttl and str(ttl.get("Enabled")).lower() == "true":
            self.clients.dynamodb.update_time_to_live(
                TableName=name,
                TimeToLiveSpecification={"Enabled": True, "AttributeName": ttl["AttributeName"]},
            )

    def _create_queue(self, logical_id: str) -> None:
        properties = self.template.resolve(self.template.properties(logical_id))
        attributes: dict[str, str] = {}
        for key in _QUEUE_ATTRIBUTES:
            if key in properties:
                value = properties[key]
                if isinstance(value, Mapping):
                    attributes[key] = json.dumps(value)
                elif isinstance(value, bool):
                    attributes[key] = "true" if value else "false"
                else:
                    attributes[key] = str(value)
        self.clients.sqs.create_queue(
            QueueName=self.physical_name(logical_id),
            Attributes=attributes,  # type: ignore[arg-type]
        )

    def _create_parameter(self, logical_id: str) -> None:
        properties = self.template.resolve(self.template.properties(logical_id))
        self.clients.ssm.put_parameter(
            Name=self.physical_name(logical_id),
            Type=properties.get("Type", "String"),
            Value=_env_value(properties["Value"]),
        )

    def _create_functions(self) -> None:
        role = self._role
        specs: list[FunctionSpec] = []
        for logical_id in self.template.of_type(*FUNCTION_TYPES):
            properties = self.template.properties(logical_id)
            code_uri = self.template.resolve(properties.get("CodeUri"))
            handler = self.template.resolve(properties.get("Handler"))
            if not isinstance(code_uri, str) or not isinstance(handler, str):
                raise TemplateError(
                    f"{logical_id}: a local function needs a CodeUri path and a Handler"
                )
            variables = (properties.get("Environment") or {}).get("Variables") or {}
            environment = {k: _env_value(v) for k, v in self.template.resolve(variables).items()}
            name = self.physical_name(logical_id)
            response = self.clients.lambda_.create_function(
                FunctionName=name,
                Runtime=str(properties.get("Runtime", "python3.13")),
                Role=role,
                Handler=handler,
                Code={"ZipFile": b"local"},
                Timeout=int(properties.get("Timeout", 3)),
                MemorySize=int(properties.get("MemorySize", 128)),
                Environment={"Variables": environment},
            )
            specs.append(
                FunctionSpec(
                    logical_id=logical_id,
                    name=name,
                    arn=response["FunctionArn"],
                    code_dir=(self.handlers_root / code_uri).resolve(),
                    handler=handler,
                    environment=environment,
                    timeout_seconds=int(properties.get("Timeout", 3)),
                    memory_mb=int(properties.get("MemorySize", 128)),
                )
            )
        self._host = HandlerHost(specs, self._environment)
        self._patches.append(moto_hooks.patch_lambda_invoke(self._host.dispatch))

    def _create_state_machine(self, logical_id: str) -> None:
        properties = self.template.properties(logical_id)
        definition = self._definition(logical_id, properties)
        kind = "AWS::Serverless::StateMachine"
        machine_type = properties.get(
            "Type" if self.template.type_of(logical_id) == kind else "StateMachineType"
        )
        response = self.clients.stepfunctions.create_state_machine(
            name=self.physical_name(logical_id),
            definition=json.dumps(definition),
            roleArn=self._role,
            type=str(self.template.resolve(machine_type) or "STANDARD"),  # type: ignore[arg-type]
        )
        self._state_machine_arns[logical_id] = response["stateMachineArn"]
        if response["stateMachineArn"] != self.template.arn(logical_id):
            raise TemplateError(f"{logical_id}: moto named it {response['stateMachineArn']}")

    def _definition(self, logical_id: str, properties: Mapping[str, Any]) -> Any:
        substitutions = {
            str(key): str(value)
            for key, value in (
                self.template.resolve(properties.get("DefinitionSubstitutions")) or {}
            ).items()
        }
        if "DefinitionUri" in properties:
            uri = self.template.resolve(properties["DefinitionUri"])
            if not isinstance(uri, str):
                raise TemplateError(f"{logical_id}: DefinitionUri must be a local path here")
            file = self.template.directory / uri
            # As CloudFormation does: substitute in the text, then parse (so a `${Key}` may
            # stand for a number outside quotes).
            text = _substitute(file.read_text(encoding="utf-8"), substitutions, logical_id)
            return json.loads(text) if file.suffix == ".json" else load_yaml(text)
        if "Definition" in properties:
            definition = properties["Definition"]
        elif "DefinitionString" in properties:
            definition = json.loads(str(self.template.resolve(properties["DefinitionString"])))
        else:
            raise TemplateError(f"{logical_id}: no Definition, DefinitionUri or DefinitionString")
        return _substitute(definition, substitutions, logical_id)

    def _create_rule(self, logical_id: str) -> None:
        properties = self.template.resolve(self.template.properties(logical_id))
        name = self.physical_name(logical_id)
        request: dict[str, Any] = {"Name": name, "State": properties.get("State", "ENABLED")}
        if "EventPattern" in properties:
            request["EventPattern"] = json.dumps(properties["EventPattern"])
        if "ScheduleExpression" in properties:
            request["ScheduleExpression"] = properties["ScheduleExpression"]
        if "EventBusName" in properties:
            request["EventBusName"] = properties["EventBusName"]
        self.clients.events.put_rule(**request)
        targets = list(properties.get("Targets") or [])
        if targets:
            bus = {"EventBusName": request["EventBusName"]} if "EventBusName" in request else {}
            self.clients.events.put_targets(Rule=name, Targets=targets, **bus)


def patch_pacer(
    sleep: Callable[[float], None], clock: Callable[[], float] | None = None
) -> moto_hooks.Patch:
    """Run the steps' pacer (`sg_reconciler.adapters.pacing`) on another sleep and clock."""
    saved = pacing.clock, pacing.sleep
    pacing.sleep = sleep
    if clock is not None:
        pacing.clock = clock

    def undo() -> None:
        pacing.clock, pacing.sleep = saved

    return moto_hooks.Patch("sg_reconciler.adapters.pacing", undo)


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


_SESSION: boto3.session.Session | None = None


def _session() -> boto3.session.Session:
    """One boto3 session for every runtime: it caches the parsed service models (seconds)."""
    global _SESSION
    if _SESSION is None:
        _SESSION = boto3.session.Session(
            aws_access_key_id="testing", aws_secret_access_key="testing", region_name=REGION
        )
    return _SESSION


def _make_clients() -> Clients:
    session = _session()
    return Clients(
        ec2=session.client("ec2"),
        elbv2=session.client("elbv2"),
        dynamodb=session.client("dynamodb"),
        sqs=session.client("sqs"),
        stepfunctions=session.client("stepfunctions"),
        events=session.client("events"),
        ssm=session.client("ssm"),
        lambda_=session.client("lambda"),
    )


def _create_local_role() -> str:
    """One IAM role for every function and state machine (moto's Lambda checks it exists)."""
    document = {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Principal": {"Service": ["lambda.amazonaws.com", "states.amazonaws.com"]},
                "Action": "sts:AssumeRole",
            }
        ],
    }
    created = (
        _session()
        .client("iam")
        .create_role(RoleName="sg-reconciler-local", AssumeRolePolicyDocument=json.dumps(document))
    )
    return str(created["Role"]["Arn"])


def _env_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list)):
        return json.dumps(value)
    return str(value)


def _substitute(definition: Any, substitutions: Mapping[str, str], logical_id: str) -> Any:
    """Apply DefinitionSubstitutions to every string; a `${Name}` left over is an error."""

    def walk(value: Any) -> Any:
        if isinstance(value, str):
            for key, replacement in substitutions.items():
                value = value.replace("${" + key + "}", replacement)
            leftover = _PLACEHOLDER.search(value)
            if leftover:
                raise TemplateError(
                    f"{logical_id}: no DefinitionSubstitutions entry for {leftover.group(0)}"
                )
            return value
        if isinstance(value, list):
            return [walk(item) for item in value]
        if isinstance(value, Mapping):
            return {walk(key): walk(item) for key, item in value.items()}
        return value

    return walk(definition)


def _state_of(event: Mapping[str, Any], by_id: Mapping[int, Mapping[str, Any]]) -> str:
    if str(event["type"]).startswith(_EXECUTION_EVENTS):
        return ""
    seen: set[int] = set()
    current: Mapping[str, Any] | None = event
    while current is not None and current["id"] not in seen:
        seen.add(current["id"])
        for key, details in current.items():
            if key.endswith("EventDetails") and isinstance(details, Mapping) and "name" in details:
                return str(details["name"])
        current = by_id.get(current.get("previousEventId", 0))
    return ""
