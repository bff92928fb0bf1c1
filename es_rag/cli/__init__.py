"""``es-rag`` command line. The parser is built by :func:`build_parser`; each command is a function
taking the parsed arguments and returning an exit code. Errors go to stderr with exit code 2
(bad input / configuration) or 3 (cluster errors)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from es_rag import __version__
from es_rag.errors import ClusterError, ConfigError, EsRagError
from es_rag.settings import VECTOR_INDEX_TYPES, Analyzer, FusionMode, Settings, Similarity, VectorMode

DEFAULT_INDEX_DIR = ".es_rag/index"


# ---------------------------------------------------------------------------------------------
# parser
# ---------------------------------------------------------------------------------------------
def _add_settings_args(p: argparse.ArgumentParser) -> None:
    d = Settings()
    g = p.add_argument_group("settings")
    g.add_argument("--index-prefix", default=d.index_prefix, help="prefix of indices/templates/pipelines (%(default)s)")
    g.add_argument(
        "--embedding-model", default=d.embedding_model, help="sentence-transformers model or dir (%(default)s)"
    )
    g.add_argument("--vector-dims", type=int, default=d.vector_dims, help="embedding dimension (%(default)s)")
    g.add_argument(
        "--similarity",
        choices=[s.value for s in Similarity],
        default=d.similarity.value,
        help="dense_vector similarity; also how the embedded backend scores kNN (%(default)s)",
    )
    g.add_argument(
        "--vector-index-type",
        choices=list(VECTOR_INDEX_TYPES),
        default=d.vector_index_type,
        help="dense_vector index_options.type, always written explicitly (Elasticsearch 9.1+ would otherwise pick "
        "bbq_hnsw at >= 384 dims): hnsw = float32, scores as the embedded backend; int8/int4/bbq = quantized "
        "(%(default)s)",
    )
    g.add_argument(
        "--vector-rescore-oversample",
        type=_off_or(float),
        default=d.vector_rescore_oversample,
        metavar="X|off",
        help="rescore_vector.oversample of a quantized type (0 or 1..10); default: 3.0 for bbq_*, none for int8/int4",
    )
    g.add_argument(
        "--analyzer",
        choices=[a.value for a in Analyzer],
        default=d.analyzer.value,
        help="text analyzer; kuromoji needs the analysis-kuromoji plugin; auto = kuromoji when the cluster has "
        "that plugin, else cjk for --language ja|zh|ko, else standard (probed by setup/doctor --es; without a "
        "cluster auto takes the no-plugin branch) (%(default)s)",
    )
    g.add_argument(
        "--bm25-k1",
        type=float,
        default=d.bm25_k1,
        help="BM25 k1 of every text field: the index's default similarity (set at index creation) and the "
        "embedded mirror (%(default)s)",
    )
    g.add_argument("--bm25-b", type=float, default=d.bm25_b, help="BM25 b (length normalisation) (%(default)s)")
    g.add_argument(
        "--language",
        default=None,
        metavar="CODE",
        help="corpus language (ISO 639-1: en, ja, zh, ko, ...), read by --analyzer auto; a non-CJK language "
        "always gives standard (unset)",
    )
    g.add_argument("--inference-id", default=None, help="inference endpoint: vectors computed by the ingest pipeline")
    g.add_argument(
        "--vector-mode",
        choices=[m.value for m in VectorMode],
        default=None,
        help="client | inference (ingest-pipeline inference processor) | semantic_text (Enterprise: server-side "
        "chunking + embedding, semantic query); default: inference when --inference-id is set, else client",
    )
    g.add_argument(
        "--semantic-chunking",
        default=d.semantic_chunking,
        help="semantic_text chunking_settings.strategy: sentence, word, none, or 'endpoint' for the endpoint's "
        "own (%(default)s)",
    )
    g.add_argument("--semantic-max-chunk-size", type=int, default=d.semantic_max_chunk_size, help="words (%(default)s)")
    g.add_argument(
        "--semantic-overlap",
        type=int,
        default=d.semantic_overlap,
        help="sentence: 0/1 sentences, word: words (%(default)s)",
    )
    g.add_argument(
        "--reranker",
        default=d.reranker_model,
        help="cross-encoder model or dir; 'none' disables reranking (%(default)s)",
    )
    g.add_argument(
        "--candidate-k",
        type=int,
        default=d.candidate_k,
        help="candidates per channel = RRF rank_window_size (%(default)s)",
    )
    g.add_argument("--num-candidates", type=int, default=d.num_candidates, help="kNN num_candidates (%(default)s)")
    g.add_argument(
        "--rerank-k", type=int, default=d.rerank_k, help="fused candidates the cross-encoder scores (%(default)s)"
    )
    g.add_argument("--context-k", type=int, default=d.context_k, help="most chunks in the context (%(default)s)")
    g.add_argument("--rank-constant", type=int, default=d.rank_constant, help="RRF rank constant (%(default)s)")
    g.add_argument("--token-budget", type=int, default=d.token_budget, help="context token budget (%(default)s)")
    g.add_argument(
        "--chunk-max-tokens",
        type=int,
        default=d.chunk_max_tokens,
        help="child chunk size in model tokens (%(default)s)",
    )
    g.add_argument(
        "--chunk-overlap",
        type=int,
        default=d.chunk_overlap,
        help="overlap in tokens: between consecutive windows (fixed), as repeated trailing pieces (recursive), "
        "inside over-long sentences only (structure, parent-child) (%(default)s)",
    )
    _add_retrieval_knobs(p, d)


def _off_or(kind: type) -> Any:
    """argparse type: ``off``/``none`` -> None, else ``kind(value)``."""

    def parse(value: str) -> Any:
        if value.strip().lower() in ("off", "none"):
            return None
        try:
            return kind(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a {kind.__name__} or 'off', got {value!r}") from None

    parse.__name__ = f"{kind.__name__}-or-off"
    return parse


def _shown(value: object) -> str:
    """A default as ``--help`` shows it: None is ``off``."""
    return "off" if value is None else str(value)


def _key_floats(value: str) -> dict[str, float]:
    """argparse type: ``a=1,b=2.5`` -> ``{"a": 1.0, "b": 2.5}``."""
    out: dict[str, float] = {}
    for part in (x.strip() for x in value.split(",")):
        if not part:
            continue
        key, sep, number = part.rpartition("=")
        try:
            if not sep or not key:
                raise ValueError
            out[key.strip()] = float(number)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected NAME=NUMBER[,NAME=NUMBER...], got {part!r}") from None
    return out


def _add_retrieval_knobs(p: argparse.ArgumentParser, d: Settings) -> None:
    """Fusion, dedup, rerank, gate, business, selection, expansion and packing options (``Settings``)."""
    from es_rag.stages.select import LAMBDA_PRESETS

    g = p.add_argument_group("fusion and post-retrieval")
    g.add_argument(
        "--fusion-method",
        choices=["rrf", "linear"],
        default=d.fusion_method,
        help="rrf (rank fusion) or linear (weighted sum of per-channel normalised scores) (%(default)s)",
    )
    g.add_argument(
        "--score-normalizer",
        choices=["minmax", "l2_norm", "none", "zscore"],
        default=d.score_normalizer,
        help="per-channel normaliser of linear fusion; zscore exists only client-side (%(default)s)",
    )
    g.add_argument(
        "--channel-weights",
        type=_key_floats,
        default=None,
        metavar="CH=W,...",
        help="weight per channel (bm25, dense, exact) in rrf or linear fusion, e.g. bm25=1,dense=2 (all 1)",
    )
    g.add_argument(
        "--exact-channel",
        choices=["auto", "off"],
        default=d.exact_channel,
        help="auto: add the exact-match channel when the query holds identifiers like E1042 (%(default)s)",
    )
    g.add_argument(
        "--dedup-overlap",
        type=_off_or(float),
        default=d.dedup_adjacent_overlap,
        metavar="SHARE|off",
        help="drop a chunk overlapping a kept chunk of the same source version by this share of the shorter "
        f"span ({_shown(d.dedup_adjacent_overlap)})",
    )
    g.add_argument(
        "--dedup-near",
        type=_off_or(float),
        default=d.dedup_near_threshold,
        metavar="JACCARD|off",
        help=f"drop a chunk whose word 3-shingle Jaccard with a kept chunk is at least this "
        f"({_shown(d.dedup_near_threshold)})",
    )
    g.add_argument(
        "--rerank-backend",
        choices=["torch", "int8", "onnx"],
        default=d.rerank_backend,
        help="cross-encoder backend: torch, int8 (dynamic quantisation), onnx (needs the onnx extra) (%(default)s)",
    )
    g.add_argument(
        "--rerank-timeout",
        type=_off_or(float),
        default=d.rerank_timeout,
        metavar="SECONDS|off",
        help=f"abandon a rerank call after this and keep the fused order ({_shown(d.rerank_timeout)})",
    )
    g.add_argument(
        "--rerank-batch-size",
        type=int,
        default=d.rerank_batch_size,
        help="(query, passage) windows per forward pass (%(default)s)",
    )
    g.add_argument(
        "--rerank-threshold",
        type=_off_or(float),
        default=d.rerank_threshold,
        metavar="P|off",
        help="calibrated relevance below which the gate drops a hit (no-answer when none passes); "
        "default: the model directory's calibration file, else no threshold",
    )
    g.add_argument(
        "--gate-cliff",
        type=_off_or(float),
        default=d.gate_cliff,
        metavar="DROP|off",
        help=f"cut the reranked list after the first score drop of at least this ({_shown(d.gate_cliff)})",
    )
    g.add_argument(
        "--gate-margin",
        type=_off_or(float),
        default=d.gate_margin,
        metavar="MARGIN|off",
        help=f"keep only top-1 when it beats top-2 by at least this ({_shown(d.gate_margin)})",
    )
    g.add_argument(
        "--source-tiers",
        type=_key_floats,
        default=None,
        metavar="GLOB=BOOST,...",
        help="business boost per source_id glob, e.g. 'handbook*=0.2,legacy-*=-0.3' (none)",
    )
    g.add_argument(
        "--freshness-weight",
        type=float,
        default=d.freshness_weight,
        help="boost of a source dated today (source_version as ISO date), halved every "
        "--freshness-half-life-days; 0 disables (%(default)s)",
    )
    g.add_argument("--freshness-half-life-days", type=float, default=d.freshness_half_life_days, help="(%(default)s)")
    g.add_argument(
        "--latest-version-boost",
        type=float,
        default=d.latest_version_boost,
        help="boost of the newest version among one source's candidates (%(default)s)",
    )
    mmr = g.add_mutually_exclusive_group()
    mmr.add_argument(
        "--mmr-lambda",
        type=float,
        default=None,
        help=f"MMR trade-off, 1.0 = pure relevance, 0.0 = pure diversity ({d.mmr_lambda})",
    )
    mmr.add_argument(
        "--mmr-preset",
        choices=list(LAMBDA_PRESETS),
        default=None,
        help="named MMR lambda: " + ", ".join(f"{k}={v}" for k, v in LAMBDA_PRESETS.items()),
    )
    g.add_argument(
        "--max-chunks-per-source",
        type=int,
        default=d.max_chunks_per_source,
        help="per-source cap in selection (%(default)s)",
    )
    g.add_argument(
        "--max-chunks-per-parent",
        type=_off_or(int),
        default=d.max_chunks_per_parent,
        metavar="N|off",
        help=f"per-parent-section cap in selection ({_shown(d.max_chunks_per_parent)})",
    )
    g.add_argument(
        "--expand",
        choices=["none", "parent", "neighbors"],
        default=d.expansion,
        help="after selection: parent (swap a child for its section) or neighbors (add adjacent children), "
        "under the same hard filter (%(default)s)",
    )
    g.add_argument(
        "--expand-neighbors",
        type=int,
        default=d.expand_neighbors,
        help="children fetched on each side with --expand neighbors (%(default)s)",
    )
    g.add_argument(
        "--expand-max-parent-tokens",
        type=int,
        default=d.expand_max_parent_tokens,
        help="a parent longer than this is not swapped in with --expand parent (%(default)s)",
    )
    g.add_argument(
        "--pack-tokenizer",
        default=d.pack_tokenizer,
        metavar="MODEL_OR_DIR",
        help="tokenizer of the target LLM counting --token-budget (default: the embedding model's)",
    )


def _knob_values(args: argparse.Namespace) -> dict[str, Any]:
    """The :func:`_add_retrieval_knobs` options as ``Settings`` fields (options a parser lacks are skipped)."""
    from es_rag.stages.select import lambda_for

    names = {
        "fusion_method": "fusion_method",
        "score_normalizer": "score_normalizer",
        "exact_channel": "exact_channel",
        "dedup_overlap": "dedup_adjacent_overlap",
        "dedup_near": "dedup_near_threshold",
        "rerank_backend": "rerank_backend",
        "rerank_timeout": "rerank_timeout",
        "rerank_batch_size": "rerank_batch_size",
        "rerank_threshold": "rerank_threshold",
        "gate_cliff": "gate_cliff",
        "gate_margin": "gate_margin",
        "freshness_weight": "freshness_weight",
        "freshness_half_life_days": "freshness_half_life_days",
        "latest_version_boost": "latest_version_boost",
        "max_chunks_per_source": "max_chunks_per_source",
        "max_chunks_per_parent": "max_chunks_per_parent",
        "expand": "expansion",
        "expand_neighbors": "expand_neighbors",
        "expand_max_parent_tokens": "expand_max_parent_tokens",
        "pack_tokenizer": "pack_tokenizer",
    }
    values = {field: getattr(args, dest) for dest, field in names.items() if hasattr(args, dest)}
    for dest in ("channel_weights", "source_tiers"):
        if getattr(args, dest, None) is not None:
            values[dest] = getattr(args, dest)
    if getattr(args, "mmr_preset", None):
        values["mmr_lambda"] = lambda_for(args.mmr_preset)
    elif getattr(args, "mmr_lambda", None) is not None:
        values["mmr_lambda"] = args.mmr_lambda
    return values


def _add_target_args(p: argparse.ArgumentParser, *, es_required: bool = False) -> None:
    g = p.add_mutually_exclusive_group(required=es_required)
    g.add_argument(
        "--es",
        metavar="URL",
        default=None,
        help="Elasticsearch URL (credentials from ES_API_KEY or ES_USERNAME/ES_PASSWORD)",
    )
    if not es_required:
        g.add_argument(
            "--index-dir", metavar="DIR", default=None, help=f"embedded index directory (default {DEFAULT_INDEX_DIR})"
        )
    _add_connection_args(p)


def _add_connection_args(p: argparse.ArgumentParser) -> None:
    """How to reach and trust the cluster (besides ``--es``); each falls back to an environment variable."""
    d = Settings()
    g = p.add_argument_group("Elasticsearch connection (credentials: ES_API_KEY, or ES_USERNAME and ES_PASSWORD)")
    g.add_argument(
        "--cloud-id", default=None, metavar="ID", help="Elastic Cloud deployment id instead of --es (ES_CLOUD_ID)"
    )
    g.add_argument(
        "--ca-certs",
        default=None,
        metavar="FILE",
        help="CA that signed the cluster's certificate; Elasticsearch 9 writes config/certs/http_ca.crt (ES_CA_CERTS)",
    )
    g.add_argument(
        "--ssl-assert-fingerprint",
        default=None,
        metavar="SHA256",
        help="trust the certificate with this SHA-256 fingerprint instead of a CA (ES_SSL_ASSERT_FINGERPRINT)",
    )
    g.add_argument(
        "--insecure",
        action="store_true",
        help="do not verify TLS certificates (a throwaway dev cluster only; ES_VERIFY_CERTS=false)",
    )
    g.add_argument(
        "--request-timeout",
        type=float,
        default=d.request_timeout,
        metavar="S",
        help="seconds per request: search, probe, setup, registry (%(default)s)",
    )
    g.add_argument(
        "--bulk-timeout",
        type=float,
        default=d.bulk_timeout,
        metavar="S",
        help="seconds per _bulk request; the first bulks through an inference pipeline wait for a model (%(default)s)",
    )


def connection_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """:meth:`ElasticsearchBackend.connect` options from the command line, else the environment.

    Args:
        args: Parsed arguments (parsers without the connection group give none).
    """
    env = os.environ
    verify = not getattr(args, "insecure", False) and env.get("ES_VERIFY_CERTS", "true").strip().lower() not in (
        "0",
        "false",
        "no",
    )
    if not verify:
        print("es-rag: warning: TLS certificates are not verified (--insecure)", file=sys.stderr)
    return {
        "cloud_id": getattr(args, "cloud_id", None) or env.get("ES_CLOUD_ID") or None,
        "ca_certs": getattr(args, "ca_certs", None) or env.get("ES_CA_CERTS") or None,
        "ssl_assert_fingerprint": getattr(args, "ssl_assert_fingerprint", None)
        or env.get("ES_SSL_ASSERT_FINGERPRINT")
        or None,
        "verify_certs": verify,
    }


def uses_cluster(args: argparse.Namespace) -> bool:
    """Whether the command targets Elasticsearch (``--es`` or an Elastic Cloud id)."""
    return bool(getattr(args, "es", None) or getattr(args, "cloud_id", None) or os.environ.get("ES_CLOUD_ID"))


def connect(args: argparse.Namespace, settings: Settings) -> Any:
    """The :class:`~es_rag.elasticsearch.backend.ElasticsearchBackend` the arguments name.

    Args:
        args: Parsed arguments.
        settings: Settings.
    """
    from es_rag.elasticsearch.backend import ElasticsearchBackend

    return ElasticsearchBackend.connect(getattr(args, "es", None), settings, **connection_kwargs(args))


def _add_principal_args(p: argparse.ArgumentParser, *, required: bool) -> None:
    p.add_argument("--tenant", required=required, help="tenant id (hard filter in every retriever)")
    p.add_argument(
        "--acl", nargs="+", default=[], metavar="G", help="ACL groups of the caller; 'public' is always included"
    )


def _add_owner_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tenant", required=True, help="tenant id written into every chunk (required)")
    p.add_argument(
        "--acl",
        nargs="+",
        default=["public"],
        metavar="G",
        help="groups allowed to read the documents (default: public)",
    )


def _add_chunking_args(p: argparse.ArgumentParser) -> None:
    from es_rag.chunking import Strategy

    p.add_argument(
        "--strategy",
        choices=[s.value for s in Strategy],
        default=Strategy.PARENT_CHILD.value,
        help="chunking strategy (%(default)s)",
    )
    p.add_argument(
        "--contextual",
        action="store_true",
        help="embed 'title + heading path' with each child (stored in contextual_text; text stays the span)",
    )
    p.add_argument(
        "--parent-max-tokens", type=int, default=None, help="cap on parent size in tokens (parent-child strategy)"
    )


def build_parser() -> argparse.ArgumentParser:
    """The ``es-rag`` argument parser."""
    parser = argparse.ArgumentParser(
        prog="es-rag",
        description="RAG retrieval on Elasticsearch: hybrid BM25 + kNN with hard filters, RRF, rerank, MMR, packing.",
    )
    parser.add_argument("--version", action="version", version=f"es-rag {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser(
        "demo", help="ingest the bundled sample corpus into a temporary embedded index and run its queries"
    )
    p.add_argument("--json", action="store_true", help="print results as JSON")
    p.add_argument("--index-dir", default=None, help="keep the demo index here instead of a temporary folder")
    _add_settings_args(p)

    p = sub.add_parser("ingest", help="chunk, embed and index Markdown / HTML / text / JSONL files")
    p.add_argument("paths", nargs="+", metavar="PATH")
    _add_target_args(p)
    _add_owner_args(p)
    _add_chunking_args(p)
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    _add_settings_args(p)

    p = sub.add_parser("search", help="hybrid search + rerank + selection + packed context")
    p.add_argument("query")
    _add_target_args(p)
    _add_principal_args(p, required=True)
    p.add_argument("--fusion", choices=[m.value for m in FusionMode], default="auto")
    p.add_argument("--json", action="store_true", help="print hits, context and trace as JSON")
    _add_settings_args(p)

    p = sub.add_parser("explain", help="print the Elasticsearch request(s) a search sends (no cluster needed)")
    p.add_argument("query")
    p.add_argument("--format", choices=["console", "json"], default="console")
    p.add_argument(
        "--fusion",
        choices=[m.value for m in FusionMode],
        default="auto",
        help="auto: probe --es if given, else print both paths",
    )
    p.add_argument("--es", metavar="URL", default=None, help="probe this cluster to decide the path")
    _add_connection_args(p)
    p.add_argument(
        "--no-vector",
        action="store_true",
        help="do not load the embedding model; use a unit-vector placeholder of --vector-dims",
    )
    p.add_argument(
        "--template",
        action="store_true",
        help="print the _search/template call of the stored hybrid template (with its params) instead",
    )
    _add_principal_args(p, required=True)
    _add_settings_args(p)

    p = sub.add_parser(
        "setup", help="install ingest pipelines, index templates and the stored search template (idempotent)"
    )
    p.add_argument("--es", metavar="URL", default=None, help="Elasticsearch URL (https://host:9200)")
    _add_connection_args(p)
    p.add_argument("--dry-run", action="store_true", help="print the requests instead of sending them")
    p.add_argument("--format", choices=["console", "json"], default="console")
    p.add_argument("--no-create-indices", action="store_true", help="only install templates and pipelines")
    _add_settings_args(p)
    p.set_defaults(analyzer=Analyzer.AUTO.value)  # setup resolves auto against the cluster's plugins

    p = sub.add_parser(
        "selftest",
        help="run every es_rag request on a cluster under a throwaway prefix, check the results, delete everything",
        description="The first command to run on a cluster: setup, ingest of a built-in corpus through the pipeline, "
        "every retrieval path the cluster supports (client RRF, native rrf/linear when licensed, exact channel, "
        "stored template, inference/semantic_text when configured), lineage and content_hash, tenant and ACL "
        "isolation, a version switch and delete-source, all under es-rag-selftest-<random>; then deletes it all "
        "(also after a failure or Ctrl-C). Exit 0 when every check passes.",
    )
    p.add_argument("--es", metavar="URL", default=None, help="Elasticsearch URL (https://host:9200)")
    _add_connection_args(p)
    p.add_argument("--json", action="store_true", help="print the checks as JSON")
    p.add_argument("--keep", action="store_true", help="leave the throwaway indices and assets for inspection")
    p.add_argument(
        "--cleanup",
        metavar="PREFIX",
        default=None,
        help="only delete what a --keep run left under this es-rag-selftest-* prefix",
    )
    _add_settings_args(p)
    p.set_defaults(analyzer=Analyzer.AUTO.value)  # as setup

    p = sub.add_parser("doctor", help="what the cluster (or this machine) supports and which path each stage takes")
    p.add_argument("--es", metavar="URL", default=None, help="Elasticsearch URL (https://host:9200)")
    _add_connection_args(p)
    p.add_argument("--json", action="store_true")
    _add_settings_args(p)
    p.set_defaults(analyzer=Analyzer.AUTO.value)  # as setup: reports what auto resolves to

    p = sub.add_parser("chunk", help="print the chunk documents ingest would write, without indexing")
    p.add_argument("paths", nargs="+", metavar="PATH")
    p.add_argument("--tenant", default="-", help="tenant id written into the chunks (default '-')")
    p.add_argument("--acl", nargs="+", default=["public"], metavar="G")
    p.add_argument(
        "--max-tokens", type=int, default=None, help="child size in model tokens (default --chunk-max-tokens)"
    )
    p.add_argument("--overlap", type=int, default=None, help="overlap in tokens (default --chunk-overlap)")
    _add_chunking_args(p)
    p.add_argument("--json", action="store_true", help="JSON array (default: one summary line per chunk)")
    _add_settings_args(p)

    p = sub.add_parser("delete-source", help="delete every chunk, parent and registry entry of a source")
    p.add_argument("source_id", metavar="ID")
    _add_target_args(p)
    p.add_argument("--tenant", required=True, help="tenant owning the source")
    p.add_argument("--json", action="store_true")
    _add_settings_args(p)

    p = sub.add_parser("eval", help="per-stage retrieval metrics on a BEIR-layout dataset")
    p.add_argument(
        "--dataset", required=True, metavar="DIR", help="BEIR folder: corpus*.jsonl, queries.jsonl, qrels/SPLIT.tsv"
    )
    p.add_argument("--split", default="test", help="qrels split to evaluate (%(default)s)")
    p.add_argument("--index-dir", default=None, help="persist the embedded index / embedding cache here")
    p.add_argument("--max-queries", type=int, default=None, help="evaluate only the first N queries")
    p.add_argument("--json", action="store_true", help="print the result (and any ablation table) as JSON")
    _add_bm25_args(p)
    p.add_argument("--depth", type=int, default=200, help="candidates per channel = RRF window in eval (%(default)s)")
    p.add_argument("--records", metavar="FILE", default=None, help="write one run record per query (JSON Lines)")
    p.add_argument("--report", metavar="DIR", default=None, help="write report.md, result.json and PNG plots here")
    p.add_argument(
        "--es",
        metavar="URL",
        default=None,
        help="evaluate on a live cluster: the corpus is written there (setup, ingest pipeline, version registry; "
        f"index prefix {EVAL_ES_PREFIX} unless --index-prefix is given) and every query runs against it "
        "(credentials from ES_API_KEY or ES_USERNAME/ES_PASSWORD); default: the embedded backend",
    )
    _add_connection_args(p)
    p.add_argument(
        "--unit",
        choices=["document", "fixed", "recursive", "structure"],
        default="document",
        help="retrieval unit: document = one unit per corpus document (BEIR protocol); fixed / recursive / "
        "structure = each document's text cut by that es_rag chunker into chunks of --chunk-max-tokens tokens "
        "with --chunk-overlap, each embedded as title + chunk; chunks are ranked and a document is scored at "
        "its best chunk's rank (%(default)s)",
    )
    p.add_argument(
        "--ablate",
        nargs="?",
        const="one-change",
        choices=["one-change", "ladder"],
        default=None,
        help="also run an ablation: one-change (the default when the flag has no value) = base settings, then "
        "one setting changed at a time; ladder = the 8 cumulative steps (fixed chunks, chunk length, overlap, "
        "structure-aware splitter, + BM25, + fusion, + reranker, + context selection), one change per step, "
        "printed as a table with deltas; both ablations choose their own units (a chunked --unit is refused) and "
        "ladder refuses --records (records are per run)",
    )
    g = p.add_argument_group("ladder (--ablate ladder)")
    g.add_argument(
        "--ladder-short-tokens", type=int, default=128, help="step 1: fixed chunk length, no overlap (%(default)s)"
    )
    g.add_argument(
        "--ladder-long-tokens",
        type=int,
        default=256,
        help="step 2 onwards: chunk length; clipped to the embedding model's input limit (%(default)s)",
    )
    g.add_argument("--ladder-overlap", type=int, default=32, help="step 3 onwards: overlap in tokens (%(default)s)")
    g.add_argument(
        "--ladder-structure",
        choices=["recursive", "structure"],
        default="recursive",
        help="step 4: structure-aware splitter replacing fixed windows; recursive keeps the overlap as trailing "
        "sentences, structure overlaps only inside an over-long sentence (%(default)s)",
    )
    _add_settings_args(p)
    _add_protocol_arg(p)

    p = sub.add_parser("train-reranker", help="fine-tune a cross-encoder with hard negatives mined by es_rag")
    p.add_argument("--dataset", required=True, metavar="DIR")
    p.add_argument("--split", default="train", help="training split (test is refused) (%(default)s)")
    p.add_argument("--out", required=True, metavar="DIR", help="where the trained model is saved")
    p.add_argument("--base", default=None, metavar="MODEL_OR_PATH", help="start checkpoint (default: embedding model)")
    p.add_argument("--index-dir", default=None, metavar="DIR", help="embedding cache root")
    p.add_argument("--max-queries", type=int, default=None, help="train on the first N queries only")
    p.add_argument("--max-steps", type=int, default=300, help="optimizer steps (%(default)s)")
    p.add_argument("--batch-size", type=int, default=16, help="(query, passage) pairs per step (%(default)s)")
    p.add_argument(
        "--epochs", type=int, default=1, help="passes over the training data, bounded by --max-steps (%(default)s)"
    )
    p.add_argument(
        "--loss",
        choices=["listwise", "pointwise"],
        default="listwise",
        help="listwise: softmax cross-entropy of each positive against its query's hard negatives "
        "(batch-size // group size groups per step); pointwise: binary cross-entropy per pair (%(default)s)",
    )
    p.add_argument("--max-length", type=int, default=256, help="tokens per (query, passage) pair (%(default)s)")
    p.add_argument("--negatives", type=int, default=7, help="hard negatives per query (%(default)s)")
    p.add_argument("--learning-rate", type=float, default=3e-5)
    _add_bm25_args(p)
    _add_settings_args(p)
    _add_protocol_arg(p)
    return parser


def _add_bm25_args(p: argparse.ArgumentParser) -> None:
    d = Settings()
    p.add_argument(
        "--bm25-fields",
        default=",".join(d.bm25_fields),
        help="multi_match fields with boosts, comma separated (%(default)s)",
    )
    p.add_argument(
        "--tie-breaker", type=float, default=d.bm25_tie_breaker, help="best_fields tie_breaker (%(default)s)"
    )


EVAL_ES_PREFIX = "es-rag-eval"
"""Index prefix ``eval --es`` uses unless ``--index-prefix`` is given."""

_PROTOCOL_ARGS = {
    "analyzer": "analyzer",
    "bm25_fields": "bm25_fields",
    "tie_breaker": "bm25_tie_breaker",
    "bm25_k1": "bm25_k1",
    "bm25_b": "bm25_b",
}
"""Argument dest -> Settings field that ``--bm25-protocol`` sets unless the option is given."""


def _add_protocol_arg(p: argparse.ArgumentParser) -> None:
    """``--bm25-protocol`` for commands on BEIR-layout datasets; the options it sets default to it."""
    from es_rag.evaluation.run import BM25_PROTOCOLS

    p.add_argument(
        "--bm25-protocol",
        choices=[*BM25_PROTOCOLS, "settings"],
        default="beir-multifield",
        help="BM25 set-up: beir-multifield = Anserini's BEIR multifield regression (english, title+text summed, "
        "k1 0.9, b 0.4; reproduces BEIR's published BM25), beir-es = the beir package's Elasticsearch code "
        "(english, best_fields tie_breaker 0.5, k1 1.2, b 0.75), settings = es_rag's own defaults; "
        "--analyzer, --bm25-fields, --tie-breaker, --bm25-k1 and --bm25-b override it (%(default)s)",
    )
    for action in p._actions:
        if action.dest in _PROTOCOL_ARGS:
            action.default = None
            action.help = (action.help or "").replace("(%(default)s)", "(default: from --bm25-protocol)")


def _bm25_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """Settings fields of the BM25 options; with ``--bm25-protocol``, unset options take the protocol's value."""
    out: dict[str, Any] = {}
    protocol = getattr(args, "bm25_protocol", None)
    if protocol is not None:
        from es_rag.evaluation.run import BM25_PROTOCOLS

        values = dict(BM25_PROTOCOLS.get(protocol, {}))
        defaults = Settings()
        for dest, fld in _PROTOCOL_ARGS.items():
            if getattr(args, dest) is None:
                value = values.get(fld, getattr(defaults, fld))
                setattr(args, dest, ",".join(value) if fld == "bm25_fields" else getattr(value, "value", value))
    out["bm25_fields"] = tuple(f.strip() for f in str(args.bm25_fields).split(",") if f.strip())
    out["bm25_tie_breaker"] = args.tie_breaker
    return out


