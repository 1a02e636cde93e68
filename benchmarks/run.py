"""`make bench`: run every benchmark once on this machine and write BENCHMARKS.md.

Each row gives the command that reproduces it, the figure, and the anchor it is compared
with (a target from the issues, or the figure of the approach we replace). Figures from one
run are compared with each other (ratios), never with another machine's.
"""

from __future__ import annotations

import os
import platform
import time
from pathlib import Path
from typing import Any

from benchmarks import (
    bench_cold_start,
    bench_desired,
    bench_index,
    bench_locked_reads,
    bench_planner,
    bench_reads,
    bench_revoke_reads,
    bench_rollback,
    bench_scale,
    bench_workflow,
)

OUT = Path(__file__).resolve().parents[1] / "BENCHMARKS.md"
Row = tuple[str, str, str, str]  # what, command, figure, anchor


def planner_rows(figures: dict[str, Any]) -> list[Row]:
    command = "python -m benchmarks.bench_planner"
    rows: list[Row] = []
    for scenario, label in (("room", "quota room"), ("full", "groups at quota 60")):
        f = figures[scenario]
        small, large = f["small"], f["large"]
        calls = sum(small["steps"].values())
        rows.append(
            (
                f"Planning {small['groups']} groups x 60 rules, 10% changing ({label}): make_plan "
                "with its safety check, on parsed rules",
                command,
                f"{small['plan_seconds']:.3f} s ({calls} calls: {small['steps']})",
                "target < 0.5 s",
            )
        )
        rows.append(
            (
                f"... plus parsing both describe documents ({small['rules']} current rules)",
                command,
                f"{small['seconds']:.3f} s ({small['parse_seconds']:.3f} s of it parsing)",
                "the parse is about 15 us a rule",
            )
        )
        rows.append(
            (
                f"... parse + plan at 10x ({large['groups']} groups)",
                command,
                f"{large['seconds']:.3f} s: {f['ratio']:.1f}x the time for 10x the input "
                f"(CPU {f['cpu_ratio']:.1f}x)",
                "target <= 12x",
            )
        )
    ratio = figures["full_over_room"]
    rows.append(
        (
            f"Planning {ratio['groups']} groups at quota 60 against the same with room "
            "(make_plan CPU, the two taken in turns)",
            command,
            f"{ratio['ratio']:.2f}x ({ratio['full_cpu_seconds']:.3f} s / "
            f"{ratio['room_cpu_seconds']:.3f} s)",
            "target <= 1.5x; before (63e268b): 3.72x (0.936 s / 0.252 s)",
        )
    )
    before = {500: "3.09x (1.232 s / 0.399 s)", 5000: "2.40x (14.354 s / 5.985 s)"}
    for parse in figures["parse_vs_floor"]:
        rows.append(
            (
                f"Loading both describe documents of {parse['groups']} groups as the CLI does "
                "(read, json.loads, parse) against the floor (json.loads and the same rules "
                "built unchecked, collector paused)",
                command,
                f"{parse['ratio']:.2f}x ({parse['parse_cpu_seconds']:.3f} s / "
                f"{parse['floor_cpu_seconds']:.3f} s CPU)",
                "target <= 1.5x"
                + (
                    f"; before (63e268b): {before[parse['groups']]}"
                    if parse["groups"] in before
                    else ""
                ),
            )
        )
    return rows


