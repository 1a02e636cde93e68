"""Each workaround of `cfn_workarounds`: what moto's CloudFormation does alone, and the fix.

Every "moto alone" test pins a gap of moto 5.2.5; when an upgrade closes one, its test
fails, and the workaround can go.
"""

from __future__ import annotations

import json
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, cast

import pytest
from sg_reconciler_tools.local import cfn_workarounds, moto_hooks
from sg_reconciler_tools.local.deployment import session
from sg_reconciler_tools.local.moto_hooks import LambdaResult
from sg_reconciler_tools.local.stack import TemplateError

REGION = "eu-west-1"
STACK = "st"
ROLE_POLICY = {
    "Version": "2012-10-17",
    "Statement": [
        {"Effect": "Allow", "Principal": {"Service": "lambda.amazonaws.com"}, "Action": "*"}
    ],
}
PASS = {"StartAt": "P", "States": {"P": {"Type": "Pass", "Result": "${Value}", "End": True}}}


def client(service: str) -> Any:
    return cast(Any, session(REGION)).client(service)


@dataclass
class Cloud:
    """A started mock, its clients, and the Lambda invocations it made."""

    cloudformation: Any = field(default_factory=lambda: client("cloudformation"))
    s3: Any = field(default_factory=lambda: client("s3"))
    sqs: Any = field(default_factory=lambda: client("sqs"))
    sfn: Any = field(default_factory=lambda: client("stepfunctions"))
    lambda_: Any = field(default_factory=lambda: client("lambda"))
    events: Any = field(default_factory=lambda: client("events"))
    ssm: Any = field(default_factory=lambda: client("ssm"))
    dynamodb: Any = field(default_factory=lambda: client("dynamodb"))
    iam: Any = field(default_factory=lambda: client("iam"))
    invoked: list[tuple[str, Any]] = field(default_factory=list)

    def create(self, resources: dict[str, Any], **template: Any) -> dict[str, Any]:
        """Create stack `st` from the resources; returns DescribeStacks' stack."""
        body = {"Resources": resources, **template}
        with cfn_workarounds.quiet_unsupported_resources():
            self.cloudformation.create_stack(
                StackName=STACK, TemplateBody=json.dumps(body), Capabilities=["CAPABILITY_IAM"]
            )
        (stack,) = self.cloudformation.describe_stacks(StackName=STACK)["Stacks"]
        return dict(stack)

    def update(self, resources: dict[str, Any]) -> dict[str, Any]:
        """Update stack `st` to the resources; returns DescribeStacks' stack."""
        with cfn_workarounds.quiet_unsupported_resources():
            self.cloudformation.update_stack(
                StackName=STACK,
                TemplateBody=json.dumps({"Resources": resources}),
                Capabilities=["CAPABILITY_IAM"],
            )
        (stack,) = self.cloudformation.describe_stacks(StackName=STACK)["Stacks"]
        return dict(stack)

    def physical_id(self, logical_id: str) -> str:
        resources = self.cloudformation.describe_stack_resources(StackName=STACK)
        (found,) = [
            r["PhysicalResourceId"]
            for r in resources["StackResources"]
            if r.get("LogicalResourceId") == logical_id
        ]
        return str(found)

    def function(self, name: str) -> str:
        role = self.iam.create_role(
            RoleName=f"{name}-role", AssumeRolePolicyDocument=json.dumps(ROLE_POLICY)
        )["Role"]["Arn"]
        created = self.lambda_.create_function(
            FunctionName=name,
            Runtime="python3.13",
            Role=role,
            Handler="app.handler",
            Code={"ZipFile": b"local"},
        )
        return str(created["FunctionArn"])

    def code_object(self) -> dict[str, str]:
        self.s3.create_bucket(
            Bucket="code", CreateBucketConfiguration={"LocationConstraint": REGION}
        )
        self.s3.put_object(Bucket="code", Key="fn.zip", Body=b"PK\x05\x06" + b"\0" * 18)
        return {"S3Bucket": "code", "S3Key": "fn.zip"}

    def fetch(self, bucket: str, key: str) -> bytes:
        return bytes(self.s3.get_object(Bucket=bucket, Key=key)["Body"].read())