def settings_from_args(args: argparse.Namespace, *, keep_auto_analyzer: bool = False, **overrides: Any) -> Settings:
    """Settings from the shared options.

    Args:
        args: Parsed arguments.
        keep_auto_analyzer: Leave ``--analyzer auto`` unresolved (``setup``/``doctor`` resolve it against
            the cluster); otherwise it takes :func:`es_rag.elasticsearch.assets.resolve_analyzer`'s no-plugin branch.
        **overrides: Extra fields.
    """
    reranker = None if str(args.reranker).lower() in ("none", "") else args.reranker
    values: dict[str, Any] = dict(
        index_prefix=args.index_prefix,
        embedding_model=args.embedding_model,
        vector_dims=args.vector_dims,
        similarity=args.similarity,
        vector_index_type=args.vector_index_type,
        vector_rescore_oversample=args.vector_rescore_oversample,
        analyzer=args.analyzer,
        bm25_k1=args.bm25_k1,
        bm25_b=args.bm25_b,
        inference_id=args.inference_id,
        vector_mode=getattr(args, "vector_mode", None),
        semantic_chunking=None
        if getattr(args, "semantic_chunking", "sentence") == "endpoint"
        else getattr(args, "semantic_chunking", "sentence"),
        semantic_max_chunk_size=getattr(args, "semantic_max_chunk_size", 250),
        semantic_overlap=getattr(args, "semantic_overlap", 1),
        reranker_model=reranker,
        candidate_k=args.candidate_k,
        num_candidates=max(args.num_candidates, args.candidate_k),
        rerank_k=args.rerank_k,
        context_k=args.context_k,
        rank_constant=args.rank_constant,
        token_budget=args.token_budget,
        chunk_max_tokens=args.chunk_max_tokens,
        chunk_overlap=args.chunk_overlap,
    )
    for name in ("request_timeout", "bulk_timeout"):
        if getattr(args, name, None) is not None:
            values[name] = getattr(args, name)
    values.update(_knob_values(args))
    if getattr(args, "fusion", None):
        values["fusion"] = args.fusion
    values.update(overrides)
    settings = Settings(**values)
    if settings.analyzer is Analyzer.AUTO and not keep_auto_analyzer:
        # Only setup/doctor probe a cluster; everywhere else auto takes the rule's no-plugin branch.
        from es_rag.elasticsearch.assets import resolved_settings

        settings = resolved_settings(settings, plugins=None, language=getattr(args, "language", None))
    return settings


