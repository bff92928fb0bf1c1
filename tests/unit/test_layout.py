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


def test_the_layer_contract_names_every_package() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    (contract,) = config["tool"]["importlinter"]["contracts"]
    layered = {m.strip() for layer in contract["layers"] for m in layer.split("|")}
    modules = {
        f"es_rag.{p.stem if p.is_file() else p.name}"
        for p in (ROOT / "es_rag").iterdir()
        if (p.suffix == ".py" and p.stem != "__init__") or (p.is_dir() and (p / "__init__.py").exists())
    }
    assert modules == layered, (sorted(modules - layered), sorted(layered - modules))


def test_the_public_face_loads_lazily() -> None:
    import subprocess

    code = (
        "import sys, es_rag; assert 'es_rag.wiring' not in sys.modules and 'torch' not in sys.modules; "
        "from es_rag import SearchFilter, Settings, build_pipeline; "
        "assert Settings(rerank_k=10).rerank.k == 10 and callable(build_pipeline); "
        "assert SearchFilter('t').tenant_id == 't'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)
