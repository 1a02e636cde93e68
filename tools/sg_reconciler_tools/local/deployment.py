"""The app's stack on moto's CloudFormation, deployed as `sam deploy` would and read back.

`Deployment` packages the SAM template as `sam package` does (artifacts to moto's S3),
translates it with samtranslator (`stack`), adapts it to moto's CloudFormation
(`cfn_workarounds.prepare`), creates it with `create_stack` or moves it to another template
with `update_stack`, then reads what the engine made: each resource's physical id and
`!GetAtt ...Arn`, the parameters, and the resources moto skipped. The runtime installs
`cfn_workarounds`' patches before it creates the stack; the deployment only quiets moto's
warning on skipped resources around its own calls (`quiet_unsupported_resources`).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import boto3
from sg_reconciler.core.rules import DEFAULT_OWNER

from sg_reconciler_tools.local import cfn_workarounds, moto_state
from sg_reconciler_tools.local.stack import (
    TemplateError,
    content_key,
    package,
    read_template,
    translate,
)

REGION = "eu-west-1"
FUNCTION_TYPE = "AWS::Lambda::Function"
STATE_MACHINE_TYPE = "AWS::StepFunctions::StateMachine"
RULE_TYPE = "AWS::Events::Rule"
CAPABILITIES = ["CAPABILITY_IAM", "CAPABILITY_NAMED_IAM", "CAPABILITY_AUTO_EXPAND"]
UNPACED_WRITES_PER_SECOND = 1000
UNPACED_READS_PER_SECOND = 1000


@dataclass(frozen=True)
class SkippedResource:
    """A resource of the stack's template that moto's CloudFormation did not create."""

    logical_id: str
    type: str


class Deployment:
    """One stack of a SAM template on moto: its template, parameters and resources."""

    def __init__(
        self,
        template_path: str | Path,
        *,
        handlers_root: str | Path | None,
        parameters: Mapping[str, str],
        stack_name: str,
        account_id: str,
        region: str,
    ) -> None:
        # The stack's owner name is the library default unless a test asks for another
        # (the template derives it from the stack name when OwnerName is empty). Writes are
        # not paced unless a test asks (with `Ec2RateLimit`): moto has no rate limit, and
        # the pacer would wait in real time. Reads likewise (`ReadRateLimit` models AWS's).
        self.template_path = Path(template_path)
        self.stack_name, self.account_id, self.region = stack_name, account_id, region
        self._document = read_template(self.template_path)
        self.parameters = _stack_parameters(self._document, {}, parameters)
        self.handlers_root = (
            Path(handlers_root) if handlers_root else self.template_path.resolve().parent
        )
        self.template: dict[str, Any] = {}  # what CreateStack or UpdateStack got
        self.code_dirs: Mapping[str, Path] = {}  # function logical id -> its CodeUri
        self._uploaded: set[str] = set()  # artifact keys in the stack's bucket
        self._forget_stack()

    def create(self) -> None:
        """Package, translate, adapt to moto and create the stack (in a fresh moto: the
        artifacts are uploaded again, and an earlier stack's names are gone until read)."""
        self._uploaded = set()
        self._forget_stack()
        location = {} if self.region == "us-east-1" else {"LocationConstraint": self.region}
        session(self.region).client("s3").create_bucket(
            Bucket=self._bucket, **({"CreateBucketConfiguration": location} if location else {})
        )
        self._put_stack("create")

    def update(self, template_path: str | Path, parameters: Mapping[str, str]) -> None:
        """Update the stack to another template, as `sam build && sam deploy` over it does.

        The parameters given before that the new template still declares keep their values
        (sam deploy passes UsePreviousValue for them), the runtime's defaults fill new ones,
        `parameters` win. Parameters left to their defaults stay unnamed: moto counts a
        parameter named now and not before as changed, and updates every resource that
        references it (an SSM parameter is then deleted and created again, its edited value
        lost), where CloudFormation compares values.
        moto updates in place what its models can, creates the new resources and deletes
        the removed ones, but does not roll back: a failed update raises `TemplateError`
        and leaves the stack half-updated, where CloudFormation would roll it back.
        """
        document = read_template(template_path)
        self.parameters = _stack_parameters(document, self.parameters, parameters)
        self.template_path, self._document = Path(template_path), document
        self._put_stack("update")

    # Names ------------------------------------------------------------------------------

    def of_type(self, kind: str) -> dict[str, str]:
        """Logical id -> physical id of the stack's resources of one type, in stack order."""
        return {
            logical_id: physical
            for logical_id, (found, physical) in self._resources.items()
            if found == kind
        }

    def physical_name(self, logical_id: str) -> str:
        """The resource's name in the stack (a queue's name, not its URL; a state machine's
        name, not its ARN)."""
        physical = self._physical_id(logical_id)
        if physical.startswith("https://"):
            return physical.rsplit("/", 1)[1]
        if physical.startswith("arn:"):
            return physical.rsplit(":", 1)[1]
        return physical

    def arn(self, logical_id: str) -> str:
        """What `!GetAtt logical_id.Arn` resolves to in the stack."""
        self._physical_id(logical_id)  # a clear error for an unknown or skipped resource
        if logical_id not in self._arns:
            raise TemplateError(f"{logical_id} ({self._resources[logical_id][0]}) has no Arn")
        return self._arns[logical_id]

    def ref(self, logical_id: str) -> Any:
        """What `!Ref logical_id` resolves to in the stack: a parameter's value, a pseudo
        parameter, or a resource's physical id (a queue's URL, a function's name...)."""
        if logical_id in self._stack_parameters:
            return self._stack_parameters[logical_id]
        pseudo = {
            "AWS::Region": self.region,
            "AWS::AccountId": self.account_id,
            "AWS::Partition": "aws",
            "AWS::URLSuffix": "amazonaws.com",
            "AWS::StackName": self.stack_name,
            "AWS::StackId": self._stack_id,
        }
        if logical_id in pseudo:
            return pseudo[logical_id]
        return self._physical_id(logical_id)

    def _physical_id(self, logical_id: str) -> str:
        if not self._resources:
            raise RuntimeError("the local runtime was not started")
        if logical_id not in self._resources:
            skipped = any(s.logical_id == logical_id for s in self._skipped)
            reason = "moto's CloudFormation skipped it" if skipped else "no such resource"
            raise TemplateError(f"{logical_id} is not in stack {self.stack_name}: {reason}")
        return self._resources[logical_id][1]

    @property
    def skipped(self) -> list[SkippedResource]:
        """The template's resources (their conditions holding) that moto's CloudFormation
        has no model for and did not create, in template order."""
        return list(self._skipped)

    # CreateStack and UpdateStack --------------------------------------------------------

    def _forget_stack(self) -> None:
        """No stack read yet: every name `_read_stack` fills is empty."""
        self._resources: dict[str, tuple[str, str]] = {}  # logical id -> (type, physical id)
        self._arns: dict[str, str] = {}
        self._stack_parameters: dict[str, str] = {}
        self._stack_id = ""
        self._skipped: list[SkippedResource] = []

    @property
    def _bucket(self) -> str:
        # `sam package`'s bucket; S3 names are global, so the account and region are in it
        return f"{self.stack_name.lower()}-artifacts-{self.account_id}-{self.region}"

    def _prepare(self) -> None:
        """The template as CreateStack or UpdateStack gets it (packaged to the stack's bucket,
        translated, adapted to moto), and each function's code directory."""
        s3 = session(self.region).client("s3")

        def upload(name: str, content: bytes) -> str:
            key = content_key(name, content)
            if key not in self._uploaded:  # functions sharing a CodeUri share its zip
                s3.put_object(Bucket=self._bucket, Key=key, Body=content)
                self._uploaded.add(key)
            return f"s3://{self._bucket}/{key}"

        def fetch(bucket: str, key: str) -> bytes:
            return bytes(s3.get_object(Bucket=bucket, Key=key)["Body"].read())

        directory = self.template_path.resolve().parent
        packaged = package(self._document, directory, upload, code_root=self.handlers_root)
        translated = translate(
            packaged.document, self.parameters, region=self.region, account_id=self.account_id
        )
        self.template = cfn_workarounds.prepare(translated, stack_name=self.stack_name, fetch=fetch)
        self.code_dirs = packaged.code_dirs

    def _put_stack(self, action: Literal["create", "update"]) -> None:
        """CreateStack or UpdateStack with the runtime's parameters, then the stack as made."""
        self._prepare()
        cloudformation = session(self.region).client("cloudformation")
        call = cloudformation.create_stack if action == "create" else cloudformation.update_stack
        with cfn_workarounds.quiet_unsupported_resources():
            try:
                call(
                    StackName=self.stack_name,
                    TemplateBody=json.dumps(self.template),
                    Parameters=[
                        {"ParameterKey": key, "ParameterValue": value}
                        for key, value in self.parameters.items()
                    ],
                    Capabilities=CAPABILITIES,
                )
            except Exception as error:  # moto raises a resource model's error through the call
                raise TemplateError(
                    f"moto's CloudFormation could not {action} stack {self.stack_name}: {error!r}"
                ) from error
        self._read_stack(f"{action.upper()}_COMPLETE")

    def _read_stack(self, expected_status: str) -> None:
        """The stack's resources, parameters and names, as the engine created them."""
        cloudformation = session(self.region).client("cloudformation")
        with cfn_workarounds.quiet_unsupported_resources():
            (stack,) = cloudformation.describe_stacks(StackName=self.stack_name)["Stacks"]
            if stack["StackStatus"] != expected_status:
                raise TemplateError(
                    f"stack {self.stack_name} is {stack['StackStatus']}: "
                    f"{stack.get('StackStatusReason', '')}"
                )
            listed = cloudformation.describe_stack_resources(StackName=self.stack_name)
        # moto lists a resource it did not create (skipped, or its condition is false)
        # without a logical id.
        self._resources = {
            str(item["LogicalResourceId"]): (
                str(item["ResourceType"]),
                str(item.get("PhysicalResourceId") or ""),
            )
            for item in listed["StackResources"]
            if "LogicalResourceId" in item
        }
        self._stack_parameters = {
            str(item["ParameterKey"]): str(item.get("ParameterValue", ""))
            for item in stack.get("Parameters", [])
        }
        self._stack_id = str(stack["StackId"])
        self._skipped = [
            SkippedResource(logical_id, str(body.get("Type")))
            for logical_id, body in self.template["Resources"].items()
            if logical_id not in self._resources
            and (
                "Condition" not in body
                or moto_state.stack_condition(
                    self.stack_name, str(body["Condition"]), self.region, self.account_id
                )
            )
        ]
        # Every ARN now, as the engine resolves !GetAtt: names stay readable after stop.
        self._arns = {}
        for logical_id in self._resources:
            with contextlib.suppress(Exception):  # a model without an Arn attribute
                arn = moto_state.stack_attribute(
                    self.stack_name, logical_id, "Arn", self.region, self.account_id
                )
                if isinstance(arn, str) and arn.startswith("arn:"):
                    self._arns[logical_id] = arn
        # moto's state machine model has no Arn; its Ref is the ARN
        self._arns.update(self.of_type(STATE_MACHINE_TYPE))


def _stack_parameters(
    document: Mapping[str, Any], previous: Mapping[str, str], given: Mapping[str, str]
) -> dict[str, str]:
    """CreateStack's or UpdateStack's parameter values: the runtime's own defaults and the
    stack's previous values only for the parameters the template declares; a caller's all go."""
    declared = document.get("Parameters") or {}
    defaults = {
        "OwnerName": DEFAULT_OWNER,
        "WritesPerSecond": str(UNPACED_WRITES_PER_SECOND),
        "ReadsPerSecond": str(UNPACED_READS_PER_SECOND),
    }
    values = {key: value for key, value in {**defaults, **previous}.items() if key in declared}
    return {**values, **{key: str(value) for key, value in given.items()}}


_SESSIONS: dict[str, boto3.session.Session] = {}


def session(region: str = REGION) -> boto3.session.Session:
    """One boto3 session per region for every runtime: it caches the parsed service models
    (seconds)."""
    if region not in _SESSIONS:
        _SESSIONS[region] = boto3.session.Session(
            aws_access_key_id="testing", aws_secret_access_key="testing", region_name=region
        )
    return _SESSIONS[region]