# ---------------------------------------------------------------------------------------------
# commands
# ---------------------------------------------------------------------------------------------
def _progress() -> bool:
    return sys.stderr.isatty()


def _print_report(report: Any, as_json: bool) -> None:
    if as_json:
        print(json.dumps(report.to_dict(), ensure_ascii=False, indent=2))
        return
    print(
        f"sources: {report.sources}  chunks: {report.chunks}  parents: {report.parents}  "
        f"indexed: {report.indexed}  failed: {len(report.failed)}"
    )
    for f in report.failed:
        print(f"  FAILED {f['document']}: field '{f['field']}': {f['reason']}", file=sys.stderr)


def cmd_ingest(args: argparse.Namespace) -> int:
    """``es-rag ingest``.

    Args:
        args: Parsed arguments.
    """
    from es_rag.ingest import IngestReport, ingest_documents, load_files
    from es_rag.wiring import build_backend, build_embedder

    settings = settings_from_args(args)
    report = IngestReport()
    docs = load_files(args.paths, tenant_id=args.tenant, acl=args.acl, report=report)
    on_cluster = uses_cluster(args)
    index_dir = args.index_dir or (None if on_cluster else DEFAULT_INDEX_DIR)
    backend = build_backend(
        settings, es_url=args.es, index_dir=index_dir, **(connection_kwargs(args) if on_cluster else {})
    )
    if on_cluster:
        backend.probe()  # a cluster that is down or refuses us fails here, before a model is loaded
    embedder = build_embedder(settings, show_progress=_progress())
    use_embedder = None if (on_cluster and settings.vectors is not VectorMode.CLIENT) else embedder
    from es_rag.chunking import make_chunker

    chunker = make_chunker(
        embedder.tokenizer(),
        strategy=args.strategy,
        max_tokens=min(settings.chunk_max_tokens, embedder.max_tokens),
        overlap=settings.chunk_overlap,
        contextual=args.contextual,
        parent_max_tokens=args.parent_max_tokens,
    )
    ingest_documents(
        docs,
        chunker=chunker,
        embedder=use_embedder,
        backend=backend,
        report=report,
        progress=_progress(),
        server_chunking=settings.vectors is VectorMode.SEMANTIC_TEXT,
    )
    if hasattr(backend, "save"):
        backend.save()
        print(f"embedded index: {index_dir}", file=sys.stderr)
    _print_report(report, args.json)
    return 1 if report.failed else 0


