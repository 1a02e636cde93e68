"""Every workaround for running the stack on moto's CloudFormation (moto 5.2.5), one per gap.

The runtime creates the stack with `create_stack` from the template SAM translated
(`stack.translate`). Where moto's engine, or a service it creates a resource in, lacks
what the template needs, one function here bridges exactly that gap: `prepare` changes
the template, the `Patch`-returning ones change moto while the runtime runs, and two read
the created stack. docs/local-runtime.md lists them; `test_cfn_workarounds.py` shows
moto alone for each. Resources moto has no model for (the queue policy, alarms, an SNS
e-mail subscription) are skipped, and the runtime lists them (`LocalRuntime.skipped`).
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Final

from sg_reconciler_tools.local import patching
from sg_reconciler_tools.local.stack import TemplateError

Fetch = Callable[[str, str], bytes]  # (bucket, key) -> the object's bytes

PLACEHOLDER: Final = re.compile(r"\$\{([A-Za-z0-9_]+)\}")
STATE_MACHINE: Final = "AWS::StepFunctions::StateMachine"


def prepare(template: dict[str, Any], *, stack_name: str, fetch: Fetch) -> dict[str, Any]:
    """Apply every template workaround, in order; returns the template (changed in place)."""
    name_ssm_parameters(template, stack_name)
    inline_state_machine_definitions(template, fetch)
    substitute_state_machine_definitions(template)
    disable_sqs_event_source_mappings(template)
    serialize_role_policy_documents(template)
    return template


def _resources(template: Mapping[str, Any], kind: str) -> Iterator[tuple[str, dict[str, Any]]]:
    for logical_id, body in (template.get("Resources") or {}).items():
        if isinstance(body, dict) and body.get("Type") == kind:
            properties = body.get("Properties")
            if not isinstance(properties, dict):
                properties = body["Properties"] = {}
            yield logical_id, properties


def name_ssm_parameters(template: dict[str, Any], stack_name: str) -> None:
    """Name every unnamed AWS::SSM::Parameter `<stack>-<LogicalId>`, as CloudFormation does
    (moto's `Parameter.create_from_cloudformation_json` fails on `name=None`).

    AWS: https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-resource-ssm-parameter.html (Name)
    """
    for logical_id, properties in _resources(template, "AWS::SSM::Parameter"):
        properties.setdefault("Name", f"{stack_name}-{logical_id}")


def inline_state_machine_definitions(template: dict[str, Any], fetch: Fetch) -> None:
    """Turn a state machine's `DefinitionS3Location` (where `sam package` put its file) into
    the `DefinitionString` it holds; moto reads only DefinitionString.

    AWS: https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-resource-stepfunctions-statemachine.html
    """
    for logical_id, properties in _resources(template, STATE_MACHINE):
        location = properties.pop("DefinitionS3Location", None)
        if location is None:
            continue
        if not isinstance(location, dict) or not {"Bucket", "Key"} <= location.keys():
            raise TemplateError(f"{logical_id}: DefinitionS3Location needs a Bucket and a Key")
        text = fetch(str(location["Bucket"]), str(location["Key"])).decode("utf-8")
        properties["DefinitionString"] = text


def substitute_state_machine_definitions(template: dict[str, Any]) -> None:
    """Apply `DefinitionSubstitutions`, which moto ignores: the definition becomes an `Fn::Join`
    of its text and the substitutions' values, so moto's engine resolves each; a `${Name}`
    without an entry is refused (it would reach Step Functions as text).

    AWS: https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-resource-stepfunctions-statemachine.html
    """
    for logical_id, properties in _resources(template, STATE_MACHINE):
        substitutions = properties.pop("DefinitionSubstitutions", None) or {}
        if "DefinitionString" not in properties:
            continue
        parts: list[Any] = []
        for part in _definition_parts(logical_id, properties["DefinitionString"]):
            for piece in _substitute(logical_id, part, substitutions):
                if isinstance(piece, str) and parts and isinstance(parts[-1], str):
                    parts[-1] += piece  # adjacent text stays one string
                else:
                    parts.append(piece)
        if all(isinstance(part, str) for part in parts):
            properties["DefinitionString"] = "".join(parts)
        else:
            properties["DefinitionString"] = {"Fn::Join": ["", parts]}


def _definition_parts(logical_id: str, definition: Any) -> list[Any]:
    """A DefinitionString as a list of text and intrinsics (SAM writes an inline Definition
    as an Fn::Join of its lines).
    """
    if isinstance(definition, str):
        return [definition]
    if isinstance(definition, dict) and list(definition) == ["Fn::Join"]:
        delimiter, items = definition["Fn::Join"]
        parts: list[Any] = []
        for index, item in enumerate(items):
            if index:
                parts.append(str(delimiter))
            parts.append(item)
        return parts
    if isinstance(definition, dict) and len(definition) == 1:
        return [definition]  # another intrinsic: its value is the text
    raise TemplateError(f"{logical_id}: DefinitionString is neither text nor an intrinsic")


def _substitute(logical_id: str, part: Any, substitutions: Mapping[str, Any]) -> list[Any]:
    if not isinstance(part, str):
        return [part]
    pieces: list[Any] = []
    position = 0
    for match in PLACEHOLDER.finditer(part):
        name = match.group(1)
        if name not in substitutions:
            raise TemplateError(
                f"{logical_id}: no DefinitionSubstitutions entry for {match.group(0)}"
            )
        pieces += [part[position : match.start()], substitutions[name]]
        position = match.end()
    pieces.append(part[position:])
    return [piece for piece in pieces if piece != ""]


def disable_sqs_event_source_mappings(template: dict[str, Any]) -> None:
    """Create a function's SQS event-source mappings disabled: moto hands every message to an
    enabled mapping's function the moment it is sent, one record per call, and deletes it.
    Disabled, the queue keeps its messages and the tests and the demo play Lambda's poller.

    Tooling: the tests and the demo read the queue as Lambda's poller would.
    """
    queues = {logical_id for logical_id, _ in _resources(template, "AWS::SQS::Queue")}
    for _, properties in _resources(template, "AWS::Lambda::EventSourceMapping"):
        source = properties.get("EventSourceArn")
        from_queue = (
            isinstance(source, dict) and (source.get("Fn::GetAtt") or [None])[0] in queues
        ) or (isinstance(source, str) and source.startswith("arn:aws:sqs:"))
        if from_queue:
            properties["Enabled"] = False


def serialize_role_policy_documents(template: dict[str, Any]) -> None:
    """Hand moto a role's inline policy documents as JSON text (`Fn::ToJsonString`): moto
    stores an object as it is, and GetRolePolicy answers with its Python repr.

    AWS: https://docs.aws.amazon.com/IAM/latest/APIReference/API_GetRolePolicy.html
    """
    for _, properties in _resources(template, "AWS::IAM::Role"):
        for policy in properties.get("Policies") or []:
            document = policy.get("PolicyDocument") if isinstance(policy, dict) else None
            if isinstance(document, dict) and "Fn::ToJsonString" not in document:
                policy["PolicyDocument"] = {"Fn::ToJsonString": document}


def environment_strings(variables: Mapping[str, Any]) -> dict[str, str]:
    """A function's environment as Lambda holds it, every value a string (moto keeps a Number
    parameter as the int it parsed).

    AWS: https://docs.aws.amazon.com/lambda/latest/api/API_Environment.html
    """
    return {str(key): _text(value) for key, value in variables.items()}


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list)):
        return json.dumps(value)
    return str(value)


def lambda_rule_targets(events: Any, rule_names: list[str]) -> list[tuple[str, dict[str, Any]]]:
    """(function name, event pattern) for each Lambda target of the stack's enabled pattern
    rules: moto's EventBridge raises NotImplementedError for a Lambda target, so the runtime
    delivers the events it makes (Step Functions status changes) to these itself.

    Tooling: moto's EventBridge cannot invoke a Lambda target; the runtime does.
    """
    found: list[tuple[str, dict[str, Any]]] = []
    for name in rule_names:
        rule = events.describe_rule(Name=name)
        if rule.get("State", "ENABLED") != "ENABLED" or not rule.get("EventPattern"):
            continue
        pattern = json.loads(rule["EventPattern"])
        for target in events.list_targets_by_rule(Rule=name)["Targets"]:
            arn = str(target["Arn"])
            if arn.split(":")[2:3] == ["lambda"]:
                found.append((arn.split(":")[6], pattern))
    return found


def create_state_machines_in_the_executing_backend() -> patching.Patch:
    """Create a stack's state machines where executions run: moto's
    `StateMachine.create_from_cloudformation_json` creates them in the backend the API never
    looks at when the interpreter is on. The replacement is moto's own call on the API's
    backend (which validates the definition), with the `StateMachineType` moto's drops.

    AWS: https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-resource-stepfunctions-statemachine.html
    """
    from moto.stepfunctions.models import StateMachine
    from moto.stepfunctions.responses import get_backend
    from moto.stepfunctions.utils import cfn_to_api_tags

    def create_from_cloudformation_json(
        cls: Any,
        /,
        resource_name: str,
        cloudformation_json: Any,
        account_id: str,
        region_name: str,
        **kwargs: Any,
    ) -> Any:
        properties = cloudformation_json["Properties"]
        backend = get_backend(account_id, region_name)
        return backend.create_state_machine(
            properties.get("StateMachineName", resource_name),
            properties.get("DefinitionString", ""),
            properties.get("RoleArn", ""),
            tags=cfn_to_api_tags(properties.get("Tags", [])),
            sm_type=properties.get("StateMachineType"),
        )

    return patching.replace(
        StateMachine,
        "create_from_cloudformation_json",
        classmethod(create_from_cloudformation_json),
    )


def update_state_machines_in_the_executing_backend() -> patching.Patch:
    """Update a stack's state machines where executions run: moto's
    `StateMachine.update_from_cloudformation_json` looks in the other backend and fails with
    `StateMachineDoesNotExist`. Definition and role, in place, as AWS does when the name
    stays.

    AWS: https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-resource-stepfunctions-statemachine.html
    """
    from moto.stepfunctions.models import StateMachine
    from moto.stepfunctions.responses import get_backend

    def update_from_cloudformation_json(
        cls: Any,
        /,
        original_resource: Any,
        new_resource_name: str,
        cloudformation_json: Any,
        account_id: str,
        region_name: str,
    ) -> Any:
        properties = cloudformation_json.get("Properties", {})
        return get_backend(account_id, region_name).update_state_machine(
            original_resource.arn,
            definition=properties.get("DefinitionString"),
            role_arn=properties.get("RoleArn"),
        )

    return patching.replace(
        StateMachine,
        "update_from_cloudformation_json",
        classmethod(update_from_cloudformation_json),
    )


def ref_layer_versions_as_arns() -> patching.Patch:
    """`!Ref` to an `AWS::Lambda::LayerVersion` is its ARN: moto's `LayerVersion` has no
    `physical_resource_id`, so a stack update passed the model object as a layer ARN.

    AWS: https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-resource-lambda-layerversion.html (Ref)
    """
    from moto.awslambda.models import LayerVersion

    def physical_resource_id(self: Any) -> str:
        return str(self.arn)

    return patching.add(LayerVersion, "physical_resource_id", property(physical_resource_id))


def apply_table_time_to_live() -> patching.Patch:
    """Give a stack's DynamoDB tables their `TimeToLiveSpecification` (moto's
    `Table.create_from_cloudformation_json` drops it); moto never expires items either way.

    AWS: https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-properties-dynamodb-table-timetolivespecification.html
    """
    from moto.dynamodb.models import dynamodb_backends
    from moto.dynamodb.models.table import Table

    original = patching.require(Table, "create_from_cloudformation_json")

    def create_from_cloudformation_json(
        cls: Any,
        /,
        resource_name: str,
        cloudformation_json: Any,
        account_id: str,
        region_name: str,
        **kwargs: Any,
    ) -> Any:
        table = original(resource_name, cloudformation_json, account_id, region_name, **kwargs)
        specification = (cloudformation_json.get("Properties") or {}).get("TimeToLiveSpecification")
        if specification:
            enabled = str(specification.get("Enabled", False)).lower() == "true"
            dynamodb_backends[account_id][region_name].update_time_to_live(
                table.name,
                {"Enabled": enabled, "AttributeName": specification.get("AttributeName")},
            )
        return table

    return patching.replace(
        Table, "create_from_cloudformation_json", classmethod(create_from_cloudformation_json)
    )


def match_events_as_eventbridge() -> patching.Patch:
    """Deliver an event only to enabled rules whose pattern it matches: moto's
    `Rule.send_to_targets` offers it to schedule and DISABLED rules too, and a schedule
    rule's Lambda target made every PutEvents raise NotImplementedError.

    AWS: https://docs.aws.amazon.com/eventbridge/latest/APIReference/API_PutRule.html and API_DisableRule.html
    """
    from moto.events.models import Rule

    original = patching.require(Rule, "send_to_targets")

    def send_to_targets(self: Any, original_event: Any, transform_input: bool = True) -> None:
        if self.state != "ENABLED" or not self.event_pattern.get_pattern():
            return
        original(self, original_event, transform_input)

    return patching.replace(Rule, "send_to_targets", send_to_targets)


def parse_json_templates_as_json() -> patching.Patch:
    """Parse a JSON template body with `json` (moto's `Stack.parse_template` reads it with
    PyYAML's pure-Python loader: 0.4 s for the app's template, the largest part of a start).

    Tooling: speed only, the template is the same.
    """
    from moto.cloudformation.models import Stack

    original = patching.require(Stack, "parse_template")

    def parse_template(template: str) -> dict[str, Any]:
        if template.lstrip().startswith("{"):
            with contextlib.suppress(ValueError):
                parsed: dict[str, Any] = json.loads(template)
                return parsed
        result: dict[str, Any] = original(template)
        return result

    return patching.replace(Stack, "parse_template", staticmethod(parse_template))


@contextmanager
def quiet_unsupported_resources() -> Iterator[None]:
    """Silence moto's warning for each resource type it skips (repeated on every
    DescribeStackResources); the runtime lists the skipped resources instead.

    Tooling: a warning silenced, no answer of moto's changed (`LocalRuntime.skipped`).
    """
    import logging
    import warnings

    logger = logging.getLogger("moto")  # moto.cloudformation.parsing logs on it
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=r"Tried to parse .* not supported")
            yield
    finally:
        logger.setLevel(level)
