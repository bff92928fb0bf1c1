"""End to end on the embedded backend with tiny models made on the fly (real loading code)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from es_rag.cli import main
from es_rag.cross_encoder.model import CrossEncoderReranker
from es_rag.embedded.backend import EmbeddedBackend
from es_rag.filters import SearchFilter
from es_rag.pipeline import RagPipeline
from es_rag.settings import Settings
from tests.support.sample import ingest_sample, sample_settings

HIT_KEYS = {"chunk_id", "source_id", "parent_id", "tenant_id", "text", "scores", "sources"}
SCORE_KEYS = {"bm25", "dense", "exact", "fusion", "rerank", "calibrated", "boost", "final"}


@pytest.fixture(scope="module")
def tiny_settings(tiny_bi_encoder: Path) -> Settings:
    # a per-source cap (off by default since issue 28), so the test below checks that the cap holds
    return sample_settings(tiny_bi_encoder, token_budget=600, max_chunks_per_source=2)


@pytest.fixture(scope="module")
def indexed(tiny_settings: Settings, sample_dir: Path, tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    directory = tmp_path_factory.mktemp("idx")
    backend = EmbeddedBackend(directory, dims=32)
    embedder, report, queries = ingest_sample(backend, tiny_settings, sample_dir)
    backend.flush()
    return directory, embedder, queries, report


def test_ingest_counts(indexed) -> None:  # type: ignore[no-untyped-def]
    directory, _, _, report = indexed
    assert report.sources == 10
    assert report.indexed == report.chunks + report.parents
    assert EmbeddedBackend(directory).count() == report.chunks


def test_search_never_leaks_another_tenant_or_acl(indexed, tiny_settings) -> None:  # type: ignore[no-untyped-def]
    directory, embedder, queries, _ = indexed
    pipe = RagPipeline(
        EmbeddedBackend(directory), embedder=embedder, settings=tiny_settings, tokenizer=embedder.tokenizer()
    )
    for q in queries:
        flt = SearchFilter(q["tenant_id"], tuple(q.get("acl") or ()))
        result = pipe.search(q["query"], flt)
        for h in result.candidates:
            assert h.tenant_id == flt.tenant_id
            assert set(h.acl) & set(flt.groups)
        assert result.context.tokens <= tiny_settings.pack.token_budget
        assert len(result.hits) <= tiny_settings.select.context_k
        per_source: dict[str, int] = {}
        for h in result.hits:
            per_source[h.source_id] = per_source.get(h.source_id, 0) + 1
        assert max(per_source.values(), default=0) <= tiny_settings.select.max_chunks_per_source


def test_trace_records_every_stage_and_fallback(indexed, tiny_settings) -> None:  # type: ignore[no-untyped-def]
    directory, embedder, _, _ = indexed
    settings = tiny_settings.replace(rerank_model="/nonexistent/cross-encoder")
    pipe = RagPipeline(
        EmbeddedBackend(directory),
        embedder=embedder,
        settings=settings,
        tokenizer=embedder.tokenizer(),
        reranker=CrossEncoderReranker(settings.rerank.model),
    )
    result = pipe.search("remote wipe during the trial", SearchFilter("acme"))
    names = [s.name for s in result.trace.stages]
    assert names == [
        "embed_query",
        "retrieve",
        "fusion",
        "dedup",
        "rerank",
        "gate",
        "boost",
        "select",
        "expand",
        "pack",
    ]
    # Fused order carries no relevance: the gate decides nothing and says so.
    assert result.trace.paths["gate"].startswith("undecided: not applied")
    assert result.trace.paths["rerank"].startswith("fallback: fused order")
    assert all(h.rerank_score is None for h in result.hits)  # never a fake score
    fusion = next(s for s in result.trace.stages if s.name == "fusion")
    assert fusion.info["fused"][0]["rank"] == 1
    d = result.to_dict()
    assert {s["name"] for s in d["trace"]["stages"]} == set(names)
    for stage in d["trace"]["stages"]:
        assert {"name", "in", "out", "dropped", "ms"} <= set(stage)


def test_cross_encoder_scores_are_recorded(indexed, tiny_settings, tiny_cross_encoder) -> None:  # type: ignore[no-untyped-def]
    directory, embedder, _, _ = indexed
    settings = tiny_settings.replace(rerank_model=str(tiny_cross_encoder))
    pipe = RagPipeline(
        EmbeddedBackend(directory),
        embedder=embedder,
        settings=settings,
        tokenizer=embedder.tokenizer(),
        reranker=CrossEncoderReranker(str(tiny_cross_encoder)),
    )
    result = pipe.search("error NIM-E1042 checksum", SearchFilter("acme"))
    assert result.trace.paths["rerank"] == f"cross-encoder {tiny_cross_encoder}"
    scores = [h.rerank_score for h in result.candidates]
    assert all(s is not None for s in scores)
    assert scores == sorted(scores, reverse=True)  # type: ignore[type-var]
    assert all(h.final_score == h.rerank_score for h in result.candidates)


def test_query_embedding_failure_falls_back_to_bm25(indexed, tiny_settings) -> None:  # type: ignore[no-untyped-def]
    directory, _, _, _ = indexed

    class Broken:
        def embed_query(self, text: str):  # type: ignore[no-untyped-def]
            raise RuntimeError("model crashed")

    from es_rag.encoders.tokenizer import HFTokenizer

    tok = HFTokenizer.from_pretrained(tiny_settings.encoder.model)
    pipe = RagPipeline(EmbeddedBackend(directory), embedder=Broken(), settings=tiny_settings, tokenizer=tok)
    result = pipe.search("remote wipe", SearchFilter("acme"))
    assert result.trace.paths["dense"].startswith("fallback: bm25 only")
    assert result.hits and all(h.dense_score is None for h in result.hits)


def test_cli_ingest_then_search_json(tiny_bi_encoder, sample_dir, tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    model = ["--embedding-model", str(tiny_bi_encoder), "--vector-dims", "32", "--index-dir", str(tmp_path / "idx")]
    common = [*model, "--rerank-model", "none"]  # search only: ingest has no reranker
    files = [str(sample_dir / "error-codes.md"), str(sample_dir / "ja-quickstart.md")]
    assert main(["ingest", *files, "--tenant", "acme", "--json", *model]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["sources"] == 2 and report["failed"] == []
    assert main(["search", "NIM-E1042", "--tenant", "acme", "--json", *common]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["hits"]
    for h in out["hits"]:
        assert HIT_KEYS <= set(h) and set(h["scores"]) == SCORE_KEYS
        assert h["tenant_id"] == "acme"
    assert {"text", "tokens", "citations"} <= set(out["context"])
    assert out["trace"]["paths"]["rerank"].startswith("disabled")
    # Another tenant sees nothing of acme's.
    assert main(["search", "NIM-E1042", "--tenant", "globex", "--json", *common]) == 0
    assert json.loads(capsys.readouterr().out)["hits"] == []


def test_cli_english_queries_with_a_lone_s_do_not_crash(tiny_bi_encoder, tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    """Issue 17: on an index ingested with ``--analyzer english``, ``search "Type S engines"`` ended in bm25s's
    ``ValueError: The maximum token ID in the query ... is higher than the number of tokens in the index``."""
    doc = tmp_path / "saturn.md"
    doc.write_text("# Saturn V\n\nThe S-IVB stage had one J-2 engine. The S-IC stage had five F-1 engines.\n")
    model = ["--embedding-model", str(tiny_bi_encoder), "--vector-dims", "32", "--index-dir", str(tmp_path / "idx")]
    english = [*model, "--analyzer", "english"]
    assert main(["ingest", str(doc), "--tenant", "acme", "--json", *english]) == 0
    capsys.readouterr()
    for query in ("Type S engines", "S-IVB J-2", "S-IC", "s"):
        assert main(["search", query, "--tenant", "acme", "--json", *english, "--rerank-model", "none"]) == 0, query
        out = json.loads(capsys.readouterr().out)
        assert out["hits"] and out["hits"][0]["source_id"].endswith("saturn.md"), query


def test_cli_reports_bad_files_and_indexes_the_good(tiny_bi_encoder, tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    good = tmp_path / "good.md"
    good.write_text("# Good\n\nA fine document.\n", encoding="utf-8")
    (tmp_path / "empty.md").write_text("", encoding="utf-8")
    (tmp_path / "latin1.txt").write_bytes("caf\xe9".encode("latin-1"))
    (tmp_path / "binary.md").write_bytes(b"\x00\x01\x02binary")
    rc = main(
        [
            "ingest",
            str(tmp_path),
            "--tenant",
            "t",
            "--json",
            "--embedding-model",
            str(tiny_bi_encoder),
            "--vector-dims",
            "32",
            "--index-dir",
            str(tmp_path / "idx"),
        ]
    )
    out = json.loads(capsys.readouterr().out)
    assert rc == 1
    assert out["sources"] == 1 and out["indexed"] >= 2  # one child + one parent
    failed = {Path(f["document"]).name: f["field"] for f in out["failed"]}
    assert failed == {"latin1.txt": "encoding", "binary.md": "encoding"}
    assert {"path": str(tmp_path / "empty.md"), "reason": "empty file: nothing to index"} in out["skipped"]  # issue 46


def test_search_without_index_is_a_clear_error(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    rc = main(["search", "x", "--tenant", "t", "--index-dir", str(tmp_path / "none")])
    assert rc == 2
    assert "es-rag ingest" in capsys.readouterr().err


def test_missing_tenant_is_refused(capsys) -> None:  # type: ignore[no-untyped-def]
    assert main(["search", "x"]) == 2
    assert "--tenant" in capsys.readouterr().err


@pytest.fixture(scope="module")
def cli_index(tiny_bi_encoder: Path, sample_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """The whole sample corpus ingested through the CLI; returns the search options (model, index, no reranker)."""
    model = ["--embedding-model", str(tiny_bi_encoder), "--vector-dims", "32"]
    model += ["--index-dir", str(tmp_path_factory.mktemp("cli-idx"))]
    files = sorted(str(p) for p in sample_dir.glob("*.md"))
    assert main(["ingest", *files, "--tenant", "acme", "--json", *model]) == 0
    return [*model, "--rerank-model", "none"]


def test_cli_post_retrieval_flags_reach_the_pipeline(cli_index, capsys) -> None:  # type: ignore[no-untyped-def]
    capsys.readouterr()
    flags = [
        "--expand-mode",
        "neighbors",
        "--expand-neighbors",
        "2",
        "--max-chunks-per-source",
        "1",
        "--mmr-preset",
        "exploratory",
        "--fusion-method",
        "linear",
        "--score-normalizer",
        "zscore",
        "--exact-channel",
        "off",
    ]
    assert main(["search", "rotate the API key NIM-E1042", "--tenant", "acme", "--json", *flags, *cli_index]) == 0
    out = json.loads(capsys.readouterr().out)
    paths = out["trace"]["paths"]
    assert paths["expand"] == "neighbours +/-2 within the parent section"
    assert paths["select"].startswith("mmr(lambda=0.5) + max 1/source")
    assert paths["fusion"].startswith("client-linear (normalizer=zscore")
    sources = [h["source_id"] for h in out["hits"]]
    assert out["hits"] and len(sources) == len(set(sources))  # the per-source cap of 1
    retrieve = next(s for s in out["trace"]["stages"] if s["name"] == "retrieve")
    assert set(retrieve["info"]["channels"]) == {"bm25", "dense"}  # --exact-channel off
    # without the flag the identifier NIM-E1042 brings the exact channel in
    assert main(["search", "rotate the API key NIM-E1042", "--tenant", "acme", "--json", *cli_index]) == 0
    out = json.loads(capsys.readouterr().out)
    retrieve = next(s for s in out["trace"]["stages"] if s["name"] == "retrieve")
    assert set(retrieve["info"]["channels"]) == {"bm25", "dense", "exact"}
    assert out["trace"]["paths"]["expand"] == "none" and out["trace"]["paths"]["fusion"].startswith("client-rrf")


def test_cli_search_prints_status_and_gate_decision(cli_index, capsys) -> None:  # type: ignore[no-untyped-def]
    capsys.readouterr()
    assert main(["search", "remote wipe", "--tenant", "acme", "--gate-cliff", "off", *cli_index]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "status: undecided" in lines
    (gate,) = [line for line in lines if line.startswith("gate decision: ")]
    assert "fused order carries no relevance scores" in gate  # no reranker: the gate decides nothing


def test_cli_rejects_invalid_knob_values(cli_index, capsys) -> None:  # type: ignore[no-untyped-def]
    capsys.readouterr()
    assert main(["search", "x", "--tenant", "acme", "--rerank-timeout", "0", *cli_index]) == 2
    assert "rerank_timeout: must be > 0" in capsys.readouterr().err
    # a preset is a default: the explicit --mmr-lambda wins over --mmr-preset
    args = ["--mmr-lambda", "0.3", "--mmr-preset", "single_fact", "--json"]
    assert main(["search", "remote wipe", "--tenant", "acme", *args, *cli_index]) == 0
    assert json.loads(capsys.readouterr().out)["trace"]["paths"]["select"].startswith("mmr(lambda=0.3)")
    assert main(["search", "x", "--tenant", "acme", "--channel-weights", "dense", *cli_index]) == 2
    err = capsys.readouterr().err
    assert "expected NAME=NUMBER" in err and len(err.strip().splitlines()) == 1  # one line, no usage block


def test_cli_escalation_flags_reach_the_pipeline(cli_index, tiny_cross_encoder, capsys) -> None:  # type: ignore[no-untyped-def]
    capsys.readouterr()
    ce = str(tiny_cross_encoder)
    query = ["search", "rotate the API key NIM-E1042", "--tenant", "acme", "--json", *cli_index, "--rerank-model", ce]
    flags = ["--escalate-model", ce, "--escalate-on", "always", "--escalate-top-n", "3", "--escalate-timeout", "off"]
    assert main([*query, *flags]) == 0
    out = json.loads(capsys.readouterr().out)
    names = [s["name"] for s in out["trace"]["stages"]]
    assert names[names.index("rerank") + 1 : names.index("rerank") + 3] == ["escalate", "gate"]
    escalate = next(s for s in out["trace"]["stages"] if s["name"] == "escalate")
    assert escalate["info"]["escalated"] is True and escalate["info"]["fired"] == ["always"]
    assert escalate["info"]["scorer"] == f"cross-encoder {ce}" and len(escalate["info"]["rows"]) == 3
    assert out["trace"]["paths"]["escalate"].startswith(f"escalated (always) to cross-encoder {ce}: order ")
    # off by default: no escalate stage at all
    assert main(query) == 0
    assert "escalate" not in [s["name"] for s in json.loads(capsys.readouterr().out)["trace"]["stages"]]
    assert main([*query, "--escalate-on", "ties"]) == 2
    assert "escalate_on: unknown trigger 'ties'" in capsys.readouterr().err
