"""The hooks into moto's models (moto is pinned: `patching.MOTO_VERSION`).

What moto lacks is patched, one function per gap, whose docstring names the moto internal
and says why: `AWS:` and the page it follows, or `Tooling:` (no public switch). Each
returns a `Patch` that undoes it; `tests/tooling/emulator/test_hook_register.py` holds
each to a test that shows moto alone, so a moto upgrade that closes a gap says which hook
can go. Faults and observers never touch moto (`interception`); moto's CloudFormation has
its own workarounds (`cfn_workarounds`).
"""

from __future__ import annotations

import contextlib
import fnmatch
import ipaddress
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from sg_reconciler_tools.local.interception import (
    APP_EC2_WRITES,
    ATOMIC_LAYER,
    OBSERVER_LAYER,
    AwsError,
    Proceed,
    current_request_params,
    intercept_each,
)
from sg_reconciler_tools.local.patching import (
    MOTO_VERSION,
    HookError,
    Patch,
    add,
    dotted_name,
    replace,
    require,
    together,
)

if TYPE_CHECKING:
    from moto.core.config import DefaultConfig

ACCOUNT_ID: Final = "123456789012"  # moto.core.DEFAULT_ACCOUNT_ID


# Lambda and Step Functions -------------------------------------------------------------


def new_mock() -> Any:
    """A not yet started `moto.mock_aws` running ASL in its interpreter and Lambda without
    Docker (`LambdaSimpleBackend`, whose `invoke` `patch_lambda_invoke` replaces).
    """
    from moto import mock_aws

    config: DefaultConfig = {
        "stepfunctions": {"execute_state_machine": True},
        "lambda": {"use_docker": False},
    }
    return mock_aws(config=config)


@dataclass(frozen=True)
class LambdaResult:
    """What an invocation returns: the payload bytes and, for an error, the function-error kind."""

    payload: bytes
    function_error: str | None = None  # "Unhandled" when the handler raised


LambdaDispatch = Callable[[str, bytes], LambdaResult]  # (function name, request payload)


def patch_lambda_invoke(dispatch: LambdaDispatch) -> Patch:
    """Run our handlers where `moto.awslambda_simple.models.LambdaSimpleBackend.invoke` echoes
    the payload; a function error travels in `x-amz-function-error`, which moto's
    interpreter turns into a task failure named by the payload's `errorType`.

    AWS: https://docs.aws.amazon.com/lambda/latest/api/API_Invoke.html (X-Amz-Function-Error)
    """
    from moto.awslambda_simple.models import LambdaSimpleBackend

    def invoke(
        self: Any,
        function_name: str,
        qualifier: str | None,
        body: Any,
        headers: Any,
        response_headers: dict[str, str],
    ) -> bytes:
        function = self.get_function(function_name, qualifier)  # moto's not-found error
        payload = body if isinstance(body, bytes) else str(body or "").encode()
        result = dispatch(str(function.function_name), payload)
        if result.function_error:
            response_headers["x-amz-function-error"] = result.function_error
        response_headers["Content-Length"] = str(len(result.payload))
        return result.payload

    return replace(LambdaSimpleBackend, "invoke", invoke)


def patch_wait_states(record: Callable[[float], None]) -> Patch:
    """Make Wait states return at once, recording their seconds (moto's
    `WaitFunction._wait_interval` blocks on an event for them).

    Tooling: a Wait state would hold a test for its seconds; moto has no switch.
    """
    from moto.stepfunctions.parser.asl.component.state.wait.wait_function import wait_function

    def _wait_interval(self: Any, env: Any, wait_seconds: float) -> None:
        record(float(wait_seconds))

    return replace(wait_function.WaitFunction, "_wait_interval", _wait_interval)


class _RecordingClock:
    """Stands in for the `time` module inside one moto module: sleep records, the rest is real."""

    def __init__(self, record: Callable[[float], None]) -> None:
        self._record = record

    def sleep(self, seconds: float) -> None:
        self._record(float(seconds))

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)


