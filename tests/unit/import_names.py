"""A module's imports as its source names them (ast), for the tests that hold the layering:
the core's purity (core/test_imports.py) and each function's contracts (app/test_contracts.py)."""

from __future__ import annotations

import ast


def imported_from(node: ast.ImportFrom, module: str, *, package: bool = False) -> str:
    """The absolute name of the module a `from ... import` reads, its dots resolved against
    `module` (the importing module; `package` when it is a package's `__init__`)."""
    parts = module.split(".") if package else module.split(".")[:-1]
    base = parts[: len(parts) - node.level + 1] if node.level else []
    return ".".join([*base, *([node.module] if node.module else [])])
