"""`sg-reconciler init --live` on an account as the AWS Load Balancer Controller leaves it:
the drafted policy loads, `plan --live` with it converges, and the rules then admit every
flow the load balancers need and nothing else, once the controller has stopped."""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from integration.live_plan.lbc_world import CLIENTS, VPC_CIDR, LbcWorld, build_lbc_world
from sg_reconciler.adapters import aws as aws_module
from sg_reconciler.adapters.security_groups import SecurityGroupRules
from sg_reconciler.app.contracts.plan import PlanDocument
from sg_reconciler.core.plan import Adopt, Authorize, Modify, Plan, Revoke
from sg_reconciler.core.rules import Rule, ingress_rules
from sg_reconciler.policy import (
    LBC_SHARED_DESCRIPTION,
    load_policy_document,
    load_policy_file,
    parse_policy,
)
from sg_reconciler_tools import cli

REGION = "us-east-1"
READ_PREFIXES = ("Describe", "Get", "List")


@pytest.fixture
def world(aws: tuple[Any, Any]) -> LbcWorld:
    return build_lbc_world(*aws)


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Every API operation the CLI's clients call."""
    seen: list[str] = []

    def recording(*args: Any, **kwargs: Any) -> aws_module.Clients:
        clients = aws_module.make_clients(*args, **kwargs)
        for client in (clients.ec2, clients.elbv2, clients.ssm, clients.dynamodb, clients.sts):
            client.meta.events.register(
                "before-call.*.*", lambda model, **_: seen.append(model.name)
            )
        return clients

    monkeypatch.setattr(cli, "make_clients", recording)
    yield seen


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main([*argv, "--region", REGION])
    out, err = capsys.readouterr()
    return code, out, err


@dataclass(frozen=True)
class Source:
    """A concrete sender: an address and the groups its interface carries."""

    name: str
    address: str
    groups: tuple[str, ...] = ()


def sources(world: LbcWorld) -> list[Source]:
    outside = "192.0.2.1"  # group members: admitted by their groups only
    return [
        Source("subnet-1", "10.0.1.5"),  # the NLBs' own addresses
        Source("subnet-2", "10.0.2.5"),
        Source("vpc", "10.0.3.5"),  # in the VPC, outside the NLBs' subnets
        Source("clients", "203.0.113.9"),  # alpha-legacy's clients
        Source("internet", "198.51.100.7"),
        *(Source(role, outside, (world.groups[role],)) for role in world.groups if "_" in role),
    ]


PORTS = (22, 8080, 9100, 30080, 30500, 31000, 31053)


def admits(rules: list[Rule], source: Source, port: int) -> bool:
    for rule in rules:
        key = rule.key
        if key.protocol not in ("tcp", "-1"):
            continue
        if key.protocol == "tcp" and not key.from_port <= port <= key.to_port:
            continue
        peer = key.peer
        if peer.kind == "group" and peer.value in source.groups:
            return True
        if peer.kind == "cidr4" and ipaddress.ip_address(source.address) in ipaddress.ip_network(
            peer.value
        ):
            return True
    return False


def flows(ec2: Any, world: LbcWorld, keep: Any = lambda rule: True) -> set[tuple[str, str, int]]:
    """(destination role, source, port) for every flow the kept rules admit."""
    docs = ec2.describe_security_group_rules()["SecurityGroupRules"]
    rules = [r for r in ingress_rules(docs, "described") if keep(r)]
    found = set()
    for role, group_id in world.groups.items():
        mine = [r for r in rules if r.group_id == group_id]
        for source in sources(world):
            found |= {(role, source.name, p) for p in PORTS if admits(mine, source, p)}
    return found


# What the load balancers need, from the world's description (tests/integration/live_plan/lbc_world.py):
# through their backend groups, from their own addresses (the subnets), and from clients
# where client addresses are preserved (alpha-legacy's are shown by the controller's rule;
# beta-dns is internal and no rule shows its clients: its VPC, the policy's default).
NEEDED = {
    ("nodes_alpha", "backend_alpha", 30080),
    ("nodes_alpha", "subnet-1", 30500),
    ("nodes_alpha", "subnet-2", 30500),
    ("nodes_alpha", "clients", 30500),
    ("nodes_beta", "backend_beta", 31000),
    ("nodes_beta", "subnet-1", 31053),
    ("nodes_beta", "subnet-2", 31053),
    ("nodes_beta", "vpc", 31053),
    ("pods_beta", "backend_beta", 8080),
    ("pods_beta", "subnet-1", 9100),
    ("pods_beta", "subnet-2", 9100),
}


def apply(ec2: Any, plan: Plan, owner: str) -> None:
    """The plan's calls in order, through the steps' own adapter."""
    writer = SecurityGroupRules(ec2)
    for step in plan.steps:
        if isinstance(step, Authorize):
            writer.authorize(step.group_id, step.rules, owner, "init-test")
        elif isinstance(step, Revoke):
            writer.revoke(step.group_id, step.rule_ids, owner)
        elif isinstance(step, Modify):
            writer.modify(step.group_id, step.rule_id, step.rule, owner)
        elif isinstance(step, Adopt):
            writer.adopt(step.group_id, step, owner, "init-test")


