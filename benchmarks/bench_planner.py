"""Benchmark: offline planning (parse + plan) of many full security groups (no AWS).

    .venv/bin/python -m benchmarks.bench_planner [--groups 500] [--factor 10] [--repeat 3]

World: N security groups of 60 ingress rules each, in describe-security-group-rules shape
(the CLI's input): 4 unmanaged rules (ssh, HTTPS from a prefix list, ICMP, an IPv6 range)
and 56 owned rules: NodePort ranges from 8 load-balancer groups, from /24 CIDRs and from
an IPv6 range. 10% of the rules change: 3 NodePort ranges grow (LBC issue #3639), 2 move
to other ports, 1 is dropped for a new one. Both documents are parsed with
`ingress_rules` and planned with `make_plan`; the time covers both (best of `repeat`).

Scenarios: "room" (quota 120: every group gets one authorize and one revoke) and "full"
(the default quota of 60, which these groups are at: the planner searches an interleaved
order, authorize what fits, revoke, repeat). Each is timed at N groups and at factor x N;
the ratio shows how the cost scales (target: planning < 0.5 s at N = 500, ratio <= 12;
parsing is timed apart). The targets are ratios measured in one run: planning at the
quota within 1.5x of planning with room (`full_over_room`, CPU, the two taken in turns), and loading both documents as
the CLI does (`load_current`, `load_desired`: read, json.loads, parse) within 1.5x of their
floor: json.loads of the same files and building the same rules unchecked, with the
collector paused (`parse_vs_floor`, at N and factor x N).
"""

from __future__ import annotations

import argparse
import gc
import ipaddress
import json
import random
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from sg_reconciler.collector import paused_collector
from sg_reconciler.core.plan import Authorize, Modify, Plan, Revoke
from sg_reconciler.core.planner import Limits, make_plan
from sg_reconciler.core.rules import (
    DEFAULT_MAX_RULES_PER_GROUP,
    OWNER_TAG_KEY,
    Peer,
    PeerKind,
    Rule,
    RuleKey,
    ingress_rules,
)
from sg_reconciler_tools.plan_files import load_current, load_desired

RULES_PER_GROUP = 60
LOAD_BALANCER_GROUPS = 8
TIME_TARGET_S = 0.5
RATIO_TARGET = 12.0
FULL_OVER_ROOM_TARGET = PARSE_OVER_FLOOR_TARGET = 1.5
SCENARIOS = {"room": 2 * DEFAULT_MAX_RULES_PER_GROUP, "full": DEFAULT_MAX_RULES_PER_GROUP}

Doc = dict[str, Any]


def _rule(group: str, protocol: str, ports: tuple[int, int], peer: Doc) -> Doc:
    return {
        "GroupId": group,
        "IsEgress": False,
        "IpProtocol": protocol,
        "FromPort": ports[0],
        "ToPort": ports[1],
        **peer,
    }


def _v6(cidr: str) -> str:
    """A CIDR as describe prints it (compressed): the floor builds rules from it unchanged."""
    return str(ipaddress.IPv6Network(cidr))


def _unmanaged(group: str, index: int) -> list[Doc]:
    return [
        _rule(group, "tcp", (22, 22), {"CidrIpv4": "10.0.0.0/16", "Description": "ssh"}),
        _rule(group, "tcp", (443, 443), {"PrefixListId": "pl-0corp00000000001"}),
        _rule(group, "icmp", (3, 4), {"CidrIpv4": "10.0.0.0/8"}),
        _rule(group, "tcp", (8443, 8443), {"CidrIpv6": _v6(f"2001:db8:{index % 65536:x}::/48")}),
    ]


def _managed(group: str, index: int, rnd: random.Random) -> list[Doc]:
    """56 owned NodePort rules with distinct identities, on 20-port strides."""
    peers: list[Doc] = [
        {"ReferencedGroupInfo": {"GroupId": f"sg-0lb{index // 20:06x}{k:02x}"}}
        for k in range(LOAD_BALANCER_GROUPS)
    ]
    peers += [{"CidrIpv4": f"10.{index % 250}.{k}.0/24"} for k in range(3)]
    peers.append({"CidrIpv6": _v6(f"2001:db8:{index % 65536:x}:1::/64")})
    rules = []
    for n in range(56):
        low, protocol = 30000 + 20 * n, rnd.choice(["tcp", "tcp", "udp"])
        ports = (low, low + rnd.randrange(0, 10))
        rules.append(_rule(group, protocol, ports, peers[n % len(peers)]))
    return rules


