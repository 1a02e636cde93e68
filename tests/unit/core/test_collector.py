"""The collector pause: whatever the order in which threads begin and end their pauses, the
collector is back as it was once the last one ends (a review found one order that left it
off for good)."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator

import pytest
from sg_reconciler.collector import paused_collector


@pytest.fixture(autouse=True)
def collector_on() -> Iterator[None]:
    gc.enable()
    yield
    gc.enable()


def test_two_threads_whose_pauses_overlap_leave_the_collector_on() -> None:
    # A pauses; B pauses while A holds it; A ends first; B ends last.
    a_in, b_in, a_out = threading.Event(), threading.Event(), threading.Event()
    paused_in_b: list[bool] = []

    def first() -> None:
        with paused_collector():
            a_in.set()
            b_in.wait(5)
        a_out.set()

    def second() -> None:
        a_in.wait(5)
        with paused_collector():
            b_in.set()
            a_out.wait(5)
            paused_in_b.append(not gc.isenabled())  # B's block still runs: still paused

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)

    assert a_out.is_set() and paused_in_b == [True]
    assert gc.isenabled()


def test_a_pause_inside_a_pause_restores_on_the_outer_end_only() -> None:
    with paused_collector():
        with paused_collector():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()


def test_a_collector_the_caller_turned_off_stays_off() -> None:
    gc.disable()
    with paused_collector():
        pass
    assert not gc.isenabled()


def test_an_error_in_the_block_still_restores_the_collector() -> None:
    with pytest.raises(ValueError), paused_collector():
        raise ValueError("boom")
    assert gc.isenabled()


def test_many_threads_parsing_at_once_leave_the_collector_on() -> None:
    from sg_reconciler.core.rules import ingress_rules

    docs = [
        {
            "GroupId": "sg-0123456789abcdef0",
            "IsEgress": False,
            "IpProtocol": "tcp",
            "FromPort": port,
            "ToPort": port,
            "CidrIpv4": "10.0.0.0/16",
            "SecurityGroupRuleId": f"sgr-{port}",
        }
        for port in range(8000, 8020)
    ]
    parsed: list[int] = []

    def parse() -> None:
        for _ in range(300):
            parsed.append(len(ingress_rules(docs, "test")))

    threads = [threading.Thread(target=parse) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)

    assert parsed == [20] * 1200
    assert gc.isenabled()
