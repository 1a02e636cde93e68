"""Adapters built from a function's settings: what handlers pass to the use cases. The one
place the Lambdas' AWS clients are built.

The use cases type against the ports of `sg_reconciler.core.ports`; `_adapters_fit_ports`
below has mypy check that each adapter satisfies its port."""

from __future__ import annotations

import time
from collections.abc import Sequence
from functools import cache
from typing import TYPE_CHECKING, Any

from sg_reconciler.adapters import pacing
from sg_reconciler.adapters.aws import client, read_client
from sg_reconciler.adapters.pacing import Pacer, ReadPacer
from sg_reconciler.core.pacing import pacing_for, read_pace

if TYPE_CHECKING:
    # Cold start (docs/extending.md, "Cold start"): the inventory reader, the policy and the live planner are
    # imported by the functions that plan (live_planner), not by every step that imports this.
    from sg_reconciler.adapters.deployment import RevocationLog
    from sg_reconciler.adapters.index_table import IndexTable
    from sg_reconciler.adapters.inventory import AccountInventory
    from sg_reconciler.adapters.locks import GroupLocks
    from sg_reconciler.adapters.plan_store import PlanStore
    from sg_reconciler.adapters.security_groups import SecurityGroupRules
    from sg_reconciler.app.indexed_plan import IndexedReads
    from sg_reconciler.app.live_plan import LivePlan, LockedReplan, Replan
    from sg_reconciler.app.planned import Planned
    from sg_reconciler.core.policy import Policy
    from sg_reconciler.core.ports import (
        ExecutionStarter,
        InventoryIndex,
        InventoryReader,
        LockStore,
        PlanStorage,
        RevocationWindow,
        RuleStore,
        StartOutcome,
        WritePacer,
    )
    from sg_reconciler.core.scope import Scope
    from sg_reconciler.settings import JanitorSettings, PlannerSettings, StepSettings


READ_MARGIN_SECONDS = 20  # of a function's time, kept after its reads to plan and report


@cache
def _read_pacer(reads_per_second: float) -> ReadPacer:
    return ReadPacer(read_pace(reads_per_second))


def forget_read_pacers() -> None:
    """Start the process's read buckets afresh (a new container, or another clock)."""
    _read_pacer.cache_clear()


def read_pacer(
    config: StepSettings | PlannerSettings | None, seconds_left: float | None = None
) -> ReadPacer:
    """The process's read pacer at the deployment's pace (one per process, so the threads and
    the successive invocations of a function share its buckets), with this invocation's
    deadline: `seconds_left` less a margin, or none."""
    deadline = None
    if seconds_left is not None:
        deadline = pacing.clock() + max(0.0, seconds_left - READ_MARGIN_SECONDS)
    reads = config.reads_per_second if config is not None else read_pace().reads_per_second
    return _read_pacer(reads).until(deadline)


def group_rules(config: StepSettings | None = None, seconds_left: float = 0) -> SecurityGroupRules:
    """The steps' EC2 reader and writer; its reads are paced at the deployment's read pace;
    with `config`, writes are paced at its rate and a throttled write backs off in the step
    for `seconds_left` (less a margin to report)."""
    from sg_reconciler.adapters.security_groups import SecurityGroupRules

    ec2 = read_pacer(config, seconds_left or None).install(client("ec2"))
    if config is None:
        return SecurityGroupRules(ec2)
    deadline = pacing.clock() + max(0.0, seconds_left - 15)
    return SecurityGroupRules(ec2, Pacer(pacing_for(config.writes_per_second), deadline))


def group_locks(config: StepSettings | JanitorSettings) -> GroupLocks:
    from sg_reconciler.adapters.locks import GroupLocks

    return GroupLocks(client("dynamodb"), config.lock_table)


def execution_starter(config: PlannerSettings, attempts: int = 1) -> ExecutionStarter:
    """Start an execution of the deployment's state machine (`StartOutcome`)."""

    from sg_reconciler.adapters.executions import start_execution

    def start(name: str, payload: dict[str, Any]) -> StartOutcome:
        return start_execution(
            client("stepfunctions", attempts), config.state_machine_arn, name, payload
        )

    return start


def plan_store(config: StepSettings | PlannerSettings, attempts: int = 3) -> PlanStore:
    """The plan store; its reads and writes are cheap to retry, so the client retries them."""
    from sg_reconciler.adapters.plan_store import PlanStore

    return PlanStore(client("dynamodb", attempts), config.plan_table)


def live_planner(
    config: StepSettings | PlannerSettings, attempts: int = 1, seconds_left: float | None = None
) -> tuple[Replan, int]:
    """The planner's read-derive-plan for this deployment, and the policy's settle time."""
    replan, _, settle = planners(config, attempts, seconds_left)
    return replan, settle


