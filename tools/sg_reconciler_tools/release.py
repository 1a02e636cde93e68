"""A release for an organization: the SAM template as plain CloudFormation, with no `Transform`,
its code zipped for an S3 bucket, ready for a service-managed StackSet.

Service-managed StackSets refuse a template with a `Transform` ("Transform is not supported in
SERVICE_MANAGED permission model", in "Considerations when creating a stack set" of the
CloudFormation guide), so the SAM transform runs here, once, with samtranslator (the library
CloudFormation's own transform runs), as `sam package` + the transform would. Nothing of one
account or region is baked in: every stack instance resolves its own `AWS::AccountId`,
`AWS::Region` and parameters.

Each account's policy: the StackSet's `PolicyDocument` parameter is the policy for all, and an
account or OU that needs another gets it as a parameter override of its stack instances
(`create-stack-instances --parameter-overrides`). Every policy is loaded here by the
planner's own loader before the release is written, so a bad one never reaches an account.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sg_reconciler.policy import (
    PolicyDocument,
    PolicyError,
    load_policy_document,
    parameter_size_problem,
)

from sg_reconciler_tools.local.stack import (
    content_key,
    package,
    read_template,
    translate,
)

# Where a layer built with BuildMethod python3.x keeps its modules (Lambda adds it to sys.path).
LAYER_PYTHON_DIR = "python"
# What samtranslator is told of the account; the release must not contain either.
_PLACEHOLDER_ACCOUNT = "000000000000"
_PLACEHOLDER_REGION = "us-east-1"
_SKIPPED = ("__pycache__", ".pytest_cache", ".mypy_cache", "*.pyc")

InstallRequirements = Callable[[Path, Path], None]  # (requirements.txt, target dir)


class ReleaseError(ValueError):
    """The release cannot be built (bad template, bad policy, bad bucket)."""


@dataclass(frozen=True)
class Release:
    """What `build_release` wrote: the template and the artifacts to copy to the bucket."""

    template: Path
    artifacts: dict[str, Path]  # S3 key -> local file
    bucket: str
    policies: dict[str, Path] = field(default_factory=dict)  # account or OU -> overrides file

    def upload_commands(self, regions: Sequence[str] = ()) -> list[str]:
        """The copies to make before the StackSet runs: one bucket, or one per region."""
        buckets = sorted(
            {self.bucket.replace("${AWS::Region}", r) for r in regions} or {self.bucket}
        )
        return [
            f"aws s3 cp {path} s3://{bucket}/{key}"
            for bucket in buckets
            for key, path in self.artifacts.items()
        ]


# How much of pip's output a failed install shows: its error is at the end.
PIP_OUTPUT_TAIL_LINES = 20


def pip_install(requirements: Path, target: Path) -> None:
    """The layer's requirements for Lambda's runtime (python3.13, arm64), as `sam build` does.

    pip's output is held back: its warnings (which --quiet still prints: a find-links location
    of the caller's pip configuration that is missing, a newer pip) are not the release's
    business. When pip fails, its last lines are in the error. It never prompts (--no-input):
    with its output held back, a prompt would be a silent wait."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-input",
            "--requirement",
            str(requirements),
            "--target",
            str(target),
            "--platform",
            "manylinux2014_aarch64",
            "--implementation",
            "cp",
            "--python-version",
            "3.13",
            "--only-binary=:all:",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
        check=False,
    )
    if done.returncode != 0:
        lines = done.stdout.rstrip().splitlines()
        shown = lines[-PIP_OUTPUT_TAIL_LINES:]
        if len(lines) > len(shown):
            shown.insert(0, f"(... {len(lines) - len(shown)} earlier line(s) of pip's output)")
        ended = (
            f"killed by signal {-done.returncode}"
            if done.returncode < 0
            else f"exit {done.returncode}"
        )
        raise ReleaseError(
            f"{requirements}: pip could not install the layer's packages ({ended}); "
            "its output:\n" + "\n".join(shown or ["(none)"])
        )


