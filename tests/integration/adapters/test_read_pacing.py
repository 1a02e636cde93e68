"""The product's reads under AWS's read buckets (`AwsReadLimits`, on a model clock): paced
at a tenth of each bucket they never throttle, a throttle left by another tool is retried
until the deadline, and a read that cannot finish in time says so (invariant 15)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws
from sg_reconciler.adapters.aws import read_config, typed_aws_errors
from sg_reconciler.adapters.inventory import read_inventory
from sg_reconciler.adapters.pacing import ReadPacer
from sg_reconciler.core.pacing import read_pace
from sg_reconciler.errors import ReadsOutOfTime, Throttled
from sg_reconciler_tools.local import interception, moto_hooks
from sg_reconciler_tools.local.rate_limit import AwsReadLimits, ScaledClock

from benchmarks.bench_reads import Account

REGION = "us-east-1"  # the benchmark account's
TARGET_GROUPS = 30  # each one DescribeTargetHealth: 30 s at the default pace


@pytest.fixture(scope="module")
def account() -> Iterator[Account]:
    """NLBs behind a shared backend group (the controller's layout: every read is full)."""
    patches = moto_hooks.patch_ec2_fidelity()
    try:
        with mock_aws():
            yield Account(TARGET_GROUPS, backend=True)
    finally:
        for patch in reversed(patches):
            patch.undo()


def clients(attempts: int = 1) -> tuple[Any, Any]:
    """Clients configured as the Lambdas' readers are (`adapters.aws.read_client`)."""
    return (
        boto3.client("ec2", region_name=REGION, config=read_config(attempts)),
        boto3.client("elbv2", region_name=REGION, config=read_config(attempts)),
    )


def test_paced_reads_spend_a_tenth_of_the_buckets_and_are_never_throttled(
    account: Account,
) -> None:
    ec2, elbv2 = clients()
    with AwsReadLimits(clock=ScaledClock(10.0)) as model:
        pacer = ReadPacer(read_pace(), deadline=model.now() + 300)
        inventory = read_inventory(pacer.install(ec2), pacer.install(elbv2), account.policy)
    assert len(inventory.target_groups) == TARGET_GROUPS
    assert model.stats.count("elbv2", refused=True) == model.stats.count("ec2", refused=True) == 0
    # At most the burst (4) plus one a second: 90% of the refill stays with other tools.
    elbv2_calls = model.stats.count("elbv2")
    assert elbv2_calls > TARGET_GROUPS
    assert elbv2_calls <= 4 + 1.0 * model.stats.seconds + 1


def test_a_throttle_left_by_another_tool_is_retried_not_the_end_of_the_read(
    account: Account,
) -> None:
    # Given another tool that just emptied the account's ELBv2 buckets
    ec2, elbv2 = clients()
    with AwsReadLimits(clock=ScaledClock(10.0)) as model:
        model.drain("elbv2")
        # When the read that made one attempt per call (before) reads
        with pytest.raises(Throttled), typed_aws_errors():
            read_inventory(ec2, elbv2, account.policy)
        # Then it ends at its first throttle; the paced reader retries and reads it all
        pacer = ReadPacer(read_pace(), deadline=model.now() + 300)
        pacer.install(ec2)
        pacer.install(elbv2)
        # the other tool empties the buckets again right as the first paced read goes out
        # (before botocore builds it: drained earlier, a loaded machine's wall time refills them
        # on the model clock; drained in before-send, the model may have answered already)
        drained: list[bool] = []

        def drain_once(**_: Any) -> None:
            if not drained:
                drained.append(True)
                model.drain("elbv2")

        elbv2.meta.events.register("before-call", drain_once)
        inventory = read_inventory(ec2, elbv2, account.policy)
    assert len(inventory.target_groups) == TARGET_GROUPS
    assert pacer.throttled >= 1 and model.stats.count("elbv2", refused=True) >= 2


def test_a_read_that_cannot_finish_before_the_deadline_says_so(account: Account) -> None:
    ec2, elbv2 = clients()
    with AwsReadLimits(clock=ScaledClock(10.0)) as model:
        pacer = ReadPacer(read_pace(), deadline=model.now() + 10)  # 30 describes at 1/s
        with pytest.raises(ReadsOutOfTime, match="ReadsPerSecond 1"):
            read_inventory(pacer.install(ec2), pacer.install(elbv2), account.policy)
    assert model.stats.count("elbv2") <= 4 + 10 + 1


def test_the_read_pacer_leaves_writes_to_the_write_pacer(account: Account) -> None:
    ec2, _ = clients()
    pacer = ReadPacer(read_pace())
    pacer.install(ec2)

    def throttle(service: str, operation: str, proceed: Any) -> Any:
        raise interception.AwsError("RequestLimitExceeded", "Request limit exceeded.")

    patch = interception.intercept_api_call("ec2", "CreateTags", throttle)
    try:
        with pytest.raises(ClientError):  # one attempt: the step's Pacer decides
            ec2.create_tags(Resources=[account.vpc], Tags=[{"Key": "k", "Value": "v"}])
    finally:
        patch.undo()
    assert pacer.throttled == 0 and pacer.reads == 0