def desired_rows(curve: dict[float, dict[str, Any]]) -> list[Row]:
    rows: list[Row] = []
    base = curve[min(curve)]["desired_and_plan_seconds"]
    for scale, f in sorted(curve.items()):
        w = f["world"]
        factor = round(scale / min(curve))
        rows.append(
            (
                f"Desired state + plan after the reads, {factor}x: {w['load_balancers']} LBs, "
                f"{w['target_groups']} TGs, {w['targets']} targets, {w['groups']} groups",
                f"python -m benchmarks.bench_desired --scale {scale}",
                f"{f['desired_and_plan_seconds']:.3f} s ({f['desired_and_plan_seconds'] / base:.1f}x the 1x time), "
                f"peak {f['peak_traced_memory_mb']} MB",
                "goal at the largest world (last row): < 2 s and < 256 MB",
            )
        )
    full = curve[max(curve)]
    w, calls = full["world"], full["describe_calls"]
    naive = 2 * w["load_balancers"] + w["target_groups"] + w["targets"] + w["groups"]
    ours = calls["batched_total"] + calls["DescribeTargetHealth"]
    rows.append(
        (
            "Describe calls per full reconcile (the largest world: 2000 LBs, 10000 TGs)",
            "python -m benchmarks.bench_desired",
            f"{ours} ({calls['batched_total']} batched and paginated + "
            f"{calls['DescribeTargetHealth']} DescribeTargetHealth, which has no batch form)",
            f"naive per-object reader: {naive} ({naive / ours:.1f}x ours)",
        )
    )
    world, sets = full["exposure_world"], full["exposure_nodeport_sets"]
    rows.append(
        (
            "Extra ports opened (generated world, budget 3 per group, peer, protocol)",
            "python -m benchmarks.bench_desired",
            f"{world['extra_ports_ours']} ports",
            f"one min..max range per (group, source, protocol), as the LBC: "
            f"{world['extra_ports_single_range']} ports (ours = {world['ratio']:.2f}x)",
        )
    )
    rows.append(
        (
            f"Extra ports opened ({sets['sets']} random NodePort sets of 2-60 ports, budget {sets['budget']})",
            "python -m benchmarks.bench_desired",
            f"{sets['extra_ports_ours']} ports",
            f"one min..max range: {sets['extra_ports_single_range']} ports (ours = {sets['ratio_total']:.2f}x)",
        )
    )
    return rows


def workflow_rows(f: dict[str, Any]) -> list[Row]:
    command = "python -m benchmarks.bench_workflow"
    burst, transitions, unsafe, cold = (
        f["burst"],
        f["transitions"],
        f["unsafe_window"],
        f["cold_start"],
    )
    return [
        (
            f"Burst coalescing: {burst['events']} CloudTrail events (25 Services, duplicates included)",
            command,
            f"{burst['executions']} execution from 1 SQS batch of {burst['batch']}",
            f"one execution per event: {burst['events']}",
        ),
        (
            "State transitions, success path, one-group change",
            command,
            str(transitions["one_group"]),
            "target <= 25 ($0.025 per 1,000 transitions)",
        ),
        (
            "State transitions, success path, two-group change",
            command,
            str(transitions["two_groups"]),
            "target <= 25",
        ),
        (
            "Unsafe states per #3639 change (OLD ∩ NEW denied), no fault",
            command,
            f"{unsafe['make_before_break']['unsafe_states']} of {unsafe['make_before_break']['states']} states",
            f"revoke-then-authorize: {unsafe['revoke_first']['unsafe_states']} of "
            f"{unsafe['revoke_first']['states']} states",
        ),
        (
            "Unsafe states per #3639 change, AuthorizeSecurityGroupIngress denied",
            command,
            f"{unsafe['make_before_break_denied']['unsafe_states']} (rolled back, gap left open: "
            f"{'yes' if unsafe['make_before_break_denied']['gap_left_open'] else 'no'})",
            f"revoke-then-authorize: {unsafe['revoke_first_denied']['unsafe_states']} (gap left open: "
            f"{'yes' if unsafe['revoke_first_denied']['gap_left_open'] else 'no'})",
        ),
        (
            "Artifact: our layer + functions, zipped (Powertools layer excluded)",
            command,
            f"{cold['artifact_kib']} KiB",
            "Lambda limit 50 MiB zipped",
        ),
    ]


def _import_figure(f: dict[str, Any]) -> str:
    return (
        f"{f['wall_s']:.3f} s ({f['x_boto3']:.2f}x boto3, {f['x_powertools']:.2f}x boto3 + "
        f"Logger/Metrics); CPU {f['cpu_s']:.3f} s ({f['cpu_x_boto3']:.2f}x, "
        f"{f['cpu_x_powertools']:.2f}x)"
    )


