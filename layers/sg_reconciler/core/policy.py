"""The deployment's policy as the core asks of it: whose rules these are, the bindings that
derive them, the quota to plan within, the brake's limits and the descriptions it adopts.

A value: the edge (sg_reconciler/policy.py) reads the YAML or JSON document, validates it
with its pydantic model and returns this, so the core needs neither YAML nor pydantic.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from sg_reconciler.core.brake import DEFAULT_MAX_REVOKE_PERCENT, DEFAULT_MIN_REVOKES
from sg_reconciler.core.desired import Binding, DesiredSettings
from sg_reconciler.core.rules import DEFAULT_MAX_RULES_PER_GROUP, DEFAULT_OWNER, OWNER_TAG_KEY, Rule


class PolicyError(ValueError):
    """A policy that cannot be read, is invalid, or does not fit the account; one line."""


@dataclass(frozen=True)
class BrakeLimits:
    """When the brake holds a plan's revokes (invariant 12)."""

    max_revoke_percent: int = DEFAULT_MAX_REVOKE_PERCENT
    min_revokes: int = DEFAULT_MIN_REVOKES


@dataclass(frozen=True)
class Policy:
    owner: str = DEFAULT_OWNER
    bindings: tuple[Binding, ...] = (Binding(),)
    static_rules: tuple[Rule, ...] = ()  # with the owner's description where none is given
    quota: int | None = None  # inbound rules per group and family; None: the account's
    quota_headroom: int = 0  # slots per group left free for others
    settle_seconds: int = 10
    brake: BrakeLimits = field(default_factory=BrakeLimits)
    adopt_descriptions: tuple[str, ...] = ()

    def desired_settings(self) -> DesiredSettings:
        """What shapes the desired rules."""
        return DesiredSettings(self.owner, self.bindings, self.static_rules)

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

    def selects(self, tags: Mapping[str, str]) -> bool:
        """Whether a load balancer with these tags is managed (by any binding)."""
        return any(binding.selects(tags) for binding in self.bindings)

    def adopts(self, rule: Rule) -> bool:
        """Whether an unmanaged rule may be taken over (when it is exactly a desired rule):
        its description is listed and no deployment owns it (another's stays its own)."""
        return (
            bool(rule.description)
            and rule.description in self.adopt_descriptions
            and rule.tag(OWNER_TAG_KEY) is None
        )

    @property
    def named_groups(self) -> set[str]:
        """Groups some binding names as its destination."""
        return {g for b in self.bindings for g in b.named_groups}

    @property
    def backend_groups(self) -> set[str]:
        """Groups some binding names as its rule source."""
        return {b.backend_group for b in self.bindings if b.backend_group}
