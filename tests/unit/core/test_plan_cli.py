"""The offline `sg-reconciler plan` command: exit codes, output and one-line errors."""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from sg_reconciler.core.plan import Plan
from sg_reconciler_tools import cli
from sg_reconciler_tools.cli import (
    EXIT_BAD_INPUT,
    EXIT_BROKEN_PIPE,
    EXIT_INTERRUPTED,
    EXIT_REFUSED,
    main,
)
from sg_reconciler_tools.render import render_plan
from unit.core.sg_judge import Doc, judge_plan
from unit.core.sg_worlds import NODES, lbc_3639, owned, rule

REPO = Path(__file__).resolve().parents[3]


def write(path: Path, rules: Any) -> Path:
    doc = {"SecurityGroupRules": rules} if isinstance(rules, list) else rules
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return path


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    current, desired = lbc_3639()
    egress = rule(NODES, None, protocol="-1", rule_id="sgr-egress", CidrIpv4="0.0.0.0/0")
    egress["IsEgress"] = True
    return write(tmp_path / "c.json", [*current, egress]), write(tmp_path / "d.json", desired)


def run(
    capsys: pytest.CaptureFixture[str], current: Path, desired: Path, *extra: str
) -> tuple[int, str, str]:
    code = main(["plan", "--current", str(current), "--desired", str(desired), *extra])
    out, err = capsys.readouterr()
    return code, out, err


def test_a_plan_exits_0_with_the_steps_as_json(
    capsys: pytest.CaptureFixture[str], files: tuple[Path, Path]
) -> None:
    code, out, err = run(capsys, *files, "--output", "json")
    assert (code, err) == (0, "")
    doc = json.loads(out)
    assert doc["feasible"] is True
    assert [s["action"] for s in doc["steps"]] == ["authorize", "revoke"]
    assert doc["steps"][1] == {"action": "revoke", "group_id": NODES, "rule_ids": ["sgr-nodeports"]}
    current, desired = lbc_3639()
    assert judge_plan(current, desired, doc, lambda _g: 60) == []


def test_the_table_output_lists_each_call(
    capsys: pytest.CaptureFixture[str], files: tuple[Path, Path]
) -> None:
    code, out, _ = run(capsys, *files)
    assert code == 0
    lines = out.splitlines()
    assert lines[1].split()[:3] == ["1", "authorize", NODES]
    assert "tcp 31000-32500 from sg-0backend000000001" in lines[1]
    # a revoke says what it takes away, as the current rules show it
    assert lines[2].split()[:4] == ["2", "revoke", NODES, "sgr-nodeports:"]
    assert "tcp 31000-32000 from sg-0backend000000001" in lines[2]


def test_the_quota_option_turns_the_change_into_a_modify(
    capsys: pytest.CaptureFixture[str], files: tuple[Path, Path]
) -> None:
    code, out, _ = run(capsys, *files, "--max-rules-per-group", "2", "--output", "json")
    doc = json.loads(out)
    assert code == 0 and [s["action"] for s in doc["steps"]] == ["modify"]
    assert "sgr-nodeports" in doc["notes"][0]


def per_family_files(tmp_path: Path, peer: dict[str, Any]) -> tuple[Path, Path]:
    """Two IPv6 rules of another tool and our rule on port 80 that grows to 80-81."""
    current = [
        rule(NODES, (22, 22), rule_id="sgr-ssh6", CidrIpv6="2001:db8::/56"),
        rule(NODES, (443, 443), rule_id="sgr-web6", CidrIpv6="2001:db8::/56"),
        owned(NODES, (80, 80), "sgr-80", **peer),
    ]
    desired = [rule(NODES, (80, 81), **peer)]
    return write(tmp_path / "c.json", current), write(tmp_path / "d.json", desired)


