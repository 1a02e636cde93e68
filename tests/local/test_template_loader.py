"""Reading SAM templates: short tags, intrinsics, Globals, names and Refs by resource type."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sg_reconciler_tools.local.template import Template, TemplateError, load_yaml

FIXTURE = Path(__file__).parent / "fixtures" / "template.yaml"

TEMPLATE = """
Parameters:
  Stage: {Type: String, Default: dev}
  Zones: {Type: CommaDelimitedList, Default: "a,b"}
  NoDefault: {Type: String}
Mappings:
  Sizes: {dev: {memory: "256"}}
Conditions:
  IsDev: !Equals [!Ref Stage, dev]
  IsProd: !Not [!Condition IsDev]
  Both: !And [!Condition IsDev, !Or [!Condition IsProd, !Equals [a, a]]]
Globals:
  Function:
    Timeout: 10
    Environment: {Variables: {STAGE: !Ref Stage, SHARED: global}}
Resources:
  Fn:
    Type: AWS::Serverless::Function
    Properties:
      Handler: app.handler
      Environment: {Variables: {SHARED: own}}
  Named:
    Type: AWS::Serverless::Function
    Properties:
      FunctionName: !Sub "${AWS::StackName}-named-${Stage}"
  Queue: {Type: AWS::SQS::Queue}
  Fifo: {Type: AWS::SQS::Queue, Properties: {FifoQueue: true}}
  Machine: {Type: AWS::Serverless::StateMachine}
  Table: {Type: AWS::DynamoDB::Table}
  Role: {Type: AWS::IAM::Role}
  Alarm: {Type: AWS::CloudWatch::Alarm, Condition: IsProd}
  Loop: {Type: AWS::SQS::Queue, Properties: {QueueName: !GetAtt Loop.QueueName}}