def planners(
    config: StepSettings | PlannerSettings, attempts: int = 1, seconds_left: float | None = None
) -> tuple[Replan, LockedReplan, int]:
    """The planner's read-derive-plan for this deployment, the same under the locks from
    the locked groups' rules and the plan's closure (`compute_locked_plan`), and the
    policy's settle time.

    Its EC2 and ELBv2 reads are paced at the deployment's read pace and a throttled read is
    retried until `seconds_left` (less a margin) has passed (invariant 15). The owner name
    comes from the stack (one source); the policy may not name another, and the run refuses
    to start while another stack claims the name (invariant 10)."""
    from sg_reconciler.adapters.deployment import (
        BrakeReleases,
        RevocationLog,
        check_owner_claim,
    )
    from sg_reconciler.adapters.inventory import AccountInventory
    from sg_reconciler.adapters.policy_store import load_policy_from_ssm
    from sg_reconciler.app.indexed_plan import held_while_unread
    from sg_reconciler.app.live_plan import compute_live_plan, compute_locked_plan

    policy = load_policy_from_ssm(client("ssm", attempts), config.policy_parameter, config.owner)
    check_owner_claim(
        client("ssm", attempts), config.owner_claim_parameter, config.stack_id, config.owner
    )
    releases = BrakeReleases(client("dynamodb", attempts), config.lock_table)
    window = RevocationLog(
        client("dynamodb", attempts), config.lock_table, config.brake_window_seconds
    )
    reads = read_pacer(config, seconds_left)
    ec2 = reads.install(read_client("ec2", attempts))
    elbv2 = reads.install(read_client("elbv2", attempts))

    released = releases.released if config.lock_table else None
    indexed = index_reads(config, policy, ec2, elbv2, attempts, seconds_left)

    def recorded(live: LivePlan) -> LivePlan:
        if live.brake is not None and not live.released and config.lock_table:
            releases.record_held(live.brake.fingerprint, live.brake.reason)
        return live

    def account() -> AccountInventory:
        return AccountInventory(ec2, elbv2, policy, read_client("service-quotas", attempts))

    def replan(scope: Scope, narrow: Scope | None = None) -> LivePlan:
        live = compute_live_plan(
            account() if indexed is None else indexed,
            policy,
            scope,
            narrow=narrow,
            partial=True,
            released=released,
            window=window if config.lock_table else None,
        )
        return recorded(live if indexed is None else held_while_unread(live, indexed))

    def locked(groups: Sequence[str], planned: Planned) -> LivePlan:
        reader = locked_reads(config, policy, account())
        return recorded(compute_locked_plan(reader, policy, groups, planned, released=released))

    return replan, locked, policy.settle_seconds


def index_table(config: PlannerSettings, attempts: int = 3) -> IndexTable | None:
    """The inventory index, when the deployment keeps one."""
    from sg_reconciler.adapters.index_table import IndexTable

    return (
        IndexTable(client("dynamodb", attempts), config.index_table) if config.index_table else None
    )


def index_reads(
    config: StepSettings | PlannerSettings,
    policy: Policy,
    ec2: Any,
    elbv2: Any,
    attempts: int = 1,
    seconds_left: float | None = None,
) -> IndexedReads | None:
    """The planner's reader through the inventory index (app/indexed_plan.py), or None:
    the steps, a deployment without the index, and policies that admit load balancers by
    address read the account. The schedule's ELBv2 reads (its listing, then its slice of
    target groups) are capped by what 80% of the invocation's time allows at the read pace
    (the rest for EC2's reads, paced apart, and planning)."""
    from sg_reconciler.adapters.index_reads import IndexFetch
    from sg_reconciler.adapters.inventory import AccountInventory
    from sg_reconciler.app.indexed_plan import IndexedReads, uses_index
    from sg_reconciler.settings import PlannerSettings

    if not isinstance(config, PlannerSettings) or not uses_index(policy):
        return None
    index = index_table(config, attempts)
    if index is None:
        return None
    budget = 86_400.0 if seconds_left is None else max(0.0, seconds_left - READ_MARGIN_SECONDS)
    max_fresh = int(config.reads_per_second * budget * 0.8)
    quotas = read_client("service-quotas", attempts)
    return IndexedReads(
        index,
        IndexFetch(ec2, elbv2, policy, quotas),
        AccountInventory(ec2, elbv2, policy, quotas),
        time.time(),
        config.verification_period_seconds,
        max_fresh,
    )


def locked_reads(
    config: StepSettings | PlannerSettings, policy: Policy, account: AccountInventory
) -> InventoryReader:
    """The steps' reader under the locks: through the inventory index when the deployment
    keeps one (app/locked_index.py: a revoke reads fresh only the target groups that could
    use what it takes away), else the account's (`account`)."""
    from sg_reconciler.app.indexed_plan import uses_index
    from sg_reconciler.settings import StepSettings

    if not isinstance(config, StepSettings) or not config.index_table or not uses_index(policy):
        return account
    from sg_reconciler.adapters.index_table import IndexTable
    from sg_reconciler.adapters.locked_index_reads import LockedIndexFetch
    from sg_reconciler.app.locked_index import IndexedLockedReads

    return IndexedLockedReads(
        IndexTable(client("dynamodb", 3), config.index_table),
        LockedIndexFetch(account.ec2, account.elbv2, policy, account.quotas),
        account,
        time.time(),
        config.verification_period_seconds,
    )


def _adapters_fit_ports(
    rules: SecurityGroupRules,
    locks: GroupLocks,
    plans: PlanStore,
    pacer: Pacer,
    window: RevocationLog,
    account: AccountInventory,
    index: IndexTable,
) -> tuple[
    RuleStore, LockStore, PlanStorage, InventoryReader, WritePacer, RevocationWindow, InventoryIndex
]:
    """Never called: mypy checks that each adapter satisfies its port (a method renamed or a
    signature changed on one side fails `make typecheck`). `execution_starter` is checked by
    its return type."""
    return rules, locks, plans, account, pacer, window, index
