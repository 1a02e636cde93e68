"""The error contract: AWS error codes to the typed errors the ASL's Retry and Catch match
by name (`from_aws_code`, exact codes, never message text), and the one-line message of a
pydantic ValidationError (`validation_message`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError
from pydantic import BaseModel, ConfigDict, ValidationError, field_validator
from sg_reconciler import errors
from sg_reconciler.adapters.aws import typed_aws_errors
from sg_reconciler.errors import (
    DENIED_CODES,
    GROUP_GONE_CODES,
    QUOTA_CODES,
    THROTTLE_CODES,
    TRANSIENT_CODES,
    AccessDenied,
    AwsCallFailed,
    GroupNotFound,
    QuotaExceeded,
    ReconcilerError,
    Throttled,
    TransientAwsError,
    from_aws_code,
    validation_message,
)

ASL = Path(__file__).resolve().parents[3] / "statemachine" / "apply_plan.asl.json"
FAMILIES: dict[type[ReconcilerError], frozenset[str]] = {
    Throttled: THROTTLE_CODES,
    TransientAwsError: TRANSIENT_CODES,
    AccessDenied: DENIED_CODES,
    QuotaExceeded: QUOTA_CODES,
    GroupNotFound: GROUP_GONE_CODES,
}


@pytest.mark.parametrize(
    ("kind", "code"),
    [(kind, code) for kind, codes in FAMILIES.items() for code in sorted(codes)],
    ids=lambda v: v if isinstance(v, str) else v.__name__,
)
def test_each_known_code_is_its_familys_typed_error(kind: type[ReconcilerError], code: str) -> None:
    error = from_aws_code(code, "what AWS said", 400)

    assert type(error) is kind
    assert (str(error), error.code) == (f"{code}: what AWS said", code)


def test_the_families_do_not_overlap() -> None:
    codes = [code for family in FAMILIES.values() for code in family]
    assert len(codes) == len(set(codes))


@pytest.mark.parametrize(
    ("code", "message", "status", "kind"),
    [
        ("InvalidPermission.Duplicate", "exists", 400, AwsCallFailed),  # the adapter's code
        ("InvalidParameterValue", "bad", 400, AwsCallFailed),
        ("SomethingNew", "?", None, AwsCallFailed),
        ("SomethingNew", "?", 503, TransientAwsError),  # any 5xx is a server error
        ("AccessDenied", "no", 500, AccessDenied),  # the code first, then the status
        ("Throttling", "slow", 503, Throttled),
        ("requestlimitexceeded", "slow", 400, AwsCallFailed),  # exact codes only
        ("ValidationError", "Rate exceeded: Throttling", 400, AwsCallFailed),  # not the text
    ],
)
def test_other_codes_are_aws_call_failed_unless_the_server_failed(
    code: str, message: str, status: int | None, kind: type[ReconcilerError]
) -> None:
    error = from_aws_code(code, message, status)

    assert type(error) is kind and error.code == code


def client_error(code: str, status: int) -> ClientError:
    response: Any = {
        "Error": {"Code": code, "Message": "said AWS"},
        "ResponseMetadata": {"HTTPStatusCode": status},
    }
    return ClientError(response, "AuthorizeSecurityGroupIngress")


@pytest.mark.parametrize(
    ("raised", "kind"),
    [
        (client_error("RequestLimitExceeded", 503), Throttled),
        (client_error("InvalidGroup.NotFound", 400), GroupNotFound),
        (client_error("Whatever", 502), TransientAwsError),
        (EndpointConnectionError(endpoint_url="https://ec2"), TransientAwsError),
    ],
)
def test_botocore_errors_leave_the_adapters_typed(
    raised: Exception, kind: type[ReconcilerError]
) -> None:
    with pytest.raises(kind), typed_aws_errors():
        raise raised


def test_every_error_the_asl_matches_by_name_is_a_typed_error() -> None:
    names: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            names.update(node.get("ErrorEquals", []))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(json.loads(ASL.read_text()))
    ours = {n for n in names if not n.startswith(("States.", "Lambda."))}
    typed = {
        name
        for name, value in vars(errors).items()
        if isinstance(value, type) and issubclass(value, ReconcilerError)
    }
    assert ours and ours <= typed, ours - typed
    assert {"Throttled", "TransientAwsError", "NotYetVisible", "LockBusy", "InvalidPlan"} <= ours


# ---------------------------------------------------------------- validation_message


class Doc(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    count: int
    ports: list[int] = []

    @field_validator("name")
    @classmethod
    def no_spaces(cls, value: str) -> str:
        if " " in value:
            raise ValueError("no spaces,\nplease")
        return value


def message(doc: object, **options: Any) -> str:
    with pytest.raises(ValidationError) as caught:
        Doc.model_validate(doc)
    return validation_message(caught.value, **options)


def test_every_error_is_named_by_where_it_is_in_one_line() -> None:
    text = message({"name": "a b", "ports": [1, "x"], "colour": "red"})

    assert text == (
        "name: no spaces, please; count: Field required; "
        "ports.1: Input should be a valid integer, unable to parse string as an integer; "
        "colour: unknown field (not permitted)"
    )


def test_the_whole_document_is_named_by_the_root_and_the_input_is_never_echoed() -> None:
    assert message("secret-value", root="input") == (
        "input: Input should be a valid dictionary or instance of Doc"
    )
    assert "secret" not in message({"name": "secret value", "count": 1})


def test_past_the_limit_the_rest_are_counted() -> None:
    text = message({"ports": ["a", "b", "c", "d"]}, limit=2)

    assert text == "name: Field required; count: Field required (+4 more)"