"""


@pytest.fixture
def template(tmp_path: Path) -> Template:
    path = tmp_path / "template.yaml"
    path.write_text(TEMPLATE)
    return Template.load(path, stack_name="st", region="eu-west-1")


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ({"Ref": "Stage"}, "dev"),
        ({"Ref": "AWS::Region"}, "eu-west-1"),
        ({"Ref": "AWS::AccountId"}, "123456789012"),
        ({"Ref": "Fn"}, "st-Fn"),
        ({"Ref": "Table"}, "st-Table"),
        ({"Ref": "Queue"}, "https://sqs.eu-west-1.amazonaws.com/123456789012/st-Queue"),
        ({"Ref": "Machine"}, "arn:aws:states:eu-west-1:123456789012:stateMachine:st-Machine"),
        ({"Ref": "Named"}, "st-named-dev"),
        ({"Fn::GetAtt": ["Fn", "Arn"]}, "arn:aws:lambda:eu-west-1:123456789012:function:st-Fn"),
        ({"Fn::GetAtt": "Queue.Arn"}, "arn:aws:sqs:eu-west-1:123456789012:st-Queue"),
        ({"Fn::GetAtt": ["Queue", "QueueName"]}, "st-Queue"),
        ({"Fn::GetAtt": ["Role", "Arn"]}, "arn:aws:iam::123456789012:role/st-Role"),
        (
            {"Fn::GetAtt": ["Table", "Arn"]},
            "arn:aws:dynamodb:eu-west-1:123456789012:table/st-Table",
        ),
        (
            {"Fn::Sub": "${Fn.Arn}|${Stage}|${!Literal}"},
            "arn:aws:lambda:eu-west-1:123456789012:function:st-Fn|dev|${Literal}",
        ),
        ({"Fn::Sub": ["${A}-${Stage}", {"A": {"Ref": "Table"}}]}, "st-Table-dev"),
        ({"Fn::Join": ["/", ["a", {"Ref": "Stage"}]]}, "a/dev"),
        ({"Fn::Select": [1, {"Ref": "Zones"}]}, "b"),
        ({"Fn::Split": [",", "x,y"]}, ["x", "y"]),
        ({"Fn::If": ["IsDev", "yes", "no"]}, "yes"),
        ({"Fn::If": ["IsProd", "yes", "no"]}, "no"),
        ({"Fn::FindInMap": ["Sizes", {"Ref": "Stage"}, "memory"]}, "256"),
        ({"Fn::ToJsonString": {"a": [1]}}, '{"a":[1]}'),
        ({"k": {"Fn::If": ["IsProd", 1, {"Ref": "AWS::NoValue"}]}, "j": 2}, {"j": 2}),
        ([1, {"Ref": "AWS::NoValue"}, 2], [1, 2]),
    ],
    ids=lambda value: str(value)[:40],
)
def test_intrinsics_resolve(template: Template, expression: Any, expected: Any) -> None:
    assert template.resolve(expression) == expected


def test_conditions(template: Template) -> None:
    assert template.condition("IsDev") and template.condition("Both")
    assert not template.condition("IsProd")
    assert "Alarm" not in template.of_type("AWS::CloudWatch::Alarm")  # its condition is false


def test_globals_merge_into_serverless_functions(template: Template) -> None:
    properties = template.properties("Fn")
    assert properties["Timeout"] == 10
    assert template.resolve(properties["Environment"]) == {
        "Variables": {"STAGE": "dev", "SHARED": "own"}
    }
    assert "Timeout" not in template.properties("Table")


def test_names(template: Template) -> None:
    assert template.physical_name("Fifo") == "st-Fifo.fifo"
    with pytest.raises(TemplateError, match="depends on itself"):
        template.physical_name("Loop")


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ({"Ref": "Nope"}, "no such parameter or resource"),
        ({"Ref": "NoDefault"}, "has no Default"),
        ({"Fn::ImportValue": "x"}, "cannot be resolved locally"),
        ({"Fn::GetAtt": ["Fn", "Nope"]}, "not supported locally"),
    ],
)
def test_unresolvable_intrinsics_are_clear_errors(
    template: Template, expression: Any, message: str
) -> None:
    with pytest.raises(TemplateError, match=message):
        template.resolve(expression)


def test_parameters_given_win_over_defaults(tmp_path: Path) -> None:
    path = tmp_path / "template.yaml"
    path.write_text(TEMPLATE)
    loaded = Template.load(path, parameters={"Stage": "prod", "NoDefault": "x"})
    assert loaded.condition("IsProd")
    assert loaded.resolve({"Ref": "NoDefault"}) == "x"


def test_short_tags_become_long_form() -> None:
    document = load_yaml("a: !GetAtt X.Arn\nb: !Ref Y\nc: !Sub [x, {}]\nd: !Condition C\n")
    assert document == {
        "a": {"Fn::GetAtt": ["X", "Arn"]},
        "b": {"Ref": "Y"},
        "c": {"Fn::Sub": ["x", {}]},
        "d": {"Condition": "C"},
    }


def test_not_a_template(tmp_path: Path) -> None:
    path = tmp_path / "x.yaml"
    path.write_text("just: text\n")
    with pytest.raises(TemplateError, match="no Resources"):
        Template.load(path)


def test_the_fixture_template_loads() -> None:
    fixture = Template.load(FIXTURE)
    assert fixture.of_type("AWS::Serverless::Function") == ["StepsFunction", "ChecksFunction"]


def test_sam_implicit_roles_resolve() -> None:
    fixture = Template.load(FIXTURE, stack_name="st")
    # ChecksFunction and the state machines get the role SAM generates; StepsFunction has its own.
    assert fixture.resolve({"Fn::GetAtt": ["ChecksFunctionRole", "Arn"]}) == (
        "arn:aws:iam::123456789012:role/st-ChecksFunctionRole"
    )
    assert fixture.type_of("ApplyStateMachineRole") == "AWS::IAM::Role"
    with pytest.raises(TemplateError, match="StepsFunctionRole"):
        fixture.resolve({"Ref": "StepsFunctionRole"})
