"""Every change the emulator makes to moto is registered with the test that shows moto alone.

The rules are docs/local-runtime.md's ("Patches of moto"): a hook stays only while moto
lacks what it adds, says `AWS:` or `Tooling:`, and its moto-alone test says it can go. A
new public function of a hook module fails here until it is registered or in `NOT_HOOKS`.
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
import sg_reconciler_tools.local
from sg_reconciler_tools.local import cfn_workarounds, interception, moto_hooks

NOT_HOOKS = frozenset(
    {
        # a building block of hooks, which patches nothing itself (the rest are `patching`'s)
        "_add_key",
        # groups of hooks registered one by one
        "patch_ec2_fidelity",
        "patch_ec2_lookups",
        # faults and observers: interceptors on botocore's before-send (no moto internal)
        "intercept_api_call",
        "intercept_each",
        "interceptors",
        "current_request_params",
        "on_ec2_write",
        # moto's public API, and readers of what a hook keeps (the rest are `moto_state`'s)
        "new_mock",
        "rule_units",
        "eni_prefixes",
        # applies the registered template workarounds in order
        "prepare",
    }
)

HOOKS = Path(__file__).with_name("test_moto_hooks.py")
WORKAROUNDS = Path(__file__).with_name("test_cfn_workarounds.py")
REGISTER: dict[str, tuple[Path, str]] = {
    "install_dispatcher": (HOOKS, "test_the_dispatcher_stands_where_motos_stubber_stood"),
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
LOCAL = Path(sg_reconciler_tools.local.__file__).parent


def functions(module: ModuleType) -> dict[str, Callable[..., Any]]:
    return {
        name: value
        for name, value in vars(module).items()
        if inspect.isfunction(value) and value.__module__ == module.__name__
    }


def hooks() -> dict[str, Callable[..., Any]]:
    """Public functions of the hook modules, and any private one returning a Patch."""
    found = {
        name: function
        for module in (moto_hooks, cfn_workarounds, interception)
        for name, function in functions(module).items()
        if not name.startswith("_") or "Patch" in str(inspect.signature(function).return_annotation)
    }
    return {name: found[name] for name in sorted(found.keys() - NOT_HOOKS)}


def imported(tree: ast.AST) -> set[str]:
    """What a module imports: `module.name` for a `from` import, the module for an import."""
    return {
        f"{node.module}.{alias.name}" if isinstance(node, ast.ImportFrom) else alias.name
        for node in ast.walk(tree)
        if isinstance(node, (ast.Import, ast.ImportFrom))
        for alias in node.names
    }


def test_every_hook_is_registered_and_nothing_else() -> None:
    found = hooks()
    assert sorted(REGISTER) == sorted(found), (
        f"neither registered nor in NOT_HOOKS: {sorted(found.keys() - REGISTER.keys())}; "
        f"registered but gone: {sorted(REGISTER.keys() - found.keys())}"
    )


def test_only_the_hook_modules_import_moto() -> None:
    for path in sorted(LOCAL.glob("*.py")):
        if path.stem in {"moto_hooks", "cfn_workarounds", "interception", "moto_state"}:
            continue
        names = imported(ast.parse(path.read_text()))
        assert not any(name.split(".")[0] == "moto" for name in names), (
            f"{path.name} imports moto: a hook belongs in moto_hooks, with its register entry"
        )


def test_moto_state_changes_nothing() -> None:
    """The one other module that imports moto only reads it: of the local package it takes
    only `patching.require` and `moto_hooks.ACCOUNT_ID`, it assigns no attribute or item of
    anything and calls no `setattr` (a change of moto belongs in a hook)."""
    tree = ast.parse((LOCAL / "moto_state.py").read_text())
    relative = [
        node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.level
    ]
    assert relative == [], f"moto_state.py imports relatively: {relative}"
    ours = {name for name in imported(tree) if name.startswith("sg_reconciler_tools")}
    assert ours == {
        "sg_reconciler_tools.local.patching.require",
        "sg_reconciler_tools.local.moto_hooks.ACCOUNT_ID",
    }, f"moto_state.py takes {sorted(ours)} of the local package"
    changes = [
        ast.unparse(node)
        for node in ast.walk(tree)
        if (
            isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign))
            and any(
                isinstance(target, (ast.Attribute, ast.Subscript))
                for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
            )
        )
        or (isinstance(node, ast.Call) and ast.unparse(node.func) in {"setattr", "delattr"})
    ]
    assert changes == [], f"moto_state.py changes state: {changes}"


@pytest.mark.parametrize("name", sorted(REGISTER))
def test_each_hook_names_the_aws_page_it_follows_or_why_it_is_tooling(name: str) -> None:
    doc = inspect.getdoc(hooks()[name]) or ""
    assert KIND.search(doc), f"{name}: no 'AWS: <docs page>' or 'Tooling: <why>' paragraph"
    assert "moto" in doc, f"{name}: its docstring should say what moto does alone"


@pytest.mark.parametrize("name", sorted(REGISTER))
def test_each_hook_has_a_test_that_shows_moto_alone_and_names_it(name: str) -> None:
    path, test_name = REGISTER[name]
    tests = {
        node.name: node
        for node in ast.parse(path.read_text()).body
        if isinstance(node, ast.FunctionDef)
    }
    assert test_name in tests, f"{name}: {path.name} has no {test_name}"
    test = tests[test_name]
    # What the test says when it fails: its docstring and its assertion messages
    said = [ast.get_docstring(test) or ""] + [
        ast.unparse(node.msg)
        for node in ast.walk(test)
        if isinstance(node, ast.Assert) and node.msg is not None
    ]
    assert any(name in text and re.search(r"can go|drop", text) for text in said), (
        f"{test_name} does not say that {name} can go when moto alone changes"
    )