def patch_retry_sleep(record: Callable[[float], None]) -> Patch:
    """Make Retry backoff return at once, recording each interval (moto's
    `RetrierDecl._eval_body` calls `time.sleep` through its module global, swapped here).

    Tooling: Retry backoff would hold a test for minutes; moto has no switch.
    """
    from moto.stepfunctions.parser.asl.component.common.retry import retrier_decl

    if require(retrier_decl, "time") is not time:
        raise HookError(f"{dotted_name(retrier_decl)}.time is not the time module (moto upgraded?)")
    return replace(retrier_decl, "time", _RecordingClock(record))


# "A retry or catch on States.ALL won't catch States.Runtime errors" (nor DataLimitExceeded).
UNCATCHABLE_BY_ALL = frozenset({"States.Runtime", "States.DataLimitExceeded"})


def patch_states_all_as_aws() -> Patch:
    """States.ALL no longer catches States.Runtime or States.DataLimitExceeded (moto's
    `ErrorEqualsDecl._eval_body` matches it to every error); naming them still does.

    AWS: https://docs.aws.amazon.com/step-functions/latest/dg/concepts-error-handling.html
    """
    from moto.stepfunctions.parser.asl.component.common.error_name import error_equals_decl

    decl = error_equals_decl.ErrorEqualsDecl
    original = require(decl, "_eval_body")
    wildcard = require(decl, "_STATE_ALL_ERROR")

    def _eval_body(self: Any, env: Any) -> None:
        error = env.stack[-1]
        if (
            getattr(error, "error_name", None) in UNCATCHABLE_BY_ALL
            and wildcard in self.error_names
        ):
            env.stack.pop()
            env.stack.append(False)
            return
        original(self, env)

    return replace(decl, "_eval_body", _eval_body)


# EC2 security groups -------------------------------------------------------------------


def _rule_identity(rule: Any) -> tuple[object, ...]:
    """EC2's duplicate identity of a moto SecurityGroupRule: the description does not count."""
    source = rule.source_group or {}
    ports = None if rule.ip_protocol == "-1" else (rule.from_port, rule.to_port)
    return (
        rule.ip_protocol,
        rule.ip_range.get("CidrIp"),
        rule.ip_range.get("CidrIpv6"),
        source.get("GroupId") or source.get("GroupName"),
        rule.prefix_list_id,
        ports,
    )


def patch_duplicate_ignores_description() -> Patch:
    """A rule differing only in its description is a duplicate, as in EC2 (moto's
    `SecurityGroupRule.__eq__` compares a referenced group's Description too).

    AWS: https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_UpdateSecurityGroupRuleDescriptionsIngress.html
    """
    from moto.ec2.models.security_groups import SecurityGroupRule

    def __eq__(self: Any, other: object) -> bool:
        if not isinstance(other, SecurityGroupRule):
            return NotImplemented
        return _rule_identity(self) == _rule_identity(other)

    return replace(SecurityGroupRule, "__eq__", __eq__)


def patch_group_rule_description() -> Patch:
    """Show a group-referencing rule's description (moto's `SecurityGroupRule.description`
    reads only `ip_range`; such a rule keeps it in `source_group`).

    AWS: https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_SecurityGroupRule.html
    """
    from moto.ec2.models.security_groups import SecurityGroupRule

    def description(self: Any) -> str | None:
        if "Description" in self.ip_range:
            return str(self.ip_range["Description"])
        found = (self.source_group or {}).get("Description")
        return None if found is None else str(found)

    return replace(SecurityGroupRule, "description", property(description))


def patch_authorize_returns_all_rules() -> Patch:
    """Return every rule a multi-permission authorize added: moto's
    `SecurityGroups.authorize_security_group_ingress` (its response) returns the last
    permission's only. A failing permission keeps the earlier ones, as in moto.

    AWS: https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_AuthorizeSecurityGroupIngress.html
    """
    from moto.core.responses import ActionResult
    from moto.ec2.responses.security_groups import SecurityGroups

    def authorize_security_group_ingress(self: Any) -> Any:
        self.error_on_dryrun()
        added: list[Any] = []
        for kwargs in self._process_rules_from_querystring():
            rules, _ = self.ec2_backend.authorize_security_group_ingress(**kwargs)
            added.extend(rules)
        return ActionResult({"Return": True, "SecurityGroupRules": added})

    return replace(
        SecurityGroups, "authorize_security_group_ingress", authorize_security_group_ingress
    )


