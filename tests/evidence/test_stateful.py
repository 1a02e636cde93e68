"""Stateful property test: random world changes and faults, the invariants at every state.

Hypothesis drives the #3639 world on one runtime through random sequences of changes: new
Services (random NodePorts, targets on one or both node groups), deleted Services (listener
and target group), targets moving from one node group to the other, a person revoking one
owned rule or adding an unmanaged one, and quota changes in the policy; interleaved with
reconciles (the planner with the scheduled event, then its execution), some while a random
fault is on. Every security-group state between calls of every reconcile must keep
invariants 1-3, OLD being the state when the reconcile starts. When the faults stop,
scheduled reconciles must reach the desired state (a fresh plan has no steps) and leave
every unmanaged rule as the person left it.

The changes here send no CloudTrail event, as if every event were lost: the schedule finds
what the inventory index missed when it verifies the target group, the oldest first, one a
run in a world this small (docs/limits.md, the inventory index), so convergence may take
one pass over the target groups plus the two reconciles a change needs. Until then the
planner plans from an index that lags the account, as designed: an authorization may come
from it (a later run removes the extra rule), and its rule ranges may join other ports than
the account's would. So NEW is what the run could know and must keep: the traffic live
targets use, each needed port exactly (`exact_needs`), and the desired rules its executions
were planned toward (`planned_desired`). Nothing outside OLD and that may be allowed, and of
OLD none of it may be lost: a revoke never takes a port a live target uses, whatever the
index says, nor anything its own plan wants.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import botocore.endpoint
import pytest
from botocore.exceptions import ClientError
from evidence.evidence_kit import (
    Kind,
    NoSleep,
    ScenarioFault,
    converge,
    drop_service,
    end_the_brake_window,
    exact_needs,
    expire_locks,
    handler_variables_kept,
    live_plan,
    monitor_for,
    plan_steps,
    planned_desired,
    planner_run,
    policy_doc,
)
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)
from sg_reconciler.core.rules import OWNER_TAG_KEY
from sg_reconciler_tools.demo.play import TEMPLATE, quiet_handlers, reconcile
from sg_reconciler_tools.demo.world import DemoWorld, build_world
from sg_reconciler_tools.local import LocalRuntime
from workflow.world_moves import set_policy

Fault = tuple[str, str, Kind] | None
FAULTS: list[Fault] = [
    None,
    ("ec2", "AuthorizeSecurityGroupIngress", "denied"),
    ("ec2", "AuthorizeSecurityGroupIngress", "died"),
    ("ec2", "AuthorizeSecurityGroupIngress", "response_lost"),
    ("ec2", "RevokeSecurityGroupIngress", "denied"),
    ("ec2", "RevokeSecurityGroupIngress", "died"),
    ("ec2", "ModifySecurityGroupRules", "denied"),
    ("ec2", "DescribeSecurityGroupRules", "throttled"),
    ("dynamodb", "PutItem", "died"),
    ("dynamodb", "DeleteItem", "denied"),
    ("lambda", "Invoke", "server_error"),
]
FAULT = st.sampled_from(FAULTS)
# Rules pick among what exists by index: what they draw must not depend on the world, or
# hypothesis sees the same choices replay differently (FlakyStrategyDefinition).
PICK = st.integers(0, 1000)
UNMANAGED_CIDR = "10.99.0.0/16"
QUOTAS = (2, 3, 60)


class WorldChanges(RuleBasedStateMachine):
    """One example = a sequence of changes on the shared world; `world` is set by the test."""

    world: DemoWorld
    base_policy: str
    reconciles: list[str]
    failures: list[str]

    def __init__(self) -> None:
        super().__init__()
        self.quota = 60
        self.unmanaged: set[tuple[str, str]] = set()  # (group, rule id) a person added
        self.opening = False  # the example's first reconcile (see `start_from_a_drift`)

    @property
    def runtime(self) -> LocalRuntime:
        return self.world.runtime

    def groups(self) -> list[str]:
        return sorted(self.world.node_groups.values())

    def rules_of(self, group: str) -> list[Any]:
        ec2 = self.runtime.clients.ec2
        docs = ec2.describe_security_group_rules(Filters=[{"Name": "group-id", "Values": [group]}])
        return [r for r in docs["SecurityGroupRules"] if not r["IsEgress"]]

    @initialize(pick=PICK, fault=FAULT)
    def start_from_a_drift(self, pick: int, fault: Fault) -> None:
        """From the converged world, a person revokes an owned rule first, and a reconcile
        runs under a drawn fault: a drift any scheduled run sees, whatever its index knows,
        so nearly every example applies a plan at least once (a fault that fails the planner
        starts none). The other changes send no event, and a run may not see them yet: a
        whole example of them alone could apply nothing."""
        self.converge_from_the_base_policy()
        self.opening = True
        try:
            self.person_revokes_an_owned_rule(pick, fault)
        finally:
            self.opening = False

    def converge_from_the_base_policy(self) -> None:
        set_policy(self.world, self.base_policy)
        expire_locks(self.runtime)
        # Each example is its own day on the shared world: the brake (its window a day) would
        # otherwise count every earlier example's removals and rightly hold the revokes.
        end_the_brake_window(self.runtime)
        assert converge(self.world), live_plan(self.world).to_dict()
        for group in self.groups():
            for r in self.rules_of(group):
                if not any(t["Key"] == OWNER_TAG_KEY for t in r.get("Tags", [])):
                    self.unmanaged.add((group, r["SecurityGroupRuleId"]))

    # World changes ------------------------------------------------------------------

    @rule(port=st.integers(30000, 32767), where=st.sampled_from(["a", "b", "ab"]), fault=FAULT)
    def new_service(self, port: int, where: str, fault: Fault) -> None:
        if port not in self.world.target_groups:
            nodes = [i for n in where for i in self.instances_of(f"nodes-{n}")]
            self.world.add_service(port, nodes)
        self.reconcile_under(fault)

    @rule(pick=PICK, fault=FAULT)
    def delete_service(self, pick: int, fault: Fault) -> None:
        ports = sorted(self.world.target_groups)
        if len(ports) > 1:
            drop_service(self.world, ports[pick % len(ports)])
        self.reconcile_under(fault)

    @rule(pick=PICK, to_a=st.booleans(), fault=FAULT)
    def move_targets(self, pick: int, to_a: bool, fault: Fault) -> None:
        """Targets move between node groups: deregistered from one, registered on the other."""
        ports = sorted(self.world.target_groups)
        port = ports[pick % len(ports)]
        tg = self.world.target_groups[port]
        source, target = ("nodes-b", "nodes-a") if to_a else ("nodes-a", "nodes-b")
        elbv2 = self.runtime.clients.elbv2
        health = elbv2.describe_target_health(TargetGroupArn=tg)["TargetHealthDescriptions"]
        registered = {d["Target"]["Id"] for d in health}
        leaving = [{"Id": i, "Port": port} for i in self.instances_of(source) if i in registered]
        if leaving:
            elbv2.deregister_targets(TargetGroupArn=tg, Targets=leaving)  # type: ignore[arg-type]
        arriving = [{"Id": i, "Port": port} for i in self.instances_of(target)]
        elbv2.register_targets(TargetGroupArn=tg, Targets=arriving)  # type: ignore[arg-type]
        self.reconcile_under(fault)

    @rule(pick=PICK, fault=FAULT)
    def person_revokes_an_owned_rule(self, pick: int, fault: Fault) -> None:
        owned = [
            (g, r["SecurityGroupRuleId"])
            for g in self.groups()
            for r in self.rules_of(g)
            if any(t["Key"] == OWNER_TAG_KEY for t in r.get("Tags", []))
        ]
        if owned:
            group, rule_id = owned[pick % len(owned)]
            self.runtime.clients.ec2.revoke_security_group_ingress(
                GroupId=group, SecurityGroupRuleIds=[rule_id]
            )
        self.reconcile_under(fault)

    @rule(pick=PICK, port=st.integers(1024, 65535), backend_peer=st.booleans(), fault=FAULT)
    def person_adds_an_unmanaged_rule(
        self, pick: int, port: int, backend_peer: bool, fault: Fault
    ) -> None:
        """At most one per group, and only while the group has room under the policy quota."""
        group = self.groups()[pick % len(self.groups())]
        if any(g == group for g, _ in self.unmanaged) or len(self.rules_of(group)) >= self.quota:
            self.reconcile_under(fault)
            return
        peer: dict[str, Any] = (
            {"UserIdGroupPairs": [{"GroupId": self.world.backend_group}]}
            if backend_peer
            else {"IpRanges": [{"CidrIp": UNMANAGED_CIDR}]}
        )
        try:
            added = self.runtime.clients.ec2.authorize_security_group_ingress(
                GroupId=group,
                IpPermissions=[{"IpProtocol": "tcp", "FromPort": port, "ToPort": port, **peer}],
            )
        except ClientError as error:  # the very rule exists already (a one-port Service's)
            assert error.response["Error"]["Code"] == "InvalidPermission.Duplicate", error
            added = {"SecurityGroupRules": []}
        for r in added["SecurityGroupRules"]:
            self.unmanaged.add((group, r["SecurityGroupRuleId"]))
        self.reconcile_under(fault)

    @rule(quota=st.sampled_from(QUOTAS), fault=FAULT)
    def change_the_quota(self, quota: int, fault: Fault) -> None:
        """Only to a quota every group fits in now (AWS does not lower a quota below use)."""
        if all(len(self.rules_of(g)) <= quota for g in self.groups()):
            self.quota = quota
            set_policy(self.world, policy_doc(self.world, quota=quota))
        self.reconcile_under(fault)

    # Reconciles -------------------------------------------------------------------------

    def reconcile_under(self, fault: Fault) -> None:
        """A scheduled reconcile while `fault` is on; every state it passes must be safe."""
        with self.noted(f"reconcile under {fault}"):
            self._reconcile_under(fault)

    @contextmanager
    def noted(self, what: str) -> Iterator[None]:
        """Keep the first failure: hypothesis replays a failing example to report it, and on a
        shared world the replay differs (it then reports FlakyStrategyDefinition instead)."""
        try:
            yield
        except Exception as error:
            self.failures.append(f"{what}: {type(error).__name__}: {error}")
            raise

    def _reconcile_under(self, fault: Fault) -> None:
        needs = exact_needs(self.world)
        with monitor_for(self.world, needs) as watch:
            if fault is None:
                run = planner_run(self.world)
            else:
                service, operation, kind = fault
                count = 1000 if kind == "denied" else 1
                skip = 3 if operation == "Invoke" else 0
                with ScenarioFault(service, operation, kind, count=count, skip=skip):
                    run = planner_run(self.world)
        ends = [str(d.get("error") or d["status"]) for d in run.executions]
        found = watch.violations_against([*needs, *planned_desired(self.world, run.executions)])
        opening = "opening, " if self.opening else ""
        self.reconciles.append(
            f"{opening}{fault}: planner {run.answer}, executions {ends}, "
            f"{len(watch.snapshots)} snapshots, {len(found)} violations"
        )
        assert not found, "\n".join(str(violation) for violation in found)

    @rule()
    def faults_stop_and_it_converges(self) -> None:
        self.converges()

    def converges(self) -> None:
        with self.noted("convergence after the faults stop"):
            expire_locks(self.runtime)  # a dead execution's lease runs out
            rounds = 2 + len(self.world.target_groups)  # one verification pass, then apply
            converged = converge(self.world, rounds, pause=1.1)
            assert converged, json.dumps(live_plan(self.world).to_dict())[:2000]

    @invariant()
    def unmanaged_rules_are_never_touched(self) -> None:
        present = {(g, r["SecurityGroupRuleId"]) for g in self.groups() for r in self.rules_of(g)}
        with self.noted("unmanaged rules kept"):
            assert self.unmanaged <= present, self.unmanaged - present

    def teardown(self) -> None:
        try:
            self.converges()
        finally:
            # The next example starts from the same world: drop the person's rules.
            for group, rule_id in self.unmanaged:
                self.runtime.clients.ec2.revoke_security_group_ingress(
                    GroupId=group, SecurityGroupRuleIds=[rule_id]
                )

    def instances_of(self, node_group: str) -> list[str]:
        order = ["nodes-a", "nodes-b"]
        index = order.index(node_group)
        return self.world.instances[2 * index : 2 * index + 2]


@pytest.fixture(scope="module")
def world() -> Iterator[DemoWorld]:
    quiet_handlers()
    with LocalRuntime(TEMPLATE) as runtime, handler_variables_kept(runtime):
        built = build_world(runtime)
        reconcile(built)
        yield built


def revoke_owned_rules(world: DemoWorld) -> int:
    """A person deletes every rule the reconciler owns in the node groups (drift)."""
    ec2 = world.runtime.clients.ec2
    revoked = 0
    for owned in world.node_rules():
        if owned.owned_by("sg-reconciler"):
            ec2.revoke_security_group_ingress(
                GroupId=owned.group_id, SecurityGroupRuleIds=[owned.rule_id or ""]
            )
            revoked += 1
    return revoked


def test_drift_back_to_a_plan_applied_minutes_ago_is_repaired_by_the_next_run(
    world: DemoWorld,
) -> None:
    """Found by the stateful test: the same plan twice within one 10-minute name bucket.

    Execution names are the plan's hash plus a 10-minute bucket, so a redelivered trigger
    is a no-op. But when the world drifts back (a person deletes the rules the reconciler
    just created), the next plan has the same steps, hence the same name, and the planner
    took the earlier SUCCEEDED execution for a duplicate: nothing ran until the bucket
    changed, and the drift stayed open that long (invariant 6).
    """
    # Given the reconciler has just created its rules
    assert revoke_owned_rules(world) == 2
    first = planner_run(world).executions
    assert [d["status"] for d in first] == ["SUCCEEDED"] and plan_steps(world) == 0
    # When a person deletes them again, minutes later
    assert revoke_owned_rules(world) == 2
    # Then the next scheduled run applies the same plan again, and the rules are back
    second = planner_run(world).executions
    assert [d["status"] for d in second] == ["SUCCEEDED"], second
    assert second[0]["name"].split("-")[0] == first[0]["name"].split("-")[0]  # the same plan
    assert plan_steps(world) == 0


def test_random_changes_and_faults_keep_the_invariants_and_converge(
    world: DemoWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(botocore.endpoint, "time", NoSleep())
    WorldChanges.world = world
    WorldChanges.base_policy = world.policy
    WorldChanges.reconciles = []
    WorldChanges.failures = []
    try:
        run_state_machine_as_test(
            WorldChanges,
            settings=settings(
                # 6 with the ci profile (60 examples), more with dev and thorough.
                max_examples=max(6, settings().max_examples // 10),
                stateful_step_count=6,
                deadline=None,
                # No shrinking: on one shared world a replay is not a clean re-run, and the
                # failure report already lists the steps.
                phases=[Phase.explicit, Phase.reuse, Phase.generate],
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
            ),
        )
    except Exception as error:
        log = "\n".join(WorldChanges.reconciles)
        first = WorldChanges.failures[0] if WorldChanges.failures else repr(error)
        raise AssertionError(f"first failure: {first}\nreconciles:\n{log}") from error
    log = "\n".join(WorldChanges.reconciles)
    # The openings' drift repairs, under their faults, are what each example is sure to
    # apply; the random changes' reconciles add what a run happens to see.
    openings = [line for line in WorldChanges.reconciles if line.startswith("opening, ")]
    applied = sum(1 for line in openings if "executions []" not in line)
    assert applied >= len(openings) // 2, (
        f"most examples' opening drift was not repaired; the machine tested little:\n{log}"
    )
