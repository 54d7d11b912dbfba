"""Views stay parse → authorize → call → respond (issue 15): the steps of a request's work (its
queries, transactions, idempotency, charging) are a domain function's, never a view's."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

VIEWS = Path(__file__).resolve().parents[2] / "service" / "web" / "views"


@pytest.mark.parametrize("module", ["questions", "rfps", "rfp_items", "knowledge", "review"])
def test_view_runs_no_sql_and_opens_no_transaction(module):
    tree = ast.parse((VIEWS / f"{module}.py").read_text())
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 3 and node.module is None:
            found += [f"imports {alias.name}" for alias in node.names if alias.name == "db"]
        if isinstance(node, ast.Attribute) and node.attr in ("transaction", "fetchrow", "fetchval",
                                                             "fetch", "execute"):
            found.append(f"line {node.lineno}: .{node.attr}")
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("domain"):
            found += [f"imports private {alias.name}" for alias in node.names
                      if alias.name.startswith("_")]
    assert found == [], f"service/web/views/{module}.py: {found}"
