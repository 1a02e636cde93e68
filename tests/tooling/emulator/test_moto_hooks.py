"""Each hook into moto internals exists and does its job; a moto upgrade that breaks one fails here.

Every assertion message names the hook and the moto internal, so the fix starts in
`tools/sg_reconciler_tools/local/moto_hooks.py`, not in a puzzling state-machine run.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
import ipaddress
import itertools
import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, cast

import pytest
from botocore.config import Config
from botocore.exceptions import ClientError
from sg_reconciler.core.rules import ingress_rules
from sg_reconciler_tools.local import interception, moto_hooks, moto_state, patching
from sg_reconciler_tools.local.deployment import session
from sg_reconciler_tools.local.faults import Fault, FaultInjector
from sg_reconciler_tools.local.moto_hooks import LambdaResult
from sg_reconciler_tools.local.recorder import Recorder

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


def client(service: str) -> Any:
    """A client that does not retry, so each injected error reaches the test (on the runtime's
    cached session: parsing service models per test would cost a second each)."""
    config = Config(retries={"total_max_attempts": 1})
    return cast(Any, session(REGION)).client(service, config=config)


@pytest.fixture
def mocked() -> Iterator[Mocked]:
    with moto_hooks.new_mock():
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


# The pinned version and the dispatcher ----------------------------------


def test_moto_is_the_version_the_hooks_were_written_for() -> None:
    installed = importlib.metadata.version("moto")
    assert installed == patching.MOTO_VERSION, (
        f"moto {installed} is installed but moto_hooks was checked against "
        f"{patching.MOTO_VERSION}: rerun this module, fix the hooks, then bump patching.MOTO_VERSION"
    )


@pytest.mark.parametrize("service", sorted(interception.SERVICES))
def test_each_intercepted_service_is_named_as_in_botocores_events(service: str) -> None:
    import botocore.session

    service_id, protocol = interception.SERVICES[service]
    model = botocore.session.get_session().get_service_model(service)
    assert (model.service_id.hyphenize(), model.protocol) == (service_id, protocol), (
        "intercept_api_call reads the service from botocore's event name and writes errors "
        "in its protocol"
    )


def test_the_dispatcher_stands_where_motos_stubber_stood() -> None:
    """moto alone registers its stubber in botocore's handlers with nothing around it; when
    moto runs handlers around its answers, `install_dispatcher` can go."""
    from botocore.handlers import BUILTIN_HANDLERS
    from moto.core.models import botocore_stubber

    handlers = [entry[1] for entry in BUILTIN_HANDLERS]
    assert interception._dispatch in handlers and botocore_stubber not in handlers


# Lambda dispatch ------------------------------------------------------------------------


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
    """moto alone answers Invoke with the payload it got (its Lambda needs Docker to run
    code); when it runs our handlers, `patch_lambda_invoke` can go.
    """
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


# No real sleeping ----------------------------------------------------------------------


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
    """moto alone sleeps for a Wait state and for Retry backoff; when it has a switch,
    `patch_wait_states` and `patch_retry_sleep` can go.
    """
    from moto.stepfunctions.parser.asl.component.common.retry import retrier_decl
    from moto.stepfunctions.parser.asl.component.state.wait.wait_function import wait_function

    original_wait = wait_function.WaitFunction._wait_interval
    with moto_hooks.patch_wait_states(Recorder()), moto_hooks.patch_retry_sleep(Recorder()):
        assert getattr(retrier_decl, "time") is not time  # noqa: B009 - not exported
        assert wait_function.WaitFunction._wait_interval is not original_wait
    assert getattr(retrier_decl, "time") is time  # noqa: B009
    assert wait_function.WaitFunction._wait_interval is original_wait


def runtime_error_caught_by(error_equals: list[str]) -> dict[str, Any]:
    """A Task whose Parameters name a path the input lacks: States.Runtime, as on AWS."""
    return {
        "StartAt": "Read a missing path",
        "States": {
            "Read a missing path": {
                "Type": "Task",
                "Resource": "arn:aws:states:::aws-sdk:dynamodb:listTables",
                "Parameters": {"Limit.$": "$.missing.path"},
                "Retry": [{"ErrorEquals": error_equals, "MaxAttempts": 2}],
                "Catch": [{"ErrorEquals": error_equals, "Next": "Clean up"}],
                "End": True,
            },
            "Clean up": {"Type": "Pass", "End": True},
        },
    }


def test_states_all_does_not_catch_a_runtime_error_as_on_aws(mocked: Mocked) -> None:
    # Given moto alone: its States.ALL catches States.Runtime (AWS's does not)
    """moto alone lets States.ALL catch States.Runtime; when it fails at the state as
    AWS does, `patch_states_all_as_aws` can go.
    """
    result = mocked.run(runtime_error_caught_by(["States.ALL"]))
    assert result["status"] == "SUCCEEDED", "moto now fails at the state: drop the hook?"
    # When the hook is on, the execution ends at the state, as on AWS, with no retry
    sleeps = Recorder()
    with moto_hooks.patch_states_all_as_aws(), moto_hooks.patch_retry_sleep(sleeps):
        result = mocked.run(runtime_error_caught_by(["States.ALL"]))
        assert (result["status"], result["error"]) == ("FAILED", "States.Runtime")
        assert sleeps.snapshot() == []
        # And naming the error still catches it (ErrorEquals compares names)
        named = mocked.run(runtime_error_caught_by(["States.Runtime"]))
        assert named["status"] == "SUCCEEDED"
    # And undone, moto's own behaviour is back
    assert mocked.run(runtime_error_caught_by(["States.ALL"]))["status"] == "SUCCEEDED"


def test_states_all_still_catches_a_task_error_under_the_hook(mocked: Mocked) -> None:
    arn = mocked.function("failing")

    def dispatch(name: str, payload: bytes) -> LambdaResult:
        return LambdaResult(b'{"errorType": "Denied", "errorMessage": "no"}', "Unhandled")

    definition = {
        "StartAt": "Try",
        "States": {
            "Try": {
                "Type": "Task",
                "Resource": arn,
                "Catch": [{"ErrorEquals": ["States.ALL"], "Next": "Clean up"}],
                "End": True,
            },
            "Clean up": {"Type": "Pass", "End": True},
        },
    }
    with moto_hooks.patch_lambda_invoke(dispatch), moto_hooks.patch_states_all_as_aws():
        assert mocked.run(definition)["status"] == "SUCCEEDED"


# EC2 fidelity --------------------------------------------------------------------------


def test_moto_alone_still_accepts_a_description_only_duplicate(mocked: Mocked) -> None:
    """The gap `patch_duplicate_ignores_description` closes; when this fails, moto fixed
    it and the patch can go.
    """
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
    mocked.ec2.authorize_security_group_ingress(
        GroupId=node, IpPermissions=[group_rule(lb, 79, "moto alone")]
    )
    (alone,) = describe(mocked, node)
    assert "Description" not in alone, "moto now shows it: drop patch_group_rule_description"
    mocked.ec2.revoke_security_group_ingress(
        GroupId=node, SecurityGroupRuleIds=[alone["SecurityGroupRuleId"]]
    )
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
    """moto alone returns one rule for a multi-permission authorize; when it returns
    every rule, `patch_authorize_returns_all_rules` can go.
    """
    node = mocked.group("node")
    permissions = [cidr_rule("10.0.0.0/8", 80), cidr_rule("10.0.0.0/8", 443)]
    alone = mocked.ec2.authorize_security_group_ingress(GroupId=node, IpPermissions=permissions)
    assert len(alone["SecurityGroupRules"]) == 1, "moto returns all now: drop the patch"
    mocked.ec2.revoke_security_group_ingress(GroupId=node, IpPermissions=permissions)
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
    mocked.ec2.authorize_security_group_ingress(
        GroupId=node, IpPermissions=[cidr_rule("10.9.2.3/16", 81)]
    )
    (alone,) = describe(mocked, node)
    assert alone["CidrIpv4"] == "10.9.2.3/16", "moto masks now: drop patch_cidr_host_bits_masked"
    mocked.ec2.revoke_security_group_ingress(
        GroupId=node, IpPermissions=[cidr_rule("10.9.2.3/16", 81)]
    )
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
    """The gap `patch_rule_quota_as_aws` closes (moto counts both families in one quota
    of 60); when this fails, the patch can go.
    """
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


def subnet(mocked: Mocked, vpc: str | None = None, cidr: str = "10.0.1.0/24", **kwargs: Any) -> str:
    created = mocked.ec2.create_subnet(VpcId=vpc or mocked.vpc, CidrBlock=cidr, **kwargs)
    return str(created["Subnet"]["SubnetId"])


def eni(mocked: Mocked, subnet_id: str, **kwargs: Any) -> str:
    created = mocked.ec2.create_network_interface(SubnetId=subnet_id, **kwargs)
    return str(created["NetworkInterface"]["NetworkInterfaceId"])


def enis(mocked: Mocked, **filters: str | list[str]) -> dict[str, dict[str, Any]]:
    """Interfaces by id; filters by name, `_` for `-` and `__` for `.`."""
    found = mocked.ec2.describe_network_interfaces(Filters=filter_list(filters))
    return {i["NetworkInterfaceId"]: i for i in found["NetworkInterfaces"]}


def filter_list(filters: dict[str, str | list[str]]) -> list[dict[str, Any]]:
    return [
        {
            "Name": key.replace("__", ".").replace("_", "-"),
            "Values": [value] if isinstance(value, str) else value,
        }
        for key, value in filters.items()
    ]


AMI = "ami-12c6146b"
IPV4_PREFIX_FILTER = "network-interface.ipv4-prefixes.ipv4-prefix"
IPV6_PREFIX_FILTER = "network-interface.ipv6-prefixes.ipv6-prefix"


def launch(mocked: Mocked, subnet_id: str, **kwargs: Any) -> tuple[str, str]:
    """Run one instance in the subnet; its id and its primary interface's id."""
    (instance,) = mocked.ec2.run_instances(
        ImageId=AMI, MinCount=1, MaxCount=1, SubnetId=subnet_id, **kwargs
    )["Instances"]
    return str(instance["InstanceId"]), str(instance["NetworkInterfaces"][0]["NetworkInterfaceId"])


