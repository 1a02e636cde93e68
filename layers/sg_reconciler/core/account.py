"""What the inventory reader saw: load balancers, target groups, targets and security groups.

Plain frozen dataclasses, filled by `sg_reconciler.adapters.inventory` from describe calls
and by generators in tests and benchmarks, so desired-state code never touches boto3.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from sg_reconciler.core.quota import PrefixListSize
from sg_reconciler.core.rules import Peer, Rule

TargetKind = Literal["instance", "ip", "lambda", "alb"]
Tags = tuple[tuple[str, str], ...]


def tags_of(pairs: Mapping[str, str]) -> Tags:
    """Tags in a hashable, ordered form."""
    return tuple(sorted(pairs.items()))


@dataclass(frozen=True)
class SecurityGroup:
    group_id: str
    vpc_id: str = ""
    name: str = ""
    tags: Tags = ()

    def tag(self, key: str) -> str | None:
        return next((v for k, v in self.tags if k == key), None)


@dataclass(frozen=True)
class LoadBalancer:
    arn: str
    name: str
    type: str  # "network", "application" or "gateway"
    security_groups: tuple[str, ...] = ()
    tags: Tags = ()
    vpc_id: str = ""
    scheme: str = "internet-facing"  # or "internal"
    ip_address_type: str = "ipv4"  # "dualstack" and "dualstack-without-public-ipv4" add IPv6
    subnet_cidrs: tuple[str, ...] = ()  # IPv4 and IPv6 CIDRs of its subnets, when read


@dataclass(frozen=True)
class Target:
    """A registered target and the security groups of the interface the traffic reaches.

    `group_ids` is empty when the interface was not found (an IP outside the VPC, a stopped
    instance); `instance_id` is the instance behind the interface, if any.
    """

    target_id: str
    port: int | None = None
    group_ids: tuple[str, ...] = ()
    instance_id: str | None = None


@dataclass(frozen=True)
class TargetGroup:
    arn: str
    name: str
    protocol: str  # TCP, UDP, TCP_UDP, TLS, HTTP, HTTPS, GENEVE, ...
    port: int | None
    target_type: TargetKind
    health_check_port: str = "traffic-port"  # or a port number as text, as ELBv2 returns it
    health_check_protocol: str = "TCP"
    health_check_enabled: bool = True
    load_balancer_arns: tuple[str, ...] = ()
    vpc_id: str = ""
    targets: tuple[Target, ...] = ()
    preserve_client_ip: bool | None = None  # the preserve_client_ip.enabled attribute, if read
    ip_address_type: str = "ipv4"  # or "ipv6": the family its targets are reached in


@dataclass(frozen=True)
class Inventory:
    """One consistent-enough read of the account, in the order the reader needs it.

    `groups` holds only groups that still existed after their rules were read, so a group
    deleted mid-read is absent here and its rules are dropped from `rules`.
    `owned_groups` are groups that carry at least one rule with the owner tag (they stay in
    play even when nothing desires rules in them any more, so their stale rules go away).
    `missing_groups` are groups whose rules the read looked for that were not found
    (deleted?): the desired state notes each once, saying what it is to the policy where it
    knows (core/desired.py).
    """

    load_balancers: tuple[LoadBalancer, ...] = ()
    target_groups: tuple[TargetGroup, ...] = ()
    groups: Mapping[str, SecurityGroup] = field(default_factory=dict)
    rules: tuple[Rule, ...] = ()
    owned_groups: frozenset[str] = frozenset()
    notes: tuple[str, ...] = ()
    missing_groups: frozenset[str] = frozenset()
    prefix_lists: Mapping[str, PrefixListSize] = field(default_factory=dict)
    account_rule_quota: int | None = None  # Service Quotas L-0EA8095F, when it could be read
    vpc_cidrs: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # IPv4 and IPv6
    # An event-scoped read (core/narrow.py): the peers it is exact for; None: a full read.
    narrowed_to: frozenset[Peer] | None = None
    # Why this read cannot back a revoke that takes traffic away (under the locks, the
    # inventory index missing, old or contradicted on a target group it chose): held.
    doubts: tuple[str, ...] = ()