@pytest.fixture
def cloud() -> Iterator[Cloud]:
    with moto_hooks.new_mock():
        cloud = Cloud()

        def dispatch(name: str, payload: bytes) -> LambdaResult:
            cloud.invoked.append((name, json.loads(payload)))
            return LambdaResult(b"{}")

        with moto_hooks.patch_lambda_invoke(dispatch):
            yield cloud


def machine(definition: Any, **properties: Any) -> dict[str, Any]:
    return {
        "Type": "AWS::StepFunctions::StateMachine",
        "Properties": {"RoleArn": "arn:aws:iam::123456789012:role/r", **definition, **properties},
    }


# AWS::SSM::Parameter without a Name --------------------------------------------------------

PARAMETER = {"Type": "AWS::SSM::Parameter", "Properties": {"Type": "String", "Value": "v"}}


def test_moto_alone_cannot_create_an_unnamed_ssm_parameter(cloud: Cloud) -> None:
    """moto's CloudFormation cannot create an SSM parameter without a Name; when it can,
    `name_ssm_parameters` can go.
    """
    with pytest.raises(AttributeError):
        cloud.create({"Policy": PARAMETER})


def test_unnamed_ssm_parameters_get_the_stack_and_logical_id(cloud: Cloud) -> None:
    template: dict[str, Any] = {"Resources": {"Policy": json.loads(json.dumps(PARAMETER))}}
    cfn_workarounds.name_ssm_parameters(template, STACK)
    cloud.create(template["Resources"])
    assert cloud.ssm.get_parameter(Name="st-Policy")["Parameter"]["Value"] == "v"


# State machines: the backend, DefinitionS3Location, DefinitionSubstitutions ---------------


def test_moto_alone_creates_a_stacks_state_machine_where_the_api_cannot_see_it(
    cloud: Cloud,
) -> None:
    """moto's CloudFormation creates a state machine where the Step Functions API does
    not look; when the API finds it, `create_state_machines_in_the_executing_backend`
    can go.
    """
    stack = cloud.create({"Machine": machine({"DefinitionString": json.dumps(PASS)})})
    assert stack["StackStatus"] == "CREATE_COMPLETE"
    assert cloud.sfn.list_state_machines()["stateMachines"] == []
    with pytest.raises(cloud.sfn.exceptions.StateMachineDoesNotExist):
        cloud.sfn.describe_state_machine(stateMachineArn=cloud.physical_id("Machine"))


def test_stack_state_machines_are_created_where_executions_run(cloud: Cloud) -> None:
    with cfn_workarounds.create_state_machines_in_the_executing_backend() as patch:
        cloud.create({"Machine": machine({"DefinitionString": json.dumps(PASS)})})
        arn = cloud.physical_id("Machine")
        execution = cloud.sfn.start_execution(stateMachineArn=arn, name="x")["executionArn"]
        for _ in range(500):
            described = cloud.sfn.describe_execution(executionArn=execution)
            if described["status"] != "RUNNING":
                break
            time.sleep(0.01)
    assert not patch.active
    assert described["status"] == "SUCCEEDED"
    assert "${Value}" in described["output"]


def test_a_stacks_state_machine_keeps_its_type(cloud: Cloud) -> None:
    express = machine({"DefinitionString": json.dumps(PASS)}, StateMachineType="EXPRESS")
    with cfn_workarounds.create_state_machines_in_the_executing_backend():
        cloud.create({"Machine": express})
        described = cloud.sfn.describe_state_machine(stateMachineArn=cloud.physical_id("Machine"))
    assert described["type"] == "EXPRESS"


SUCCEED = {"StartAt": "S", "States": {"S": {"Type": "Succeed"}}}


