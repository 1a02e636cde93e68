"""From a SAM template to CloudFormation: reading, packaging as `sam package`, translating."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path
from typing import Any

import pytest
from sg_reconciler_tools.local.stack import (
    TemplateError,
    content_key,
    package,
    read_template,
    translate,
    zip_directory,
)

FIXTURES = Path(__file__).parent / "fixtures"
FIXTURE = FIXTURES / "template.yaml"
REGION = "eu-west-1"
ACCOUNT = "123456789012"


class Bucket:
    """An in-memory stand-in for the artifact bucket."""

    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}

    def upload(self, name: str, content: bytes) -> str:
        key = content_key(name, content)
        self.objects[key] = content
        return f"s3://artifacts/{key}"

    def get(self, uri: str) -> bytes:
        return self.objects[uri.removeprefix("s3://artifacts/")]


def names_in(archive: bytes) -> list[str]:
    return zipfile.ZipFile(io.BytesIO(archive)).namelist()


def test_short_tags_become_long_form(tmp_path: Path) -> None:
    path = tmp_path / "template.yaml"
    path.write_text(
        "Resources: {}\na: !GetAtt X.Arn\nb: !Ref Y\nc: !Sub [x, {}]\nd: !Condition C\n"
    )
    document = read_template(path)
    assert {key: document[key] for key in "abcd"} == {
        "a": {"Fn::GetAtt": ["X", "Arn"]},
        "b": {"Ref": "Y"},
        "c": {"Fn::Sub": ["x", {}]},
        "d": {"Condition": "C"},
    }


def test_not_a_template(tmp_path: Path) -> None:
    path = tmp_path / "x.yaml"
    path.write_text("just: text\n")
    with pytest.raises(TemplateError, match="no Resources"):
        read_template(path)


def test_a_read_template_is_a_fresh_copy_each_time() -> None:
    first = read_template(FIXTURE)
    first["Resources"].clear()
    assert read_template(FIXTURE)["Resources"], "the cached document was changed"


def test_package_uploads_code_and_definitions_as_sam_package_does() -> None:
    bucket = Bucket()
    packaged = package(read_template(FIXTURE), FIXTURES, bucket.upload)
    resources = packaged.document["Resources"]

    steps_uri = resources["StepsFunction"]["Properties"]["CodeUri"]
    assert steps_uri.startswith("s3://artifacts/") and steps_uri.endswith(".zip")
    assert names_in(bucket.get(steps_uri)) == ["app.py"]
    assert packaged.code_dirs == {
        "StepsFunction": (FIXTURES / "steps").resolve(),
        "ChecksFunction": (FIXTURES / "checks").resolve(),
    }
    definition = resources["ApplyStateMachine"]["Properties"]["DefinitionUri"]
    assert bucket.get(definition) == (FIXTURES / "fixture.asl.json").read_bytes()
    # The inline definition has nothing to upload
    assert "DefinitionUri" not in resources["RulesStateMachine"]["Properties"]


def test_package_takes_globals_code_uri_and_leaves_s3_uris(tmp_path: Path) -> None:
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "app.py").write_text("def handler(event, context): ...\n")
    document: dict[str, Any] = {
        "Globals": {"Function": {"CodeUri": "code/"}},
        "Resources": {
            "FromGlobals": {"Type": "AWS::Serverless::Function", "Properties": {}},
            "Remote": {
                "Type": "AWS::Serverless::Function",
                "Properties": {"CodeUri": "s3://elsewhere/code.zip"},
            },
        },
    }
    packaged = package(document, tmp_path, Bucket().upload)

    assert packaged.code_dirs == {"FromGlobals": (tmp_path / "code").resolve()}
    properties = packaged.document["Resources"]
    assert properties["FromGlobals"]["Properties"]["CodeUri"].startswith("s3://artifacts/")
    assert properties["Remote"]["Properties"]["CodeUri"] == "s3://elsewhere/code.zip"
    assert document["Resources"]["FromGlobals"]["Properties"] == {}, "the input was changed"


def test_a_missing_definition_file_is_a_clear_error(tmp_path: Path) -> None:
    document = {
        "Resources": {
            "Machine": {
                "Type": "AWS::Serverless::StateMachine",
                "Properties": {"DefinitionUri": "nowhere.asl.json"},
            }
        }
    }
    with pytest.raises(TemplateError, match=r"nowhere\.asl\.json is not a file"):
        package(document, tmp_path, Bucket().upload)


def test_zips_are_reproducible_and_leave_caches_out(tmp_path: Path) -> None:
    (tmp_path / "pkg" / "__pycache__").mkdir(parents=True)
    (tmp_path / "pkg" / "__pycache__" / "m.cpython-311.pyc").write_bytes(b"\0")
    (tmp_path / "pkg" / "m.py").write_text("X = 1\n")
    (tmp_path / "app.py").write_text("import pkg\n")

    first = zip_directory(tmp_path)
    assert names_in(first) == ["app.py", "pkg/m.py"]
    assert content_key("f.zip", first) == content_key("f.zip", zip_directory(tmp_path))
    with pytest.raises(TemplateError, match="does not exist"):
        zip_directory(tmp_path / "missing")


def translated_fixture(**parameters: str) -> dict[str, Any]:
    packaged = package(read_template(FIXTURE), FIXTURES, Bucket().upload)
    return translate(packaged.document, parameters, region=REGION, account_id=ACCOUNT)


def test_translate_gives_the_cloudformation_sam_would() -> None:
    resources = translated_fixture()["Resources"]

    steps = resources["StepsFunction"]
    assert steps["Type"] == "AWS::Lambda::Function"
    assert set(steps["Properties"]["Code"]) == {"S3Bucket", "S3Key"}
    assert steps["Properties"]["Timeout"] == 30  # from Globals
    assert steps["Properties"]["Environment"]["Variables"] == {
        "OWNER": {"Ref": "Owner"},
        "POWERTOOLS_SERVICE_NAME": "sg-reconciler-fixture",
        "LOCKS_TABLE": {"Ref": "LocksTable"},
    }
    # SAM's implicit roles: the function without a Role and both state machines get one
    assert resources["ChecksFunctionRole"]["Type"] == "AWS::IAM::Role"
    assert "StepsFunctionRole" not in resources
    assert resources["ApplyStateMachineRole"]["Type"] == "AWS::IAM::Role"
    machine = resources["ApplyStateMachine"]["Properties"]
    assert resources["ApplyStateMachine"]["Type"] == "AWS::StepFunctions::StateMachine"
    assert set(machine["DefinitionS3Location"]) == {"Bucket", "Key"}
    assert machine["DefinitionSubstitutions"]["SettleSeconds"] == {"Ref": "SettleSeconds"}
    assert resources["RulesStateMachine"]["Properties"]["StateMachineName"] == {
        "Fn::Sub": "${AWS::StackName}-rules"
    }


def test_translating_twice_gives_equal_independent_templates() -> None:
    first, second = translated_fixture(), translated_fixture()
    assert first == second
    first["Resources"].clear()
    assert translated_fixture()["Resources"], "the cached translation was changed"


def test_an_invalid_sam_resource_is_a_clear_error() -> None:
    document = {
        "Transform": "AWS::Serverless-2016-10-31",
        "Resources": {
            "Fn": {
                "Type": "AWS::Serverless::Function",
                "Properties": {"CodeUri": "s3://b/k.zip", "Handler": "app.handler"},
            }
        },
    }
    with pytest.raises(TemplateError, match=r"SAM cannot translate.*Runtime"):
        translate(document, {}, region=REGION, account_id=ACCOUNT)
