"""Reads under the locks through the inventory index (docs/architecture.md, "Reads").

The same read as `adapters/inventory.read_locked` (the locked groups' rules, the load
balancer and target group listings, the closure of the peers whose rules would go), except
that of the closure's target groups only the candidates the index picks
(`core/revoke_closure.candidates`) are read fresh: their targets (one DescribeTargetHealth
each) and their targets' interfaces. The others keep the index's targets, and their
interfaces' groups come from the index where it knows them afresh (else EC2, filtered by id).
What was read fresh goes back as entries for the index, with why the index cannot vouch for
the read (`doubts`: a candidate missing from it, older than the verification period, or
contradicted by the fresh read), which holds the revokes.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from sg_reconciler.adapters.index_reads import _InterfacesFromIndex, _model
from sg_reconciler.core.account import LoadBalancer, TargetGroup
from sg_reconciler.core.index_events import Version
from sg_reconciler.core.inventory_index import Entry, IndexView, target_group_entry, target_key
from sg_reconciler.core.narrow import Narrowing, sending_peers
from sg_reconciler.core.policy import Policy
from sg_reconciler.core.revoke_closure import LockedIndexRead, candidates, contradictions
from sg_reconciler.core.scope import Locked


class _LockedIndexReader(_InterfacesFromIndex):
    """`_Reader` under the locks, reading fresh only the closure's candidates."""

    def setup(self, view: IndexView, read: Version, period: float) -> None:
        self.view, self.version, self.period = view, read, period
        self.chosen: frozenset[str] = frozenset()
        self.doubts: dict[str, str] = {}
        self.fresh_models: dict[str, TargetGroup] = {}
        self.fresh_ids: set[str] = set()  # instance ids / "vpc|ip" of the candidates' targets
        self.admitting = 0
        self.out: list[Entry] = []

    def closure(self, lbs: list[LoadBalancer], raw_tgs: list[dict[str, Any]]) -> Narrowing:
        found = super().closure(lbs, raw_tgs)
        assert self.locked is not None and self.locked.lost is not None
        attached = {tg["TargetGroupArn"]: tg.get("LoadBalancerArns", []) for tg in raw_tgs}
        sending = sending_peers(self.policy.desired_settings().bindings, lbs, attached)
        listed = [_model(tg, []) for tg in raw_tgs if tg["TargetGroupArn"] in found.target_groups]
        chosen = candidates(
            self.locked.lost,
            {a: p for a, p in sending.items() if a in found.target_groups},
            listed,
            self.view,
            self.version.seconds(),
            self.period,
        )
        self.chosen, self.doubts = chosen.read, dict(chosen.doubts)
        self.admitting = len(found.target_groups)
        self.notes.append(
            f"of those, {len(self.chosen)} read fresh: the ones whose targets could use the "
            "ports the revokes take away (by the inventory index), the rest from the index"
        )
        return found

    def targets(self, tg: dict[str, Any]) -> list[tuple[str, int | None]] | None:
        arn = tg["TargetGroupArn"]
        entry = self.view.target_groups.get(arn)
        if arn not in self.chosen and entry is not None:  # the index holds it afresh
            return [(m.target_id, m.port) for m in entry.members if m.present]
        found = super().targets(tg)
        if found is not None:
            kind = tg.get("TargetType", "instance")
            vpc = tg.get("VpcId", "")
            self.fresh_ids.update(target_key(kind, vpc, t) for t, _ in found)
            self.fresh_models[arn] = _model(tg, found)
        return found

    def _read_anyway(self, key: str) -> bool:
        """The candidates' targets are read fresh, whatever the index holds."""
        return key in self.fresh_ids


def read_locked_through_index(
    ec2: Any,
    elbv2: Any,
    policy: Policy,
    view: IndexView,
    locked: Locked,
    *,
    now: float,
    period_seconds: float,
    quotas: Any = None,
) -> LockedIndexRead:
    """The locked groups' rules and the closure of `locked.peers`, its candidates read
    fresh (`locked.lost` set), the rest from `view`; with the doubts and the fresh entries."""
    reader = _LockedIndexReader(ec2, elbv2, policy, quotas, None, locked)
    reader.setup(view, Version.of_read(now), period_seconds)
    inventory = reader.read()
    doubts = [f"{arn}: {why}" for arn, why in sorted(reader.doubts.items())]
    out = list(reader.out)
    for model in inventory.target_groups:  # with the interfaces' groups, as read
        if model.arn not in reader.fresh_models:
            continue
        entry = view.target_groups.get(model.arn)
        if model.arn not in reader.doubts:
            doubts += [f"contradicted: {d}" for d in contradictions(entry, model, view)]
        out.append(target_group_entry(reader.fresh_models[model.arn], reader.version, entry))
    return LockedIndexRead(
        replace(inventory, doubts=tuple(doubts)), out, len(reader.chosen), reader.admitting
    )


@dataclass(frozen=True)
class LockedIndexFetch:
    """`read_locked_through_index` with the deployment's clients and policy bound (wiring.py)."""

    ec2: Any
    elbv2: Any
    policy: Policy
    quotas: Any = None

    def __call__(
        self, view: IndexView, locked: Locked, *, now: float, period_seconds: float
    ) -> LockedIndexRead:
        return read_locked_through_index(
            self.ec2,
            self.elbv2,
            self.policy,
            view,
            locked,
            now=now,
            period_seconds=period_seconds,
            quotas=self.quotas,
        )
