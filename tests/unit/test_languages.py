"""Mixed-language corpora (issue 14 part 2): the language of documents and queries, the per-language multi-fields
of the chunk template, and the BM25 fields each backend and body builder queries for a query's language.

Elasticsearch's rules the template follows, and the strict double enforces:

* multi-fields (``fields`` on a ``text`` mapping): ``server/src/main/java/org/elasticsearch/index/mapper/
  TypeParsers.java`` ``parseMultiField``: a multi-field's name must not contain ``.`` ("Field name [raw.foo] which is
  a multi field of [field] cannot contain '.'", ``MultiFieldTests.testMultiFieldWithDot``), it needs a ``type``, and
  on indices created by 8.0 or later a multi-field holding ``fields`` is refused ("Defining chained multi-fields is
  not supported");
* the ``english`` and ``cjk`` analyzers are built-in language analyzers (``CommonAnalysisPlugin``: Lucene's
  ``EnglishAnalyzer``, ``CJKAnalyzer``) named by ``type``; ``kuromoji`` exists only with the analysis-kuromoji
  plugin (``AnalysisKuromojiPlugin``), else ``Unknown analyzer type [kuromoji]`` (``AnalysisRegistry``).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from es_rag.elasticsearch.assets import render_asset, setup_requests
from es_rag.elasticsearch.bodies import bm25_query
from es_rag.elasticsearch.search_template import search_template_params
from es_rag.embedded.analyzers import cjk_analyzer, english_analyzer
from es_rag.embedded.backend import EmbeddedBackend
from es_rag.errors import ConfigError
from es_rag.filters import SearchFilter
from es_rag.languages import (
    detect_language,
    document_language,
    parse_languages,
    query_language,
    resolve_languages,
    routed_fields,
)
from es_rag.query import bm25_route, plan_search
from es_rag.records import Chunk
from es_rag.settings import Settings
from tests.support.double.cluster import StrictCluster

JA = "同期が止まったときはどうすればいいですか？"
EN = "my laptop gets hot while syncing"


# ------------------------------------------------------------------------------ detection


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "このガイドでは、Acme Nimbus を初めて使う方のために、インストールから最初の同期までの手順を説明します。",
            "ja",
        ),
        ("ALDH1 expression is associated with poorer prognosis for breast cancer primary tumors.", "en"),
        ("Le chat est noir et le chien est blanc, mais la maison est grande.", "fr"),
        ("E1042", None),  # no language to speak of
        ("", None),
    ],
)
def test_detect_language(text: str, expected: str | None) -> None:
    assert detect_language(text) == expected


def test_a_document_language_the_user_gave_wins_over_detection() -> None:
    text = "このガイドでは、インストールから最初の同期までの手順を説明します。"
    assert document_language(text, {"language": "en"}, None).code == "en"  # meta.language (front matter, --meta)
    assert document_language(text, {}, "en").code == "en"  # --language
    assert document_language(text, {"language": "ja-JP"}, "en").code == "ja"  # the document's own wins
    assert document_language(text, {"language": ["ja"]}, None).code == "ja"  # as MetadataSchema.normalise keeps it
    decided = document_language(text, {}, None)
    assert (decided.code, decided.how) == ("ja", "detected")
    assert document_language("E1042", {}, None).code is None  # too short: unknown
    with pytest.raises(ConfigError, match=r"meta\.language"):
        document_language(text, {"language": "japanese"}, None)


@pytest.mark.parametrize(
    ("query", "mode", "corpus", "code", "how"),
    [
        (JA, "auto", None, "ja", "detected"),
        (EN, "auto", None, "en", "detected"),
        ("How do I fix E1042?", "auto", None, "en", "detected"),  # short: sure among en and ja, not among all
        ("E1042", "auto", None, None, "unknown"),  # unsure: the base fields
        ("E1042", "auto", "ja", "ja", "fallback"),  # unsure: the corpus language
        (EN, "none", "ja", None, "none"),
        (EN, "ja", None, "ja", "given"),
        # issue 29: a language without subfields is recognised when py3langid is clearly sure of it, so German goes
        # to the base fields, not to text.en's English stemmer; short English queries stay English
        ("Fehlermeldung beim Synchronisieren", "auto", None, "de", "detected"),
        ("¿Cómo restablezco mi contraseña?", "auto", None, "es", "detected"),
        ("sync error", "auto", None, "en", "detected"),  # overall: la 0.17, unsure
        ("malaria vaccine efficacy", "auto", None, "en", "detected"),  # overall: it 0.35, unsure
    ],
)
def test_query_language(query: str, mode: str, corpus: str | None, code: str | None, how: str) -> None:
    decided = query_language(query, mode, ("en", "ja"), corpus)
    assert (decided.code, decided.how) == (code, how)


def test_routed_fields_swap_each_field_with_subfields_for_that_of_the_language() -> None:
    fields = ("title^2", "heading_path^1.5", "text", "contextual_text")
    assert routed_fields(fields, "ja", ("en", "ja")) == (
        "title.ja^2",
        "heading_path.ja^1.5",
        "text.ja",
        "contextual_text",
    )
    assert routed_fields(fields, "fr", ("en", "ja")) == fields  # no French subfields
    assert routed_fields(fields, None, ("en", "ja")) == fields


def test_languages_setting() -> None:
    assert Settings().index.languages == ("en", "ja")
    assert Settings(languages="none").index.languages == ()
    assert Settings(languages="en,ja:kuromoji").index.languages == ("en", "ja:kuromoji")
    assert [a.analyzer for a in parse_languages(["en", "ja", "zh"])] == ["english", "cjk", "cjk"]
    with pytest.raises(ConfigError, match="'fr' has no per-language analysis"):
        Settings(languages="en,fr")
    with pytest.raises(ConfigError, match="en is analysed by english, not 'cjk'"):
        Settings(languages="en:cjk")
    with pytest.raises(ConfigError, match="query_language"):
        Settings(query_language="japanese")
    assert Settings(query_language="JA").retrieve.query_language == "ja"
    assert resolve_languages(["en", "ja"], plugins=["analysis-kuromoji"]) == ("en:english", "ja:kuromoji")
    assert resolve_languages(["en", "ja"], plugins=None) == ("en:english", "ja:cjk")


# ------------------------------------------------------------------------------ bodies


def test_bm25_bodies_query_the_subfields_of_the_query_language() -> None:
    s = Settings()
    assert bm25_query(JA, s)["multi_match"]["fields"] == ["title.ja", "heading_path.ja", "text.ja"]
    assert bm25_query(EN, s)["multi_match"]["fields"] == ["title.en", "heading_path.en", "text.en"]
    base = ["title", "heading_path", "text"]
    assert bm25_query(EN, s.replace(query_language="none"))["multi_match"]["fields"] == base
    assert bm25_query(EN, s.replace(languages="none"))["multi_match"]["fields"] == base
    assert bm25_query("E1042", s)["multi_match"]["fields"] == base  # no language: the base fields
    assert search_template_params(JA, [0.1] * 384, SearchFilter("acme"), s)["fields"] == list(bm25_route(JA, s).fields)
    plan = plan_search(JA, None, s, native_available=False)
    assert plan.bm25 is not None and plan.bm25.language.code == "ja"


# ------------------------------------------------------------------------------ template and the strict double


def test_the_chunk_template_carries_per_language_multi_fields() -> None:
    body = render_asset("index_templates", "component-chunks", Settings())
    analyzers = body["template"]["settings"]["index"]["analysis"]["analyzer"]
    assert analyzers["es_rag_en"] == {"type": "english"} and analyzers["es_rag_ja"] == {"type": "cjk"}
    props = body["template"]["mappings"]["properties"]
    assert props["language"] == {"type": "keyword"}
    for fld in ("title", "heading_path", "text"):
        assert props[fld]["analyzer"] == "es_rag_text"  # the base field keeps the configured analyzer
        assert props[fld]["fields"]["en"] == {"type": "text", "analyzer": "es_rag_en"}
        assert props[fld]["fields"]["ja"] == {"type": "text", "analyzer": "es_rag_ja"}
    parents = render_asset("index_templates", "component-parents", Settings())
    assert parents["template"]["mappings"]["properties"]["language"] == {"type": "keyword"}


def _put_all(cluster: StrictCluster, settings: Settings) -> str:
    """Every setup request; the first refusal's body as text, or ``""``."""
    for req in setup_requests(settings):
        status, body = cluster.handle(req.method, "/" + req.path, "", req.body, {})
        if status >= 400:
            return json.dumps(body)
    return ""


