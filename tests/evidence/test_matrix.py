"""Fault matrix: every AWS call of the flow crossed with five ways it can go wrong.

Each scenario is a fresh #3639 change on one shared runtime: the previous scenario's Service
is deleted and a new one gets a NodePort above every NodePort so far, so the backend rule of
both node groups must grow (31000-p_prev -> 31000-p_new). The change runs through the real
ASL and handlers while one call fails; the invariant monitor checks every security-group
state between calls; then the fault clears and scheduled reconciles must converge (a fresh
plan has no steps left).

Fault kinds (the error codes per service are in `evidence_kit.ERROR_CODES`):
- throttled: the call is refused before it runs (2 calls in a row).
- denied: IAM refuses the call (every call while the fault is on).
- server_error: the service fails with a 5xx before running the call (2 calls in a row).
- response_lost: the call takes effect and its caller sees a 5xx (1 call).
- died: the call takes effect and the process that made it dies right then (1 call). Model:
  the handler unwinds at that point (nothing after the call runs, as if the process had
  stopped) and the Lambda invocation answers what Lambda answers for a sandbox killed
  mid-invocation, an unhandled `Sandbox.Timedout` error. For `lambda:Invoke` itself the
  handler finishes and its answer is replaced by that failure; for the planner the SQS
  batch is redelivered.

Aiming: faults fire on the first calls after the execution starts, so a describe fault hits
the refresh step (the first reader). The Lambda faults skip the first three invokes (check,
lock, refresh) to hit the first authorize item; the history check below proves it. A
`denied` Invoke fails one call (the apply step is not invoked again after a denial: the
Catch goes to the rollback function). ModifySecurityGroupRules needs a group at its rule
quota: those scenarios set the policy quota to 1, so the planner grows the rule in place.
StartExecution is the planner's call: those scenarios run the planner Lambda with the
scheduled event instead of starting the execution directly.

World moves (`test_world_moves_under_the_plan`): the same change while the world, not a
call, goes wrong: an outside writer revokes or narrows our new rule right before the first
revoke (the live guard stops it), the desired state grows or wants an old rule again during
the settle (the re-plan), and the load balancer loses its selector tag (the brake). Each row
also checks a real flow: the backend group still reaches every node group.

Outcomes: SUCCEEDED, or the error of the failed execution: RolledBack (authorize phase
undone, the old rules intact), RevokeIncomplete (stopped in a safe superset, leftovers
reported), RollbackIncomplete (the rollback could not run: a safe superset), or the step error for "could not lock" / "could not refresh" (AccessDenied,
Sandbox.Timedout); for the planner, its answer and the outcome of what it started.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import botocore.endpoint
import pytest
from evidence.evidence_kit import (
    KINDS,
    MACHINE,
    MATRIX_ROWS,
    Kind,
    NoSleep,
    ScenarioFault,
    converge,
    drop_service,
    expire_locks,
    handler_variables_kept,
    held_locks,
    last_state,
    live_plan,
    monitor_for,
    outcome_of,
    planner_run,
    policy_doc,
    start_plan,
    wait_for,
)
from sg_reconciler.adapters.executions import execution_arn
from sg_reconciler.app.live_plan import LivePlan
from sg_reconciler.core.plan import Modify, Plan
from sg_reconciler.policy import parse_policy_document
from sg_reconciler_tools.demo.play import TEMPLATE, quiet_handlers, reconcile
from sg_reconciler_tools.demo.world import DemoWorld, build_world
from sg_reconciler_tools.local import Fault, FaultInjector, LocalRuntime
from sg_reconciler_tools.local.patching import Patch
from workflow.world_moves import admits, at_the_settle, before_revoke, new_rule_id, set_policy

S = "SUCCEEDED"
# call -> (service, operation, expected outcome per kind in KINDS order)
CALLS: dict[str, tuple[str, str, tuple[str, str, str, str, str]]] = {
    "DescribeSecurityGroupRules": (
        "ec2",
        "DescribeSecurityGroupRules",
        (S, "AccessDenied", S, S, "Sandbox.Timedout"),
    ),
    "DescribeInstances (inventory)": (
        "ec2",
        "DescribeInstances",
        (S, "AccessDenied", S, S, "Sandbox.Timedout"),
    ),
    "DescribeTargetGroups (ELBv2 inventory)": (
        "elbv2",
        "DescribeTargetGroups",
        (S, "AccessDenied", S, S, "Sandbox.Timedout"),
    ),
    "AuthorizeSecurityGroupIngress": (
        "ec2",
        "AuthorizeSecurityGroupIngress",
        (S, "RolledBack", S, S, "RolledBack"),
    ),
    "RevokeSecurityGroupIngress": (
        "ec2",
        "RevokeSecurityGroupIngress",
        (S, "RevokeIncomplete", S, S, "RevokeIncomplete"),
    ),
    "ModifySecurityGroupRules (group at quota)": (
        "ec2",
        "ModifySecurityGroupRules",
        (S, "RevokeIncomplete", S, S, "RevokeIncomplete"),
    ),
    "DynamoDB PutItem (lock)": (
        "dynamodb",
        "PutItem",
        (S, "AccessDenied", S, S, "Sandbox.Timedout"),
    ),
    # Denied renewals: the rollback renews its locks first (it revokes only in groups it still
    # holds), so it cannot run either and stops in a safe superset (here nothing was added).
    "DynamoDB UpdateItem (lease renewal)": (
        "dynamodb",
        "UpdateItem",
        (S, "RollbackIncomplete", S, S, "RolledBack"),
    ),
    # Denied release: the change is applied and reported; the locks stay until their lease ends.
    "DynamoDB DeleteItem (release)": ("dynamodb", "DeleteItem", (S, S, S, S, S)),
    "Lambda Invoke (authorize step)": ("lambda", "Invoke", (S, "RolledBack", S, S, "RolledBack")),
    "StartExecution (planner)": (
        "stepfunctions",
        "StartExecution",
        (
            "planner ok; SUCCEEDED",
            # A scheduled run that cannot plan fails its invocation, so Lambda retries it.
            "planner PlanningFailed; no execution",
            "planner ok; SUCCEEDED",
            "planner ok; SUCCEEDED",
            "planner Sandbox.Timedout; SUCCEEDED",
        ),
    ),
}
COUNTS: dict[Kind, int] = {
    "throttled": 2,
    "denied": 1000,
    "server_error": 2,
    "response_lost": 1,
    "died": 1,
}


@dataclass(frozen=True)
class Scenario:
    call: str
    kind: Kind

    @property
    def service(self) -> str:
        return CALLS[self.call][0]

    @property
    def operation(self) -> str:
        return CALLS[self.call][1]

    @property
    def expected(self) -> str:
        return CALLS[self.call][2][KINDS.index(self.kind)]

    def fault(self) -> ScenarioFault:
        invoke = self.operation == "Invoke"
        count = 1 if invoke and self.kind == "denied" else COUNTS[self.kind]
        return ScenarioFault(
            self.service, self.operation, self.kind, count=count, skip=3 if invoke else 0
        )

    def __str__(self) -> str:
        return f"{self.operation}-{self.kind}"


SCENARIOS = [Scenario(call, kind) for call in CALLS for kind in KINDS]


@dataclass
class Stage:
    world: DemoWorld
    base_policy: str
    port: int = 32500


def next_change(stage: Stage, policy: str) -> LivePlan:
    """Converge under `policy`, then the next #3639 change: the previous scenario's Service
    goes, a new one gets a NodePort 10 above it. Returns the plan it needs."""
    world = stage.world
    set_policy(world, policy)
    assert converge(world), "the world must start converged"
    previous = stage.port
    stage.port += 10
    if previous in world.target_groups:
        drop_service(world, previous)
    world.add_service(stage.port)
    live = live_plan(world)
    assert isinstance(live.result, Plan) and live.result.steps
    return live


@pytest.fixture(scope="module")
def stage() -> Iterator[Stage]:
    quiet_handlers()
    with LocalRuntime(TEMPLATE) as runtime, handler_variables_kept(runtime):
        world = build_world(runtime)
        reconcile(world)
        yield Stage(world, world.policy)


# moto warns that the injected ELBv2 error codes are not in its error shapes; AWS sends them.
@pytest.mark.filterwarnings("ignore:Exception\\(ELBClientError\\):UserWarning")
@pytest.mark.parametrize("scenario", SCENARIOS, ids=str)
def test_fault_matrix(stage: Stage, scenario: Scenario, monkeypatch: pytest.MonkeyPatch) -> None:
    world, runtime = stage.world, stage.world.runtime
    started = time.monotonic()
    # Given a converged world and a new Service whose NodePort is above every other one
    quota_bound = scenario.operation == "ModifySecurityGroupRules"
    live = next_change(stage, policy_doc(world, quota=1) if quota_bound else stage.base_policy)
    if quota_bound:
        assert any(isinstance(s, Modify) for s in live.result.steps), live.result.to_dict()
    before = {(r.key, r.rule_id) for r in world.node_rules()}
    # When the change runs while one call fails
    name = f"m-{scenario}-{stage.port}".replace("_", "-")
    executions: list[dict[str, Any]] = []
    with monitor_for(world, live.desired) as watch, scenario.fault() as fault:
        if scenario.service == "stepfunctions":
            monkeypatch.setattr(botocore.endpoint, "time", NoSleep())
            run = planner_run(world)
            executions = run.executions
            # A restart that found the change applied also ends SUCCEEDED: outcomes as a set.
            ends = ", ".join(sorted({outcome_of(d) for d in executions})) or "no execution"
            outcome = f"planner {run.answer}; {ends}"
            end_state = ", ".join(last_state(runtime, d["executionArn"]) for d in executions)
        else:
            described = wait_for(runtime, start_plan(world, live, name))
            executions = [described]
            outcome = outcome_of(described)
            end_state = last_state(runtime, described["executionArn"])
    monkeypatch.undo()
    rules_after_fault = {(r.key, r.rule_id) for r in world.node_rules()}
    left = held_locks(runtime)
    # Then the fault clears (and, for locks left behind, their lease runs out) and the next
    # scheduled runs converge
    expire_locks(runtime)
    converged = converge(world)
    set_policy(world, stage.base_policy)
    MATRIX_ROWS.append(
        {
            "call": scenario.call,
            "kind": scenario.kind,
            "expected": scenario.expected,
            "outcome": outcome,
            "end state": end_state,
            "fired": len(fault.fired),
            "snapshots": len(watch.snapshots),
            "violations": len(watch.violations),
            "locks left": len(left),
            "converged": converged,
            "seconds": round(time.monotonic() - started, 1),
        }
    )
    assert fault.fired, f"{scenario}: the fault never fired ({fault.calls} calls)"
    watch.assert_clean()
    assert outcome == scenario.expected, f"{scenario}: ended {outcome} at {end_state}"
    assert converged, f"{scenario}: still {live_plan(world).to_dict()}"
    if scenario.operation == "Invoke":
        # The fault hit the first authorize item, as aimed.
        history = runtime.history(executions[0]["executionArn"])
        assert ("Authorize the rules of a batch of groups", "TaskFailed") in history, history
    if outcome == "RolledBack":
        # The authorize phase was undone: exactly the old rules, with their ids.
        assert rules_after_fault == before


@dataclass(frozen=True)
class WorldMove:
    """The world changing around one step of a running change, and how the run must end."""

    call: str  # the step the world moves around
    kind: str  # what moves
    expected: str  # outcome, as in the fault rows
    end_state: str  # the last state the console shows ("" for no execution)

    def __str__(self) -> str:
        return self.kind.replace(" ", "-")


STOPPED = "Stopped with stale rules left"
LATE_BATCH: dict[str, int] = {}  # execution -> the revoke batch stopped in its backoff
MOVES = [
    WorldMove("RevokeSecurityGroupIngress", "outside revoke", "RevokeIncomplete", STOPPED),
    WorldMove("RevokeSecurityGroupIngress", "outside narrow", "RevokeIncomplete", STOPPED),
    WorldMove("Wait (settle)", "desired grows", S, "Revokes left to the next run"),
    WorldMove("Wait (settle)", "wanted again", S, "Revokes left to the next run"),
    WorldMove("Planner (brake)", "selection emptied", "planner ok; no execution", ""),
    # The run itself slowed or stopped. The revokes are throttled; while a step
    # backs off, an outside writer revokes our new rules (each retry is guarded again), or
    # an operator stops the execution (the janitor frees its locks at once, the late
    # attempt is fenced off: LockLost, no call); or the stop comes while the execution is
    # locking its groups (the lock step gives back what it took: no lock left).
    WorldMove(
        "RevokeSecurityGroupIngress (backoff)",
        "outside revoke in backoff",
        "RevokeIncomplete",
        STOPPED,
    ),
    WorldMove(
        "RevokeSecurityGroupIngress (backoff)",
        "stopped in backoff",
        "ABORTED",
        "Revoke the stale rules of a batch of groups",
    ),
    WorldMove("DynamoDB PutItem (lock)", "stopped while locking", "ABORTED", "Lock the groups"),
]


def _move(stage: Stage, move: WorldMove, fired: list[str], name: str) -> Patch | None:
    """Arm the move for execution `name`; it records itself in `fired` when it happens."""
    world, port = stage.world, stage.port
    runtime = world.runtime
    clients = runtime.clients
    victim = sorted(world.node_groups.values())[0]
    arn = execution_arn(runtime.arn(MACHINE), name)

    def act(what: str, change: Any) -> Any:
        return lambda: (fired.append(what), change())

    if move.kind in ("outside revoke in backoff", "stopped in backoff"):
        # For the outside writer, every revoke call is throttled while the move is armed: no
        # group's old rule can go before it writes, and each retry is guarded again first.
        # For the stop, the first call: the other batches end, so the janitor gets its turn.
        count = 1 if move.kind == "stopped in backoff" else 1000
        throttled = FaultInjector(
            Fault("ec2", "RevokeSecurityGroupIngress", "RequestLimitExceeded", count=count)
        )
        throttled.__enter__()

        running = threading.local()  # the revoke batch this thread runs

        def note_batch(function: str, event: Any) -> None:
            if function == "ApplyStepsFunction":
                running.batch = event.get("batch")

        def in_backoff(_seconds: float) -> None:
            if fired or not throttled.fired:
                return
            if move.kind == "stopped in backoff":
                LATE_BATCH[name] = running.batch
                with runtime.step_aside():
                    fired.append("stopped")
                    clients.stepfunctions.stop_execution(executionArn=arn, cause="operator")
                return
            fired.append("revoked")
            for group in world.node_groups.values():
                clients.ec2.revoke_security_group_ingress(
                    GroupId=group, SecurityGroupRuleIds=[new_rule_id(world, group, port)]
                )

        listening = runtime.pacer_sleeps.subscribe(in_backoff)
        noting = runtime.before_invoke(note_batch)
        return Patch(
            move.kind,
            lambda: (listening.undo(), noting.undo(), throttled.__exit__(None, None, None)),
        )
    if move.kind == "stopped while locking":

        def at_the_lock_step(function: str, event: Any) -> None:
            if function == "AcquireLocksFunction" and event.get("holder") == name and not fired:
                fired.append("stopped")
                clients.stepfunctions.stop_execution(executionArn=arn, cause="operator")

        return runtime.before_invoke(at_the_lock_step)

    if move.kind == "outside revoke":
        return before_revoke(
            world,
            victim,
            act(
                "revoked",
                lambda: clients.ec2.revoke_security_group_ingress(
                    GroupId=victim, SecurityGroupRuleIds=[new_rule_id(world, victim, port)]
                ),
            ),
        )
    if move.kind == "outside narrow":
        narrowed = {"IpProtocol": "tcp", "FromPort": 31000, "ToPort": 31200}
        narrowed["ReferencedGroupId"] = world.backend_group  # type: ignore[assignment]
        return before_revoke(
            world,
            victim,
            act(
                "narrowed",
                lambda: clients.ec2.modify_security_group_rules(
                    GroupId=victim,
                    SecurityGroupRules=[
                        {
                            "SecurityGroupRuleId": new_rule_id(world, victim, port),
                            "SecurityGroupRule": narrowed,  # type: ignore[typeddict-item]
                        }
                    ],
                ),
            ),
        )
    if move.kind == "desired grows":
        return at_the_settle(world, act("service added", lambda: world.add_service(port + 5)))
    if move.kind == "wanted again":
        elbv2: Any = clients.elbv2
        tg = world.target_groups[port]
        targets = [{"Id": i, "Port": port} for i in world.instances]
        return at_the_settle(
            world,
            act(
                "targets gone",
                lambda: elbv2.deregister_targets(TargetGroupArn=tg, Targets=targets),
            ),
        )
    for key in parse_policy_document(stage.base_policy).load_balancers.tags:
        clients.elbv2.remove_tags(ResourceArns=[world.load_balancer_arn], TagKeys=[key])
    fired.append("selector tag stripped")
    return None


def _undo_move(stage: Stage, move: WorldMove) -> None:
    """Put the world back as the next scenario expects it (one Service, tags on)."""
    world = stage.world
    if move.kind == "desired grows":
        drop_service(world, stage.port + 5)
    if move.kind == "selection emptied":
        tags = parse_policy_document(stage.base_policy).load_balancers.tags
        world.runtime.clients.elbv2.add_tags(
            ResourceArns=[world.load_balancer_arn],
            Tags=[{"Key": k, "Value": v} for k, v in tags.items()],
        )


def late_step_ended(runtime: LocalRuntime, name: str, move: WorldMove) -> None:
    """Wait until the stopped execution's last step has answered (a stopped execution's
    Lambda invocation runs on); a late revoke must have made no call (LockLost)."""
    function = (
        "AcquireLocksFunction" if move.kind == "stopped while locking" else "ApplyStepsFunction"
    )
    deadline = time.monotonic() + 60
    while True:
        ended = [
            i
            for i in runtime.invocations
            if i.logical_id == function
            and i.event.get("holder") == name
            and (
                function == "AcquireLocksFunction"
                or (i.event.get("phase") == "revoke" and i.event.get("batch") == LATE_BATCH[name])
            )
        ]
        if ended:
            break
        assert time.monotonic() < deadline, f"{move}: the stopped execution's step never ended"
        time.sleep(0.05)
    expected = "ExecutionStopped" if function == "AcquireLocksFunction" else "LockLost"
    assert any(i.error_type == expected for i in ended), [
        (i.error_type, i.error_message) for i in ended
    ]


@pytest.mark.parametrize("move", MOVES, ids=str)
def test_world_moves_under_the_plan(stage: Stage, move: WorldMove) -> None:
    world, runtime = stage.world, stage.world.runtime
    started = time.monotonic()
    # Given a converged world and a new Service whose NodePort is above every other one
    live = next_change(stage, stage.base_policy)
    # When the world moves during the change
    fired: list[str] = []
    name = f"w-{move}-{stage.port}"
    with monitor_for(world, live.desired) as watch:
        armed = _move(stage, move, fired, name)
        if move.kind == "selection emptied":
            run = planner_run(world)
            ends = ", ".join(sorted({outcome_of(d) for d in run.executions})) or "no execution"
            outcome, end_state = f"planner {run.answer}; {ends}", ""
        else:
            described = wait_for(runtime, start_plan(world, live, name))
            outcome = outcome_of(described)
            if move.kind.startswith("stopped"):
                # ABORTED at once; the step that was running goes on until it ends
                late_step_ended(runtime, name, move)
            end_state = last_state(runtime, described["executionArn"])
        if armed is not None:
            armed.undo()
    left = held_locks(runtime)
    # Then every node group still admits the backend on a port both plans need
    flows = all(admits(world, g, 31500) for g in world.node_groups.values())
    # And once the world is put back, the next scheduled runs converge
    _undo_move(stage, move)
    expire_locks(runtime)
    converged = converge(world)
    MATRIX_ROWS.append(
        {
            "call": move.call,
            "kind": move.kind,
            "expected": move.expected,
            "outcome": outcome,
            "end state": end_state,
            "fired": len(fired),
            "snapshots": len(watch.snapshots),
            "violations": len(watch.violations),
            "locks left": len(left),
            "converged": converged,
            "seconds": round(time.monotonic() - started, 1),
        }
    )
    assert fired, f"{move}: the world never moved"
    if move.kind.startswith("stopped"):
        assert left == [], f"{move}: locks outlived the execution"
    watch.assert_clean()
    assert flows, f"{move}: the backend lost a node group"
    assert (outcome, end_state) == (move.expected, move.end_state), f"{move}: {end_state}"
    assert converged, f"{move}: still {live_plan(world).to_dict()}"
