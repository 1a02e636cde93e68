"""Event-scoped reads on moto: an event reads the target groups that share a rule source with
its own, plans from that when the plan only authorizes, and reads everything otherwise.

World (benchmarks/bench_reads.py): six managed NLBs, each with a group of its own (and, in
the backend world, a shared backend group, the only rule source) and one instance target
group whose two targets are in the node group; a first full reconcile applied their rules."""

from __future__ import annotations

from collections import Counter
from typing import Any

from integration.live_plan.test_inventory import count_calls
from sg_reconciler.core.plan import Authorize, Plan, Revoke
from sg_reconciler.core.scope import Scope

from benchmarks.bench_reads import Account

LOAD_BALANCERS = 6


def event_scope(account: Account, n: int) -> Scope:
    return Scope(target_group_arns=frozenset({account.target_groups[n]}))


def added_target(backend: bool, n: int, port: int) -> tuple[Account, Scope, Counter[str]]:
    """A reconciled account where target group `n` just got a third node on `port`; the
    event's scope; and a counter of the calls from now on."""
    account = Account(LOAD_BALANCERS, backend=backend)
    account.elbv2.register_targets(
        TargetGroupArn=account.target_groups[n],
        Targets=[{"Id": account.instances(0)[2], "Port": port}],
    )
    return account, event_scope(account, n), count_calls(account.ec2, account.elbv2)


def test_a_new_target_is_planned_from_its_own_target_group_alone(aws: Any) -> None:
    account, scope, calls = added_target(backend=False, n=3, port=31500)

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


def test_a_target_taken_away_is_planned_from_the_full_read(aws: Any) -> None:
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


def test_a_shared_backend_group_makes_every_target_group_part_of_the_read(aws: Any) -> None:
    account, scope, calls = added_target(backend=True, n=1, port=31700)

    live = account.plan(scope, narrow=scope)

    # Every load balancer's traffic comes from the backend group: one flow, all of them,
    # so the read is the full one (once), and so is the refresh's.
    assert calls["DescribeTargetHealth"] == LOAD_BALANCERS
    assert live.narrowed is None
    assert isinstance(live.result, Plan)
    assert live.result.steps == account.plan(scope).result.steps  # type: ignore[union-attr]
