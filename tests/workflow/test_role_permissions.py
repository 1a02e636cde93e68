"""Every AWS call the functions make is allowed by their own role, as deployed.

The real ASL runs on the local runtime through a reconcile, an event-driven change, a denied
authorize that rolls back, the load balancer controller's hand-over (adopt, and a failed one
that hands the rules back) and a rule whose peer is a managed prefix list. Each call is
recorded with the function that made it (the handler's thread, and the threads it starts),
turned into what IAM authorizes (action, resource ARNs, the request's condition keys: the
rule's tags at the time of the call, the tags requested, the item's partition key) and
judged against the inline policies of that function's role read back from moto's IAM (the
template's `!Sub`, `!If` and `!GetAtt` resolved by its CloudFormation).

Resource types and condition keys follow the Service Authorization Reference (as of
December 2026):
https://docs.aws.amazon.com/service-authorization/latest/reference/list_amazonec2.html
(AuthorizeSecurityGroupIngress: the `security-group`, and the new `security-group-rule` with
`aws:RequestTag` only when the request has `TagSpecifications`, whose tags also need
`ec2:CreateTags` with `ec2:CreateAction`; RevokeSecurityGroupIngress: the `security-group`
only; ModifySecurityGroupRules: the `security-group`, each `security-group-rule` with its
tags, and the `prefix-list` of a rule whose peer is one),
https://docs.aws.amazon.com/service-authorization/latest/reference/list_amazondynamodb.html
(`dynamodb:LeadingKeys`: the partition key values of the items a request reads or writes) and
https://docs.aws.amazon.com/service-authorization/latest/reference/list_servicequotas.html.

Then what each role may do beyond what the scenarios used is compared with
docs/permissions.md, which says why: a grant nobody uses, or one the list forgets, fails.
"""

from __future__ import annotations

import fnmatch
import itertools
import json
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
import botocore.client
import pytest
from botocore.exceptions import ClientError
from sg_reconciler.core.rules import ADOPTED_BY_TAG_KEY
from sg_reconciler.policy import LBC_SHARED_DESCRIPTION, parse_policy, parse_policy_document
from sg_reconciler_tools.cli import main
from sg_reconciler_tools.demo.play import (
    TEMPLATE,
    deliver_events,
    quiet_handlers,
    reconcile,
    run_planner,
)
from sg_reconciler_tools.demo.world import DemoWorld, build_world
from sg_reconciler_tools.local import Fault, FaultInjector, LocalRuntime
from sg_reconciler_tools.local.deployment import REGION
from sg_reconciler_tools.local.functions import FunctionSpec, HandlerHost
from sg_reconciler_tools.local.moto_hooks import ACCOUNT_ID
from workflow.test_apply_plan import live_plan, start
from workflow.test_lbc_handover import handover_policy
from workflow.world_moves import at_the_settle, set_policy

DOC = Path(__file__).resolve().parents[2] / "docs" / "permissions.md"
PARTITION = "aws"
OWNER_ATTRIBUTE = "_sg_reconciler_function"  # set on a thread while a handler runs in it
INSIDE_AWS_ATTRIBUTE = "_sg_reconciler_inside_aws"  # set while moto serves a call
STATE_MACHINE_ROLE = "ApplyPlanStateMachine"
FLEET_BUS = "sg-reconciler-fleet"
# The lock table's partition key (template.yaml): group ids, and the brake's records.
LOCK_KEY = "group_id"
# Calls no IAM policy governs (STS: "no permissions are required to perform this operation").
NO_PERMISSION_NEEDED = frozenset({"sts:GetCallerIdentity"})


@dataclass(frozen=True)
class Authorization:
    """One request IAM evaluates: an action on one resource, with its condition keys."""

    action: str
    resource: str
    context: Mapping[str, str | list[str]] = field(default_factory=dict)


@dataclass(frozen=True)
class Call:
    scenario: int  # which runtime: each names its tables and functions anew
    function: str  # logical id
    operation: str  # "ec2:ModifySecurityGroupRules"
    authorizations: tuple[Authorization, ...]


# ---- Recording -------------------------------------------------------------------------


