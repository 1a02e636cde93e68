"""The reconciler's policy: which load balancers it manages and how it derives their rules.

One YAML or JSON document, kept in an SSM parameter in AWS and in a file locally. It is
validated strictly (unknown fields are errors) because a typo in a policy silently widening
or narrowing what the reconciler owns is worse than a failed start. Every problem is
reported as one `PolicyError` line that names the field.
"""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import yaml
from botocore.exceptions import BotoCoreError, ClientError
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from sg_reconciler.core.brake import DEFAULT_MAX_REVOKE_PERCENT, DEFAULT_MIN_REVOKES
from sg_reconciler.core.desired import DesiredSettings
from sg_reconciler.core.rules import (
    DEFAULT_MAX_RULES_PER_GROUP,
    DEFAULT_OWNER,
    Rule,
    RuleError,
    rule_from_dict,
)

if TYPE_CHECKING:
    from mypy_boto3_ssm import SSMClient

GROUP_ID_PATTERN = r"^sg-[0-9a-f]{8,17}$"
# Tag values and EC2 rule descriptions both accept these characters.
OWNER_PATTERN = r"^[A-Za-z0-9 ._:/=+@-]{1,128}$"
MANAGED_TAG = {"sg-reconciler/managed": "true"}


class PolicyError(ValueError):
    """A policy that cannot be read or is invalid; the message is one line."""


class _Strict(BaseModel):
    # strict: "3" is not 3 and "yes" is not true; a policy says what it means.
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class LoadBalancerSelector(_Strict):
    tags: dict[str, str] = Field(
        default_factory=lambda: dict(MANAGED_TAG),
        description=(
            "Tags a load balancer must all carry to be managed; the value '*' matches any value. "
            "An empty mapping selects every load balancer of the account and region."
        ),
    )


class RuleSource(_Strict):
    kind: Literal["load_balancer_groups", "backend_group"] = Field(
        default="load_balancer_groups",
        description=(
            "Where the traffic comes from: each load balancer's own security groups, or one "
            "shared backend group (the AWS Load Balancer Controller's backend security group)."
        ),
    )
    group_id: str | None = Field(
        default=None,
        pattern=GROUP_ID_PATTERN,
        description="The backend group; required with kind backend_group, forbidden otherwise.",
    )

    @model_validator(mode="after")
    def _group_matches_kind(self) -> RuleSource:
        if self.kind == "backend_group" and self.group_id is None:
            raise ValueError("group_id is required when kind is backend_group")
        if self.kind == "load_balancer_groups" and self.group_id is not None:
            raise ValueError("group_id is only allowed when kind is backend_group")
        return self


class Destination(_Strict):
    kind: Literal["target_enis", "named_groups", "tagged_groups"] = Field(
        default="target_enis",
        description=(
            "Which groups receive the rules: every group of each target's network interface; "
            "the listed groups (nodes' groups, no instance reads); or, of each target's "
            "interface groups, those carrying the tag (as the LBC picks the cluster's group)."
        ),
    )
    group_ids: list[str] = Field(
        default_factory=list,
        description="The groups for kind named_groups.",
    )
    tag_key: str | None = Field(
        default=None,
        min_length=1,
        max_length=128,
        description="Tag key for kind tagged_groups, e.g. kubernetes.io/cluster/NAME.",
    )
    tag_value: str | None = Field(
        default=None,
        max_length=256,
        description="Tag value for kind tagged_groups; unset matches any value.",
    )

    @field_validator("group_ids")
    @classmethod
    def _group_ids(cls, value: list[str]) -> list[str]:
        for group_id in value:
            if not re.match(GROUP_ID_PATTERN, group_id):
                raise ValueError(f"{group_id!r} is not a security group id")
        return value

    @model_validator(mode="after")
    def _fields_match_kind(self) -> Destination:
        if self.kind == "named_groups" and not self.group_ids:
            raise ValueError("group_ids must list at least one group when kind is named_groups")
        if self.kind != "named_groups" and self.group_ids:
            raise ValueError("group_ids is only allowed when kind is named_groups")
        if self.kind == "tagged_groups" and self.tag_key is None:
            raise ValueError("tag_key is required when kind is tagged_groups")
        if self.kind != "tagged_groups" and (self.tag_key or self.tag_value):
            raise ValueError("tag_key and tag_value are only allowed when kind is tagged_groups")
        return self


