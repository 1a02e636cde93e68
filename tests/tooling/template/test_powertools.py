"""The Powertools release a deployment gets is the release the tests run against: bundled in
the stack's own layer by default (every region and partition), AWS's public layer as an
option, or a layer the deployer names."""

from __future__ import annotations

import re
import tomllib
from importlib.metadata import requires, version
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from sg_reconciler_tools.local.stack import read_template, translate

ROOT = Path(__file__).resolve().parents[3]
PUBLIC = "{{resolve:ssm:/aws/service/powertools/python/arm64/python3.13/${PowertoolsVersion}}}"
GIVEN = "arn:aws:lambda:eu-west-1:123456789012:layer:my-powertools:7"


def pinned(lines: list[str], package: str) -> list[str]:
    return [line for line in lines if re.match(rf"{package}(\[|==)", line)]


def test_the_bundled_and_public_layers_are_the_release_the_tests_pin() -> None:
    template = read_template(ROOT / "template.yaml")
    release = template["Parameters"]["PowertoolsVersion"]["Default"]
    dependencies = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    requirements = [
        line.strip()
        for line in (ROOT / "powertools" / "requirements.txt").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    for package in ("aws-lambda-powertools", "pydantic", "boto3"):
        assert pinned(requirements, package), f"{package}: not in the layer's requirements"
        assert pinned(requirements, package) == pinned(dependencies, package), package
    # every package of the layer at the version the tests ran with, nothing left floating
    for line in requirements:
        name, _, exact = re.sub(r"\[.*\]", "", line).partition("==")
        assert exact, f"{line}: not pinned"
        assert version(name) == exact, f"{name}: layer {exact}, tests {version(name)}"
    assert pinned(requirements, "aws-lambda-powertools") == [
        f"aws-lambda-powertools[tracer,parser]=={release}"
    ]
    assert version("aws-lambda-powertools") == release


def test_the_bundled_layer_pins_everything_its_packages_need() -> None:
    """The closure of the layer's packages (their requirements on Lambda's python3.13 Linux,
    with the extras asked for) is pinned, so `sam build` resolves nothing on its own."""
    lines = [
        line.strip()
        for line in (ROOT / "powertools" / "requirements.txt").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    wanted = [Requirement(line) for line in lines]
    names = {canonicalize_name(r.name) for r in wanted}
    lambda_python = {"python_version": "3.13", "sys_platform": "linux", "platform_system": "Linux"}
    for top in wanted:
        for text in requires(top.name) or []:
            needed = Requirement(text)
            for extra in {"", *top.extras}:
                if needed.marker is None or needed.marker.evaluate(
                    {**lambda_python, "extra": extra}
                ):
                    assert canonicalize_name(needed.name) in names, f"{top.name} needs {text}"
                    break


def test_the_bundled_layer_is_built_for_the_functions_runtime_and_architecture() -> None:
    template = read_template(ROOT / "template.yaml")
    function = template["Globals"]["Function"]
    layer = template["Resources"]["PowertoolsLibrary"]
    assert layer["Type"] == "AWS::Serverless::LayerVersion"
    assert layer["Metadata"] == {
        "BuildMethod": function["Runtime"],
        "BuildArchitecture": function["Architectures"][0],
    }
    assert layer["Properties"]["ContentUri"] == "powertools/"
    assert layer["Properties"]["CompatibleRuntimes"] == [function["Runtime"]]
    assert layer["Properties"]["CompatibleArchitectures"] == function["Architectures"]
    assert template["Parameters"]["PowertoolsLayer"]["Default"] == "bundled"


# Each choice, the template translated by SAM and its conditions evaluated as CloudFormation
# does, down to the layers each Lambda function gets --------------------------------------


def holds(expression: Any, conditions: dict[str, Any], parameters: dict[str, str]) -> bool:
    """A condition of the template (Fn::Equals, Fn::Not, Fn::And, Fn::Or, Condition)."""
    (function, argument), *_ = expression.items()
    if function == "Condition":
        return holds(conditions[argument], conditions, parameters)
    if function == "Fn::Not":
        return not holds(argument[0], conditions, parameters)
    if function == "Fn::And":
        return all(holds(a, conditions, parameters) for a in argument)
    if function == "Fn::Or":
        return any(holds(a, conditions, parameters) for a in argument)
    if function == "Fn::Equals":
        left, right = (parameters[v["Ref"]] if isinstance(v, dict) else str(v) for v in argument)
        return left == right
    raise AssertionError(f"unexpected condition function {function}")


def resolved(value: Any, truth: dict[str, bool], parameters: dict[str, str]) -> Any:
    """`value` with every Fn::If chosen by `truth` and every Ref to a parameter replaced."""
    if isinstance(value, dict) and set(value) == {"Fn::If"}:
        name, when_true, when_false = value["Fn::If"]
        return resolved(when_true if truth[name] else when_false, truth, parameters)
    if isinstance(value, dict) and value.get("Ref") in parameters:
        return parameters[value["Ref"]]
    if isinstance(value, list):
        return [resolved(v, truth, parameters) for v in value]
    return value


def deployed_layers(parameters: dict[str, str]) -> tuple[Any, bool]:
    """The Powertools layer every function gets with these parameters, and whether the stack
    creates the bundled layer."""
    template = read_template(ROOT / "template.yaml")
    for resource in template["Resources"].values():
        kind, properties = resource["Type"], resource.setdefault("Properties", {})
        if kind == "AWS::Serverless::Function":
            properties["CodeUri"] = "s3://bucket/code.zip"  # no packaging needed to translate
        elif kind == "AWS::Serverless::LayerVersion":
            properties["ContentUri"] = "s3://bucket/layer.zip"
        elif kind == "AWS::Serverless::StateMachine":
            properties["DefinitionUri"] = "s3://bucket/apply.asl.json"
    translated = translate(template, parameters, region="eu-west-1", account_id="123456789012")
    values = {
        name: parameters.get(name, str(declared.get("Default", "")))
        for name, declared in translated["Parameters"].items()
    }
    conditions = translated["Conditions"]
    truth = {name: holds(c, conditions, values) for name, c in conditions.items()}
    resources = translated["Resources"]
    bundled = [
        logical_id
        for logical_id, resource in resources.items()
        if logical_id.startswith("PowertoolsLibrary")
        and resource["Type"] == "AWS::Lambda::LayerVersion"
        and truth[resource["Condition"]]
    ]
    layers = [
        resolved(resource["Properties"]["Layers"], truth, values)
        for resource in resources.values()
        if resource["Type"] == "AWS::Lambda::Function"
    ]
    assert len(layers) == 10 and all(each == layers[0] for each in layers), "the same layers"
    powertools, library = layers[0]
    assert library["Ref"].startswith("ReconcilerLibrary")
    return powertools, bool(bundled)


@pytest.mark.parametrize(
    ("parameters", "layer", "creates_bundled"),
    [
        ({}, "PowertoolsLibrary", True),
        ({"PowertoolsLayer": "bundled"}, "PowertoolsLibrary", True),
        ({"PowertoolsLayer": "public"}, PUBLIC, False),
        ({"PowertoolsLayerArn": GIVEN}, GIVEN, False),
        ({"PowertoolsLayer": "public", "PowertoolsLayerArn": GIVEN}, GIVEN, False),
    ],
    ids=["default", "bundled", "public", "given", "given-over-public"],
)
def test_each_choice_gives_every_function_one_powertools_layer(
    parameters: dict[str, str], layer: str, creates_bundled: bool
) -> None:
    chosen, bundled = deployed_layers(parameters)
    if layer == "PowertoolsLibrary":
        assert chosen["Ref"].startswith("PowertoolsLibrary")
    elif layer == PUBLIC:
        assert chosen == {"Fn::Sub": PUBLIC}
    else:
        assert chosen == layer
    assert bundled is creates_bundled