def build_world(groups: int, seed: int = 7) -> tuple[Doc, Doc]:
    """The current (C.json) and desired (D.json) documents of `groups` groups."""
    rnd = random.Random(seed)
    current: list[Doc] = []
    desired: list[Doc] = []
    owner = [{"Key": OWNER_TAG_KEY, "Value": "sg-reconciler"}]
    for index in range(groups):
        group = f"sg-{index:017x}"
        for doc in _unmanaged(group, index):
            current.append({**doc, "SecurityGroupRuleId": f"sgr-{len(current):017x}"})
        managed = _managed(group, index, rnd)
        for doc in managed:
            rule_id = f"sgr-{len(current):017x}"
            current.append({**doc, "SecurityGroupRuleId": rule_id, "Tags": owner})
        # 10% of the 60 rules change: 3 ranges grow, 2 move, 1 is replaced by a new port.
        changed = rnd.sample(range(len(managed)), 6)
        wanted = [dict(doc) for doc in managed]
        for n in changed[:3]:
            wanted[n]["ToPort"] = wanted[n]["FromPort"] + 15
        for n in changed[3:5]:
            wanted[n]["FromPort"] += 11
            wanted[n]["ToPort"] = wanted[n]["FromPort"] + 2
        dropped = wanted.pop(changed[5])
        wanted.append({**dropped, "FromPort": 29000 + index % 900, "ToPort": 29000 + index % 900})
        desired.extend(wanted)
    return {"SecurityGroupRules": current}, {"SecurityGroupRules": desired}


@paused_collector()  # as the edge takes it around a read and a plan
def plan_once(current: Doc, desired: Doc, quota: int) -> tuple[float, float, float, Plan]:
    """Wall seconds to parse both documents, wall seconds to plan (make_plan, safety check
    included), CPU seconds for both, and the plan."""
    gc.collect()
    wall, cpu = time.perf_counter(), time.process_time()
    current_rules = ingress_rules(current["SecurityGroupRules"], "current")
    desired_rules = ingress_rules(desired["SecurityGroupRules"], "desired")
    parsed = time.perf_counter()
    result = make_plan(current_rules, desired_rules, limits=Limits(quota))
    done = time.perf_counter()
    cpu = time.process_time() - cpu
    if not isinstance(result, Plan):
        raise RuntimeError(f"the benchmark world was refused: {result.reason[:300]}")
    return parsed - wall, done - parsed, cpu, result


def time_world(groups: int, quota: int, repeat: int, seed: int) -> dict[str, Any]:
    current, desired = build_world(groups, seed)
    runs = [plan_once(current, desired, quota) for _ in range(repeat)]
    plan = runs[0][3]
    kinds = {"authorize": Authorize, "revoke": Revoke, "modify": Modify}
    steps = {name: sum(isinstance(s, kind) for s in plan.steps) for name, kind in kinds.items()}
    best = min(runs, key=lambda run: run[0] + run[1])
    return {
        "groups": groups,
        "rules": len(current["SecurityGroupRules"]),
        "plan_seconds": round(min(run[1] for run in runs), 3),
        "parse_seconds": round(best[0], 3),
        "seconds": round(best[0] + best[1], 3),
        # CPU time too: on a shared machine the wall time also counts other processes.
        "cpu_seconds": round(min(run[2] for run in runs), 3),
        "steps": steps,
    }


PEER_FIELDS: tuple[tuple[str, PeerKind], ...] = (
    ("CidrIpv4", "cidr4"),
    ("CidrIpv6", "cidr6"),
    ("PrefixListId", "prefix_list"),
)


def _peer(doc: Doc) -> Peer:
    for field, kind in PEER_FIELDS:
        if field in doc:
            return Peer(kind, doc[field])
    return Peer("group", doc["ReferencedGroupInfo"]["GroupId"])


@paused_collector()
def floor_rules(path: Path) -> list[Rule]:
    """The floor of loading a document: json.loads and the same rules built from its fields
    with no check or normalisation (the benchmark world is already as describe prints it)."""
    return [
        Rule(
            RuleKey(doc["GroupId"], doc["IpProtocol"], doc["FromPort"], doc["ToPort"], _peer(doc)),
            doc.get("Description", ""),
            doc.get("SecurityGroupRuleId"),
            tuple(sorted((tag["Key"], tag["Value"]) for tag in doc.get("Tags", ()))),
        )
        for doc in json.loads(path.read_text())["SecurityGroupRules"]
    ]


