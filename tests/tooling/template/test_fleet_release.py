"""The release for an organization: plain CloudFormation (no Transform: service-managed
StackSets refuse one), nothing of one account or region baked in, every policy checked, and
the same template deployed as each account's and region's own stack."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws
from sg_reconciler_tools.cli import main
from sg_reconciler_tools.local import cfn_workarounds
from sg_reconciler_tools.release import Release, ReleaseError, build_release

ROOT = Path(__file__).resolve().parents[3]
ACCOUNTS = ("111111111111", "222222222222", "333333333333")
REGIONS = ("eu-west-1", "us-east-1")
BUCKET = "sg-releases-${AWS::Region}"
PUBLIC_LAYER = (
    "arn:aws:lambda:eu-west-1:017000801446:layer:AWSLambdaPowertoolsPythonV3-python313-arm64:7"
)
EC2_WRITES = (
    "ec2:AuthorizeSecurityGroupIngress",
    "ec2:RevokeSecurityGroupIngress",
    "ec2:ModifySecurityGroupRules",
)


def no_requirements(requirements: Path, target: Path) -> None:
    """The layer's requirements are fetched from the package index in a real release; here
    the file is only copied, so the test needs no network (the layout is what is checked)."""
    (target / "requirements-installed.txt").write_text(requirements.read_text())


@pytest.fixture(scope="module")
def release(tmp_path_factory: pytest.TempPathFactory) -> Release:
    return build_release(
        ROOT / "template.yaml",
        tmp_path_factory.mktemp("release"),
        BUCKET,
        "v1",
        install=no_requirements,
    )


def template_of(release: Release) -> dict[str, Any]:
    return json.loads(release.template.read_text())


def test_the_release_is_plain_cloudformation_that_cfn_lint_accepts(release: Release) -> None:
    template = template_of(release)
    assert "Transform" not in template
    kinds = {body["Type"] for body in template["Resources"].values()}
    assert not [k for k in kinds if k.startswith("AWS::Serverless::")]
    assert {"AWS::Lambda::Function", "AWS::StepFunctions::StateMachine"} <= kinds
    lint = subprocess.run(
        [str(Path(sys.executable).parent / "cfn-lint"), str(release.template)],
        capture_output=True,
        text=True,
    )
    assert lint.returncode == 0, lint.stdout + lint.stderr


def test_each_region_reads_its_own_bucket_and_no_account_or_region_is_baked_in(
    release: Release,
) -> None:
    text = release.template.read_text()
    assert "000000000000" not in text and "us-east-1" not in text
    template = template_of(release)
    codes = [
        body["Properties"]["Code"]
        for body in template["Resources"].values()
        if body["Type"] == "AWS::Lambda::Function"
    ]
    assert codes and all(code["S3Bucket"] == {"Fn::Sub": BUCKET} for code in codes)
    assert all(code["S3Key"].startswith("v1/") for code in codes)
    assert {code["S3Key"] for code in codes} <= set(release.artifacts)
    commands = release.upload_commands(REGIONS)
    assert len(commands) == len(REGIONS) * len(release.artifacts)
    assert all(
        "s3://sg-releases-eu-west-1/" in c or "s3://sg-releases-us-east-1/" in c for c in commands
    )


def test_the_layers_are_built_as_sam_build_builds_them(release: Release) -> None:
    import zipfile

    template = template_of(release)
    layers = {
        name: zipfile.ZipFile(release.artifacts[body["Properties"]["Content"]["S3Key"]]).namelist()
        for name, body in template["Resources"].items()
        if body["Type"] == "AWS::Lambda::LayerVersion"
    }
    # SAM names a layer version by its logical id and a hash of its content
    by_name = {name.rstrip("0123456789abcdef"): names for name, names in layers.items()}
    assert set(by_name) == {"ReconcilerLibrary", "PowertoolsLibrary"}
    for names in layers.values():
        assert names and all(n.startswith("python/") for n in names)  # on Lambda's sys.path
        assert "python/requirements-installed.txt" in names  # its requirements installed there
        assert not [n for n in names if "__pycache__" in n]
    assert "python/sg_reconciler/core/planner.py" in by_name["ReconcilerLibrary"]


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_every_policy_is_checked_before_any_account_sees_it(tmp_path: Path) -> None:
    good = write(tmp_path / "all.yaml", "load_balancers:\n  tags:\n    team: a\n")
    typo = write(tmp_path / "typo.yaml", "load_balancer:\n  tags:\n    team: a\n")
    owned = write(tmp_path / "owned.yaml", "owner: someone\nload_balancers:\n  tags: {t: a}\n")
    out = tmp_path / "out"
    with pytest.raises(ReleaseError, match=r"typo\.yaml") as refused:
        build_release(
            ROOT / "template.yaml",
            out,
            "b",
            policy=good,
            account_policies={"111111111111": typo},
            install=no_requirements,
        )
    assert str(refused.value).count("typo.yaml") == 1  # named once, not file: file: ...
    with pytest.raises(ReleaseError, match="sets owner"):
        build_release(ROOT / "template.yaml", out, "b", policy=owned, install=no_requirements)
    long = write(tmp_path / "long.yaml", "load_balancers:\n  tags: {t: a}\n" + "# why\n" * 700)
    with pytest.raises(ReleaseError, match=r"long\.yaml: 42\d\d bytes, over the 4096"):
        build_release(ROOT / "template.yaml", out, "b", policy=long, install=no_requirements)
    with pytest.raises(ReleaseError, match=r"^\S*gone\.yaml: cannot read \(No such file"):
        build_release(
            ROOT / "template.yaml", out, "b", policy=tmp_path / "gone.yaml", install=no_requirements
        )
    assert not out.exists()  # nothing written before every policy loaded
    built = build_release(
        ROOT / "template.yaml",
        out,
        "b",
        policy=good,
        account_policies={"ou-ab12-cdef3456": good},
        install=no_requirements,
    )
    (override,) = json.loads(built.policies["ou-ab12-cdef3456"].read_text())
    assert override == {"ParameterKey": "PolicyDocument", "ParameterValue": good.read_text()}


def test_the_command_line_names_what_it_refuses(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["release-template", "--bucket", "Bad_Bucket", "--out", str(tmp_path)]) == 2
    assert "Bad_Bucket" in capsys.readouterr().err
    assert (
        main(
            [
                "release-template",
                "--bucket",
                "b",
                "--account-policy",
                "12=x.yaml",
                "--out",
                str(tmp_path),
            ]
        )
        == 2
    )
    assert "ACCOUNT=FILE" in capsys.readouterr().err
    # run outside the checkout: the template it looks for is named, and how to give another
    missing = tmp_path / "template.yaml"
    assert main(["release-template", "--bucket", "b", "--template", str(missing)]) == 2
    assert capsys.readouterr().err == (
        f"sg-reconciler: error: {missing}: no such template: run this in the project's "
        "checkout, or give --template (see 'sg-reconciler release-template --help')\n"
    )


def fake_pip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str) -> Path:
    """`python -m pip` as a script: release-template runs pip with its own interpreter, so the
    interpreter is what the test replaces. Returns the file it writes its arguments to, one a
    line."""
    script, arguments = tmp_path / "python", tmp_path / "pip-arguments"
    script.write_text(
        "#!/bin/sh\n"
        '[ "$1 $2 $3" = "-m pip install" ] || { echo "not pip install: $*" >&2; exit 99; }\n'
        f'printf "%s\\n" "$@" > "{arguments}"\n' + body
    )
    script.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(script))
    return arguments


def never_prompted(arguments: Path) -> bool:
    """pip was told never to prompt: its output is held back, so a prompt is a silent wait."""
    return "--no-input" in arguments.read_text().splitlines()


def test_pip_says_nothing_to_the_user_when_it_installs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    # Given a pip whose configuration names a location that is gone: it warns even when quiet
    arguments = fake_pip(
        tmp_path,
        monkeypatch,
        "echo \"WARNING: Location 'file:///gone/simple/' is ignored: it is neither a file nor "
        'a directory." >&2\n'
        'echo "Collecting aws-lambda-powertools"\n'
        "exit 0\n",
    )
    # When a release is built
    code = main(["release-template", "--bucket", "b", "--out", str(tmp_path / "out")])
    # Then the user reads the release's lines, none of pip's
    out, err = capfd.readouterr()
    assert code == 0, err
    assert err == "building the layers and the functions' code (a minute or less)...\n"
    assert "WARNING" not in out and "Collecting" not in out
    assert out.startswith(f"wrote {tmp_path / 'out' / 'template.json'} (no Transform)")
    assert never_prompted(arguments)


def test_a_failing_pip_is_one_error_with_its_last_lines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    # Given a pip that cannot find a package, after a long output
    arguments = fake_pip(
        tmp_path,
        monkeypatch,
        'i=1; while [ $i -le 30 ]; do echo "pip line $i"; i=$((i+1)); done\n'
        'echo "ERROR: No matching distribution found for aws-lambda-powertools" >&2\n'
        "exit 1\n",
    )
    # When a release is built
    code = main(["release-template", "--bucket", "b", "--out", str(tmp_path / "out")])
    # Then it is refused with pip's error and the lines before it, and no traceback
    out, err = capfd.readouterr()
    assert code == 2 and out == ""
    assert "Traceback" not in err
    message = err.split("\n", 1)[1]  # after the line saying it is building
    assert message.startswith("sg-reconciler: error: ")
    assert "requirements.txt: pip could not install the layer's packages (exit 1)" in message
    assert "(... 11 earlier line(s) of pip's output)\npip line 12\n" in message
    assert "pip line 11\n" not in message
    assert message.endswith(
        "pip line 30\nERROR: No matching distribution found for aws-lambda-powertools\n"
    )
    assert never_prompted(arguments)


@pytest.mark.parametrize(
    ("body", "shown"),
    [
        ('echo "ERROR: one line"\nexit 1\n', "(exit 1); its output:\nERROR: one line\n"),
        ("exit 3\n", "(exit 3); its output:\n(none)\n"),
    ],
    ids=["a few lines", "no output"],
)
def test_a_failing_pip_with_little_output_shows_all_of_it(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
    body: str,
    shown: str,
) -> None:
    # Given a pip that fails having printed fewer lines than the error shows, or none
    fake_pip(tmp_path, monkeypatch, body)
    code = main(["release-template", "--bucket", "b", "--out", str(tmp_path / "out")])
    # Then its whole output is shown, and no count of earlier lines (there are none)
    out, err = capfd.readouterr()
    assert code == 2 and out == ""
    message = err.split("\n", 1)[1]
    assert message.startswith("sg-reconciler: error: ") and message.endswith(shown)
    assert "earlier line" not in message


def test_a_pip_killed_by_a_signal_is_a_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    # Given a pip killed before it installs anything (its return code is negative: -9)
    arguments = fake_pip(tmp_path, monkeypatch, "kill -9 $$\n")
    # When a release is built
    code = main(["release-template", "--bucket", "b", "--out", str(tmp_path / "out")])
    # Then it is refused, as any failing pip is, not written without the layer's packages
    out, err = capfd.readouterr()
    assert code == 2 and out == "" and "Traceback" not in err
    message = err.split("\n", 1)[1]
    assert message.startswith("sg-reconciler: error: ")
    assert (
        "requirements.txt: pip could not install the layer's packages (killed by signal 9)"
        in message
    )
    assert not (tmp_path / "out" / "template.json").exists()
    assert never_prompted(arguments)


@pytest.fixture
def organization() -> Iterator[None]:
    with mock_aws():
        yield


def session_in(account: str) -> boto3.Session:
    """Credentials of a role in `account` (moto files what they do under that account)."""
    credentials = boto3.client("sts", region_name="us-east-1").assume_role(
        RoleArn=f"arn:aws:iam::{account}:role/OrganizationAccountAccessRole",
        RoleSessionName="stackset",
    )["Credentials"]
    return boto3.Session(
        aws_access_key_id=credentials["AccessKeyId"],
        aws_secret_access_key=credentials["SecretAccessKey"],
        aws_session_token=credentials["SessionToken"],
    )


def in_region(document: Any, bucket: str) -> Any:
    """The bucket's `Fn::Sub` as CloudFormation resolves it in the instance's region (the
    local runtime's state machine workaround reads the definition before the stack exists)."""
    if document == {"Fn::Sub": BUCKET}:
        return bucket
    if isinstance(document, dict):
        return {key: in_region(value, bucket) for key, value in document.items()}
    if isinstance(document, list):
        return [in_region(value, bucket) for value in document]
    return document


def deploy_instance(release: Release, session: boto3.Session, region: str) -> dict[str, str]:
    """What a StackSet instance does in one account and region: the artifacts are in the
    region's bucket, CloudFormation resolves `Fn::Sub` with the region. moto's StackSets do
    not run this template (their hidden stacks miss the workarounds the local runtime applies
    to moto's CloudFormation), so each instance is created as its own stack."""
    bucket = BUCKET.replace("${AWS::Region}", region)
    s3 = session.client("s3", region_name=region)

    def fetch(name: str, key: str) -> bytes:
        return bytes(s3.get_object(Bucket=name, Key=key)["Body"].read())

    resolved = in_region(json.loads(release.template.read_text()), bucket)
    template = cfn_workarounds.prepare(resolved, stack_name="sg-reconciler", fetch=fetch)
    cloudformation = session.client("cloudformation", region_name=region)
    with cfn_workarounds.quiet_unsupported_resources():
        cloudformation.create_stack(
            StackName="sg-reconciler",
            TemplateBody=json.dumps(template),
            Capabilities=["CAPABILITY_IAM"],
            Parameters=[{"ParameterKey": "PowertoolsLayerArn", "ParameterValue": PUBLIC_LAYER}],
        )
    (stack,) = cloudformation.describe_stacks(StackName="sg-reconciler")["Stacks"]
    assert stack["StackStatus"] == "CREATE_COMPLETE", stack.get("StackStatusReason")
    return {o["OutputKey"]: o["OutputValue"] for o in stack["Outputs"]}


def arns_in(document: Any) -> Iterator[str]:
    if isinstance(document, dict):
        for value in document.values():
            yield from arns_in(value)
    elif isinstance(document, list):
        for value in document:
            yield from arns_in(value)
    elif isinstance(document, str) and document.startswith("arn:"):
        yield document


def upload(release: Release, region: str) -> None:
    """The release's copies, one bucket per region, in the account that publishes releases
    (its bucket policy lets the organization read them)."""
    bucket = BUCKET.replace("${AWS::Region}", region)
    s3 = boto3.client("s3", region_name=region)
    location = (
        {}
        if region == "us-east-1"
        else {"CreateBucketConfiguration": {"LocationConstraint": region}}
    )
    s3.create_bucket(Bucket=bucket, **location)
    for key, path in release.artifacts.items():
        s3.put_object(Bucket=bucket, Key=key, Body=path.read_bytes())


def test_one_template_is_each_account_and_regions_own_deployment(
    release: Release, organization: None
) -> None:
    for region in REGIONS:
        upload(release, region)
    tables: set[str] = set()
    for account in ACCOUNTS:
        session = session_in(account)
        for region in REGIONS:
            outputs = deploy_instance(release, session, region)
            assert outputs["StateMachineArn"].startswith(f"arn:aws:states:{region}:{account}:")
            tables.add(f"{account}/{region}/{outputs['LockTableName']}")
        iam = session.client("iam")
        roles = iam.list_roles()["Roles"]
        assert len(roles) >= 10  # the functions' and the state machine's, in this account
        for role in roles:
            for name in iam.list_role_policies(RoleName=role["RoleName"])["PolicyNames"]:
                document = iam.get_role_policy(RoleName=role["RoleName"], PolicyName=name)[
                    "PolicyDocument"
                ]
                # Write access stays inside the account: every ARN a role names is its own.
                for arn in arns_in(document):
                    assert arn.split(":")[4] in ("", account), (role["RoleName"], arn)
                for statement in document["Statement"]:
                    actions = (
                        statement["Action"]
                        if isinstance(statement["Action"], list)
                        else [statement["Action"]]
                    )
                    if set(actions) & set(EC2_WRITES):
                        resources = (
                            statement["Resource"]
                            if isinstance(statement["Resource"], list)
                            else [statement["Resource"]]
                        )
                        assert all(r == "*" or r.split(":")[4] == account for r in resources)
    assert len(tables) == len(ACCOUNTS) * len(REGIONS)  # its own locks, brake and plans each
