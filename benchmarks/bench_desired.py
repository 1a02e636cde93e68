"""Benchmark: desired state and plan for a large generated account (no AWS).

    .venv/bin/python -m benchmarks.bench_desired [--scale 1.0] [--seed 7]

World (scale 1): 2,000 load balancers, 10,000 target groups, 50,000 targets and 500
security groups in one account, read as one inventory, laid out as 25 clusters in the
shape the AWS Load Balancer Controller makes: each cluster has one shared backend group
carried by all its load balancers (the rule source: the policy's default, "each load
balancer's groups") and 19 node groups; each load balancer has 5 target groups on distinct
NodePorts (TCP, some UDP and TCP_UDP, a fifth with the kube-proxy health-check port
10256); each target group has 5 instance targets. The current rules are the desired rules
of the same world a few NodePorts ago (owned, with ids) plus unmanaged rules, so the plan
has real work.

Figures: seconds to compute the desired state and the plan after the reads (target < 2 s),
peak traced memory while holding the inventory and computing them (target < 256 MB), the
describe calls a full read of this world costs (from AWS page sizes), and the exposure of
our compaction against one min..max range per (group, source, protocol), as the LBC opens.
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import statistics
import time
import tracemalloc
from dataclasses import replace
from typing import Any

from sg_reconciler.app.live_plan import LivePlan, plan_from_inventory
from sg_reconciler.core.account import (
    Inventory,
    LoadBalancer,
    SecurityGroup,
    Target,
    TargetGroup,
    tags_of,
)
from sg_reconciler.core.compaction import compact
from sg_reconciler.core.desired import compute_desired
from sg_reconciler.core.plan import Authorize, Plan, Revoke
from sg_reconciler.core.policy import Policy
from sg_reconciler.core.rules import OWNER_TAG_KEY, Peer, Rule, RuleKey
from sg_reconciler.policy import MANAGED_TAG, parse_policy

from benchmarks.call_estimate import WorldSize, describe_call_estimate

NODEPORTS = (30000, 32767)
KUBE_PROXY_HEALTH = 10256
CLUSTERS = 25
NODE_GROUPS_PER_CLUSTER = 19  # + the backend group = 20 groups per cluster, 500 in all
INSTANCES_PER_NODE_GROUP = 12
UNMANAGED_RULES_PER_GROUP = 4
TIME_TARGET_S = 2.0
MEMORY_TARGET_MB = 256.0
POLICY: Policy = parse_policy("rule_budget: 3")


def _gid(n: int) -> str:
    return f"sg-{n:017x}"


def generate(
    scale: float = 1.0, seed: int = 7, drift: float = 0.0
) -> tuple[Inventory, dict[str, int]]:
    """The account as one inventory, and its object counts.

    `drift` is the share of NodePorts moved, to make an older world for the current rules.
    """
    rng = random.Random(seed)
    drift_rng = random.Random(seed + 1)
    lbs_per_cluster = max(1, round(2000 * scale / CLUSTERS))
    tgs_per_lb, targets_per_tg = 5, 5
    lbs: list[LoadBalancer] = []
    tgs: list[TargetGroup] = []
    groups: dict[str, SecurityGroup] = {}
    instance_count = 0
    for c in range(CLUSTERS):
        base = c * (1 + NODE_GROUPS_PER_CLUSTER)
        backend = _gid(base + 1)
        nodes = [_gid(base + 2 + i) for i in range(NODE_GROUPS_PER_CLUSTER)]
        groups.update((g, SecurityGroup(g, f"vpc-{c}")) for g in (backend, *nodes))
        instances = [
            (f"i-{c:04x}{g:03x}{i:05x}", node)
            for g, node in enumerate(nodes)
            for i in range(INSTANCES_PER_NODE_GROUP)
        ]
        instance_count += len(instances)
        # Distinct NodePorts per cluster, as Kubernetes allocates them.
        ports = rng.sample(range(NODEPORTS[0], NODEPORTS[1] + 1), lbs_per_cluster * tgs_per_lb)
        for lb_i in range(lbs_per_cluster):
            lb = LoadBalancer(
                f"arn:aws:elasticloadbalancing:lb/{c}/{lb_i}",
                f"k8s-{c}-{lb_i}",
                "network",
                (backend,),
                tags=tags_of(MANAGED_TAG),  # what the reader keeps: the selected ones
            )
            lbs.append(lb)
            for t in range(tgs_per_lb):
                port = ports[lb_i * tgs_per_lb + t]
                if drift and drift_rng.random() < drift:
                    port = drift_rng.randint(*NODEPORTS)
                roll = rng.random()
                protocol = "UDP" if roll < 0.05 else "TCP_UDP" if roll < 0.1 else "TCP"
                local = rng.random() < 0.2  # externalTrafficPolicy: Local
                members = rng.sample(instances, targets_per_tg)
                tgs.append(
                    TargetGroup(
                        arn=f"arn:aws:elasticloadbalancing:targetgroup/{c}/{lb_i}/{t}",
                        name=f"k8s-{c}-{lb_i}-{t}",
                        protocol=protocol,
                        port=port,
                        target_type="instance",
                        health_check_port=str(KUBE_PROXY_HEALTH) if local else "traffic-port",
                        load_balancer_arns=(lb.arn,),
                        targets=tuple(Target(i, port, (g,), i) for i, g in members),
                    )
                )
    counts = {
        "load_balancers": len(lbs),
        "target_groups": len(tgs),
        "targets": len(tgs) * targets_per_tg,
        "groups": len(groups),
        "instances": instance_count,
    }
    inventory = Inventory(load_balancers=tuple(lbs), target_groups=tuple(tgs), groups=groups)
    return inventory, counts


def with_current_rules(new: Inventory, old: Inventory, seed: int) -> Inventory:
    """`new` with current rules: the desired rules of `old` (owned) plus unmanaged rules."""
    previous = compute_desired(old, POLICY.desired_settings()).rules
    rng = random.Random(seed)
    current: list[Rule] = []
    tags = ((OWNER_TAG_KEY, POLICY.owner),)
    for n, rule in enumerate(previous):
        current.append(replace(rule, rule_id=f"sgr-o{n:016x}", tags=tags))
    for n, g in enumerate(sorted(new.groups)):
        for k in range(UNMANAGED_RULES_PER_GROUP):
            cidr = f"10.{rng.randint(0, 255)}.{k}.0/24"
            key = RuleKey(g, "tcp", 22 + k, 22 + k, Peer("cidr4", cidr))
            current.append(Rule(key, "admin", f"sgr-u{n:06x}{k:010x}"))
    owned_groups = frozenset(r.group_id for r in current if r.tags)
    return replace(new, rules=tuple(current), owned_groups=owned_groups)


def summarize(live: LivePlan) -> dict[str, Any]:
    result = live.result
    figures: dict[str, Any] = {"desired_rules": len(live.desired), "groups": len(live.groups)}
    if isinstance(result, Plan):
        figures["plan_steps"] = len(result.steps)
        figures["plan_rule_changes"] = sum(
            len(s.rules) if isinstance(s, Authorize) else len(s.rule_ids)
            for s in result.steps
            if isinstance(s, Authorize | Revoke)
        )
    else:
        figures["refused"] = result.reason
    assert live.state is not None
    reports = live.state.exposure.values()
    figures["needed_ports"] = sum(r.needed_ports for r in reports)
    figures["exposed_ports"] = sum(r.exposed_ports for r in reports)
    figures["single_range_exposed_ports"] = sum(r.single_range_exposed_ports for r in reports)
    return figures


def nodeport_set_exposure(seed: int, sets: int = 2000, budget: int = 3) -> dict[str, Any]:
    """Exposure on random NodePort sets (2 to 60 ports): ours against one min..max range."""
    rng = random.Random(seed)
    ratios = []
    ours_total = lbc_total = 0
    for _ in range(sets):
        ports = rng.sample(range(NODEPORTS[0], NODEPORTS[1] + 1), rng.randint(2, 60))
        ours = compact(ports, budget).exposed_ports
        lbc = compact(ports, 1).exposed_ports
        ours_total += ours
        lbc_total += lbc
        if lbc:
            ratios.append(ours / lbc)
    return {
        "sets": sets,
        "budget": budget,
        "extra_ports_ours": ours_total,
        "extra_ports_single_range": lbc_total,
        "ratio_total": round(ours_total / lbc_total, 4) if lbc_total else 0.0,
        "ratio_median": round(statistics.median(ratios), 4) if ratios else 0.0,
    }


def run_benchmark(scale: float = 1.0, seed: int = 7) -> dict[str, Any]:
    """Generate the world, then time and trace desired state + plan; return the figures."""
    new, counts = generate(scale, seed)
    old, _ = generate(scale, seed, drift=0.03)
    world = with_current_rules(new, old, seed)
    del new, old
    owned_rules = sum(1 for r in world.rules if r.tags)

    gc.collect()
    started = time.perf_counter()
    live = plan_from_inventory(world, POLICY)
    elapsed = time.perf_counter() - started
    figures = summarize(live)
    del live
    world_size = len(world.rules)
    del world

    # Memory: the inventory as the reader would hold it, plus the desired state and plan.
    gc.collect()
    tracemalloc.start()
    new, _ = generate(scale, seed)
    old, _ = generate(scale, seed, drift=0.03)
    world = with_current_rules(new, old, seed)
    del old
    gc.collect()
    inventory_mb = tracemalloc.get_traced_memory()[0] / 2**20
    tracemalloc.reset_peak()
    plan_from_inventory(world, POLICY)
    peak_mb = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()

    calls = describe_call_estimate(
        WorldSize(
            load_balancers=counts["load_balancers"],
            managed_load_balancers=counts["load_balancers"],
            target_groups=counts["target_groups"],
            managed_target_groups=counts["target_groups"],
            instances=counts["instances"],
            ip_targets=0,
            rule_groups=len(world.groups),
            rules=world_size,
            groups=counts["groups"],
            owned_rules=owned_rules,
        )
    )
    single = figures["single_range_exposed_ports"]
    return {
        "world": {**counts, "current_rules": world_size},
        "desired_and_plan_seconds": round(elapsed, 3),
        "desired_and_plan_target_met": elapsed < TIME_TARGET_S,
        "inventory_traced_mb": round(inventory_mb, 1),
        "peak_traced_memory_mb": round(peak_mb, 1),
        "memory_target_met": peak_mb < MEMORY_TARGET_MB,
        "plan": figures,
        "describe_calls": calls,
        "exposure_world": {
            "extra_ports_ours": figures["exposed_ports"],
            "extra_ports_single_range": single,
            "ratio": round(figures["exposed_ports"] / single, 4) if single else 0.0,
        },
        "exposure_nodeport_sets": nodeport_set_exposure(seed, max(100, round(2000 * scale))),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--scale", type=float, default=1.0, help="world size factor (1 = full)")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    print(json.dumps(run_benchmark(args.scale, args.seed), indent=2))


if __name__ == "__main__":
    main()
