"""The live guard (invariant 11): prove, right before a revoke or modify, that what stays
in the group still allows what the desired state needs.

The plan was checked against the rules read when it was made; between that read and the
call someone may have revoked or narrowed our new rule, or the desired state may have moved.
So the step reads the group's live rules and judges the call against them: the traffic the
desired rules need that is allowed now (at least OLD ∩ NEW) must still be allowed after the
call, for every concrete source: an address plus the groups its interface carries, since one
source can be admitted by a CIDR rule and a group rule at once (invariant 9).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from sg_reconciler.core.rules import Rule
from sg_reconciler.core.traffic import Traffic, sharing_ports, source_stake


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
    if not problems:
        kept = {r.key for r in remaining}
        wanted = [w.key for w in desired if w.key not in kept and w.group_id == removed[0].group_id]
        taken = [r.key for r in removed]
        flows = source_stake(taken, wanted, sharing_ports(kept, taken)) if wanted else None
        if flows is not None and flows.pieces:
            needing = [w for w in wanted if any(flows.bit(w) & p for p in flows.pieces)]
            problems.append(
                f"it would deny a source (an address and the groups it carries) traffic that "
                f"{', '.join(str(r) for r in removed)} admits and {needing[0]} is wanted to admit: "
                "no rule that stays admits it"
            )
    return problems


def what_is_left(live: Sequence[Rule], desired: Sequence[Rule]) -> Traffic:
    """The desired traffic the live rules do not allow (empty when every desired rule holds)."""
    return Traffic.of(desired) - Traffic.of(live)
