"""Benchmark: the reads of a scheduled execution and of an event-driven one-target change,
under AWS's read buckets (`AwsReadLimits`, on a model clock), in the AWS Load Balancer
Controller's layout, on this tree's code and on the code before the reads under the locks
were bounded by the plan's closure (docs/architecture.md, Reads).

    .venv/bin/python -m benchmarks.bench_locked_reads [--target-groups 100] [--before REF]

Account: one cluster, two node groups (two instances each) tagged with the cluster tag, the
controller's shared backend group on every NLB, `--per-lb` NodePort target groups (instance
targets, every node) per NLB; the policy is the controller's (one min..max range per node
group from the backend group). Reconciled first. Then:
- scheduled: a Service whose events were missed (a target group on a NodePort above the
  range), found by the drift-repair schedule: the planner, then the execution to
  `Changes applied` (the range grows: authorize the wider rule, revoke the old one);
- event: one target registered on a new port above the range, its RegisterTargets event
  through EventBridge and SQS: the planner, then the execution.
Each gives ELBv2 and EC2 describes and model seconds, for the planner and for the steps under
the locks (from the refresh's first invocation to the execution's end). The code before is
this module run on `git archive REF` (its layers and tools first on PYTHONPATH).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable
from io import BytesIO
from pathlib import Path
from typing import Any

from sg_reconciler_tools.demo.play import TEMPLATE, deliver_events, quiet_handlers, run_planner
from sg_reconciler_tools.demo.world import (
    CLUSTER_TAG,
    IMAGE_ID,
    REGION,
    DemoWorld,
    cloudtrail_event,
    scheduled_event,
)
from sg_reconciler_tools.local import LocalRuntime
from sg_reconciler_tools.local.rate_limit import AwsReadLimits, ScaledClock

ROOT = Path(__file__).resolve().parents[1]
BEFORE = "299f3b1"  # before the narrow reads under the locks (docs/architecture.md, "Reads")
FIRST_PORT = 30000
TIMEOUT = 3600.0  # wall seconds an execution may take here
SCALE = 10.0  # model seconds per wall second (the clock stands still while moto serves)


def build(runtime: LocalRuntime, target_groups: int, per_lb: int) -> DemoWorld:
    """The module docstring's account (moto, before the read model is on)."""
    ec2, elbv2 = runtime.clients.ec2, runtime.clients.elbv2
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    subnets = [
        ec2.create_subnet(VpcId=vpc, CidrBlock=cidr, AvailabilityZone=f"{REGION}{az}")["Subnet"][
            "SubnetId"
        ]
        for cidr, az in (("10.0.1.0/24", "a"), ("10.0.2.0/24", "b"))
    ]

    def group(name: str, tags: dict[str, str] | None = None) -> str:
        spec: Any = [
            {"ResourceType": "security-group", "Tags": [{"Key": k, "Value": v}]}
            for k, v in (tags or {}).items()
        ]
        return str(
            ec2.create_security_group(
                GroupName=name, Description=name, VpcId=vpc, TagSpecifications=spec
            )["GroupId"]
        )

    backend = group("k8s-traffic-backend", {"elbv2.k8s.aws/resource": "backend-sg"})
    nodes = {n: group(f"eks-nodes-{n}", {CLUSTER_TAG: "owned"}) for n in ("a", "b")}
    instances: list[str] = []
    for subnet, group_id in zip(subnets, nodes.values(), strict=True):
        launched = ec2.run_instances(
            ImageId=IMAGE_ID, MinCount=2, MaxCount=2, SecurityGroupIds=[group_id], SubnetId=subnet
        )["Instances"]
        instances += [i["InstanceId"] for i in launched]
    world = DemoWorld(runtime, vpc, subnets, backend, "", nodes, instances, "")
    lb = ""
    for n in range(target_groups):
        if n % per_lb == 0:
            lb = elbv2.create_load_balancer(
                Name=f"k8s-svc-{n}",
                Type="network",
                Subnets=subnets,
                SecurityGroups=[group(f"k8s-svc-{n}"), backend],
                Tags=[
                    {"Key": "sg-reconciler/managed", "Value": "true"},
                    {"Key": "elbv2.k8s.aws/cluster", "Value": "demo"},
                ],
            )["LoadBalancers"][0]["LoadBalancerArn"]
            world.load_balancer_arn = lb
        service(world, lb, FIRST_PORT + n, 80 + n % per_lb)
    runtime.clients.ssm.put_parameter(
        Name=runtime.ref("PolicyParameter"), Value=world.policy, Type="String", Overwrite=True
    )
    return world


