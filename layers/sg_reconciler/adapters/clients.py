"""boto3 clients for the reconciler's reads, from a region, profile and optional endpoint.

Used by the CLI (`plan --live`, possibly against a local moto server) and by handlers. The
timeouts are short and the retries few so that an unreachable endpoint fails in seconds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import boto3
from botocore.config import Config

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_ec2 import EC2Client
    from mypy_boto3_elbv2 import ElasticLoadBalancingv2Client
    from mypy_boto3_ssm import SSMClient

DEFAULT_MAX_ATTEMPTS = 3


@dataclass(frozen=True)
class Clients:
    ec2: EC2Client
    elbv2: ElasticLoadBalancingv2Client
    ssm: SSMClient
    dynamodb: DynamoDBClient  # the brake's records (release-brake)
    sts: Any  # who releases a brake (no type stubs installed for STS)


def make_clients(
    region: str | None = None,
    profile: str | None = None,
    endpoint_url: str | None = None,
    max_attempts: int | None = None,
) -> Clients:
    """Clients sharing one session; raises botocore errors (e.g. ProfileNotFound) as they are."""
    session = boto3.Session(region_name=region, profile_name=profile)
    config = Config(
        connect_timeout=5,
        read_timeout=30,
        retries={"mode": "standard", "max_attempts": max_attempts or DEFAULT_MAX_ATTEMPTS},
    )
    return Clients(
        ec2=session.client("ec2", endpoint_url=endpoint_url, config=config),
        elbv2=session.client("elbv2", endpoint_url=endpoint_url, config=config),
        ssm=session.client("ssm", endpoint_url=endpoint_url, config=config),
        dynamodb=session.client("dynamodb", endpoint_url=endpoint_url, config=config),
        sts=session.client("sts", endpoint_url=endpoint_url, config=config),
    )