def test_moto_alone_cannot_update_a_stacks_state_machine_where_executions_run(
    cloud: Cloud,
) -> None:
    """moto's stack update looks for the state machine where executions do not run; when
    it updates that one, `update_state_machines_in_the_executing_backend` can go.
    """
    with cfn_workarounds.create_state_machines_in_the_executing_backend():
        cloud.create({"Machine": machine({"DefinitionString": json.dumps(PASS)})})
        with pytest.raises(Exception, match="StateMachineDoesNotExist"):
            cloud.update({"Machine": machine({"DefinitionString": json.dumps(SUCCEED)})})


def test_a_stack_update_changes_the_state_machine_in_place(cloud: Cloud) -> None:
    with (
        cfn_workarounds.create_state_machines_in_the_executing_backend(),
        cfn_workarounds.update_state_machines_in_the_executing_backend() as patch,
    ):
        cloud.create({"Machine": machine({"DefinitionString": json.dumps(PASS)})})
        arn = cloud.physical_id("Machine")
        stack = cloud.update({"Machine": machine({"DefinitionString": json.dumps(SUCCEED)})})
        described = cloud.sfn.describe_state_machine(stateMachineArn=arn)
    assert not patch.active
    assert stack["StackStatus"] == "UPDATE_COMPLETE"
    assert cloud.physical_id("Machine") == arn  # the same machine, as AWS keeps it
    assert json.loads(described["definition"]) == SUCCEED


def layer_and_function(cloud: Cloud, memory: int) -> dict[str, Any]:
    code = {"S3Bucket": "code", "S3Key": "fn.zip"}
    if memory == 128:  # the first template of a test: its code object and role
        cloud.code_object()
        cloud.iam.create_role(RoleName="fn-role", AssumeRolePolicyDocument=json.dumps(ROLE_POLICY))
    role = cloud.iam.get_role(RoleName="fn-role")["Role"]["Arn"]
    return {
        "Layer": {
            "Type": "AWS::Lambda::LayerVersion",
            "Properties": {"Content": code, "CompatibleRuntimes": ["python3.13"]},
        },
        "Function": {
            "Type": "AWS::Lambda::Function",
            "Properties": {
                "Runtime": "python3.13",
                "Handler": "app.handler",
                "Role": role,
                "Code": code,
                "MemorySize": memory,
                "Layers": [{"Ref": "Layer"}],
            },
        },
    }


def test_moto_alone_cannot_update_a_function_that_names_a_stack_layer(cloud: Cloud) -> None:
    """moto resolves a Ref to a layer version to its model object, and a stack update of
    a function naming it fails; when the Ref is the ARN, `ref_layer_versions_as_arns`
    can go.
    """
    cloud.create(layer_and_function(cloud, 128))
    with pytest.raises(Exception, match="has no attribute 'replace'"):
        cloud.update(layer_and_function(cloud, 256))


def test_a_ref_to_a_layer_version_is_its_arn(cloud: Cloud) -> None:
    with cfn_workarounds.ref_layer_versions_as_arns() as patch:
        cloud.create(layer_and_function(cloud, 128))
        layer = cloud.physical_id("Layer")
        stack = cloud.update(layer_and_function(cloud, 256))
        function = cloud.lambda_.get_function(FunctionName=cloud.physical_id("Function"))
    assert not patch.active
    assert layer.startswith("arn:aws:lambda:") and layer.endswith(":1")
    assert stack["StackStatus"] == "UPDATE_COMPLETE"
    assert [entry["Arn"] for entry in function["Configuration"]["Layers"]] == [layer]