def _print_result(result: Any) -> None:
    from es_rag.pipeline import format_trace, summarize_hits

    print(f"\n=== query: {result.query}")
    print(f"status: {result.status}")
    print(f"gate decision: {result.status_basis or result.trace.paths.get('gate', '-')}")
    if result.no_sufficient_evidence:
        print("(the calibrated gate found no hit good enough to answer from: answer 'not found', do not guess)")
    if not result.hits:
        print("(no evidence selected)")
    for line in summarize_hits(result.hits):
        print(line)
    print(f"\n--- packed context ({result.context.tokens} tokens, {len(result.context.citations)} citations)")
    print(result.context.text.rstrip())
    print("\n--- citations")
    for c in result.context.citations:
        print(
            f"[{c.citation_id}] {c.source_id} v{c.source_version} § {' > '.join(c.heading_path) or '-'} "
            f"chars {c.start_offset}-{c.end_offset}"
        )
    print("\n--- trace")
    print(format_trace(result))


def cmd_search(args: argparse.Namespace) -> int:
    """``es-rag search``.

    Args:
        args: Parsed arguments.
    """
    from es_rag.filters import SearchFilter
    from es_rag.wiring import build_backend, build_embedder, build_pipeline

    settings = settings_from_args(args)
    flt = SearchFilter(args.tenant, tuple(args.acl))
    on_cluster = uses_cluster(args)
    index_dir: str | None = args.index_dir or (None if on_cluster else DEFAULT_INDEX_DIR)
    if index_dir is not None and not (Path(index_dir) / "meta.json").is_file():
        raise EsRagError(
            f"no embedded index in {index_dir}: run `es-rag ingest PATH --tenant T --index-dir {index_dir}` first"
        )
    if on_cluster:
        backend = build_backend(settings, es_url=args.es, **connection_kwargs(args))
        backend.probe()  # a cluster that is down or refuses us fails here, before a model is loaded
    else:
        backend = build_backend(settings, index_dir=index_dir)
    embedder = build_embedder(settings)
    result = build_pipeline(settings, backend, embedder).search(args.query, flt)
    if args.json:
        print(json.dumps(result.to_dict(), ensure_ascii=False, indent=2))
    else:
        _print_result(result)
    return 0


