"""The state machine's Retry policies, named once here: every Lambda task retries the
Lambda service's transient errors, every Retry block is one of a few named policies, and each
task's policies are listed, so the copies in the ASL cannot drift apart unnoticed.

Chosen over generating the ASL from a builder: the console shows the committed file, reviews
read it as it runs, and this test is all a builder would add."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ASL = Path(__file__).resolve().parents[3] / "statemachine" / "apply_plan.asl.json"
LAMBDA_TRANSIENT = (
    "Lambda.ServiceException",
    "Lambda.AWSLambdaException",
    "Lambda.SdkClientException",
    "Lambda.TooManyRequestsException",
)
BACKOFF = {"BackoffRate": 2.0, "JitterStrategy": "FULL"}

# (errors, attempts, first interval, longest delay); every policy backs off x2 with full jitter
# unless it says otherwise.
POLICIES: dict[str, dict[str, Any]] = {
    # AWS or Lambda failing for a moment: a step's reads and bookkeeping
    "transient": {
        "ErrorEquals": ["Throttled", "TransientAwsError", *LAMBDA_TRANSIENT],
        "MaxAttempts": 6,
        "IntervalSeconds": 1,
        "MaxDelaySeconds": 20,
        **BACKOFF,
    },
    # the same for the write batches, where a rule not yet visible is retried with them
    "transient, writes": {
        "ErrorEquals": ["TransientAwsError", "NotYetVisible", *LAMBDA_TRANSIENT],
        "MaxAttempts": 6,
        "IntervalSeconds": 1,
        "MaxDelaySeconds": 20,
        **BACKOFF,
    },
    # the rollback's writes try longer: a failure there leaves the groups to an operator
    "transient, rollback": {
        "ErrorEquals": ["TransientAwsError", *LAMBDA_TRANSIENT],
        "MaxAttempts": 8,
        "IntervalSeconds": 1,
        "MaxDelaySeconds": 30,
        **BACKOFF,
    },
    # the rollback's sum-up writes nothing to EC2: no throttle to wait out
    "transient, no EC2": {
        "ErrorEquals": ["TransientAwsError", *LAMBDA_TRANSIENT],
        "MaxAttempts": 6,
        "IntervalSeconds": 1,
        "MaxDelaySeconds": 20,
        **BACKOFF,
    },
    # the input check calls no AWS API
    "Lambda only": {
        "ErrorEquals": list(LAMBDA_TRANSIENT),
        "MaxAttempts": 4,
        "IntervalSeconds": 1,
        "MaxDelaySeconds": 20,
        **BACKOFF,
    },
    # EC2's write bucket refills at a few calls a second: wait it out longer than a blip
    "EC2 write throttled": {
        "ErrorEquals": ["Throttled"],
        "MaxAttempts": 12,
        "IntervalSeconds": 2,
        "MaxDelaySeconds": 60,
        **BACKOFF,
    },
    # another execution holds a group: some 10 to 20 minutes of patience
    "lock busy": {
        "ErrorEquals": ["LockBusy"],
        "MaxAttempts": 40,
        "IntervalSeconds": 2,
        "BackoffRate": 1.5,
        "MaxDelaySeconds": 30,
        "JitterStrategy": "FULL",
    },
    # eventual consistency of DescribeSecurityGroupRules after a write
    "not yet visible": {
        "ErrorEquals": ["NotYetVisible"],
        "MaxAttempts": 5,
        "IntervalSeconds": 2,
        "MaxDelaySeconds": 30,
        **BACKOFF,
    },
    # releasing the locks must not give up on anything it can retry
    "anything": {
        "ErrorEquals": ["States.ALL"],
        "MaxAttempts": 6,
        "IntervalSeconds": 1,
        "MaxDelaySeconds": 20,
        **BACKOFF,
    },
}


# Each Lambda task's policies, in the order Step Functions tries them. Some policies differ by
# one error ("transient" and "transient, no EC2" by Throttled), so a copy that loses an error
# can still be a named policy: only this table tells that a task's retry changed.
TASK_POLICIES: dict[str, list[str]] = {
    "Check the plan input": ["Lambda only"],
    "Lock the groups": ["lock busy", "transient"],
    "Refresh the plan under the locks": ["transient"],
    "Authorize new rules/Authorize the rules of a batch of groups": [
        "EC2 write throttled",
        "transient, writes",
    ],
    "Verify the new rules are visible": ["not yet visible", "transient"],
    "Apply quota-bound changes in order/Apply one quota-bound call": [
        "EC2 write throttled",
        "transient, writes",
    ],
    "Re-plan the revokes after the settle": ["transient"],
    "Revoke stale rules/Revoke the stale rules of a batch of groups": [
        "EC2 write throttled",
        "transient, writes",
    ],
    "Verify the final state": ["not yet visible", "transient"],
    "Roll back the rules this execution added/Roll back the rules of a batch of groups": [
        "EC2 write throttled",
        "transient, rollback",
    ],
    "Sum up the rollback": ["transient, no EC2"],
    "List the groups to check for leftovers": ["transient"],
    "Check the groups for leftovers/Check a batch of groups for leftovers": ["transient"],
    "Report the leftover rules": ["transient"],
    "Release the group locks": ["anything"],
}


def lambda_tasks(states: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    for name, state in states.items():
        if state.get("Type") == "Task" and ":lambda:invoke" in str(state.get("Resource")):
            yield path + name, state
        for branch in state.get("Branches", []):
            yield from lambda_tasks(branch["States"], f"{path}{name}/")
        if "ItemProcessor" in state:
            yield from lambda_tasks(state["ItemProcessor"]["States"], f"{path}{name}/")


def policy_name(retrier: dict[str, Any]) -> str | None:
    return next((name for name, policy in POLICIES.items() if policy == retrier), None)


def test_every_retry_block_is_a_named_policy() -> None:
    tasks = list(lambda_tasks(json.loads(ASL.read_text())["States"]))
    assert len(tasks) >= 10
    unnamed = {
        name: retrier
        for name, state in tasks
        for retrier in state.get("Retry", [])
        if policy_name(retrier) is None
    }
    assert not unnamed, f"a Retry block that is none of the named policies: {unnamed}"


def test_every_lambda_task_retries_the_lambda_services_transient_errors() -> None:
    for name, state in lambda_tasks(json.loads(ASL.read_text())["States"]):
        retried = {error for retrier in state.get("Retry", []) for error in retrier["ErrorEquals"]}
        assert "States.ALL" in retried or set(LAMBDA_TRANSIENT) <= retried, name


def test_each_lambda_task_retries_with_its_own_policies_in_order() -> None:
    tasks = lambda_tasks(json.loads(ASL.read_text())["States"])
    found = {
        name: [policy_name(retrier) for retrier in state.get("Retry", [])] for name, state in tasks
    }
    assert found == TASK_POLICIES


def test_a_changed_copy_is_caught() -> None:
    transient = dict(POLICIES["transient"])
    assert policy_name(transient) == "transient"
    assert policy_name({**transient, "MaxAttempts": 5}) is None
    assert policy_name({**transient, "ErrorEquals": transient["ErrorEquals"][:-1]}) is None