def patch_cidr_host_bits_masked() -> Patch:
    """Store a rule's CIDR as its network, as EC2 does (moto's `SecurityGroupRule.__init__`
    keeps 10.0.0.1/8 as given; `modify_security_group_rules` still stores what it is given).

    AWS: https://docs.aws.amazon.com/vpc/latest/userguide/security-group-rules.html
    """
    from moto.ec2.models.security_groups import SecurityGroupRule

    original = SecurityGroupRule.__init__

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        for key in ("CidrIp", "CidrIpv6"):
            value = self.ip_range.get(key)
            if isinstance(value, str):
                # A malformed CIDR stays as given: moto's own validation reports it.
                with contextlib.suppress(ValueError):
                    self.ip_range[key] = str(ipaddress.ip_network(value, strict=False))

    return replace(SecurityGroupRule, "__init__", __init__)


AWS_RULE_QUOTA: Final = 60  # inbound rules per group, per family (Service Quotas L-0EA8095F)


def rule_units(backend: Any, rules: Iterable[Any]) -> tuple[int, int]:
    """IPv4 and IPv6 rule units of ingress rules, as AWS counts them: a group reference in both
    families, a prefix list as its MaxEntries in its family (1 when moto keeps none).
    """
    v4 = v6 = 0
    for rule in rules:
        if rule.prefix_list_id:
            found = backend.managed_prefix_lists.get(rule.prefix_list_id)
            weight = int(found.max_entries) if found and found.max_entries else 1
            if found is not None and found.address_family == "IPv6":
                v6 += weight
            else:
                v4 += weight
        elif rule.source_group:
            v4, v6 = v4 + 1, v6 + 1
        elif rule.ip_range.get("CidrIpv6"):
            v6 += 1
        else:
            v4 += 1
    return v4, v6


def patch_rule_quota_as_aws(limit: int = AWS_RULE_QUOTA) -> Patch:
    """Refuse an ingress authorize past the quota as AWS counts it (`rule_units`), wrapping
    moto's `SecurityGroupBackend.authorize_security_group_ingress`; moto's
    `_verify_group_will_respect_rule_count_limit` counts both families together and prefix
    lists not at all, so it is kept for egress only.

    AWS: https://docs.aws.amazon.com/vpc/latest/userguide/amazon-vpc-limits.html#vpc-limits-security-groups
    """
    from moto.ec2.exceptions import RulesPerSecurityGroupLimitExceededError
    from moto.ec2.models.security_groups import SecurityGroupBackend

    original = require(SecurityGroupBackend, "authorize_security_group_ingress")
    check = require(SecurityGroupBackend, "_verify_group_will_respect_rule_count_limit")

    def egress_only(self: Any, *args: Any, egress: bool = False, **kwargs: Any) -> None:
        if egress:
            check(self, *args, egress=egress, **kwargs)

    def authorize_security_group_ingress(self: Any, *args: Any, **kwargs: Any) -> Any:
        added, group = original(self, *args, **kwargs)
        if max(rule_units(self, group.ingress_rules)) > limit:
            group.ingress_rules = [r for r in group.ingress_rules if r not in added]
            raise RulesPerSecurityGroupLimitExceededError
        return added, group

    patches = [
        replace(SecurityGroupBackend, "_verify_group_will_respect_rule_count_limit", egress_only),
        replace(
            SecurityGroupBackend,
            "authorize_security_group_ingress",
            authorize_security_group_ingress,
        ),
    ]
    return together(f"{dotted_name(SecurityGroupBackend)} rule quota", patches)


# Delegated prefixes on network interfaces ------------------------------------------------

