"""Fuzzing the deployed planner Lambda: garbage in, no crash, no write, no unwarranted start.

Hypothesis builds SQS batches (and bare events) from the samples in `events/`, then breaks
them: keys dropped, values replaced by other JSON types, bodies truncated or replaced by
random text, huge strings, deep nesting, other accounts, regions and callers, records that
are not objects. Each batch goes through the Lambda API into the real handler on the local
runtime (template.yaml, moto world of `live.world`). Properties:

- the handler never raises (an unhandled error would fail the whole SQS batch);
- it never makes an EC2 security-group write (the planner only reads; the state machine
  writes);
- it calls StartExecution at most once, and only when a record is a valid, relevant event
  for this account and region from someone other than the reconciler's own roles;
- only such records are reported back for redelivery.

StartExecution is made to fail (an injected `ExecutionLimitExceeded`), so no execution ever
runs and the world stays as built: one runtime and one world serve every example.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from event_samples import ACCOUNT_ID, REGION, key_paths, load_event, parent_of
from hypothesis import HealthCheck, given, settings
from hypothesis import event as label
from hypothesis import strategies as st
from integration.live_plan.world import build_world
from sg_reconciler.trigger.classify import Relevant, parse_record
from sg_reconciler.trigger.cloudtrail import EVENT_NAMES
from sg_reconciler_tools.local import (
    Fault,
    FaultInjector,
    FunctionFailed,
    LocalRuntime,
    interception,
)

TEMPLATE_PATH = Path(__file__).resolve().parents[3] / "template.yaml"
SAMPLES = [f"eventbridge/{name}" for name in EVENT_NAMES] + ["scheduled"]
START_FAULT = Fault(
    "stepfunctions", "StartExecution", "ExecutionLimitExceeded", count=1_000_000_000
)
# The profile's example count (60 with HYPOTHESIS_PROFILE=ci): irrelevant batches take a few
# milliseconds, relevant ones plan against the whole moto world (a fraction of a second).
FUZZ_SETTINGS = settings(
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@dataclass
class Harness:
    runtime: LocalRuntime
    injector: FaultInjector
    own_roles: frozenset[str]
    writes: list[str] = field(default_factory=list)

    def starts(self) -> int:
        return self.injector.calls("stepfunctions", "StartExecution")


@pytest.fixture(scope="module")
def harness() -> Iterator[Harness]:
    with LocalRuntime(TEMPLATE_PATH) as runtime:
        clients = runtime.clients
        clients.ssm.put_parameter(
            Name=runtime.ref("PolicyParameter"),
            Value=runtime.ref("PolicyDocument"),
            Type="String",
            Overwrite=True,
        )
        build_world(clients.ec2, clients.elbv2)
        own = frozenset(
            runtime.arn(f"{function}Role")
            for function in ("ApplyStepsFunction", "RollBackFunction")
        )
        with FaultInjector(START_FAULT) as injector:
            harness = Harness(runtime, injector, own)

            def listener(operation: str, error: BaseException | None) -> None:
                harness.writes.append(operation)

            with interception.on_ec2_write(listener):
                yield harness


# ---------------------------------------------------------------- strategies

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False)
    | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=10,
)


def nested(depth: int) -> Any:
    value: Any = "bottom"
    for level in range(depth):
        value = [value] if level % 2 else {"x": value}
    return value


@st.composite
def events(draw: st.DrawFn, harness: Harness) -> dict[str, Any]:
    """A sample EventBridge event with up to three mutations."""
    event: dict[str, Any] = load_event(draw(st.sampled_from(SAMPLES)))
    for _ in range(draw(st.integers(0, 3))):
        kind = draw(
            st.sampled_from(
                ["drop", "replace", "huge", "nest", "account", "region", "caller", "failed"]
            )
        )
        targets = key_paths(event)
        if kind in ("drop", "replace", "huge", "nest") and targets:
            path = draw(st.sampled_from(targets))
            parent = parent_of(event, path)
            if kind == "drop":
                del parent[path[-1]]
            elif kind == "replace":
                parent[path[-1]] = draw(json_values)
            elif kind == "huge":
                parent[path[-1]] = draw(st.sampled_from("x\u00e9\u4e2d\U0001f600")) * 100_000
            else:
                parent[path[-1]] = nested(draw(st.integers(20, 200)))
        elif kind == "account":
            event["account"] = draw(st.sampled_from(["210987654321", "", "123456789012 ", 123]))
        elif kind == "region":
            event["region"] = draw(st.sampled_from(["us-east-1", "EU-WEST-1", "", None]))
        elif kind == "caller" and isinstance(event.get("detail"), dict):
            identity = event["detail"].setdefault("userIdentity", {})
            if isinstance(identity, dict):
                role = draw(st.sampled_from(sorted(harness.own_roles)))
                identity["sessionContext"] = {"sessionIssuer": {"type": "Role", "arn": role}}
        elif kind == "failed" and isinstance(event.get("detail"), dict):
            event["detail"]["errorCode"] = draw(
                st.sampled_from(["Client.UnauthorizedOperation", "RequestLimitExceeded", ""])
            )
    return event


@st.composite
def bodies(draw: st.DrawFn, harness: Harness) -> Any:
    """What an SQS record's body may hold: JSON text, broken text, or not text at all."""
    event = draw(events(harness))
    text = json.dumps(event)
    how = draw(
        st.sampled_from(["json", "json", "truncated", "text", "bytes", "deep", "object", "value"])
    )
    if how == "json":
        return text
    if how == "truncated":
        return text[: draw(st.integers(0, len(text) - 1))]
    if how == "text":
        return draw(st.text(max_size=300))
    if how == "bytes":
        return draw(st.binary(max_size=300)).decode("latin-1")
    if how == "deep":
        return "[" * draw(st.integers(1_000, 200_000))
    if how == "object":
        return event  # a body that is already an object, not a JSON string
    return draw(json_values)