def cmd_explain(args: argparse.Namespace) -> int:
    """``es-rag explain``.

    Args:
        args: Parsed arguments.
    """
    from es_rag.es_request import render
    from es_rag.filters import SearchFilter
    from es_rag.versions.registry import registry_index

    settings = settings_from_args(args)
    # exactly what a search sends: the caller's filter plus the tenant's version-registry snapshot, read once per
    # call and inlined (es_rag.versions.registry); without a cluster no key is known to be hidden
    flt = SearchFilter(args.tenant, tuple(args.acl))
    backend = None
    if uses_cluster(args):
        backend = connect(args, settings)
        flt = backend.gated(flt)
        hidden = sorted(flt.versions.hidden) if flt.versions is not None else []
        gate_note = (
            f"version gate: {len(hidden)} hidden key(s) read from {registry_index(settings)}/_doc/{flt.tenant_id}"
        )
    else:
        gate_note = (
            f"version gate: a search reads {registry_index(settings)}/_doc/{flt.tenant_id} once and adds "
            '{"bool": {"must_not": [{"terms": {"version_key": [<hidden keys>]}}]}} to every retriever '
            "(none shown: no cluster; pass --es to read them)"
        )
    if args.no_vector:
        # A unit vector: valid for cosine (no zero magnitude) and dot_product (unit length) alike.
        vector: Any = [1.0] + [0.0] * (settings.vector_dims - 1)
    else:
        from es_rag.wiring import build_embedder

        vector = build_embedder(settings).embed_query(args.query).tolist()
    if args.template:
        vectors_param = backend is None or backend.probe().vectors_in_source_param is not False
        sections = [_template_section(args.query, vector, flt, settings, vectors_param=vectors_param)]
    else:
        vectors_param = True
        version: tuple[int, ...] | None = None
        paths: list[bool]
        if backend is not None:
            caps = backend.probe()
            vectors_param = caps.vectors_in_source_param is not False
            version = _version_of(caps.version)
            paths = [backend.fusion_path() == "native"]
        elif settings.fusion is FusionMode.AUTO:
            paths = [True, False]
        else:
            paths = [settings.fusion is FusionMode.NATIVE]
        sections = explain_sections(
            args.query, vector, flt, settings, paths=paths, vectors_param=vectors_param, version=version
        )
    sections[0] = ([gate_note, *sections[0][0]], sections[0][1])
    if args.format == "json":
        print(render([r for _, reqs in sections for r in reqs], "json"))
    else:
        blocks = ["".join(f"# {c}\n" for c in comments) + render(reqs, "console") for comments, reqs in sections]
        print("\n".join(blocks), end="")
    return 0


