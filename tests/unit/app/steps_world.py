"""A world of in-memory fakes for the steps, and a driver that runs them in the ASL's order."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fakes import FakeLocks, FakePlans, FakeRules, planner
from sg_reconciler.app.live_plan import Replan
from sg_reconciler.app.steps import (
    acquire_locks,
    apply_steps,
    check_plan,
    refresh_plan,
    release_locks,
    roll_back,
    verify_rules,
)
from sg_reconciler.core.pacing import Pacing, pacing_for
from sg_reconciler.core.plan import Plan
from sg_reconciler.core.rules import DEFAULT_OWNER, Rule
from sg_reconciler.core.scope import Scope

LEASE = 900
SETTLE = 5


def caught(error: str, message: str) -> dict[str, str]:
    """A Catch's error object, as Step Functions passes it to the next state."""
    return {"Error": error, "Cause": json.dumps({"errorType": error, "errorMessage": message})}


@dataclass
class World:
    rules: FakeRules = field(default_factory=FakeRules)
    locks: FakeLocks = field(default_factory=FakeLocks)
    plans: FakePlans = field(default_factory=FakePlans)
    desired: list[Rule] = field(default_factory=list)
    owner: str = DEFAULT_OWNER
    execution: str = "exec-1"
    adopt: Callable[[Rule], bool] | None = None  # the policy's adopt_descriptions
    pacing: Pacing = field(default_factory=lambda: pacing_for(1.0))  # one Map item at a time

    # The planner and the steps, with this world's ports ---------------------------------

    def replan(self) -> Replan:
        return planner(self.rules, self.desired, self.owner, adopt=self.adopt)

    def plan(self) -> Plan:
        live = self.replan()(Scope.everything())
        assert isinstance(live.result, Plan), live.result
        return live.result

    def check(self, plan: Plan | None = None) -> dict[str, Any]:
        doc = (plan or self.plan()).to_dict()
        return check_plan.check_plan(
            {"input": {"plan": doc}, "execution": self.execution}, self.plans
        )

    def groups(self, checked: dict[str, Any], **more: Any) -> dict[str, Any]:
        return {"groups_key": checked["groups_key"], "groups": checked["groups"], **more}

    def lock(self, checked: dict[str, Any]) -> dict[str, Any]:
        event = self.groups(checked, holder=self.execution)
        return acquire_locks.acquire_locks(event, self.plans, self.locks, LEASE)

    def release(self, checked: dict[str, Any]) -> dict[str, Any]:
        return release_locks.release_locks(
            self.groups(checked, holder=self.execution), self.plans, self.locks
        )

    def refresh(self, checked: dict[str, Any]) -> dict[str, Any]:
        event = self.groups(checked, plan_id=checked["plan_id"])
        return refresh_plan.refresh_plan(
            event, self.plans, self.replan(), SETTLE, self.owner, self.pacing
        )

    def replan_revokes(self, checked: dict[str, Any]) -> dict[str, Any]:
        event = self.groups(checked, plan_id=checked["plan_id"], mode="revokes")
        return refresh_plan.replan_revokes(event, self.plans, self.replan(), self.pacing)

    def apply(
        self, phase: str, batch: int, checked: dict[str, Any], batches: int = 1
    ) -> dict[str, Any]:
        event = {
            "phase": phase,
            "batch": batch,
            "batches": batches,
            "plan_id": checked["plan_id"],
            "holder": self.execution,
            "owner": self.owner,
        }
        return apply_steps.apply_steps(event, self.plans, self.rules, self.locks, LEASE)

    def verify(
        self,
        mode: str,
        checked: dict[str, Any],
        results: list[dict[str, Any]] | None = None,
        error: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        event: dict[str, Any] = {"mode": mode, "plan_id": checked["plan_id"]}
        if results is not None:
            event["results"] = results
        if error is not None:
            event["error"] = error
        if mode == "leftovers":  # list the groups, check each batch, then the report
            plan_id = checked["plan_id"]
            listed = {"mode": "leftover_batches", "plan_id": plan_id}
            batches = verify_rules.verify(listed, self.plans, self.rules)["batches"]
            for batch in batches:
                item = {"mode": "leftover_batch", "batch": batch, "plan_id": plan_id}
                verify_rules.verify(item, self.plans, self.rules)
            event["batches"] = len(batches)
        return verify_rules.verify(event, self.plans, self.rules)

    def roll_back(self, checked: dict[str, Any], error: dict[str, Any]) -> dict[str, Any]:
        """The rollback Map (one item per authorize batch; a failed item is noted, as its
        Catch does), then 'Sum up the rollback'."""
        batches = self.authorize_batches(checked)
        for batch in range(batches):
            try:
                self.roll_back_batch(checked, batch, batches)
            except Exception:  # the item's Catch: its record in the plan store says why
                continue
        event = {
            "mode": "report",
            "plan_id": checked["plan_id"],
            "batches": batches,
            "error": error,
        }
        return roll_back.roll_back(event, self.plans, self.rules, self.locks, LEASE)

    def authorize_batches(self, checked: dict[str, Any]) -> int:
        return len(self.plans.parts.get((checked["plan_id"], "authorize"), []))

    def roll_back_batch(
        self, checked: dict[str, Any], batch: int, batches: int = 1
    ) -> dict[str, Any]:
        event = {
            "batch": batch,
            "batches": batches,
            "plan_id": checked["plan_id"],
            "owner": self.owner,
            "holder": self.execution,
        }
        return roll_back.roll_back(event, self.plans, self.rules, self.locks, LEASE)

    # The state machine's happy path ------------------------------------------------------

    def run(self, plan: Plan | None = None) -> dict[str, Any]:
        """Check, lock, refresh, authorize, verify, ordered, re-plan, revoke, verify, release."""
        checked = self.check(plan)
        self.lock(checked)
        work = self.refresh(checked)
        outcome: dict[str, Any] = {"status": "unchanged", "summary": work["summary"]}
        if work["changed"]:
            authorize = work["batches"]["authorize"]
            for batch in authorize:
                self.apply("authorize", batch, checked, len(authorize))
            self.verify("visible", checked, [{"failed": False} for _ in authorize])
            for ref in work["batches"]["ordered"]:
                self.apply("ordered", ref["batch"], checked)
            revokes = self.replan_revokes(checked)
            if revokes["deferred"]:
                outcome = {"status": "revokes_deferred", "reason": revokes["deferred"]}
            else:
                for batch in revokes["revoke"]:
                    self.apply("revoke", batch, checked, len(revokes["revoke"]))
                self.verify("final", checked, [{"failed": False} for _ in revokes["revoke"]])
                outcome = {"status": "applied", "summary": work["summary"]}
        self.release(checked)
        return outcome