def service(world: DemoWorld, lb: str, port: int, listener: int) -> str:
    """A NodePort target group of every node behind a TCP listener of `lb`."""
    elbv2 = world.runtime.clients.elbv2
    tg = elbv2.create_target_group(
        Name=f"k8s-tg-{port}", Protocol="TCP", Port=port, VpcId=world.vpc_id
    )["TargetGroups"][0]["TargetGroupArn"]
    elbv2.register_targets(
        TargetGroupArn=tg, Targets=[{"Id": i, "Port": port} for i in world.instances]
    )
    elbv2.create_listener(
        LoadBalancerArn=lb,
        Protocol="TCP",
        Port=listener,
        DefaultActions=[{"Type": "forward", "TargetGroupArn": tg}],
    )
    world.target_groups[port] = tg
    return str(tg)


class Window:
    """The model's counts from the planner's start, split at the refresh's first call."""

    def __init__(self, model: AwsReadLimits) -> None:
        self.model = model
        self.marks: list[tuple[dict[str, int], int, float]] = []

    def mark(self) -> None:
        stats = self.model.stats
        throttled = sum(stats.throttled.values())
        self.marks.append((dict(stats.calls), throttled, self.model.now()))

    def figures(self) -> dict[str, Any]:
        """Planner: first mark to the refresh's; under the locks: the refresh's to the end
        (the whole window as the planner's when the refresh never ran)."""
        marks = self.marks if len(self.marks) == 3 else [self.marks[0], *self.marks[-1:] * 2]
        return {
            "planner": self._between(marks[0], marks[1]),
            "under_the_locks": self._between(marks[1], marks[2]),
        }

    @staticmethod
    def _between(
        start: tuple[dict[str, int], int, float], end: tuple[dict[str, int], int, float]
    ) -> dict[str, Any]:
        calls = {k: n - start[0].get(k, 0) for k, n in end[0].items()}
        return {
            "elbv2_describes": sum(n for k, n in calls.items() if k.startswith("elbv2 ")),
            "ec2_describes": sum(n for k, n in calls.items() if k.startswith("ec2 ")),
            "throttled": end[1] - start[1],
            "seconds": round(end[2] - start[2], 1),
            "by_operation": {k: n for k, n in sorted(calls.items()) if n},
        }


def execute(world: DemoWorld, model: AwsReadLimits, event: dict[str, Any]) -> dict[str, Any]:
    """The planner on `event`, then its execution to the end; the window's figures."""
    window = Window(model)
    marked: list[bool] = []

    def refresh(function: str, _event: Any) -> None:
        if function == "RefreshPlanFunction" and not marked:
            marked.append(True)
            window.mark()

    window.mark()
    patch = world.runtime.before_invoke(refresh)
    try:
        arn = run_planner(world, event)
        if arn is None:
            raise RuntimeError("the planner started no execution")
        described = world.runtime.wait_for(arn, TIMEOUT)
    finally:
        patch.undo()
    window.mark()
    figures = window.figures()
    if described["status"] != "SUCCEEDED":
        figures["status"] = f"{described['status']} {described.get('error', '')}".strip()
        figures["cause"] = str(described.get("cause", ""))[:300]
        return figures
    output = json.loads(described["output"])
    figures["status"] = output["status"]
    figures["summary"] = {
        k: output["summary"][k] for k in ("rules_authorized", "rules_revoked", "calls")
    }
    return figures


def measure(
    target_groups: int, per_lb: int, reads_per_second: float, scheduled_run: bool = True
) -> dict[str, Any]:
    """Both runs of the module docstring (`scheduled_run` False: the event's only)."""
    quiet_handlers()
    parameters = {"ReadsPerSecond": str(reads_per_second)}
    with LocalRuntime(TEMPLATE, parameters=parameters) as runtime:
        world = build(runtime, target_groups, per_lb)
        with AwsReadLimits(runtime, clock=ScaledClock(SCALE)) as model:
            first = run_planner(world, scheduled_event())
            if first is None or runtime.wait_for(first, TIMEOUT)["status"] != "SUCCEEDED":
                raise RuntimeError("the first reconcile did not succeed")
            # A Service whose events were missed: the schedule finds it.
            top = FIRST_PORT + target_groups
            scheduled: dict[str, Any] = {}
            if scheduled_run:
                service(world, world.load_balancer_arn, top, 80 + per_lb)
                scheduled = execute(world, model, scheduled_event())
            event = new_port_event(world, model, top + 1)
    return {
        "target_groups": target_groups,
        "per_lb": per_lb,
        "reads_per_second": reads_per_second,
        "scheduled": scheduled,
        "event": event,
    }