# Member name ("Ipv4Prefix" / "Ipv6Prefix", as AWS prints them) -> (IP version, the one
# prefix length AWS delegates).
_PREFIX_FAMILIES: Final = {"Ipv4Prefix": (4, 28), "Ipv6Prefix": (6, 80)}
# The EC2 actions whose request names prefixes -> (the families it names, assigns or not).
_PREFIX_ACTIONS: Final = {
    "CreateNetworkInterface": (("Ipv4Prefix", "Ipv6Prefix"), True),
    "AssignPrivateIpAddresses": (("Ipv4Prefix",), True),
    "UnassignPrivateIpAddresses": (("Ipv4Prefix",), False),
    "AssignIpv6Addresses": (("Ipv6Prefix",), True),
    "UnassignIpv6Addresses": (("Ipv6Prefix",), False),
}
# DescribeInstances filters on the prefixes of an instance's interfaces (AWS documents
# these) -> (member name, the `Instance` property the hook adds for moto's filter mapping).
INSTANCE_PREFIX_FILTERS: Final = {
    "network-interface.ipv4-prefixes.ipv4-prefix": ("Ipv4Prefix", "delegated_ipv4_prefixes"),
    "network-interface.ipv6-prefixes.ipv6-prefix": ("Ipv6Prefix", "delegated_ipv6_prefixes"),
}
# ENI id -> member name -> prefixes in assignment order, while the hook is installed.
_eni_prefixes: dict[str, dict[str, list[str]]] = {}
_prefixes_lock = threading.Lock()


def _add_key(mapping: Any, key: str, value: object, moto_path: str) -> Patch:
    """Give a moto dict an entry it lacks; if moto has one now, it may model the thing itself."""
    if not isinstance(mapping, dict):
        raise HookError(f"moto internal {moto_path} is not a dict (moto upgraded?)")
    if key in mapping:
        raise HookError(
            f"moto internal {moto_path} has {key!r} now (hooks are written for moto "
            f"{MOTO_VERSION}): check whether moto models it and the hook can go"
        )
    mapping[key] = value
    return Patch(f"{moto_path}[{key!r}]", lambda: mapping.pop(key, None))


def eni_prefixes(eni_id: str, family: str) -> list[str]:
    """The delegated prefixes of one ENI that `patch_eni_delegated_prefixes` keeps."""
    with _prefixes_lock:
        return list(_eni_prefixes.get(eni_id, {}).get(family, []))


def _aws_prefix(value: object, family: str) -> str:
    """`value` as AWS prints it, or EC2's InvalidParameterValue for what AWS refuses: not a
    network, host bits set, or not a /28 (IPv4) or /80 (IPv6).
    """
    version, length = _PREFIX_FAMILIES[family]
    try:
        network = ipaddress.ip_network(str(value))
    except ValueError:
        network = None
    if network is None or (network.version, network.prefixlen) != (version, length):
        raise AwsError(
            "InvalidParameterValue",
            f"Invalid {family} {value!r}: expected an IPv{version} /{length}",
        )
    return str(network)


def _record_prefixes(service: str, operation: str, proceed: Proceed) -> Any:
    """Interceptor of `_PREFIX_ACTIONS`: the request's prefixes, checked as AWS checks them,
    recorded on the ENI once moto applied the rest of the call. A `*PrefixCount` is refused:
    nothing here picks free prefixes.
    """
    families, assign = _PREFIX_ACTIONS[operation]
    params = current_request_params()
    if any(f"{family}Count" in params for family in families):
        raise AwsError("InvalidParameterValue", "prefix counts are not modelled")
    wanted: dict[str, list[str]] = {}
    for family in families:
        listed = [
            (k, v) for k, v in params.items() if re.fullmatch(rf"{family}\.\d+(\.{family})?", k)
        ]
        listed.sort(key=lambda item: int(item[0].split(".")[1]))
        wanted[family] = [_aws_prefix(values[0], family) for _, values in listed]
    response = proceed()
    if not any(wanted.values()):
        return response
    eni_id = params.get("NetworkInterfaceId", [""])[0]
    if not eni_id:  # CreateNetworkInterface: the new ENI's id is in moto's answer
        found = re.search(r"<networkInterfaceId>([^<]+)<", getattr(response, "text", ""))
        if found is None:
            raise HookError(f"no network interface id in moto's answer to {operation}")
        eni_id = found.group(1)
    with _prefixes_lock:
        for family, prefixes in wanted.items():
            held = _eni_prefixes.setdefault(eni_id, {}).setdefault(family, [])
            if assign:
                held += [prefix for prefix in dict.fromkeys(prefixes) if prefix not in held]
            else:
                held[:] = [prefix for prefix in held if prefix not in prefixes]
    return response


