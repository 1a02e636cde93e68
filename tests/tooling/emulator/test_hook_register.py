"""Every change the emulator makes to moto is registered with the test that shows moto alone.

A hook (a `moto_hooks` function returning a `Patch`, or any workaround of `cfn_workarounds`)
stays only while moto lacks what it adds. Its docstring says which kind it is: a fact of AWS
(`AWS:` and the page it follows) or tooling with no public switch (`Tooling:` and why: no
real sleeping, speed only, the runtime playing a poller). Its register entry names the test
that shows what moto does alone, so an upgrade that closes the gap fails there and the hook
can go. A new hook fails here until it has both.
"""

from __future__ import annotations

import ast
import inspect
import re
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from sg_reconciler_tools.local import cfn_workarounds, moto_hooks

# Building blocks (they patch nothing themselves), groups of hooks registered one by one,
# and the botocore `before-send` path that faults and observers take (no moto internal).
NOT_HOOKS = frozenset(
    {
        "together",
        "replace",
        "add",
        "patch_ec2_fidelity",
        "patch_ec2_lookups",
        "intercept_api_call",
        "on_ec2_write",
        "prepare",
    }
)

HOOKS = Path(__file__).with_name("test_moto_hooks.py")
WORKAROUNDS = Path(__file__).with_name("test_cfn_workarounds.py")
REGISTER: dict[str, tuple[Path, str]] = {
    "patch_lambda_invoke": (HOOKS, "test_undoing_the_dispatch_restores_moto_echo"),
    "patch_wait_states": (HOOKS, "test_undoing_the_sleep_hooks_restores_the_real_ones"),
    "patch_retry_sleep": (HOOKS, "test_undoing_the_sleep_hooks_restores_the_real_ones"),
    "patch_states_all_as_aws": (HOOKS, "test_states_all_does_not_catch_a_runtime_error_as_on_aws"),
    "patch_duplicate_ignores_description": (
        HOOKS,
        "test_moto_alone_still_accepts_a_description_only_duplicate",
    ),
    "patch_group_rule_description": (HOOKS, "test_a_group_rule_shows_its_description"),
    "patch_authorize_returns_all_rules": (
        HOOKS,
        "test_a_multi_permission_authorize_returns_every_new_rule",
    ),
    "patch_cidr_host_bits_masked": (HOOKS, "test_cidr_host_bits_are_masked_as_ec2_does"),
    "patch_rule_quota_as_aws": (HOOKS, "test_moto_alone_counts_ipv4_and_ipv6_rules_together"),
    "patch_eni_delegated_prefixes": (
        HOOKS,
        "test_moto_alone_neither_keeps_nor_filters_eni_prefixes",
    ),
    "patch_eni_address_filters": (
        HOOKS,
        "test_moto_alone_filters_eni_addresses_by_the_primary_only",
    ),
    "patch_subnet_ipv6_state": (HOOKS, "test_moto_alone_prints_a_subnets_ipv6_state_as_text"),
    "patch_tag_lookup_by_resource": (
        HOOKS,
        "test_moto_alone_reads_every_tag_and_rule_of_the_region_for_one_group",
    ),
    "patch_groups_by_id_filter": (
        HOOKS,
        "test_moto_alone_reads_every_tag_and_rule_of_the_region_for_one_group",
    ),
    "on_execution_end": (HOOKS, "test_moto_alone_sends_no_execution_status_change"),
    "patch_atomic_writes": (HOOKS, "test_a_conditional_write_is_checked_and_applied_as_one_step"),
    "patch_events_envelope": (HOOKS, "test_eventbridge_delivers_the_account_to_an_sqs_target"),
    "patch_target_group_pages": (HOOKS, "test_moto_alone_answers_every_target_group_in_one_page"),
    "name_ssm_parameters": (WORKAROUNDS, "test_moto_alone_cannot_create_an_unnamed_ssm_parameter"),
    "inline_state_machine_definitions": (
        WORKAROUNDS,
        "test_moto_alone_ignores_a_definition_s3_location",
    ),
    "substitute_state_machine_definitions": (
        WORKAROUNDS,
        "test_moto_alone_ignores_definition_substitutions",
    ),
    "disable_sqs_event_source_mappings": (
        WORKAROUNDS,
        "test_moto_alone_hands_each_message_to_the_mapped_function_at_once",
    ),
    "serialize_role_policy_documents": (
        WORKAROUNDS,
        "test_moto_alone_answers_a_stacks_role_policy_with_a_python_repr",
    ),
    "environment_strings": (
        WORKAROUNDS,
        "test_moto_alone_keeps_a_number_parameter_as_a_number_in_the_environment",
    ),
    "lambda_rule_targets": (WORKAROUNDS, "test_moto_alone_cannot_deliver_to_a_rules_lambda_target"),
    "create_state_machines_in_the_executing_backend": (
        WORKAROUNDS,
        "test_moto_alone_creates_a_stacks_state_machine_where_the_api_cannot_see_it",
    ),
    "update_state_machines_in_the_executing_backend": (
        WORKAROUNDS,
        "test_moto_alone_cannot_update_a_stacks_state_machine_where_executions_run",
    ),
    "ref_layer_versions_as_arns": (
        WORKAROUNDS,
        "test_moto_alone_cannot_update_a_function_that_names_a_stack_layer",
    ),
    "apply_table_time_to_live": (
        WORKAROUNDS,
        "test_moto_alone_creates_a_table_without_its_time_to_live",
    ),
    "match_events_as_eventbridge": (
        WORKAROUNDS,
        "test_moto_alone_offers_every_event_to_schedule_and_disabled_rules",
    ),
    "parse_json_templates_as_json": (
        WORKAROUNDS,
        "test_moto_alone_parses_a_json_template_with_the_pure_python_yaml_loader",
    ),
    "quiet_unsupported_resources": (
        WORKAROUNDS,
        "test_moto_skips_resources_it_has_no_model_for_and_says_so",
    ),
}