class Recorder:
    """Records each AWS call a handler makes, with what IAM would authorize for it."""

    def __init__(self, runtime: LocalRuntime, scenario: int) -> None:
        self.runtime = runtime
        self.scenario = scenario
        self.calls: list[Call] = []
        # IAM refusing a call (UnauthorizedOperation) when this says so: one group denied
        self.deny: Callable[[str, Mapping[str, Any]], bool] = lambda operation, params: False
        self._lock = threading.Lock()
        self._looking = threading.local()  # our own look-ups are not the handler's calls

    def record(self, client: Any, operation: str, params: Mapping[str, Any]) -> None:
        function = getattr(threading.current_thread(), OWNER_ATTRIBUTE, None)
        if function is None or getattr(self._looking, "active", False):
            return
        model = client.meta.service_model
        prefix = model.signing_name  # IAM's prefix: states, elasticloadbalancing, servicequotas
        self._looking.active = True
        try:
            authorizations = tuple(self.authorizations(prefix, operation, params))
        finally:
            self._looking.active = False
        with self._lock:
            call = Call(self.scenario, function, f"{prefix}:{operation}", authorizations)
            self.calls.append(call)

    def denies(self, operation: str, params: Mapping[str, Any]) -> bool:
        function = getattr(threading.current_thread(), OWNER_ATTRIBUTE, None)
        return function is not None and self.deny(operation, params)

    def authorizations(
        self, prefix: str, operation: str, params: Mapping[str, Any]
    ) -> Iterator[Authorization]:
        action = f"{prefix}:{operation}"
        if prefix == "ec2":
            yield from self.ec2(action, operation, params)
        elif prefix == "dynamodb":
            yield from dynamodb(action, operation, params)
        elif prefix == "ssm":
            name = str(params["Name"])
            yield Authorization(
                action, arn("ssm", f"parameter{'' if name.startswith('/') else '/'}{name}")
            )
        elif prefix == "states":
            target = params.get("executionArn") or params.get("stateMachineArn") or "*"
            yield Authorization(action, str(target))
        elif prefix == "events":
            for entry in params.get("Entries", []):
                bus = str(entry.get("EventBusName", "default"))
                yield Authorization(
                    action, bus if bus.startswith("arn:") else arn("events", f"event-bus/{bus}")
                )
        elif prefix == "servicequotas":
            quota = f"{params['ServiceCode']}/{params['QuotaCode']}"
            yield Authorization(action, arn("servicequotas", quota))
        else:  # elasticloadbalancing's reads and the like: resource "*" in the reference
            yield Authorization(action, "*")

    def ec2(
        self, action: str, operation: str, params: Mapping[str, Any]
    ) -> Iterator[Authorization]:
        if operation.startswith("Describe"):
            yield Authorization(action, "*")
            return
        if operation in ("CreateTags", "DeleteTags"):
            requested = request_tags(params.get("Tags", []))
            for rule in self.rules(params["Resources"]):
                yield Authorization(action, rule_arn(rule), {**resource_tags(rule), **requested})
            return
        # The resource types each action authorizes on, as the Service Authorization
        # Reference lists them (see the module docstring).
        group = arn("ec2", f"security-group/{params['GroupId']}")
        yield Authorization(action, group)
        if operation == "AuthorizeSecurityGroupIngress":
            # the new rule is authorized (with the requested tags) only when the request
            # tags it; the tags on create need ec2:CreateTags with ec2:CreateAction
            requested = {}
            for spec in params.get("TagSpecifications", []):
                requested |= request_tags(spec.get("Tags", []))
            if requested:
                new_rule = arn("ec2", "security-group-rule/(new)")
                yield Authorization(action, new_rule, requested)
                context = {**requested, "ec2:CreateAction": operation}
                yield Authorization("ec2:CreateTags", new_rule, context)
            return
        if operation == "RevokeSecurityGroupIngress":
            return  # the security group only
        if operation != "ModifySecurityGroupRules":
            raise AssertionError(f"no IAM model for {action}: add one to this test")
        updates = params["SecurityGroupRules"]
        rules = self.rules([u["SecurityGroupRuleId"] for u in updates])
        for rule in rules:
            yield Authorization(action, rule_arn(rule), resource_tags(rule))
        peers = {r["PrefixListId"] for r in rules if r.get("PrefixListId")}
        peers |= {
            u["SecurityGroupRule"]["PrefixListId"]
            for u in updates
            if u.get("SecurityGroupRule", {}).get("PrefixListId")
        }
        for peer in sorted(peers):
            yield Authorization(action, arn("ec2", f"prefix-list/{peer}"))

    def rules(self, ids: list[str]) -> list[dict[str, Any]]:
        """The rules as they are right before the call (their tags are what IAM sees)."""
        ec2 = self.runtime.clients.ec2
        found = ec2.describe_security_group_rules(SecurityGroupRuleIds=list(ids))
        rules: list[dict[str, Any]] = [dict(rule) for rule in found["SecurityGroupRules"]]
        return rules