@st.composite
def records(draw: st.DrawFn, harness: Harness, index: int) -> Any:
    record: dict[str, Any] = {
        **load_event("sqs/RegisterTargets")["Records"][0],
        "messageId": f"message-{index}",
        "body": draw(bodies(harness)),
    }
    damage = draw(st.sampled_from(["none", "none", "none", "drop", "replace", "garbage"]))
    if damage == "drop":
        del record[draw(st.sampled_from(sorted(record)))]
    elif damage == "replace":
        record[draw(st.sampled_from(sorted(record)))] = draw(json_values)
    elif damage == "garbage":
        return draw(json_values)
    return record


@st.composite
def lambda_events(draw: st.DrawFn, harness: Harness) -> Any:
    """What Lambda may hand the planner: SQS batches mostly, a bare event, or nonsense."""
    shape = draw(st.sampled_from(["batch", "batch", "batch", "bare", "records", "garbage"]))
    if shape == "batch":
        count = draw(st.integers(1, 5))
        return {"Records": [draw(records(harness, i)) for i in range(count)]}
    if shape == "bare":
        return draw(events(harness))
    if shape == "records":
        return {"Records": draw(json_values)}
    return draw(json_values)


# ---------------------------------------------------------------- the oracle


def sqs_body(record: Any) -> str | None:
    """The record's body when it is an SQS message (an object from the SQS event source with
    a text message id and body), or None."""
    if not isinstance(record, dict) or record.get("eventSource") != "aws:sqs":
        return None
    if not isinstance(record.get("messageId"), str) or not isinstance(record.get("body"), str):
        return None
    return record["body"]


def relevant_message_ids(event: Any, harness: Harness) -> set[str]:
    """The records that deserve a plan: SQS messages whose body `parse_record` finds
    relevant (a record that is not an SQS message is ignored, whatever its body)."""

    def relevant(body: Any) -> bool:
        return isinstance(
            parse_record(
                body, account_id=ACCOUNT_ID, region=REGION, own_role_arns=harness.own_roles
            ),
            Relevant,
        )

    if isinstance(event, dict) and isinstance(event.get("Records"), list):
        return {
            record["messageId"]
            for record in event["Records"]
            if (body := sqs_body(record)) is not None and relevant(body)
        }
    if isinstance(event, dict) and relevant(event):
        return {str(event.get("id", "event"))}
    return set()


def check(harness: Harness, event: Any) -> tuple[int, set[str]]:
    """Invoke the planner with `event` and assert the properties; returns (starts, failed ids)."""
    harness.writes.clear()
    before = harness.starts()

    relevant = relevant_message_ids(event, harness)
    try:
        answer = harness.runtime.invoke("PlannerFunction", event)  # FunctionFailed on a crash
    except FunctionFailed as failure:
        # A valid trigger outside SQS (the schedule) has no queue to redeliver it: when its
        # start fails, the invocation fails, so Lambda retries it. Nothing else may raise.
        is_batch = isinstance(event, dict) and isinstance(event.get("Records"), list)
        assert not is_batch and relevant and failure.error_type == "PlanningFailed", failure
        answer = {"batchItemFailures": [{"itemIdentifier": i} for i in sorted(relevant)]}

    starts = harness.starts() - before
    assert harness.writes == []
    assert isinstance(answer, dict) and set(answer) == {"batchItemFailures"}
    failed = {item["itemIdentifier"] for item in answer["batchItemFailures"]}
    assert starts <= 1
    if not relevant:
        assert (starts, failed) == (0, set())
    # The only failure here is the injected StartExecution error, and it fails exactly the
    # relevant records (planning itself must not fail on any event).
    assert failed == (relevant if starts else set())
    return starts, failed


# ---------------------------------------------------------------- tests


def test_the_harness_sees_a_start_and_its_failure(harness: Harness) -> None:
    # A valid trigger: the unreconciled world needs changes, so the planner tries to start.
    scheduled = load_event("scheduled")
    assert check(harness, scheduled) == (1, {scheduled["id"]})
    batch = load_event("sqs/burst")
    starts, failed = check(harness, batch)
    assert starts == 1 and failed == {r["messageId"] for r in batch["Records"]}


@FUZZ_SETTINGS
@given(data=st.data())
def test_mutated_batches_never_crash_write_or_start_unwarranted(
    harness: Harness, data: st.DataObject
) -> None:
    starts, _ = check(harness, data.draw(lambda_events(harness)))
    label("start attempted" if starts else "nothing started")
