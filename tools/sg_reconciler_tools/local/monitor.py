"""Watch security groups between calls and check the safety invariants at every state.

After every EC2 write that reaches moto (hook `interception.on_ec2_write`), the monitor
reads the groups' ingress rules straight from moto's backend and checks, semantically:
1 no loss (OLD ∩ NEW stays allowed), 2 no over-exposure (nothing outside OLD ∪ NEW), and
3 ownership (every rule that disappeared or changed since the previous state carried the
owner tag, except an adoption: tags added to a rule, nothing else). OLD and NEW come from `sg_reconciler.core.safety.group_bounds`, as in the
planner's own checker, so the monitor judges the real calls by the planner's rules.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from sg_reconciler.core.rules import DEFAULT_OWNER, Rule, ingress_rules
from sg_reconciler.core.safety import GroupBounds, group_bounds
from sg_reconciler.core.traffic import Traffic

from sg_reconciler_tools.local import interception, moto_state, patching


@dataclass(frozen=True)
class Snapshot:
    """The groups' ingress rules right after one write."""

    index: int  # 0 is the state when monitoring started
    operation: str
    # The error moto raised for the write (e.g. a duplicate in a multi-rule authorize). An
    # injected "after" fault is raised outside the monitor: see `FaultInjector.fired`.
    error: str | None
    rules: tuple[Rule, ...]

    def of_group(self, group_id: str) -> list[Rule]:
        return [rule for rule in self.rules if rule.group_id == group_id]


@dataclass(frozen=True)
class MonitorViolation:
    snapshot: int
    operation: str
    invariant: str  # "1 no loss", "2 no over-exposure", "3 ownership"
    group_id: str
    detail: str
    traffic: Traffic | None = field(default=None, compare=False)  # what was lost or exposed

    def __str__(self) -> str:
        return (
            f"after {self.operation} (state {self.snapshot}): "
            f"{self.invariant} in {self.group_id}: {self.detail}"
        )


