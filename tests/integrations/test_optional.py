"""The adapters are optional: importing es_rag imports no framework, an adapter whose framework is missing says
which extra installs it, and the scope checks every adapter shares."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from typing import Any

import pytest

from es_rag import RagClient
from es_rag.errors import ConfigError, EsRagError, MissingDependencyError
from es_rag.integrations import RetrievalScope
from es_rag.integrations._common import retrieve
from tests.support.doc_blocks import ROOT

FRAMEWORKS = ("langchain_core", "llama_index", "haystack")
ADAPTERS = {
    "langchain": ("langchain_core", "langchain-core"),
    "llamaindex": ("llama_index", "llama-index-core"),
    "haystack": ("haystack", "haystack-ai"),
}


def _python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_importing_es_rag_imports_no_framework() -> None:
    code = (
        "import sys, es_rag, es_rag.integrations, es_rag.client\n"
        "from es_rag import RagClient, Settings, SearchFilter\n"
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {FRAMEWORKS!r}))"
    )
    proc = _python(code)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


@pytest.mark.parametrize("extra", sorted(ADAPTERS))
def test_an_adapter_without_its_framework_names_the_extra(extra: str) -> None:
    module, package = ADAPTERS[extra]
    code = (
        f"import sys; sys.modules[{module!r}] = None\n"  # what Python does for a package that is not installed
        "from es_rag.errors import MissingDependencyError\n"
        f"try:\n    import es_rag.integrations.{extra}\n"
        "except MissingDependencyError as e:\n    print(type(e).__mro__[1].__name__, e)\n"
    )
    proc = _python(code)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("EsRagError ")
    assert f"es_rag.integrations.{extra} needs {package}" in proc.stdout
    assert f"pip install 'es-rag[{extra}]'" in proc.stdout
    assert issubclass(MissingDependencyError, ImportError)


def test_a_hit_of_another_tenant_is_refused_not_handed_on(
    two_tenant_rag: RagClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The backends never return one (the filter is in every retriever); if a bug ever did, the adapters raise."""
    real = two_tenant_rag.search

    def leaky(query: str, **kwargs: Any) -> Any:
        result = real(query, **kwargs)
        result.hits[-1] = result.hits[-1].replace(tenant_id="globex")
        return result

    scope = RetrievalScope.of("acme", "support")
    assert len(retrieve(two_tenant_rag, scope, "password", None)) > 1
    monkeypatch.setattr(two_tenant_rag, "search", leaky)
    with pytest.raises(EsRagError, match="belongs to tenant 'globex', not to the retriever's 'acme'; refused"):
        retrieve(two_tenant_rag, scope, "password", None)


def test_the_scope_keeps_acl_order_without_repeats_and_a_string_is_one_group() -> None:
    assert RetrievalScope.of("acme", "support").acl == ("support",)
    assert RetrievalScope.of("acme", ["b", "a", "b"]).acl == ("b", "a")
    with pytest.raises(ConfigError, match="acl: missing or empty"):  # one rule for names (issue 43): not dropped
        RetrievalScope.of("acme", ["b", " "])
    assert RetrievalScope.of("acme", None).acl == ()
    scope = RetrievalScope.of("acme", (), {"lang": "en"})
    assert scope.metadata == {"lang": ("en",)}
    assert dataclasses.asdict(scope.narrowed({"kind": ["a", "b"]}))["metadata"] == {
        "lang": ("en",), "kind": ("a", "b")
    }  # fmt: skip
    assert scope.narrowed(None) is scope
