"""Golden Kibana Dev Tools snapshots of ``es-rag setup --dry-run`` and ``es-rag explain``.

The CLI runs in-process (``es_rag.cli.main``) and its stdout is compared byte for byte with
``tests/golden/snapshots/*.txt``. To accept a deliberate change, rerun with ``UPDATE_GOLDEN=1`` (the
snapshots are rewritten and the test passes) and review the diff; otherwise a mismatch fails with a
unified diff.

The console text must paste into Kibana Dev Tools as is: :func:`parse_console` splits it into requests
(a ``METHOD path`` line starts one, ``#`` comment lines are allowed between requests, a blank line ends
one), requires one JSON object as the body of a normal endpoint and one JSON object per line for the
NDJSON endpoints (``_msearch``, ``_bulk``), and the parsed requests must be exactly those of
``render(requests, "json")`` and of the CLI's ``--format json`` output.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from es_rag.cli import main
from es_rag.elasticsearch.assets import index_creation_requests, setup_requests
from es_rag.elasticsearch.bodies import search_requests
from es_rag.elasticsearch.search_template import search_template_request
from es_rag.es_request import EsRequest, render
from es_rag.filters import SearchFilter
from es_rag.settings import Settings
from es_rag.versions.registry import VersionSnapshot
from tests.support import golden

SNAPSHOTS = Path(__file__).parent / "snapshots"
QUERY = "How do I reset my password?"
QUERY_EXACT = "What does error E1042 in sync_engine.start() mean?"

SETUP_ARGS = ["setup", "--dry-run"]
EXPLAIN_TAIL = ["--tenant", "acme", "--acl", "support", "--no-vector", "--vector-dims", "8"]
EXPLAIN_ARGS = ["explain", QUERY, *EXPLAIN_TAIL]
EXPLAIN_EXACT_ARGS = ["explain", QUERY_EXACT, *EXPLAIN_TAIL]

#: snapshot file -> CLI arguments (console format).
GOLDEN: dict[str, list[str]] = {
    "setup_dry_run_default.console.txt": [*SETUP_ARGS, "--format", "console"],
    "setup_dry_run_language_ja.console.txt": [*SETUP_ARGS, "--language", "ja", "--format", "console"],
    "explain_reset_password_acme_support_dims8.console.txt": [*EXPLAIN_ARGS, "--format", "console"],
    "explain_exact_channel_acme_support_dims8.console.txt": [*EXPLAIN_EXACT_ARGS, "--format", "console"],
    "explain_exact_linear_weighted_acme_support_dims8.console.txt": [
        *EXPLAIN_EXACT_ARGS,
        "--fusion-method",
        "linear",
        "--channel-weights",
        "dense=2",
        "--format",
        "console",
    ],
    "explain_client_zscore_acme_support_dims8.console.txt": [
        *EXPLAIN_ARGS,
        "--fusion-method",
        "linear",
        "--score-normalizer",
        "zscore",
        "--format",
        "console",
    ],
    "explain_template_exact_acme_support_dims8.console.txt": [*EXPLAIN_EXACT_ARGS, "--template", "--format", "console"],
    "explain_es_rerank_diversify_acme_support_dims8.console.txt": [
        *EXPLAIN_ARGS,
        "--rerank-inference-id",
        "my-rerank",
        "--rerank-min-score",
        "0.1",
        "--mmr-path",
        "native",
        "--format",
        "console",
    ],
}

NATIVE_RRF = "# native fusion: rrf retriever (Enterprise/trial licence, Elasticsearch >= 8.16)"
NATIVE_LINEAR = (
    "# native fusion: linear retriever, normalizer minmax per child (Enterprise/trial licence, Elasticsearch >= 8.18)"
)
EXACT_NOTE = (
    "# exact channel: identifiers ['E1042', 'sync_engine.start()'] as match_phrase on text.ident, title.ident, "
    "heading_path.ident"
)
SETUP_NOTE = (
    "# analyzer standard: --analyzer auto, no cluster probed (analysis-kuromoji assumed absent), no --language "
    "given; a Japanese/CJK corpus needs --language ja|zh|ko; language subfields en:english, ja:cjk"
)
EN_ROUTE = "# query language en (detected, p=1.00): bm25 fields ['title.en', 'heading_path.en', 'text.en']"
"""An English query searches the ``.en`` subfields (es_rag.languages)."""

#: snapshot file -> the comment lines the console output carries, in order.
GATE_NOTE = (
    "# version gate: a search reads es-rag-versions/_doc/acme once and adds "
    '{"bool": {"must_not": [{"terms": {"version_key": [<hidden keys>]}}]}} to every retriever (none shown: no '
    "cluster; pass --es to read them)"
)
COMMENTS: dict[str, list[str]] = {
    "setup_dry_run_default.console.txt": [SETUP_NOTE],
    "setup_dry_run_language_ja.console.txt": [
        "# analyzer cjk: --analyzer auto, no cluster probed (analysis-kuromoji assumed absent), corpus language ja "
        "(Japanese): cjk bigrams; language subfields en:english, ja:cjk"
    ],
    "explain_reset_password_acme_support_dims8.console.txt": [
        GATE_NOTE,
        EN_ROUTE,
        NATIVE_RRF,
        "# client fusion: one _msearch (BM25 + kNN), fused by es_rag's RRF (any licence)",
    ],
    "explain_exact_channel_acme_support_dims8.console.txt": [
        GATE_NOTE,
        EN_ROUTE,
        EXACT_NOTE,
        NATIVE_RRF,
        "# client fusion: one _msearch (BM25 + kNN + exact), fused by es_rag's RRF (any licence)",
    ],
    "explain_exact_linear_weighted_acme_support_dims8.console.txt": [
        GATE_NOTE,
        EN_ROUTE,
        EXACT_NOTE,
        "# channel weights: dense=2.0 (any other channel 1.0)",
        NATIVE_LINEAR,
        "# client fusion: one _msearch (BM25 + kNN + exact), fused by es_rag's linear fusion (minmax) (any licence)",
    ],
    "explain_client_zscore_acme_support_dims8.console.txt": [
        GATE_NOTE,
        EN_ROUTE,
        "# native fusion not used (normalizer zscore exists only client-side): client path only",
        "# client fusion: one _msearch (BM25 + kNN), fused by es_rag's linear fusion (zscore) (any licence)",
    ],
    "explain_es_rerank_diversify_acme_support_dims8.console.txt": [
        GATE_NOTE,
        EN_ROUTE,
        NATIVE_RRF,
        "# rerank: Elasticsearch text_similarity_reranker my-rerank over the top 40 (Enterprise/trial licence, "
        "Elasticsearch >= 8.14); the local cross-encoder is skipped, and is the fallback on a licence 403 or a cluster "
        "without the retriever",
        "# select: Elasticsearch diversify retriever, MMR lambda=0.7 keeps 7 (Elasticsearch >= 9.3, technical "
        "preview); client MMR is the fallback",
        "# client fusion: one _msearch (BM25 + kNN), fused by es_rag's RRF (any licence)",
    ],
    "explain_template_exact_acme_support_dims8.console.txt": [
        GATE_NOTE,
        "# stored search template es-rag-hybrid (installed by es-rag setup): native rrf over bm25 + dense + exact "
        "with the filter in every child (Enterprise/trial licence)",
    ],
}


def expected_requests(snapshot: str) -> list[EsRequest]:
    """The requests each command prints, built by the pure builders."""
    if snapshot.startswith("setup"):
        settings = Settings(analyzer="cjk" if "language_ja" in snapshot else "standard")
        return setup_requests(settings) + index_creation_requests(settings)
    settings = Settings(vector_dims=8)
    if "linear_weighted" in snapshot:
        settings = settings.replace(fusion_method="linear", channel_weights={"dense": 2.0})
    elif "zscore" in snapshot:
        settings = settings.replace(fusion_method="linear", score_normalizer="zscore")
    query = QUERY_EXACT if "_exact" in snapshot else QUERY
    # explain prints what the pipeline sends: the caller's filter plus the tenant's registry snapshot, which
    # without a cluster hides nothing (the gate clause is left out; a comment says where the keys come from)
    flt = SearchFilter("acme", ("support",)).with_versions(VersionSnapshot("acme"))
    vector = [1.0] + [0.0] * 7  # --no-vector placeholder (unit vector)
    if "template" in snapshot:
        return [search_template_request(query, vector, flt, settings)]
    if "zscore" in snapshot:  # zscore exists only client-side: no native path to print
        return search_requests(query, vector, flt, settings, native=False)
    if "es_rerank_diversify" in snapshot:  # text_similarity_reranker inside diversify on the native path
        settings = settings.replace(rerank_inference_id="my-rerank", rerank_min_score=0.1, mmr_path="native")
        return [
            *search_requests(query, vector, flt, settings, native=True, es_rerank=True, diversify=True),
            *search_requests(query, vector, flt, settings, native=False),
        ]
    # no --es and fusion auto: explain prints the native path, then the client path
    return [
        *search_requests(query, vector, flt, settings, native=True),
        *search_requests(query, vector, flt, settings, native=False),
    ]


def run_cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    capsys.readouterr()
    rc = main(argv)
    captured = capsys.readouterr()
    assert rc == 0, f"es-rag {' '.join(argv)} exited {rc}: {captured.err}"
    return captured.out


# ------------------------------------------------------------------------------------- snapshots


def check_snapshot(name: str, actual: str) -> None:
    """Compare ``actual`` with ``snapshots/<name>`` (:func:`tests.support.golden.check_snapshot`)."""
    golden.check_snapshot(SNAPSHOTS, name, actual)


@pytest.mark.parametrize("snapshot", list(GOLDEN))
def test_console_output_matches_snapshot(snapshot: str, capsys: pytest.CaptureFixture[str]) -> None:
    check_snapshot(snapshot, run_cli(GOLDEN[snapshot], capsys))


def test_snapshot_mismatch_fails_with_unified_diff(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("UPDATE_GOLDEN", raising=False)
    monkeypatch.setitem(globals(), "SNAPSHOTS", tmp_path)
    (tmp_path / "x.txt").write_text("PUT a\n{}\n")
    with pytest.raises(pytest.fail.Exception) as info:
        check_snapshot("x.txt", "PUT b\n{}\n")
    assert "--- snapshots/x.txt" in str(info.value)
    assert "-PUT a" in str(info.value) and "+PUT b" in str(info.value)
    monkeypatch.setenv("UPDATE_GOLDEN", "1")
    check_snapshot("x.txt", "PUT b\n{}\n")
    assert (tmp_path / "x.txt").read_text() == "PUT b\n{}\n"


# ------------------------------------------------------------------------------------- parser

REQUEST_LINE = re.compile(r"^(GET|PUT|POST|DELETE|HEAD|PATCH) (\S+)$")
NDJSON_ENDPOINTS = ("_msearch", "_bulk")


class ConsoleParseError(ValueError):
    """The text would not paste into Kibana Dev Tools as the same requests."""


def _finish(req: dict[str, Any] | None, lines: list[tuple[int, str]]) -> dict[str, Any] | None:
    if req is None:
        return None
    if not lines:
        return req
    endpoint = req["path"].split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1]
    where = f"{req['method']} {req['path']}"
    if endpoint in NDJSON_ENDPOINTS:
        items = []
        for lineno, line in lines:
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ConsoleParseError(f"line {lineno} ({where}): not one JSON object per line: {exc}") from None
            if not isinstance(obj, dict):
                raise ConsoleParseError(f"line {lineno} ({where}): NDJSON line is not an object")
            items.append(obj)
        req["body"] = items
        return req
    text = "\n".join(line for _, line in lines)
    try:
        body = json.loads(text)  # raises on trailing data: exactly one JSON value
    except json.JSONDecodeError as exc:
        raise ConsoleParseError(f"line {lines[0][0]} ({where}): body is not one JSON object: {exc}") from None
    if not isinstance(body, dict):
        raise ConsoleParseError(f"line {lines[0][0]} ({where}): body is not a JSON object")
    req["body"] = body
    return req


def parse_console(text: str) -> list[dict[str, Any]]:
    """Split Kibana Dev Tools text into ``{"method", "path", "body"}`` dicts (body None when absent).

    Raises:
        ConsoleParseError: Text outside a request, a comment inside a request, or a body that is not one
            JSON object (normal endpoints) / one JSON object per line (``_msearch``, ``_bulk``).
    """
    out: list[dict[str, Any]] = []
    req: dict[str, Any] | None = None
    lines: list[tuple[int, str]] = []
    for lineno, line in enumerate(text.split("\n"), 1):
        m = REQUEST_LINE.match(line)
        if m or not line.strip():
            done = _finish(req, lines)
            if done is not None:
                out.append(done)
            req = {"method": m[1], "path": m[2], "body": None} if m else None
            lines = []
            continue
        if line.startswith("#"):
            if req is not None:
                raise ConsoleParseError(f"line {lineno}: comment inside the request {req['method']} {req['path']}")
            continue
        if req is None:
            raise ConsoleParseError(f"line {lineno}: text outside a request: {line!r}")
        lines.append((lineno, line))
    done = _finish(req, lines)
    if done is not None:
        out.append(done)
    return out


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ('POST ix/_search\n{"size": 1}\n{"size": 2}\n', "not one JSON object"),
        ('POST ix/_search\n[{"size": 1}]\n', "not a JSON object"),
        ('POST ix/_msearch\n{"index": "ix"}\n{"size": 1,\n "from": 0}\n', "one JSON object per line"),
        ('POST ix/_msearch\n{"index": "ix"}\n[1]\n', "NDJSON line is not an object"),
        ('{"size": 1}\n', "outside a request"),
        ('POST ix/_search\n# note\n{"size": 1}\n', "comment inside"),
        ('post ix/_search\n{"size": 1}\n', "outside a request"),  # Kibana needs an upper-case method
    ],
)
def test_parser_rejects_what_would_not_paste(text: str, match: str) -> None:
    with pytest.raises(ConsoleParseError, match=match):
        parse_console(text)


def test_parser_accepts_comments_bodyless_and_ndjson() -> None:
    text = '# a comment\nGET _license\n\nPOST ix/_msearch\n{"index": "ix"}\n{"size": 1}\n\n# x\nPUT ix\n{\n}\n'
    assert parse_console(text) == [
        {"method": "GET", "path": "_license", "body": None},
        {"method": "POST", "path": "ix/_msearch", "body": [{"index": "ix"}, {"size": 1}]},
        {"method": "PUT", "path": "ix", "body": {}},
    ]


@pytest.mark.parametrize("snapshot", list(GOLDEN))
def test_console_text_parses_back_to_the_json_rendering(snapshot: str, capsys: pytest.CaptureFixture[str]) -> None:
    console = run_cli(GOLDEN[snapshot], capsys)
    reqs = expected_requests(snapshot)
    assert parse_console(console) == json.loads(render(reqs, "json"))
    # the requests themselves render to exactly this console text, plus the comment lines (one per path for
    # explain, the analyzer decision for setup)
    assert [line for line in console.splitlines() if line.startswith("#")] == COMMENTS[snapshot]
    stripped = "\n".join(line for line in console.split("\n") if not line.startswith("#"))
    if snapshot.startswith("setup") or len(reqs) == 1:
        assert stripped == render(reqs, "console")
    else:
        assert stripped == render(reqs[:1], "console") + "\n" + render(reqs[1:], "console")


@pytest.mark.parametrize("snapshot", list(GOLDEN))
def test_json_format_equals_parsed_console(snapshot: str, capsys: pytest.CaptureFixture[str]) -> None:
    console_args = GOLDEN[snapshot]
    json_args = [*console_args[: console_args.index("--format")], "--format", "json"]
    as_json = json.loads(run_cli(json_args, capsys))
    assert isinstance(as_json, list) and as_json
    for item in as_json:
        assert isinstance(item, dict) and set(item) == {"method", "path", "body"}
    assert as_json == parse_console(run_cli(console_args, capsys))


def _knn_query_vectors(node: Any) -> list[list[float]]:
    if isinstance(node, dict):
        found = [node["knn"]["query_vector"]] if isinstance(node.get("knn"), dict) else []
        return found + [v for value in node.values() for v in _knn_query_vectors(value)]
    if isinstance(node, list):
        return [v for item in node for v in _knn_query_vectors(item)]
    return []


def test_explain_no_vector_output_is_executable_on_the_default_mapping(
    capsys: pytest.CaptureFixture[str],
) -> None:
    console = run_cli(GOLDEN["explain_reset_password_acme_support_dims8.console.txt"], capsys)
    assert Settings().index.similarity.value == "cosine"
    vectors = [v for req in parse_console(console) for v in _knn_query_vectors(req["body"])]
    assert len(vectors) == 2  # native knn retriever + _msearch knn search
    for vector in vectors:
        assert len(vector) == 8
        assert sum(x * x for x in vector) > 0.0, f"zero-magnitude query vector on a cosine field: {vector}"
        assert abs(sum(x * x for x in vector) - 1.0) < 1e-9, "dot_product fields need unit-length vectors"


def test_blue_green_requests_match_their_snapshot() -> None:
    """Issue 19 item 8: the requests of a blue-green reindex, Kibana-pasteable and reviewed as text: the new
    generation's indices (the registry's body given), the embedding check's aggregation search, the swap (``remove``
    with ``must_exist`` + ``add`` with ``is_write_index`` for the three names, one request), the first swap from
    concrete indices (``remove_index`` + ``add``) and the cleanup DELETE. Built by the pure builders of
    :mod:`es_rag.elasticsearch.aliases`; type-checked in ``tests/spec`` (``bluegreen[...]`` cases)."""
    from es_rag.elasticsearch.aliases import (
        Layout,
        delete_generation_request,
        embedding_versions_request,
        layout_request,
        swap_request,
    )

    settings = Settings(analyzer="standard")
    old, new = "20261101t000000-0123abcd", "20261201t000000-4567cdef"
    roles = ["chunks", "parents", "versions"]
    aliased = Layout(live={r: f"es-rag-{r}-{old}" for r in roles}, generations={old: roles, new: roles})
    legacy = Layout(live={r: f"es-rag-{r}" for r in roles}, legacy=list(roles), generations={new: roles})
    reqs = [
        layout_request(settings),
        *index_creation_requests(settings.replace(index_generation=new)),
        embedding_versions_request(settings),
        swap_request(settings, legacy, new, migrate=True),
        swap_request(settings, aliased, new),
        delete_generation_request(settings, old),
    ]
    text = render(reqs, "console")
    check_snapshot("reindex_bluegreen.console.txt", text)
    assert parse_console(text) == json.loads(render(reqs, "json"))