def fleet_bus_arn() -> str:
    """The central bus, here in the same account (moto has one account)."""
    return arn("events", f"event-bus/{FLEET_BUS}")


def arn(service: str, resource: str) -> str:
    return f"arn:{PARTITION}:{service}:{REGION}:{ACCOUNT_ID}:{resource}"


def rule_arn(rule: Mapping[str, Any]) -> str:
    return arn("ec2", f"security-group-rule/{rule['SecurityGroupRuleId']}")


def resource_tags(rule: Mapping[str, Any]) -> dict[str, str | list[str]]:
    tags: dict[str, str | list[str]] = {}
    for tag in rule.get("Tags", []):
        tags[f"aws:ResourceTag/{tag['Key']}"] = tag["Value"]
        tags[f"ec2:ResourceTag/{tag['Key']}"] = tag["Value"]
    return tags


def request_tags(tags: list[Mapping[str, str]]) -> dict[str, str | list[str]]:
    context: dict[str, str | list[str]] = {
        f"aws:RequestTag/{t['Key']}": t.get("Value", "") for t in tags
    }
    context["aws:TagKeys"] = [t["Key"] for t in tags]
    return context


def dynamodb(action: str, operation: str, params: Mapping[str, Any]) -> Iterator[Authorization]:
    if operation in ("BatchWriteItem", "BatchGetItem"):
        for table in params["RequestItems"]:
            yield Authorization(action, arn("dynamodb", f"table/{table}"))
        return
    table = arn("dynamodb", f"table/{params['TableName']}")
    item = params.get("Key") or params.get("Item") or {}
    if LOCK_KEY in item:
        yield Authorization(action, table, {"dynamodb:LeadingKeys": [item[LOCK_KEY]["S"]]})
    else:
        yield Authorization(action, table)


@pytest.fixture
def recorder(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[LocalRuntime], Recorder]]:
    """Patches botocore's one entry point of every call, the handler host (which function
    runs in a thread) and thread start (a handler's worker threads are the function's)."""
    made: list[Recorder] = []
    scenarios = itertools.count()
    original_call = getattr(botocore.client.BaseClient, "_make_api_call")  # noqa: B009
    original_handler = HandlerHost._call
    original_start = threading.Thread.start

    def make_api_call(self: Any, operation: str, params: Any) -> Any:
        for each in made:
            each.record(self, operation, params)
            if each.denies(operation, params):
                error: Any = {"Code": "UnauthorizedOperation", "Message": "denied by the test"}
                raise ClientError({"Error": error}, operation)
        thread = threading.current_thread()
        # moto serves the call in this thread: what it starts (an execution's interpreter,
        # started by the planner's StartExecution) is AWS's, not the function's
        inside = getattr(thread, INSIDE_AWS_ATTRIBUTE, False)
        setattr(thread, INSIDE_AWS_ATTRIBUTE, True)
        try:
            return original_call(self, operation, params)
        finally:
            setattr(thread, INSIDE_AWS_ATTRIBUTE, inside)

    def call(host: HandlerHost, spec: FunctionSpec, event: Any) -> Any:
        thread = threading.current_thread()
        inside = getattr(thread, INSIDE_AWS_ATTRIBUTE, False)  # Lambda's Invoke, served here
        setattr(thread, OWNER_ATTRIBUTE, spec.logical_id)
        setattr(thread, INSIDE_AWS_ATTRIBUTE, False)
        try:
            return original_handler(host, spec, event)
        finally:
            setattr(thread, OWNER_ATTRIBUTE, None)
            setattr(thread, INSIDE_AWS_ATTRIBUTE, inside)

    def start(thread: threading.Thread) -> None:
        parent = threading.current_thread()
        inside_aws = getattr(parent, INSIDE_AWS_ATTRIBUTE, False)
        setattr(
            thread, OWNER_ATTRIBUTE, None if inside_aws else getattr(parent, OWNER_ATTRIBUTE, None)
        )
        original_start(thread)

    monkeypatch.setattr(botocore.client.BaseClient, "_make_api_call", make_api_call)
    monkeypatch.setattr(HandlerHost, "_call", call)
    monkeypatch.setattr(threading.Thread, "start", start)

    def make(runtime: LocalRuntime) -> Recorder:
        made[:] = [Recorder(runtime, next(scenarios))]  # one runtime at a time
        return made[0]

    yield make