_CHANNEL_LABEL = {"bm25": "BM25", "dense": "kNN", "exact": "exact"}


def _version_of(number: str) -> tuple[int, ...] | None:
    """A probed version number as a tuple, None when unknown."""
    parts = tuple(int(p) for p in number.split("-")[0].split(".") if p.isdigit())
    return parts or None


def explain_sections(
    query: str,
    vector: Any,
    flt: Any,
    settings: Settings,
    *,
    paths: Sequence[bool],
    vectors_param: bool = True,
    version: tuple[int, ...] | None = None,
) -> list[tuple[list[str], list[Any]]]:
    """``(comment lines, requests)`` per fusion path ``explain`` prints, chosen as
    :meth:`~es_rag.elasticsearch.backend.ElasticsearchBackend.retrieve` chooses: a single channel or a
    client-only normaliser (``zscore``) never takes the native path.

    Args:
        query: The query.
        vector: The query vector.
        flt: Hard filter (with the version gate).
        settings: Fusion method, normaliser, weights, exact channel.
        paths: Native (True) and/or client (False), in print order.
        vectors_param: See :func:`es_rag.elasticsearch.bodies.source_spec`.
        version: The probed cluster version (weighted rrf, linear and l2_norm are version-gated), None if unknown.
    """
    from es_rag.elasticsearch.bodies import (
        EXACT_FIELDS,
        channel_plan,
        extract_identifiers,
        native_blocker,
        search_requests,
    )

    plan = channel_plan(query, vector, settings)
    notes: list[str] = []
    if "exact" in plan:
        notes.append(
            f"exact channel: identifiers {extract_identifiers(query)} as match_phrase on {', '.join(EXACT_FIELDS)}"
        )
    blocker = native_blocker(settings, version)
    if True in paths and (len(plan) < 2 or blocker):
        why = "one channel" if len(plan) < 2 else blocker
        notes.append(f"native fusion not used ({why}): client path only")
        paths = [False]
    if settings.channel_weights:
        given = ", ".join(f"{c}={w}" for c, w in settings.channel_weights.items())
        notes.append(f"channel weights: {given} (any other channel 1.0)")
    method = settings.fusion_method
    channels = " + ".join(_CHANNEL_LABEL[c] for c in plan)
    sections: list[tuple[list[str], list[Any]]] = []
    for native in paths:
        reqs = search_requests(query, vector, flt, settings, native=native, vectors_in_source_param=vectors_param)
        if native and method == "rrf":
            weighted = ", >= 9.2 for the weights" if settings.channel_weights else ""
            label = f"native fusion: rrf retriever (Enterprise/trial licence, Elasticsearch >= 8.16{weighted})"
        elif native:
            l2 = ", >= 9.1 for l2_norm" if settings.score_normalizer == "l2_norm" else ""
            label = (
                f"native fusion: linear retriever, normalizer {settings.score_normalizer} per child "
                f"(Enterprise/trial licence, Elasticsearch >= 8.18{l2})"
            )
        else:
            fused = "RRF" if method == "rrf" else f"linear fusion ({settings.score_normalizer})"
            label = f"client fusion: one _msearch ({channels}), fused by es_rag's {fused} (any licence)"
        sections.append(([*notes, label] if not sections else [label], reqs))
    return sections


def _template_section(
    query: str, vector: Any, flt: Any, settings: Settings, *, vectors_param: bool = True
) -> tuple[list[str], list[Any]]:
    """The ``_search/template`` call of the stored hybrid template, with what it does and does not do."""
    from es_rag.elasticsearch.bodies import extract_identifiers, search_template_id, search_template_request

    exact = " + exact" if settings.exact_channel == "auto" and extract_identifiers(query) else ""
    comments = [
        f"stored search template {search_template_id(settings)} (installed by es-rag setup): native rrf over "
        f"bm25 + dense{exact} with the filter in every child (Enterprise/trial licence)"
    ]
    if settings.fusion_method != "rrf" or settings.channel_weights:
        comments.append("the template fuses with unweighted rrf: --fusion-method/--channel-weights are not templated")
    return comments, [search_template_request(query, vector, flt, settings, vectors_in_source_param=vectors_param)]


