"""The reconciler's policy: which load balancers it manages and how it derives their rules.

One YAML or JSON document, kept in an SSM parameter in AWS (read by
`sg_reconciler.adapters.policy_store`) and in a file locally. It is validated strictly
(unknown fields are errors) because a typo in a policy silently widening or narrowing what
the reconciler owns is worse than a failed start. Every problem is reported as one
`PolicyError` line that names the field. The document's model (`PolicyDocument`) stays
here, at the edge: `parse_policy` returns the core's value (`core.policy.Policy`).
"""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from sg_reconciler.core.account import tags_of
from sg_reconciler.core.brake import DEFAULT_MAX_REVOKE_PERCENT, DEFAULT_MIN_REVOKES
from sg_reconciler.core.desired import Binding as CoreBinding
from sg_reconciler.core.desired import disagreement
from sg_reconciler.core.policy import BrakeLimits, Policy
from sg_reconciler.core.policy import PolicyError as PolicyError  # raised here too
from sg_reconciler.core.rules import DEFAULT_OWNER, Rule, RuleError, rule_from_dict
from sg_reconciler.errors import validation_message as _one_line

GROUP_ID_PATTERN = r"^sg-[0-9a-f]{8,17}$"
# Tag values and EC2 rule descriptions both accept these characters.
OWNER_PATTERN = r"^[A-Za-z0-9 ._:/=+@-]{1,128}$"
MANAGED_TAG = {"sg-reconciler/managed": "true"}
# What the AWS Load Balancer Controller writes on the backend rules it shares between
# target group bindings, and recognises its own rules by.
LBC_SHARED_DESCRIPTION = "elbv2.k8s.aws/targetGroupBinding=shared"


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
    kind: Literal["load_balancer_groups", "backend_group", "load_balancer_addresses"] = Field(
        default="load_balancer_groups",
        description=(
            "Where the traffic comes from: each load balancer's own security groups; one "
            "shared backend group (the AWS Load Balancer Controller's backend security group); "
            "or, for Network Load Balancers without security groups, their addresses (their "
            "subnets' CIDRs) and, when client IP preservation is on, the clients' CIDRs."
        ),
    )
    group_id: str | None = Field(
        default=None,
        pattern=GROUP_ID_PATTERN,
        description="The backend group; required with kind backend_group, forbidden otherwise.",
    )
    client_cidrs: list[str] | None = Field(
        default=None,
        max_length=60,
        description=(
            "Clients admitted when a target group preserves client addresses (kind "
            "load_balancer_addresses only). Unset: an internal load balancer's VPC CIDRs, and "
            "nothing for an internet-facing one (declare 0.0.0.0/0 and ::/0 to admit anyone)."
        ),
    )

    @field_validator("client_cidrs")
    @classmethod
    def _cidrs(cls, value: list[str] | None) -> list[str] | None:
        for cidr in value or ():
            try:
                ipaddress.ip_network(cidr, strict=False)
            except ValueError:
                raise ValueError(f"{cidr!r} is not an IPv4 or IPv6 CIDR") from None
        return value

    @model_validator(mode="after")
    def _group_matches_kind(self) -> RuleSource:
        if self.kind == "backend_group" and self.group_id is None:
            raise ValueError("group_id is required when kind is backend_group")
        if self.kind != "backend_group" and self.group_id is not None:
            raise ValueError("group_id is only allowed when kind is backend_group")
        if self.kind != "load_balancer_addresses" and self.client_cidrs is not None:
            raise ValueError("client_cidrs is only allowed when kind is load_balancer_addresses")
        return self


