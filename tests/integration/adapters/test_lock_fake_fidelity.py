"""The in-memory FakeLocks (tests/fakes.py) behaves as GroupLocks on moto's DynamoDB does: one
scenario of takes, renewals, fences, take-overs and releases on one clock runs on both and
leaves the same transcript, so the lock steps' fake-backed tests of tests/unit/app hold for
the adapter too."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import boto3
import pytest
from fakes import FakeLocks
from integration.adapters.tables import Clock, create_table
from moto import mock_aws
from sg_reconciler.adapters.locks import GroupLocks
from sg_reconciler.errors import LockBusy, LockLost

LEASE = 60
START = 1_000_000


def scenario(locks: Any, advance: Callable[[float], None]) -> list[object]:
    """What each call returned or raised, in order."""
    lines: list[object] = []

    def call(name: str, *args: object) -> None:
        try:
            lines.append((name, args, getattr(locks, name)(*args)))
        except (LockBusy, LockLost) as exc:
            lines.append((name, args, type(exc).__name__, str(exc)))

    call("acquire", ["sg-b", "sg-a", "sg-b"], "exec-1", LEASE)
    call("acquire", ["sg-a"], "exec-2", LEASE)  # busy
    call("acquire", ["sg-c", "sg-a"], "exec-2", LEASE)  # busy at sg-a, sg-c not reached
    advance(LEASE - 1)
    call("renew", "sg-a", "exec-1", LEASE)
    call("fence", "sg-a", "exec-1", LEASE)
    advance(LEASE - 1)
    call("acquire", ["sg-a"], "exec-2", LEASE)  # renewed: still held
    call("fence", "sg-b", "exec-1", LEASE)  # sg-b's lease ran out a second ago
    advance(2)
    call("acquire", ["sg-b"], "exec-2", LEASE)  # run out: taken over
    call("renew", "sg-b", "exec-1", LEASE)
    call("fence", "sg-b", "exec-1", LEASE)
    call("acquire", ["sg-a"], "exec-1", LEASE)  # its own lock: renewed
    call("release", ["sg-a", "sg-b", "sg-z"], "exec-1")  # only its own
    call("fence", "sg-a", "exec-1", LEASE)  # freed
    call("renew", "sg-a", "exec-1", LEASE)
    call("acquire", ["sg-c", "sg-d"], "exec-2", LEASE)
    # Leases are whole seconds: half a second past the lease's last second, it still holds
    advance(LEASE + 0.5)
    call("acquire", ["sg-c"], "exec-3", LEASE)
    call("fence", "sg-d", "exec-2", LEASE)
    advance(0.5)
    call("acquire", ["sg-c"], "exec-3", LEASE)
    for group in ("sg-a", "sg-b", "sg-c", "sg-d"):
        call("holder", group)
    call("stopped", "exec-2")
    call("mark_stopped", "exec-2", LEASE)
    call("stopped", "exec-2")
    call("release_held_by", "exec-2")
    for group in ("sg-b", "sg-c", "sg-d"):
        call("holder", group)
    return lines


@pytest.fixture
def group_locks() -> Iterator[tuple[GroupLocks, Clock]]:
    with mock_aws():
        client = boto3.client("dynamodb", region_name="eu-west-1")
        create_table(client, "locks", "group_id")
        clock = Clock(START)
        yield GroupLocks(client, "locks", clock), clock


def test_the_fake_locks_answer_as_the_adapter_on_moto(
    group_locks: tuple[GroupLocks, Clock],
) -> None:
    adapter, clock = group_locks
    fake = FakeLocks(now=START)

    def advance_clock(seconds: float) -> None:
        clock.now += seconds

    def advance_fake(seconds: float) -> None:
        fake.now += seconds

    on_moto = scenario(adapter, advance_clock)
    assert scenario(fake, advance_fake) == on_moto
    outcomes = [line[2] for line in on_moto]
    assert outcomes.count("LockBusy") == 4 and outcomes.count("LockLost") == 5
