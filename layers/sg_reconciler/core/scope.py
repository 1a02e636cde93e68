"""What a trigger affects: the groups, load balancers, target groups and instances to re-plan."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sg_reconciler.core.rules import Peer
    from sg_reconciler.core.traffic import Traffic

TARGET_GROUP_ARN_PART = ":targetgroup/"


@dataclass(frozen=True)
class Scope:
    """A set of affected resources; `full` means re-plan everything the policy covers."""

    group_ids: frozenset[str] = frozenset()
    load_balancer_arns: frozenset[str] = frozenset()
    target_group_arns: frozenset[str] = frozenset()
    instance_ids: frozenset[str] = frozenset()
    full: bool = False
    # Instances whose own groups the event changed (ModifyInstanceAttribute): read fresh even
    # where the inventory index knows them. A target a (de)registration names is read only
    # when the index does not know it afresh, as every other target is.
    regrouped_instances: frozenset[str] = frozenset()

    @classmethod
    def everything(cls) -> Scope:
        return cls(full=True)

    @classmethod
    def merge(cls, scopes: Iterable[Scope]) -> Scope:
        merged = cls()
        for scope in scopes:
            merged = merged | scope
        return merged

    def __or__(self, other: Scope) -> Scope:
        return Scope(
            self.group_ids | other.group_ids,
            self.load_balancer_arns | other.load_balancer_arns,
            self.target_group_arns | other.target_group_arns,
            self.instance_ids | other.instance_ids,
            self.full or other.full,
            self.regrouped_instances | other.regrouped_instances,
        )

    def __bool__(self) -> bool:
        return self.full or bool(
            self.group_ids or self.load_balancer_arns or self.target_group_arns or self.instance_ids
        )

    def items(self) -> list[dict[str, str]]:
        """An event scope's load balancers and target groups, as the plan store keeps them
        for the refresh (groups, instances and `full` never narrow a read: not kept)."""
        return [{"arn": a} for a in sorted(self.load_balancer_arns | self.target_group_arns)]

    @classmethod
    def from_items(cls, items: Iterable[Mapping[str, Any]]) -> Scope:
        arns = {str(item["arn"]) for item in items}
        targets = {a for a in arns if TARGET_GROUP_ARN_PART in a}
        return cls(
            load_balancer_arns=frozenset(arns - targets), target_group_arns=frozenset(targets)
        )


@dataclass(frozen=True)
class Locked:
    """What the steps under the locks read: the locked groups' rules, and the target groups
    whose load balancer admits one of `peers` (the peers of the rules the plan revokes).
    `lost`, the traffic those revokes take away, lets a reader with the inventory index
    read only the target groups that could use it (core/revoke_closure.py); None: all."""

    groups: frozenset[str]
    peers: frozenset[Peer]
    lost: Traffic | None = None
