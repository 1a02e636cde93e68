"""One owner per deployment (invariant 10): one source, a claim, and clear refusals."""

from __future__ import annotations

import boto3
import pytest
from integration.adapters.tables import create_table
from moto import mock_aws
from sg_reconciler.adapters.deployment import BrakeNotHeld, BrakeReleases, check_owner_claim
from sg_reconciler.errors import BadConfiguration
from sg_reconciler.policy import PolicyError, parse_policy
from sg_reconciler_tools.cli import main

CLAIM = "/sg-reconciler/owners/prod"


def test_a_policy_naming_another_owner_is_refused_with_one_line() -> None:
    with pytest.raises(PolicyError, match="owner 'staging' is not this deployment's owner 'prod'"):
        parse_policy("owner: staging", owner="prod")
    # a policy without owner takes the stack's; one that agrees is fine
    assert parse_policy("{}", owner="prod").owner == "prod"
    assert parse_policy("owner: prod", owner="prod").owner == "prod"
    # static rules then describe themselves with the stack's owner
    static = "static_rules: [{group_id: sg-0123456789abcdef0, from_port: 1, to_port: 2, cidr_ipv4: 10.0.0.0/8}]"
    assert parse_policy(static, owner="prod").static_rules[0].description == "prod: static rule"


def test_a_quota_override_above_the_accounts_quota_is_refused() -> None:
    policy = parse_policy("quota: 100")
    with pytest.raises(PolicyError, match="quota 100 is above the account's quota of 60"):
        policy.rule_quota(60)
    assert policy.rule_quota(200) == 100 and parse_policy("quota: 40").rule_quota(60) == 40
    assert policy.rule_quota(100) == 100  # the account's own quota is not above it
    with pytest.raises(PolicyError, match="quota_headroom 60 leaves no room"):
        parse_policy("quota_headroom: 60").rule_quota(None)


@mock_aws
def test_two_stacks_in_one_account_cannot_share_an_owner() -> None:
    # Given the claim of stack A on the owner name "prod"
    ssm = boto3.client("ssm", region_name="eu-west-1")
    ssm.put_parameter(Name=CLAIM, Type="String", Value="arn:stack/a")
    # Then stack A runs, and stack B (deployed by hand around the claim) refuses to
    check_owner_claim(ssm, CLAIM, "arn:stack/a", "prod")
    with pytest.raises(BadConfiguration, match="claimed by arn:stack/a, not this stack"):
        check_owner_claim(ssm, CLAIM, "arn:stack/b", "prod")
    # And a second claim with the same name fails to be created, as the stack's would
    with pytest.raises(ssm.exceptions.ParameterAlreadyExists):
        ssm.put_parameter(Name=CLAIM, Type="String", Value="arn:stack/b")
    with pytest.raises(BadConfiguration, match="could not be read"):
        check_owner_claim(ssm, "/sg-reconciler/owners/missing", "arn:stack/a", "missing")


@mock_aws
def test_a_brake_release_names_one_fingerprint_and_expires() -> None:
    dynamodb = boto3.client("dynamodb", region_name="eu-west-1")
    create_table(dynamodb, "locks", "group_id")
    now = [1_000_000.0]
    releases = BrakeReleases(dynamodb, "locks", clock=lambda: now[0])
    # A set the brake does not hold cannot be released, and nothing is written
    with pytest.raises(BrakeNotHeld, match="held now: none"):
        releases.release("abc", "alice")
    assert dynamodb.scan(TableName="locks")["Items"] == []
    # Once held (and seen in the list), it can; the release names that one set only
    releases.record_held("abc", "the policy selects no load balancer")
    assert [h.fingerprint for h in releases.held()] == ["abc"]
    assert releases.release("abc", "alice").reason == "the policy selects no load balancer"
    assert releases.released("abc") and not releases.released("other")
    # And both records expire after a day
    now[0] += 2 * 86_400
    assert not releases.released("abc") and releases.held() == []


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--fingerprint", "abc"], "'abc' is not a fingerprint"),
        (["--fingerprint", "0123456789abcdef", "--by", "alice"], "no table no-such-table in"),
        ([], "no table no-such-table in eu-west-1: give the stack's LockTableName output"),
    ],
)
@mock_aws
def test_release_brake_bad_input_is_one_line_and_exit_2(
    argv: list[str], expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given no lock table by that name (a typo in --lock-table), or a malformed fingerprint
    code = main(["release-brake", "--lock-table", "no-such-table", "--region", "eu-west-1", *argv])
    error = capsys.readouterr().err
    assert code == 2 and error.count("\n") == 1 and expected in error


@mock_aws
def test_a_table_that_is_not_the_lock_table_is_refused_not_read_as_empty(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Given another table (the plan store, say): read, it would say the brake holds nothing
    dynamodb = boto3.client("dynamodb", region_name="eu-west-1")
    create_table(dynamodb, "plans", "plan_id", "part")
    code = main(["release-brake", "--lock-table", "plans", "--region", "eu-west-1"])
    error = capsys.readouterr().err
    assert code == 2 and "plans is not the table this reads (its key is plan_id" in error
    assert "give the stack's LockTableName output" in error
    code = main(["status", "--fleet-table", "plans", "--region", "eu-west-1"])
    assert code == 2 and "give the stack's FleetTableName output" in capsys.readouterr().err