def cold_start_rows(f: dict[str, Any]) -> list[Row]:
    command = "python -m benchmarks.bench_cold_start"
    after, before = f["after"], f.get("before")
    imports = after["imports"]
    boto3 = imports["import boto3"]
    powertools = imports["boto3 + Powertools Logger/Metrics"]
    floor = imports["floor with typed contracts"]
    parse = imports["floor + Parser's parse"]
    parser_models = imports["floor + Parser's SQS and EventBridge models"]
    rows: list[Row] = [
        (
            f"Cold import baselines (fresh interpreter, median of {f['repeat']})",
            command,
            f"import boto3: {boto3['wall_s']:.3f} s, CPU {boto3['cpu_s']:.3f} s",
            f"boto3 + Powertools Logger/Metrics: {powertools['wall_s']:.3f} s, CPU "
            f"{powertools['cpu_s']:.3f} s; the floor of a step with typed contracts (boto3, "
            f"Powertools with the Tracer, pydantic and one model): CPU {floor['cpu_s']:.3f} s "
            f"({floor['cpu_x_boto3']:.2f}x boto3); the floor with Powertools Parser's `parse` "
            f"(the planner's): CPU {parse['cpu_s']:.3f} s ({parse['cpu_x_floor']:.2f}x the "
            f"floor); with Parser's SQS and EventBridge models (the planner's before): CPU "
            f"{parser_models['cpu_s']:.3f} s ({parser_models['cpu_x_floor']:.2f}x the floor)",
        )
    ]
    for name, figures in imports.items():
        if name in bench_cold_start.BASELINES:
            continue
        target = "<= 1.5x boto3" if name == "PlannerFunction" else "<= 1.2x boto3"
        was = before["imports"].get(name) if before else None
        anchor = f"target {target}; CPU {figures['cpu_x_floor']:.2f}x the floor" + (
            f"; before ({f['before_ref']}): {_import_figure(was)}, {was['cpu_x_floor']:.2f}x the floor; "
            f"CPU after - before in the same rounds: {(figures['cpu_s'] - was['cpu_s']) * 1000:+.1f} ms"
            if was
            else ""
        )
        rows.append(
            (
                f"Cold import as deployed, {name} (Tracer on, template env, no bytecode)",
                command,
                _import_figure(figures),
                anchor,
            )
        )
    functions = ", ".join(after["execution_functions"])
    rows.append(
        (
            "Cold CPU per execution: imports of every function one cold execution starts "
            f"({functions})",
            command,
            f"{after['cold_cpu_per_execution_s']:.3f} s CPU",
            (f"before: {before['cold_cpu_per_execution_s']:.3f} s; " if before else "")
            + "one function for every step (planner + one): "
            f"{after['cold_cpu_per_execution_one_function_s']:.3f} s",
        )
    )
    return rows


def scale_rows(f: dict[str, Any]) -> list[Row]:
    command = "python -m benchmarks.bench_scale"
    rows: list[Row] = []
    for run in f["curve"]:
        rows.append(
            (
                f"Largest execution state, first reconcile of {run['changes']} rule changes over "
                f"{run['groups']} groups (local runtime, real ASL)",
                f"{command} --first-reconcile {run['groups']}",
                f"{run['largest_state_bytes']} bytes ({run['largest_state']}); {run['status']} "
                f"('{run['final_state']}'), {run['transitions']} transitions, {run['seconds']} s",
                "before: about 816 bytes more per rule change; 256 KiB crossed at about 320",
            )
        )
    serialized = ", ".join(f"{n:,}: {b} B" for n, b in f["serialized"].items())
    rows.append(
        (
            "Largest state by the steps' serialization, by rule changes (5 per group)",
            command,
            serialized,
            "target: flat, under 32 KiB",
        )
    )
    curve = ", ".join(f"{g}: {t}" for g, t in f["transitions"])
    rows.append(
        (
            "State transitions per first reconcile, by groups changed",
            command,
            curve,
            "before: 14 + 2 per group (214 at 100 groups)",
        )
    )
    limit = f["rate_limit"]
    paced, unpaced = limit["paced"], limit["unpaced"][0]
    applied = sum(1 for r in paced if r["status"] == "SUCCEEDED")
    ratios = sorted(r["seconds"] / r["floor"] for r in paced if r["floor"])
    rows.append(
        (
            f"{limit['groups']}-group change under a simulated EC2 bucket (50, refill 5/s), "
            "WritesPerSecond 5",
            command,
            f"applied in {applied} of {len(paced)} runs; {ratios[len(ratios) // 2]:.2f}x the floor "
            f"(median; floor {paced[0]['floor']} s); throttled "
            f"{sum(r['throttled'] for r in paced)} of {sum(r['writes'] for r in paced)} writes",
            f"unpaced (WritesPerSecond 1000): {unpaced['status']}, throttled {unpaced['throttled']}, "
            f"{unpaced['seconds'] / unpaced['floor']:.2f}x the floor; before (a simulation of "
            "the old settings): rolled back in 97.5% of runs",
        )
    )
    calls = f["calls"]
    rows.append(
        (
            "EC2 calls of an event-driven two-group #3639 change (authorize + revoke)",
            command,
            f"{calls['writes']} writes, {calls['describe_security_group_rules']} "
            f"DescribeSecurityGroupRules, other reads {calls['other_reads']}",
            "LBC: 2 writes per group and at most 1 describe (its cache); before: 3 describes "
            "per group plus 10 per execution",
        )
    )
    return rows


