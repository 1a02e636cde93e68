"""Every function logs to a group the stack owns under a name Lambda never creates itself,
so a stack whose functions already ran (Lambda then made /aws/lambda/<function>) updates."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sg_reconciler_tools.local.stack import read_template, translate

ROOT = Path(__file__).resolve().parents[3]


def functions(document: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    return {
        name: resource["Properties"]
        for name, resource in document["Resources"].items()
        if resource["Type"] == kind
    }


def test_each_function_logs_to_its_own_stack_named_group() -> None:
    template = read_template(ROOT / "template.yaml")
    resources = template["Resources"]
    found = functions(template, "AWS::Serverless::Function")
    assert len(found) == 10  # the fleet reporter included (deployed with FleetEventBusArn)
    groups = set()
    for name, properties in found.items():
        group = properties["LoggingConfig"]["LogGroup"]["Ref"]
        groups.add(group)
        log_group = resources[group]
        assert log_group["Type"] == "AWS::Logs::LogGroup"
        assert log_group["DeletionPolicy"] == "Delete"
        assert log_group["Properties"]["RetentionInDays"] == {"Ref": "LogRetentionDays"}
        log_name = log_group["Properties"]["LogGroupName"]["Fn::Sub"]
        # A function name cannot hold "/" (Lambda's CreateFunction pattern), so Lambda's own
        # /aws/lambda/<function> can never be this name: no AlreadyExists on an update.
        assert log_name == f"/aws/lambda/${{AWS::StackName}}/{name}"
        assert f"${{{name}}}" not in log_name
    assert len(groups) == len(found)  # one group per function


def test_the_transform_passes_the_logging_config_to_each_lambda_function() -> None:
    template = read_template(ROOT / "template.yaml")
    for properties in functions(template, "AWS::Serverless::Function").values():
        properties["CodeUri"] = "s3://bucket/code.zip"  # no packaging needed to translate
    for resource in template["Resources"].values():
        if resource["Type"] == "AWS::Serverless::LayerVersion":
            resource["Properties"]["ContentUri"] = "s3://bucket/layer.zip"
        if resource["Type"] == "AWS::Serverless::StateMachine":
            resource["Properties"]["DefinitionUri"] = "s3://bucket/apply.asl.json"
    translated = translate(template, {}, region="us-east-1", account_id="123456789012")
    lambdas = functions(translated, "AWS::Lambda::Function")
    assert len(lambdas) == 10
    for name, properties in lambdas.items():
        assert properties["LoggingConfig"] == {"LogGroup": {"Ref": f"{name}Logs"}}