class StaticRule(_Strict):
    """A rule declared with explicit ports (LBC issue #3639: 'let users declare the port ranges')."""

    group_id: str = Field(pattern=GROUP_ID_PATTERN, description="The group that gets the rule.")
    protocol: Literal["tcp", "udp"] = Field(default="tcp", description="tcp or udp.")
    from_port: int = Field(ge=0, le=65535, description="First port, inclusive.")
    to_port: int = Field(ge=0, le=65535, description="Last port, inclusive.")
    cidr_ipv4: str | None = Field(default=None, description="Peer: an IPv4 CIDR.")
    cidr_ipv6: str | None = Field(default=None, description="Peer: an IPv6 CIDR.")
    prefix_list_id: str | None = Field(
        default=None, pattern=r"^pl-[0-9a-f]+$", description="Peer: a managed prefix list."
    )
    source_group_id: str | None = Field(
        default=None, pattern=GROUP_ID_PATTERN, description="Peer: a security group."
    )
    description: str = Field(
        default="",
        max_length=255,
        pattern=r"^[A-Za-z0-9 ._:/()#,@\[\]+=&;{}!$*-]*$",
        description="Rule description; defaults to one naming the owner.",
    )

    @model_validator(mode="after")
    def _one_peer_and_ordered_ports(self) -> StaticRule:
        peers = [self.cidr_ipv4, self.cidr_ipv6, self.prefix_list_id, self.source_group_id]
        if sum(p is not None for p in peers) != 1:
            raise ValueError(
                "exactly one of cidr_ipv4, cidr_ipv6, prefix_list_id, source_group_id is required"
            )
        if self.from_port > self.to_port:
            raise ValueError(f"from_port {self.from_port} is greater than to_port {self.to_port}")
        try:
            if self.cidr_ipv4 is not None:
                ipaddress.IPv4Network(self.cidr_ipv4, strict=False)
            if self.cidr_ipv6 is not None:
                ipaddress.IPv6Network(self.cidr_ipv6, strict=False)
        except ValueError as err:
            raise ValueError(f"invalid CIDR: {err}") from None
        return self

    def to_rule(self, owner: str) -> Rule:
        doc: dict[str, Any] = {
            "GroupId": self.group_id,
            "IpProtocol": self.protocol,
            "FromPort": self.from_port,
            "ToPort": self.to_port,
            "Description": self.description or f"{owner}: static rule",
        }
        if self.cidr_ipv4 is not None:
            doc["CidrIpv4"] = self.cidr_ipv4
        elif self.cidr_ipv6 is not None:
            doc["CidrIpv6"] = self.cidr_ipv6
        elif self.prefix_list_id is not None:
            doc["PrefixListId"] = self.prefix_list_id
        else:
            doc["ReferencedGroupInfo"] = {"GroupId": self.source_group_id}
        return rule_from_dict(doc)


class Brake(_Strict):
    max_revoke_percent: int = Field(
        default=DEFAULT_MAX_REVOKE_PERCENT,
        ge=1,
        le=100,
        description=(
            "Hold a plan's revokes when it would take away more than this share of the "
            "deployment's owned rules (100 turns this test off; the others stay)."
        ),
    )
    min_revokes: int = Field(
        default=DEFAULT_MIN_REVOKES,
        ge=1,
        description="The share test applies only from this many rules taken away.",
    )


