"""The shape of the code: no test module imports another test module (shared code lives in ``tests/support``),
the package never imports the tests, and the import-layer contract that ``make test`` checks with
``lint-imports`` names every package of ``es_rag``."""

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
    assert sorted(c["type"] for c in contracts) == ["forbidden", "layers"]
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