KIND = re.compile(r"^(AWS: https://docs\.aws\.amazon\.com/\S+|Tooling: \S.*)", re.MULTILINE)


def public_functions(module: ModuleType) -> dict[str, Callable[..., Any]]:
    return {
        name: value
        for name, value in vars(module).items()
        if inspect.isfunction(value) and value.__module__ == module.__name__ and name[0] != "_"
    }


def hooks() -> dict[str, Callable[..., Any]]:
    patches = {
        name: function
        for name, function in public_functions(moto_hooks).items()
        if "Patch" in str(inspect.signature(function).return_annotation)
    }
    found = {**patches, **public_functions(cfn_workarounds)}
    return {name: found[name] for name in sorted(found.keys() - NOT_HOOKS)}


def test_every_hook_is_registered_and_nothing_else() -> None:
    found = hooks()
    assert len(found) == 32, sorted(found)  # grows only with a new gap of moto
    assert sorted(REGISTER) == sorted(found), (
        f"not registered: {sorted(found.keys() - REGISTER.keys())}; "
        f"no longer hooks: {sorted(REGISTER.keys() - found.keys())}"
    )


@pytest.mark.parametrize("name", sorted(REGISTER))
def test_each_hook_names_the_aws_page_it_follows_or_why_it_is_tooling(name: str) -> None:
    hook = hooks()[name]
    doc = inspect.getdoc(hook) or ""
    assert KIND.search(doc), f"{name}: no 'AWS: <docs page>' or 'Tooling: <why>' paragraph"
    assert "moto" in doc, f"{name}: its docstring should say what moto does alone"


@pytest.mark.parametrize("name", sorted(REGISTER))
def test_each_hook_has_a_test_that_shows_moto_alone(name: str) -> None:
    path, test_name = REGISTER[name]
    source = path.read_text()
    tests = {
        node.name: ast.get_source_segment(source, node) or ""
        for node in ast.parse(source).body
        if isinstance(node, ast.FunctionDef)
    }
    assert test_name in tests, f"{name}: {path.name} has no {test_name}"
    alone = tests[test_name]
    # The test runs moto without the hook somewhere: a "moto alone" name or step, an
    # assertion that tells to drop the hook, or the check that undoing it restores moto.
    assert re.search(r"moto alone|moto_alone|drop|restores|moto's own", alone), (
        f"{test_name} does not show what moto does without {name}"
    )