def patch_eni_delegated_prefixes() -> Patch:
    """Keep delegated prefixes on network interfaces (moto ignores them): the writes are read
    in `before-send`; properties added to moto's `NetworkInterface` render them, and ones on
    `Instance` with entries in `filter_dict_attribute_mapping` give DescribeInstances its
    prefix filters. A prefix is not checked against the subnet's CIDRs.

    AWS: https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/ec2-prefix-eni.html
    """
    from moto.ec2 import utils as ec2_utils
    from moto.ec2.models.elastic_network_interfaces import NetworkInterface
    from moto.ec2.models.instances import Instance

    require(Instance, "network_interfaces")
    mapping = require(ec2_utils, "filter_dict_attribute_mapping")
    where = f"{dotted_name(ec2_utils)}.filter_dict_attribute_mapping"

    def rendered(family: str) -> property:
        def prefixes(self: Any) -> list[dict[str, str]] | None:
            return [{family: prefix} for prefix in eni_prefixes(self.id, family)] or None

        return property(prefixes)

    def of_instance(family: str) -> property:
        def prefixes(self: Any) -> list[str]:
            return [p for eni in self.network_interfaces for p in eni_prefixes(eni.id, family)]

        return property(prefixes)

    def patches() -> Iterator[Patch]:  # `add` and `_add_key` refuse once moto has the thing
        for family in _PREFIX_FAMILIES:
            name = f"{family.lower()[:4]}_prefixes"  # ipv4_prefixes, ipv6_prefixes
            yield add(NetworkInterface, name, rendered(family))
        for filter_name, (family, attribute) in INSTANCE_PREFIX_FILTERS.items():
            yield add(Instance, attribute, of_instance(family))
            yield _add_key(mapping, filter_name, attribute, where)
        yield from intercept_each("ec2", _PREFIX_ACTIONS, _record_prefixes, layer=OBSERVER_LAYER)
        yield Patch("ENI prefixes", _eni_prefixes.clear)

    return together("ENI delegated prefixes", patches())


# Address filters on network interfaces, and subnets' IPv6 CIDR state ---------------------

# DescribeNetworkInterfaces filters that match any address of an interface in AWS, primary
# or secondary (moto: the primary IPv4 address only, and no IPv6 filter at all).
# `private-ip-address` stays moto's: the primary address only, as in AWS.
ENI_ADDRESS_FILTERS: Final = ("addresses.private-ip-address", "ipv6-addresses.ipv6-address")


def _eni_addresses(eni: Any, filter_name: str) -> list[str]:
    """Every private IPv4 address of a moto `NetworkInterface` (primary first), or every IPv6 one."""
    if filter_name == "ipv6-addresses.ipv6-address":
        return [str(address) for address in eni.ipv6_addresses if address]
    listed = [eni.private_ip_address] + [
        a.get("PrivateIpAddress") for a in eni.private_ip_addresses
    ]
    return [str(address) for address in dict.fromkeys(listed) if address]


