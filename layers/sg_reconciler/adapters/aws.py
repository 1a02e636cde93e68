"""AWS access in one place: boto3 clients (the Lambdas' cached ones and the CLI's), and the
translation of AWS errors into the typed errors the state machine matches.

Lambda clients make one attempt per call by default: Step Functions retries, visibly in the
console, with its own backoff. Reads are the exception: a throttled read is retried in the
function, paced, until its deadline (`adapters.pacing.ReadPacer`), because a read that
starts over from its first call under Step Functions' Retry meets the same throttle again.
The planner's and the refresh's readers have clients of their own (`read_client`), so that
a step's writes never go through a reader's retries. The CLI's clients have short timeouts and few retries so that
an unreachable endpoint fails in seconds.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError, HTTPClientError
from botocore.exceptions import ConnectionError as BotoConnectionError

from sg_reconciler.errors import TransientAwsError, from_aws_code

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_ec2 import EC2Client
    from mypy_boto3_elbv2 import ElasticLoadBalancingv2Client
    from mypy_boto3_ssm import SSMClient

DEFAULT_MAX_ATTEMPTS = 3


@cache
def client(service: str, attempts: int = 1) -> Any:
    """A Lambda's client for `service`, one per retry policy for the life of the process,
    making `attempts` tries per call in all."""
    make: Any = boto3.client  # typed per service literal; the service here is a plain str
    return make(
        service, config=Config(retries={"mode": "standard", "total_max_attempts": attempts})
    )


def read_config(attempts: int = 1) -> Config:
    """The readers' client configuration: botocore's standard retries for what is not a
    throttle (a throttled read is retried by the read pacer)."""
    return Config(retries={"mode": "standard", "total_max_attempts": attempts})


@cache
def read_client(service: str, attempts: int = 1) -> Any:
    """A client for the account reads of the planner and the refresh (paced by the caller),
    apart from `client`'s, which the steps also write with."""
    make: Any = boto3.client
    return make(service, config=read_config(attempts))


@dataclass(frozen=True)
class Clients:
    """The CLI's clients, for one region, profile and optional endpoint (a moto server)."""

    ec2: EC2Client
    elbv2: ElasticLoadBalancingv2Client
    ssm: SSMClient
    dynamodb: DynamoDBClient  # the brake's records (release-brake)
    sts: Any  # who releases a brake (no type stubs installed for STS)
    cloudformation: Any  # a stack's outputs (status)
    stepfunctions: Any  # recent executions (status); whether an adopter could hand back (adopt)


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
        cloudformation=session.client("cloudformation", endpoint_url=endpoint_url, config=config),
        stepfunctions=session.client("stepfunctions", endpoint_url=endpoint_url, config=config),
    )


@contextmanager
def typed_aws_errors() -> Iterator[None]:
    """Re-raise botocore ClientErrors as the typed errors Step Functions matches."""
    try:
        yield
    except (BotoConnectionError, HTTPClientError) as err:  # timeouts, resets: it may have applied
        raise TransientAwsError(f"{type(err).__name__}: {err}") from None
    except ClientError as err:
        error = err.response.get("Error", {})
        status = err.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        raise from_aws_code(
            str(error.get("Code", "Unknown")), str(error.get("Message", "")), status
        ) from None
