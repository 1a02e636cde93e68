"""Read a SAM/CloudFormation template and resolve its intrinsics to local names and ARNs.

The local runtime deploys the real `template.yaml` into moto, so it must read what `sam
deploy` reads: YAML with short tags (`!Ref`, `!GetAtt`, `!Sub`, `!If`, ...), `Globals`,
parameters with defaults, conditions, and references between resources. Physical names
are what CloudFormation would pick: the resource's own name property when set, otherwise
`<stack>-<LogicalId>`. Resource types the runtime does not create still resolve, to
placeholder names and ARNs, so a template with IAM roles or alarms loads unchanged.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from sg_reconciler_tools.local.moto_hooks import ACCOUNT_ID


class TemplateError(ValueError):
    """The template uses something the local runtime cannot resolve or deploy."""


class _CfnLoader(yaml.SafeLoader):
    """A safe YAML loader that turns CloudFormation short tags into their long form."""


def _construct_short_tag(loader: yaml.SafeLoader, suffix: str, node: yaml.Node) -> Any:
    value: Any
    if isinstance(node, yaml.ScalarNode):
        value = loader.construct_scalar(node)
    elif isinstance(node, yaml.SequenceNode):
        value = loader.construct_sequence(node, deep=True)
    elif isinstance(node, yaml.MappingNode):
        value = loader.construct_mapping(node, deep=True)
    else:  # pragma: no cover - yaml has no other node kinds
        raise TemplateError(f"unsupported YAML node for !{suffix}")
    if suffix in ("Ref", "Condition"):
        return {suffix: value}
    if suffix == "GetAtt" and isinstance(value, str):
        value = value.split(".", 1)
    return {f"Fn::{suffix}": value}


_CfnLoader.add_multi_constructor("!", _construct_short_tag)


def load_yaml(text: str) -> Any:
    """Parse CloudFormation YAML (or JSON), short tags included."""
    return yaml.load(text, Loader=_CfnLoader)


_NO_VALUE = object()  # AWS::NoValue: the key or list item disappears

# Resource type -> (name property, what Ref returns, ARN pattern). Patterns use {partition},
# {region}, {account} and {name}.
_REF_NAME, _REF_ARN, _REF_URL = "name", "arn", "url"


@dataclass(frozen=True)
class _Kind:
    name_property: str | None
    ref: str
    arn: str


_KINDS: dict[str, _Kind] = {
    "AWS::Serverless::Function": _Kind(
        "FunctionName", _REF_NAME, "arn:{partition}:lambda:{region}:{account}:function:{name}"
    ),
    "AWS::Lambda::Function": _Kind(
        "FunctionName", _REF_NAME, "arn:{partition}:lambda:{region}:{account}:function:{name}"
    ),
    "AWS::DynamoDB::Table": _Kind(
        "TableName", _REF_NAME, "arn:{partition}:dynamodb:{region}:{account}:table/{name}"
    ),
    "AWS::Serverless::SimpleTable": _Kind(
        "TableName", _REF_NAME, "arn:{partition}:dynamodb:{region}:{account}:table/{name}"
    ),
    "AWS::SQS::Queue": _Kind(
        "QueueName", _REF_URL, "arn:{partition}:sqs:{region}:{account}:{name}"
    ),
    "AWS::Serverless::StateMachine": _Kind(
        "Name", _REF_ARN, "arn:{partition}:states:{region}:{account}:stateMachine:{name}"
    ),
    "AWS::StepFunctions::StateMachine": _Kind(
        "StateMachineName",
        _REF_ARN,
        "arn:{partition}:states:{region}:{account}:stateMachine:{name}",
    ),
    "AWS::Events::Rule": _Kind(
        "Name", _REF_NAME, "arn:{partition}:events:{region}:{account}:rule/{name}"
    ),
    "AWS::SNS::Topic": _Kind(
        "TopicName", _REF_ARN, "arn:{partition}:sns:{region}:{account}:{name}"
    ),
    "AWS::IAM::Role": _Kind("RoleName", _REF_NAME, "arn:{partition}:iam::{account}:role/{name}"),
    "AWS::IAM::ManagedPolicy": _Kind(
        "ManagedPolicyName", _REF_ARN, "arn:{partition}:iam::{account}:policy/{name}"
    ),
    "AWS::SSM::Parameter": _Kind(
        "Name", _REF_NAME, "arn:{partition}:ssm:{region}:{account}:parameter/{name}"
    ),
    "AWS::Logs::LogGroup": _Kind(
        "LogGroupName", _REF_NAME, "arn:{partition}:logs:{region}:{account}:log-group:{name}:*"
    ),
    "AWS::Serverless::LayerVersion": _Kind(
        "LayerName", _REF_ARN, "arn:{partition}:lambda:{region}:{account}:layer:{name}:1"
    ),
    "AWS::CloudWatch::Alarm": _Kind(
        "AlarmName", _REF_NAME, "arn:{partition}:cloudwatch:{region}:{account}:alarm:{name}"
    ),
}
_IMPLICIT_ROLE_OWNERS = ("AWS::Serverless::Function", "AWS::Serverless::StateMachine")
_DEFAULT_KIND = _Kind(None, _REF_NAME, "arn:{partition}:local:{region}:{account}:{name}")

_SUB_PATTERN = re.compile(r"\$\{([^}]*)\}")


@dataclass
class Template:
    """A loaded template: its file, document, and the stack it is resolved for."""

    path: Path
    document: dict[str, Any]
    stack_name: str = "sg-reconciler-local"
    region: str = "eu-west-1"
    account_id: str = ACCOUNT_ID
    parameters: dict[str, str] = field(default_factory=dict)
    queue_url: Callable[[str], str] | None = None  # how the emulator spells a queue's URL
    _names: dict[str, str] = field(default_factory=dict, repr=False)
    _naming: set[str] = field(default_factory=set, repr=False)

    @classmethod
    def load(cls, path: str | Path, **kwargs: Any) -> Template:
        file = Path(path)
        document = load_yaml(file.read_text(encoding="utf-8"))
        if not isinstance(document, dict) or not isinstance(document.get("Resources"), dict):
            raise TemplateError(f"{file}: not a CloudFormation template (no Resources)")
        return cls(file, document, **kwargs)

    @property
    def directory(self) -> Path:
        return self.path.parent

    @property
    def resources(self) -> dict[str, dict[str, Any]]:
        """The template's resources plus those SAM adds implicitly (a function's `<Id>Role`)."""
        resources: dict[str, dict[str, Any]] = dict(self.document["Resources"])
        for logical_id, body in self.document["Resources"].items():
            if body.get("Type") in _IMPLICIT_ROLE_OWNERS and "Role" not in (
                body.get("Properties") or {}
            ):
                resources.setdefault(f"{logical_id}Role", {"Type": "AWS::IAM::Role"})
        return resources

    def resource(self, logical_id: str) -> dict[str, Any]:
        if logical_id not in self.resources:
            raise TemplateError(f"no resource {logical_id!r} in {self.path.name}")
        return self.resources[logical_id]

    def type_of(self, logical_id: str) -> str:
        return str(self.resource(logical_id).get("Type", ""))

    def of_type(self, *types: str) -> list[str]:
        """Logical ids of the resources of some types whose Condition holds, in file order."""
        return [
            logical_id
            for logical_id, body in self.resources.items()
            if body.get("Type") in types and self._resource_enabled(body)
        ]

    def properties(self, logical_id: str) -> dict[str, Any]:
        """The resource's properties with SAM `Globals` merged in (unresolved)."""
        body = self.resource(logical_id)
        own: dict[str, Any] = dict(body.get("Properties") or {})
        kind = str(body.get("Type", ""))
        section = (
            kind.removeprefix("AWS::Serverless::") if kind.startswith("AWS::Serverless::") else None
        )
        defaults = ((self.document.get("Globals") or {}).get(section) or {}) if section else {}
        return _merge_globals(defaults, own)

    # Names, Refs and attributes ---------------------------------------------------------

    def physical_name(self, logical_id: str) -> str:
        """The resource's name: its name property, resolved, else `<stack>-<LogicalId>`."""
        if logical_id in self._names:
            return self._names[logical_id]
        if logical_id in self._naming:
            raise TemplateError(f"the name of {logical_id} depends on itself")
        self._naming.add(logical_id)
        try:
            kind = _KINDS.get(self.type_of(logical_id), _DEFAULT_KIND)
            explicit = self.properties(logical_id).get(kind.name_property or "")
            name = str(self.resolve(explicit)) if explicit is not None else None
            if not name:
                name = f"{self.stack_name}-{logical_id}"
                if self.type_of(logical_id) == "AWS::SQS::Queue" and self.properties(
                    logical_id
                ).get("FifoQueue"):
                    name += ".fifo"
            self._names[logical_id] = name
            return name
        finally:
            self._naming.discard(logical_id)

    def arn(self, logical_id: str) -> str:
        kind = _KINDS.get(self.type_of(logical_id), _DEFAULT_KIND)
        return kind.arn.format(
            partition="aws",
            region=self.region,
            account=self.account_id,
            name=self.physical_name(logical_id),
        )

    def ref(self, name: str) -> Any:
        """What `!Ref name` returns: a parameter, a pseudo parameter or a resource."""
        pseudo = {
            "AWS::Region": self.region,
            "AWS::AccountId": self.account_id,
            "AWS::Partition": "aws",
            "AWS::StackName": self.stack_name,
            "AWS::StackId": f"arn:aws:cloudformation:{self.region}:{self.account_id}:stack/{self.stack_name}/local",
            "AWS::URLSuffix": "amazonaws.com",
            "AWS::NoValue": _NO_VALUE,
        }
        if name in pseudo:
            return pseudo[name]
        if name in (self.document.get("Parameters") or {}):
            return self._parameter(name)
        if name not in self.resources:
            raise TemplateError(f"!Ref {name}: no such parameter or resource")
        kind = _KINDS.get(self.type_of(name), _DEFAULT_KIND)
        if kind.ref == _REF_ARN:
            return self.arn(name)
        if kind.ref == _REF_URL:
            return self._queue_url(name)
        return self.physical_name(name)

    def get_att(self, logical_id: str, attribute: str) -> str:
        resource_type = self.type_of(logical_id)
        name = self.physical_name(logical_id)
        if attribute == "Arn":
            return self.arn(logical_id)
        if attribute in ("Name", "QueueName", "TopicName") or attribute.endswith("Name"):
            return name
        if attribute == "QueueUrl" and resource_type == "AWS::SQS::Queue":
            return self._queue_url(logical_id)
        if attribute == "StreamArn":
            return f"{self.arn(logical_id)}/stream/local"
        if attribute in ("GroupId", "Id"):
            return name
        raise TemplateError(f"!GetAtt {logical_id}.{attribute} is not supported locally")

    def _queue_url(self, logical_id: str) -> str:
        name = self.physical_name(logical_id)
        if self.queue_url is not None:
            return self.queue_url(name)
        return f"https://sqs.{self.region}.amazonaws.com/{self.account_id}/{name}"

    def _parameter(self, name: str) -> Any:
        spec = self.document["Parameters"][name] or {}
        if name in self.parameters:
            return self.parameters[name]
        if "Default" not in spec:
            raise TemplateError(f"parameter {name} has no Default; pass it in `parameters`")
        value = spec["Default"]
        if spec.get("Type") == "CommaDelimitedList" and isinstance(value, str):
            return value.split(",")
        return value if isinstance(value, list) else str(value)

    # Conditions -------------------------------------------------------------------------

    def condition(self, name: str) -> bool:
        conditions = self.document.get("Conditions") or {}
        if name not in conditions:
            raise TemplateError(f"no condition {name!r}")
        return self._truth(conditions[name])

    def _resource_enabled(self, body: Mapping[str, Any]) -> bool:
        name = body.get("Condition")
        return True if name is None else self.condition(str(name))

    def _truth(self, expression: Any) -> bool:
        if isinstance(expression, Mapping) and len(expression) == 1:
            ((key, arg),) = expression.items()
            if key == "Condition":
                return self.condition(str(arg))
            if key == "Fn::Equals":
                left, right = (self.resolve(item) for item in arg)
                return str(left) == str(right)
            if key == "Fn::Not":
                return not self._truth(arg[0])
            if key == "Fn::And":
                return all(self._truth(item) for item in arg)
            if key == "Fn::Or":
                return any(self._truth(item) for item in arg)
        raise TemplateError(f"unsupported condition {expression!r}")

    # Intrinsics -------------------------------------------------------------------------

    def resolve(self, value: Any) -> Any:
        """Resolve every intrinsic function in a value; AWS::NoValue removes the entry."""
        resolved = self._resolve(value)
        return None if resolved is _NO_VALUE else resolved

    def _resolve(self, value: Any) -> Any:
        if isinstance(value, list):
            items = [self._resolve(item) for item in value]
            return [item for item in items if item is not _NO_VALUE]
        if not isinstance(value, Mapping):
            return value
        if len(value) == 1:
            ((key, arg),) = value.items()
            if key == "Ref":
                return self.ref(str(arg))
            if key == "Condition" or key.startswith("Fn::"):
                return self._function(key, arg)
        resolved = {key: self._resolve(item) for key, item in value.items()}
        return {key: item for key, item in resolved.items() if item is not _NO_VALUE}

    def _function(self, key: str, arg: Any) -> Any:
        if key == "Fn::GetAtt":
            logical_id, attribute = arg if isinstance(arg, list) else str(arg).split(".", 1)
            return self.get_att(str(self._resolve(logical_id)), str(self._resolve(attribute)))
        if key == "Fn::Sub":
            return self._sub(arg)
        if key == "Fn::Join":
            delimiter, items = arg
            return str(delimiter).join(str(item) for item in self._resolve(items))
        if key == "Fn::If":
            name, then, otherwise = arg
            return self._resolve(then if self.condition(str(name)) else otherwise)
        if key == "Fn::Select":
            index, items = arg
            return self._resolve(items)[int(self._resolve(index))]
        if key == "Fn::Split":
            delimiter, text = arg
            return str(self._resolve(text)).split(str(delimiter))
        if key == "Fn::FindInMap":
            mapping, first, second = (self._resolve(item) for item in arg)
            return self.document["Mappings"][mapping][first][second]
        if key == "Fn::GetAZs":
            return [f"{self.region}{zone}" for zone in "abc"]
        if key == "Fn::Base64":
            return self._resolve(arg)
        if key == "Fn::ToJsonString":
            return json.dumps(self._resolve(arg), separators=(",", ":"))
        if key == "Fn::Length":
            return len(self._resolve(arg))
        if key in ("Fn::Equals", "Fn::Not", "Fn::And", "Fn::Or", "Condition"):
            return self._truth({key: arg})
        raise TemplateError(f"{key} cannot be resolved locally")

    def _sub(self, arg: Any) -> str:
        if isinstance(arg, list):
            text, variables = arg[0], {k: self._resolve(v) for k, v in arg[1].items()}
        else:
            text, variables = arg, {}

        def replace(match: re.Match[str]) -> str:
            inner = match.group(1)
            if inner.startswith("!"):
                return "${" + inner[1:] + "}"
            if inner in variables:
                return str(variables[inner])
            if "." in inner and not inner.startswith("AWS::"):
                logical_id, attribute = inner.split(".", 1)
                return self.get_att(logical_id, attribute)
            return str(self.ref(inner))

        return _SUB_PATTERN.sub(replace, str(text))


def _merge_globals(defaults: Mapping[str, Any], own: Mapping[str, Any]) -> dict[str, Any]:
    """SAM's Globals rule: maps merge (the resource wins), anything else is overridden."""
    merged = dict(defaults)
    for key, value in own.items():
        base = merged.get(key)
        if isinstance(base, Mapping) and isinstance(value, Mapping):
            merged[key] = _merge_globals(base, value)
        else:
            merged[key] = value
    return merged