def patch_eni_address_filters() -> Patch:
    """Match DescribeNetworkInterfaces' address filters against every address (moto: the
    primary IPv4 only, no IPv6 filter); moto applies the other filters, then the wrapper of
    `get_all_network_interfaces` keeps an interface with any address matching any value
    (moto's `is_filter_matching` would match an address list as a subset, not "any").

    AWS: https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_DescribeNetworkInterfaces.html
    """
    from moto.ec2.models.elastic_network_interfaces import NetworkInterfaceBackend

    original = require(NetworkInterfaceBackend, "get_all_network_interfaces")

    def get_all_network_interfaces(
        self: Any, eni_ids: list[str] | None = None, filters: Any = None
    ) -> Any:
        rest = dict(filters or {})
        wanted = {name: rest.pop(name) for name in ENI_ADDRESS_FILTERS if name in rest}
        enis = original(self, eni_ids, rest)
        for name, values in wanted.items():
            patterns = [values] if isinstance(values, str) else list(values or [])
            enis = [
                eni
                for eni in enis
                if any(
                    fnmatch.fnmatchcase(address, pattern)
                    for address in _eni_addresses(eni, name)
                    for pattern in patterns
                )
            ]
        return enis

    return replace(
        NetworkInterfaceBackend, "get_all_network_interfaces", get_all_network_interfaces
    )


def patch_subnet_ipv6_state() -> Patch:
    """Print a subnet's `Ipv6CidrBlockState` as a structure (moto's
    `Subnet.ipv6_cidr_block_association_set` nests it once more, so boto3 read it as text).

    AWS: https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_SubnetCidrBlockState.html
    """
    from moto.ec2.models.subnets import Subnet

    if not isinstance(require(Subnet, "ipv6_cidr_block_association_set"), property):
        raise HookError(f"{dotted_name(Subnet)}.ipv6_cidr_block_association_set is not a property")

    def ipv6_cidr_block_association_set(self: Any) -> list[dict[str, Any]]:
        associations = require(self, "ipv6_cidr_block_associations")
        return [
            {
                "ipv6CidrBlock": association["ipv6CidrBlock"],
                "associationId": association["associationId"],
                "ipv6CidrBlockState": dict(association["ipv6CidrBlockState"]),
            }
            for association in associations.values()
            if association["ipv6CidrBlockState"].get("State") == "associated"
        ]

    return replace(
        Subnet, "ipv6_cidr_block_association_set", property(ipv6_cidr_block_association_set)
    )


def patch_ec2_fidelity() -> list[Patch]:
    """All EC2 fidelity patches, in the order they are applied."""
    return [
        patch_duplicate_ignores_description(),
        patch_group_rule_description(),
        patch_authorize_returns_all_rules(),
        patch_cidr_host_bits_masked(),
        patch_rule_quota_as_aws(),
        patch_eni_delegated_prefixes(),
        patch_eni_address_filters(),
        patch_subnet_ipv6_state(),
    ]


# Speed: lookups moto answers by scanning the whole region -------------------------------

# An EC2 id that AWS's glob filters (`*`, `?`) and moto's patterns match only as itself.
_LITERAL_ID: Final = re.compile(r"[A-Za-z0-9-]+")


class _GroupsView:
    """A backend narrowed to some groups (`groups`, by VPC then id), in moto's order."""

    def __init__(self, groups: dict[str, dict[str, Any]]) -> None:
        self.groups = groups


def patch_tag_lookup_by_resource() -> Patch:
    """Answer one literal resource id's tags from moto's tag map (moto's
    `TagBackend.describe_tags` matches the id against every tag of the region, so a
    describe of N tagged things costs N x every tag).

    Tooling: speed only, the answers are moto's.
    """
    from moto.ec2.models.tags import TagBackend
    from moto.ec2.utils import EC2_PREFIX_TO_RESOURCE, get_prefix

    original = require(TagBackend, "describe_tags")

    def describe_tags(self: Any, filters: dict[str, list[str]] | None = None) -> Any:
        ids = filters.get("resource-id") if filters is not None and len(filters) == 1 else None
        if not (
            isinstance(ids, list)
            and len(ids) == 1
            and isinstance(ids[0], str)
            and _LITERAL_ID.fullmatch(ids[0])
        ):
            return original(self, filters)
        resource_id = ids[0]
        tags = self.tags.get(resource_id)  # `get`: the defaultdict grows no empty entry
        if not tags:
            return []
        resource_type = EC2_PREFIX_TO_RESOURCE.get(get_prefix(resource_id), "")
        return [
            {"resource_id": resource_id, "key": key, "value": value, "resource_type": resource_type}
            for key, value in list(tags.items())
        ]

    return replace(TagBackend, "describe_tags", describe_tags)