# Measured with `python -m benchmarks.bench_rollback --groups 2000` on 299f3b1, the commit before
# the rollback became a Map : one invocation for every group.
ROLLBACK_BEFORE = (
    "before (299f3b1, one invocation): 622.7 s in one invocation of a 120 s function (on AWS it "
    "times out: 'Stopped during rollback'), largest state 250190 bytes (Roll back the rules "
    "this execution added; 256 KiB is 262144)"
)


def rollback_rows(f: dict[str, Any]) -> list[Row]:
    return [
        (
            f"A {f['groups']}-group change ({f['rules']} new rules) denied in its last batch, "
            "rolled back on the local runtime (real ASL; model time: EC2 calls 0.15 s, DynamoDB "
            "0.01 s, WritesPerSecond 5, three items at once)",
            f"python -m benchmarks.bench_rollback --groups {f['groups']}",
            f"{f['status']} {f['error']} ('{f['final_state']}'), groups as before: "
            f"{f['groups_as_before']}; rollback {f['rollback_model_seconds']} s in "
            f"{f['rollback_invocations']} invocations, the longest "
            f"{f['longest_rollback_invocation_seconds']} s of its {f['rollback_function_timeout']} s;"
            f" largest state {f['largest_state_bytes']} bytes ({f['largest_state']})",
            ROLLBACK_BEFORE,
        )
    ]


def reads_rows(runs: list[dict[str, Any]]) -> list[Row]:
    def calls(f: dict[str, Any]) -> str:
        health = f["by_operation"]["elbv2 DescribeTargetHealth"]
        return (
            f"{f['elbv2_calls']} ELBv2 ({health} DescribeTargetHealth) + {f['ec2_describes']} EC2"
        )

    return [
        (
            f"Calls of the planner's read for an event that adds one target, "
            f"{f['load_balancers']} load balancers with groups of their own (the refresh reads alike)",
            f"python -m benchmarks.bench_reads --load-balancers {f['load_balancers']}",
            f"event-scoped: {calls(f['narrow'])}",
            f"full read: {calls(f['full'])}; LBC: at most 1 describe (its cache)",
        )
        for f in runs
    ]


LOCKED_SIZES = (100, 500, 1000)


def locked_rows(runs: list[dict[str, Any]]) -> list[Row]:
    """The reads under the locks, before and after, under the read model."""

    def part(f: dict[str, Any]) -> str:
        return (
            f"{f['elbv2_describes']} ELBv2 + {f['ec2_describes']} EC2 describes, "
            f"{f['seconds']:.0f} s, {f['throttled']} throttled"
        )

    def figure(f: dict[str, Any]) -> str:
        done = f["status"] if "summary" in f else f"{f['status']}: {f.get('cause', '')}"
        return (
            f"planner: {part(f['planner'])}; under the locks: {part(f['under_the_locks'])} ({done})"
        )

    rows: list[Row] = []
    for run in runs:
        before, after = run["before"], run["after"]
        n, pace = after["target_groups"], after["reads_per_second"]
        for scenario, label in (
            (
                "scheduled",
                "a scheduled execution after a drift (a Service whose events were missed)",
            ),
            ("event", "an event-driven one-target change (a target registered on a new port)"),
        ):
            rows.append(
                (
                    f"Reads of {label}, {n} target groups in the LBC layout "
                    f"({after['per_lb']} per NLB, one shared backend group), ReadsPerSecond "
                    f"{pace:g}, under AwsReadLimits (model seconds: the reads' latency and "
                    "pacing, the settle, and this machine's own time x10)",
                    f"python -m benchmarks.bench_locked_reads --target-groups {n} "
                    f"--reads-per-second {pace:g}",
                    figure(after[scenario]),
                    f"before ({before['code']}): {figure(before[scenario])}",
                )
            )
    return rows


