"""The live guard (invariant 11): prove, right before a revoke or modify, that what stays
in the group still allows what the desired state needs.

The plan was checked against the rules read when it was made; between that read and the
call someone may have revoked or narrowed our new rule, or the desired state may have moved.
So the step reads the group's live rules and judges the call against them: the traffic the
desired rules need that is allowed now (at least OLD ∩ NEW) must still be allowed after the
call, and a rule that admits ports from one peer must not go while the desired rule that
admits overlapping ports from another peer is missing (invariant 9).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from sg_reconciler.core.rules import Rule
from sg_reconciler.core.safety import flow_conflict
from sg_reconciler.core.traffic import Traffic


def call_would_lose(
    live: Sequence[Rule],
    removed_ids: Collection[str],
    added: Sequence[Rule],
    desired: Sequence[Rule],
) -> list[str]:
    """Why removing `removed_ids` (and adding `added`) from `live` is unsafe; empty if safe."""
    removed = [r for r in live if r.rule_id in removed_ids]
    if not removed:
        return []
    remaining = [r for r in live if r.rule_id not in removed_ids] + list(added)
    stays = Traffic.of(remaining)
    problems: list[str] = []
    lost = (Traffic.of(desired) & Traffic.of(live)) - stays
    if lost:
        problems.append(f"it would deny {lost.describe()}, which the desired rules need")
    for old in removed:
        for want in desired:
            if flow_conflict(old.key, want.key) and not Traffic.of([want]) <= stays:
                problems.append(
                    f"{old} must stay until {want.key} is in place: a source can be admitted "
                    "by both peers"
                )
    return problems


def what_is_left(live: Sequence[Rule], desired: Sequence[Rule]) -> Traffic:
    """The desired traffic the live rules do not allow (empty when every desired rule holds)."""
    return Traffic.of(desired) - Traffic.of(live)