# ---- Evaluating ------------------------------------------------------------------------


def role_policies(runtime: LocalRuntime) -> dict[str, list[dict[str, Any]]]:
    """Each function's (and the state machine's) role's statements, as IAM holds them."""
    iam: Any = boto3.client("iam", region_name=REGION)
    lambda_ = runtime.clients["lambda"]
    roles = {
        spec.logical_id: lambda_.get_function_configuration(FunctionName=spec.name)["Role"]
        for spec in runtime.functions
    }
    sfn = runtime.clients.stepfunctions
    machine = sfn.describe_state_machine(stateMachineArn=runtime.arn(STATE_MACHINE_ROLE))
    roles[STATE_MACHINE_ROLE] = machine["roleArn"]
    statements: dict[str, list[dict[str, Any]]] = {}
    for owner, role_arn in roles.items():
        name = role_arn.rsplit("/", 1)[1]
        found: list[dict[str, Any]] = []
        for policy in iam.list_role_policies(RoleName=name)["PolicyNames"]:
            document = iam.get_role_policy(RoleName=name, PolicyName=policy)["PolicyDocument"]
            document = json.loads(document) if isinstance(document, str) else document
            body = document["Statement"]
            found += [body] if isinstance(body, dict) else body
        statements[owner] = found
    return statements