def test_per_family_counts_ipv4_and_ipv6_rules_apart(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # Given a group at a flat count of 3 rules, only one of them IPv4
    files = per_family_files(tmp_path, {"CidrIpv4": "10.0.0.0/16"})
    # When counted flat, a fourth rule does not fit: the rule is modified in place
    code, out, _ = run(capsys, *files, "--max-rules-per-group", "3", "--output", "json")
    assert code == 0 and [s["action"] for s in json.loads(out)["steps"]] == ["modify"]
    # When counted per family, as AWS does, the IPv4 family has room: make-before-break
    code, out, _ = run(
        capsys, *files, "--max-rules-per-group", "3", "--per-family", "--output", "json"
    )
    assert code == 0 and [s["action"] for s in json.loads(out)["steps"]] == ["authorize", "revoke"]


def test_per_family_counts_a_prefix_list_as_its_max_entries(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    files = per_family_files(tmp_path, {"PrefixListId": "pl-0a1"})
    # Without its size the count is unknown: bad input naming the list
    code, out, err = run(capsys, *files, "--per-family")
    assert_one_line_error(code, out, err)
    assert "--prefix-list-size for pl-0a1" in err
    assert err.rstrip().endswith("(see 'sg-reconciler plan --help')")
    # A list of 2 entries: two of them fit in a quota of 4, the replacement makes 4 + 0 later
    code, out, _ = run(
        capsys,
        *files,
        *("--max-rules-per-group", "4", "--per-family", "--prefix-list-size", "pl-0a1=IPv4:2"),
        *("--output", "json"),
    )
    assert code == 0 and [s["action"] for s in json.loads(out)["steps"]] == ["authorize", "revoke"]
    # A list of 3 entries: 3 + 3 does not fit in 4, so the rule is modified in place
    code, out, _ = run(
        capsys,
        *files,
        *("--max-rules-per-group", "4", "--per-family", "--prefix-list-size", "pl-0a1=IPv4:3"),
        *("--output", "json"),
    )
    assert code == 0 and [s["action"] for s in json.loads(out)["steps"]] == ["modify"]


def test_a_prefix_list_size_no_rule_references_is_named_in_a_note(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # Given rules that reference pl-0a1 only, and its size given with two more (typos?)
    current, desired = per_family_files(tmp_path, {"PrefixListId": "pl-0a1"})
    sizes = ["--per-family", "--prefix-list-size", "pl-0a1=IPv4:2"]
    typos = ["--prefix-list-size", "pl-0b2=IPv4:3", "--prefix-list-size", "pl-0a=IPv6:3"]
    # When planned, the plan is the same, and a note names the lists that count for nothing
    code, out, err = run(capsys, current, desired, *sizes, *typos, "--output", "json")
    doc = json.loads(out)
    assert (code, err) == (0, "") and [s["action"] for s in doc["steps"]] == ["authorize", "revoke"]
    assert doc["notes"] == [
        f"--prefix-list-size names pl-0a, pl-0b2, which no rule in {current} or {desired} "
        "references (a typo?): their sizes count for nothing"
    ]
    # the table says it after the steps, as it says the plan's other notes
    code, out, err = run(capsys, current, desired, *sizes, *typos[:2])
    assert (code, err) == (0, "")
    assert out.splitlines()[-1] == (
        f"note: --prefix-list-size names pl-0b2, which no rule in {current} or {desired} "
        "references (a typo?): its size counts for nothing"
    )
    # every size used: no note
    code, out, _ = run(capsys, current, desired, *sizes, "--output", "json")
    assert code == 0 and json.loads(out)["notes"] == []


def test_the_json_notes_keep_the_plans_own_and_add_the_commands(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # Given a list of 3 entries in a quota of 4 (the rule is modified in place, which the plan
    # notes) and a size given for a list no rule references (which the command notes)
    current, desired = per_family_files(tmp_path, {"PrefixListId": "pl-0a1"})
    sizes = ["--max-rules-per-group", "4", "--per-family", "--prefix-list-size", "pl-0a1=IPv4:3"]
    typo = ["--prefix-list-size", "pl-0b2=IPv4:3"]
    code, out, err = run(capsys, current, desired, *sizes, *typo, "--output", "json")
    doc = json.loads(out)
    assert (code, err) == (0, "") and [s["action"] for s in doc["steps"]] == ["modify"]
    # Then both are in the JSON, the plan's first: the command's note adds to the plan's
    (modified, typed) = doc["notes"]
    assert modified.startswith(f"{NODES}: no quota headroom, so rule sgr-80 is modified")
    assert typed.startswith("--prefix-list-size names pl-0b2, which no rule in")


def test_a_refusals_json_keeps_the_commands_note(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # Given a list of 5 entries, more than the quota of 4 holds (refused), and a typo'd size
    current, desired = per_family_files(tmp_path, {"PrefixListId": "pl-0a1"})
    sizes = ["--max-rules-per-group", "4", "--per-family", "--prefix-list-size", "pl-0a1=IPv4:5"]
    typo = ["--prefix-list-size", "pl-0b2=IPv4:3"]
    code, out, err = run(capsys, current, desired, *sizes, *typo, "--output", "json")
    doc = json.loads(out)
    assert (code, err) == (EXIT_REFUSED, "") and doc["feasible"] is False
    # Then the refusal's JSON carries the note, as a plan's does
    assert doc["notes"] == [
        f"--prefix-list-size names pl-0b2, which no rule in {current} or {desired} "
        "references (a typo?): its size counts for nothing"
    ]


@pytest.mark.parametrize(
    ("extra", "names"),
    [
        (["--prefix-list-size", "pl-1=IPv5:3", "--per-family"], "is not PL=FAMILY:N"),
        (["--prefix-list-size", "pl-1=IPv4:0", "--per-family"], "N at least 1"),
        (["--prefix-list-size", "pl-1=IPv4:3"], "only with --per-family"),
    ],
)
def test_bad_prefix_list_sizes_exit_2(
    capsys: pytest.CaptureFixture[str], files: tuple[Path, Path], extra: list[str], names: str
) -> None:
    code, out, err = run(capsys, *files, *extra)
    assert_one_line_error(code, out, err)
    assert names in err
    assert err.rstrip().endswith("(see 'sg-reconciler plan --help')")


def test_an_empty_plan_exits_0(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    current = write(tmp_path / "c.json", [owned(NODES, (80, 80), "sgr-1")])
    desired = write(tmp_path / "d.json", [rule(NODES, (80, 80))])
    code, out, _ = run(capsys, current, desired)
    assert code == 0 and out.startswith("No change")


def test_a_plan_with_nothing_to_run_but_held_or_refused_does_not_say_no_change() -> None:
    held = Plan((), notes=("revokes held by the brake (...)",), held="50% of the owned rules")
    text = render_plan(held)
    assert not text.startswith("No change") and "not as desired" in text.splitlines()[0]
    assert "held: the brake holds the revokes: 50% of the owned rules" in text
    refused = Plan((), refused=("sg-1: no quota headroom",))
    assert "refused: sg-1: no quota headroom" in render_plan(refused)
    assert render_plan(Plan(())).startswith("No change")


def test_a_refusal_exits_3_with_the_reason(
    capsys: pytest.CaptureFixture[str], files: tuple[Path, Path]
) -> None:
    code, out, err = run(capsys, *files, "--max-rules-per-group", "1", "--output", "json")
    assert (code, err) == (EXIT_REFUSED, "")
    doc = json.loads(out)
    assert set(doc) == {"feasible", "reason"} and doc["feasible"] is False
    assert NODES in doc["reason"] and "quota of 1" in doc["reason"]
    code, out, _ = run(capsys, *files, "--max-rules-per-group", "1")
    assert code == EXIT_REFUSED and out.startswith("REFUSED: ")


def test_the_owner_option_picks_the_managed_rules(
    capsys: pytest.CaptureFixture[str], files: tuple[Path, Path]
) -> None:
    # Given the current rules are owned by the default owner, another owner manages nothing
    code, out, _ = run(capsys, *files, "--owner", "team-b", "--output", "json")
    doc = json.loads(out)
    # Then nothing is revoked: the old rule is not team-b's
    assert code == 0 and [s["action"] for s in doc["steps"]] == ["authorize"]


GOOD = rule(NODES, (80, 80), CidrIpv4="10.0.0.0/16")

# (case, which file is bad, its content, text the error line must contain)
BAD_INPUTS: list[tuple[str, str, Any, str]] = [
    ("malformed JSON", "desired", '{"SecurityGroupRules": [', "malformed JSON at line 1"),
    ("not the describe shape", "current", {"Rules": []}, "SecurityGroupRules"),
    ("unknown protocol", "desired", [GOOD, {**GOOD, "IpProtocol": "tpc"}], "rule #1"),
    ("port out of range", "desired", [{**GOOD, "ToPort": 70000}], "rule #0"),
    ("negative port", "desired", [{**GOOD, "FromPort": -5}], "rule #0"),
    ("reversed ports", "desired", [{**GOOD, "FromPort": 90, "ToPort": 80}], "rule #0"),
    ("no peer", "desired", [{k: v for k, v in GOOD.items() if k != "CidrIpv4"}], "rule #0"),
    ("two peers", "desired", [{**GOOD, "PrefixListId": "pl-1"}], "rule #0"),
    (
        "bad CIDR",
        "current",
        [{**GOOD, "CidrIpv4": "10.0.0.0/33", "SecurityGroupRuleId": "sgr-x"}],
        "sgr-x",
    ),
    (
        "duplicate rule ids",
        "current",
        [
            {**GOOD, "SecurityGroupRuleId": "sgr-1"},
            {**GOOD, "SecurityGroupRuleId": "sgr-1", "ToPort": 81},
        ],
        "rule #1 (sgr-1",
    ),
    ("egress in desired", "desired", [{**GOOD, "IsEgress": True}], "egress rules are not managed"),
    ("port with two minus signs", "desired", [{**GOOD, "FromPort": "--5"}], "rule #0"),
    ("port in superscript digits", "desired", [{**GOOD, "ToPort": "\u00b2"}], "rule #0"),
    ("protocol in superscript digits", "desired", [{**GOOD, "IpProtocol": "\u00b2"}], "rule #0"),
    ("ambiguous description", "desired", [GOOD, {**GOOD, "Description": "x"}], "listed twice"),
    # Every field is type-checked: a wrong type anywhere names the rule and the field.
    (
        "prefix list id that is an object",
        "desired",
        [{**GOOD, "CidrIpv4": None, "PrefixListId": {"Id": "pl-1"}}],
        f"rule #0 ({NODES} IpProtocol=tcp FromPort=80 ToPort=80): PrefixListId must be a string",
    ),
    ("CIDR that is a number", "desired", [{**GOOD, "CidrIpv4": 0}], "CidrIpv4 must be a string"),
    (
        "CIDR that is a list",
        "current",
        [{**GOOD, "CidrIpv4": ["10.0.0.0/16"], "SecurityGroupRuleId": "sgr-x"}],
        "sgr-x",
    ),
    ("CIDR that is false", "desired", [{**GOOD, "CidrIpv4": False}], "CidrIpv4 must be a string"),
    (
        "referenced group that is a string",
        "desired",
        [{**GOOD, "CidrIpv4": None, "ReferencedGroupInfo": "sg-lb"}],
        "ReferencedGroupInfo must be an object",
    ),
    (
        "referenced group id that is a number",
        "desired",
        [{**GOOD, "CidrIpv4": None, "ReferencedGroupInfo": {"GroupId": 7}}],
        "ReferencedGroupInfo.GroupId must be a string",
    ),
    (
        "referenced group's VpcId that is a list",
        "desired",
        [{**GOOD, "CidrIpv4": None, "ReferencedGroupInfo": {"GroupId": "sg-lb", "VpcId": []}}],
        "ReferencedGroupInfo.VpcId must be a string",
    ),
    ("protocol that is a list", "desired", [{**GOOD, "IpProtocol": ["tcp"]}], "IpProtocol must be"),
    ("protocol that is true", "desired", [{**GOOD, "IpProtocol": True}], "IpProtocol must be"),
    ("description that is a number", "desired", [{**GOOD, "Description": 0}], "Description must"),
    (
        "group id that is a number",
        "desired",
        [{**GOOD, "GroupId": 5}],
        "(a group id string), not 5",
    ),
    (
        "port of an all-traffic rule that is an object",
        "desired",
        [{**GOOD, "IpProtocol": "-1", "FromPort": {}, "ToPort": -1}],
        "FromPort must be an integer",
    ),
    (
        "tag value that is a number",
        "current",
        [{**GOOD, "SecurityGroupRuleId": "sgr-x", "Tags": [{"Key": "team", "Value": 1}]}],
        "tag 'team': Key and Value must be strings",
    ),
    (
        "owner id that is a number",
        "current",
        [{**GOOD, "SecurityGroupRuleId": "sgr-x", "GroupOwnerId": 123456789012}],
        "GroupOwnerId must be a string",
    ),
]


@pytest.mark.parametrize(
    ("case", "which", "content", "names"), BAD_INPUTS, ids=[c[0] for c in BAD_INPUTS]
)
def test_bad_input_exits_2_with_one_line_naming_it(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    case: str,
    which: str,
    content: Any,
    names: str,
) -> None:
    # Given one bad file (the other is fine)
    paths = {
        "current": write(tmp_path / "current.json", [{**GOOD, "SecurityGroupRuleId": "sgr-ok"}]),
        "desired": write(tmp_path / "desired.json", [GOOD]),
    }
    write(paths[which], content)
    # When the plan command runs
    code, out, err = run(capsys, paths["current"], paths["desired"], "--output", "json")
    # Then exit 2, nothing on stdout, and exactly one line on stderr naming file and rule
    assert_one_line_error(code, out, err)
    assert str(paths[which]) in err or case == "ambiguous description"
    assert names in err


def assert_one_line_error(code: int, out: str, err: str) -> None:
    assert code == EXIT_BAD_INPUT
    assert out == ""
    assert err.startswith("sg-reconciler: error: ") and err.endswith("\n")
    assert err.count("\n") == 1 and "Traceback" not in err


@pytest.mark.parametrize(
    ("content", "names"),
    [
        ('{"SecurityGroupRules": []}'.encode("utf-16"), "not UTF-8 text at byte 0 (UTF-16?"),
        (bytes(range(128, 256)), "not UTF-8 text"),
        (b"[" * 100_000, "nested too deeply"),
    ],
    ids=["utf-16 (PowerShell >)", "binary", "nested 100,000 deep"],
)
def test_a_file_that_is_not_json_text_exits_2(
    capsys: pytest.CaptureFixture[str], files: tuple[Path, Path], content: bytes, names: str
) -> None:
    files[0].write_bytes(content)
    code, out, err = run(capsys, *files)
    assert_one_line_error(code, out, err)
    assert names in err


def test_a_utf8_file_with_a_byte_order_mark_is_read(
    capsys: pytest.CaptureFixture[str], files: tuple[Path, Path]
) -> None:
    files[0].write_bytes(b"\xef\xbb\xbf" + files[0].read_bytes())
    code, _, err = run(capsys, *files)
    assert (code, err) == (0, "")


def test_an_endpoint_that_is_not_a_url_exits_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text("{}")
    code = main(["plan", "--live", "--policy", str(policy), "--endpoint-url", "notaurl"])
    out, err = capsys.readouterr()
    assert_one_line_error(code, out, err)
    assert "'notaurl' is not an http(s) URL" in err


def test_a_missing_file_exits_2(
    capsys: pytest.CaptureFixture[str], files: tuple[Path, Path]
) -> None:
    missing = files[0].with_name("nope.json")
    code, out, err = run(capsys, missing, files[1])
    assert_one_line_error(code, out, err)
    assert f"{missing}: cannot read" in err


@pytest.mark.parametrize(
    "argv",
    [
        ["plan", "--current", "c.json"],
        ["plan", "--current", "c.json", "--desired", "d.json", "--max-rules-per-group", "0"],
        ["plan", "--current", "c.json", "--desired", "d.json", "--max-rules-per-group", "x"],
        ["plan", "--current", "c.json", "--desired", "d.json", "--output", "yaml"],
        ["apply"],
        [],
    ],
)
def test_usage_errors_exit_2_with_one_line(
    capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    code = main(argv)
    out, err = capsys.readouterr()
    assert_one_line_error(code, out, err)
    command = " ".join(["sg-reconciler", *argv[:1]]) if argv[:1] == ["plan"] else "sg-reconciler"
    assert err.rstrip().endswith(f"(see '{command} --help')")


@pytest.mark.parametrize(
    "argv",
    [
        ["plan", "--current", "c.json", "--desired", "d.json"],
        ["status", "--stack", "sg-reconciler"],
        ["init", "--live"],
        ["demo"],
    ],
)
def test_an_unknown_flag_names_its_command(
    capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    code = main([*argv, "--bogus", "x"])
    out, err = capsys.readouterr()
    assert_one_line_error(code, out, err)
    assert "unrecognized arguments: --bogus x" in err
    assert err.rstrip().endswith(f"(see 'sg-reconciler {argv[0]} --help')")
    # given before the command, it is told to go after it, whatever it is
    code, out, err = main(["--bogus", *argv]), *capsys.readouterr()
    assert_one_line_error(code, out, err)
    assert f"--bogus: flags go after the command (sg-reconciler {argv[0]} --bogus ...)" in err


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (
            ["plan", "--current", "c.json", "--desired", "d.json", "--max-rules-per-group", "4"],
            "argument --max-rules-per-group: given twice (4, then 60)",
        ),
        (["plan", "--current", "c.json", "--output", "json"], "argument --output: given twice"),
        # a flag of a shared group (AWS access), and other commands (none of them reads AWS)
        (["plan", "--live", "--policy", "p.yaml", "--region", "x"], "argument --region: given"),
        (["release-template", "--bucket", "b", "--template", "t"], "(t, then u)"),
    ],
)
def test_a_flag_that_takes_one_value_given_twice_names_the_flag_and_its_command(
    capsys: pytest.CaptureFixture[str], argv: list[str], says: str
) -> None:
    # Given a command line whose last flag is given again with another value
    again = {
        "--max-rules-per-group": "60",
        "--output": "table",
        "--region": "y",
        "--template": "u",
    }[argv[-2]]
    # When it runs, then it is refused, not planned (or run) with the last value
    code = main([*argv, argv[-2], again])
    out, err = capsys.readouterr()
    assert_one_line_error(code, out, err)
    assert says in err
    assert err.rstrip().endswith(f"(see 'sg-reconciler {argv[0]} --help')")


def test_a_flag_repeated_by_design_takes_each_prefix_list_once(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # Given rules that reference two prefix lists
    current = [owned(NODES, (80, 80), f"sgr-{n}", PrefixListId=f"pl-0a{n}") for n in (1, 2)]
    desired = [rule(NODES, (80, 81), PrefixListId=f"pl-0a{n}") for n in (1, 2)]
    files = write(tmp_path / "c.json", current), write(tmp_path / "d.json", desired)
    sizes = ["--per-family", "--prefix-list-size", "pl-0a1=IPv4:2"]
    # When each list's size is given once, the flag repeats as designed
    code, out, err = run(capsys, *files, *sizes, "--prefix-list-size", "pl-0a2=IPv4:2")
    assert (code, err) == (0, "") and "authorize" in out
    # When one list is given two sizes, neither silently wins
    code, out, err = run(capsys, *files, *sizes, "--prefix-list-size", "pl-0a1=IPv4:20")
    assert_one_line_error(code, out, err)
    assert "argument --prefix-list-size: pl-0a1 given twice (IPv4:2, then IPv4:20)" in err
    assert err.rstrip().endswith("(see 'sg-reconciler plan --help')")


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        # argparse read the value as the command, or called the flag given missing
        (["--region", "eu-west-1", "init", "--live"], "--region eu-west-1: flags go after"),
        (["--live", "init"], "--live: flags go after the command (sg-reconciler init --live"),
        (["--output", "json", "plan"], "--output json: flags go after the command"),
    ],
)
def test_flags_before_the_command_are_told_where_they_go(
    capsys: pytest.CaptureFixture[str], argv: list[str], says: str
) -> None:
    code = main(argv)
    out, err = capsys.readouterr()
    assert_one_line_error(code, out, err)
    assert says in err


def test_words_before_the_command_that_are_not_flags_are_argparse_s_to_judge(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # an unknown command, even with a command's name later as a value
    for argv in (["help", "plan"], ["relase-template", "--out", "demo"]):
        code = main(argv)
        out, err = capsys.readouterr()
        assert_one_line_error(code, out, err)
        assert f"invalid choice: '{argv[0]}'" in err and "flags go after" not in err
    # help and the version before a command are what they ask for
    for asked in ("--help", "--version"):
        with pytest.raises(SystemExit) as stopped:
            main([asked, "plan"])
        assert stopped.value.code == 0 and capsys.readouterr().out


def test_a_badly_written_account_policy_points_at_release_template_help(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = main(["release-template", "--bucket", "b", "--account-policy", "nope"])
    out, err = capsys.readouterr()
    assert_one_line_error(code, out, err)
    assert "'nope': expected ACCOUNT=FILE" in err
    assert err.rstrip().endswith("(see 'sg-reconciler release-template --help')")


def test_an_account_given_two_policies_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    pairs = ("--account-policy", "111122223333=a.yaml", "--account-policy", "111122223333=b.yaml")
    code = main(["release-template", "--bucket", "b", *pairs])
    out, err = capsys.readouterr()
    assert_one_line_error(code, out, err)
    assert "111122223333 given twice (a.yaml, then b.yaml)" in err
    assert err.rstrip().endswith("(see 'sg-reconciler release-template --help')")


def test_the_module_runs_as_a_program(files: tuple[Path, Path], tmp_path: Path) -> None:
    # Given the example files, when the CLI runs as its own process
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(str(REPO / p) for p in ("layers", "tools"))}
    command = [sys.executable, "-m", "sg_reconciler_tools.cli", "plan"]
    ok = subprocess.run(
        [*command, "--current", str(files[0]), "--desired", str(files[1]), "--output", "json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    # Then it prints the plan and exits 0
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["feasible"] is True
    # And bad input gives exit 2 and one line, no traceback
    bad = write(tmp_path / "bad.json", '{"SecurityGroupRules": [}')
    failed = subprocess.run(
        [*command, "--current", str(bad), "--desired", str(files[1])],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert_one_line_error(failed.returncode, failed.stdout, failed.stderr)


def test_the_shipped_examples_plan_make_before_break(capsys: pytest.CaptureFixture[str]) -> None:
    examples = REPO / "examples"
    code, out, _ = run(
        capsys,
        examples / "lbc-3639-current.json",
        examples / "lbc-3639-desired.json",
        "--output",
        "json",
    )
    assert code == 0
    current: list[Doc] = json.loads((examples / "lbc-3639-current.json").read_text())[
        "SecurityGroupRules"
    ]
    desired: list[Doc] = json.loads((examples / "lbc-3639-desired.json").read_text())[
        "SecurityGroupRules"
    ]
    assert judge_plan(current, desired, json.loads(out), lambda _g: 60) == []


def test_a_reader_that_stops_early_or_a_ctrl_c_ends_without_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a plan whose JSON is larger than a pipe holds, read by `| head -1`
    many = [rule(NODES, (p, p), CidrIpv4="10.0.0.0/16") for p in range(1000, 2500)]
    current = write(tmp_path / "c.json", [])
    desired = write(tmp_path / "d.json", many)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(str(REPO / p) for p in ("layers", "tools"))}
    command = [sys.executable, "-m", "sg_reconciler_tools.cli", "plan", "--output", "json"]
    files = ["--current", str(current), "--desired", str(desired)]
    process = subprocess.Popen(
        [*command, *files, "--max-rules-per-group", "2000"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    assert process.stdout is not None and process.stdout.readline() == b"{\n"
    process.stdout.close()
    _, err = process.communicate(timeout=60)
    # Then it stops quietly with 141, as a process the pipe's SIGPIPE ended
    assert (process.returncode, err) == (EXIT_BROKEN_PIPE, b"")
    # And so it does when the reader left before a small output (still in the buffer), with
    # stdout buffered as on a user's machine
    small = write(tmp_path / "small.json", many[:1])
    quiet = {k: v for k, v in env.items() if k != "PYTHONUNBUFFERED"}
    process = subprocess.Popen(
        [*command, "--current", str(current), "--desired", str(small)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=quiet,
    )
    assert process.stdout is not None
    process.stdout.close()
    _, err = process.communicate(timeout=60)
    assert (process.returncode, err) == (EXIT_BROKEN_PIPE, b"")

    # And Ctrl-C is one line and 130, as a shell reports it
    def interrupted(args: object) -> int:
        raise KeyboardInterrupt

    monkeypatch.setitem(cli.RUNS, "plan", interrupted)
    code = main(["plan", "--current", str(current), "--desired", str(desired)])
    assert (code, capsys.readouterr().err) == (EXIT_INTERRUPTED, "sg-reconciler: interrupted\n")


def test_a_fingerprint_is_read_in_any_case() -> None:
    # the brake writes it in lower case; a copy from an upper-casing viewer is the same set
    args = ["release-brake", "--lock-table", "t", "--fingerprint"]
    parsed = cli.build_parser().parse_args([*args, " 0123456789ABCDEF"])
    assert parsed.fingerprint == "0123456789abcdef"
    with pytest.raises(cli.UsageError, match="'0123' is not a fingerprint"):
        cli.build_parser().parse_args([*args, "0123"])


def test_a_missing_region_or_credentials_is_one_line_saying_what_to_set(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for name in ("AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE", "AWS_ACCESS_KEY_ID"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY", raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    code = main(["init", "--live"])
    out, err = capsys.readouterr()
    assert_one_line_error(code, out, err)
    assert "no AWS region: give --region, or set AWS_REGION" in err
    # AWS_REGION is a region, as the AWS CLI takes it (boto3 alone reads AWS_DEFAULT_REGION)
    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    code = main(["init", "--live"])
    out, err = capsys.readouterr()
    assert_one_line_error(code, out, err)
    assert "no AWS credentials: give --profile or set AWS_PROFILE" in err


def test_the_commands_known_before_parsing_are_the_parsers() -> None:
    (subcommands,) = [
        a for a in cli.build_parser()._actions if isinstance(a, argparse._SubParsersAction)
    ]
    assert set(subcommands.choices) == set(cli.COMMANDS)


def test_an_owned_current_rule_without_its_id_names_the_current_file(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # Given the current file is not describe's output: an owned rule there has no id
    no_id = owned(NODES, (80, 80), "sgr-1")
    del no_id["SecurityGroupRuleId"]
    current = write(tmp_path / "c.json", [no_id])
    desired = write(tmp_path / "d.json", [rule(NODES, (443, 443))])
    code, out, err = run(capsys, current, desired)
    assert_one_line_error(code, out, err)
    assert f"{current}: current rule {NODES} tcp 80" in err and "has no SecurityGroupRuleId" in err
    # and a desired rule listed twice names the desired file
    twice = write(
        tmp_path / "d2.json", [rule(NODES, (443, 443)), rule(NODES, (443, 443), description="x")]
    )
    code, out, err = run(capsys, write(tmp_path / "c2.json", []), twice)
    assert_one_line_error(code, out, err)
    assert f"{twice}: desired rule {NODES} tcp 443" in err


def test_status_shows_times_to_the_second_and_where_attention_is_explained() -> None:
    from sg_reconciler.core.fleet import ExecutionOutcome
    from sg_reconciler_tools.status import StackStatus, render_stack_status

    def run(name: str, status: str, at: str, error: str = "") -> ExecutionOutcome:
        account, region = "123456789012", "eu-west-1"
        return ExecutionOutcome(account, region, "s", name, status, error, "", True, at)

    done = run("a", "SUCCEEDED", "2026-12-03T18:40:12.345678+00:00")
    failed = run("b", "FAILED", "2026-12-03T19:40:12.5+01:00", "RolledBack")
    text = render_stack_status(StackStatus("s", "123456789012", "eu-west-1", [failed, done]))
    assert "last drift repaired: 2026-12-03 18:40:12 UTC" in text
    assert "2026-12-03 18:40:12 UTC  b" in text and ".345678" not in text
    assert text.splitlines()[-1].endswith(
        "(what each means and what to do: docs/troubleshooting.md)"
    )
    # a time without a zone is not claimed to be UTC
    naive = run("c", "SUCCEEDED", "2026-12-03T18:40:12.5")
    shown = render_stack_status(StackStatus("s", "1", "r", [naive]))
    assert "last drift repaired: 2026-12-03 18:40:12\n" in shown


def test_version_is_the_projects(capsys: pytest.CaptureFixture[str]) -> None:
    import tomllib

    with pytest.raises(SystemExit) as stopped:
        main(["--version"])
    release = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert stopped.value.code == 0 and capsys.readouterr().out == f"sg-reconciler {release}\n"


def test_every_command_and_flag_is_in_the_cli_docs() -> None:
    # each command's flags in a row of its own section's table, or of "AWS access" (which
    # the commands that read AWS share); a flag named only in the usage block is not enough
    docs = (REPO / "docs" / "cli.md").read_text()
    sections = {
        part.split("\n", 1)[0].strip("` "): part
        for part in re.split(r"^## ", docs, flags=re.MULTILINE)[1:]
    }
    parser = cli.build_parser()
    (subcommands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]

    def rows(text: str) -> set[str]:
        return set(re.findall(r"^\| `(--[a-z-]+)[ `]", text, flags=re.MULTILINE))

    def flags(of: argparse.ArgumentParser) -> set[str]:
        found = {f for a in of._actions for f in a.option_strings if f.startswith("--")}
        return found - {"--help", "--version"}

    shared = rows(sections["AWS access"])
    missing = [f"{name}: no section" for name in subcommands.choices if name not in sections]
    for name, command in subcommands.choices.items():
        documented = rows(sections.get(name, "")) | shared
        missing += sorted(f"{name} {f}" for f in flags(command) - documented)
    assert missing == []
    assert "sg-reconciler --version" in docs


def test_a_table_the_caller_may_not_describe_is_used_unchecked_with_a_note(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from types import SimpleNamespace

    from botocore.exceptions import ClientError

    def refused(**_: object) -> None:
        raise ClientError({"Error": {"Code": "AccessDeniedException"}}, "DescribeTable")

    clients = SimpleNamespace(dynamodb=SimpleNamespace(describe_table=refused))
    cli._check_table(clients, "locks", "group_id", "LockTableName")  # type: ignore[arg-type]
    assert capsys.readouterr().err == "note: locks not checked (DescribeTable refused)\n"
