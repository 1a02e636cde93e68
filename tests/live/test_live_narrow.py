"""Event-scoped reads on moto: an event reads the target groups that share a rule source with
its own, plans from that when the plan only authorizes, and reads everything otherwise.

World (benchmarks/bench_reads.py): six managed NLBs, each with a group of its own (and, in
the backend world, a shared backend group, the only rule source) and one instance target
group whose two targets are in the node group; a first full reconcile applied their rules."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from live.test_live_inventory import count_calls
from moto import mock_aws
from sg_reconciler.core.plan import Authorize, Plan, Revoke
from sg_reconciler.core.scope import Scope

from benchmarks.bench_reads import Account

REGION = "us-east-1"
LOAD_BALANCERS = 6


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name, value in (
        ("AWS_ACCESS_KEY_ID", "testing"),
        ("AWS_SECRET_ACCESS_KEY", "testing"),
        ("AWS_DEFAULT_REGION", REGION),
    ):
        monkeypatch.setenv(name, value)
    with mock_aws():
        yield


def event_scope(account: Account, n: int) -> Scope:
    return Scope(target_group_arns=frozenset({account.target_groups[n]}))


def test_a_new_target_is_planned_from_its_own_target_group_alone(aws: None) -> None:
    account = Account(LOAD_BALANCERS, backend=False)
    tg = account.target_groups[3]
    account.elbv2.register_targets(
        TargetGroupArn=tg, Targets=[{"Id": account.instances(0)[2], "Port": 31500}]
    )
    scope = event_scope(account, 3)
    calls = count_calls(account.ec2, account.elbv2)

    live = account.plan(scope, narrow=scope)

    narrow_calls = dict(calls)
    calls.clear()
    full = account.plan(scope)
    assert live.narrowed == scope
    assert isinstance(live.result, Plan) and isinstance(full.result, Plan)
    assert live.result.steps == full.result.steps  # the same authorization, one group
    (step,) = live.result.steps
    assert isinstance(step, Authorize) and [r.key.from_port for r in step.rules] == [31500]
    assert narrow_calls["DescribeTargetHealth"] == 1
    assert calls["DescribeTargetHealth"] == LOAD_BALANCERS
    assert sum(narrow_calls.values()) < sum(calls.values())


def test_a_target_taken_away_is_planned_from_the_full_read(aws: None) -> None:
    account = Account(LOAD_BALANCERS, backend=False)
    tg = account.target_groups[2]
    account.elbv2.deregister_targets(
        TargetGroupArn=tg, Targets=[{"Id": i} for i in account.instances(0)[:2]]
    )
    scope = event_scope(account, 2)
    calls = count_calls(account.ec2, account.elbv2)

    live = account.plan(scope, narrow=scope)

    # The narrow plan would revoke: the account is read again in full, which decides.
    assert live.narrowed is None
    assert calls["DescribeTargetHealth"] == 1 + LOAD_BALANCERS
    assert isinstance(live.result, Plan)
    assert live.result.steps == account.plan(scope).result.steps  # type: ignore[union-attr]
    assert [type(s) for s in live.result.steps] == [Revoke]


def test_a_shared_backend_group_makes_every_target_group_part_of_the_read(aws: None) -> None:
    account = Account(LOAD_BALANCERS, backend=True)
    tg = account.target_groups[1]
    account.elbv2.register_targets(
        TargetGroupArn=tg, Targets=[{"Id": account.instances(0)[2], "Port": 31700}]
    )
    scope = event_scope(account, 1)
    calls = count_calls(account.ec2, account.elbv2)

    live = account.plan(scope, narrow=scope)

    # Every load balancer's traffic comes from the backend group: one flow, all of them,
    # so the read is the full one (once), and so is the refresh's.
    assert calls["DescribeTargetHealth"] == LOAD_BALANCERS
    assert live.narrowed is None
    assert isinstance(live.result, Plan)
    assert live.result.steps == account.plan(scope).result.steps  # type: ignore[union-attr]
