"""``examples/langchain_chain.py`` with LangChain's fake chat model: the retrieved evidence, with its citation ids,
reaches the prompt the model is sent; another tenant's evidence never does; the model's answer comes out."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.language_models import FakeListChatModel
from langchain_core.messages import BaseMessage

from es_rag import RagClient
from es_rag.integrations.langchain import EsRagRetriever
from examples.langchain_chain import NO_EVIDENCE, build_chain, main
from tests.support.apps import ACME_SUPPORT, GLOBEX_WORD


class Prompts(BaseCallbackHandler):
    """Records what each chat model call was sent."""

    def __init__(self) -> None:
        self.sent: list[list[BaseMessage]] = []

    def on_chat_model_start(
        self, serialized: dict[str, Any], messages: list[list[BaseMessage]], *, run_id: UUID, **kwargs: Any
    ) -> None:
        self.sent.extend(messages)


def _ask(rag: RagClient, question: str, **scope: Any) -> tuple[str, str]:
    """The chain's answer and the text of the prompt the fake model was sent."""
    prompts = Prompts()
    llm = FakeListChatModel(responses=["Reset it from the login page [S1]."])
    answer = build_chain(EsRagRetriever(client=rag, **scope), llm).invoke(question, config={"callbacks": [prompts]})
    (messages,) = prompts.sent
    return answer, "\n".join(str(m.content) for m in messages)


def test_the_retrieved_context_reaches_the_prompt_with_its_citation_ids(two_tenant_rag: RagClient) -> None:
    question = "how do I reset the password"
    answer, prompt = _ask(two_tenant_rag, question, tenant="acme", acl=["support"])
    assert answer == "Reset it from the login page [S1]."
    docs = EsRagRetriever(client=two_tenant_rag, tenant="acme", acl=["support"]).invoke(question)
    assert docs
    for doc in docs:
        assert f"[{doc.metadata['citation']}] {doc.metadata['source_id']}" in prompt
        assert doc.page_content in prompt
    assert "Reset the password from the login page" in prompt and prompt.rstrip().endswith(question)
    assert GLOBEX_WORD not in prompt


def test_another_tenants_evidence_never_reaches_the_prompt(two_tenant_rag: RagClient) -> None:
    _, prompt = _ask(two_tenant_rag, "reset the password from the login page", tenant="globex")
    assert GLOBEX_WORD in prompt and "login page." not in prompt  # acme's sentence, not globex's
    _, nothing = _ask(two_tenant_rag, "password", tenant="initech")
    assert NO_EVIDENCE in nothing


def test_main_prints_the_prompt_from_an_index(
    tiny_bi_encoder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.support.apps import tiny_settings

    settings = tiny_settings(tiny_bi_encoder)
    with RagClient.open(tmp_path / "idx", settings) as rag:
        rag.ingest_texts(ACME_SUPPORT, tenant="acme", acl="support")
    real_open = RagClient.open
    monkeypatch.setattr(RagClient, "open", classmethod(lambda cls, d: real_open(d, settings)))  # the tiny model
    assert (
        main(
            [
                "how do I reset the password",
                "--tenant",
                "acme",
                "--acl",
                "support",
                "--index-dir",
                str(tmp_path / "idx"),
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "[S1] guide.md > Passwords" in out and "Reset the password from the login page" in out