def test_moto_alone_ignores_a_definition_s3_location(cloud: Cloud) -> None:
    """moto ignores a state machine's DefinitionS3Location; when it reads it,
    `inline_state_machine_definitions` can go.
    """
    cloud.s3.create_bucket(Bucket="defs", CreateBucketConfiguration={"LocationConstraint": REGION})
    cloud.s3.put_object(Bucket="defs", Key="m.asl.json", Body=json.dumps(PASS).encode())
    location = {"DefinitionS3Location": {"Bucket": "defs", "Key": "m.asl.json"}}
    # In the executing backend, which validates definitions: an empty one is refused
    with (
        cfn_workarounds.create_state_machines_in_the_executing_backend(),
        pytest.raises(Exception, match="ASLParserException"),
    ):
        cloud.create({"Machine": machine(location)})


def test_a_definition_s3_location_becomes_the_definition_string(cloud: Cloud) -> None:
    cloud.s3.create_bucket(Bucket="defs", CreateBucketConfiguration={"LocationConstraint": REGION})
    cloud.s3.put_object(Bucket="defs", Key="m.asl.json", Body=json.dumps(PASS).encode())
    template = {
        "Resources": {"Machine": machine({"DefinitionS3Location": {"Bucket": "defs", "Key": "m"}})}
    }
    template["Resources"]["Machine"]["Properties"]["DefinitionS3Location"]["Key"] = "m.asl.json"
    cfn_workarounds.inline_state_machine_definitions(template, cloud.fetch)
    with cfn_workarounds.create_state_machines_in_the_executing_backend():
        cloud.create(template["Resources"])
        described = cloud.sfn.describe_state_machine(stateMachineArn=cloud.physical_id("Machine"))
    assert json.loads(described["definition"]) == PASS


SUBSTITUTED = {
    "Queue": {"Type": "AWS::SQS::Queue"},
    "Machine": machine(
        {"DefinitionString": json.dumps(PASS)},
        DefinitionSubstitutions={"Value": {"Fn::GetAtt": ["Queue", "Arn"]}},
    ),
}


def test_moto_alone_ignores_definition_substitutions(cloud: Cloud) -> None:
    """moto ignores DefinitionSubstitutions; when it applies them,
    `substitute_state_machine_definitions` can go.
    """
    with cfn_workarounds.create_state_machines_in_the_executing_backend():
        cloud.create(json.loads(json.dumps(SUBSTITUTED)))
        described = cloud.sfn.describe_state_machine(stateMachineArn=cloud.physical_id("Machine"))
    assert json.loads(described["definition"])["States"]["P"]["Result"] == "${Value}"


def test_definition_substitutions_are_resolved_by_the_engine(cloud: Cloud) -> None:
    template: dict[str, Any] = {"Resources": json.loads(json.dumps(SUBSTITUTED))}
    cfn_workarounds.substitute_state_machine_definitions(template)
    properties = template["Resources"]["Machine"]["Properties"]
    assert "DefinitionSubstitutions" not in properties
    with cfn_workarounds.create_state_machines_in_the_executing_backend():
        cloud.create(template["Resources"])
        described = cloud.sfn.describe_state_machine(stateMachineArn=cloud.physical_id("Machine"))
        queue = cloud.sqs.get_queue_attributes(
            QueueUrl=cloud.physical_id("Queue"), AttributeNames=["QueueArn"]
        )["Attributes"]["QueueArn"]
    assert json.loads(described["definition"])["States"]["P"]["Result"] == queue


def test_substitutions_apply_to_text_numbers_and_sams_joined_definitions() -> None:
    wait = '{"StartAt": "W", "States": {"W": {"Type": "Wait", "Seconds": ${Seconds}, "End": true}}}'
    lines = ["{", '"Comment": "${Owner}"', "}"]
    template: dict[str, Any] = {
        "Resources": {
            "Text": machine({"DefinitionString": wait}, DefinitionSubstitutions={"Seconds": 5}),
            "Joined": machine(
                {"DefinitionString": {"Fn::Join": ["\n", lines]}},
                DefinitionSubstitutions={"Owner": {"Ref": "Owner"}},
            ),
        }
    }
    cfn_workarounds.substitute_state_machine_definitions(template)
    text = template["Resources"]["Text"]["Properties"]["DefinitionString"]
    joined = template["Resources"]["Joined"]["Properties"]["DefinitionString"]
    assert text == {"Fn::Join": ["", [wait.split("${")[0], 5, ', "End": true}}}']]}
    assert joined == {"Fn::Join": ["", ['{\n"Comment": "', {"Ref": "Owner"}, '"\n}']]}