def _literal_ids(values: object) -> set[str] | None:
    """The ids of a filter's values when every one is a literal EC2 id, else None."""
    if not isinstance(values, list) or not values:
        return None
    if not all(isinstance(value, str) and _LITERAL_ID.fullmatch(value) for value in values):
        return None
    return set(values)


def _narrowed(groups: dict[str, dict[str, Any]], named: set[str]) -> _GroupsView:
    return _GroupsView(
        {
            vpc_id: {gid: group for gid, group in list(by_id.items()) if gid in named}
            for vpc_id, by_id in list(groups.items())
        }
    )


def patch_groups_by_id_filter() -> Patch:
    """Run moto's `describe_security_group_rules` and `describe_security_groups` on only the
    groups a literal `group-id` filter names, when no ids or names come beside it (moto
    matches every group of the region).

    Tooling: speed only, the answers are moto's (it still validates and filters).
    """
    from moto.ec2.models.security_groups import SecurityGroupBackend

    rules = require(SecurityGroupBackend, "describe_security_group_rules")
    groups = require(SecurityGroupBackend, "describe_security_groups")

    def describe_security_group_rules(
        self: Any, sg_rule_ids: list[str], filters: dict[str, list[str]]
    ) -> Any:
        named = None if sg_rule_ids else _literal_ids((filters or {}).get("group-id"))
        return rules(self if named is None else _narrowed(self.groups, named), sg_rule_ids, filters)

    def describe_security_groups(
        self: Any,
        group_ids: list[str] | None = None,
        groupnames: list[str] | None = None,
        filters: Any = None,
    ) -> Any:
        named = None
        if not group_ids and not groupnames and isinstance(filters, dict):
            named = _literal_ids(filters.get("group-id"))
        target = self if named is None else _narrowed(self.groups, named)
        return groups(target, group_ids, groupnames, filters)

    return together(
        f"{dotted_name(SecurityGroupBackend)} group-id filters",
        [
            replace(
                SecurityGroupBackend, "describe_security_group_rules", describe_security_group_rules
            ),
            replace(SecurityGroupBackend, "describe_security_groups", describe_security_groups),
        ],
    )


def patch_ec2_lookups() -> list[Patch]:
    """The speed-only EC2 patches (answers unchanged), in the order they are applied.

    Measured on tests/workflow/test_rollback_at_scale.py (process CPU): 58.0 s without,
    40.0 s with the tag lookup, 34.4 s with both.
    """
    return [patch_tag_lookup_by_resource(), patch_groups_by_id_filter()]


# Step Functions' ends, atomic writes, EventBridge envelopes, ELB pages ----------------


def on_execution_end(listener: Callable[[Any], None]) -> Patch:
    """Call `listener(execution)` once when an execution ends, and make StopExecution abort it
    at once (a Lambda task already running goes on). moto sends no status-change event (the
    hook wraps `BaseExecutionWorkerCommunication._reflect_execution_status`) and its
    `Execution.stop` left the status RUNNING until the current task returned. The listener
    runs in the execution's worker thread, or in the caller's for a stop.

    AWS: https://docs.aws.amazon.com/step-functions/latest/dg/cw-events.html and
    https://docs.aws.amazon.com/step-functions/latest/apireference/API_StopExecution.html
    """
    from moto.stepfunctions.parser.api import ExecutionStatus
    from moto.stepfunctions.parser.backend.execution import (
        BaseExecutionWorkerCommunication,
        Execution,
    )

    original = require(Execution, "stop")
    reflect = require(BaseExecutionWorkerCommunication, "_reflect_execution_status")
    mark = "_sg_reconciler_stopped"  # on the execution: (date, error, cause) of the stop

    def stop(self: Any, stop_date: Any, error: str | None, cause: str | None) -> None:
        original(self, stop_date, error, cause)
        if self.exec_status == ExecutionStatus.RUNNING:
            self.exec_status = ExecutionStatus.ABORTED
            self.stop_date = stop_date
            setattr(self, mark, (stop_date, error, cause))
            listener(self)

    def _reflect_execution_status(self: Any) -> None:
        reflect(self)
        stopped = getattr(self.execution, mark, None)
        if stopped is None:
            listener(self.execution)
        else:  # a task that ends after the stop (it failed, say) leaves it ABORTED
            self.execution.exec_status = ExecutionStatus.ABORTED
            self.execution.stop_date, self.execution.error, self.execution.cause = stopped

    return together(
        "execution end as on AWS",
        [
            replace(Execution, "stop", stop),
            replace(
                BaseExecutionWorkerCommunication,
                "_reflect_execution_status",
                _reflect_execution_status,
            ),
        ],
    )