class Policy(_Strict):
    owner: str = Field(
        default=DEFAULT_OWNER,
        pattern=OWNER_PATTERN,
        description=(
            "Value of the sg-reconciler/owner tag on every rule this deployment owns. In AWS "
            "the stack sets it (OwnerName); a policy that names another owner is refused."
        ),
    )
    load_balancers: LoadBalancerSelector = Field(
        default_factory=LoadBalancerSelector, description="Which load balancers are managed."
    )
    rule_source: RuleSource = Field(
        default_factory=RuleSource, description="The peer of every derived rule."
    )
    destination: Destination = Field(
        default_factory=Destination, description="The groups that receive derived rules."
    )
    include_health_checks: bool = Field(
        default=True, description="Also open each target group's health-check port."
    )
    rule_budget: int = Field(
        default=3,
        ge=1,
        le=60,
        description=(
            "Most rules per (group, peer, protocol); more needed ports are covered by the "
            "fewest extra ports (the LBC uses 1: one min..max range)."
        ),
    )
    quota: int | None = Field(
        default=None,
        ge=1,
        le=1000,
        description=(
            "Inbound rules per security group and address family; unset reads the account's "
            "quota (Service Quotas L-0EA8095F, AWS default 60). An override may only be lower."
        ),
    )
    quota_headroom: int = Field(
        default=0,
        ge=0,
        description="Rule slots per group the reconciler leaves free for others.",
    )
    settle_seconds: int = Field(
        default=10,
        ge=0,
        le=3600,
        description="Wait between authorizing new rules and revoking stale ones.",
    )
    brake: Brake = Field(default_factory=Brake, description="The brake on mass revocation.")
    static_rules: list[StaticRule] = Field(
        default_factory=list,
        description="Rules with explicit ports, kept as declared; derived ports they cover are not added.",
    )

    @model_validator(mode="after")
    def _coherent(self) -> Policy:
        if self.quota is not None and self.quota_headroom >= self.quota:
            raise ValueError(
                f"quota_headroom {self.quota_headroom} leaves no room under quota {self.quota}"
            )
        seen: dict[object, str] = {}
        for index, static in enumerate(self.static_rules):
            rule = static.to_rule(self.owner)
            if rule.key in seen and seen[rule.key] != rule.description:
                raise ValueError(
                    f"static_rules.{index} repeats the rule {rule.key} with another description"
                )
            seen[rule.key] = rule.description
        return self

    @property
    def rule_limit(self) -> int:
        """The per-group limit the planner works to, before the account's quota is read."""
        return (self.quota or DEFAULT_MAX_RULES_PER_GROUP) - self.quota_headroom

    def rule_quota(self, account_quota: int | None) -> int:
        """The quota to plan with: the override, never above the account's (one error line)."""
        account = account_quota or DEFAULT_MAX_RULES_PER_GROUP
        if self.quota is not None and account_quota is not None and self.quota > account_quota:
            raise PolicyError(
                f"policy: quota {self.quota} is above the account's quota of {account_quota} "
                "inbound rules per security group (Service Quotas L-0EA8095F); lower it or "
                "raise the account's quota"
            )
        quota = self.quota if self.quota is not None else account
        if self.quota_headroom >= quota:
            raise PolicyError(
                f"policy: quota_headroom {self.quota_headroom} leaves no room under the quota of {quota}"
            )
        return quota

    def for_owner(self, owner: str) -> Policy:
        """The policy of a deployment whose owner name comes from the stack (one source).

        A policy that sets `owner` to another name is refused, not silently overridden: its
        author believes the rules carry that name."""
        if "owner" in self.model_fields_set and self.owner != owner:
            raise PolicyError(
                f"policy: owner {self.owner!r} is not this deployment's owner {owner!r} (the stack's "
                "OwnerName); remove owner from the policy or deploy with that OwnerName"
            )
        return self.model_copy(update={"owner": owner})

    def desired_settings(self) -> DesiredSettings:
        """The pure-core view of the policy."""
        return DesiredSettings(
            owner=self.owner,
            backend_group=self.rule_source.group_id,
            destination=self.destination.kind,
            named_groups=tuple(self.destination.group_ids),
            tag_key=self.destination.tag_key,
            tag_value=self.destination.tag_value,
            include_health_checks=self.include_health_checks,
            rule_budget=self.rule_budget,
            static_rules=tuple(s.to_rule(self.owner) for s in self.static_rules),
        )

    def selects(self, tags: dict[str, str]) -> bool:
        """Whether a load balancer with these tags is managed."""
        return all(
            key in tags and (want == "*" or tags[key] == want)
            for key, want in self.load_balancers.tags.items()
        )


def _one_line(err: ValidationError) -> str:
    parts = []
    for item in err.errors():
        where = ".".join(str(p) for p in item["loc"])
        if item["type"] == "extra_forbidden":
            message = "unknown field (not permitted)"
        else:
            message = item["msg"].removeprefix("Value error, ")
        parts.append(f"{where}: {message}" if where else message)
    return "; ".join(parts).replace("\n", " ")


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML's safe loader, refusing a key given twice in one mapping (YAML keeps the last,
    silently: half of a policy would be ignored)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def parse_policy(text: str, origin: str = "policy") -> Policy:
    """Parse a YAML or JSON policy document (JSON is YAML); an empty document is all defaults."""
    try:
        doc = yaml.load(text, Loader=_UniqueKeyLoader)
    except RecursionError:
        raise PolicyError(f"{origin}: malformed document: nested too deeply") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1} column {mark.column + 1}" if mark else ""
        problem = getattr(err, "problem", None) or "not YAML or JSON"
        raise PolicyError(f"{origin}: malformed document{where}: {problem}") from None
    if doc is None:
        doc = {}
    if not isinstance(doc, dict):
        raise PolicyError(f"{origin}: the policy must be a mapping, not {type(doc).__name__}")
    try:
        return Policy.model_validate(doc)
    except ValidationError as err:
        raise PolicyError(f"{origin}: {_one_line(err)}") from None
    except RuleError as err:  # a static rule EC2 would reject
        raise PolicyError(f"{origin}: static_rules: {err}") from None


def load_policy_file(path: str | Path) -> Policy:
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as err:
        raise PolicyError(f"{path}: cannot read ({err.strerror})") from None
    return parse_policy(text, str(path))


def load_policy_from_ssm(ssm: SSMClient, name: str) -> Policy:
    """Read the policy from an SSM parameter (String or SecureString)."""
    try:
        response = ssm.get_parameter(Name=name, WithDecryption=True)
    except ClientError as err:
        code = err.response.get("Error", {}).get("Code", "Error")
        raise PolicyError(f"SSM parameter {name}: {code}") from None
    except BotoCoreError as err:
        raise PolicyError(f"SSM parameter {name}: {err}") from None
    return parse_policy(response["Parameter"].get("Value", ""), f"SSM parameter {name}")