def test_a_placeholder_without_a_substitution_is_refused() -> None:
    template = {"Resources": {"M": machine({"DefinitionString": json.dumps(PASS)})}}
    with pytest.raises(TemplateError, match=r"M: no DefinitionSubstitutions entry for \$\{Value\}"):
        cfn_workarounds.substitute_state_machine_definitions(template)


# SQS event-source mappings ---------------------------------------------------------------


def queue_and_mapping(function_arn: str) -> dict[str, Any]:
    return {
        "Queue": {"Type": "AWS::SQS::Queue"},
        "Mapping": {
            "Type": "AWS::Lambda::EventSourceMapping",
            "Properties": {
                "EventSourceArn": {"Fn::GetAtt": ["Queue", "Arn"]},
                "FunctionName": function_arn,
                "BatchSize": 10,
            },
        },
    }


def test_moto_alone_hands_each_message_to_the_mapped_function_at_once(cloud: Cloud) -> None:
    """moto hands each message to an enabled mapping's function as it is sent; when it
    polls in batches, `disable_sqs_event_source_mappings` can go.
    """
    cloud.create(queue_and_mapping(cloud.function("planner")))
    queue = cloud.physical_id("Queue")
    for body in ("one", "two"):
        cloud.sqs.send_message(QueueUrl=queue, MessageBody=body)

    # One invocation per message, during SendMessage, and the queue is empty
    assert [[r["body"] for r in event["Records"]] for _, event in cloud.invoked] == [
        ["one"],
        ["two"],
    ]
    assert cloud.sqs.receive_message(QueueUrl=queue).get("Messages", []) == []


def test_sqs_mappings_are_created_disabled_so_the_queue_keeps_its_messages(cloud: Cloud) -> None:
    template: dict[str, Any] = {"Resources": queue_and_mapping(cloud.function("planner"))}
    cfn_workarounds.disable_sqs_event_source_mappings(template)
    cloud.create(template["Resources"])
    queue = cloud.physical_id("Queue")
    cloud.sqs.send_message(QueueUrl=queue, MessageBody="one")

    assert cloud.invoked == []
    messages = cloud.sqs.receive_message(QueueUrl=queue)["Messages"]
    assert [m["Body"] for m in messages] == ["one"]
    (mapping,) = cloud.lambda_.list_event_source_mappings()["EventSourceMappings"]
    assert mapping["State"] == "Disabled"


# Lambda environment values -----------------------------------------------------------------


def test_moto_alone_keeps_a_number_parameter_as_a_number_in_the_environment(
    cloud: Cloud,
) -> None:
    """moto keeps a Number parameter a number in a function's environment; when it
    passes text, `environment_strings` can go.
    """
    function = {
        "Type": "AWS::Lambda::Function",
        "Properties": {
            "Code": cloud.code_object(),
            "Handler": "app.handler",
            "Runtime": "python3.13",
            "Role": {"Fn::GetAtt": ["Role", "Arn"]},
            "Environment": {"Variables": {"N": {"Ref": "N"}, "S": "text"}},
        },
    }
    role = {"Type": "AWS::IAM::Role", "Properties": {"AssumeRolePolicyDocument": ROLE_POLICY}}
    cloud.create(
        {"Role": role, "Fn": function}, Parameters={"N": {"Type": "Number", "Default": 1000}}
    )
    variables = cloud.lambda_.get_function_configuration(FunctionName=cloud.physical_id("Fn"))[
        "Environment"
    ]["Variables"]

    assert variables == {"N": 1000, "S": "text"}
    assert cfn_workarounds.environment_strings(variables) == {"N": "1000", "S": "text"}