INDEX_SIZES = (100, 500, 1000, 3000)
INDEX_LAYOUTS = (4, 1)  # target groups per NLB: the LBC's layout, a group per load balancer
INDEX_PACES = (1.0, 10.0)  # ReadsPerSecond: the default, and the whole documented refill
# Before the inventory index (main 5affa69, BENCHMARKS.md): every execution read
# the account in the planner, at 3,000 target groups about 3,050 ELBv2 describes, and the
# event's EC2 describes grew with the account (7 at 100, 9 at 1,000, 13 at 3,000).
INDEX_BEFORE = {
    "scheduled": "before (5affa69): the planner read every target group (105 ELBv2 at 100, "
    "1,016 at 1,000, about 3,050 at 3,000: 9,100 a scheduled execution, the account read three times)",
    "event": "before (5affa69): 2 ELBv2 + 7 EC2 at 100, 9 at 1,000, 13 at 3,000 target groups "
    "(LBC layout); goal: at most 10 ELBv2 and 2 EC2 per changed group (the LBC: 1)",
    "fill": "before: no index (every execution read the account)",
}


def index_rows(runs: list[dict[str, Any]]) -> list[Row]:
    """The planner with the inventory index at a size, under the read model."""

    def part(f: dict[str, Any], timeout: float | None = None) -> str:
        ops = ", ".join(f"{n} {k.split(' ', 1)[1]}" for k, n in f["by_operation"].items())
        of = "" if timeout is None else f" of its {timeout:.0f} s"
        return (
            f"{f['elbv2_describes']} ELBv2 + {f['ec2_describes']} EC2 describes ({ops}), "
            f"{f['seconds']:.0f} s{of}, {f['throttled']} throttled"
        )

    def execution(f: dict[str, Any], timeout: float) -> str:
        done = f["status"] if "summary" in f else f"{f['status']}: {f.get('cause', '')}"
        return (
            f"planner: {part(f['planner'], timeout)}; under the locks: "
            f"{part(f['under_the_locks'])} ({done})"
        )

    rows: list[Row] = []
    for f in runs:
        n, per_lb, pace = f["target_groups"], f["per_lb"], f["reads_per_second"]
        layout = (
            f"LBC layout ({per_lb} per NLB, {f['load_balancers']} NLBs, one shared backend group)"
            if per_lb > 1
            else f"a group per load balancer ({f['load_balancers']} NLBs)"
        )
        where = f"{n} target groups, {layout}, ReadsPerSecond {pace:g}, under AwsReadLimits"
        command = (
            f"python -m benchmarks.bench_index --target-groups {n} --per-lb {per_lb} "
            f"--reads-per-second {pace:g}"
        )
        fill = f["fill"]
        rows += [
            (
                f"First fill of an empty index, {where}",
                command,
                f"{fill['runs']} scheduled run(s), {fill['elbv2_describes']} ELBv2 describes, "
                f"{fill['seconds']:.0f} model s (world built in {f['build_seconds']:.0f} s)",
                INDEX_BEFORE["fill"],
            ),
            (
                f"Scheduled execution in steady state (index filled and aged as 48 runs leave "
                f"it) after a drift (a Service whose events were missed), {where}",
                command,
                f"{f['scheduled_elbv2']} ELBv2 describes per scheduled execution; "
                f"{execution(f['scheduled'], f['planner_timeout'])}; the whole account "
                f"re-verified within {f['period_hours']:g} h",
                f"goal: at most 900 at 3,000; {INDEX_BEFORE['scheduled']}",
            ),
            (
                f"Event-driven one-target change (a target registered on a new port), {where}",
                command,
                execution(f["event"], f["planner_timeout"]),
                INDEX_BEFORE["event"],
            ),
        ]
    return rows