def new_port_event(world: DemoWorld, model: AwsReadLimits, port: int) -> dict[str, Any]:
    """One target registered on a new port (`port`) with its event, the execution to the end:
    the event-driven one-target change."""
    tg = world.target_groups[FIRST_PORT]
    target: Any = {"Id": world.instances[0], "Port": port}
    world.runtime.clients.elbv2.register_targets(TargetGroupArn=tg, Targets=[target])
    request = {"targetGroupArn": tg, "targets": [{"id": target["Id"], "port": port}]}
    batch = deliver_events(world, [cloudtrail_event("RegisterTargets", request, None)])
    return execute(world, model, batch)


def measure_before(
    target_groups: int, per_lb: int, reads_per_second: float, ref: str = BEFORE
) -> dict[str, Any]:
    """`measure` on the code of `ref` (`on_code_of`)."""
    return on_code_of(ref, "benchmarks.bench_locked_reads", target_groups, per_lb, reads_per_second)


def on_code_of(
    ref: str, module: str, target_groups: int, per_lb: int, reads_per_second: float
) -> dict[str, Any]:
    """A benchmark module's `--here` run on the code of `ref`: a subprocess whose layers,
    tools and functions come from `git archive ref` (this tree's benchmarks package, that
    tree's product); its one JSON line, with the ref."""
    with tempfile.TemporaryDirectory(prefix="sg-before-") as where:
        archive = subprocess.run(
            ["git", "archive", ref], cwd=ROOT, check=True, capture_output=True
        ).stdout
        with tarfile.open(fileobj=BytesIO(archive)) as tar:
            tar.extractall(where, filter="data")
        env = dict(os.environ)
        paths = [str(Path(where) / d) for d in ("layers", "tools", "functions")]
        env["PYTHONPATH"] = os.pathsep.join([*paths, env.get("PYTHONPATH", "")])
        args = [
            sys.executable,
            "-m",
            module,
            "--target-groups",
            str(target_groups),
            "--per-lb",
            str(per_lb),
            "--reads-per-second",
            str(reads_per_second),
            "--here",
        ]
        done = subprocess.run(args, cwd=ROOT, env=env, check=True, capture_output=True, text=True)
        result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
        result["code"] = ref
        return result


def compare(target_groups: int, per_lb: int, reads_per_second: float) -> dict[str, Any]:
    """Before and after, at one size."""
    return {
        "before": measure_before(target_groups, per_lb, reads_per_second),
        "after": measure(target_groups, per_lb, reads_per_second),
    }


def before_and_after_cli(
    description: str,
    measure: Callable[[int, int, float], dict[str, Any]],
    measure_before: Callable[[int, int, float, str], dict[str, Any]],
    *,
    target_groups: int,
    reads_per_second: float,
    before: str = BEFORE,
) -> None:
    """The command line of a benchmark that compares this tree with `--before`: both as
    JSON, or `--here` this tree's alone on one line (what `on_code_of` reads)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--target-groups", type=int, default=target_groups)
    parser.add_argument("--per-lb", type=int, default=4)
    parser.add_argument("--reads-per-second", type=float, default=reads_per_second)
    parser.add_argument("--before", default=before, help="the code to compare with")
    parser.add_argument("--here", action="store_true", help="this tree's code only, one line")
    args = parser.parse_args()
    for name, value in (("AWS_ACCESS_KEY_ID", "testing"), ("AWS_SECRET_ACCESS_KEY", "testing")):
        os.environ.setdefault(name, value)
    if args.here:
        figures = measure(args.target_groups, args.per_lb, args.reads_per_second)
        print(json.dumps(figures, separators=(",", ":")))
        return
    figures = {
        "before": measure_before(
            args.target_groups, args.per_lb, args.reads_per_second, args.before
        ),
        "after": measure(args.target_groups, args.per_lb, args.reads_per_second),
    }
    print(json.dumps(figures, indent=2))


def main() -> None:
    before_and_after_cli(
        __doc__.splitlines()[0], measure, measure_before, target_groups=100, reads_per_second=10.0
    )


if __name__ == "__main__":
    main()