class InvariantMonitor:
    """Context manager recording every state of some groups and each invariant broken.

    `new_rules` are the desired managed rules, as the planner takes them: NEW is the
    unmanaged part of OLD plus `new_rules`. `old_rules` defaults to the groups' rules
    when monitoring starts.
    """

    def __init__(
        self,
        ec2: Any,  # a boto3 EC2 client on the mock: the monitor reads its region's backend
        group_ids: Iterable[str],
        old_rules: Iterable[Rule] | None = None,
        new_rules: Iterable[Rule] = (),
        *,
        owner: str = DEFAULT_OWNER,
    ) -> None:
        self._backend = moto_state.ec2_backend(ec2.meta.region_name)
        self.group_ids = tuple(sorted(set(group_ids)))
        self.owner = owner
        self._lock = threading.Lock()
        self._patch: patching.Patch | None = None
        self._old = list(old_rules) if old_rules is not None else self._read()
        self.bounds = self._bounds(new_rules)
        self._baseline = Snapshot(0, "start", None, tuple(self._read()))
        self._snapshots: list[Snapshot] = []
        self._violations: list[MonitorViolation] = []
        self._violations += self._check(self._baseline, None, self.bounds)
        self._closed = False  # monitoring ended: a late hook call records nothing
        self._unseen: list[MonitorViolation] = []

    def __enter__(self) -> InvariantMonitor:
        self._patch = interception.on_ec2_write(self._after_write)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._patch is not None:
            self._patch.undo()
            self._patch = None
            with self._lock:
                self._closed = True
            unseen = self._unobserved()
            with self._lock:
                self._unseen = unseen
                self._violations += unseen

    @property
    def snapshots(self) -> list[Snapshot]:
        """States observed after writes (the baseline is not counted)."""
        with self._lock:
            return list(self._snapshots)

    @property
    def violations(self) -> list[MonitorViolation]:
        with self._lock:
            return list(self._violations)

    @property
    def last(self) -> Snapshot:
        with self._lock:
            return self._snapshots[-1] if self._snapshots else self._baseline

    def summary(self) -> str:
        with self._lock:
            return f"{len(self._snapshots)} snapshots, {len(self._violations)} violations"

    def assert_clean(self) -> None:
        """Raise AssertionError listing every violation, if there is any."""
        found = self.violations
        if found:
            lines = "\n".join(f"  {violation}" for violation in found)
            raise AssertionError(f"{self.summary()}:\n{lines}")

    def violations_against(self, new_rules: Iterable[Rule]) -> list[MonitorViolation]:
        """Every state seen so far judged again with other desired rules as NEW: for a run
        whose desired state is known only after it (what its planner stored)."""
        bounds = self._bounds(new_rules)
        states = [self._baseline, *self.snapshots]
        found = self._check(states[0], None, bounds)
        for previous, snapshot in itertools.pairwise(states):
            found += self._check(snapshot, previous, bounds)
        with self._lock:
            return found + self._unseen

    def _bounds(self, new_rules: Iterable[Rule]) -> dict[str, GroupBounds]:
        bounds = group_bounds(self._old, list(new_rules), self.owner)
        for group_id in self.group_ids:
            bounds.setdefault(group_id, GroupBounds(frozenset(), frozenset()))
        return bounds

    def check(self, operation: str = "check") -> Snapshot:
        """Take a snapshot now (for writes the hook cannot see, e.g. straight to the backend)."""
        return self._record(operation, None)

    def _after_write(self, operation: str, error: BaseException | None) -> None:
        with self._lock:
            if self._closed:
                return
        code = getattr(error, "code", None) or (type(error).__name__ if error else None)
        self._record(operation, None if error is None else str(code))

    def _record(self, operation: str, error: str | None) -> Snapshot:
        with self._lock:
            previous = self._snapshots[-1] if self._snapshots else self._baseline
            snapshot = Snapshot(len(self._snapshots) + 1, operation, error, tuple(self._read()))
            self._snapshots.append(snapshot)
            self._violations += self._check(snapshot, previous, self.bounds)
            return snapshot

    def _unobserved(self) -> list[MonitorViolation]:
        """The monitor's check of itself: a group whose rules differ from the last state it
        saw was changed by a write its hook missed, and a clean record would prove nothing."""
        now, last = self._read(), self.last
        changed = sorted(
            {r.group_id for r in _changed(last.rules, now) + _changed(now, last.rules)}
        )
        return [
            MonitorViolation(
                last.index,
                "the end of monitoring",
                "0 every write observed",
                group_id,
                "its rules changed after the last state the monitor saw (a write its hook "
                "missed, or one still running when monitoring ended)",
            )
            for group_id in changed
        ]

    def _read(self) -> list[Rule]:
        docs = moto_state.security_group_rule_docs(self._backend, self.group_ids)
        return ingress_rules(docs, "moto")

    def _check(
        self, snapshot: Snapshot, previous: Snapshot | None, bounds: dict[str, GroupBounds]
    ) -> list[MonitorViolation]:
        found: list[MonitorViolation] = []

        def violate(invariant: str, group_id: str, detail: str, traffic: Traffic | None) -> None:
            found.append(
                MonitorViolation(
                    snapshot.index, snapshot.operation, invariant, group_id, detail, traffic
                )
            )

        for group_id, bound in sorted(bounds.items()):
            keys = frozenset(rule.key for rule in snapshot.of_group(group_id))
            lost = bound.loses_traffic(keys)
            if lost:
                violate("1 no loss", group_id, f"denies {lost.describe()}", lost)
            exposed = bound.over_exposes(keys)
            if exposed:
                violate("2 no over-exposure", group_id, f"allows {exposed.describe()}", exposed)
        if previous is not None:
            now = {rule.rule_id: rule for rule in snapshot.rules}
            for rule in _changed(previous.rules, snapshot.rules):
                if not rule.owned_by(self.owner) and not _adopted(
                    rule, now.get(rule.rule_id), self.owner
                ):
                    violate("3 ownership", rule.group_id, f"changed unmanaged rule {rule}", None)
        return found


def _changed(before: Sequence[Rule], after: Sequence[Rule]) -> list[Rule]:
    """Rules of `before` that are gone from `after` or differ there (ports, peer, text, tags)."""
    now = {rule.rule_id: rule for rule in after}
    return [rule for rule in before if now.get(rule.rule_id) != rule]


def _adopted(before: Rule, after: Rule | None, owner: str) -> bool:
    """Adoption (invariant 3's one exception): only tags were added, the owner's among them;
    what the rule admits and says did not change."""
    return (
        after is not None
        and after.key == before.key
        and after.description == before.description
        and set(before.tags) < set(after.tags)
        and after.owned_by(owner)
    )
