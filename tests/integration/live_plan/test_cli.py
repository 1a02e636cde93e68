"""`sg-reconciler plan --live` against a moto server on 127.0.0.1, and its bad-input exits."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pytest
from integration.live_plan.world import EXPECTED_DEFAULT_DESIRED, World, build_world
from moto.server import ThreadedMotoServer
from sg_reconciler.adapters import aws as clients_module
from sg_reconciler_tools.cli import main

REGION = "us-east-1"
FAKE_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": REGION,
}


@dataclass
class Server:
    url: str
    world: World
    ec2: Any


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    with pytest.MonkeyPatch.context() as env:
        for name, value in FAKE_ENV.items():
            env.setenv(name, value)
        moto = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        moto.start()
        host, port = moto.get_host_and_port()
        url = f"http://{host}:{port}"
        env.setenv("MOTO_PORT", str(port))
        try:
            ec2 = boto3.client("ec2", region_name=REGION, endpoint_url=url)
            elbv2 = boto3.client("elbv2", region_name=REGION, endpoint_url=url)
            yield Server(url, build_world(ec2, elbv2), ec2)
        finally:
            reset = urllib.request.Request(f"{url}/moto-api/reset", method="POST")
            urllib.request.urlopen(reset, timeout=10).close()
            moto.stop()


@pytest.fixture
def fake_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in FAKE_ENV.items():
        monkeypatch.setenv(name, value)


def write_policy(tmp_path: Path, text: str = "owner: sg-reconciler\n") -> str:
    path = tmp_path / "policy.yaml"
    path.write_text(text)
    return str(path)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["plan", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def one_line_error(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("sg-reconciler: error: ")
    assert "Traceback" not in err
    return lines[0]


def all_rules(ec2: Any) -> list[dict[str, Any]]:
    return sorted(
        ec2.describe_security_group_rules()["SecurityGroupRules"],
        key=lambda r: r["SecurityGroupRuleId"],
    )


def test_plan_live_json_prints_the_plan_and_the_desired_rules(
    server: Server, tmp_path: Path, capsys: pytest.CaptureFixture[str], fake_env: None
) -> None:
    before = all_rules(server.ec2)
    code, out, err = run(
        capsys,
        "--live",
        "--policy",
        write_policy(tmp_path),
        "--endpoint-url",
        server.url,
        "--region",
        REGION,
        "--output",
        "json",
    )
    assert (code, err) == (0, "")
    doc = json.loads(out)
    role = {group_id: name for name, group_id in server.world.groups.items()}
    desired = {
        (
            role[r["GroupId"]],
            r["IpProtocol"],
            r["FromPort"],
            r["ToPort"],
            role[r["ReferencedGroupInfo"]["GroupId"]],
        )
        for r in doc["desired"]
    }
    assert desired == EXPECTED_DEFAULT_DESIRED
    assert doc["feasible"] is True
    actions = [step["action"] for step in doc["steps"]]
    assert actions == sorted(actions) and set(actions) == {"authorize", "revoke"}
    revoked = {i for step in doc["steps"] if step["action"] == "revoke" for i in step["rule_ids"]}
    assert revoked == {server.world.stale_rule_id, server.world.orphan_rule_id}
    # Readable, additively: the groups' names, and what needs each desired rule
    assert doc["owner"] == "sg-reconciler"  # the policy sets none: the default, said
    assert {doc["group_names"][g] for g in doc["groups"]} == {
        "nodes-a",
        "nodes-b",
        "extra",
        "pods",
        "orphan",
    }
    needs = dict(zip(map(json.dumps, doc["desired"]), doc["desired_needed_by"], strict=True))
    assert len(needs) == len(doc["desired"]) and all(needs.values())
    dns = [n for r, n in needs.items() if '"FromPort": 53' in r]
    assert dns and all(any(w.startswith("target group dns (") for w in n) for n in dns)
    assert all_rules(server.ec2) == before  # it never writes


def test_plan_live_table(
    server: Server, tmp_path: Path, capsys: pytest.CaptureFixture[str], fake_env: None
) -> None:
    code, out, _ = run(
        capsys, "--live", "--policy", write_policy(tmp_path), "--endpoint-url", server.url
    )
    assert code == 0
    assert "authorize" in out and "revoke" in out
    assert f"pods ({server.world.groups['pods']})" in out  # groups by name and id
    assert "<- target group dns (" in out  # each new rule says what needs it
    assert f"desired: {len(EXPECTED_DEFAULT_DESIRED)} managed rule(s) in 5 group(s)" in out
    assert "owner: sg-reconciler (the default; a deployed stack's is its OwnerName" in out
    assert "note: load balancer legacy has no security groups" in out
    # One range per (group, source, protocol) would open 31080-31443 (361 unneeded ports) in
    # nodes_a and extra from two sources each, and tcp 53-8080 (8,026) in pods from two.
    assert "exposure: 0 port(s) open beyond need (one range per source would open 17496)" in out


def test_a_missing_group_of_static_rules_is_noted_once_by_its_role(
    server: Server, tmp_path: Path, capsys: pytest.CaptureFixture[str], fake_env: None
) -> None:
    # Given static rules on a group that does not exist (two of them) and from one
    gone, source = "sg-0000000000000dead", "sg-0000000000000beef"
    nodes = server.world.groups["nodes_a"]
    policy = write_policy(
        tmp_path,
        "static_rules:\n"
        f"  - {{group_id: {gone}, from_port: 22, to_port: 22, cidr_ipv4: 10.0.0.0/8}}\n"
        f"  - {{group_id: {gone}, from_port: 80, to_port: 80, cidr_ipv4: 10.0.0.0/8}}\n"
        f"  - {{group_id: {nodes}, from_port: 443, to_port: 443, source_group_id: {source}}}\n",
    )
    for output in ("json", "table"):
        # When the plan is read from the account
        code, out, err = run(
            capsys, "--live", "--policy", policy, "--endpoint-url", server.url, "--output", output
        )
        assert (code, err) == (0, "")
        notes = (
            json.loads(out)["notes"]
            if output == "json"
            else [line for line in out.splitlines() if line.startswith("note: ")]
        )
        # Then each missing group is noted once, saying what it is to the policy
        about_gone = [n for n in notes if gone in n]
        about_source = [n for n in notes if source in n]
        assert len(about_gone) == 1 and "(static rule group)" in about_gone[0], notes
        assert len(about_source) == 1 and "(static rule source)" in about_source[0], notes


def test_a_refused_live_plan_exits_3(
    server: Server, tmp_path: Path, capsys: pytest.CaptureFixture[str], fake_env: None
) -> None:
    policy = write_policy(tmp_path, "quota: 3\n")
    code, out, _ = run(
        capsys, "--live", "--policy", policy, "--endpoint-url", server.url, "--output", "json"
    )
    assert code == 3 and json.loads(out)["feasible"] is False


def test_an_invalid_policy_exits_2_naming_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fake_env: None
) -> None:
    policy = write_policy(tmp_path, "rule_budget: 2\ndestinaton: {kind: named_groups}\n")
    code, out, err = run(capsys, "--live", "--policy", policy, "--endpoint-url", "http://x")
    assert (code, out) == (2, "")
    assert "destinaton" in one_line_error(err)


def test_an_unreachable_endpoint_exits_2(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    fake_env: None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(clients_module, "DEFAULT_MAX_ATTEMPTS", 1)  # no retry backoff sleeps
    import socket

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    code, _, err = run(
        capsys,
        "--live",
        "--policy",
        write_policy(tmp_path),
        "--endpoint-url",
        f"http://127.0.0.1:{port}",
    )
    assert code == 2
    assert f"cannot reach http://127.0.0.1:{port}/: check --endpoint-url" in one_line_error(err)


def test_missing_credentials_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    code, _, err = run(
        capsys, "--live", "--policy", write_policy(tmp_path), "--endpoint-url", "http://127.0.0.1:9"
    )
    assert code == 2
    assert "credentials" in one_line_error(err).lower()
    code, _, err = run(capsys, "--live", "--policy", write_policy(tmp_path), "--profile", "nope")
    assert code == 2 and "nope" in one_line_error(err)


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--live"], "--policy"),
        (["--live", "--policy", "p.yaml", "--current", "c.json"], "--current"),
        ([], "--live"),
        (["--live", "--policy", "/nonexistent/policy.yaml"], "cannot read"),
        (["--live", "--policy", "p.yaml", "--owner", "team-a"], "family: drop --owner ("),
        (["--live", "--policy", "p.yaml", "--max-rules-per-group", "50"], "drop --max-rules"),
        (["--live", "--policy", "p.yaml", "--per-family"], "family: drop --per-family ("),
    ],
)
def test_live_usage_errors_exit_2(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(capsys, *argv)
    assert (code, out) == (2, "")
    assert says in one_line_error(err)
    # flags wrong or at odds point at the command's --help; a file it cannot read does not
    pointer = err.rstrip().endswith("(see 'sg-reconciler plan --help')")
    assert pointer == (says != "cannot read")
