"""Live-read tests run on moto with the local runtime's EC2 fidelity hooks, so that what the
reader asks (secondary and IPv6 addresses, delegated prefixes, subnets' IPv6 blocks) is
answered as AWS answers it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws
from sg_reconciler_tools.local import moto_hooks

REGION = "us-east-1"


@pytest.fixture(autouse=True, scope="module")
def ec2_as_aws() -> Iterator[None]:
    patches = moto_hooks.patch_ec2_fidelity()
    try:
        yield
    finally:
        for patch in reversed(patches):
            patch.undo()


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Any, Any]]:
    """moto with fake credentials; EC2 and ELBv2 clients (a module may define its own)."""
    for name, value in (
        ("AWS_ACCESS_KEY_ID", "testing"),
        ("AWS_SECRET_ACCESS_KEY", "testing"),
        ("AWS_DEFAULT_REGION", REGION),
    ):
        monkeypatch.setenv(name, value)
    with mock_aws():
        yield boto3.client("ec2", region_name=REGION), boto3.client("elbv2", region_name=REGION)