def listed(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def matches(pattern: str, value: str, *, case: bool = True) -> bool:
    if not case:
        pattern, value = pattern.lower(), value.lower()
    return fnmatch.fnmatchcase(value, pattern)


def condition_holds(operator: str, key: str, wanted: Any, context: Mapping[str, Any]) -> bool:
    """IAM's condition operators the template uses (the IAM User Guide, "IAM JSON policy
    elements: Condition operators" and "Multivalued context keys")."""
    given = {k.lower(): v for k, v in context.items()}.get(key.lower())
    wanted_values = [str(w) for w in listed(wanted)]
    qualifier, _, base = operator.rpartition(":")
    if base == "Null":
        return (given is None) == (wanted_values[0] == "true")
    compare: Callable[[str], bool]
    if base == "StringEquals":
        compare = lambda v: v in wanted_values  # noqa: E731
    elif base in ("StringLike", "ArnLike"):
        compare = lambda v: any(matches(w, v) for w in wanted_values)  # noqa: E731
    elif base == "StringNotLike":
        compare = lambda v: not any(matches(w, v) for w in wanted_values)  # noqa: E731
    else:
        raise AssertionError(f"no model of the condition operator {operator}: add one here")
    if qualifier == "ForAllValues":
        return given is None or all(compare(v) for v in listed(given))
    if qualifier == "ForAnyValue":
        return given is not None and any(compare(v) for v in listed(given))
    return given is not None and not isinstance(given, list) and compare(given)


def allowed_by(statements: list[dict[str, Any]], request: Authorization) -> dict[str, Any] | None:
    """The Allow statement that grants the request, if any (the roles have no Deny)."""
    for statement in statements:
        assert statement["Effect"] == "Allow", statement
        if not any(matches(a, request.action, case=False) for a in listed(statement["Action"])):
            continue
        if not any(matches(r, request.resource) for r in listed(statement["Resource"])):
            continue
        conditions = statement.get("Condition", {})
        if all(
            condition_holds(operator, key, wanted, request.context)
            for operator, pairs in conditions.items()
            for key, wanted in pairs.items()
        ):
            return statement
    return None


# ---- Scenarios -------------------------------------------------------------------------


@dataclass
class Observed:
    calls: list[Call]
    statements: list[dict[str, list[dict[str, Any]]]]  # per scenario, by role
    invoked_by_executions: set[str]
    function_arns: dict[str, str]
    definition: str


def lbc_rules(world: DemoWorld) -> None:
    """The controller's shared backend rules, one per node group (the hand-over's start)."""
    for group_id in world.node_groups.values():
        pair = {"GroupId": world.backend_group, "Description": LBC_SHARED_DESCRIPTION}
        permission: Any = {
            "IpProtocol": "tcp",
            "FromPort": 31000,
            "ToPort": 32000,
            "UserIdGroupPairs": [pair],
        }
        world.runtime.clients.ec2.authorize_security_group_ingress(
            GroupId=group_id,
            IpPermissions=[permission],
        )


def with_static_rules(world: DemoWorld, rules: list[dict[str, Any]]) -> None:
    doc = json.loads(world.policy)
    doc["static_rules"] = rules
    set_policy(world, json.dumps(doc))


def lock_keys(world: DemoWorld) -> list[str]:
    table = world.runtime.physical_name("LockTable")
    items = world.runtime.clients.dynamodb.scan(TableName=table)["Items"]
    return [item["group_id"]["S"] for item in items]


def stopped_by_hand_then_freed(world: DemoWorld) -> None:
    """An execution started by hand with its plan inline (stored by "Check the plan input"),
    stopped during the settle: the janitor deletes its locks."""
    sfn = world.runtime.clients.stepfunctions
    world.add_service(32700)
    execution: list[str] = []
    at_the_settle(world, lambda: sfn.stop_execution(executionArn=execution[0]))
    execution.append(start(world, live_plan(world)))
    assert world.runtime.wait_for(execution[0], 60)["status"] == "ABORTED"
    deadline = time.monotonic() + 10
    while [k for k in lock_keys(world) if k.startswith("sg-")] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [k for k in lock_keys(world) if k.startswith("sg-")], "the locks stayed"
    succeeded(reconcile(world))


def brake_held_then_released(world: DemoWorld) -> None:
    """The load balancer loses its selector tags: the brake holds the revokes, an operator
    releases them (the CLI, not a function), the next run reads the release and revokes."""
    elbv2 = world.runtime.clients.elbv2
    for key in parse_policy_document(world.policy).load_balancers.tags:
        elbv2.remove_tags(ResourceArns=[world.load_balancer_arn], TagKeys=[key])
    reconcile(world)
    held = [k for k in lock_keys(world) if k.startswith("brake-held#")]
    assert held, "the brake held nothing"
    table = world.runtime.physical_name("LockTable")
    release = ["release-brake", "--lock-table", table, "--region", REGION]
    assert main([*release, "--fingerprint", held[0].removeprefix("brake-held#")]) == 0
    reconcile(world)
    assert not [r for r in world.node_rules() if r.owned_by(parse_policy(world.policy).owner)]


def succeeded(described: dict[str, Any] | None) -> None:
    assert described is not None and described["status"] == "SUCCEEDED", described


def rolled_back(described: dict[str, Any] | None) -> None:
    assert described is not None and described.get("error") == "RolledBack", described


@pytest.fixture(scope="module")
def observed_holder() -> dict[str, Observed]:
    return {}


def run_scenarios(make: Callable[[LocalRuntime], Recorder]) -> Observed:
    quiet_handlers()
    calls: list[Call] = []
    invoked: set[str] = set()
    statements: list[dict[str, list[dict[str, Any]]]] = []
    arns: dict[str, str] = {}
    denied = Fault("ec2", "AuthorizeSecurityGroupIngress", "UnauthorizedOperation", count=100)
    # 1. A reconcile from nothing, an event-driven change, a denied one rolled back, and a
    # static rule from a managed prefix list added, then removed.
    with LocalRuntime(TEMPLATE) as runtime:
        recorder = make(runtime)
        world = build_world(runtime)
        succeeded(reconcile(world))
        events = world.add_service(32500)
        succeeded(runtime.wait_for(run_planner(world, deliver_events(world, events)) or "", 60))
        world.add_service(32600)
        last_group = max(world.node_groups.values())
        recorder.deny = lambda operation, params: (
            operation == "AuthorizeSecurityGroupIngress" and params["GroupId"] == last_group
        )
        rolled_back(reconcile(world))
        recorder.deny = lambda operation, params: False
        offices = runtime.clients.ec2.create_managed_prefix_list(
            PrefixListName="offices", AddressFamily="IPv4", MaxEntries=10
        )["PrefixList"]["PrefixListId"]
        group = sorted(world.node_groups.values())[0]
        static = {"group_id": group, "from_port": 22, "to_port": 22, "prefix_list_id": offices}
        with_static_rules(world, [static])
        succeeded(reconcile(world))
        assert any(offices in str(r.key.peer) for r in world.node_rules()), "no prefix-list rule"
        with_static_rules(world, [])
        succeeded(reconcile(world))
        stopped_by_hand_then_freed(world)
        brake_held_then_released(world)
        calls += recorder.calls
        statements.append(role_policies(runtime))
        invoked |= {i.logical_id for i in runtime.invocations}
        arns = {spec.logical_id: spec.arn for spec in runtime.functions}
        machine = runtime.clients.stepfunctions.describe_state_machine(
            stateMachineArn=runtime.arn(STATE_MACHINE_ROLE)
        )
    # 2. The controller's hand-over: adopted in place, and a failed one handed back.
    with LocalRuntime(TEMPLATE) as runtime:
        recorder = make(runtime)
        world = build_world(runtime)
        lbc_rules(world)
        set_policy(world, handover_policy(world))  # adopt them, and authorize the kubelet port
        with FaultInjector(denied):
            rolled_back(reconcile(world))
        assert not any(r.tag(ADOPTED_BY_TAG_KEY) for r in world.node_rules()), "not handed back"
        succeeded(reconcile(world))
        assert any(r.tag(ADOPTED_BY_TAG_KEY) for r in world.node_rules()), "nothing adopted"
        calls += recorder.calls
        statements.append(role_policies(runtime))
        invoked |= {i.logical_id for i in runtime.invocations}
    # 3. With a fleet bus: the outcome reporter reads how the execution ended and reports it.
    with LocalRuntime(TEMPLATE, parameters={"FleetEventBusArn": fleet_bus_arn()}) as runtime:
        recorder = make(runtime)
        runtime.clients.events.create_event_bus(Name=FLEET_BUS)
        world = build_world(runtime)
        succeeded(reconcile(world))
        deadline = time.monotonic() + 10
        while not any(i.logical_id == "ReportOutcomeFunction" for i in runtime.invocations):
            assert time.monotonic() < deadline, "the outcome reporter never ran"
            time.sleep(0.05)
        calls += recorder.calls
        statements.append(role_policies(runtime))
    invoked -= {"PlannerFunction"}  # invoked by the test, as its queue and schedule would
    invoked -= {"ReleaseLocksAfterStopFunction", "ReportOutcomeFunction"}  # by EventBridge
    return Observed(calls, statements, invoked, arns, machine["definition"])


@pytest.fixture
def observed(
    recorder: Callable[[LocalRuntime], Recorder], observed_holder: dict[str, Observed]
) -> Observed:
    if "all" not in observed_holder:
        observed_holder["all"] = run_scenarios(recorder)
    return observed_holder["all"]


# ---- Tests -----------------------------------------------------------------------------


def test_the_scenarios_make_the_calls_that_need_the_narrow_grants(observed: Observed) -> None:
    # (so the test below judges them: a scenario that stopped making them would pass vacuously)
    made = {(c.function, c.operation) for c in observed.calls}
    for needed in [
        ("ApplyStepsFunction", "ec2:AuthorizeSecurityGroupIngress"),
        ("ApplyStepsFunction", "ec2:RevokeSecurityGroupIngress"),
        ("ApplyStepsFunction", "ec2:ModifySecurityGroupRules"),
        ("ApplyStepsFunction", "ec2:CreateTags"),
        ("RollBackFunction", "ec2:RevokeSecurityGroupIngress"),
        ("RollBackFunction", "ec2:ModifySecurityGroupRules"),
        ("RollBackFunction", "ec2:DeleteTags"),
        ("AcquireLocksFunction", "dynamodb:PutItem"),
        ("ReleaseLocksAfterStopFunction", "dynamodb:DeleteItem"),
        ("PlannerFunction", "dynamodb:PutItem"),
        ("CheckPlanFunction", "dynamodb:BatchWriteItem"),
        ("PlannerFunction", "dynamodb:GetItem"),
        ("PlannerFunction", "servicequotas:GetServiceQuota"),
        ("ReportOutcomeFunction", "states:DescribeExecution"),
        ("ReportOutcomeFunction", "events:PutEvents"),
    ]:
        assert needed in made, needed
    prefix_lists = [
        a for c in observed.calls for a in c.authorizations if ":prefix-list/" in a.resource
    ]
    assert {a.action for a in prefix_lists} == {"ec2:ModifySecurityGroupRules"}
    owned_rules = [
        a
        for c in observed.calls
        for a in c.authorizations
        if a.action == "ec2:ModifySecurityGroupRules" and ":security-group-rule/" in a.resource
    ]
    assert owned_rules, "no modify of a rule was judged with its tags"


def test_every_call_is_allowed_by_its_functions_role(observed: Observed) -> None:
    refused = []
    for call in observed.calls:
        if call.operation in NO_PERMISSION_NEEDED:
            continue
        statements = observed.statements[call.scenario][call.function]
        for request in call.authorizations:
            if allowed_by(statements, request) is None:
                refused.append((call.function, request))
    assert refused == [], "\n".join(sorted({f"{f}: {r}" for f, r in refused}))


def test_the_state_machine_may_invoke_each_function_its_definition_names(
    observed: Observed,
) -> None:
    statements = observed.statements[0][STATE_MACHINE_ROLE]
    tasks = {i for i, a in observed.function_arns.items() if a in observed.definition}
    assert observed.invoked_by_executions >= tasks >= {"ApplyStepsFunction", "RollBackFunction"}
    for logical_id in sorted(tasks):
        request = Authorization("lambda:InvokeFunction", observed.function_arns[logical_id])
        assert allowed_by(statements, request) is not None, request


def granted_beyond(observed: Observed) -> dict[str, set[str]]:
    """Per role, each action it is granted that no scenario's call used."""
    # (the state machine's invocations are judged by the test above, from its definition)
    used: dict[str, set[str]] = {STATE_MACHINE_ROLE: {"lambda:invokefunction"}}
    for call in observed.calls:
        for request in call.authorizations:
            used.setdefault(call.function, set()).add(request.action.lower())
    beyond: dict[str, set[str]] = {}
    for owner, statements in {
        k: v for each in observed.statements for k, v in each.items()
    }.items():
        for statement in statements:
            for action in listed(statement["Action"]):
                if action.lower() not in used.get(owner, set()):
                    beyond.setdefault(owner, set()).add(action)
    return beyond


def documented_beyond() -> dict[str, set[str]]:
    """docs/permissions.md's "Beyond what the tests use": `### Role` then `- \\`action\\`: why`."""
    text = DOC.read_text(encoding="utf-8")
    section = text.split("## Beyond what the tests use", 1)[1].split("\n## ", 1)[0]
    found: dict[str, set[str]] = {}
    role = ""
    for line in section.splitlines():
        if line.startswith("### "):
            role = line[4:].strip()
        elif match := re.match(r"- `([a-z0-9-]+:[A-Za-z*]+)`: \S", line):
            found.setdefault(role, set()).add(match.group(1))
    return found


def test_docs_list_exactly_what_each_role_may_do_beyond_the_tests(observed: Observed) -> None:
    assert documented_beyond() == granted_beyond(observed)
