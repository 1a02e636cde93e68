"""The inbound-rule quota of a security group, counted the way AWS counts it.

AWS (Amazon VPC quotas, "Inbound or outbound rules per security group", Service Quotas code
L-0EA8095F, per account and region) enforces the quota for IPv4 and IPv6 rules apart; a
rule that references a security group counts once in each family, and a rule that
references a managed prefix list counts as the list's MaxEntries in the list's family.

The offline CLI keeps its documented contract (`--max-rules-per-group N` counts every
ingress rule once): `Limits` with `per_family` False. The deployed planner counts per
family, with the prefix-list sizes it read (docs/invariants.md, invariant 5).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from sg_reconciler.core.rules import DEFAULT_MAX_RULES_PER_GROUP, RuleKey

Usage = tuple[int, int]  # (IPv4 units, IPv6 units); the combined count lives in the first


@dataclass(frozen=True)
class PrefixListSize:
    """What a prefix-list reference costs: MaxEntries, in the list's address family."""

    family: str  # "IPv4" or "IPv6", as DescribeManagedPrefixLists prints it
    max_entries: int

    def __str__(self) -> str:
        return f"{self.family}:{self.max_entries}"  # as --prefix-list-size takes it


@dataclass(frozen=True)
class Limits:
    """Inbound rules a group may hold (AWS default 60), with per-group overrides."""

    default: int = DEFAULT_MAX_RULES_PER_GROUP
    per_group: Mapping[str, int] = field(default_factory=dict)
    per_family: bool = False
    prefix_lists: Mapping[str, PrefixListSize] = field(default_factory=dict)

    def __call__(self, group_id: str) -> int:
        return self.per_group.get(group_id, self.default)

    def weight(self, key: RuleKey) -> Usage:
        """The quota units one rule takes."""
        if not self.per_family:
            return (1, 0)
        kind = key.peer.kind
        if kind == "cidr4":
            return (1, 0)
        if kind == "cidr6":
            return (0, 1)
        if kind == "prefix_list":
            size = self.prefix_lists.get(key.peer.value)
            if size is None:  # unknown list: the worst case of both families
                return (1, 1)
            return (size.max_entries, 0) if size.family == "IPv4" else (0, size.max_entries)
        return (1, 1)  # a group reference counts in both families

    def usage(self, keys: Iterable[RuleKey]) -> Usage:
        v4 = v6 = 0
        for key in keys:
            a, b = self.weight(key)
            v4 += a
            v6 += b
        return v4, v6

    def fits(self, usage: Usage, group_id: str) -> bool:
        limit = self(group_id)
        return usage[0] <= limit and usage[1] <= limit

    def describe(self, usage: Usage) -> str:
        if not self.per_family:
            return f"{usage[0]} ingress rules"
        return f"{usage[0]} IPv4 and {usage[1]} IPv6 rule units"


def add(a: Usage, b: Usage) -> Usage:
    return a[0] + b[0], a[1] + b[1]


def sub(a: Usage, b: Usage) -> Usage:
    return a[0] - b[0], a[1] - b[1]
