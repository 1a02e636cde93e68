"""The read-budget model of the local runtime (`AwsReadLimits`) throttles as AWS documents:
"Request throttling for the Elastic Load Balancing API" (Describe* 40 tokens, 10 a second,
plus an account-level bucket of the same size for every ELBv2 call; `ThrottlingException`,
"Rate exceeded") and "Request throttling for the Amazon EC2 API" (100 / 20 per read API,
50 / 10 unfiltered and unpaginated DescribeSecurityGroups, DescribeInstances,
DescribeNetworkInterfaces; `RequestLimitExceeded`). On a manual clock: exact, no sleeping."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError
from moto import mock_aws
from sg_reconciler_tools.local.rate_limit import AwsReadLimits, ManualClock

REGION = "eu-west-1"
ONE_ATTEMPT = Config(retries={"mode": "standard", "total_max_attempts": 1})


@pytest.fixture
def aws() -> Iterator[tuple[Any, Any]]:
    with mock_aws():
        yield (
            boto3.client("ec2", region_name=REGION, config=ONE_ATTEMPT),
            boto3.client("elbv2", region_name=REGION, config=ONE_ATTEMPT),
        )


@pytest.fixture
def model() -> Iterator[AwsReadLimits]:
    with AwsReadLimits(clock=ManualClock(), latency=0.0) as limits:
        yield limits


def code_of(call: Any) -> tuple[str, str]:
    with pytest.raises(ClientError) as caught:
        call()
    error = caught.value.response["Error"]
    return error["Code"], error["Message"]


def test_elbv2_describes_share_one_bucket_of_40_refilled_at_10_a_second(
    aws: tuple[Any, Any], model: AwsReadLimits
) -> None:
    _, elbv2 = aws
    for n in range(40):  # two Describe* actions, one bucket
        (elbv2.describe_target_groups if n % 2 else elbv2.describe_load_balancers)()
    assert code_of(elbv2.describe_target_groups) == ("ThrottlingException", "Rate exceeded")
    model.sleep(0.1)  # one token back
    elbv2.describe_load_balancers()
    assert code_of(elbv2.describe_load_balancers)[0] == "ThrottlingException"
    assert model.stats.count("elbv2") == 41 and model.stats.count("elbv2", refused=True) == 2


def test_every_elbv2_call_draws_on_the_account_bucket(
    aws: tuple[Any, Any], model: AwsReadLimits
) -> None:
    ec2, elbv2 = aws
    vpc = ec2.create_vpc(CidrBlock="10.9.0.0/16")["Vpc"]["VpcId"]
    tg = elbv2.create_target_group(Name="ips", Protocol="TCP", Port=80, VpcId=vpc, TargetType="ip")[
        "TargetGroups"
    ][0]["TargetGroupArn"]
    for n in range(40):  # another tool registering targets (the controller)
        elbv2.register_targets(TargetGroupArn=tg, Targets=[{"Id": f"10.9.0.{n + 10}"}])
    # The Describe* bucket is full, but the account's is empty.
    assert code_of(elbv2.describe_load_balancers)[0] == "ThrottlingException"
    assert (
        code_of(lambda: elbv2.register_targets(TargetGroupArn=tg, Targets=[{"Id": "10.9.1.1"}]))[0]
        == "ThrottlingException"
    )


def test_ec2_reads_have_a_bucket_per_api_and_a_smaller_one_unfiltered(
    aws: tuple[Any, Any], model: AwsReadLimits
) -> None:
    ec2, _ = aws
    vpc = ec2.create_vpc(CidrBlock="10.9.0.0/16")["Vpc"]["VpcId"]
    group = ec2.create_security_group(GroupName="g", Description="g", VpcId=vpc)["GroupId"]
    by_group = [{"Name": "group-id", "Values": [group]}]
    for _ in range(100):
        ec2.describe_security_group_rules(Filters=by_group)
    assert code_of(lambda: ec2.describe_security_group_rules(Filters=by_group)) == (
        "RequestLimitExceeded",
        "Request limit exceeded.",
    )
    ec2.describe_subnets()  # another API, another bucket
    for _ in range(50):
        ec2.describe_security_groups()  # unfiltered, unpaginated: 50 tokens
    assert code_of(ec2.describe_security_groups)[0] == "RequestLimitExceeded"
    ec2.describe_security_groups(Filters=by_group)  # filtered: its own bucket of 100
    model.sleep(0.1)  # 10 a second: one token back
    ec2.describe_security_groups()
    assert code_of(ec2.describe_security_groups)[0] == "RequestLimitExceeded"


def test_botocore_retries_sleep_on_the_model_clock(model: AwsReadLimits) -> None:
    with mock_aws():
        patient = boto3.client(
            "elbv2",
            region_name=REGION,
            config=Config(retries={"mode": "standard", "total_max_attempts": 10}),
        )
        model.drain("elbv2")
        before = model.now()
        patient.describe_load_balancers()  # botocore's own backoff until a token is back
        assert model.now() > before  # it slept, on the model's clock (no real waiting)
        assert model.stats.count("elbv2", refused=True) >= 1
        model.drain("elbv2")
        impatient = boto3.client("elbv2", region_name=REGION, config=ONE_ATTEMPT)
        assert code_of(impatient.describe_load_balancers)[0] == "ThrottlingException"


def test_a_model_clock_leaves_no_read_debt_on_the_wall_clock() -> None:
    """The process's read pacer outlives a runtime; buckets filled on a model clock (which
    runs far ahead of the wall clock) would owe reads for hours once the wall clock is back,
    and every later planner run would end ReadsOutOfTime."""
    from sg_reconciler import wiring
    from sg_reconciler.adapters import pacing
    from sg_reconciler.settings import PlannerSettings

    settings = PlannerSettings.model_construct(reads_per_second=1000.0)
    ahead = ManualClock()
    ahead.time = 1e9
    with AwsReadLimits(clock=ahead, latency=0.0):
        on_model = wiring.read_pacer(settings, seconds_left=300)
        for _ in range(5000):
            on_model.wait("elbv2", "DescribeLoadBalancers")
    on_wall = wiring.read_pacer(settings, seconds_left=300)
    assert pacing.clock is not ahead.now
    on_wall.wait("elbv2", "DescribeLoadBalancers")  # no ReadsOutOfTime
    assert on_wall.waited == 0.0
