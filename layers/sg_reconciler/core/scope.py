"""What a trigger affects: the groups, load balancers, target groups and instances to re-plan."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Scope:
    """A set of affected resources; `full` means re-plan everything the policy covers."""

    group_ids: frozenset[str] = frozenset()
    load_balancer_arns: frozenset[str] = frozenset()
    target_group_arns: frozenset[str] = frozenset()
    instance_ids: frozenset[str] = frozenset()
    full: bool = False

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
        )

    def __bool__(self) -> bool:
        return self.full or bool(
            self.group_ids or self.load_balancer_arns or self.target_group_arns or self.instance_ids
        )
