"""Batch logic of the planner: a burst becomes one plan; ignored events never fail the batch.

The plan store and the execution starter are in-memory fakes (tests/fakes.py)."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from fakes import FakePlans, FakeStarter
from sg_reconciler.app.live_plan import LivePlan
from sg_reconciler.app.plan_batch import EVENT_ID_CHARS, execution_name, plan_batch
from sg_reconciler.app.scope_store import stored_scope
from sg_reconciler.app.steps.check_plan import check_plan
from sg_reconciler.core.plan import Plan, Refusal
from sg_reconciler.core.planner import make_plan
from sg_reconciler.core.ports import StartOutcome
from sg_reconciler.core.rules import rule_from_dict
from sg_reconciler.core.scope import Scope
from sg_reconciler.trigger.classify import Ignored, Parsed, Relevant

NODE, LB = "sg-0a1b2c3d4e5f60001", "sg-0a1b2c3d4e5f60002"
DESIRED = rule_from_dict(
    {
        "GroupId": NODE,
        "IpProtocol": "tcp",
        "FromPort": 31000,
        "ToPort": 32500,
        "ReferencedGroupInfo": {"GroupId": LB},
    }
)


def live(result: Plan | Refusal) -> LivePlan:
    return LivePlan(result=result, desired=[DESIRED], current=[], groups=[NODE])


def relevant(n: int) -> list[tuple[str, Parsed]]:
    return [
        (f"m{i}", Relevant(f"e{i}", "RegisterTargets", Scope(group_ids=frozenset({f"sg-{i}"}))))
        for i in range(n)
    ]


class Recorder:
    def __init__(
        self, result: Plan | Refusal, started: bool = True, narrowed: bool = False
    ) -> None:
        self.result = result
        self.narrowed = narrowed  # the plan came from the event scope's read alone
        self.scopes: list[Scope] = []
        self.narrows: list[Scope | None] = []
        self.starter = FakeStarter()
        self.plans = FakePlans()
        if not started:  # the plan's execution is running already
            self.starter.running.add(
                execution_name(result, 0.0) if isinstance(result, Plan) else ""
            )

    def replan(self, scope: Scope, narrow: Scope | None = None) -> LivePlan:
        self.scopes.append(scope)
        self.narrows.append(narrow)
        found = live(self.result)
        return replace(found, narrowed=narrow) if self.narrowed else found

    @property
    def starts(self) -> list[tuple[str, dict[str, Any]]]:
        return self.starter.started

    def start(self, name: str, payload: dict[str, Any]) -> StartOutcome:
        return self.starter(name, payload)


def test_fifty_events_in_one_batch_make_one_plan_and_one_execution() -> None:
    plan = make_plan([], [DESIRED])
    assert isinstance(plan, Plan)
    recorder = Recorder(plan)
    result = plan_batch(relevant(50), recorder.replan, recorder.start, 0.0, recorder.plans)
    assert result.outcome == "started" and result.relevant == 50
    assert len(recorder.scopes) == 1 and len(recorder.scopes[0].group_ids) == 50
    assert len(recorder.starts) == 1
    name, payload = recorder.starts[0]
    assert payload["plan_id"] == name == execution_name(plan, 0.0)
    # The input carries a reference and counts; the groups are in the store under the hash
    assert payload["plan_ref"] == {
        "groups_key": plan.plan_id(),
        "groups": 1,
        "calls": 1,
        "rules_to_add": 1,
        "rules_to_remove": 0,
    }
    assert recorder.plans.groups(plan.plan_id()) == list(plan.groups) and "plan" not in payload
    assert result.rules_to_add == 1 and result.failed_message_ids == []
    # ... and the first step takes it as it is.
    checked = check_plan({"input": payload, "execution": name}, recorder.plans)
    assert checked == {"plan_id": name, "groups_key": plan.plan_id(), "groups": 1}


def test_only_ignored_events_start_nothing() -> None:
    recorder = Recorder(Plan(()))
    records: list[tuple[str, Parsed]] = [
        ("m1", Ignored("e1", "failed call")),
        ("m2", Ignored(None, "malformed")),
    ]
    result = plan_batch(records, recorder.replan, recorder.start, 0.0, recorder.plans)
    assert (result.outcome, result.ignored, recorder.scopes, recorder.starts) == (
        "nothing to do",
        2,
        [],
        [],
    )


def test_an_empty_diff_starts_no_execution() -> None:
    recorder = Recorder(Plan(()))
    assert (
        plan_batch(relevant(3), recorder.replan, recorder.start, 0.0, recorder.plans).outcome
        == "unchanged"
    )
    assert recorder.starts == []


def test_a_refusal_starts_nothing_and_is_not_retried() -> None:
    recorder = Recorder(Refusal("sg-x: no order fits the quota", "sg-x"))
    result = plan_batch(relevant(2), recorder.replan, recorder.start, 0.0, recorder.plans)
    assert result.outcome == "refused" and "quota" in result.reason
    assert recorder.starts == [] and result.failed_message_ids == []


def test_a_duplicate_start_is_success() -> None:
    plan = make_plan([], [DESIRED])
    assert isinstance(plan, Plan)
    recorder = Recorder(plan, started=False)
    result = plan_batch(relevant(1), recorder.replan, recorder.start, 0.0, recorder.plans)
    assert result.outcome == "duplicate" and result.failed_message_ids == []


def test_a_plan_out_of_restarts_says_so_and_is_not_a_failure() -> None:
    # Given a plan whose execution and every restart of it ended in this window
    plan = make_plan([], [DESIRED])
    assert isinstance(plan, Plan)
    recorder = Recorder(plan)
    name = execution_name(plan, 0.0)
    recorder.starter.exhausted.add(name)
    # When its trigger arrives again
    result = plan_batch(relevant(1), recorder.replan, recorder.start, 0.0, recorder.plans)
    # Then nothing starts, the outcome names the window, and SQS does not redeliver
    assert result.outcome == "restart limit" and recorder.starts == []
    assert result.reason.startswith(name) and "next window" in result.reason
    assert result.failed_message_ids == []
    # And a partial plan out of restarts keeps saying which groups it held back
    partial = replace(plan, refused=("sg-held: no quota headroom",))
    recorder = Recorder(partial)
    recorder.starter.exhausted.add(execution_name(partial, 0.0))
    result = plan_batch(relevant(1), recorder.replan, recorder.start, 0.0, recorder.plans)
    assert result.outcome == "restart limit" and result.refused_groups == 1
    assert (
        result.reason.startswith("sg-held: no quota headroom; ") and "next window" in result.reason
    )


def test_a_planning_failure_returns_only_the_relevant_records_to_the_queue() -> None:
    def broken(scope: Scope, narrow: Scope | None = None) -> LivePlan:
        raise RuntimeError("describe throttled")

    records = [*relevant(2), ("m9", Ignored("e9", "other account"))]
    idle = Recorder(Plan(()))
    result = plan_batch(records, broken, idle.start, 0.0, idle.plans)
    assert result.outcome == "failed" and "throttled" in result.reason
    assert result.failed_message_ids == ["m0", "m1"]


def test_execution_names_repeat_within_ten_minutes_only() -> None:
    plan = make_plan([], [DESIRED])
    assert isinstance(plan, Plan)
    assert execution_name(plan, 1_000_000.0) == execution_name(plan, 1_000_000.0 + 100)
    assert execution_name(plan, 1_000_000.0) != execution_name(plan, 1_000_000.0 + 700)
    assert len(execution_name(plan, 0.0)) <= 80


def test_a_plan_from_an_event_scoped_read_keeps_that_scope_for_the_refresh() -> None:
    plan = make_plan([], [DESIRED])
    assert isinstance(plan, Plan)
    event = Scope(target_group_arns=frozenset({"arn:aws:elasticloadbalancing:r:1:targetgroup/w/1"}))
    records: list[tuple[str, Parsed]] = [("m1", Relevant("e1", "RegisterTargets", event))]
    narrow, full = Recorder(plan, narrowed=True), Recorder(plan)

    plan_batch(records, narrow.replan, narrow.start, 0.0, narrow.plans)
    plan_batch(records, full.replan, full.start, 0.0, full.plans)

    assert narrow.narrows == full.narrows == [event]  # both tried narrowly
    assert stored_scope(narrow.plans, plan.plan_id()) == event
    assert stored_scope(full.plans, plan.plan_id()) is None  # its refresh reads in full


def test_a_plan_from_the_full_read_clears_the_scope_an_earlier_narrow_plan_kept() -> None:
    plan = make_plan([], [DESIRED])
    assert isinstance(plan, Plan)
    event = Scope(target_group_arns=frozenset({"arn:aws:elasticloadbalancing:r:1:targetgroup/w/1"}))
    records: list[tuple[str, Parsed]] = [("m1", Relevant("e1", "RegisterTargets", event))]
    narrow, full = Recorder(plan, narrowed=True), Recorder(plan)
    full.plans = narrow.plans  # one plan store: the same steps, so the same key

    plan_batch(records, narrow.replan, narrow.start, 0.0, narrow.plans)
    plan_batch(records, full.replan, full.start, 1000.0, full.plans)

    assert stored_scope(full.plans, plan.plan_id()) is None


def test_events_with_huge_ids_keep_the_execution_input_small() -> None:
    """A broken or forged event's id is cut: the input stays far below Step Functions'
    32 KiB however long the ids are (found by the planner fuzzer)."""
    plan = make_plan([], [DESIRED])
    assert isinstance(plan, Plan)
    recorder = Recorder(plan)
    records: list[tuple[str, Parsed]] = [
        (f"m{i}", Relevant(f"{i}" + "x" * 50_000, "RegisterTargets", Scope.everything()))
        for i in range(50)
    ]
    assert plan_batch(records, recorder.replan, recorder.start, 0.0, recorder.plans).outcome == (
        "started"
    )
    ((_, payload),) = recorder.starts
    assert len(json.dumps(payload)) < 8_000
    assert all(len(i) == EVENT_ID_CHARS for i in payload["trigger"]["event_ids"])


def test_a_scheduled_run_says_so_in_its_trigger_and_an_event_driven_one_does_not() -> None:
    plan = make_plan([], [DESIRED])
    assert isinstance(plan, Plan)
    for name, scheduled in (("Scheduled Event", True), ("RegisterTargets", None)):
        recorder = Recorder(plan)
        records: list[tuple[str, Parsed]] = [("m", Relevant("e", name, Scope.everything()))]
        plan_batch(records, recorder.replan, recorder.start, 0.0, recorder.plans)
        ((_, payload),) = recorder.starts
        assert payload["trigger"].get("scheduled") is scheduled
