"""Security-group rules as EC2 judges them.

A rule's identity is what EC2 uses to reject a duplicate: group, protocol, ports and peer.
The description does not count. Rules are read from and written to the shape that
`aws ec2 describe-security-group-rules` prints, so files, plans and execution input share
one format.
"""

from __future__ import annotations

import functools
import ipaddress
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple, TypeGuard

OWNER_TAG_KEY = "sg-reconciler/owner"
PLAN_TAG_KEY = "sg-reconciler/plan-id"
# On a rule taken over from another tool: the execution that adopted it and the description
# it had, so that a rollback hands it back exactly as it was.
ADOPTED_BY_TAG_KEY = "sg-reconciler/adopted-by"
ADOPTED_DESCRIPTION_TAG_KEY = "sg-reconciler/adopted-description"
DEFAULT_OWNER = "sg-reconciler"
DEFAULT_MAX_RULES_PER_GROUP = 60

PeerKind = Literal["cidr4", "cidr6", "prefix_list", "group"]

_PROTOCOL_NAMES = {"6": "tcp", "17": "udp", "1": "icmp", "58": "icmpv6", "all": "-1"}
_PROTOCOL_NUMBERS = {"tcp": 6, "udp": 17, "icmp": 1, "icmpv6": 58}
_PORTED = frozenset({"tcp", "udp"})
_ICMP = frozenset({"icmp", "icmpv6"})
_CANONICAL_PROTOCOLS = {name: name for name in (*_PROTOCOL_NUMBERS, "-1")}
_PEER_FIELDS = ("CidrIpv4", "CidrIpv6", "PrefixListId", "ReferencedGroupInfo")
# The other string fields describe-security-group-rules prints: never read, but type-checked,
# so that a document broken anywhere is refused rather than half understood.
_TEXT_FIELDS = ("GroupOwnerId", "SecurityGroupRuleArn")
_REFERENCE_TEXT_FIELDS = ("UserId", "VpcId", "VpcPeeringConnectionId", "PeeringStatus")


class RuleError(ValueError):
    """A rule document that EC2 would reject or that does not describe one rule. `of` says
    which rules it is about ("current" or "desired") when the one who raises it knows."""

    def __init__(self, message: str, *, of: str = "") -> None:
        super().__init__(message)
        self.of = of


class Peer(NamedTuple):
    """The source of an ingress rule; values are normalised (CIDR host bits cleared).

    Keys are tuples (not dataclasses): planning hashes, compares and sorts them by the
    hundred thousand, and tuples do that in C."""

    kind: PeerKind
    value: str

    def __str__(self) -> str:
        return self.value


class RuleKey(NamedTuple):
    """EC2's duplicate identity: two rules with one key cannot coexist in a group."""

    group_id: str
    protocol: str
    from_port: int
    to_port: int
    peer: Peer

    def __str__(self) -> str:
        return f"{self.group_id} {describe_ports(self.protocol, self.from_port, self.to_port)} from {self.peer}"


@dataclass(frozen=True)
class Rule:
    """One ingress rule, existing (with id and tags) or desired (without)."""

    key: RuleKey
    description: str = ""
    rule_id: str | None = None
    tags: tuple[tuple[str, str], ...] = field(default=())

    @property
    def group_id(self) -> str:
        return self.key.group_id

    def tag(self, name: str) -> str | None:
        return next((v for k, v in self.tags if k == name), None)

    def owned_by(self, owner: str) -> bool:
        return (OWNER_TAG_KEY, owner) in self.tags  # tag keys are unique on a rule

    def __str__(self) -> str:
        ident = f"{self.rule_id} " if self.rule_id else ""
        return f"{ident}({self.key})"


def describe_ports(protocol: str, from_port: int, to_port: int) -> str:
    if protocol == "-1":
        return "all traffic"
    if protocol in _ICMP:
        return f"{protocol} type {from_port} code {to_port}"
    if protocol not in _PORTED:
        return f"protocol {protocol}"
    ports = str(from_port) if from_port == to_port else f"{from_port}-{to_port}"
    return f"{protocol} {ports}"


_DECIMAL = re.compile(r"-?[0-9]+")  # ASCII digits only: "²".isdigit() is true, int() fails


def normalize_protocol(raw: object) -> str:
    """Map EC2's protocol spellings to the names describe prints: tcp, udp, icmp, -1, "50"."""
    if type(raw) is str and raw in _CANONICAL_PROTOCOLS:
        return _CANONICAL_PROTOCOLS[raw]  # what describe prints: the common case, and shared
    text = str(raw).strip().lower()
    if text in _PROTOCOL_NUMBERS or text == "-1":
        return text
    if text in _PROTOCOL_NAMES:
        return _PROTOCOL_NAMES[text]
    if _DECIMAL.fullmatch(text) and 0 <= int(text) <= 255:
        number = str(int(text))  # "06" is TCP too, with its ports
        return _PROTOCOL_NAMES.get(number, number)
    raise RuleError(f"unknown protocol {raw!r}")