def test_environment_strings_spell_values_as_cloudformation_does() -> None:
    assert cfn_workarounds.environment_strings({"B": True, "F": 0.5, "L": [1]}) == {
        "B": "true",
        "F": "0.5",
        "L": "[1]",
    }


# EventBridge rules with Lambda targets -----------------------------------------------------


def rules(function_arn: str) -> dict[str, Any]:
    def rule(state: str) -> dict[str, Any]:
        return {
            "Type": "AWS::Events::Rule",
            "Properties": {
                "State": state,
                "EventPattern": {"source": ["demo"], "detail": {"n": [{"Ref": "N"}]}},
                "Targets": [{"Id": "fn", "Arn": function_arn}],
            },
        }

    return {"On": rule("ENABLED"), "Off": rule("DISABLED")}


def test_moto_alone_cannot_deliver_to_a_rules_lambda_target(cloud: Cloud) -> None:
    """moto's EventBridge cannot deliver to a Lambda target; when it can,
    `lambda_rule_targets` can go.
    """
    cloud.create(
        rules(cloud.function("janitor")), Parameters={"N": {"Type": "String", "Default": "1"}}
    )
    event = {"Source": "demo", "DetailType": "t", "Detail": json.dumps({"n": "1"})}
    with pytest.raises(NotImplementedError, match="Expr not defined"):
        cloud.events.put_events(Entries=[event])
    assert cloud.invoked == []


def test_the_runtime_reads_each_rules_lambda_targets_and_resolved_pattern(cloud: Cloud) -> None:
    cloud.cloudformation.create_stack(
        StackName=STACK,
        TemplateBody=json.dumps(
            {
                "Parameters": {"N": {"Type": "String"}},
                "Resources": rules(cloud.function("janitor")),
            }
        ),
        Parameters=[{"ParameterKey": "N", "ParameterValue": "7"}],
    )
    names = [cloud.physical_id("On"), cloud.physical_id("Off")]

    assert cfn_workarounds.lambda_rule_targets(cloud.events, names) == [
        ("janitor", {"source": ["demo"], "detail": {"n": ["7"]}})
    ]


def pattern_rules() -> dict[str, Any]:
    def rule(state: str, queue: str) -> dict[str, Any]:
        return {
            "Type": "AWS::Events::Rule",
            "Properties": {
                "State": state,
                "EventPattern": {"source": ["demo"]},
                "Targets": [{"Id": "q", "Arn": {"Fn::GetAtt": [queue, "Arn"]}}],
            },
        }

    return {
        "OnQueue": {"Type": "AWS::SQS::Queue"},
        "OffQueue": {"Type": "AWS::SQS::Queue"},
        "On": rule("ENABLED", "OnQueue"),
        "Off": rule("DISABLED", "OffQueue"),
    }


def schedule_rule(function_arn: str) -> dict[str, Any]:
    """What SAM makes of a function's `Schedule` event: a rule without a pattern."""
    return {
        "Type": "AWS::Events::Rule",
        "Properties": {
            "ScheduleExpression": "rate(15 minutes)",
            "Targets": [{"Id": "fn", "Arn": function_arn}],
        },
    }


EVENT = {"Source": "demo", "DetailType": "t", "Detail": "{}"}


def received(cloud: Cloud, queue: str) -> list[str]:
    messages = cloud.sqs.receive_message(QueueUrl=cloud.physical_id(queue)).get("Messages", [])
    return [json.loads(m["Body"])["source"] for m in messages]


