"""The core imports nothing from outside it but the standard library (docs/architecture.md,
"Domain core"): not boto3, not pydantic, not Powertools, not a module of the layer outside
`core/`, and not under `TYPE_CHECKING` or inside a function either, where an import would
hide until the line runs.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

from unit.import_names import imported_from

CORE = Path(__file__).resolve().parents[3] / "layers" / "sg_reconciler" / "core"
DYNAMIC = {"import_module", "__import__"}


def imports(path: Path, module: str) -> set[str]:
    """Every module `module` (at `path`) names in an import statement, wherever it stands, and
    `dynamic import` for a call that imports by name."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            found.add(imported_from(node, module))
        elif isinstance(node, ast.Call):
            called = node.func
            name = called.attr if isinstance(called, ast.Attribute) else getattr(called, "id", "")
            if name in DYNAMIC:
                found.add("dynamic import")
    return found


def outside_core(name: str) -> bool:
    if name.split(".")[0] in sys.stdlib_module_names:
        return False
    return name != "sg_reconciler.core" and not name.startswith("sg_reconciler.core.")


def test_the_core_imports_only_the_standard_library_and_itself() -> None:
    modules = sorted(CORE.glob("*.py"))
    assert len(modules) > 20  # the walk found the core
    found = {
        f"{path.name} imports {name}"
        for path in modules
        for name in imports(path, f"sg_reconciler.core.{path.stem}")
        if outside_core(name)
    }
    assert found == set()


def test_the_check_sees_every_kind_of_import(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(
        "from typing import TYPE_CHECKING\n"
        "from .rules import Rule\n"
        "from . import scope\n"
        "if TYPE_CHECKING:\n    from sg_reconciler.policy import Policy\n"
        "def read():\n    import boto3\n    from ..adapters import aws\n"
        "    return importlib.import_module('botocore')\n"
    )
    found = imports(probe, "sg_reconciler.core.probe")
    assert {name for name in found if outside_core(name)} == {
        "sg_reconciler.policy",
        "boto3",
        "sg_reconciler.adapters",
        "dynamic import",
    }
    assert {"typing", "sg_reconciler.core.rules", "sg_reconciler.core"} <= found
