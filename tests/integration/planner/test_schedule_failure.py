"""A drift-repair run that cannot plan fails the invocation (no queue would redeliver it)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from event_samples import load_event
from moto import mock_aws
from planner import app


@dataclass
class LambdaContext:
    function_name: str = "planner"
    memory_limit_in_mb: int = 512
    invoked_function_arn: str = "arn:aws:lambda:eu-west-1:123456789012:function:planner"
    aws_request_id: str = "req-1"

    def get_remaining_time_in_millis(self) -> int:
        return 300_000  # the planner's timeout, as a fresh invocation has it


@pytest.fixture
def environment(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("POLICY_PARAMETER_NAME", "missing-policy")
    monkeypatch.setenv(
        "STATE_MACHINE_ARN", "arn:aws:states:eu-west-1:123456789012:stateMachine:apply"
    )
    monkeypatch.setenv("ACCOUNT_ID", "123456789012")
    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "true")
    with mock_aws():
        yield


def test_a_scheduled_run_that_cannot_plan_raises(environment: None) -> None:
    with pytest.raises(app.PlanningFailed, match="ParameterNotFound"):
        app.handler(load_event("scheduled"), LambdaContext())


def test_an_sqs_batch_that_cannot_plan_returns_its_records_for_redelivery(
    environment: None,
) -> None:
    batch = load_event("sqs/RegisterTargets")
    response = app.handler(batch, LambdaContext())
    assert response == {"batchItemFailures": [{"itemIdentifier": batch["Records"][0]["messageId"]}]}