def test_the_strict_double_accepts_the_template_and_refuses_kuromoji_without_the_plugin() -> None:
    assert _put_all(StrictCluster(), Settings()) == ""
    assert _put_all(StrictCluster(plugins=["analysis-kuromoji"]), Settings(languages="en,ja:kuromoji")) == ""
    refused = _put_all(StrictCluster(), Settings(languages="en,ja:kuromoji"))
    assert "Unknown analyzer type [kuromoji] for [es_rag_ja]" in refused


@pytest.mark.parametrize(
    ("sub", "spec", "reason"),
    [
        ("en.x", {"type": "text"}, r"Field name \[en.x\] which is a multi field of \[text\] cannot contain '.'"),
        ("en", {"type": "text", "fields": {"raw": {"type": "keyword"}}}, "Defining chained multi-fields is not"),
        ("en", {"analyzer": "english"}, r"no type specified for property \[en\]"),
    ],
)
def test_the_strict_double_refuses_what_elasticsearch_refuses_in_multi_fields(
    sub: str, spec: dict[str, object], reason: str
) -> None:
    mapping = {"mappings": {"properties": {"text": {"type": "text", "fields": {sub: spec}}}}}
    status, body = StrictCluster().handle("PUT", "/some-index", "", mapping, {})
    assert status == 400 and body["error"]["type"] == "mapper_parsing_exception"
    assert re.search(reason, body["error"]["reason"])


