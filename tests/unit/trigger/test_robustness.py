"""Malformed, truncated and mutated events never raise out of `parse_record`."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest
from event_samples import (
    ACCOUNT_ID,
    REGION,
    KeyPath,
    event_text,
    key_paths,
    load_event,
    parent_of,
)
from hypothesis import given
from hypothesis import strategies as st
from sg_reconciler.core.scope import Scope
from sg_reconciler.trigger.classify import (
    Ignored,
    Parsed,
    Relevant,
    parse_record,
    parse_sqs_record,
)
from sg_reconciler.trigger.cloudtrail import EVENT_NAMES

OWN = frozenset({"arn:aws:iam::123456789012:role/sg-reconciler-ApplyStepsRole-0A1B2C3D4E5F"})
SAMPLES = [f"eventbridge/{n}" for n in EVENT_NAMES] + ["scheduled"]


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False)
    | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


def parse(body: str | dict[str, Any]) -> Parsed:
    result = parse_record(body, account_id=ACCOUNT_ID, region=REGION, own_role_arns=OWN)
    assert isinstance(result, Relevant | Ignored)
    if isinstance(result, Relevant):
        assert isinstance(result.scope, Scope) and result.scope
    else:
        assert result.reason
    return result


@given(st.sampled_from(SAMPLES), st.data())
def test_dropping_any_key_never_raises(name: str, data: st.DataObject) -> None:
    event = load_event(name)
    path = data.draw(st.sampled_from(key_paths(event)))

    parent = parent_of(event, path)
    del parent[path[-1]]

    parse(event)
    parse(json.dumps(event))


@given(st.sampled_from(SAMPLES), st.data(), json_values)
def test_replacing_any_value_never_raises(name: str, data: st.DataObject, value: Any) -> None:
    event = load_event(name)
    path = data.draw(st.sampled_from(key_paths(event)))

    parent_of(event, path)[path[-1]] = value

    parse(event)


@given(st.sampled_from(SAMPLES), st.data())
def test_truncated_json_is_ignored(name: str, data: st.DataObject) -> None:
    text = event_text(name)
    cut = data.draw(st.integers(0, len(text.rstrip()) - 1))

    result = parse(text[:cut])

    assert isinstance(result, Ignored) and result.event_id is None


@given(st.sampled_from([f"sqs/{n}" for n in EVENT_NAMES]), st.data())
def test_truncated_sqs_body_is_ignored(name: str, data: st.DataObject) -> None:
    record = load_event(name)["Records"][0]
    record["body"] = record["body"][: data.draw(st.integers(0, len(record["body"]) - 1))]

    assert isinstance(sqs(record)[1], Ignored)


@given(json_values)
def test_arbitrary_json_never_raises(value: Any) -> None:
    parse(json.dumps(value))


@given(st.text(max_size=200))
def test_arbitrary_text_never_raises(text: str) -> None:
    parse(text)


@given(st.sampled_from(SAMPLES), st.data())
def test_dropping_an_optional_response_keeps_the_event_relevant_and_no_narrower(
    name: str, data: st.DataObject
) -> None:
    # CloudTrail omits responseElements for large or failed responses; a successful call
    # must still trigger a re-plan (wider, never narrower than a guess).
    whole = parse(load_event(name))
    event = load_event(name)
    detail = event["detail"]
    if data.draw(st.sampled_from(["null", "drop"])) == "null":
        detail["responseElements"] = None
    else:
        detail.pop("responseElements", None)

    without = parse(event)
    assert isinstance(whole, Relevant) and isinstance(without, Relevant)
    # Only ModifyTargetGroup's scope loses something: the load balancers its response names,
    # the target group's own, which a read of the target group reaches anyway (the closure
    # of core/narrow.py follows the load balancers' peers of every target group it seeds)
    expected = whole.scope
    if name == "eventbridge/ModifyTargetGroup":
        expected = replace(expected, load_balancer_arns=frozenset())
    assert without.scope.full or expected | without.scope == without.scope


ISSUER_ARN: KeyPath = ("detail", "userIdentity", "sessionContext", "sessionIssuer", "arn")


@given(st.sampled_from([f"eventbridge/{n}" for n in EVENT_NAMES]), st.data(), json_values)
def test_own_calls_stay_ignored_whatever_else_changes(
    name: str, data: st.DataObject, value: Any
) -> None:
    # Invariant 8: an event whose session the reconciler's role issued never starts work.
    event = load_event(name)
    event["detail"]["userIdentity"]["sessionContext"]["sessionIssuer"]["arn"] = next(iter(OWN))
    untouched = [
        p
        for p in key_paths(event)
        if p != ISSUER_ARN[: len(p)] and p[: len(ISSUER_ARN)] != ISSUER_ARN
    ]
    path = data.draw(st.sampled_from(untouched))

    parent_of(event, path)[path[-1]] = value

    assert isinstance(parse(event), Ignored)


def sqs(record: Any, index: int = 0) -> tuple[str, Parsed]:
    return parse_sqs_record(record, index, account_id=ACCOUNT_ID, region=REGION, own_role_arns=OWN)


@given(st.sampled_from([f"sqs/{n}" for n in EVENT_NAMES]))
def test_an_sqs_record_is_read_with_its_envelope_model_and_its_body_classified(
    name: str,
) -> None:
    record = load_event(name)["Records"][0]

    assert sqs(record) == (record["messageId"], parse(record["body"]))
    assert isinstance(sqs(record)[1], Relevant)


@given(st.sampled_from([f"sqs/{n}" for n in EVENT_NAMES]), st.data(), json_values)
def test_a_damaged_sqs_record_is_ignored_under_its_message_id_or_position(
    name: str, data: st.DataObject, value: Any
) -> None:
    record = load_event(name)["Records"][0]
    key = data.draw(st.sampled_from(sorted(record)))
    if data.draw(st.booleans()):
        del record[key]
    else:
        record[key] = value

    message_id, parsed = sqs(record, 7)

    assert isinstance(message_id, str)  # a batch item failure's id, whatever the record held
    if isinstance(parsed, Ignored) and parsed.reason.startswith("not an SQS record"):
        mid = record.get("messageId")
        assert message_id == (mid if isinstance(mid, str) else "7")
    else:  # what the model tolerates (an optional key, a value it accepts)
        assert message_id == record["messageId"]


@pytest.mark.parametrize(
    "message_id",
    [7, 7.5, True, None, ["m-1"], {"id": "m-1"}],
    ids=["int", "float", "bool", "null", "list", "object"],
)
def test_a_message_id_that_is_no_text_is_no_sqs_record(message_id: Any) -> None:
    # Given a record whose body is a good event but whose messageId is not a string
    record = load_event("sqs/RegisterTargets")["Records"][0]
    record["messageId"] = message_id

    returned, parsed = sqs(record, 4)

    # Then it is ignored, under its position: a batch item failure's id is text
    assert returned == "4"
    assert parsed == Ignored(None, "not an SQS record: messageId: Input should be a valid string")


@given(json_values)
def test_a_record_that_is_no_object_is_ignored_under_its_position(value: Any) -> None:
    message_id, parsed = sqs([value], 3)

    assert message_id == "3"
    assert isinstance(parsed, Ignored) and parsed.reason.startswith("not an SQS record")


def test_an_sqs_record_whose_body_is_no_text_is_ignored() -> None:
    record = load_event("sqs/RegisterTargets")["Records"][0]
    record["body"] = load_event("eventbridge/RegisterTargets")

    message_id, parsed = sqs(record)

    assert message_id == record["messageId"]
    assert parsed == Ignored(None, "not an SQS record: body: Input should be a valid string")


def test_a_record_from_another_event_source_is_no_sqs_message() -> None:
    record = load_event("sqs/RegisterTargets")["Records"][0]
    record["eventSource"] = "aws:kinesis"

    message_id, parsed = sqs(record)

    assert message_id == record["messageId"]
    assert isinstance(parsed, Ignored) and parsed.reason.startswith(
        "not an SQS record: eventSource: Input should be 'aws:sqs'"
    )