def cmd_setup(args: argparse.Namespace) -> int:
    """``es-rag setup``.

    Args:
        args: Parsed arguments.
    """
    from es_rag.elasticsearch.assets import index_creation_requests, resolve_analyzer, setup_requests
    from es_rag.es_request import render

    settings = settings_from_args(args, keep_auto_analyzer=True)
    backend = connect(args, settings) if uses_cluster(args) else None
    if not args.dry_run and backend is None:
        raise EsRagError("setup needs --es URL (or --dry-run to print the requests)")
    # --analyzer auto: probe the cluster's plugins (read-only GETs), or without one take the no-plugin branch
    plugins = backend.probe().analysis_plugins if backend is not None else None
    choice = resolve_analyzer(settings.analyzer, plugins=plugins, language=args.language)
    note = f"analyzer {choice.analyzer.value}: {choice.reason}"
    settings = settings.replace(analyzer=choice.analyzer)
    if args.dry_run:
        reqs = setup_requests(settings) + ([] if args.no_create_indices else index_creation_requests(settings))
        if args.format == "console":
            print(f"# {note}")
            print(render(reqs, "console"), end="")
        else:
            print(f"es-rag setup: {note}", file=sys.stderr)
            print(render(reqs, "json"))
        return 0
    assert backend is not None
    backend.settings = settings
    print(note)
    for row in backend.setup(create_indices=not args.no_create_indices):
        print(f"{row['request']}: {row['acknowledged']}")
    return 0


def cmd_selftest(args: argparse.Namespace) -> int:
    """``es-rag selftest``.

    Args:
        args: Parsed arguments.
    """
    from es_rag.selftest import SELFTEST_PREFIX, cleanup, run_selftest, throwaway_settings

    if not uses_cluster(args):
        raise EsRagError("selftest needs --es URL (or --cloud-id): it checks a cluster")
    settings = settings_from_args(args, keep_auto_analyzer=True)
    if args.cleanup:
        if not args.cleanup.startswith(SELFTEST_PREFIX):
            raise ConfigError(f"--cleanup takes a {SELFTEST_PREFIX}* prefix, got {args.cleanup!r}")
        with connect(args, settings.replace(index_prefix=args.cleanup)) as backend:
            print(cleanup(backend))
        return 0
    with connect(args, throwaway_settings(settings)) as backend:
        report = run_selftest(backend, keep=args.keep, language=args.language)
    print(json.dumps(report.to_dict(), ensure_ascii=False, indent=2) if args.json else report.table())
    return 0 if report.ok else 1


def cmd_doctor(args: argparse.Namespace) -> int:
    """``es-rag doctor``.

    Args:
        args: Parsed arguments.
    """
    settings = settings_from_args(args, keep_auto_analyzer=uses_cluster(args))
    report: dict[str, Any]
    if uses_cluster(args):
        with connect(args, settings) as backend:
            report = backend.doctor(language=args.language)
    else:
        report = local_doctor(settings)
    if args.json:
        print(json.dumps(report, ensure_ascii=False, indent=2))
    else:
        _print_tree(report)
    return 0


def local_doctor(settings: Settings) -> dict[str, Any]:
    """Without a cluster: which models load here and which path each stage takes on the embedded backend.

    Args:
        settings: Settings.
    """
    from es_rag.cross_encoder.model import CrossEncoderReranker
    from es_rag.encoders.embedder import SentenceTransformerEmbedder
    from es_rag.errors import ModelLoadError

    out: dict[str, Any] = {"cluster": "none (embedded backend)"}
    emb = SentenceTransformerEmbedder(settings.embedding_model)
    try:
        emb.warm_up()
        out["embedding_model"] = {"name": emb.name, "version": emb.version, "dims": emb.dims, "status": "ok"}
    except ModelLoadError as exc:
        out["embedding_model"] = {"name": emb.name, "status": f"unavailable: {exc}"}
    if settings.reranker_model:
        rr = CrossEncoderReranker(settings.reranker_model)
        try:
            rr.warm_up()
            out["reranker"] = {"name": rr.name, "status": "ok"}
        except ModelLoadError as exc:
            out["reranker"] = {"name": rr.name, "status": f"unavailable -> fused order fallback: {exc}"}
    out["paths"] = {
        "bm25": "bm25s (embedded)",
        "knn": "exact numpy (embedded)",
        "fusion": "client-rrf",
        "rerank": out.get("reranker", {}).get("status", "disabled"),
        "select/pack": "python (mmr, per-source cap, token budget)",
    }
    return out


def _print_tree(obj: Any, indent: int = 0) -> None:
    pad = "  " * indent
    if isinstance(obj, dict):
        for k, v in obj.items():
            if isinstance(v, (dict, list)) and v:
                print(f"{pad}{k}:")
                _print_tree(v, indent + 1)
            else:
                print(f"{pad}{k}: {v}")
    elif isinstance(obj, list):
        for v in obj:
            print(f"{pad}- {v}")
    else:
        print(f"{pad}{obj}")


def cmd_chunk(args: argparse.Namespace) -> int:
    """``es-rag chunk``.

    Args:
        args: Parsed arguments.
    """
    from es_rag.chunking import make_chunker
    from es_rag.encoders.embedder import tokenizer_for
    from es_rag.ingest import IngestReport, chunk_documents, load_files

    settings = settings_from_args(args)
    tok = tokenizer_for(settings.embedding_model)
    chunker = make_chunker(
        tok,
        strategy=args.strategy,
        max_tokens=args.max_tokens or settings.chunk_max_tokens,
        overlap=settings.chunk_overlap if args.overlap is None else args.overlap,
        contextual=args.contextual,
        parent_max_tokens=args.parent_max_tokens,
    )
    report = IngestReport()
    docs = load_files(args.paths, tenant_id=args.tenant, acl=args.acl, report=report)
    children, parents = chunk_documents(docs, chunker, report)
    rows = []
    for c in [*parents, *children]:
        row = c.to_source(include_vector=False)
        row.update({"kind": c.kind, "source_path": c.source_path, "max_tokens": tok.max_tokens})
        rows.append(row)
    if args.json:
        print(json.dumps(rows, ensure_ascii=False, indent=2))
    else:
        for r in rows:
            print(
                f"{r['kind']:<6} {r['chunk_id'][:12]} {r['source_path']}:{r['start_offset']}-{r['end_offset']} "
                f"{r['token_count']:>4} tok  {' > '.join(r['heading_path'])}"
            )
    for f in report.failed:
        print(f"FAILED {f['document']}: field '{f['field']}': {f['reason']}", file=sys.stderr)
    for w in report.warnings:
        print(f"WARNING {w['document']}: field '{w['field']}': {w['reason']}", file=sys.stderr)
    return 1 if report.failed else 0


def cmd_delete_source(args: argparse.Namespace) -> int:
    """``es-rag delete-source``.

    Args:
        args: Parsed arguments.
    """
    from es_rag.embedded.backend import EmbeddedBackend
    from es_rag.ingest import delete_source
    from es_rag.wiring import build_backend

    settings = settings_from_args(args)
    on_cluster = uses_cluster(args)
    index_dir = args.index_dir or (None if on_cluster else DEFAULT_INDEX_DIR)
    if index_dir is not None and not (Path(index_dir) / "meta.json").is_file():
        raise EsRagError(f"no embedded index in {index_dir}")
    # the embedded store is opened with whatever vector size it holds: deleting needs no model
    backend = (
        build_backend(settings, es_url=args.es, **connection_kwargs(args)) if on_cluster else EmbeddedBackend(index_dir)
    )
    result = delete_source(backend, args.tenant, args.source_id)
    if hasattr(backend, "save"):
        backend.save()
    remaining = result["remaining"]
    if args.json:
        print(json.dumps({"source_id": args.source_id, "tenant_id": args.tenant, **result}, indent=2))
    else:
        print(
            f"deleted {result['deleted']} documents of {args.source_id} (tenant {args.tenant}); "
            f"remaining: {remaining['chunks']} chunks, {remaining['parents']} parents"
        )
        if any(remaining.values()):
            why = (
                f"{result['conflicts']} were written concurrently (version conflicts)"
                if result.get("conflicts")
                else "; ".join(result.get("failures") or []) or "see the counts"
            )
            print(
                f"es-rag delete-source: {sum(remaining.values())} documents remain ({why}); they stay hidden and "
                "are never served: run delete-source again",
                file=sys.stderr,
            )
    return 0 if not any(remaining.values()) else 1


