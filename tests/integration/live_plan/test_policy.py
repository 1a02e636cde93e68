"""The policy: strict, defaulted, one-line errors that name the field, file and SSM loaders."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import boto3
import pytest
from moto import mock_aws
from pydantic import BaseModel
from sg_reconciler.adapters.policy_store import load_policy_from_ssm
from sg_reconciler.core.rules import DEFAULT_OWNER, OWNER_TAG_KEY, Peer, Rule, rule_from_dict
from sg_reconciler.policy import (
    LBC_SHARED_DESCRIPTION,
    Binding,
    PolicyDocument,
    PolicyError,
    load_policy_file,
    parse_policy,
)

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "policy.yaml"


def error_of(text: str) -> str:
    with pytest.raises(PolicyError) as caught:
        parse_policy(text)
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_an_empty_document_is_all_defaults() -> None:
    policy = parse_policy("")
    assert policy.owner == DEFAULT_OWNER
    assert policy.quota is None and policy.quota_headroom == 0 and policy.rule_limit == 60
    assert policy.rule_quota(None) == 60 and policy.rule_quota(200) == 200
    (binding,) = policy.bindings
    assert binding.name == "default" and binding.rule_budget == 3
    assert binding.load_balancer_tags == (("sg-reconciler/managed", "true"),)
    assert binding.source == "load_balancer_groups"
    assert binding.destination == "target_enis"
    assert policy.static_rules == ()


def test_every_field_has_a_description() -> None:
    models: list[type[BaseModel]] = [PolicyDocument, Binding]
    seen: set[type[BaseModel]] = set()
    while models:
        model = models.pop()
        seen.add(model)
        for name, info in model.model_fields.items():
            assert info.description, f"{model.__name__}.{name} has no description"
            annotation = info.annotation
            inner = getattr(annotation, "__args__", (annotation,))
            models.extend(
                t
                for t in inner
                if isinstance(t, type) and issubclass(t, BaseModel) and t not in seen
            )
    assert len(seen) >= 5  # Policy and its nested models were all visited


def test_the_commented_example_loads() -> None:
    policy = load_policy_file(EXAMPLE)
    (binding,) = policy.bindings
    assert binding.backend_group == "sg-0123456789abcdef0"
    assert binding.tag_key == "kubernetes.io/cluster/prod"
    assert policy.rule_limit == 55
    settings = policy.desired_settings()
    assert [r.key.peer for r in settings.static_rules] == [
        Peer("group", "sg-0123456789abcdef0"),
        Peer("cidr4", "10.0.0.0/16"),
    ]
    assert settings.static_rules[1].description == "sg-reconciler: static rule"


def test_json_is_accepted() -> None:
    policy = parse_policy(json.dumps({"owner": "team-a", "rule_budget": 1}))
    assert policy.owner == "team-a" and policy.bindings[0].rule_budget == 1


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("rule_budgte: 3", "rule_budgte"),
        ("destination: {kind: tagged_groups, tag_kye: x}", "destination.tag_kye"),
        ("rule_budget: 0", "rule_budget"),
        ("quota: lots", "quota"),
        ("settle_seconds: -1", "settle_seconds"),
        ("owner: 'bad\"owner'", "owner"),
        ("rule_source: {kind: backend_group}", "rule_source"),
        (
            "rule_source: {kind: load_balancer_groups, group_id: sg-0123456789abcdef0}",
            "rule_source",
        ),
        ("destination: {kind: named_groups}", "destination"),
        ("destination: {kind: tagged_groups}", "destination"),
        ("destination: {tag_value: x}", "tag_key and tag_value are only allowed"),
        ("destination: {kind: somewhere}", "destination.kind"),
        ("load_balancers: {tags: [a, b]}", "load_balancers.tags"),
        (
            "static_rules: [{group_id: sg-0123456789abcdef0, from_port: 1, to_port: 2,"
            " cidr_ipv4: 10.0.0.0/8, prefix_list_id: pl-0abc}]",
            "static_rules.0",
        ),
        (
            "static_rules: [{group_id: sg-0123456789abcdef0, from_port: 9, to_port: 2,"
            " cidr_ipv4: 10.0.0.0/8}]",
            "static_rules.0",
        ),
        (
            "static_rules: [{group_id: sg-0123456789abcdef0, from_port: 1, to_port: 2,"
            " cidr_ipv4: 10.0.0.300/8}]",
            "static_rules.0",
        ),
        (
            "static_rules: [{group_id: nope, from_port: 1, to_port: 2, cidr_ipv4: 10.0.0.0/8}]",
            "static_rules.0.group_id",
        ),
        (
            "static_rules: [{group_id: sg-0123456789abcdef0, from_port: 1, to_port: 2,"
            " cidr_ipv6: '2001:db8::/129'}]",
            "static_rules.0",
        ),
        ("quota: 10\nquota_headroom: 10", "quota_headroom"),
        (f"adopt_descriptions: [{', '.join(f'd{i}' for i in range(11))}]", "adopt_descriptions"),
        # no rule is described by nothing, and EC2 keeps at most 255 characters
        ("adopt_descriptions: ['']", "adopt_descriptions.0"),
        (f"adopt_descriptions: [{'d' * 256}]", "adopt_descriptions.0"),
        # strict: no coercion from strings or booleans
        ('rule_budget: "3"', "rule_budget: Input should be a valid integer"),
        ("rule_budget: true", "rule_budget: Input should be a valid integer"),
        ('include_health_checks: "yes"', "include_health_checks: Input should be a valid boolean"),
        ("settle_seconds: 1.5", "settle_seconds"),
        # a key given twice would silently keep the last
        ("rule_budget: 3\nrule_budget: 4", "duplicate key 'rule_budget'"),
        ('{"brake": {"min_revokes": 5, "min_revokes": 6}}', "duplicate key 'min_revokes'"),
        ("[" * 100_000, "nested too deeply"),
        # bindings
        ("bindings: []", "bindings"),
        ("bindings: [{rule_budget: 3}]", "bindings.0.name"),
        ("bindings: [{name: a}, {name: a}]", "name 'a' is already used by bindings.0"),
        ("bindings: [{name: a}]\nrule_budget: 2", "rule_budget belong inside each binding"),
        ("bindings: [{name: a, owner: x}]", "bindings.0.owner: unknown field"),
        (
            "bindings: [{name: a, rule_source: {kind: backend_group, group_id: sg-0123456789abcdef0},"
            " destination: {kind: named_groups, group_ids: [sg-00000000000000001]}},"
            " {name: b, rule_budget: 1, rule_source: {kind: backend_group,"
            " group_id: sg-0123456789abcdef0}, destination: {kind: named_groups,"
            " group_ids: [sg-00000000000000001]}}]",
            "bindings 'a' and 'b' both derive rules in sg-00000000000000001 from "
            "sg-0123456789abcdef0 but disagree (rule_budget 3 and 1",
        ),
        (
            "rule_source: {kind: load_balancer_addresses, client_cidrs: [10.0.0.0/33]}",
            "not an IPv4",
        ),
        ("rule_source: {client_cidrs: [10.0.0.0/8]}", "client_cidrs is only allowed"),
        ("destination: {kind: cluster_group}", "cluster_name is required"),
        ("destination: {cluster_name: prod}", "cluster_name is only allowed"),
        ("destination: {kind: cluster_group, cluster_name: 'a b'}", "destination.cluster_name"),
    ],
)
def test_an_invalid_field_is_named_in_one_line(text: str, named: str) -> None:
    message = error_of(text)
    assert f"{named}" in message, message


def test_repeated_static_rule_with_two_descriptions_is_refused() -> None:
    rule = "{group_id: sg-0123456789abcdef0, from_port: 1, to_port: 2, cidr_ipv4: 10.0.0.0/8"
    message = error_of(f"static_rules: [{rule}, description: a}}, {rule}, description: b}}]")
    assert "static_rules.1" in message
    # the same rule twice with one description is one desired rule, not a conflict
    assert len(parse_policy(f"static_rules: [{rule}}}, {rule}}}]").static_rules) == 2


def test_malformed_and_non_mapping_documents() -> None:
    assert "line 2" in error_of("owner: a\n  bad: [")
    assert "mapping" in error_of("- just\n- a list")


def test_a_missing_file_is_a_policy_error(tmp_path: Path) -> None:
    with pytest.raises(PolicyError, match="cannot read"):
        load_policy_file(tmp_path / "absent.yaml")


def test_selector_tags_must_all_match_and_star_matches_any_value() -> None:
    policy = parse_policy("load_balancers: {tags: {team: web, cluster: '*'}}")
    assert policy.selects({"team": "web", "cluster": "prod", "x": "y"})
    assert not policy.selects({"team": "web"})
    assert not policy.selects({"team": "dns", "cluster": "prod"})
    assert parse_policy("load_balancers: {tags: {}}").selects({})


@mock_aws
def test_policy_from_ssm() -> None:
    ssm = boto3.client("ssm", region_name="us-east-1")
    ssm.put_parameter(Name="/sg-reconciler/policy", Value="owner: from-ssm", Type="String")
    assert load_policy_from_ssm(ssm, "/sg-reconciler/policy").owner == "from-ssm"
    ssm.put_parameter(Name="/bad", Value="rule_budget: many", Type="String")
    with pytest.raises(PolicyError, match=r"SSM parameter /bad: rule_budget"):
        load_policy_from_ssm(ssm, "/bad")
    with pytest.raises(PolicyError, match="ParameterNotFound"):
        load_policy_from_ssm(ssm, "/absent")


def test_the_single_binding_form_and_a_list_of_bindings_say_the_same() -> None:
    single = parse_policy(
        "load_balancers: {tags: {cluster: a}}\n"
        "rule_source: {kind: backend_group, group_id: sg-0123456789abcdef0}\n"
        "destination: {kind: cluster_group, cluster_name: a}\nrule_budget: 2"
    )
    listed = parse_policy(
        "bindings:\n"
        "  - name: default\n"
        "    load_balancers: {tags: {cluster: a}}\n"
        "    rule_source: {kind: backend_group, group_id: sg-0123456789abcdef0}\n"
        "    destination: {kind: cluster_group, cluster_name: a}\n"
        "    rule_budget: 2"
    )
    assert single.desired_settings() == listed.desired_settings()
    two = parse_policy(
        "bindings:\n"
        "  - {name: a, load_balancers: {tags: {cluster: a}}}\n"
        "  - name: legacy\n"
        "    load_balancers: {tags: {legacy: '*'}}\n"
        "    rule_source: {kind: load_balancer_addresses, client_cidrs: ['0.0.0.0/0', '::/0']}"
    )
    assert two.selects({"cluster": "a"}) and two.selects({"legacy": "x"})
    assert not two.selects({"cluster": "b"})
    legacy = two.desired_settings().bindings[1]
    assert (legacy.name, legacy.source, legacy.client_cidrs) == (
        "legacy",
        "load_balancer_addresses",
        ("0.0.0.0/0", "::/0"),
    )


def test_the_bindings_example_is_a_valid_policy() -> None:
    policy = load_policy_file(EXAMPLE.with_name("policy-bindings.yaml"))
    names = [b.name for b in policy.desired_settings().bindings]
    assert names == ["prod", "staging", "edge"]
    assert policy.desired_settings().bindings[2].client_cidrs == ("203.0.113.0/24", "2001:db8::/32")


def test_every_field_of_the_document_reaches_the_core_value() -> None:
    # Given a policy that sets each field to something other than its default
    policy = parse_policy(
        "destination: {kind: tagged_groups, tag_key: team, tag_value: web}\n"
        "include_health_checks: false\n"
        "settle_seconds: 42\n"
        "brake: {max_revoke_percent: 7, min_revokes: 3}\n"
        "static_rules: [{group_id: sg-0123456789abcdef0, protocol: udp, from_port: 53,"
        " to_port: 53, cidr_ipv6: '2001:db8::/32'}]"
    )
    # Then the core's value says the same, not the defaults
    (binding,) = policy.bindings
    assert (binding.tag_key, binding.tag_value) == ("team", "web")
    assert binding.include_health_checks is False
    assert policy.settle_seconds == 42
    assert (policy.brake.max_revoke_percent, policy.brake.min_revokes) == (7, 3)
    (static,) = policy.static_rules
    assert static.key.peer == Peer("cidr6", "2001:db8::/32") and static.key.protocol == "udp"


def test_the_groups_the_bindings_name() -> None:
    policy = parse_policy(
        "bindings:\n"
        "  - name: a\n"
        "    rule_source: {kind: backend_group, group_id: sg-0123456789abcdef0}\n"
        "    destination: {kind: named_groups, group_ids: [sg-00000000000000001]}\n"
        "  - {name: b}"
    )
    assert policy.backend_groups == {"sg-0123456789abcdef0"}
    assert policy.named_groups == {"sg-00000000000000001"}
    assert parse_policy("").backend_groups == set() == parse_policy("").named_groups


def test_only_an_unowned_rule_with_a_listed_description_is_adopted() -> None:
    # (the document refuses an empty description; the core value is built without it)
    listed = parse_policy(f"adopt_descriptions: ['{LBC_SHARED_DESCRIPTION}']")
    policy = replace(listed, adopt_descriptions=(LBC_SHARED_DESCRIPTION, ""))

    def rule(description: str, **tags: str) -> Rule:
        return rule_from_dict(
            {
                "GroupId": "sg-0123456789abcdef0",
                "IpProtocol": "tcp",
                "FromPort": 80,
                "ToPort": 80,
                "CidrIpv4": "10.0.0.0/8",
                "Description": description,
                "Tags": [{"Key": k, "Value": v} for k, v in tags.items()],
            }
        )

    assert policy.adopts(rule(LBC_SHARED_DESCRIPTION))
    assert not policy.adopts(rule("someone else's"))
    # another deployment's rule stays its own, whatever its description
    assert not policy.adopts(rule(LBC_SHARED_DESCRIPTION, **{OWNER_TAG_KEY: "other"}))
    # a rule without a description is never taken over, even if '' is listed
    assert not policy.adopts(rule(""))