class Destination(_Strict):
    kind: Literal["target_enis", "named_groups", "tagged_groups", "cluster_group"] = Field(
        default="target_enis",
        description=(
            "Which groups receive the rules: every group of each target's network interface; "
            "the listed groups (nodes' groups, no instance reads); of each target's interface "
            "groups, those carrying the tag; or, as the AWS Load Balancer Controller chooses, "
            "the interface's only group, else its one group tagged "
            "kubernetes.io/cluster/<cluster_name> (several or none: an error, rules held)."
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

    cluster_name: str | None = Field(
        default=None,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9_-]{0,99}$",
        description="The EKS cluster's name for kind cluster_group.",
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
        if self.kind == "cluster_group" and self.cluster_name is None:
            raise ValueError("cluster_name is required when kind is cluster_group")
        if self.kind != "cluster_group" and self.cluster_name is not None:
            raise ValueError("cluster_name is only allowed when kind is cluster_group")
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


class _BindingFields(_Strict):
    """What a binding says; the single-binding form puts these at the policy's top level."""

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

    def to_core(self, name: str) -> CoreBinding:
        source, destination = self.rule_source, self.destination
        cidrs = source.client_cidrs
        return CoreBinding(
            name=name,
            load_balancer_tags=tags_of(self.load_balancers.tags),
            source=source.kind,
            backend_group=source.group_id,
            client_cidrs=None if cidrs is None else tuple(cidrs),
            destination=destination.kind,
            named_groups=tuple(destination.group_ids),
            tag_key=destination.tag_key,
            tag_value=destination.tag_value,
            cluster_name=destination.cluster_name,
            include_health_checks=self.include_health_checks,
            rule_budget=self.rule_budget,
        )


class Binding(_BindingFields):
    name: str = Field(
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$",
        description="A name for messages and plans, unique in the policy (e.g. the cluster).",
    )


class PolicyDocument(_BindingFields):
    owner: str = Field(
        default=DEFAULT_OWNER,
        pattern=OWNER_PATTERN,
        description=(
            "Value of the sg-reconciler/owner tag on every rule this deployment owns. In AWS "
            "the stack sets it (OwnerName); a policy that names another owner is refused."
        ),
    )
    bindings: list[Binding] | None = Field(
        default=None,
        min_length=1,
        description=(
            "Several sets of load balancers, each with its own source and destination (e.g. "
            "one per cluster). Unset: one binding named default, from the top-level "
            "load_balancers, rule_source, destination, include_health_checks and rule_budget."
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
    adopt_descriptions: list[Annotated[str, Field(min_length=1, max_length=255)]] = Field(
        default_factory=list,
        max_length=10,
        description=(
            "Unmanaged rules with one of these descriptions are taken over when they are "
            "exactly a desired rule: tagged with the owner and given this deployment's "
            "description in place, so a hand-over never removes a rule first. For the AWS "
            "Load Balancer Controller: elbv2.k8s.aws/targetGroupBinding=shared."
        ),
    )
    static_rules: list[StaticRule] = Field(
        default_factory=list,
        description="Rules with explicit ports, kept as declared; derived ports they cover are not added.",
    )

    @model_validator(mode="after")
    def _coherent(self) -> PolicyDocument:
        if self.bindings is not None:
            single = sorted(set(_BindingFields.model_fields) & self.model_fields_set)
            if single:
                raise ValueError(
                    f"{', '.join(single)} belong inside each binding when bindings is set"
                )
            _check_bindings(self.bindings)
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

    def for_owner(self, owner: str) -> PolicyDocument:
        """The policy of a deployment whose owner name comes from the stack (one source).

        A policy that sets `owner` to another name is refused, not silently overridden: its
        author believes the rules carry that name."""
        if "owner" in self.model_fields_set and self.owner != owner:
            raise PolicyError(
                f"policy: owner {self.owner!r} is not this deployment's owner {owner!r} (the stack's "
                "OwnerName); remove owner from the policy or deploy with that OwnerName"
            )
        return self.model_copy(update={"owner": owner})

    def in_effect(self) -> list[tuple[str, _BindingFields]]:
        """The bindings by name; the single-binding form is one binding named default."""
        if self.bindings is None:
            return [("default", self)]
        return [(b.name, b) for b in self.bindings]

    def to_policy(self) -> Policy:
        """The core's value of this document."""
        return Policy(
            owner=self.owner,
            bindings=tuple(fields.to_core(name) for name, fields in self.in_effect()),
            static_rules=tuple(s.to_rule(self.owner) for s in self.static_rules),
            quota=self.quota,
            quota_headroom=self.quota_headroom,
            settle_seconds=self.settle_seconds,
            brake=BrakeLimits(self.brake.max_revoke_percent, self.brake.min_revokes),
            adopt_descriptions=tuple(self.adopt_descriptions),
        )


def _check_bindings(bindings: list[Binding]) -> None:
    """Refuse what can be seen before reading the account: a name used twice, and two
    bindings that give one group rules from one backend group but shape them differently
    (the same check runs on what the account shows, naming both: core.desired)."""
    names: dict[str, int] = {}
    for index, binding in enumerate(bindings):
        if binding.name in names:
            raise ValueError(
                f"bindings.{index}: name {binding.name!r} is already used by "
                f"bindings.{names[binding.name]}"
            )
        names[binding.name] = index
    claimed: dict[tuple[str, str], Binding] = {}
    for binding in bindings:
        backend = binding.rule_source.group_id
        if backend is None or binding.destination.kind != "named_groups":
            continue
        for group in binding.destination.group_ids:
            first = claimed.setdefault((group, backend), binding)
            conflict = disagreement(
                first.to_core(first.name),
                binding.to_core(binding.name),
                f"rules in {group} from {backend}",
            )
            if conflict:
                raise ValueError(conflict)


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


def parse_policy(text: str, origin: str = "policy", owner: str | None = None) -> Policy:
    """Parse a YAML or JSON policy (JSON is YAML); an empty document is all defaults. With
    `owner` (the stack's), a policy naming another owner is refused."""
    document = parse_policy_document(text, origin)
    return (document if owner is None else document.for_owner(owner)).to_policy()


# The policy reaches a stack as its PolicyDocument parameter, whose value holds 4,096 bytes
# ("AWS CloudFormation quotas", Parameter value): a longer one fails at deploy.
PARAMETER_BYTES = 4096


def parameter_size_problem(text: str) -> str | None:
    """Why `text` cannot be the PolicyDocument parameter, naming what to drop; None if it fits."""
    size = len(text.encode("utf-8"))
    if size <= PARAMETER_BYTES:
        return None
    bare = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    return (
        f"{size} bytes, over the {PARAMETER_BYTES} a CloudFormation parameter value holds "
        f"(PolicyDocument); without its comment lines it is {len(bare.encode('utf-8'))} bytes"
    )


def parse_policy_document(text: str, origin: str = "policy") -> PolicyDocument:
    """The policy document as written (for tools that check what it sets)."""
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
        return PolicyDocument.model_validate(doc)
    except ValidationError as err:
        raise PolicyError(f"{origin}: {_one_line(err)}") from None
    except RuleError as err:  # a static rule EC2 would reject
        raise PolicyError(f"{origin}: static_rules: {err}") from None


def load_policy_file(path: str | Path) -> Policy:
    return load_policy_document(path).to_policy()


def load_policy_document(path: str | Path) -> PolicyDocument:
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as err:
        raise PolicyError(f"{path}: cannot read ({err.strerror})") from None
    return parse_policy_document(text, str(path))