def cmd_demo(args: argparse.Namespace) -> int:
    """``es-rag demo``.

    Args:
        args: Parsed arguments.
    """
    from es_rag.filters import SearchFilter
    from es_rag.ingest import IngestReport, ingest_documents
    from es_rag.wiring import SAMPLE_DIR, build_backend, build_chunker, build_embedder, build_pipeline, load_manifest

    settings = settings_from_args(args)
    tmp = None
    index_dir = args.index_dir
    if index_dir is None:
        tmp = tempfile.TemporaryDirectory(prefix="es-rag-demo-")
        index_dir = tmp.name
    try:
        report = IngestReport()
        docs, queries = load_manifest(SAMPLE_DIR, report)
        say = (lambda *a: print(*a, file=sys.stderr)) if args.json else print
        say(f"es-rag demo: {len(docs)} sample documents -> embedded index {index_dir}")
        embedder = build_embedder(settings, show_progress=_progress())
        say(f"embedding model: {embedder.version} ({embedder.dims} dims)")
        backend = build_backend(settings, index_dir=index_dir)
        ingest_documents(
            docs,
            chunker=build_chunker(settings, embedder),
            embedder=embedder,
            backend=backend,
            report=report,
            progress=_progress(),
        )
        backend.save()
        say(
            f"ingested: {report.sources} sources, {report.chunks} chunks, {report.parents} parents, "
            f"{len(report.failed)} failed"
        )
        pipeline = build_pipeline(settings, backend, embedder)
        results = []
        for q in queries:
            flt = SearchFilter(q["tenant_id"], tuple(q.get("acl") or ()))
            result = pipeline.search(q["query"], flt)
            results.append((q, result))
            if not args.json:
                print(f"\n##### tenant={flt.tenant_id} acl={list(flt.groups)}")
                _print_result(result)
                expected = set(q.get("expect_source_ids") or [])
                got = {h.source_id for h in result.hits}
                if expected:
                    print(f"expected source(s) {sorted(expected)}: {'found' if expected & got else 'NOT found'}")
                leaks = [h.chunk_id for h in result.candidates if h.tenant_id != flt.tenant_id]
                print(f"tenant isolation: {len(leaks)} candidates from other tenants")
        if args.json:
            print(json.dumps([{"case": q, **r.to_dict()} for q, r in results], ensure_ascii=False, indent=2))
        return 0
    finally:
        if tmp is not None:
            tmp.cleanup()


def cmd_eval(args: argparse.Namespace) -> int:
    """``es-rag eval``.

    Args:
        args: Parsed arguments.
    """
    from es_rag.evaluation.ladder import format_ladder, ladder
    from es_rag.evaluation.run import ChunkUnit, ablate, evaluate, format_ablation, format_report

    bm25 = _bm25_overrides(args)  # first: fills the options --bm25-protocol sets
    if uses_cluster(args) and args.index_prefix == Settings().index_prefix:
        args.index_prefix = EVAL_ES_PREFIX  # never write a benchmark corpus into the product's indices
    settings = settings_from_args(args, **bm25)
    common: dict[str, Any] = dict(
        split=args.split, settings=settings, cache_dir=args.index_dir, max_queries=args.max_queries, depth=args.depth
    )
    unit = ChunkUnit(args.unit, settings.chunk_max_tokens, settings.chunk_overlap)
    if args.ablate and unit.chunked:
        raise ConfigError(
            f"--unit {args.unit} with --ablate {args.ablate}: the ablations choose their own units "
            "(one-change runs whole documents, ladder its chunk steps); drop --unit"
        )
    if args.ablate and uses_cluster(args):
        raise ConfigError(
            "--ablate runs on the embedded backend only (an analyzer, BM25 or chunking change needs a new "
            "Elasticsearch index per variant); run `eval --es` once per set-up with its own --index-prefix"
        )
    if args.ablate == "ladder" and args.records:
        raise ConfigError("--records with --ablate ladder: run records are written per run; drop one of them")
    ablation: dict[str, Any] | None = None
    steps: dict[str, Any] | None = None
    if args.ablate == "ladder":
        steps = ladder(
            args.dataset,
            progress=_progress(),
            short_tokens=args.ladder_short_tokens,
            long_tokens=args.ladder_long_tokens,
            overlap=args.ladder_overlap,
            structure=args.ladder_structure,
            **common,
        )
        result = steps["results"]["4"]
    elif args.ablate:
        ablation = ablate(args.dataset, progress=_progress(), **common)
        result = ablation["results"]["base"]
    else:
        es_backend = None
        if uses_cluster(args):
            es_backend = connect(args, settings)
        result = evaluate(
            args.dataset,
            progress=_progress(),
            records_path=args.records,
            unit=unit,
            es_backend=es_backend,
            **common,
        )
    if args.report:
        from es_rag.evaluation.report import write_report

        result["report"] = str(write_report(result, args.report, ablation=ablation, ladder=steps))
    if args.json:
        out = dict(result)
        if ablation is not None:
            out["ablation"] = ablation["table"]
        if steps is not None:
            out["ladder"] = {k: v for k, v in steps.items() if k != "results"}
            out["ladder_runs"] = steps["results"]
        print(json.dumps(out, ensure_ascii=False, indent=2))
    else:
        print(format_report(result))
        if ablation is not None:
            print("\nablations (one change each; delta vs base):")
            print(format_ablation(ablation["table"]))
        if steps is not None:
            print("\nladder (one change per step; delta vs the previous step, or the step named by 'vs'):")
            print(format_ladder(steps["table"]))
            for note in steps["notes"]:
                print(f"note: {note}")
    return 0


def cmd_train_reranker(args: argparse.Namespace) -> int:
    """``es-rag train-reranker``.

    Args:
        args: Parsed arguments.
    """
    from es_rag.evaluation.train_reranker import TrainingConfig, train_reranker

    bm25 = _bm25_overrides(args)  # first: fills the options --bm25-protocol sets
    settings = settings_from_args(args, **bm25)
    config = TrainingConfig(
        base_model=args.base or settings.embedding_model,
        negatives_per_query=args.negatives,
        max_steps=args.max_steps,
        batch_size=args.batch_size,
        learning_rate=args.learning_rate,
        max_length=args.max_length,
        loss=args.loss,
        epochs=args.epochs,
    )
    report = train_reranker(
        args.dataset,
        args.out,
        split=args.split,
        settings=settings,
        config=config,
        cache_dir=args.index_dir,
        max_queries=args.max_queries,
        log=lambda line: print(line, file=sys.stderr, flush=True),
    )
    summary = report.to_dict()
    summary.pop("losses")
    print(json.dumps(summary, ensure_ascii=False, indent=2))
    return 0


COMMANDS = {
    "demo": cmd_demo,
    "ingest": cmd_ingest,
    "search": cmd_search,
    "explain": cmd_explain,
    "setup": cmd_setup,
    "doctor": cmd_doctor,
    "selftest": cmd_selftest,
    "chunk": cmd_chunk,
    "delete-source": cmd_delete_source,
    "eval": cmd_eval,
    "train-reranker": cmd_train_reranker,
}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``es-rag``.

    Args:
        argv: Arguments (default: ``sys.argv[1:]``).
    """
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    args = build_parser().parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except ClusterError as exc:
        print(f"es-rag {args.command}: error: {exc}", file=sys.stderr)
        if exc.response is not None and os.environ.get("ES_RAG_DEBUG"):
            print(json.dumps(exc.response, ensure_ascii=False, default=str)[:4000], file=sys.stderr)
        return 3
    except EsRagError as exc:
        print(f"es-rag {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"es-rag {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
