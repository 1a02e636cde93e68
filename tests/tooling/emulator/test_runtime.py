"""The local runtime deploys the fixture template into moto and runs its state machines."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from sg_reconciler_tools.local import (
    Fault,
    FaultInjector,
    FunctionFailed,
    LocalRuntime,
    SkippedResource,
    TemplateError,
)
from sg_reconciler_tools.local.functions import module_name

FIXTURES = Path(__file__).parent / "fixtures"
TEMPLATE = FIXTURES / "template.yaml"
STACK = "sg-reconciler-local"


def request(request_id: str, **overrides: Any) -> dict[str, Any]:
    document: dict[str, Any] = {
        "request_id": request_id,
        "flaky_failures": 0,
        "groups": ["sg-a", "sg-b"],
        "fail": False,
    }
    document.update(overrides)
    return document


# Deployment --------------------------------------------------------------------------------


def test_tables_queues_functions_machines_and_rules_are_created(runtime: LocalRuntime) -> None:
    clients = runtime.clients
    table = clients.dynamodb.describe_table(TableName=runtime.ref("LocksTable"))["Table"]
    assert table["KeySchema"] == [{"AttributeName": "pk", "KeyType": "HASH"}]
    ttl = clients.dynamodb.describe_time_to_live(TableName=runtime.ref("LocksTable"))
    assert ttl["TimeToLiveDescription"]["AttributeName"] == "expires_at"

    work_url = runtime.ref("WorkQueue")
    assert work_url.endswith(f"/{STACK}-work")  # explicit QueueName with !Sub
    attributes = clients.sqs.get_queue_attributes(QueueUrl=work_url, AttributeNames=["All"])[
        "Attributes"
    ]
    assert attributes["VisibilityTimeout"] == "60"
    assert json.loads(attributes["RedrivePolicy"]) == {
        "deadLetterTargetArn": runtime.arn("DeadLetterQueue"),
        "maxReceiveCount": 3,
    }

    functions = {f["FunctionName"] for f in clients.lambda_.list_functions()["Functions"]}
    assert functions == {runtime.ref("StepsFunction"), runtime.ref("ChecksFunction")}

    machines = clients.stepfunctions.list_state_machines()["stateMachines"]
    assert {m["name"]: m["stateMachineArn"] for m in machines} == {
        runtime.physical_name("ApplyStateMachine"): runtime.arn("ApplyStateMachine"),
        f"{STACK}-rules": runtime.arn("RulesStateMachine"),
    }
    rules = [r["Name"] for r in clients.events.list_rules()["Rules"]]
    assert rules == [runtime.physical_name("ChangesRule")]
    parameter = clients.ssm.get_parameter(Name=runtime.ref("PolicyParameter"))["Parameter"]
    assert parameter["Value"] == '{"owner": "sg-reconciler"}'


def test_names_and_arns_are_what_cloudformation_gave(runtime: LocalRuntime) -> None:
    # CloudFormation names a resource without a name property <stack>-<LogicalId>-<suffix>
    steps = runtime.physical_name("StepsFunction")
    assert steps.startswith(f"{STACK}-StepsFunction-")
    assert runtime.arn("StepsFunction") == (
        f"arn:aws:lambda:eu-west-1:123456789012:function:{steps}"
    )
    assert runtime.ref("StepsFunction") == steps
    assert runtime.arn("LocksTable").endswith(f":table/{runtime.physical_name('LocksTable')}")
    assert runtime.ref("ApplyStateMachine") == runtime.arn("ApplyStateMachine")
    assert runtime.ref("LocksTable") == runtime.physical_name("LocksTable")
    # A queue's Ref is its URL, its name the URL's last part
    assert runtime.ref("WorkQueue").endswith("/" + runtime.physical_name("WorkQueue"))
    assert runtime.arn("ReconcilerRole").startswith(
        f"arn:aws:iam::123456789012:role/{STACK}-ReconcilerRole-"
    )
    # Parameters and pseudo parameters resolve as !Ref does
    assert runtime.ref("SettleSeconds") == "45"
    assert runtime.ref("AWS::Region") == "eu-west-1"
    assert runtime.ref("AWS::StackId").startswith(
        f"arn:aws:cloudformation:eu-west-1:123456789012:stack/{STACK}/"
    )
    # SAM's implicit role of a function without a Role; none for one with its own
    assert runtime.arn("ChecksFunctionRole").startswith(
        f"arn:aws:iam::123456789012:role/{STACK}-ChecksFunctionRole-"
    )
    with pytest.raises(TemplateError, match=r"StepsFunctionRole.*no such resource"):
        runtime.ref("StepsFunctionRole")


def test_the_runtime_lists_what_moto_skipped(runtime: LocalRuntime) -> None:
    # The queue policy has no moto model; the alarm neither, but its condition is false,
    # so CloudFormation would not create it either: it is not listed.
    assert runtime.skipped == [SkippedResource("WorkQueuePolicy", "AWS::SQS::QueuePolicy")]
    with pytest.raises(TemplateError, match=r"WorkQueuePolicy.*skipped"):
        runtime.ref("WorkQueuePolicy")
    with pytest.raises(TemplateError, match=r"ElsewhereAlarm.*no such resource"):
        runtime.ref("ElsewhereAlarm")


# Executions --------------------------------------------------------------------------------


def test_an_execution_retries_waits_maps_and_succeeds(runtime: LocalRuntime) -> None:
    runtime.waits.clear()
    runtime.retry_sleeps.clear()

    # Given a step that fails once with Flaky, When the execution runs
    arn = runtime.start_execution("ApplyStateMachine", request("ok-1", flaky_failures=1), "ok-1")
    result = runtime.wait_for(arn)

    # Then Retry absorbed the failure without sleeping, and every state ran
    assert result["status"] == "SUCCEEDED", result
    output = json.loads(result["output"])
    assert output["flaky"] == {"attempts": 2, "table": runtime.ref("LocksTable")}
    assert [c["group"] for c in output["checked"]] == ["sg-a", "sg-b"]
    assert {c["checked_by"] for c in output["checked"]} == {"checks"}
    assert runtime.waits.snapshot() == [45.0]  # the Wait's Seconds, from a substitution
    assert runtime.retry_sleeps.snapshot() == [2.0]
    item = runtime.clients.dynamodb.get_item(
        TableName=runtime.physical_name("LocksTable"), Key={"pk": {"S": "ok-1"}}
    )["Item"]
    assert item["state"] == {"S": "started"}  # the aws-sdk:dynamodb task wrote it


def test_history_lists_states_as_the_console_does(runtime: LocalRuntime) -> None:
    arn = runtime.start_execution("ApplyStateMachine", request("hist-1", flaky_failures=1))
    runtime.wait_for(arn)
    history = runtime.history(arn)

    assert history[0] == ("", "ExecutionStarted")
    assert history[-1] == ("", "ExecutionSucceeded")
    assert ("Call the flaky step", "TaskFailed") in history
    assert ("Settle", "WaitStateEntered") in history
    assert ("Check each group", "MapIterationStarted") in history
    assert history.count(("Check one group", "LambdaFunctionSucceeded")) == 2
    entered = [state for state, kind in history if kind.endswith("StateEntered")]
    assert entered[:3] == ["Record the request", "Call the flaky step", "Settle"]
    # Record, Call, Settle, Map, 2 x Check one group, Choice, Done
    assert runtime.transitions(arn) == 8


def test_a_handler_exception_is_caught_by_its_class_name(runtime: LocalRuntime) -> None:
    result = runtime.run("ApplyStateMachine", request("fatal-1", fail=True, groups=[]))

    assert result["status"] == "FAILED"
    assert result["error"] == "Fatal"
    assert json.loads(result["cause"])["errorMessage"] == "the step gave up"
    item = runtime.clients.dynamodb.get_item(
        TableName=runtime.physical_name("LocksTable"), Key={"pk": {"S": "fatal-1"}}
    )["Item"]
    assert item["state"] == {"S": "failed"}  # the Catch path ran its updateItem task
    failed = [i for i in runtime.invocations if i.failed and i.event.get("action") == "fatal"]
    assert failed and failed[-1].error_type == "Fatal"


def test_exhausted_retries_fall_through_to_catch(runtime: LocalRuntime) -> None:
    runtime.retry_sleeps.clear()
    result = runtime.run("ApplyStateMachine", request("flaky-5", flaky_failures=5))

    assert (result["status"], result["error"]) == ("FAILED", "Flaky")
    assert runtime.retry_sleeps.snapshot() == [2.0, 6.0]  # IntervalSeconds 2, BackoffRate 3


def test_a_test_can_act_when_a_wait_starts(runtime: LocalRuntime) -> None:
    # Given a listener that stops the execution as soon as it reaches the Wait state
    arns: list[str] = []

    def stop(seconds: float) -> None:
        runtime.clients.stepfunctions.stop_execution(executionArn=arns[0], error="Aborted")

    # When the execution runs
    with runtime.waits.subscribe(stop):
        arns.append(runtime.start_execution("ApplyStateMachine", request("stop-1")))
        result = runtime.wait_for(arns[0])

    # Then it ended there, and the listener is gone afterwards
    assert result["status"] == "ABORTED"
    entered = [s for s, kind in runtime.history(arns[0]) if kind.endswith("StateEntered")]
    assert entered[-1] == "Settle"
    assert runtime.run("ApplyStateMachine", request("stop-2"))["status"] == "SUCCEEDED"


def test_wait_for_gives_up_after_its_timeout(runtime: LocalRuntime) -> None:
    (steps,) = [spec for spec in runtime.functions if spec.logical_id == "StepsFunction"]
    arn = runtime.start_execution("ApplyStateMachine", request("blocked"))
    try:
        with pytest.raises(TimeoutError, match="still RUNNING"):
            runtime.wait_for(arn, timeout=0.2)
    finally:
        sys.modules[module_name(steps)].RELEASE.set()
    assert runtime.wait_for(arn)["status"] == "SUCCEEDED"


def test_unknown_state_machine_is_a_clear_error(runtime: LocalRuntime) -> None:
    with pytest.raises(KeyError, match="NoSuchMachine"):
        runtime.start_execution("NoSuchMachine", {})


def test_aws_sdk_ec2_tasks_change_rules_and_report_faults(runtime: LocalRuntime) -> None:
    ec2 = runtime.clients.ec2
    vpc = ec2.create_vpc(CidrBlock="10.9.0.0/16")["Vpc"]["VpcId"]
    node = ec2.create_security_group(GroupName="n", Description="n", VpcId=vpc)["GroupId"]
    old = ec2.authorize_security_group_ingress(
        GroupId=node,
        IpPermissions=[
            {
                "IpProtocol": "tcp",
                "FromPort": 80,
                "ToPort": 80,
                "IpRanges": [{"CidrIp": "10.0.0.0/8"}],
            }
        ],
    )["SecurityGroupRules"][0]["SecurityGroupRuleId"]
    payload = {
        "group_id": node,
        "permissions": [
            {
                "IpProtocol": "tcp",
                "FromPort": 80,
                "ToPort": 81,
                "IpRanges": [{"CidrIp": "10.0.0.0/8"}],
            }
        ],
        "old_rule_ids": [old],
    }

    with FaultInjector(Fault("ec2", "AuthorizeSecurityGroupIngress", "RequestLimitExceeded")):
        failed = runtime.run("RulesStateMachine", payload)
    succeeded = runtime.run("RulesStateMachine", payload)

    # moto reports every EC2 failure of an aws-sdk task under one name, the code only in the
    # cause: why the app's EC2 writes are Lambda steps with typed errors (docs/architecture.md).
    assert (failed["status"], failed["error"]) == ("FAILED", "ec2.ec2Exception")
    assert succeeded["status"] == "SUCCEEDED", succeeded
    (rule,) = [
        r
        for r in ec2.describe_security_group_rules(
            Filters=[{"Name": "group-id", "Values": [node]}]
        )["SecurityGroupRules"]
        if not r["IsEgress"]
    ]
    assert (rule["FromPort"], rule["ToPort"]) == (80, 81)
    assert rule["Tags"] == [{"Key": "sg-reconciler/owner", "Value": "sg-reconciler"}]


# Handlers ----------------------------------------------------------------------------------


def test_handlers_see_their_environment_and_it_is_cleaned_up_at_unload(
    runtime: LocalRuntime,
) -> None:
    keys = ["LOCKS_TABLE", "OWNER", "POWERTOOLS_SERVICE_NAME", "AWS_LAMBDA_FUNCTION_NAME"]
    seen = runtime.invoke("StepsFunction", {"action": "environment", "keys": keys})

    assert seen == {
        "LOCKS_TABLE": runtime.ref("LocksTable"),
        "OWNER": "sg-reconciler",  # from Globals, !Ref of a parameter default
        "POWERTOOLS_SERVICE_NAME": "sg-reconciler-fixture",
        "AWS_LAMBDA_FUNCTION_NAME": runtime.ref("StepsFunction"),
    }
    # Added keys stay while the runtime runs (the interpreter's threads read os.environ
    # concurrently; a key vanishing under them failed executions) and go when it unloads.
    assert os.environ["LOCKS_TABLE"] == runtime.ref("LocksTable")
    host = runtime._host  # the handler host the runtime stops with
    assert host is not None
    host.unload()
    assert "LOCKS_TABLE" not in os.environ


def test_two_functions_with_an_app_py_each_do_not_collide(runtime: LocalRuntime) -> None:
    steps = runtime.invoke("StepsFunction", {"action": "echo"})
    checks = runtime.invoke("ChecksFunction", {"group": "sg-x"})

    assert steps["marker"] == "steps"
    assert checks == {
        "group": "sg-x",
        "checked_by": "checks",
        "queue": runtime.ref("WorkQueue"),
        "place": "ireland",  # !If on a condition over AWS::Region
    }


def test_handlers_get_a_lambda_context(runtime: LocalRuntime) -> None:
    context = runtime.invoke("StepsFunction", {"action": "context"})

    assert context["function_name"] == runtime.ref("StepsFunction")
    assert context["arn"] == runtime.arn("StepsFunction")
    assert 0 < context["remaining_ms"] <= 30_000  # Timeout 30 from Globals
    assert context["request_id"]


def test_a_failed_direct_invoke_raises_with_the_error_type(runtime: LocalRuntime) -> None:
    with pytest.raises(FunctionFailed) as raised:
        runtime.invoke("StepsFunction", {"action": "fatal", "message": "no"})
    assert (raised.value.error_type, raised.value.error_message) == ("Fatal", "no")


def test_a_handler_can_call_moto_and_faults_reach_it(runtime: LocalRuntime) -> None:
    ec2 = runtime.clients.ec2
    vpc = ec2.create_vpc(CidrBlock="10.8.0.0/16")["Vpc"]["VpcId"]
    node = ec2.create_security_group(GroupName="h", Description="h", VpcId=vpc)["GroupId"]
    event = {
        "action": "authorize",
        "group_id": node,
        "permissions": [
            {
                "IpProtocol": "tcp",
                "FromPort": 443,
                "ToPort": 443,
                "IpRanges": [{"CidrIp": "10.0.0.0/8"}],
            }
        ],
    }
    with (
        FaultInjector(Fault("ec2", "AuthorizeSecurityGroupIngress", "RequestLimitExceeded")),
        pytest.raises(FunctionFailed) as raised,
    ):
        runtime.invoke("StepsFunction", event)
    added = runtime.invoke("StepsFunction", event)

    assert raised.value.error_type == "ClientError"  # one attempt: botocore did not retry
    assert "RequestLimitExceeded" in raised.value.error_message
    assert len(added["rule_ids"]) == 1


# Events ------------------------------------------------------------------------------------


def test_the_event_rule_routes_other_callers_to_the_queue(runtime: LocalRuntime) -> None:
    def put(caller: str) -> None:
        detail = {"userIdentity": {"arn": caller}, "eventName": "RevokeSecurityGroupIngress"}
        runtime.clients.events.put_events(
            Entries=[
                {
                    "Source": "aws.ec2",
                    "DetailType": "AWS API Call via CloudTrail",
                    "Detail": json.dumps(detail),
                }
            ]
        )

    put("arn:aws:iam::123456789012:role/someone-else")
    put(runtime.arn("ReconcilerRole"))  # our own calls are filtered out
    messages = runtime.clients.sqs.receive_message(
        QueueUrl=runtime.ref("WorkQueue"), MaxNumberOfMessages=10
    ).get("Messages", [])
    callers = [json.loads(m["Body"])["detail"]["userIdentity"]["arn"] for m in messages]
    assert callers == ["arn:aws:iam::123456789012:role/someone-else"]