def instances(
    mocked: Mocked,
    ipv4: str | list[str] | None = None,
    ipv6: str | list[str] | None = None,
    instance_ids: list[str] | None = None,
    **filters: str | list[str],
) -> dict[str, dict[str, Any]]:
    """DescribeInstances' instances by id, filtered by delegated prefix and other filters
    (`vpc_id` is the `vpc-id` filter), as the inventory reader looks pods up."""
    by_prefix = {IPV4_PREFIX_FILTER: ipv4, IPV6_PREFIX_FILTER: ipv6}
    wanted = [
        {"Name": name, "Values": [value] if isinstance(value, str) else value}
        for name, value in by_prefix.items()
        if value is not None
    ]
    request: dict[str, Any] = {"Filters": wanted + filter_list(filters)}
    if instance_ids:
        request["InstanceIds"] = instance_ids
    reservations = mocked.ec2.describe_instances(**request)["Reservations"]
    return {i["InstanceId"]: i for r in reservations for i in r["Instances"]}


def interfaces(instance: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {i["NetworkInterfaceId"]: i for i in instance["NetworkInterfaces"]}


def prefixes(interface: dict[str, Any]) -> tuple[list[str], list[str]]:
    return (
        [item["Ipv4Prefix"] for item in interface.get("Ipv4Prefixes", [])],
        [item["Ipv6Prefix"] for item in interface.get("Ipv6Prefixes", [])],
    )


V6 = "2600:1f14:abcd:1200:1234::/80"


def test_moto_alone_neither_keeps_nor_filters_eni_prefixes(mocked: Mocked) -> None:
    """The gap `patch_eni_delegated_prefixes` closes; when this fails, moto models
    prefixes and the patch can go.
    """
    from moto.ec2.exceptions import FilterNotImplementedError

    instance, primary = launch(mocked, subnet(mocked))
    mocked.ec2.assign_private_ip_addresses(
        NetworkInterfaceId=primary, Ipv4Prefixes=["10.0.1.32/28"]
    )
    mocked.ec2.assign_ipv6_addresses(NetworkInterfaceId=primary, Ipv6Prefixes=[V6])
    assert prefixes(enis(mocked)[primary]) == ([], [])
    assert prefixes(interfaces(instances(mocked)[instance])[primary]) == ([], [])
    with pytest.raises(NotImplementedError):
        instances(mocked, ipv4="10.0.1.32/28")
    with pytest.raises(NotImplementedError):
        instances(mocked, ipv6=V6)
    with pytest.raises(FilterNotImplementedError):
        enis(mocked, ipv4_prefix_set__ipv4_prefix="10.0.1.32/28")


def test_assigned_eni_prefixes_are_described_as_aws_prints_them(mocked: Mocked) -> None:
    net = subnet(mocked)
    node, other = eni(mocked, net), eni(mocked, net)
    with moto_hooks.patch_eni_delegated_prefixes():
        mocked.ec2.assign_private_ip_addresses(
            NetworkInterfaceId=node, Ipv4Prefixes=["10.0.1.32/28"]
        )
        mocked.ec2.assign_ipv6_addresses(
            NetworkInterfaceId=node, Ipv6Prefixes=["2600:1F14:ABCD:1200:1234:0:0:0/80"]
        )
        described = enis(mocked)
    assert prefixes(described[node]) == (["10.0.1.32/28"], [V6]), (
        "patch_eni_delegated_prefixes: NetworkInterface.ipv4_prefixes / ipv6_prefixes not "
        "rendered, or the IPv6 prefix not normalised"
    )
    assert "Ipv4Prefixes" not in described[other] and "Ipv6Prefixes" not in described[other]


def test_describe_instances_shows_the_prefixes_of_attached_interfaces(mocked: Mocked) -> None:
    vpc = mocked.ec2.create_vpc(CidrBlock="10.1.0.0/16", AmazonProvidedIpv6CidrBlock=True)["Vpc"]
    block = ipaddress.ip_network(vpc["Ipv6CidrBlockAssociationSet"][0]["Ipv6CidrBlock"])
    v6_subnet = next(block.subnets(new_prefix=64))
    net = subnet(mocked, vpc["VpcId"], "10.1.1.0/24", Ipv6CidrBlock=str(v6_subnet))
    v6 = str(list(itertools.islice(v6_subnet.subnets(new_prefix=80), 2))[1])
    group = mocked.ec2.create_security_group(
        GroupName="pods", Description="pods", VpcId=vpc["VpcId"]
    )["GroupId"]
    with moto_hooks.patch_eni_delegated_prefixes():
        instance, primary = launch(mocked, net, SecurityGroupIds=[group])
        bystander, _ = launch(mocked, net)
        mocked.ec2.assign_private_ip_addresses(
            NetworkInterfaceId=primary, Ipv4Prefixes=["10.1.1.32/28"]
        )
        second = eni(mocked, net, Groups=[group], Ipv6Prefixes=[{"Ipv6Prefix": v6}])
        loose = eni(mocked, net, Ipv4Prefixes=[{"Ipv4Prefix": "10.1.1.64/28"}])
        mocked.ec2.attach_network_interface(
            NetworkInterfaceId=second, InstanceId=instance, DeviceIndex=1
        )
        described = instances(mocked)
        attached = interfaces(described[instance])
        assert set(attached) == {primary, second}
        assert prefixes(attached[primary]) == (["10.1.1.32/28"], []), (
            "patch_eni_delegated_prefixes: DescribeInstances does not render "
            "NetworkInterface.ipv4_prefixes through Instance.network_interfaces"
        )
        assert prefixes(attached[second]) == ([], [v6]), "an attached interface's IPv6 prefix"
        assert all(
            i["Groups"] == [{"GroupId": group, "GroupName": "pods"}] for i in attached.values()
        )
        assert all(prefixes(i) == ([], []) for i in described[bystander]["NetworkInterfaces"])
        assert loose not in {i for d in described.values() for i in interfaces(d)}

        mocked.ec2.detach_network_interface(
            AttachmentId=attached[second]["Attachment"]["AttachmentId"]
        )
        assert set(interfaces(instances(mocked)[instance])) == {primary}
        assert instances(mocked, ipv6=v6) == {}, "a detached interface's prefix left behind"


def test_instance_prefix_filters_find_only_the_holder(mocked: Mocked) -> None:
    net = subnet(mocked)
    elsewhere = subnet(mocked, mocked.ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"])
    with moto_hooks.patch_eni_delegated_prefixes():
        holder, primary = launch(mocked, net)
        mocked.ec2.assign_private_ip_addresses(
            NetworkInterfaceId=primary, Ipv4Prefixes=["10.0.1.32/28", "10.0.1.48/28"]
        )
        second = eni(mocked, net, Ipv6Prefixes=[{"Ipv6Prefix": V6}])
        mocked.ec2.attach_network_interface(
            NetworkInterfaceId=second, InstanceId=holder, DeviceIndex=1
        )
        neighbour, neighbour_eni = launch(mocked, net)
        mocked.ec2.assign_private_ip_addresses(
            NetworkInterfaceId=neighbour_eni, Ipv4Prefixes=["10.0.1.64/28"]
        )
        twin, twin_eni = launch(mocked, elsewhere)
        mocked.ec2.assign_private_ip_addresses(
            NetworkInterfaceId=twin_eni, Ipv4Prefixes=["10.0.1.32/28"]
        )
        launch(mocked, net)  # no prefix at all
        eni(mocked, net, Ipv4Prefixes=[{"Ipv4Prefix": "10.0.1.80/28"}])  # not attached

        assert set(instances(mocked, ipv4="10.0.1.32/28", vpc_id=mocked.vpc)) == {holder}, (
            "patch_eni_delegated_prefixes: moto.ec2.utils.filter_dict_attribute_mapping "
            f"does not serve {IPV4_PREFIX_FILTER}"
        )
        assert set(instances(mocked, ipv4="10.0.1.32/28")) == {holder, twin}
        assert set(instances(mocked, ipv6=V6)) == {holder}, IPV6_PREFIX_FILTER
        assert set(instances(mocked, ipv4="10.0.1.48/28", ipv6=V6)) == {holder}
        assert set(instances(mocked, ipv4="10.0.1.32/28", instance_id=twin)) == {twin}
        assert instances(mocked, ipv4="10.0.1.64/28", instance_ids=[holder]) == {}
        # several values: any of them, as AWS matches
        assert set(instances(mocked, ipv4=["10.0.1.48/28", "10.0.1.64/28"])) == {
            holder,
            neighbour,
        }
        # an exact match on the printed form, as AWS does
        assert instances(mocked, ipv6="2600:1f14:abcd:1200:1234:0:0:0/80") == {}
        assert instances(mocked, ipv4="10.0.1.32/27") == {}
        assert instances(mocked, ipv4="10.0.1.80/28") == {}, "an unattached interface counts"


def test_unassigned_eni_prefixes_are_gone(mocked: Mocked) -> None:
    instance, primary = launch(mocked, subnet(mocked))
    with moto_hooks.patch_eni_delegated_prefixes():
        mocked.ec2.assign_private_ip_addresses(
            NetworkInterfaceId=primary, Ipv4Prefixes=["10.0.1.32/28", "10.0.1.48/28"]
        )
        mocked.ec2.assign_ipv6_addresses(NetworkInterfaceId=primary, Ipv6Prefixes=[V6])
        mocked.ec2.unassign_private_ip_addresses(
            NetworkInterfaceId=primary, Ipv4Prefixes=["10.0.1.32/28"]
        )
        mocked.ec2.unassign_ipv6_addresses(NetworkInterfaceId=primary, Ipv6Prefixes=[V6])
        assert prefixes(enis(mocked)[primary]) == (["10.0.1.48/28"], [])
        assert prefixes(interfaces(instances(mocked)[instance])[primary]) == (["10.0.1.48/28"], [])
        assert instances(mocked, ipv4="10.0.1.32/28") == {} and instances(mocked, ipv6=V6) == {}
        assert set(instances(mocked, ipv4="10.0.1.48/28")) == {instance}


def test_a_bad_prefix_and_a_prefix_count_are_refused_and_change_nothing(mocked: Mocked) -> None:
    node = eni(mocked, subnet(mocked), Ipv4Prefixes=[{"Ipv4Prefix": "10.0.1.16/28"}])
    with moto_hooks.patch_eni_delegated_prefixes():
        for bad in (
            {"Ipv4Prefixes": ["10.0.1.33/28"]},  # host bits set
            {"Ipv4Prefixes": ["10.0.1.32/27"]},  # AWS delegates /28s only
            {"Ipv4PrefixCount": 2},  # EC2 would pick free /28s: not modelled
        ):
            with pytest.raises(ClientError) as raised:
                mocked.ec2.assign_private_ip_addresses(NetworkInterfaceId=node, **bad)
            assert raised.value.response["Error"]["Code"] == "InvalidParameterValue", bad
        assert prefixes(enis(mocked)[node]) == ([], [])


def test_undoing_the_prefix_hook_restores_moto() -> None:
    from moto.ec2 import utils as ec2_utils
    from moto.ec2.models.elastic_network_interfaces import (
        NetworkInterface,
        NetworkInterfaceBackend,
    )
    from moto.ec2.models.instances import Instance

    list_enis = NetworkInterfaceBackend.get_all_network_interfaces
    mapping = dict(ec2_utils.filter_dict_attribute_mapping)
    with moto_hooks.patch_eni_delegated_prefixes():
        assert hasattr(NetworkInterface, "ipv4_prefixes")
        assert hasattr(Instance, "delegated_ipv6_prefixes")
        assert IPV4_PREFIX_FILTER in ec2_utils.filter_dict_attribute_mapping
        assert interception.interceptors("ec2", "AssignPrivateIpAddresses") == 1
    assert not hasattr(NetworkInterface, "ipv4_prefixes")
    assert not hasattr(NetworkInterface, "ipv6_prefixes")
    assert not hasattr(Instance, "delegated_ipv4_prefixes")
    assert not hasattr(Instance, "delegated_ipv6_prefixes")
    assert ec2_utils.filter_dict_attribute_mapping == mapping
    assert interception.interceptors("ec2", "AssignPrivateIpAddresses") == 0
    assert NetworkInterfaceBackend.get_all_network_interfaces is list_enis


def test_the_prefix_hook_refuses_a_filter_moto_has_now_and_leaves_nothing_applied() -> None:
    from moto.ec2 import utils as ec2_utils
    from moto.ec2.models.elastic_network_interfaces import NetworkInterface
    from moto.ec2.models.instances import Instance

    ec2_utils.filter_dict_attribute_mapping[IPV6_PREFIX_FILTER] = "moto_models_it"
    try:
        with pytest.raises(patching.HookError, match="ipv6-prefixes"):
            moto_hooks.patch_eni_delegated_prefixes()
    finally:
        del ec2_utils.filter_dict_attribute_mapping[IPV6_PREFIX_FILTER]
    assert IPV4_PREFIX_FILTER not in ec2_utils.filter_dict_attribute_mapping
    assert not hasattr(NetworkInterface, "ipv4_prefixes")
    assert not hasattr(Instance, "delegated_ipv4_prefixes")
    assert not hasattr(Instance, "delegated_ipv6_prefixes")


def dual_stack(mocked: Mocked) -> tuple[str, list[str]]:
    """A VPC 10.1.0.0/16 with an Amazon-provided IPv6 /56, taken from describe_vpcs as the
    inventory reads it, and the first four /64s of that /56."""
    vpc = mocked.ec2.create_vpc(CidrBlock="10.1.0.0/16", AmazonProvidedIpv6CidrBlock=True)
    vpc_id = str(vpc["Vpc"]["VpcId"])
    (described,) = mocked.ec2.describe_vpcs(VpcIds=[vpc_id])["Vpcs"]
    block = ipaddress.ip_network(described["Ipv6CidrBlockAssociationSet"][0]["Ipv6CidrBlock"])
    return vpc_id, [str(net) for net in itertools.islice(block.subnets(new_prefix=64), 4)]


@dataclass
class AddressWorld:
    vpc: str
    node: str  # primary 10.1.1.10, 10.1.1.11 given at creation, 10.1.1.12 assigned
    node_v6: str  # assigned to node
    other: str  # same subnet: primary 10.1.1.20 and an IPv6 address of its own
    other_v6: str
    twin: str  # another VPC, with node's secondary 10.1.1.11 as its primary


def address_world(mocked: Mocked) -> AddressWorld:
    vpc, v6_nets = dual_stack(mocked)
    net = subnet(mocked, vpc, "10.1.1.0/24", Ipv6CidrBlock=v6_nets[0])
    v6 = ipaddress.ip_network(v6_nets[0])
    node_v6, other_v6 = str(v6[0x10]), str(v6[0x20])
    node = eni(
        mocked,
        net,
        PrivateIpAddresses=[
            {"PrivateIpAddress": "10.1.1.10", "Primary": True},
            {"PrivateIpAddress": "10.1.1.11", "Primary": False},
        ],
    )
    mocked.ec2.assign_private_ip_addresses(
        NetworkInterfaceId=node, PrivateIpAddresses=["10.1.1.12"]
    )
    mocked.ec2.assign_ipv6_addresses(NetworkInterfaceId=node, Ipv6Addresses=[node_v6])
    other = eni(
        mocked, net, PrivateIpAddress="10.1.1.20", Ipv6Addresses=[{"Ipv6Address": other_v6}]
    )
    elsewhere = mocked.ec2.create_vpc(CidrBlock="10.1.0.0/16")["Vpc"]["VpcId"]
    twin = eni(mocked, subnet(mocked, elsewhere, "10.1.1.0/24"), PrivateIpAddress="10.1.1.11")
    return AddressWorld(vpc, node, node_v6, other, other_v6, twin)


def test_moto_alone_filters_eni_addresses_by_the_primary_only(mocked: Mocked) -> None:
    """The gap the patch closes; when this fails, moto matches every address (or has the
    IPv6 filter) and `patch_eni_address_filters` can go."""
    from moto.ec2.exceptions import FilterNotImplementedError

    world = address_world(mocked)
    assert set(enis(mocked, addresses__private_ip_address="10.1.1.10")) == {world.node}
    assert set(enis(mocked, addresses__private_ip_address="10.1.1.11")) == {world.twin}
    assert enis(mocked, addresses__private_ip_address="10.1.1.12") == {}
    with pytest.raises(FilterNotImplementedError):
        enis(mocked, ipv6_addresses__ipv6_address=world.node_v6)


def test_eni_address_filters_match_any_address_of_an_interface(mocked: Mocked) -> None:
    world = address_world(mocked)
    with moto_hooks.patch_eni_address_filters():
        found = {
            address: set(enis(mocked, addresses__private_ip_address=address, vpc_id=world.vpc))
            for address in ("10.1.1.10", "10.1.1.11", "10.1.1.12", "10.1.1.20", "10.1.1.99")
        }
        anywhere = set(enis(mocked, addresses__private_ip_address="10.1.1.11"))
        several = set(enis(mocked, addresses__private_ip_address=["10.1.1.12", "10.1.1.20"]))
        wildcard = set(enis(mocked, addresses__private_ip_address="10.1.1.1?", vpc_id=world.vpc))
        primary_only = set(enis(mocked, private_ip_address="10.1.1.11"))
        v6 = set(enis(mocked, ipv6_addresses__ipv6_address=world.node_v6, vpc_id=world.vpc))
        v6_several = set(enis(mocked, ipv6_addresses__ipv6_address=[world.node_v6, world.other_v6]))
        v6_none = enis(mocked, ipv6_addresses__ipv6_address="2001:db8::1")
        by_id = mocked.ec2.describe_network_interfaces(
            NetworkInterfaceIds=[world.node, world.other],
            Filters=filter_list({"addresses__private_ip_address": "10.1.1.20"}),
        )["NetworkInterfaces"]
        mocked.ec2.unassign_private_ip_addresses(
            NetworkInterfaceId=world.node, PrivateIpAddresses=["10.1.1.12"]
        )
        unassigned = enis(mocked, addresses__private_ip_address="10.1.1.12")
    assert found == {
        "10.1.1.10": {world.node},
        "10.1.1.11": {world.node},
        "10.1.1.12": {world.node},
        "10.1.1.20": {world.other},
        "10.1.1.99": set(),
    }, (
        "patch_eni_address_filters: NetworkInterfaceBackend.get_all_network_interfaces does "
        "not match a secondary address (from creation or assigned) with vpc-id"
    )
    assert anywhere == {world.node, world.twin}, "without vpc-id, both VPCs' holders"
    assert several == {world.node, world.other}, "several values must match any"
    assert wildcard == {world.node}
    assert primary_only == {world.twin}, "private-ip-address is the primary address only"
    assert v6 == {world.node}, "ipv6-addresses.ipv6-address did not find the IPv6 address"
    assert v6_several == {world.node, world.other} and v6_none == {}
    assert [i["NetworkInterfaceId"] for i in by_id] == [world.other], "ids and filters combine"
    assert unassigned == {}, "an unassigned address still matches"


def test_moto_alone_prints_a_subnets_ipv6_state_as_text(mocked: Mocked) -> None:
    """The gap the patch closes; when this fails, moto prints the structure and
    `patch_subnet_ipv6_state` can go."""
    vpc, v6_nets = dual_stack(mocked)
    created = mocked.ec2.create_subnet(VpcId=vpc, CidrBlock="10.1.1.0/24", Ipv6CidrBlock=v6_nets[0])
    (described,) = mocked.ec2.describe_subnets(SubnetIds=[created["Subnet"]["SubnetId"]])["Subnets"]
    for shown in (created["Subnet"], described):
        (association,) = shown["Ipv6CidrBlockAssociationSet"]
        assert association["Ipv6CidrBlockState"] == {"State": "{'State': 'associated'}"}


def test_a_subnets_ipv6_state_is_the_structure_ec2_sends(mocked: Mocked) -> None:
    vpc, v6_nets = dual_stack(mocked)
    with moto_hooks.patch_subnet_ipv6_state():
        created = mocked.ec2.create_subnet(
            VpcId=vpc, CidrBlock="10.1.1.0/24", Ipv6CidrBlock=v6_nets[0]
        )["Subnet"]
        later = subnet(mocked, vpc, "10.1.2.0/24")
        associated = mocked.ec2.associate_subnet_cidr_block(
            SubnetId=later, Ipv6CidrBlock=v6_nets[1]
        )["Ipv6CidrBlockAssociation"]
        described = {
            s["SubnetId"]: s
            for s in mocked.ec2.describe_subnets(Filters=filter_list({"vpc_id": vpc}))["Subnets"]
        }
        mocked.ec2.disassociate_subnet_cidr_block(AssociationId=associated["AssociationId"])
        after = mocked.ec2.describe_subnets(SubnetIds=[later])["Subnets"][0]
    expected = {v6_nets[0]: created["SubnetId"], v6_nets[1]: later}
    for block, subnet_id in expected.items():
        (association,) = described[subnet_id]["Ipv6CidrBlockAssociationSet"]
        assert association["Ipv6CidrBlock"] == block
        assert association["Ipv6CidrBlockState"] == {"State": "associated"}, (
            "patch_subnet_ipv6_state: Subnet.ipv6_cidr_block_association_set still nests the state"
        )
    (on_create,) = created["Ipv6CidrBlockAssociationSet"]
    assert on_create["Ipv6CidrBlockState"] == {"State": "associated"}, "CreateSubnet's response"
    assert associated["Ipv6CidrBlockState"] == {"State": "associated"}
    assert after.get("Ipv6CidrBlockAssociationSet", []) == [], "a disassociated block is listed"


def test_moto_alone_prints_vpc_cidr_states_and_a_dualstack_nlb(mocked: Mocked) -> None:
    """No hook needed (moto 5.2.5 is right); when this fails, one is."""
    vpc, v6_nets = dual_stack(mocked)
    (described,) = mocked.ec2.describe_vpcs(VpcIds=[vpc])["Vpcs"]
    (v4,) = described["CidrBlockAssociationSet"]
    (v6,) = described["Ipv6CidrBlockAssociationSet"]
    assert (v4["CidrBlock"], v4["CidrBlockState"]) == ("10.1.0.0/16", {"State": "associated"})
    assert ipaddress.ip_network(v6["Ipv6CidrBlock"]).prefixlen == 56
    assert v6["Ipv6CidrBlockState"] == {"State": "associated"}
    assert v4["AssociationId"] and v6["AssociationId"]

    subnets = [
        subnet(mocked, vpc, f"10.1.{n}.0/24", Ipv6CidrBlock=v6_nets[n], AvailabilityZone=zone)
        for n, zone in ((1, f"{REGION}a"), (2, f"{REGION}b"))
    ]
    elbv2 = client("elbv2")
    arn = elbv2.create_load_balancer(
        Name="ingress",
        Type="network",
        Scheme="internal",
        IpAddressType="dualstack",
        Subnets=subnets,
    )["LoadBalancers"][0]["LoadBalancerArn"]
    (balancer,) = elbv2.describe_load_balancers(LoadBalancerArns=[arn])["LoadBalancers"]
    assert (balancer["Type"], balancer["Scheme"], balancer["IpAddressType"]) == (
        "network",
        "internal",
        "dualstack",
    )
    assert balancer["VpcId"] == vpc


def test_undoing_the_address_and_subnet_hooks_restores_moto(mocked: Mocked) -> None:
    from moto.ec2.models.elastic_network_interfaces import NetworkInterfaceBackend
    from moto.ec2.models.subnets import Subnet

    list_enis = NetworkInterfaceBackend.get_all_network_interfaces
    association_set = Subnet.__dict__["ipv6_cidr_block_association_set"]
    world = address_world(mocked)
    with moto_hooks.patch_eni_address_filters(), moto_hooks.patch_subnet_ipv6_state():
        assert NetworkInterfaceBackend.get_all_network_interfaces is not list_enis
        assert Subnet.__dict__["ipv6_cidr_block_association_set"] is not association_set
    assert NetworkInterfaceBackend.get_all_network_interfaces is list_enis
    assert Subnet.__dict__["ipv6_cidr_block_association_set"] is association_set
    assert enis(mocked, addresses__private_ip_address="10.1.1.12") == {}, "moto's filter again"
    shown = mocked.ec2.describe_subnets(Filters=filter_list({"vpc_id": world.vpc}))["Subnets"]
    (association,) = shown[0]["Ipv6CidrBlockAssociationSet"]
    assert association["Ipv6CidrBlockState"] == {"State": "{'State': 'associated'}"}


def test_moto_alone_sends_no_execution_status_change(mocked: Mocked) -> None:
    sqs, events = client("sqs"), client("events")
    queue = sqs.create_queue(QueueName="hooks-status")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    events.put_rule(Name="status", EventPattern=json.dumps({"source": ["aws.states"]}))
    events.put_targets(Rule="status", Targets=[{"Id": "q", "Arn": arn}])
    ended: list[str] = []
    with moto_hooks.on_execution_end(lambda execution: ended.append(execution.exec_arn)):
        result = mocked.run({"StartAt": "P", "States": {"P": {"Type": "Pass", "End": True}}})
    assert ended == [result["executionArn"]]
    assert "Messages" not in sqs.receive_message(QueueUrl=queue), (
        "moto sends the status change now: drop on_execution_end"
    )


def test_a_stop_aborts_at_once_as_on_aws_while_the_task_runs_on(mocked: Mocked) -> None:
    arn = mocked.function("slow")
    entered, release = threading.Event(), threading.Event()

    def dispatch(name: str, payload: bytes) -> LambdaResult:
        entered.set()
        release.wait(10)
        return LambdaResult(b"{}")

    definition = {"StartAt": "S", "States": {"S": {"Type": "Task", "Resource": arn, "End": True}}}
    machine = mocked.sfn.create_state_machine(
        name="slow", definition=json.dumps(definition), roleArn=mocked.role
    )["stateMachineArn"]

    def status_after_stop(name: str) -> tuple[str, list[str]]:
        """The status right after StopExecution, and the ends reported by then."""
        entered.clear()
        release.clear()
        execution = mocked.sfn.start_execution(stateMachineArn=machine, name=name)["executionArn"]
        assert entered.wait(10)
        mocked.sfn.stop_execution(executionArn=execution)
        status = str(mocked.sfn.describe_execution(executionArn=execution)["status"])
        reported = list(stopped)
        release.set()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            history = mocked.sfn.get_execution_history(executionArn=execution)
            if history["events"][-1]["type"] == "ExecutionAborted":
                break
            time.sleep(0.01)
        return status, reported

    stopped: list[str] = []
    with moto_hooks.patch_lambda_invoke(dispatch):
        status, _ = status_after_stop("alone")
        assert status == "RUNNING", "moto aborts at once now: drop the patch"
        with moto_hooks.on_execution_end(lambda execution: stopped.append(execution.name)):
            status, reported = status_after_stop("as-aws")
    assert status == "ABORTED"
    assert "as-aws" in reported, "the status change goes out at the stop"
    # once; the unpatched run's thread may still end after the listener is installed
    assert stopped.count("as-aws") == 1, stopped


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


def second_write_reaches_moto_while_the_first_is_inside(
    mocked: Mocked, monkeypatch: pytest.MonkeyPatch, *, hooked: bool
) -> bool:
    """Two PutItem calls on one item from two threads, the first held inside moto's backend
    (`moto.dynamodb.models.DynamoDBBackend.put_item`) between reading and writing the item.
    True when the second entered the backend meanwhile: both conditional writes could then
    find the lock free."""
    from moto.dynamodb.models import DynamoDBBackend

    mocked.dynamodb.create_table(
        TableName="locks",
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    inside, release, second_inside = threading.Event(), threading.Event(), threading.Event()
    put_item = DynamoDBBackend.put_item

    def held_put_item(self: Any, *args: Any, **kwargs: Any) -> Any:
        if inside.is_set():
            second_inside.set()
        else:
            inside.set()
            release.wait(10)
        return put_item(self, *args, **kwargs)

    def put(owner: str) -> None:
        with contextlib.suppress(ClientError):
            mocked.dynamodb.put_item(
                TableName="locks",
                Item={"id": {"S": "sg-1"}, "owner": {"S": owner}},
                ConditionExpression="attribute_not_exists(id)",
            )

    monkeypatch.setattr(DynamoDBBackend, "put_item", held_put_item)
    first, second = (threading.Thread(target=put, args=(o,)) for o in ("first", "second"))
    try:
        first.start()
        assert inside.wait(10), "the first PutItem never reached moto's backend"
        second.start()
        # Without the hook the second arrives at once (waited for up to 10 s on a busy
        # machine); with it, it cannot before the release: half a second shows it waits.
        reached = second_inside.wait(0.5 if hooked else 10)
    finally:
        release.set()
        first.join(10)
        second.join(10)
        monkeypatch.setattr(DynamoDBBackend, "put_item", put_item)
    assert second_inside.is_set(), "the second PutItem never reached moto's backend"
    mocked.dynamodb.delete_table(TableName="locks")
    return reached


def test_a_conditional_write_is_checked_and_applied_as_one_step(
    mocked: Mocked, monkeypatch: pytest.MonkeyPatch
) -> None:
    alone = second_write_reaches_moto_while_the_first_is_inside(mocked, monkeypatch, hooked=False)
    assert alone, "moto serializes writes now: drop patch_atomic_writes"
    with moto_hooks.patch_atomic_writes():
        assert not second_write_reaches_moto_while_the_first_is_inside(
            mocked, monkeypatch, hooked=True
        ), "patch_atomic_writes let a second PutItem into moto beside the first"
    undone = second_write_reaches_moto_while_the_first_is_inside(mocked, monkeypatch, hooked=False)
    assert undone, "undone: moto alone again"


def target_groups(mocked: Mocked, count: int) -> Any:
    elbv2 = client("elbv2")
    for index in range(count):
        elbv2.create_target_group(
            Name=f"tg-{index}", Protocol="TCP", Port=80, VpcId=mocked.vpc, TargetType="instance"
        )
    return elbv2


def test_moto_alone_answers_every_target_group_in_one_page(mocked: Mocked) -> None:
    """The gap the patch closes; when this fails, moto pages DescribeTargetGroups and
    `patch_target_group_pages` can go."""
    elbv2 = target_groups(mocked, 3)
    answer = elbv2.describe_target_groups(PageSize=2)
    assert len(answer["TargetGroups"]) == 3 and "NextMarker" not in answer


def test_target_groups_are_answered_in_pages_as_aws_does(mocked: Mocked) -> None:
    elbv2 = target_groups(mocked, 5)
    with moto_hooks.patch_target_group_pages():
        first = elbv2.describe_target_groups(PageSize=2)
        pages = list(elbv2.get_paginator("describe_target_groups").paginate(PageSize=2))
        whole = elbv2.describe_target_groups()
        for wrong in ({"PageSize": 401}, {"Marker": "not-a-marker"}):
            with pytest.raises(ClientError, match="ValidationError"):
                elbv2.describe_target_groups(**wrong)
    assert [len(page["TargetGroups"]) for page in pages] == [2, 2, 1]
    assert first["NextMarker"] and "NextMarker" not in pages[-1]
    names = [g["TargetGroupName"] for page in pages for g in page["TargetGroups"]]
    assert sorted(names) == [f"tg-{index}" for index in range(5)]
    assert len(whole["TargetGroups"]) == 5 and "NextMarker" not in whole


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
        moto_state.security_group_rule_docs(moto_state.ec2_backend(REGION), [node]), "backend"
    )
    assert sorted(direct, key=str) == sorted(via_api, key=str)
    assert all(rule.tag("team") == "a" for rule in direct)


# Speed: lookups by id instead of region scans (answers unchanged) -------------------------


@dataclass
class TaggedWorld:
    groups: list[str]  # tagged ones first, then one without tags
    rules: list[str]
    instance: str


def tagged_world(mocked: Mocked) -> TaggedWorld:
    """Tags on several resource types: groups (two teams), their rules (two owners), an
    instance and its interface; one group without tags; rules that reference a group."""
    groups = [
        str(
            mocked.ec2.create_security_group(
                GroupName=f"tagged{i}",
                Description="tagged",
                VpcId=mocked.vpc,
                TagSpecifications=[
                    {
                        "ResourceType": "security-group",
                        "Tags": [{"Key": "team", "Value": f"t{i % 2}"}, {"Key": "k", "Value": "v"}],
                    }
                ],
            )["GroupId"]
        )
        for i in range(4)
    ]
    groups.append(mocked.group("untagged"))
    for i, group in enumerate(groups):
        for port, peer in (
            (80 + i, cidr_rule("10.0.0.0/8", 80 + i)),
            (90, group_rule(groups[0], 90)),
        ):
            mocked.ec2.authorize_security_group_ingress(
                GroupId=group,
                IpPermissions=[peer],
                TagSpecifications=[
                    {
                        "ResourceType": "security-group-rule",
                        "Tags": [{"Key": "owner", "Value": f"o{(i + port) % 2}"}],
                    }
                ],
            )
    rules = sorted(
        rule["SecurityGroupRuleId"]
        for rule in mocked.ec2.describe_security_group_rules()["SecurityGroupRules"]
    )
    instance, interface = launch(mocked, subnet(mocked))
    mocked.ec2.create_tags(Resources=[instance, interface], Tags=[{"Key": "team", "Value": "t0"}])
    return TaggedWorld(groups, rules, instance)


def lookup_answers(mocked: Mocked, world: TaggedWorld) -> list[Any]:
    """What the describes the speed hooks touch answer, with errors as their codes."""

    def answer(call: Callable[..., Any], key: str, **request: Any) -> Any:
        try:
            return call(**request)[key]
        except ClientError as err:
            return ("error", err.response["Error"]["Code"])

    ec2 = mocked.ec2
    tags, groups, rules = (
        ec2.describe_tags,
        ec2.describe_security_groups,
        ec2.describe_security_group_rules,
    )
    by_id = [{"Name": "group-id", "Values": world.groups[1:3]}]
    owner = {"Name": "tag:owner", "Values": ["o1"]}
    resources = [*world.groups, *world.rules, world.instance, "sg-0000000000000000"]
    return [
        *(
            answer(tags, "Tags", Filters=[{"Name": "resource-id", "Values": [r]}])
            for r in resources
        ),
        answer(
            tags, "Tags", Filters=[{"Name": "resource-id", "Values": [world.groups[0][:5] + "*"]}]
        ),
        answer(tags, "Tags", Filters=[{"Name": "key", "Values": ["team"]}]),
        answer(tags, "Tags"),
        *(
            answer(groups, "SecurityGroups", Filters=[{"Name": "group-id", "Values": [g]}])
            for g in world.groups
        ),
        answer(groups, "SecurityGroups", Filters=by_id),
        answer(groups, "SecurityGroups", Filters=[*by_id, {"Name": "tag:team", "Values": ["t1"]}]),
        answer(groups, "SecurityGroups", Filters=[{"Name": "group-id", "Values": ["sg-*"]}]),
        answer(
            groups,
            "SecurityGroups",
            Filters=[{"Name": "group-id", "Values": ["sg-0000000000000000"]}],
        ),
        answer(groups, "SecurityGroups", GroupIds=world.groups[:1], Filters=by_id),
        answer(groups, "SecurityGroups"),
        *(
            answer(rules, "SecurityGroupRules", Filters=[{"Name": "group-id", "Values": [g]}])
            for g in world.groups
        ),
        answer(rules, "SecurityGroupRules", Filters=by_id),
        answer(rules, "SecurityGroupRules", Filters=[*by_id, owner]),
        answer(rules, "SecurityGroupRules", Filters=[owner]),
        answer(rules, "SecurityGroupRules", Filters=[{"Name": "group-id", "Values": ["sg-*"]}]),
        answer(
            rules,
            "SecurityGroupRules",
            Filters=[{"Name": "group-id", "Values": ["sg-0000000000000000"]}],
        ),
        answer(rules, "SecurityGroupRules", Filters=[{"Name": "group-id", "Values": ["bad-id"]}]),
        answer(rules, "SecurityGroupRules", SecurityGroupRuleIds=world.rules[:2], Filters=by_id),
        answer(
            ec2.describe_instances, "Reservations", Filters=[{"Name": "tag:team", "Values": ["t0"]}]
        ),
    ]


def test_the_lookup_hooks_answer_every_describe_as_moto_does(mocked: Mocked) -> None:
    world = tagged_world(mocked)
    alone = lookup_answers(mocked, world)
    patches = moto_hooks.patch_ec2_lookups()
    try:
        hooked = lookup_answers(mocked, world)
    finally:
        for patch in reversed(patches):
            patch.undo()
    assert alone[-1] and alone[len(world.groups) + len(world.rules)], "the world has tags"
    assert ("error", "InvalidGroupId.Malformed") in alone, "moto validates the ids"
    for index, (before, after) in enumerate(zip(alone, hooked, strict=True)):
        assert before == after, f"answer {index} differs with patch_ec2_lookups"
    assert lookup_answers(mocked, world) == alone, "undone: moto's own answers again"


def test_moto_alone_reads_every_tag_and_rule_of_the_region_for_one_group(
    mocked: Mocked, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The gap the hooks close (time, not answers): reading one group's rules made moto scan
    the whole tag map once per rule printed, and match every rule of the region against the
    filter; with the hooks the cost is that group's. When the counts fall without the hooks,
    moto indexes these lookups itself and `patch_tag_lookup_by_resource` and
    `patch_groups_by_id_filter` can go."""
    from moto.ec2.models.security_groups import SecurityGroup, SecurityGroupRule
    from moto.ec2.models.tags import TagBackend

    world = tagged_world(mocked)
    counts: dict[str, int] = {"tag scans": 0, "rules matched": 0, "groups matched": 0}

    def counting(name: str, original: Callable[..., Any], what: str) -> None:
        def counted(*args: Any, **kwargs: Any) -> Any:
            counts[what] += 1
            return original(*args, **kwargs)

        monkeypatch.setattr(name, counted)

    counting("moto.ec2.models.tags.TagBackend.describe_tags", TagBackend.describe_tags, "tag scans")
    rule_matches, group_matches = SecurityGroupRule.matches_filters, SecurityGroup.matches_filters
    counting(
        "moto.ec2.models.security_groups.SecurityGroupRule.matches_filters",
        rule_matches,
        "rules matched",
    )
    counting(
        "moto.ec2.models.security_groups.SecurityGroup.matches_filters",
        group_matches,
        "groups matched",
    )
    one_group = [{"Name": "group-id", "Values": [world.groups[1]]}]

    def read_one_group() -> dict[str, int]:
        counts.update(dict.fromkeys(counts, 0))
        mocked.ec2.describe_security_group_rules(Filters=one_group)
        mocked.ec2.describe_security_groups(Filters=one_group)
        return dict(counts)

    alone = read_one_group()
    with moto_hooks.patch_tag_lookup_by_resource(), moto_hooks.patch_groups_by_id_filter():
        hooked = read_one_group()
    # every rule of the region (world.rules: egress and the default group's too), every group
    assert alone["rules matched"] == len(world.rules) and alone["groups matched"] > len(
        world.groups
    )
    assert alone["tag scans"] >= 3, alone  # one per rule printed (two) and per group (one)
    assert hooked == {"tag scans": 0, "rules matched": 3, "groups matched": 1}, hooked


def test_undoing_the_lookup_hooks_restores_moto() -> None:
    from moto.ec2.models.security_groups import SecurityGroupBackend
    from moto.ec2.models.tags import TagBackend

    originals = (
        TagBackend.__dict__["describe_tags"],
        SecurityGroupBackend.__dict__["describe_security_group_rules"],
        SecurityGroupBackend.__dict__["describe_security_groups"],
    )
    patches = moto_hooks.patch_ec2_lookups()
    assert TagBackend.__dict__["describe_tags"] is not originals[0]
    for patch in reversed(patches):
        patch.undo()
    assert (
        TagBackend.__dict__["describe_tags"],
        SecurityGroupBackend.__dict__["describe_security_group_rules"],
        SecurityGroupBackend.__dict__["describe_security_groups"],
    ) == originals


# CloudFormation stacks -------------------------------------------------------------------------


def test_a_stacks_attributes_and_conditions_are_read_as_the_engine_resolved_them(
    mocked: Mocked,
) -> None:
    template = {
        "Parameters": {"Stage": {"Type": "String", "Default": "dev"}},
        "Conditions": {
            "IsDev": {"Fn::Equals": [{"Ref": "Stage"}, "dev"]},
            "IsProd": {"Fn::Not": [{"Condition": "IsDev"}]},
        },
        "Resources": {"Queue": {"Type": "AWS::SQS::Queue"}},
    }
    client("cloudformation").create_stack(StackName="hooks", TemplateBody=json.dumps(template))
    sqs = client("sqs")
    (url,) = sqs.list_queues()["QueueUrls"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]

    assert moto_state.stack_attribute("hooks", "Queue", "Arn", REGION) == arn["QueueArn"]
    assert moto_state.stack_condition("hooks", "IsDev", REGION) is True
    assert moto_state.stack_condition("hooks", "IsProd", REGION) is False
    with pytest.raises(KeyError):
        moto_state.stack_attribute("hooks", "Nope", "Arn", REGION)


# Faults and the write listener -----------------------------------------------------------


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
            # The Step Functions interpreter puts the request id in a task failure's cause
            assert raised.value.response["ResponseMetadata"].get("RequestId"), operation
    assert codes == {
        "PutItem": "ProvisionedThroughputExceededException",
        "UpdateItem": "ConditionalCheckFailedException",
        "StartExecution": "ExecutionLimitExceeded",
        "Invoke": "TooManyRequestsException",
    }
    items = mocked.dynamodb.scan(TableName="locks")["Items"]
    assert items == [{"pk": {"S": "b"}, "v": {"S": "x"}}], "only the after-fault write applies"


def test_a_lambda_fault_is_the_lambda_tasks_error(mocked: Mocked) -> None:
    mocked.function("fn")
    definition = {
        "StartAt": "Call",
        "States": {
            "Call": {
                "Type": "Task",
                "Resource": "arn:aws:states:::lambda:invoke",
                "Parameters": {"FunctionName": "fn", "Payload": {}},
                "Catch": [{"ErrorEquals": ["Lambda.TooManyRequestsException"], "Next": "Caught"}],
                "End": True,
            },
            "Caught": {"Type": "Pass", "End": True},
        },
    }
    with FaultInjector(Fault("lambda", "Invoke", "TooManyRequestsException")) as injector:
        result = mocked.run(definition)
    assert (result["status"], len(injector.fired)) == ("SUCCEEDED", 1)


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

    with interception.on_ec2_write(listener):
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


def test_interceptors_nest_and_unwind_in_any_order(mocked: Mocked) -> None:
    node = mocked.group("node")
    order: list[str] = []

    def named(name: str) -> interception.Interceptor:
        def intercept(service: str, operation: str, proceed: interception.Proceed) -> Any:
            order.append(name)
            return proceed()

        return intercept

    operation = "AuthorizeSecurityGroupIngress"
    first = interception.intercept_api_call("ec2", operation, named("fault"))
    second = interception.intercept_api_call(
        "ec2", operation, named("observer"), layer=interception.OBSERVER_LAYER
    )
    mocked.ec2.authorize_security_group_ingress(
        GroupId=node, IpPermissions=[cidr_rule("10.0.0.0/8", 80)]
    )
    assert order == ["fault", "observer"], "higher layers are outer"
    first.undo()  # not the last installed: the other interceptor stays
    assert interception.interceptors("ec2", operation) == 1
    second.undo()
    assert interception.interceptors("ec2", operation) == 0