def protocol_number(protocol: str) -> int | None:
    """IANA number of a normalised protocol; None for -1 (all protocols)."""
    if protocol == "-1":
        return None
    return _PROTOCOL_NUMBERS.get(protocol, int(protocol) if protocol.isdigit() else None)


def _port_number(raw: object) -> int | None:
    """An integer port, or its decimal text ("80"); never a bool (True is not port 1) or 80.5."""
    if type(raw) is int:
        return raw
    if isinstance(raw, str) and _DECIMAL.fullmatch(raw.strip()):
        return int(raw)
    return None


def _normalize_ports(protocol: str, from_raw: object, to_raw: object) -> tuple[int, int]:
    from_port, to_port = _port_number(from_raw), _port_number(to_raw)
    if protocol not in _PORTED and protocol not in _ICMP:
        # EC2 ignores ports for all-traffic and for protocols without ports; their type
        # still has to be a port's (describe prints -1).
        for name, raw, number in (("FromPort", from_raw, from_port), ("ToPort", to_raw, to_port)):
            if raw is not None and number is None:
                raise RuleError(f"{name} must be an integer, not {raw!r}")
        return -1, -1
    if from_port is None or to_port is None:
        raise RuleError(
            f"{protocol} needs integer FromPort and ToPort, not {from_raw!r} and {to_raw!r}"
        )
    if protocol in _ICMP:
        if not (-1 <= from_port <= 255 and -1 <= to_port <= 255):
            raise RuleError(f"ICMP type {from_port} / code {to_port} out of range -1..255")
        return from_port, to_port
    if not (0 <= from_port <= 65535 and 0 <= to_port <= 65535):
        raise RuleError(f"ports {from_port}-{to_port} out of range 0..65535")
    if from_port > to_port:
        raise RuleError(f"FromPort {from_port} is greater than ToPort {to_port}")
    return from_port, to_port


@functools.lru_cache(maxsize=65536)
def _peer(kind: PeerKind, value: str) -> Peer:
    """One shared Peer per source, CIDRs with host bits cleared (ValueError if invalid).

    Cached: accounts repeat a few peers in many rules, and one shared object per peer makes
    parsing cheaper, keys compare by identity, and leaves less for the collector to walk."""
    if kind == "cidr4":
        return Peer(kind, str(ipaddress.IPv4Network(value, strict=False)))
    if kind == "cidr6":
        return Peer(kind, str(ipaddress.IPv6Network(value, strict=False)))
    return Peer(kind, value)


def cidr_peer(text: str) -> Peer:
    """The peer of an IPv4 or IPv6 CIDR, normalised as EC2 stores it (ValueError if invalid)."""
    return _peer("cidr6" if ":" in text else "cidr4", text)


def _normalize_peer(doc: Mapping[str, Any]) -> Peer:
    present = []
    for name in _PEER_FIELDS:  # a plain loop: this runs for every rule parsed
        value = doc.get(name)
        if value is not None and value != "":  # absent, as describe leaves it
            present.append(name)
    if len(present) != 1:
        found = ", ".join(present) or "none"
        raise RuleError(
            f"a rule needs exactly one peer of {', '.join(_PEER_FIELDS)}; found {found}"
        )
    name = present[0]
    value = doc[name]
    if name == "ReferencedGroupInfo":
        return _peer("group", _referenced_group(value))
    _require_text(name, value)
    try:
        if name == "CidrIpv4":
            return _peer("cidr4", value)
        if name == "CidrIpv6":
            return _peer("cidr6", value)
    except ValueError:
        raise RuleError(f"invalid {name} {value!r}") from None
    return _peer("prefix_list", value)


def _referenced_group(value: object) -> str:
    if not _is_mapping(value):
        raise RuleError(f"ReferencedGroupInfo must be an object with a GroupId, not {value!r}")
    group = value.get("GroupId")
    if not group:
        raise RuleError("ReferencedGroupInfo needs a GroupId")
    _require_text("ReferencedGroupInfo.GroupId", group)
    for name in _REFERENCE_TEXT_FIELDS:
        if value.get(name) is not None:
            _require_text(f"ReferencedGroupInfo.{name}", value[name])
    return str(group)


def _require_text(name: str, value: object) -> None:
    """Describe prints these fields as strings; anything else is a broken document, not a rule."""
    if type(value) is not str:
        raise RuleError(f"{name} must be a string, not {value!r}")


