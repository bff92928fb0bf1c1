"""``analyzer=auto`` resolution, the stored search template in setup, and what ``doctor`` reports about
both, against the fake node of :mod:`tests.support.es_transport` (real client, canned cluster answers)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

_REPO = Path(__file__).resolve().parents[2]
if str(_REPO) not in sys.path:
    sys.path.insert(0, str(_REPO))

from es_rag.cli import main  # noqa: E402
from es_rag.elasticsearch.assets import (  # noqa: E402
    ASSET_VERSION,
    obsolete_asset_paths,
    render_asset,
    resolve_analyzer,
    resolved_settings,
    search_template_requests,
    setup_paths,
    setup_requests,
)
from es_rag.elasticsearch.backend import ElasticsearchBackend  # noqa: E402
from es_rag.errors import ConfigError  # noqa: E402
from es_rag.settings import Analyzer, Settings  # noqa: E402
from tests.support.es_transport import FakeNode, acknowledged, cluster_routes, index_created, make_backend  # noqa: E402

AUTO = Settings(analyzer="auto", rerank_model=None)
KUROMOJI = ["analysis-icu", "analysis-kuromoji"]
SCRIPT = f"_scripts/{AUTO.index.prefix}-hybrid"


# ------------------------------------------------------------------------------ the rule


@pytest.mark.parametrize(
    ("plugins", "language", "expected"),
    [
        (KUROMOJI, None, Analyzer.KUROMOJI),
        (KUROMOJI, "ja", Analyzer.KUROMOJI),
        (KUROMOJI, "ja-JP", Analyzer.KUROMOJI),
        (KUROMOJI, "zh", Analyzer.CJK),  # kuromoji does not segment Chinese
        (KUROMOJI, "en", Analyzer.STANDARD),  # the user said English: never a Japanese analyzer
        (["analysis-icu"], None, Analyzer.STANDARD),  # English-safe default without the plugin
        (["analysis-icu"], "ja", Analyzer.CJK),
        (["analysis-icu"], "ko", Analyzer.CJK),
        ([], "en", Analyzer.STANDARD),
        (None, None, Analyzer.STANDARD),  # dry run: no cluster probed
        (None, "ja", Analyzer.CJK),
    ],
)
def test_auto_rule(plugins: list[str] | None, language: str | None, expected: Analyzer) -> None:
    choice = resolve_analyzer("auto", plugins=plugins, language=language)
    assert choice.analyzer is expected
    assert choice.reason.startswith("--analyzer auto, ")
    if plugins is None:
        assert "no cluster probed (analysis-kuromoji assumed absent)" in choice.reason


def test_a_concrete_analyzer_is_kept_whatever_the_cluster() -> None:
    choice = resolve_analyzer(Analyzer.KUROMOJI, plugins=[], language="en")
    assert choice.analyzer is Analyzer.KUROMOJI and "as configured" in choice.reason
    assert resolved_settings(Settings(analyzer="cjk"), plugins=KUROMOJI).index.analyzer is Analyzer.CJK


def test_a_bad_language_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="ISO 639"):
        resolve_analyzer("auto", plugins=None, language="japanese!")


def test_rendering_with_auto_unresolved_raises_a_clear_config_error() -> None:
    with pytest.raises(ConfigError, match="analyzer 'auto' must be resolved before assets are rendered"):
        render_asset("index_templates", "component-chunks", AUTO)
    with pytest.raises(ConfigError, match="resolved_settings"):
        setup_requests(AUTO)
    # the paths alone need no rendering: doctor/probe work with auto unresolved
    assert setup_paths(AUTO) == [r.path for r in setup_requests(resolved_settings(AUTO, plugins=None))]


def test_setup_requests_end_with_the_stored_search_template() -> None:
    reqs = setup_requests(Settings())
    assert reqs[-1] == search_template_requests(Settings())[0]
    assert reqs[-1].method == "PUT" and reqs[-1].path == "_scripts/es-rag-hybrid"
    source = reqs[-1].body["script"]["source"]
    assert source.startswith(f"{{{{! es_rag asset_version {ASSET_VERSION} }}}}\n")
    assert reqs[-1].body["script"]["lang"] == "mustache"


# ------------------------------------------------------------------------------ backend setup


def _setup_backend(plugins: list[str], settings: Settings = AUTO) -> tuple[ElasticsearchBackend, FakeNode]:
    backend, node = make_backend(settings, cluster_routes(settings, plugins=plugins))
    for path in setup_paths(settings):
        node.route("PUT", path.replace(".", r"\."), (200, acknowledged()))
    for index in (settings.chunk_index, settings.parent_index, f"{settings.index.prefix}-versions"):
        node.route("HEAD", index, (404, None))
        node.route("PUT", index, (200, index_created(index)))
    return backend, node


def _installed_text_analyzer(node: FakeNode, settings: Settings = AUTO) -> str:
    (put,) = node.calls("PUT", f"_component_template/{settings.index.prefix}-chunks")
    analyzer: str = put.body["template"]["settings"]["index"]["analysis"]["analyzer"]["es_rag_text"]["type"]
    (parents,) = node.calls("PUT", f"_component_template/{settings.index.prefix}-parents")
    assert parents.body["template"]["settings"] == put.body["template"]["settings"]
    return analyzer


@pytest.mark.parametrize(
    ("plugins", "language", "expected"),
    [(KUROMOJI, None, "kuromoji"), ([], None, "standard"), ([], "ja", "cjk"), (KUROMOJI, "en", "standard")],
)
def test_setup_resolves_auto_from_the_probed_plugins(plugins: list[str], language: str | None, expected: str) -> None:
    backend, node = _setup_backend(plugins, AUTO.replace(language=language))
    results = backend.setup()
    assert node.calls("GET", "_nodes/plugins"), "auto needs the probe"
    assert _installed_text_analyzer(node) == expected
    assert {"request": f"PUT {SCRIPT}", "acknowledged": True} in results
    (script,) = node.calls("PUT", SCRIPT)
    assert script.body == search_template_requests(AUTO)[0].body


def test_setup_with_a_concrete_analyzer_does_not_probe() -> None:
    # concrete analyzers everywhere: the base field's and each language's (a bare ja would need the plugin list)
    settings = Settings(analyzer="english", languages="en,ja:cjk", rerank_model=None)
    backend, node = _setup_backend(KUROMOJI, settings)
    backend.setup()
    # no probe (GET /, _license, _nodes/plugins, ...): only setup's own preflight and obsolete-component reads
    reads = {r.path for r in node.calls("GET")}
    assert reads == {"/_index_template"} | {f"/{p}" for p in obsolete_asset_paths(settings)}
    assert _installed_text_analyzer(node, settings) == "english"


@pytest.mark.parametrize(
    ("plugins", "languages", "expected"),
    [
        (KUROMOJI, "en,ja", {"es_rag_en": "english", "es_rag_ja": "kuromoji"}),
        (["analysis-icu"], "en,ja", {"es_rag_en": "english", "es_rag_ja": "cjk"}),
        (KUROMOJI, "en,ja:cjk", {"es_rag_en": "english", "es_rag_ja": "cjk"}),  # given: kept
        (KUROMOJI, "zh", {"es_rag_zh": "cjk"}),  # kuromoji does not segment Chinese
    ],
)
def test_setup_resolves_the_language_subfields_from_the_probed_plugins(
    plugins: list[str], languages: str, expected: dict[str, str]
) -> None:
    settings = Settings(analyzer="standard", languages=languages, rerank_model=None)
    backend, node = _setup_backend(plugins, settings)
    backend.setup()
    (put,) = node.calls("PUT", f"_component_template/{settings.index.prefix}-chunks")
    analyzers = put.body["template"]["settings"]["index"]["analysis"]["analyzer"]
    assert {k: v["type"] for k, v in analyzers.items() if k.startswith("es_rag_") and len(k) == 9} == expected
    text = put.body["template"]["mappings"]["properties"]["text"]["fields"]
    assert {k: v["analyzer"] for k, v in text.items() if k in ("en", "ja", "zh")} == {
        k[len("es_rag_") :]: k for k in expected
    }


# ------------------------------------------------------------------------------ doctor


def test_doctor_reports_kuromoji_and_the_installed_analyzer_per_text_field() -> None:
    backend, _ = make_backend(AUTO, cluster_routes(AUTO, plugins=KUROMOJI))
    report = backend.doctor()
    analysis = report["analysis"]
    assert analysis["kuromoji_plugin"] == "installed"
    assert analysis["configured"] == "kuromoji" and analysis["configured_as"] == "auto"
    chunks = analysis["installed"]["chunks"]
    for field in ("title", "heading_path", "text", "contextual_text"):
        assert chunks[field] == "kuromoji (es_rag_text)", field
    assert chunks["text.ident"].startswith("es_rag_identifier (custom, tokenizer es_rag_identifier)")
    assert chunks["text.exact"] == "whitespace"
    assert analysis["installed"]["parents"]["text"] == "kuromoji (es_rag_text)"
    assert analysis["check"].startswith("ok:")
    assert report["paths"]["bm25"] == "elasticsearch multi_match (analyzer kuromoji)"


def test_doctor_without_kuromoji_resolves_auto_to_standard_and_flags_a_mismatch() -> None:
    # installed with cjk (e.g. an earlier `setup --language ja`), now probed for an English corpus
    english = AUTO.replace(language="en")
    backend, _ = make_backend(english, cluster_routes(Settings(analyzer="cjk", rerank_model=None), plugins=[]))
    analysis = backend.doctor()["analysis"]
    assert analysis["kuromoji_plugin"] == "not installed"
    assert analysis["configured"] == "standard"
    assert analysis["installed"]["chunks"]["text"] == "cjk (es_rag_text)"
    assert analysis["check"].startswith("MISMATCH") and "reindex" in analysis["check"]


def test_doctor_reports_the_stored_search_template_present_current_or_missing() -> None:
    settings = Settings(rerank_model=None)
    backend, _ = make_backend(settings, cluster_routes(settings))
    report = backend.doctor()
    assert report["cluster"]["installed_assets"][SCRIPT] == ASSET_VERSION
    assert SCRIPT not in report["assets"]["missing_or_stale"]
    backend, _ = make_backend(settings, cluster_routes(settings, missing_assets=[SCRIPT]))
    assert backend.doctor()["assets"]["missing_or_stale"] == {SCRIPT: None}
    backend, _ = make_backend(settings, cluster_routes(settings, asset_version=ASSET_VERSION - 1))
    assert backend.doctor()["assets"]["missing_or_stale"][SCRIPT] == ASSET_VERSION - 1


def test_doctor_without_installed_assets_says_so() -> None:
    settings = Settings(rerank_model=None)
    backend, _ = make_backend(settings, cluster_routes(settings, missing_assets=setup_paths(settings)))
    analysis = backend.doctor()["analysis"]
    assert analysis["installed"] == {} and "run es-rag setup" in analysis["check"]


# ------------------------------------------------------------------------------ CLI


@pytest.fixture
def fake_cluster(monkeypatch: pytest.MonkeyPatch) -> Any:
    """``es-rag ... --es URL`` talks to a fake node; returns a function installing one per plugin list."""

    def install(plugins: list[str]) -> FakeNode:
        backend, node = _setup_backend(plugins)

        def connect(cls: Any, url: str, settings: Settings, **kw: Any) -> ElasticsearchBackend:
            backend.settings = settings
            return backend

        monkeypatch.setattr(ElasticsearchBackend, "connect", classmethod(connect))
        return node

    return install


def test_cli_setup_defaults_to_auto_and_installs_kuromoji_when_present(
    fake_cluster: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    node = fake_cluster(KUROMOJI)
    assert main(["setup", "--es", "http://es.invalid:9200"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("analyzer kuromoji: --analyzer auto, analysis-kuromoji installed on the cluster")
    assert f"PUT {SCRIPT}: True" in out
    assert _installed_text_analyzer(node) == "kuromoji"


def test_cli_setup_dry_run_with_es_probes_plugins(fake_cluster: Any, capsys: pytest.CaptureFixture[str]) -> None:
    node = fake_cluster([])
    assert main(["setup", "--es", "http://es.invalid:9200", "--dry-run", "--language", "ja"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("# analyzer cjk: --analyzer auto, analysis-kuromoji not installed on the cluster")
    assert not node.calls("PUT"), "a dry run sends nothing but the probe's GETs"
    assert '"type": "cjk"' in out


def test_cli_setup_dry_run_json_keeps_stdout_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["setup", "--dry-run", "--format", "json", "--no-create-indices"]) == 0
    captured = capsys.readouterr()
    reqs = json.loads(captured.out)
    assert reqs[-1]["path"] == "_scripts/es-rag-hybrid"
    assert "analyzer standard: --analyzer auto, no cluster probed" in captured.err


def test_cli_doctor_prints_the_analysis_section(fake_cluster: Any, capsys: pytest.CaptureFixture[str]) -> None:
    fake_cluster(KUROMOJI)
    assert main(["doctor", "--es", "http://es.invalid:9200", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["analysis"]["kuromoji_plugin"] == "installed"
    assert report["analysis"]["configured"] == "kuromoji"


def test_cli_other_commands_resolve_auto_without_a_cluster(tmp_path: Path) -> None:
    from es_rag.cli import build_parser
    from es_rag.cli.options import settings_from_args

    args = build_parser().parse_args(["search", "q", "--tenant", "t", "--analyzer", "auto", "--language", "ja"])
    assert settings_from_args(args).index.analyzer is Analyzer.CJK
    args = build_parser().parse_args(["search", "q", "--tenant", "t", "--analyzer", "auto"])
    assert settings_from_args(args).index.analyzer is Analyzer.STANDARD
    assert settings_from_args(args, resolve=False).index.analyzer is Analyzer.AUTO


def test_bm25_k1_and_b_become_the_index_default_similarity() -> None:
    for component in ("component-chunks", "component-parents"):
        body = render_asset("index_templates", component, Settings(bm25_k1=0.9, bm25_b=0.4))
        similarity = body["template"]["settings"]["index"]["similarity"]
        assert similarity == {"default": {"type": "BM25", "k1": 0.9, "b": 0.4}}


def test_cli_setup_passes_bm25_k1_and_b(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["setup", "--dry-run", "--format", "json", "--no-create-indices", "--bm25-k1", "0.9", "--bm25-b", "0.4"]
    assert main(argv) == 0
    reqs = {r["path"]: r["body"] for r in json.loads(capsys.readouterr().out)}
    similarity = reqs["_component_template/es-rag-chunks"]["template"]["settings"]["index"]["similarity"]
    assert similarity["default"] == {"type": "BM25", "k1": 0.9, "b": 0.4}
