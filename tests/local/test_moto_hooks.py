"""Each hook into moto internals exists and does its job; a moto upgrade that breaks one fails here.

Every assertion message names the hook and the moto internal, so the fix starts in
`tools/sg_reconciler_tools/local/moto_hooks.py`, not in a puzzling state-machine run.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, cast

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError
from sg_reconciler.core.rules import ingress_rules
from sg_reconciler_tools.local import moto_hooks
from sg_reconciler_tools.local.faults import Fault, FaultInjector
from sg_reconciler_tools.local.moto_hooks import LambdaResult, Recorder

REGION = "eu-west-1"
ROLE_POLICY = json.dumps({"Version": "2012-10-17", "Statement": []})


@dataclass
class Mocked:
    ec2: Any
    lambda_: Any
    sfn: Any
    dynamodb: Any
    role: str
    vpc: str

    def group(self, name: str) -> str:
        return str(
            self.ec2.create_security_group(GroupName=name, Description=name, VpcId=self.vpc)[
                "GroupId"
            ]
        )

    def function(self, name: str) -> str:
        created = self.lambda_.create_function(
            FunctionName=name,
            Runtime="python3.13",
            Role=self.role,
            Handler="app.handler",
            Code={"ZipFile": b"local"},
        )
        return str(created["FunctionArn"])

    def run(self, definition: dict[str, Any], payload: Any = None, timeout: float = 10) -> Any:
        name = f"m{time.monotonic_ns()}"
        machine = self.sfn.create_state_machine(
            name=name, definition=json.dumps(definition), roleArn=self.role
        )["stateMachineArn"]
        execution = self.sfn.start_execution(
            stateMachineArn=machine, name=name, input=json.dumps(payload or {})
        )["executionArn"]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            described = self.sfn.describe_execution(executionArn=execution)
            if described["status"] != "RUNNING":
                return described
            time.sleep(0.01)
        raise AssertionError(f"execution still running after {timeout} s")


_SESSIONS: list[boto3.session.Session] = []


def session() -> boto3.session.Session:
    """One session for the module: parsing service models per test would cost a second each."""
    if not _SESSIONS:
        _SESSIONS.append(
            boto3.session.Session(
                aws_access_key_id="testing", aws_secret_access_key="testing", region_name=REGION
            )
        )
    return _SESSIONS[0]


def client(service: str) -> Any:
    """A client that does not retry, so each injected error reaches the test."""
    config = Config(retries={"total_max_attempts": 1})
    return cast(Any, session()).client(service, config=config)


@pytest.fixture
def mocked() -> Iterator[Mocked]:
    mock = moto_hooks.new_mock()
    mock.start()
    try:
        ec2 = client("ec2")
        role = client("iam").create_role(RoleName="hooks", AssumeRolePolicyDocument=ROLE_POLICY)[
            "Role"
        ]["Arn"]
        yield Mocked(
            ec2=ec2,
            lambda_=client("lambda"),
            sfn=client("stepfunctions"),
            dynamodb=client("dynamodb"),
            role=role,
            vpc=ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"],
        )
    finally:
        mock.stop()


def group_rule(source: str, port: int, description: str | None = None) -> dict[str, Any]:
    pair: dict[str, Any] = {"GroupId": source}
    if description is not None:
        pair["Description"] = description
    return {"IpProtocol": "tcp", "FromPort": port, "ToPort": port, "UserIdGroupPairs": [pair]}


def cidr_rule(cidr: str, port: int) -> dict[str, Any]:
    return {"IpProtocol": "tcp", "FromPort": port, "ToPort": port, "IpRanges": [{"CidrIp": cidr}]}


def describe(mocked: Mocked, group: str) -> list[dict[str, Any]]:
    rules = mocked.ec2.describe_security_group_rules(
        Filters=[{"Name": "group-id", "Values": [group]}]
    )["SecurityGroupRules"]
    return [rule for rule in rules if not rule["IsEgress"]]


# The pinned version and every internal the hooks touch ----------------------------------


def test_moto_is_the_version_the_hooks_were_written_for() -> None:
    installed = importlib.metadata.version("moto")
    assert installed == moto_hooks.MOTO_VERSION, (
        f"moto {installed} is installed but moto_hooks was checked against "
        f"{moto_hooks.MOTO_VERSION}: rerun this module, fix the hooks, then bump MOTO_VERSION"
    )


INTERNALS = [
    ("moto.awslambda_simple.models", "LambdaSimpleBackend", "invoke"),
    (
        "moto.stepfunctions.parser.asl.component.state.wait.wait_function.wait_function",
        "WaitFunction",
        "_wait_interval",
    ),
    ("moto.stepfunctions.parser.asl.component.common.retry.retrier_decl", None, "time"),
    ("moto.ec2.models.security_groups", "SecurityGroupRule", "__eq__"),
    ("moto.ec2.models.security_groups", "SecurityGroupRule", "description"),
    ("moto.ec2.models.security_groups", "SecurityGroupRule", "__init__"),
    ("moto.ec2.responses.security_groups", "SecurityGroups", "authorize_security_group_ingress"),
    (
        "moto.ec2.models.security_groups",
        "SecurityGroupBackend",
        "authorize_security_group_ingress",
    ),
    (
        "moto.ec2.models.security_groups",
        "SecurityGroupBackend",
        "_verify_group_will_respect_rule_count_limit",
    ),
    ("moto.ec2.responses.security_groups", "SecurityGroups", "_process_rules_from_querystring"),
    ("moto.ec2.models", None, "ec2_backends"),
    ("moto.core.utils", None, "camelcase_to_underscores"),
    ("moto.ec2.exceptions", None, "EC2ClientError"),
    ("moto.dynamodb.exceptions", None, "DynamodbException"),
    ("moto.awslambda.exceptions", None, "LambdaClientError"),
    ("moto.core.exceptions", None, "AWSError"),
]


@pytest.mark.parametrize(("module", "owner", "name"), INTERNALS, ids=lambda v: str(v))
def test_every_internal_a_hook_touches_exists(module: str, owner: str | None, name: str) -> None:
    target: Any = importlib.import_module(module)
    if owner is not None:
        assert hasattr(target, owner), f"moto_hooks needs {module}.{owner}, which is gone"
        target = getattr(target, owner)
    assert hasattr(target, name), f"moto_hooks needs {module}.{owner or ''}.{name}, which is gone"


FAULT_TARGETS = [
    ("ec2", "AuthorizeSecurityGroupIngress"),
    ("ec2", "RevokeSecurityGroupIngress"),
    ("ec2", "ModifySecurityGroupRules"),
    ("ec2", "UpdateSecurityGroupRuleDescriptionsIngress"),
    ("ec2", "DescribeSecurityGroupRules"),
    ("ec2", "DescribeSecurityGroups"),
    ("ec2", "CreateTags"),
    ("ec2", "DeleteTags"),
    ("dynamodb", "PutItem"),
    ("dynamodb", "UpdateItem"),
    ("dynamodb", "DeleteItem"),
    ("stepfunctions", "StartExecution"),
    ("lambda", "Invoke"),
]


@pytest.mark.parametrize(("service", "operation"), FAULT_TARGETS, ids=lambda v: str(v))
def test_every_interceptable_operation_has_a_response_method(service: str, operation: str) -> None:
    cls = moto_hooks.response_class(service)
    method = moto_hooks.response_method_name(operation)
    assert callable(getattr(cls, method, None)), (
        f"moto's {cls.__name__} no longer serves {operation} with a method {method}: "
        "intercept_api_call (faults, write listener) cannot wrap it"
    )


# (b) Lambda dispatch ---------------------------------------------------------------------


def test_dispatch_runs_our_code_for_a_name_and_an_arn(mocked: Mocked) -> None:
    arn = mocked.function("echo")
    seen: list[tuple[str, bytes]] = []

    def dispatch(name: str, payload: bytes) -> LambdaResult:
        seen.append((name, payload))
        return LambdaResult(json.dumps({"doubled": json.loads(payload)["n"] * 2}).encode())

    with moto_hooks.patch_lambda_invoke(dispatch):
        by_name = mocked.lambda_.invoke(FunctionName="echo", Payload=b'{"n": 2}')
        by_arn = mocked.lambda_.invoke(FunctionName=arn, Payload=b'{"n": 5}')

    assert json.loads(by_name["Payload"].read()) == {"doubled": 4}, (
        "LambdaSimpleBackend.invoke hook did not return the dispatcher's payload"
    )
    assert json.loads(by_arn["Payload"].read()) == {"doubled": 10}
    assert [name for name, _ in seen] == ["echo", "echo"], "dispatch must get the function name"
    assert "FunctionError" not in by_name


def test_undoing_the_dispatch_restores_moto_echo(mocked: Mocked) -> None:
    mocked.function("echo")
    patch = moto_hooks.patch_lambda_invoke(lambda name, payload: LambdaResult(b'"ours"'))
    patch.undo()
    response = mocked.lambda_.invoke(FunctionName="echo", Payload=b'{"n": 1}')
    assert json.loads(response["Payload"].read()) == {"n": 1}


def test_a_function_error_travels_in_the_header(mocked: Mocked) -> None:
    mocked.function("broken")
    error = {"errorType": "GroupNotFound", "errorMessage": "sg-1 is gone"}

    def dispatch(name: str, payload: bytes) -> LambdaResult:
        return LambdaResult(json.dumps(error).encode(), "Unhandled")

    with moto_hooks.patch_lambda_invoke(dispatch):
        response = mocked.lambda_.invoke(FunctionName="broken", Payload=b"{}")

    assert response.get("FunctionError") == "Unhandled", "x-amz-function-error header lost"
    assert json.loads(response["Payload"].read()) == error


def test_the_error_type_is_the_step_functions_error_that_retry_and_catch_match(
    mocked: Mocked,
) -> None:
    arn = mocked.function("steps")
    calls: list[str] = []

    def dispatch(name: str, payload: bytes) -> LambdaResult:
        calls.append(name)
        if len(calls) < 3:
            error = {"errorType": "Throttled", "errorMessage": "slow down"}
        else:
            error = {"errorType": "GroupNotFound", "errorMessage": "sg-1 is gone"}
        return LambdaResult(json.dumps(error).encode(), "Unhandled")

    definition = {
        "StartAt": "Change the rules",
        "States": {
            "Change the rules": {
                "Type": "Task",
                "Resource": "arn:aws:states:::lambda:invoke",
                "Parameters": {"FunctionName": arn, "Payload": {}},
                "Retry": [{"ErrorEquals": ["Throttled"], "IntervalSeconds": 1, "MaxAttempts": 5}],
                "Catch": [
                    {"ErrorEquals": ["GroupNotFound"], "ResultPath": "$.error", "Next": "Gone"}
                ],
                "End": True,
            },
            "Gone": {"Type": "Pass", "End": True},
        },
    }
    with (
        moto_hooks.patch_lambda_invoke(dispatch),
        moto_hooks.patch_retry_sleep(Recorder()),
    ):
        result = mocked.run(definition)

    assert result["status"] == "SUCCEEDED", f"Catch on the class name did not match: {result}"
    assert json.loads(result["output"])["error"]["Error"] == "GroupNotFound"
    assert len(calls) == 3, "Retry on the class name did not retry Throttled twice"


def test_a_plain_function_arn_resource_is_dispatched_too(mocked: Mocked) -> None:
    arn = mocked.function("plain")

    def dispatch(name: str, payload: bytes) -> LambdaResult:
        return LambdaResult(json.dumps({"seen": json.loads(payload)}).encode())

    definition = {
        "StartAt": "Call",
        "States": {"Call": {"Type": "Task", "Resource": arn, "End": True}},
    }
    with moto_hooks.patch_lambda_invoke(dispatch):
        result = mocked.run(definition, {"x": 1})

    assert result["status"] == "SUCCEEDED", result
    assert json.loads(result["output"]) == {"seen": {"x": 1}}


# (c) No real sleeping ----------------------------------------------------------------------


def test_wait_states_and_retry_backoff_do_not_sleep(mocked: Mocked) -> None:
    arn = mocked.function("flaky")
    attempts: list[int] = []

    def dispatch(name: str, payload: bytes) -> LambdaResult:
        attempts.append(1)
        if len(attempts) <= 2:
            return LambdaResult(b'{"errorType": "Flaky", "errorMessage": "again"}', "Unhandled")
        return LambdaResult(b'{"ok": true}')

    definition = {
        "StartAt": "Settle",
        "States": {
            "Settle": {"Type": "Wait", "Seconds": 3600, "Next": "Try"},
            "Try": {
                "Type": "Task",
                "Resource": arn,
                "Retry": [
                    {
                        "ErrorEquals": ["Flaky"],
                        "IntervalSeconds": 600,
                        "MaxAttempts": 3,
                        "BackoffRate": 2.0,
                    }
                ],
                "End": True,
            },
        },
    }
    waits, sleeps = Recorder(), Recorder()
    started = time.monotonic()
    with (
        moto_hooks.patch_lambda_invoke(dispatch),
        moto_hooks.patch_wait_states(waits),
        moto_hooks.patch_retry_sleep(sleeps),
    ):
        result = mocked.run(definition, timeout=20)

    assert result["status"] == "SUCCEEDED", result
    assert time.monotonic() - started < 15, "Wait or Retry slept for real"
    assert waits.snapshot() == [3600.0], "WaitFunction._wait_interval hook did not record"
    assert sleeps.snapshot() == [600.0, 1200.0], "retrier_decl.time hook did not record backoff"


def test_undoing_the_sleep_hooks_restores_the_real_ones() -> None:
    from moto.stepfunctions.parser.asl.component.common.retry import retrier_decl
    from moto.stepfunctions.parser.asl.component.state.wait.wait_function import wait_function

    original_wait = wait_function.WaitFunction._wait_interval
    with moto_hooks.patch_wait_states(Recorder()), moto_hooks.patch_retry_sleep(Recorder()):
        assert getattr(retrier_decl, "time") is not time  # noqa: B009 - not exported
        assert wait_function.WaitFunction._wait_interval is not original_wait
    assert getattr(retrier_decl, "time") is time  # noqa: B009
    assert wait_function.WaitFunction._wait_interval is original_wait


# (d) EC2 fidelity --------------------------------------------------------------------------


def test_moto_alone_still_accepts_a_description_only_duplicate(mocked: Mocked) -> None:
    """The gap the patch closes; when this fails, moto fixed it and the patch can go."""
    lb, node = mocked.group("lb"), mocked.group("node")
    mocked.ec2.authorize_security_group_ingress(
        GroupId=node, IpPermissions=[group_rule(lb, 80, "first")]
    )
    mocked.ec2.authorize_security_group_ingress(
        GroupId=node, IpPermissions=[group_rule(lb, 80, "second")]
    )
    assert len(describe(mocked, node)) == 2


@pytest.mark.parametrize("second", ["second", None], ids=["other text", "no text"])
def test_a_rule_differing_only_in_description_is_a_duplicate(
    mocked: Mocked, second: str | None
) -> None:
    lb, node = mocked.group("lb"), mocked.group("node")
    with moto_hooks.patch_duplicate_ignores_description():
        mocked.ec2.authorize_security_group_ingress(
            GroupId=node, IpPermissions=[group_rule(lb, 80, "first")]
        )
        with pytest.raises(ClientError) as raised:
            mocked.ec2.authorize_security_group_ingress(
                GroupId=node, IpPermissions=[group_rule(lb, 80, second)]
            )
        mocked.ec2.authorize_security_group_ingress(
            GroupId=node, IpPermissions=[group_rule(lb, 81, "first")]
        )  # another port is another rule
    assert raised.value.response["Error"]["Code"] == "InvalidPermission.Duplicate", (
        "SecurityGroupRule.__eq__ hook did not make a description-only change a duplicate"
    )
    assert sorted(rule["FromPort"] for rule in describe(mocked, node)) == [80, 81]


def test_revoking_by_permission_ignores_the_description(mocked: Mocked) -> None:
    lb, node = mocked.group("lb"), mocked.group("node")
    with moto_hooks.patch_duplicate_ignores_description():
        mocked.ec2.authorize_security_group_ingress(
            GroupId=node, IpPermissions=[group_rule(lb, 80, "first")]
        )
        mocked.ec2.revoke_security_group_ingress(GroupId=node, IpPermissions=[group_rule(lb, 80)])
    assert describe(mocked, node) == []


def test_a_group_rule_shows_its_description(mocked: Mocked) -> None:
    lb, node = mocked.group("lb"), mocked.group("node")
    with moto_hooks.patch_group_rule_description():
        mocked.ec2.authorize_security_group_ingress(
            GroupId=node, IpPermissions=[group_rule(lb, 80, "from the load balancer")]
        )
        (rule,) = describe(mocked, node)
        assert rule.get("Description") == "from the load balancer", (
            "SecurityGroupRule.description hook did not read the referenced group's text"
        )
        mocked.ec2.modify_security_group_rules(
            GroupId=node,
            SecurityGroupRules=[
                {
                    "SecurityGroupRuleId": rule["SecurityGroupRuleId"],
                    "SecurityGroupRule": {
                        "IpProtocol": "tcp",
                        "FromPort": 80,
                        "ToPort": 81,
                        "ReferencedGroupId": lb,
                        "Description": "changed",
                    },
                }
            ],
        )
        (changed,) = describe(mocked, node)
    assert (changed["Description"], changed["ToPort"]) == ("changed", 81)


def test_a_multi_permission_authorize_returns_every_new_rule(mocked: Mocked) -> None:
    node = mocked.group("node")
    permissions = [cidr_rule("10.0.0.0/8", 80), cidr_rule("10.0.0.0/8", 443)]
    with moto_hooks.patch_authorize_returns_all_rules():
        response = mocked.ec2.authorize_security_group_ingress(
            GroupId=node, IpPermissions=permissions
        )
    returned = {rule["SecurityGroupRuleId"] for rule in response["SecurityGroupRules"]}
    stored = {rule["SecurityGroupRuleId"] for rule in describe(mocked, node)}
    assert returned == stored and len(stored) == 2, (
        "SecurityGroups.authorize_security_group_ingress hook returned "
        f"{len(returned)} of {len(stored)} rule ids"
    )


def test_cidr_host_bits_are_masked_as_ec2_does(mocked: Mocked) -> None:
    node = mocked.group("node")
    with moto_hooks.patch_cidr_host_bits_masked():
        mocked.ec2.authorize_security_group_ingress(
            GroupId=node,
            IpPermissions=[
                cidr_rule("10.1.2.3/16", 80),
                {
                    "IpProtocol": "tcp",
                    "FromPort": 80,
                    "ToPort": 80,
                    "Ipv6Ranges": [{"CidrIpv6": "2001:db8::1/32"}],
                },
            ],
        )
        with pytest.raises(ClientError) as raised:
            mocked.ec2.authorize_security_group_ingress(
                GroupId=node, IpPermissions=[cidr_rule("10.1.0.0/16", 80)]
            )
    peers = sorted(rule.get("CidrIpv4") or rule["CidrIpv6"] for rule in describe(mocked, node))
    assert peers == ["10.1.0.0/16", "2001:db8::/32"], (
        "SecurityGroupRule.__init__ hook did not clear the host bits"
    )
    assert raised.value.response["Error"]["Code"] == "InvalidPermission.Duplicate"


def ports(first: int, count: int, peer: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {"IpProtocol": "tcp", "FromPort": p, "ToPort": p, **peer}
        for p in range(first, first + count)
    ]


def test_moto_alone_counts_ipv4_and_ipv6_rules_together(mocked: Mocked) -> None:
    node = mocked.group("node")
    mocked.ec2.authorize_security_group_ingress(
        GroupId=node, IpPermissions=ports(1, 40, {"IpRanges": [{"CidrIp": "10.0.0.0/8"}]})
    )
    with pytest.raises(ClientError, match="RulesPerSecurityGroupLimitExceeded"):
        mocked.ec2.authorize_security_group_ingress(
            GroupId=node,
            IpPermissions=ports(100, 30, {"Ipv6Ranges": [{"CidrIpv6": "2001:db8::/32"}]}),
        )


def test_the_rule_quota_is_counted_per_family_with_prefix_lists_by_max_entries(
    mocked: Mocked,
) -> None:
    node = mocked.group("node")
    prefix_list = mocked.ec2.create_managed_prefix_list(
        PrefixListName="offices", AddressFamily="IPv4", MaxEntries=20
    )["PrefixList"]["PrefixListId"]
    with moto_hooks.patch_rule_quota_as_aws():
        # 40 IPv4 and 30 IPv6 rules fit: each family has its own 60
        mocked.ec2.authorize_security_group_ingress(
            GroupId=node, IpPermissions=ports(1, 40, {"IpRanges": [{"CidrIp": "10.0.0.0/8"}]})
        )
        mocked.ec2.authorize_security_group_ingress(
            GroupId=node,
            IpPermissions=ports(100, 30, {"Ipv6Ranges": [{"CidrIpv6": "2001:db8::/32"}]}),
        )
        # a prefix list of MaxEntries 20 is 20 IPv4 units: 40 + 20 = 60 fits, one more does not
        mocked.ec2.authorize_security_group_ingress(
            GroupId=node,
            IpPermissions=ports(200, 1, {"PrefixListIds": [{"PrefixListId": prefix_list}]}),
        )
        with pytest.raises(ClientError, match="RulesPerSecurityGroupLimitExceeded"):
            mocked.ec2.authorize_security_group_ingress(
                GroupId=node, IpPermissions=ports(300, 1, {"IpRanges": [{"CidrIp": "10.0.0.0/8"}]})
            )
        # and a group reference counts in both families
        with pytest.raises(ClientError, match="RulesPerSecurityGroupLimitExceeded"):
            mocked.ec2.authorize_security_group_ingress(
                GroupId=node,
                IpPermissions=ports(400, 1, {"UserIdGroupPairs": [{"GroupId": node}]}),
            )
    assert len(describe(mocked, node)) == 71, "a refused authorize must leave no rule behind"


def test_eventbridge_delivers_the_account_to_an_sqs_target(mocked: Mocked) -> None:
    sqs, events = client("sqs"), client("events")
    queue = sqs.create_queue(QueueName="hooks-events")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    events.put_rule(Name="hooks", EventPattern=json.dumps({"source": ["demo"]}))
    events.put_targets(Rule="hooks", Targets=[{"Id": "q", "Arn": arn}])

    def deliver() -> dict[str, Any]:
        events.put_events(Entries=[{"Source": "demo", "DetailType": "t", "Detail": "{}"}])
        (message,) = sqs.receive_message(QueueUrl=queue)["Messages"]
        sqs.delete_message(QueueUrl=queue, ReceiptHandle=message["ReceiptHandle"])
        body: dict[str, Any] = json.loads(message["Body"])
        return body

    assert "account" not in deliver(), "moto now sends the account: drop patch_events_envelope"
    with moto_hooks.patch_events_envelope():
        assert deliver()["account"] == "123456789012"


def test_backend_reading_matches_describe(mocked: Mocked) -> None:
    lb, node = mocked.group("lb"), mocked.group("node")
    mocked.ec2.authorize_security_group_ingress(
        GroupId=node,
        IpPermissions=[
            group_rule(lb, 80, "lb"),
            cidr_rule("10.1.0.0/16", 443),
            {
                "IpProtocol": "-1",
                "Ipv6Ranges": [{"CidrIpv6": "2001:db8::/32", "Description": "v6"}],
            },
        ],
        TagSpecifications=[
            {"ResourceType": "security-group-rule", "Tags": [{"Key": "team", "Value": "a"}]}
        ],
    )
    via_api = ingress_rules(describe(mocked, node), "api")
    direct = ingress_rules(
        moto_hooks.security_group_rule_docs(moto_hooks.ec2_backend(REGION), [node]), "backend"
    )
    assert sorted(direct, key=str) == sorted(via_api, key=str)
    assert all(rule.tag("team") == "a" for rule in direct)


# (e) Faults and (f) the write listener --------------------------------------------------------


def test_a_fault_fires_n_times_then_stops(mocked: Mocked) -> None:
    node = mocked.group("node")
    fault = Fault("ec2", "AuthorizeSecurityGroupIngress", "RequestLimitExceeded", count=2)
    codes: list[str] = []
    with FaultInjector(fault) as injector:
        for port in (80, 81, 82):
            try:
                mocked.ec2.authorize_security_group_ingress(
                    GroupId=node, IpPermissions=[cidr_rule("10.0.0.0/8", port)]
                )
                codes.append("ok")
            except ClientError as error:
                codes.append(error.response["Error"]["Code"])
    assert codes == ["RequestLimitExceeded", "RequestLimitExceeded", "ok"]
    assert [rule["FromPort"] for rule in describe(mocked, node)] == [82], "a before-fault applied"
    assert [fired.call_number for fired in injector.fired] == [1, 2]


def test_an_after_fault_applies_the_write_and_raises(mocked: Mocked) -> None:
    node = mocked.group("node")
    fault = Fault("ec2", "AuthorizeSecurityGroupIngress", "InternalError", mode="after")
    with FaultInjector(fault), pytest.raises(ClientError) as raised:
        mocked.ec2.authorize_security_group_ingress(
            GroupId=node, IpPermissions=[cidr_rule("10.0.0.0/8", 80)]
        )
    assert raised.value.response["Error"]["Code"] == "InternalError"
    assert [rule["FromPort"] for rule in describe(mocked, node)] == [80], (
        "an after-fault must leave the write applied"
    )


def test_faults_reach_the_other_services(mocked: Mocked) -> None:
    mocked.dynamodb.create_table(
        TableName="locks",
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    mocked.function("fn")
    machine = mocked.sfn.create_state_machine(
        name="m",
        definition=json.dumps({"StartAt": "P", "States": {"P": {"Type": "Pass", "End": True}}}),
        roleArn=mocked.role,
    )["stateMachineArn"]
    faults = [
        Fault("dynamodb", "PutItem", "ProvisionedThroughputExceededException"),
        Fault("dynamodb", "UpdateItem", "ConditionalCheckFailedException", mode="after"),
        Fault("stepfunctions", "StartExecution", "ExecutionLimitExceeded"),
        Fault("lambda", "Invoke", "TooManyRequestsException"),
    ]
    calls: dict[str, Callable[[], object]] = {
        "PutItem": lambda: mocked.dynamodb.put_item(TableName="locks", Item={"pk": {"S": "a"}}),
        "UpdateItem": lambda: mocked.dynamodb.update_item(
            TableName="locks",
            Key={"pk": {"S": "b"}},
            UpdateExpression="SET v = :v",
            ExpressionAttributeValues={":v": {"S": "x"}},
        ),
        "StartExecution": lambda: mocked.sfn.start_execution(
            stateMachineArn=machine, name="e", input="{}"
        ),
        "Invoke": lambda: mocked.lambda_.invoke(FunctionName="fn", Payload=b"{}"),
    }
    codes = {}
    with FaultInjector(*faults):
        for operation, call in calls.items():
            with pytest.raises(ClientError) as raised:
                call()
            codes[operation] = raised.value.response["Error"]["Code"]
    assert codes == {
        "PutItem": "ProvisionedThroughputExceededException",
        "UpdateItem": "ConditionalCheckFailedException",
        "StartExecution": "ExecutionLimitExceeded",
        "Invoke": "TooManyRequestsException",
    }
    items = mocked.dynamodb.scan(TableName="locks")["Items"]
    assert items == [{"pk": {"S": "b"}, "v": {"S": "x"}}], "only the after-fault write applies"


def test_an_ec2_fault_reaches_the_interpreters_aws_sdk_task(mocked: Mocked) -> None:
    node = mocked.group("node")
    definition = {
        "StartAt": "Authorize",
        "States": {
            "Authorize": {
                "Type": "Task",
                "Resource": "arn:aws:states:::aws-sdk:ec2:authorizeSecurityGroupIngress",
                "Parameters": {"GroupId": node, "IpPermissions": [cidr_rule("10.0.0.0/8", 80)]},
                "End": True,
            }
        },
    }
    fault = Fault("ec2", "AuthorizeSecurityGroupIngress", "RequestLimitExceeded")
    with FaultInjector(fault) as injector:
        result = mocked.run(definition)
    assert result["status"] == "FAILED"
    # moto reports every EC2 failure of an aws-sdk task under one name, the code only in the
    # cause: why the app's EC2 writes are Lambda steps with typed errors (docs/architecture.md).
    assert result["error"] == "ec2.ec2Exception"
    assert len(injector.fired) == 1
    assert describe(mocked, node) == []


def test_the_write_listener_sees_applied_and_failed_writes_but_not_before_faults(
    mocked: Mocked,
) -> None:
    node = mocked.group("node")
    heard: list[tuple[str, str | None]] = []

    def listener(operation: str, error: BaseException | None) -> None:
        heard.append((operation, None if error is None else getattr(error, "code", "?")))

    def authorize(port: int) -> None:
        with contextlib.suppress(ClientError):
            mocked.ec2.authorize_security_group_ingress(
                GroupId=node, IpPermissions=[cidr_rule("10.0.0.0/8", port)]
            )

    with moto_hooks.on_ec2_write(listener):
        authorize(80)
        authorize(80)  # duplicate: reaches moto and fails there
        with FaultInjector(
            Fault("ec2", "AuthorizeSecurityGroupIngress", "RequestLimitExceeded"),
        ):
            authorize(81)  # never reaches moto
        with FaultInjector(
            Fault("ec2", "AuthorizeSecurityGroupIngress", "InternalError", mode="after")
        ):
            authorize(82)
        mocked.ec2.describe_security_group_rules()  # a read is not a write
    authorize(83)  # after the listener is removed
    assert heard == [
        ("AuthorizeSecurityGroupIngress", None),
        ("AuthorizeSecurityGroupIngress", "InvalidPermission.Duplicate"),
        ("AuthorizeSecurityGroupIngress", None),
    ]


def test_interceptors_nest_and_unwind_in_any_order() -> None:
    from moto.ec2.responses import EC2Response

    name = "authorize_security_group_ingress"
    original = getattr(EC2Response, name)
    first = moto_hooks.on_ec2_write(lambda operation, error: None)
    second = moto_hooks.intercept_api_call(
        "ec2", "AuthorizeSecurityGroupIngress", lambda s, o, proceed: proceed()
    )
    assert getattr(EC2Response, name) is not original
    first.undo()  # not the last installed: the other interceptor stays
    assert getattr(EC2Response, name) is not original
    second.undo()
    assert getattr(EC2Response, name) is original
    assert name not in EC2Response.__dict__, "the inherited method must be inherited again"
