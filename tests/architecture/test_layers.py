"""The package layers: imports run web -> answering -> domain -> (db, config, logs, metrics), and
every module imports alone (no cycle hides behind an import order that happens to work)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

SERVICE = Path(__file__).resolve().parents[2] / "service"
MODULES = sorted(
    ".".join(path.relative_to(SERVICE.parent).with_suffix("").parts).removesuffix(".__init__")
    for path in SERVICE.rglob("*.py")
    if path.name != "__main__.py"
)
# What each layer may import of the service (besides itself).
ALLOWED = {
    "domain": {"domain", "db", "config", "logs", "metrics"},
    "answering": {"answering", "domain", "db", "config", "logs", "metrics"},
    "cli": {"cli", "domain", "answering", "db", "config", "logs", "metrics", "server"},
}


def imports_of(path: Path, package: str | None = None) -> list[tuple[str, int]]:
    """(absolute name imported, line) for every import in `path` (a module of `package`, by
    default the one its place under service/ says), including imports inside functions; for
    `from m import n` both `m` and `m.n`."""
    if package is None:
        package = ".".join(path.relative_to(SERVICE.parent).with_suffix("").parts[:-1])
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join([*base, node.module] if node.module else base)
            else:
                module = node.module or ""
            targets = [module, *(f"{module}.{a.name}" for a in node.names)]
            found += [(t, node.lineno) for t in targets]
        elif isinstance(node, ast.Import):
            found += [(a.name, node.lineno) for a in node.names]
    return found


def layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


@pytest.mark.parametrize("module", MODULES)
def test_module__imports_alone_in_a_fresh_interpreter(module: str) -> None:
    result = subprocess.run(
        [sys.executable, "-c", f"import {module}"], capture_output=True, text=True, timeout=60,
        cwd=SERVICE.parent,
    )
    assert result.returncode == 0, result.stderr[-2000:]


@pytest.mark.parametrize("package", ["domain", "answering", "cli"])
def test_layer__imports_only_what_lies_below_it(package: str) -> None:
    paths = [SERVICE / "cli.py"] if package == "cli" else sorted((SERVICE / package).rglob("*.py"))
    offenders = []
    for path in paths:
        for module, line in imports_of(path):
            if module == "aiohttp.web" or module.startswith("aiohttp.web."):
                offenders.append(f"{path.name}:{line} imports {module}")
            if module.startswith("service.") and layer(module) not in ALLOWED[package]:
                offenders.append(f"{path.name}:{line} imports {module}")
    assert offenders == []


def test_layer_check__catches_an_upward_import(tmp_path: Path) -> None:
    """The checker itself: a domain module importing the web layer is reported."""
    bad = tmp_path / "probe.py"
    bad.write_text("from ..web import keys\nfrom aiohttp import web\n")
    found = {module for module, _ in imports_of(bad, "service.domain")}
    assert "service.web.keys" in found and "aiohttp.web" in found
    assert layer("service.web.keys") not in ALLOWED["domain"]
