"""Every workaround for running the stack on moto (moto 5.2.5), one function per gap.

The local runtime creates the stack with moto's CloudFormation (`create_stack`) from the
template SAM translated (`stack.translate`). Where moto's engine, or a service it creates
a resource in, lacks something the template needs, one function here bridges exactly that
gap, and its docstring says what moto does instead. `tests/tooling/emulator/test_cfn_workarounds.py`
shows, for each, what moto does alone and that the workaround fixes it, so a moto upgrade
that closes a gap shows up there.

Changes to the translated template (`prepare` applies them in this order):
  name_ssm_parameters                   an SSM parameter needs a Name
  inline_state_machine_definitions      DefinitionS3Location -> DefinitionString
  substitute_state_machine_definitions  DefinitionSubstitutions, resolved by the engine
  disable_sqs_event_source_mappings     moto would drain the queue at every send
  serialize_role_policy_documents       role policies as JSON, not a Python repr
Patches of moto's models, while the runtime runs:
  create_state_machines_in_the_executing_backend  where the Step Functions API looks
  update_state_machines_in_the_executing_backend  and where a stack update finds them
  ref_layer_versions_as_arns            !Ref to a layer version is its ARN
  apply_table_time_to_live              a table's TimeToLiveSpecification
  match_events_as_eventbridge           schedule and disabled rules take no events
  parse_json_templates_as_json          0.4 s of YAML parsing per start
Reading the created stack:
  environment_strings                   a Number parameter in an environment is text
  lambda_rule_targets                   moto's EventBridge has no Lambda targets

Resources moto's CloudFormation has no model for (the SQS queue policy, CloudWatch alarms,
an SNS e-mail subscription) it skips, with a warning (`quiet_unsupported_resources`):
nothing here creates them, and the runtime lists them (`LocalRuntime.skipped`).
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
    """Name every AWS::SSM::Parameter the template leaves unnamed: `<stack>-<LogicalId>`.

    CloudFormation names such a parameter itself; moto's `Parameter.
    create_from_cloudformation_json` calls `put_parameter(name=None)`, which fails with
    AttributeError and leaves the stack half created.

    AWS: https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-resource-ssm-parameter.html (Name)
    """
    for logical_id, properties in _resources(template, "AWS::SSM::Parameter"):
        properties.setdefault("Name", f"{stack_name}-{logical_id}")


def inline_state_machine_definitions(template: dict[str, Any], fetch: Fetch) -> None:
    """Turn a state machine's `DefinitionS3Location` into the `DefinitionString` it holds.

    `sam package` uploads a `DefinitionUri` file and SAM points the state machine at it
    with DefinitionS3Location; moto's `StateMachine.create_from_cloudformation_json` reads
    only DefinitionString and creates the machine with an empty definition.

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
    """Apply `DefinitionSubstitutions` to the definition, with the values the engine resolves.

    moto ignores DefinitionSubstitutions, so `${Name}` placeholders stay in the machine's
    definition. The definition becomes an `Fn::Join` of its text and the substitutions'
    values (a !GetAtt, a !Ref...), so moto's engine resolves each as CloudFormation does
    and the text is substituted as Step Functions does (the definition is parsed after,
    so a placeholder may stand for a number). A `${Name}` without an entry is refused: it
    would reach Step Functions as literal text.

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
    as an Fn::Join of its lines)."""
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
    """Create a function's SQS event-source mappings disabled.

    moto's SQS hands every message to an enabled mapping's function the moment it is sent
    (`Queue.add_message`: inside SendMessage or EventBridge's delivery, one record per
    call) and deletes it: no batching window, no batches, and the queue is always empty.
    Disabled, the queue keeps its messages and the tests and the demo play Lambda's poller
    (receive a batch, invoke the function, delete what it processed).

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
    """Hand moto a role's inline policy documents as JSON text (`Fn::ToJsonString`).

    moto's `Role.create_from_cloudformation_json` stores a `Policies[].PolicyDocument`
    object as it is, and GetRolePolicy then answers with its Python repr (single quotes),
    which no JSON reader takes. As text, the document is stored and returned as JSON; the
    engine still resolves the intrinsics inside it first.

    AWS: https://docs.aws.amazon.com/IAM/latest/APIReference/API_GetRolePolicy.html
    """
    for _, properties in _resources(template, "AWS::IAM::Role"):
        for policy in properties.get("Policies") or []:
            document = policy.get("PolicyDocument") if isinstance(policy, dict) else None
            if isinstance(document, dict) and "Fn::ToJsonString" not in document:
                policy["PolicyDocument"] = {"Fn::ToJsonString": document}


def environment_strings(variables: Mapping[str, Any]) -> dict[str, str]:
    """A function's environment as Lambda holds it: every value a string.

    moto keeps a Number parameter's value as the int it parsed (a `!Ref WritesPerSecond`
    comes back as 1000 from GetFunctionConfiguration); CloudFormation passes strings.

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
    """(function name, event pattern) for each Lambda target of the stack's pattern rules.

    moto's EventBridge (`Rule.send_to_targets`) delivers to SQS queues, log groups and
    buses; an event matching a rule with a Lambda target makes PutEvents raise
    NotImplementedError. The runtime delivers the events it makes (Step Functions status
    changes) to these functions itself, never through PutEvents, reading the rules as
    the engine deployed them (patterns with their !Ref resolved, targets, enabled state).

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
    """Create a stack's state machines where executions run.

    With `stepfunctions.execute_state_machine` (`moto_hooks.new_mock`), the Step
    Functions API is served by `moto.stepfunctions.parser.models.
    stepfunctions_parser_backends`; moto's `StateMachine.create_from_cloudformation_json`
    creates the machine in `moto.stepfunctions.models.stepfunctions_backends`, where the
    API never looks: the stack's machine could not be described or started. The
    replacement is moto's own, with the backend the API uses (which also validates the
    definition, as CreateStateMachine does) and the `StateMachineType` moto's drops.

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
    """Update a stack's state machines where executions run (a stack update, `update_stack`).

    moto's `StateMachine.update_from_cloudformation_json` updates the machine in
    `moto.stepfunctions.models.stepfunctions_backends`, where
    `create_state_machines_in_the_executing_backend` did not create it: the update fails
    with `StateMachineDoesNotExist`. The replacement updates the definition and role in the
    backend the API uses, in place, as AWS does when the name stays (the template names no
    machine, so it always stays).

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
    """`!Ref` to an `AWS::Lambda::LayerVersion` is its ARN, as on AWS (the resource's Ref in
    the CloudFormation template reference).

    moto's `LayerVersion` has no `physical_resource_id`, so its engine resolves the Ref to
    the model object itself. Creating a function drops `Layers` (moto keeps none), so the
    object went unseen; a stack update passes `Layers` to
    `LambdaFunction.update_configuration`, which looks each entry up as an ARN and fails
    (`'LayerVersion' object has no attribute 'replace'`).

    AWS: https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-resource-lambda-layerversion.html (Ref)
    """
    from moto.awslambda.models import LayerVersion

    def physical_resource_id(self: Any) -> str:
        return str(self.arn)

    return patching.add(LayerVersion, "physical_resource_id", property(physical_resource_id))


def apply_table_time_to_live() -> patching.Patch:
    """Give a stack's DynamoDB tables their `TimeToLiveSpecification`.

    moto's `Table.create_from_cloudformation_json` (moto.dynamodb.models.table) creates the
    table without it: DescribeTimeToLive says DISABLED for the lock and plan tables. The
    replacement creates the table as moto does, then applies the specification as
    UpdateTimeToLive does (moto never expires items either way).

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
    """Deliver a PutEvents event only to the enabled rules whose pattern it matches.

    moto's `Rule.send_to_targets` (moto.events.models) offers every event to every rule of
    the bus: a schedule rule (no pattern, and `EventPattern.matches_event` of no pattern
    is True) and a DISABLED rule too. SAM's `Schedule` event makes a schedule rule with a
    Lambda target, for which moto raises NotImplementedError: every PutEvents failed.

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
    """Parse a JSON template body with `json`, YAML ones as moto does.

    moto's `Stack.parse_template` reads every body with PyYAML's pure-Python `yaml.Loader`
    (JSON is YAML), which takes about 0.4 s for the app's translated template (86 KB, most
    of it the state machine's definition); that was the largest single part of a start.

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
    """Silence moto's warning for each resource type it skips (it repeats it on every
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