def test_moto_alone_offers_every_event_to_schedule_and_disabled_rules(cloud: Cloud) -> None:
    """moto offers every event to schedule rules and disabled rules; when it matches as
    EventBridge does, `match_events_as_eventbridge` can go.
    """
    cloud.create({**pattern_rules(), "Schedule": schedule_rule(cloud.function("planner"))})
    with pytest.raises(NotImplementedError):  # the schedule rule took it, for its function
        cloud.events.put_events(Entries=[EVENT])
    cloud.cloudformation.delete_stack(StackName=STACK)

    cloud.create(pattern_rules())
    cloud.events.put_events(Entries=[EVENT])
    assert received(cloud, "OffQueue") == ["demo"]  # the disabled rule delivered it


def test_events_reach_only_enabled_rules_with_a_matching_pattern(cloud: Cloud) -> None:
    cloud.create({**pattern_rules(), "Schedule": schedule_rule(cloud.function("planner"))})
    with cfn_workarounds.match_events_as_eventbridge():
        reply = cloud.events.put_events(Entries=[EVENT])

    assert reply["FailedEntryCount"] == 0
    assert received(cloud, "OnQueue") == ["demo"]
    assert received(cloud, "OffQueue") == []
    assert cloud.invoked == []


# DynamoDB time to live ---------------------------------------------------------------------

TABLE = {
    "Type": "AWS::DynamoDB::Table",
    "Properties": {
        "BillingMode": "PAY_PER_REQUEST",
        "AttributeDefinitions": [{"AttributeName": "pk", "AttributeType": "S"}],
        "KeySchema": [{"AttributeName": "pk", "KeyType": "HASH"}],
        "TimeToLiveSpecification": {"AttributeName": "expires_at", "Enabled": True},
    },
}


def test_moto_alone_creates_a_table_without_its_time_to_live(cloud: Cloud) -> None:
    """moto's CloudFormation creates a table without its TimeToLiveSpecification; when
    it applies it, `apply_table_time_to_live` can go.
    """
    cloud.create({"Table": TABLE})
    ttl = cloud.dynamodb.describe_time_to_live(TableName=cloud.physical_id("Table"))
    assert ttl["TimeToLiveDescription"] == {"TimeToLiveStatus": "DISABLED"}


def test_a_tables_time_to_live_is_applied(cloud: Cloud) -> None:
    with cfn_workarounds.apply_table_time_to_live():
        cloud.create({"Table": TABLE})
    ttl = cloud.dynamodb.describe_time_to_live(TableName=cloud.physical_id("Table"))
    assert ttl["TimeToLiveDescription"] == {
        "TimeToLiveStatus": "ENABLED",
        "AttributeName": "expires_at",
    }


# IAM role inline policies ------------------------------------------------------------------


def role_with_policy() -> dict[str, Any]:
    statement = {"Effect": "Allow", "Action": "sqs:*", "Resource": {"Fn::GetAtt": ["Q", "Arn"]}}
    return {
        "Q": {"Type": "AWS::SQS::Queue"},
        "Role": {
            "Type": "AWS::IAM::Role",
            "Properties": {
                "AssumeRolePolicyDocument": ROLE_POLICY,
                "Policies": [
                    {
                        "PolicyName": "p",
                        "PolicyDocument": {"Version": "2012-10-17", "Statement": [statement]},
                    }
                ],
            },
        },
    }


def role_policy(cloud: Cloud) -> Any:
    return cloud.iam.get_role_policy(RoleName=cloud.physical_id("Role"), PolicyName="p")[
        "PolicyDocument"
    ]


def test_moto_alone_answers_a_stacks_role_policy_with_a_python_repr(cloud: Cloud) -> None:
    """moto answers a stack role's inline policy with a Python repr; when it answers
    JSON, `serialize_role_policy_documents` can go.
    """
    cloud.create(role_with_policy())
    document = role_policy(cloud)
    assert isinstance(document, str) and document.startswith("{'Version'")
    with pytest.raises(ValueError):
        json.loads(document)