def _normalize_tags(raw: object) -> tuple[tuple[str, str], ...]:
    if raw in (None, []):
        return ()
    if not isinstance(raw, list):
        raise RuleError("Tags must be a list of {Key, Value}")
    tags = []
    for tag in raw:
        if not (_is_mapping(tag) and "Key" in tag and "Value" in tag):
            raise RuleError("Tags must be a list of {Key, Value}")
        key, value = tag["Key"], tag["Value"]
        if type(key) is not str or type(value) is not str:
            raise RuleError(f"tag {key!r}: Key and Value must be strings, not {value!r}")
        tags.append((key, value))
    return tuple(sorted(tags)) if len(tags) > 1 else tuple(tags)


def is_egress(doc: Mapping[str, Any]) -> bool:
    flag = doc.get("IsEgress", False)
    if not isinstance(flag, bool):
        raise RuleError(f"IsEgress must be true or false, not {flag!r}")
    return flag


def _is_mapping(value: object) -> TypeGuard[Mapping[str, Any]]:
    return type(value) is dict or isinstance(value, Mapping)  # the ABC check is slow


def rule_from_dict(doc: object) -> Rule:
    """Parse one rule in describe-security-group-rules shape (ingress or egress alike)."""
    if not _is_mapping(doc):
        raise RuleError("a rule must be a JSON object")
    group_id = doc.get("GroupId")
    if not isinstance(group_id, str) or not group_id:
        given = "" if group_id is None else f", not {group_id!r}"
        raise RuleError(f"a rule needs a GroupId (a group id string){given}")
    if "IpProtocol" not in doc:
        raise RuleError("a rule needs an IpProtocol")
    raw_protocol = doc["IpProtocol"]
    if type(raw_protocol) is not str and type(raw_protocol) is not int:
        raise RuleError(f"IpProtocol must be a string, not {raw_protocol!r}")
    protocol = normalize_protocol(raw_protocol)
    from_port, to_port = _normalize_ports(protocol, doc.get("FromPort"), doc.get("ToPort"))
    description = doc.get("Description")
    if description is None:
        description = ""
    elif type(description) is not str:
        raise RuleError(f"Description must be a string, not {description!r}")
    for name in _TEXT_FIELDS:
        if doc.get(name) is not None:
            _require_text(name, doc[name])
    rule_id = doc.get("SecurityGroupRuleId")
    if rule_id is not None and (not isinstance(rule_id, str) or not rule_id):
        raise RuleError("SecurityGroupRuleId must be a non-empty string")
    key = RuleKey(group_id, protocol, from_port, to_port, _normalize_peer(doc))
    return Rule(key, description, rule_id, _normalize_tags(doc.get("Tags")))


def label(doc: object, index: int) -> str:
    """Name a raw rule document in an error message, even when it does not parse."""
    if isinstance(doc, Mapping):
        parts = [str(doc.get(k)) for k in ("SecurityGroupRuleId", "GroupId") if doc.get(k)]
        parts += [f"{k}={doc[k]}" for k in ("IpProtocol", "FromPort", "ToPort") if k in doc]
        if parts:
            return f"rule #{index} ({' '.join(parts)})"
    return f"rule #{index}"


def rule_to_dict(rule: Rule, *, with_identity: bool = True) -> dict[str, Any]:
    """Write a rule in describe-security-group-rules shape."""
    key = rule.key
    doc: dict[str, Any] = {
        "GroupId": key.group_id,
        "IsEgress": False,
        "IpProtocol": key.protocol,
        "FromPort": key.from_port,
        "ToPort": key.to_port,
    }
    if key.peer.kind == "cidr4":
        doc["CidrIpv4"] = key.peer.value
    elif key.peer.kind == "cidr6":
        doc["CidrIpv6"] = key.peer.value
    elif key.peer.kind == "prefix_list":
        doc["PrefixListId"] = key.peer.value
    else:
        doc["ReferencedGroupInfo"] = {"GroupId": key.peer.value}
    if rule.description:
        doc["Description"] = rule.description
    if with_identity and rule.rule_id:
        doc["SecurityGroupRuleId"] = rule.rule_id
    if with_identity and rule.tags:
        doc["Tags"] = [{"Key": k, "Value": v} for k, v in rule.tags]
    return doc


def ingress_rules(docs: Iterable[object], what: str) -> list[Rule]:
    """Parse a rule list, skipping egress rules; errors name the offending rule."""
    rules: list[Rule] = []
    seen_ids: set[str] = set()
    for index, doc in enumerate(docs):
        try:
            if _is_mapping(doc) and doc.get("IsEgress", False) is not False and is_egress(doc):
                continue
            rule = rule_from_dict(doc)
        except RuleError as err:
            raise RuleError(f"{what} {label(doc, index)}: {err}") from None
        if rule.rule_id is not None:
            if rule.rule_id in seen_ids:
                raise RuleError(f"{what} {label(doc, index)}: duplicate SecurityGroupRuleId")
            seen_ids.add(rule.rule_id)
        rules.append(rule)
    return rules