def time_parse(groups: int, repeat: int, seed: int) -> dict[str, Any]:
    """CPU seconds (best of `repeat`, floor and parse taken in turns) to load both documents
    as the CLI does, and their floor."""
    current, desired = build_world(groups, seed)
    with tempfile.TemporaryDirectory() as tmp:
        paths = Path(tmp, "current.json"), Path(tmp, "desired.json")
        for path, doc in zip(paths, (current, desired), strict=True):
            path.write_text(json.dumps(doc))
        loaders: dict[str, Callable[[], tuple[list[Rule], list[Rule]]]] = {
            "parse": lambda: (load_current(paths[0]), load_desired(paths[1])),
            "floor": lambda: (floor_rules(paths[0]), floor_rules(paths[1])),
        }
        if loaders["parse"]() != loaders["floor"]():
            raise RuntimeError("the floor does not build the rules the parser does")
        best = best_cpu(loaders, repeat)
    return {
        "groups": groups,
        "parse_cpu_seconds": round(best["parse"], 3),
        "floor_cpu_seconds": round(best["floor"], 3),
        "ratio": round(best["parse"] / best["floor"], 2),
    }


def best_cpu(runs: Mapping[str, Callable[[], object]], rounds: int) -> dict[str, float]:
    """Best CPU seconds of each run over `rounds`, taken in turns so that a busy machine
    weighs on all of them alike."""
    best: dict[str, float] = {}
    for _ in range(rounds):
        for name, run in runs.items():
            gc.collect()
            cpu = time.process_time()
            run()
            best[name] = min(best.get(name, float("inf")), time.process_time() - cpu)
    return best


@paused_collector()
def time_quota_ratio(groups: int, repeat: int, seed: int) -> dict[str, Any]:
    """CPU seconds of make_plan at the quota and with room on one parsed world, best of
    3 x `repeat`, taken in turns so that a busy machine weighs on both alike."""
    current, desired = build_world(groups, seed)
    rules = ingress_rules(current["SecurityGroupRules"], "current")
    wanted = ingress_rules(desired["SecurityGroupRules"], "desired")
    best = best_cpu(
        {
            name: lambda name=name: make_plan(rules, wanted, limits=Limits(SCENARIOS[name]))  # type: ignore[misc]
            for name in ("room", "full")
        },
        3 * repeat,
    )
    return {
        "groups": groups,
        "room_cpu_seconds": round(best["room"], 3),
        "full_cpu_seconds": round(best["full"], 3),
        "ratio": round(best["full"] / best["room"], 2),
    }


def run_benchmark(
    groups: int = 500,
    factor: int = 10,
    repeat: int = 3,
    seed: int = 7,
    scenarios: tuple[str, ...] = ("room", "full"),
) -> dict[str, Any]:
    """Time every scenario at `groups` and `factor` x `groups`; return the figures."""
    figures: dict[str, Any] = {
        "rules_per_group": RULES_PER_GROUP,
        "changing": "10%",
        "repeat": repeat,
        "time_target_s": TIME_TARGET_S,
        "ratio_target": RATIO_TARGET,
    }
    # Every small world before any large one: a process that has built a large world runs
    # slower (a bigger, scattered heap), which would skew the at-quota / room ratio.
    smalls = {name: time_world(groups, SCENARIOS[name], repeat, seed) for name in scenarios}
    for name in scenarios:
        small = smalls[name]
        large = time_world(groups * factor, SCENARIOS[name], repeat, seed)
        ratio = large["seconds"] / small["seconds"] if small["seconds"] else 0.0
        cpu_ratio = large["cpu_seconds"] / small["cpu_seconds"] if small["cpu_seconds"] else 0.0
        figures[name] = {
            "quota": SCENARIOS[name],
            "small": small,
            "large": large,
            "ratio": round(ratio, 2),
            "cpu_ratio": round(cpu_ratio, 2),
            "time_target_met": small["plan_seconds"] < TIME_TARGET_S,
            "ratio_target_met": ratio <= RATIO_TARGET * factor / 10,
        }
    figures["full_over_room"] = time_quota_ratio(groups, repeat, seed)
    figures["full_over_room_target_met"] = (
        figures["full_over_room"]["ratio"] <= FULL_OVER_ROOM_TARGET
    )
    figures["parse_vs_floor"] = [time_parse(n, repeat, seed) for n in (groups, groups * factor)]
    figures["parse_vs_floor_target_met"] = all(
        f["ratio"] <= PARSE_OVER_FLOOR_TARGET for f in figures["parse_vs_floor"]
    )
    return figures


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--groups", type=int, default=500, help="groups in the small world")
    parser.add_argument("--factor", type=int, default=10, help="size of the large world")
    parser.add_argument("--repeat", type=int, default=3, help="runs per size (best is kept)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--scenario", choices=sorted(SCENARIOS), action="append", help="default: all"
    )
    args = parser.parse_args(argv)
    scenarios = tuple(args.scenario or SCENARIOS)
    figures = run_benchmark(args.groups, args.factor, args.repeat, args.seed, scenarios)
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