def build_release(
    template_path: Path,
    out_dir: Path,
    bucket: str,
    prefix: str = "",
    *,
    policy: Path | None = None,
    account_policies: Mapping[str, Path] | None = None,
    install: InstallRequirements = pip_install,
) -> Release:
    """Write `out_dir/template.json` (no Transform, code at `s3://bucket/prefix/<hash>.zip`)
    and the zips; with `policy` and `account_policies`, check each and write its parameters."""
    if not re.fullmatch(r"[a-z0-9.-]*(\$\{AWS::Region\}[a-z0-9.-]*)?", bucket) or not bucket:
        raise ReleaseError(
            f"{bucket!r} is not an S3 bucket name (lowercase letters, digits, dots, hyphens; "
            "${AWS::Region} for a bucket per region)"
        )
    policies = {"(all)": policy} if policy else {}
    checked = {target: _checked_policy(file) for target, file in policies.items()}
    for target, file in (account_policies or {}).items():
        checked[target] = _checked_policy(file)
    document = read_template(template_path)
    out_dir.mkdir(parents=True, exist_ok=True)
    key_prefix = f"{prefix.strip('/')}/" if prefix.strip("/") else ""
    artifacts: dict[str, Path] = {}

    def upload(name: str, content: bytes) -> str:
        key = key_prefix + content_key(name, content)
        file = out_dir / "artifacts" / key
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_bytes(content)
        artifacts[key] = file
        return f"s3://{bucket}/{key}"

    root = template_path.resolve().parent
    with tempfile.TemporaryDirectory(prefix="sg-reconciler-layers-") as staging:
        built = _with_built_layers(document, root, Path(staging), install)
        packaged = package(built, root, upload)
    template = translate(
        packaged.document,
        _defaults(packaged.document),
        region=_PLACEHOLDER_REGION,
        account_id=_PLACEHOLDER_ACCOUNT,
    )
    template = _bucket_per_region(template, bucket)
    _check_portable(template)
    written = out_dir / "template.json"
    written.write_text(json.dumps(template, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    overrides: dict[str, Path] = {}
    for target, (text, _) in checked.items():
        if target == "(all)":
            continue
        file = out_dir / "parameters" / f"{target}.json"
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_text(
            json.dumps([{"ParameterKey": "PolicyDocument", "ParameterValue": text}], indent=1)
            + "\n",
            encoding="utf-8",
        )
        overrides[target] = file
    return Release(written, artifacts, bucket, overrides)


def _checked_policy(file: Path) -> tuple[str, PolicyDocument]:
    """The policy's text and its loaded value; a policy the planner would refuse is an error
    here, before any account sees it."""
    try:
        loaded = load_policy_document(file)
        text = file.read_text(encoding="utf-8")
    except PolicyError as err:  # it names the file
        raise ReleaseError(str(err)) from None
    except OSError as err:
        raise ReleaseError(f"{file}: cannot read ({err.strerror})") from None
    too_large = parameter_size_problem(text)
    if too_large:
        raise ReleaseError(f"{file}: {too_large}")
    if "owner" in loaded.model_fields_set:
        raise ReleaseError(
            f"{file}: sets owner {loaded.owner!r}; each stack names its own owner (OwnerName)"
        )
    return text, loaded


def _defaults(document: Mapping[str, Any]) -> dict[str, Any]:
    """Parameter values for the transform: the declared defaults (SAM reads only a few of
    them; the stack instances keep their own values)."""
    declared = document.get("Parameters") or {}
    return {
        name: spec["Default"]
        for name, spec in declared.items()
        if isinstance(spec, dict) and "Default" in spec
    }


def _with_built_layers(
    document: dict[str, Any], root: Path, staging: Path, install: InstallRequirements
) -> dict[str, Any]:
    """Layers with a python BuildMethod, built as `sam build` does: the content under
    `python/`, with its requirements.txt installed for Lambda's runtime."""
    for logical_id, body in (document.get("Resources") or {}).items():
        if not isinstance(body, dict) or body.get("Type") != "AWS::Serverless::LayerVersion":
            continue
        method = str((body.get("Metadata") or {}).get("BuildMethod", ""))
        uri = (body.get("Properties") or {}).get("ContentUri")
        if not method.startswith("python") or not isinstance(uri, str) or uri.startswith("s3://"):
            continue
        source = (root / uri).resolve()
        if not source.is_dir():
            raise ReleaseError(f"{logical_id}: ContentUri {uri} is not a directory")
        target = staging / logical_id / LAYER_PYTHON_DIR
        shutil.copytree(source, target, ignore=shutil.ignore_patterns(*_SKIPPED))
        requirements = source / "requirements.txt"
        if requirements.is_file():
            install(requirements, target)
        body["Properties"]["ContentUri"] = str(target.parent)
    return document


def _bucket_per_region(template: Any, bucket: str) -> Any:
    """Lambda takes code only from a bucket in the function's region: a bucket name with
    `${AWS::Region}` becomes a `Fn::Sub`, so each region's instances read their region's copy."""
    if "${" not in bucket:
        return template
    if isinstance(template, dict):
        return {
            key: {"Fn::Sub": bucket}
            if key in ("S3Bucket", "Bucket") and value == bucket
            else _bucket_per_region(value, bucket)
            for key, value in template.items()
        }
    if isinstance(template, list):
        return [_bucket_per_region(value, bucket) for value in template]
    return template


def _check_portable(template: Mapping[str, Any]) -> None:
    """No Transform and nothing of the account or region the transform was told of."""
    if "Transform" in template:
        raise ReleaseError("the translated template still declares a Transform")
    text = json.dumps(template)
    for placeholder in (_PLACEHOLDER_ACCOUNT, _PLACEHOLDER_REGION):
        if placeholder in text:
            raise ReleaseError(
                f"the translated template names {placeholder}: a StackSet instance would "
                "get another account's or region's value"
            )
    serverless = sorted(
        logical_id
        for logical_id, body in template.get("Resources", {}).items()
        if str(body.get("Type", "")).startswith("AWS::Serverless::")
    )
    if serverless:
        raise ReleaseError(f"untranslated SAM resources: {', '.join(serverless)}")


def parse_account_policies(values: Sequence[str]) -> dict[str, Path]:
    """`ACCOUNT_OR_OU=FILE` pairs, as given on the command line."""
    pairs: dict[str, Path] = {}
    for value in values:
        target, sep, file = value.partition("=")
        if (
            not sep
            or not file
            or not ((target.isdigit() and len(target) == 12) or target.startswith("ou-"))
        ):
            raise ReleaseError(
                f"{value!r}: expected ACCOUNT=FILE (a 12-digit account id) or OU=FILE (ou-...)"
            )
        if target in pairs:  # the last would win without a word, as a flag given twice
            raise ReleaseError(
                f"--account-policy: {target} given twice ({pairs[target]}, then {file}): "
                "give each account or OU once"
            )
        pairs[target] = Path(file)
    return pairs