def test_role_policies_are_stored_as_json_with_intrinsics_resolved(cloud: Cloud) -> None:
    template: dict[str, Any] = {"Resources": role_with_policy()}
    cfn_workarounds.serialize_role_policy_documents(template)
    cloud.create(template["Resources"])
    document = role_policy(cloud)
    if isinstance(document, str):
        document = json.loads(document)
    (statement,) = document["Statement"]
    assert statement["Resource"].startswith("arn:aws:sqs:eu-west-1:123456789012:st-Q-")


# Template parsing --------------------------------------------------------------------------


def test_moto_alone_parses_a_json_template_with_the_pure_python_yaml_loader(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """moto parses a JSON template with the pure-Python YAML loader (0.4 s for ours);
    when it reads JSON as JSON, `parse_json_templates_as_json` can go.
    """
    from moto.cloudformation import models

    loaders: list[Any] = []
    original = models.yaml.load

    def load(stream: Any, Loader: Any) -> Any:
        loaders.append(Loader)
        return original(stream, Loader=Loader)

    monkeypatch.setattr(models.yaml, "load", load)
    models.Stack.parse_template(json.dumps({"Resources": {}}))
    assert loaders == [models.yaml.Loader]

    loaders.clear()
    with cfn_workarounds.parse_json_templates_as_json():
        parsed = models.Stack.parse_template(json.dumps({"Resources": {"A": {"Type": "T"}}}))
        from_yaml = models.Stack.parse_template("Resources:\n  A: {Type: T}\n")
    assert loaders == [models.yaml.Loader]  # only for the YAML body
    assert parsed == from_yaml == {"Resources": {"A": {"Type": "T"}}}


# The resources moto skips ------------------------------------------------------------------


def test_moto_skips_resources_it_has_no_model_for_and_says_so(cloud: Cloud) -> None:
    """moto warns for each resource type it skips, on every DescribeStackResources; when
    it is quiet, `quiet_unsupported_resources` can go.
    """
    policy = {
        "Type": "AWS::SQS::QueuePolicy",
        "Properties": {"Queues": [{"Ref": "Q"}], "PolicyDocument": {"Statement": []}},
    }
    body = json.dumps({"Resources": {"Q": {"Type": "AWS::SQS::Queue"}, "Policy": policy}})
    with warnings.catch_warnings(record=True) as loud:
        warnings.simplefilter("always")
        cloud.cloudformation.create_stack(StackName="loud", TemplateBody=body)
    with warnings.catch_warnings(record=True) as quiet:
        warnings.simplefilter("always")
        with cfn_workarounds.quiet_unsupported_resources():
            cloud.cloudformation.create_stack(StackName="quiet", TemplateBody=body)
            listed = cloud.cloudformation.describe_stack_resources(StackName="quiet")[
                "StackResources"
            ]

    assert any("AWS::SQS::QueuePolicy" in str(w.message) for w in loud)
    assert not [w for w in quiet if "not supported" in str(w.message)]
    assert [r.get("LogicalResourceId") for r in listed] == ["Q", None]


def test_prepare_applies_every_template_workaround() -> None:
    template: dict[str, Any] = {
        "Resources": {
            "P": json.loads(json.dumps(PARAMETER)),
            **queue_and_mapping("arn:aws:lambda:eu-west-1:123456789012:function:f"),
            "M": machine(
                {"DefinitionS3Location": {"Bucket": "b", "Key": "k"}},
                DefinitionSubstitutions={"Value": "v"},
            ),
            **role_with_policy(),
        }
    }
    cfn_workarounds.prepare(
        template, stack_name=STACK, fetch=lambda b, k: json.dumps(PASS).encode()
    )
    resources = template["Resources"]
    assert resources["P"]["Properties"]["Name"] == "st-P"
    assert resources["Mapping"]["Properties"]["Enabled"] is False
    assert json.loads(resources["M"]["Properties"]["DefinitionString"])["States"]["P"] == {
        "Type": "Pass",
        "Result": "v",
        "End": True,
    }
    assert set(resources["Role"]["Properties"]["Policies"][0]["PolicyDocument"]) == {
        "Fn::ToJsonString"
    }
