"""The shape of the code: no test module imports another test module (shared code lives in ``tests/support``),
the package never imports the tests, the import-layer contract that ``make test`` checks with ``lint-imports`` names
every package of ``es_rag``, the acyclic contract covers all of it (no two modules of one package import each other,
even lazily), and no module passes 600 lines."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


def _imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append(node.module)
            out += [f"{node.module}.{a.name}" for a in node.names]
    return out


def test_tests_import_shared_code_only_from_tests_support() -> None:
    offenders = []
    for path in sorted((ROOT / "tests").rglob("*.py")):
        for name in _imports(path):
            if name.startswith("tests.") and not name.startswith("tests.support"):
                offenders.append(f"{path.relative_to(ROOT)} imports {name}")
    assert offenders == []


def test_the_package_never_imports_the_tests() -> None:
    offenders = [
        f"{path.relative_to(ROOT)} imports {name}"
        for path in sorted((ROOT / "es_rag").rglob("*.py"))
        for name in _imports(path)
        if name == "tests" or name.startswith("tests.")
    ]
    assert offenders == []


def _packages() -> set[str]:
    return {
        f"es_rag.{p.stem if p.is_file() else p.name}"
        for p in (ROOT / "es_rag").iterdir()
        if (p.suffix == ".py" and p.stem != "__init__") or (p.is_dir() and (p / "__init__.py").exists())
    }


def _contracts() -> dict[str, dict[str, object]]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    contracts = config["tool"]["importlinter"]["contracts"]
    assert sorted(c["type"] for c in contracts) == ["acyclic_siblings", "forbidden", "layers"]
    return {c["type"]: c for c in contracts}


def test_the_layer_contract_names_every_package() -> None:
    contract = _contracts()["layers"]
    layered = {m.strip() for layer in contract["layers"] for m in layer.split("|")}  # type: ignore[attr-defined]
    modules = _packages()
    assert modules == layered, (sorted(modules - layered), sorted(layered - modules))


def test_every_package_but_the_integrations_is_forbidden_to_import_the_frameworks() -> None:
    contract = _contracts()["forbidden"]
    assert set(contract["source_modules"]) == _packages() - {"es_rag.integrations"}  # type: ignore[arg-type]
    assert {"langchain_core", "llama_index", "haystack"} <= set(contract["forbidden_modules"])  # type: ignore[arg-type]


def test_no_import_cycle_anywhere_in_the_package() -> None:
    """``lint-imports`` (run by ``make test``) checks ``acyclic_siblings`` from the root: every package, every depth."""
    contract = _contracts()["acyclic_siblings"]
    assert contract["ancestors"] == ["es_rag"] and "ignore_imports" not in contract


MAX_MODULE_LINES = 600
SHRINKING: dict[str, int] = {}
"""Modules still over the limit (issue 32), each held at its size until it is split: none may grow, and one that
shrinks under the limit must leave this list."""


def test_modules_stay_under_600_lines() -> None:
    sizes = {
        str(p.relative_to(ROOT)): len(p.read_text(encoding="utf-8").splitlines())
        for p in (ROOT / "es_rag").rglob("*.py")
    }
    over = {name: n for name, n in sizes.items() if n > MAX_MODULE_LINES}
    grew = {name: (n, SHRINKING.get(name)) for name, n in over.items() if n > SHRINKING.get(name, MAX_MODULE_LINES)}
    assert not grew, f"modules over {MAX_MODULE_LINES} lines (split them): {grew}"
    stale = {name for name in SHRINKING if sizes.get(name, 0) <= MAX_MODULE_LINES}
    assert not stale, f"under the limit now: remove from SHRINKING: {sorted(stale)}"