REVOKE_SIZES = (1000, 3000)


def revoke_rows(runs: list[dict[str, Any]]) -> list[Row]:
    """A revoke that takes traffic away, under the locks, at the default pace: its closure
    chosen from the inventory index (docs/architecture.md, "Reads")."""
    rows: list[Row] = []
    for run in runs:
        f = run["revoke"]
        locks = f["under_the_locks"]
        done = f["status"] if "summary" in f else f"{f['status']}: {f.get('cause', '')}"
        rows.append(
            (
                "A revoke that takes traffic away (a Service deleted, its events missed), "
                f"{run['target_groups']:,} target groups, LBC layout, ReadsPerSecond "
                f"{run['reads_per_second']:g}, under AwsReadLimits",
                "python -m benchmarks.bench_revoke_reads --target-groups "
                f"{run['target_groups']} --here",
                f"under the locks: {locks['elbv2_describes']} ELBv2 + {locks['ec2_describes']} "
                f"EC2 describes, {locks['seconds']:.0f} s, {locks['throttled']} throttled "
                f"({done})",
                "before (193fdeb): ReadsOutOfTime under the locks at 1,000 and 3,000 target "
                "groups (one DescribeTargetHealth per target group of the shared backend group)",
            )
        )
    return rows


def main() -> None:
    started = time.monotonic()
    print("planning benchmark...", flush=True)
    planner = bench_planner.run_benchmark()
    print("desired-state benchmark (1x, 10x, 100x)...", flush=True)
    curve = {scale: bench_desired.run_benchmark(scale) for scale in (0.01, 0.1, 1.0)}
    print("workflow benchmark on the local runtime...", flush=True)
    workflow = bench_workflow.run_benchmark()
    print(
        "scale benchmark on the local runtime (up to 10,000 rule changes, a 500-group change under the rate limit)...",
        flush=True,
    )
    scale = bench_scale.run_benchmark()
    print("a 2,000-group change denied in its last batch, rolled back...", flush=True)
    rollback = bench_rollback.denied_in_the_last_batch(2000)
    print("event-scoped reads on moto (100 and 500 load balancers)...", flush=True)
    reads = [bench_reads.event_calls(n) for n in (100, 500)]
    print("reads under the locks, before and after (100, 500, 1,000 target groups)...", flush=True)
    locked = [bench_locked_reads.compare(n, 4, 10.0) for n in LOCKED_SIZES]
    print(
        "the inventory index at 100 to 3,000 target groups, two layouts, two paces...", flush=True
    )
    indexed = [
        bench_index.measure(n, per_lb, pace)
        for n in INDEX_SIZES
        for per_lb in INDEX_LAYOUTS
        for pace in INDEX_PACES
    ]
    print("a revoke under the locks at 1,000 and 3,000 target groups...", flush=True)
    revokes = [bench_revoke_reads.measure(n, 4, 1.0) for n in REVOKE_SIZES]
    print("cold-start benchmark (each handler as deployed, before and after)...", flush=True)
    cold = bench_cold_start.run_benchmark()
    rows = (
        planner_rows(planner)
        + desired_rows(curve)
        + workflow_rows(workflow)
        + cold_start_rows(cold)
        + scale_rows(scale)
        + rollback_rows(rollback)
        + reads_rows(reads)
        + locked_rows(locked)
        + index_rows(indexed)
        + revoke_rows(revokes)
    )
    lines = [
        "# Benchmarks",
        "",
        f"Written by `make bench` on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
        f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
        f"the run took {time.monotonic() - started:.0f} s. Machines here are noisy: compare "
        "figures within one run. Each command runs from the repository root with `.venv/bin/`.",
        "",
        "| What | Command | Figure | Compared with |",
        "|---|---|---|---|",
        *(
            f"| {what} | `{command}` | {figure} | {anchor} |"
            for what, command, figure, anchor in rows
        ),
        "",
        "Cold start: the decision on one function for every step, and why the step targets are "
        "not reached, are in docs/architecture.md (Cold start), from these rows.",
        "",
    ]
    OUT.write_text("\n".join(lines))
    print(OUT.read_text())


if __name__ == "__main__":
    main()