def test_init_then_plan_converges_on_every_needed_flow_and_nothing_more(
    aws: tuple[Any, Any],
    world: LbcWorld,
    calls: list[str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    ec2, _ = aws
    # Given an account with two clusters, NLBs with and without groups, and pods.
    before = flows(ec2, world)

    # When init drafts a policy: it only reads, and the text loads with the real loader.
    code, text, err = run(capsys, "init", "--live")
    assert (code, err) == (0, "")
    assert calls and all(c.startswith(READ_PREFIXES) for c in calls), calls
    path = tmp_path / "policy.yaml"
    path.write_text(text)
    policy = load_policy_file(path)
    document = load_policy_document(path)
    assert flows(ec2, world) == before

    # The same draft as data: the same policy, with the placeholder and its note.
    code, out, err = run(capsys, "init", "--live", "--output", "json")
    assert (code, err) == (0, "")
    doc = json.loads(out)
    assert parse_policy(json.dumps(doc["policy"])) == policy
    assert [p["binding"] for p in doc["placeholders"]] == ["beta-dns"]
    assert any("beta-dns" in n and "client_cidrs" in n for n in doc["notes"])
    assert "# client_cidrs:" in text

    g = world.groups
    bindings = {b.name: b for b in document.bindings or []}
    assert sorted(bindings) == ["alpha", "alpha-legacy", "beta", "beta-dns", "beta-metrics"]
    for cluster in ("alpha", "beta"):
        binding = bindings[cluster]
        assert binding.load_balancers.tags == {"elbv2.k8s.aws/cluster": cluster}
        assert (binding.rule_source.kind, binding.rule_source.group_id) == (
            "backend_group",
            g[f"backend_{cluster}"],
        )
        assert (binding.destination.kind, binding.destination.cluster_name) == (
            "cluster_group",
            cluster,
        )
    assert bindings["alpha-legacy"].rule_source.client_cidrs == [CLIENTS]  # not the VPC's
    for name in ("beta-dns", "beta-metrics"):
        assert bindings[name].rule_source.kind == "load_balancer_addresses"
        assert bindings[name].rule_source.client_cidrs is None
    assert policy.adopt_descriptions == (LBC_SHARED_DESCRIPTION,)

    # When plan --live runs with it and its plan is applied.
    code, out, err = run(capsys, "plan", "--live", "--policy", str(path), "--output", "json")
    assert (code, err) == (0, ""), out
    plan = PlanDocument.model_validate(json.loads(out)).to_plan()
    adopted = {s.rule_id for s in plan.steps if isinstance(s, Adopt)}
    assert adopted == {
        world.controller_rules[k]
        for k in ("backend_alpha 30080", f"{CLIENTS} 30500", "backend_beta 8080")
    }
    apply(ec2, plan, policy.owner)

    # Then our rules alone admit every needed flow and no other.
    assert flows(ec2, world, lambda r: r.owned_by(policy.owner)) == NEEDED
    # And once the controller stops (it revokes what still carries its description), the
    # groups admit exactly what is needed: its VPC-wide health-check rule is gone.
    leftover = world.controller_rules[f"{VPC_CIDR} 30500"]
    ec2.revoke_security_group_ingress(GroupId=g["nodes_alpha"], SecurityGroupRuleIds=[leftover])
    assert flows(ec2, world) == NEEDED
    # And the next plan has nothing left to do.
    code, out, err = run(capsys, "plan", "--live", "--policy", str(path), "--output", "json")
    assert (code, err, json.loads(out)["steps"]) == (0, "", [])


def one_line_error(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("sg-reconciler: error: "), err
    return lines[0]


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["init"], "--live"),
        (["init", "--live", "--output", "yaml"], "--output"),
        (["init", "--live", "--endpoint-url", "not a url"], "http(s) URL"),
        (["init", "--live", "--profile", "nope"], "nope"),
    ],
)
def test_init_bad_input_exits_2_with_one_line(
    argv: list[str],
    says: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    code, out, err = run(capsys, *argv)
    assert (code, out) == (2, "")
    assert says in one_line_error(err)


def test_init_on_an_unreachable_endpoint_exits_2(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(aws_module, "DEFAULT_MAX_ATTEMPTS", 1)  # no retry backoff sleeps
    for name, value in (("AWS_ACCESS_KEY_ID", "testing"), ("AWS_SECRET_ACCESS_KEY", "testing")):
        monkeypatch.setenv(name, value)
    import socket

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    code, out, err = run(capsys, "init", "--live", "--endpoint-url", f"http://127.0.0.1:{port}")
    assert (code, out) == (2, "")
    assert f"cannot reach http://127.0.0.1:{port}/: check --endpoint-url" in one_line_error(err)
