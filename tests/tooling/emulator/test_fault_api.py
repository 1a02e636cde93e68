"""The fault API: validation, ordering of faults on one operation, and bookkeeping."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from botocore.config import Config
from botocore.exceptions import ClientError
from sg_reconciler_tools.local import interception, moto_hooks
from sg_reconciler_tools.local.deployment import session
from sg_reconciler_tools.local.faults import Fault, FaultInjector


@pytest.fixture
def ec2() -> Iterator[object]:
    with moto_hooks.new_mock():
        yield session().client("ec2", config=Config(retries={"total_max_attempts": 1}))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"count": 0}, "at least once"),
        ({"mode": "during"}, "mode must be"),
        ({"service": "s3"}, "cannot inject faults into 's3'"),
    ],
)
def test_a_fault_is_checked_when_made(kwargs: dict[str, object], message: str) -> None:
    arguments: dict[str, object] = {
        "service": "ec2",
        "operation": "DescribeSecurityGroups",
        "error_code": "RequestLimitExceeded",
        **kwargs,
    }
    with pytest.raises(ValueError, match=message):
        Fault(**arguments)  # type: ignore[arg-type]


def test_faults_on_one_operation_fire_in_order_and_are_counted(ec2: object) -> None:
    first = Fault("ec2", "DescribeSecurityGroups", "RequestLimitExceeded", count=2)
    second = Fault("ec2", "DescribeSecurityGroups", "UnauthorizedOperation")
    codes: list[str] = []
    with FaultInjector(first, second) as injector:
        assert not injector.exhausted
        for _ in range(4):
            try:
                ec2.describe_security_groups()  # type: ignore[attr-defined]
                codes.append("ok")
            except ClientError as error:
                codes.append(error.response["Error"]["Code"])
        assert injector.calls("ec2", "DescribeSecurityGroups") == 4
        assert (injector.remaining(first), injector.remaining(second)) == (0, 0)
        assert injector.exhausted
    assert codes == ["RequestLimitExceeded", "RequestLimitExceeded", "UnauthorizedOperation", "ok"]
    assert [(f.fault, f.call_number) for f in injector.fired] == [
        (first, 1),
        (first, 2),
        (second, 3),
    ]


def test_leaving_the_injector_removes_its_faults(ec2: object) -> None:
    fault = Fault("ec2", "DescribeSecurityGroups", "RequestLimitExceeded", count=5)
    with FaultInjector(fault) as injector, pytest.raises(ClientError):
        ec2.describe_security_groups()  # type: ignore[attr-defined]
    ec2.describe_security_groups()  # type: ignore[attr-defined]
    assert injector.remaining(fault) == 4


def test_the_message_is_the_one_given(ec2: object) -> None:
    fault = Fault("ec2", "DescribeSecurityGroups", "UnauthorizedOperation", message="not for you")
    with FaultInjector(fault), pytest.raises(ClientError) as raised:
        ec2.describe_security_groups()  # type: ignore[attr-defined]
    assert raised.value.response["Error"]["Message"] == "not for you"


def test_a_fault_on_an_action_the_service_lacks_is_refused_and_installs_nothing() -> None:
    valid = Fault("ec2", "DescribeSecurityGroups", "RequestLimitExceeded")
    misspelt = Fault("ec2", "DescribeSecurityGroup", "RequestLimitExceeded")
    with pytest.raises(ValueError, match="no API action 'DescribeSecurityGroup'"):
        FaultInjector(valid, misspelt).__enter__()
    assert interception.interceptors("ec2", "DescribeSecurityGroups") == 0  # undone


def test_an_injector_is_entered_once_at_a_time(ec2: object) -> None:
    injector = FaultInjector(Fault("ec2", "DescribeSecurityGroups", "RequestLimitExceeded"))
    with injector, pytest.raises(RuntimeError, match="already entered"):
        injector.__enter__()  # its first patches would be lost, never undone
    assert interception.interceptors("ec2", "DescribeSecurityGroups") == 0
    with injector:  # entered again once left
        assert interception.interceptors("ec2", "DescribeSecurityGroups") == 1