ATOMIC_WRITES: Final[Mapping[str, tuple[str, ...]]] = {
    "dynamodb": ("PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem", "TransactWriteItems"),
    "ec2": APP_EC2_WRITES,
}


def patch_atomic_writes() -> Patch:
    """Make each write call atomic, as AWS does (moto runs a backend method without a lock, so
    two concurrent conditional PutItems could both win): one lock per service, innermost.

    AWS: https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/Expressions.ConditionExpressions.html
    """
    locks = {service: threading.RLock() for service in ATOMIC_WRITES}

    def atomic(service: str, operation: str, proceed: Proceed) -> Any:
        with locks[service]:
            return proceed()

    return together(
        "atomic writes",
        (
            patch
            for service, operations in ATOMIC_WRITES.items()
            for patch in intercept_each(service, operations, atomic, layer=ATOMIC_LAYER)
        ),
    )


def patch_events_envelope() -> Patch:
    """Deliver EventBridge events with their `account` field (moto's
    `EventTemplateParser.DEFAULT_EVENT_INPUT_TEMPLATE` leaves it out).

    AWS: https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-events-structure.html
    """
    from moto.events.utils import EventTemplateParser

    template = require(EventTemplateParser, "DEFAULT_EVENT_INPUT_TEMPLATE")
    if '"version": "0", ' not in template or '"account"' in template:
        raise HookError(
            f"{dotted_name(EventTemplateParser)}.DEFAULT_EVENT_INPUT_TEMPLATE changed (moto upgraded?)"
        )
    fixed = template.replace('"version": "0", ', '"version": "0", "account": "<account>", ')
    return replace(EventTemplateParser, "DEFAULT_EVENT_INPUT_TEMPLATE", fixed)


ELB_MAX_PAGE_SIZE: Final = 400


def patch_target_group_pages() -> Patch:
    """Answer DescribeTargetGroups in pages of `PageSize` (1 to 400) with a `NextMarker`
    (moto's `ELBV2Response.describe_target_groups` answers all in one page).

    AWS: https://docs.aws.amazon.com/elasticloadbalancing/latest/APIReference/API_DescribeTargetGroups.html
    """
    from moto.core.responses import ActionResult
    from moto.elbv2.exceptions import ELBClientError
    from moto.elbv2.responses import ELBV2Response

    def describe_target_groups(self: Any) -> Any:
        found = list(
            self.elbv2_backend.describe_target_groups(
                self._get_param("LoadBalancerArn"),
                self._get_param("TargetGroupArns", []),
                self._get_param("Names", []),
            )
        )
        size = self._get_int_param("PageSize", ELB_MAX_PAGE_SIZE)
        if not 1 <= size <= ELB_MAX_PAGE_SIZE:
            raise ELBClientError(
                "ValidationError", f"PageSize {size} is not 1 to {ELB_MAX_PAGE_SIZE}"
            )
        marker = self._get_param("Marker")
        arns = [group.arn for group in found]
        if marker and marker not in arns:
            raise ELBClientError("ValidationError", f"Marker {marker!r} is not valid")
        start = arns.index(marker) + 1 if marker else 0
        page = found[start : start + size]
        more = start + size < len(found)
        return ActionResult({"TargetGroups": page, "NextMarker": page[-1].arn if more else None})

    return replace(ELBV2Response, "describe_target_groups", describe_target_groups)