# ------------------------------------------------------------------------------ embedded mirror


def _chunk(cid: str, text: str, title: str = "") -> Chunk:
    return Chunk(
        chunk_id=cid,
        source_id=cid,
        source_version="1",
        parent_id=None,
        heading_path=(),
        start_offset=0,
        end_offset=len(text),
        chunker_version="t",
        tenant_id="acme",
        acl=("public",),
        title=title,
        text=text,
        token_count=1,
        vector=[1.0, 0.0],
        language="en",
    )


def test_embedded_subfields_mirror_english_and_cjk() -> None:
    backend = EmbeddedBackend(None, dims=2, analyzer="standard")
    backend.index(
        [
            _chunk("a", "The sync engine stopped syncing files."),
            _chunk("b", "Billing questions and invoices."),
            _chunk("c", "同期が止まったときは、アプリを再起動してください。"),
        ]
    )
    flt = SearchFilter("acme")
    # "synced" meets "syncing" only through the english analyzer's stemmer (text.en), not the standard base field
    assert english_analyzer("synced") == english_analyzer("syncing") == ["sync"]
    assert [h.chunk_id for h in backend.bm25("synced", flt, 5, fields=["text.en"])] == ["a"]
    assert backend.bm25("synced", flt, 5, fields=["text"]) == []
    # the cjk mirror: bigrams, so 同期 matches inside 同期が
    assert "同期" in cjk_analyzer(JA)
    assert [h.chunk_id for h in backend.bm25(JA, flt, 5, fields=["text.ja"])] == ["c"]
    assert backend.bm25(JA, flt, 5, fields=["text.fr"]) == []  # no such subfield: nothing, as an unmapped field
    hit = backend.bm25("synced", flt, 1, fields=["text.en"])[0]
    assert hit.language == "en"
    # retrieve follows the plan's routing
    ret = backend.retrieve("synced", None, flt, Settings(rerank_model=None))
    assert [h.chunk_id for h in ret.channels["bm25"]] == ["a"]
    ret = backend.retrieve("synced", None, flt, Settings(rerank_model=None, query_language="none"))
    assert ret.channels["bm25"] == []


def test_a_german_query_on_an_en_ja_index_queries_the_base_fields() -> None:
    route = bm25_route("Wie setze ich mein Passwort zurück", Settings(languages="en,ja"))
    assert route.language.code == "de"
    assert not any(f.split("^")[0].endswith((".en", ".ja")) for f in route.fields)


# -- the decompressed model cache (issue 46: decompressing py3langid's model took 0.65 s of every cold search) ------
LANGUAGE_TEXTS = [
    "What is the highest peak of the Andes?",
    "検索拡張生成とは何ですか",
    "Bonjour tout le monde, comment ça va ?",
    "Der schnelle braune Fuchs springt über den faulen Hund",
    "x",
]


def _fresh_identifier(monkeypatch: pytest.MonkeyPatch, cache: Path) -> object:
    import es_rag.languages as languages

    monkeypatch.setenv(languages.CACHE_ENV, str(cache))
    monkeypatch.setattr(languages, "_IDENTIFIER", None)
    return languages._identifier()


def test_the_cached_model_detects_as_the_wheels_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from py3langid.langid import MODEL_FILE, LanguageIdentifier

    wheel = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
    written = _fresh_identifier(monkeypatch, tmp_path)  # decompresses, writes the cache
    (folder,) = (tmp_path / "langid").iterdir()
    assert {p.name for p in folder.iterdir()} == {
        *(f"{n}.npy" for n in ("ptc", "pc", "classes")),
        *(f"{n}.npy" for n in ("nextmove", "nextmove_row", "out_feat")),
        "key.json",
    }
    cached = _fresh_identifier(monkeypatch, tmp_path)  # reads it
    for text in LANGUAGE_TEXTS:
        assert written.rank(text) == cached.rank(text) == wheel.rank(text)  # type: ignore[attr-defined]


def test_a_damaged_or_unwritable_cache_is_never_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from py3langid.langid import MODEL_FILE, LanguageIdentifier

    wheel = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
    _fresh_identifier(monkeypatch, tmp_path)
    (folder,) = (tmp_path / "langid").iterdir()
    target = folder / "nextmove.npy"
    data = bytearray(target.read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size: only the CRC-32 tells
    target.write_bytes(bytes(data))
    again = _fresh_identifier(monkeypatch, tmp_path)
    assert all(again.rank(t) == wheel.rank(t) for t in LANGUAGE_TEXTS)  # type: ignore[attr-defined]
    assert target.read_bytes() != bytes(data)  # written again, whole
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")
    alone = _fresh_identifier(monkeypatch, blocked)  # no cache can be made under a file: the wheel's model
    assert all(alone.rank(t) == wheel.rank(t) for t in LANGUAGE_TEXTS)  # type: ignore[attr-defined]
