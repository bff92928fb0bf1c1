"""BM25 with and without language routing (docs/retrieval.md, "Languages"), on a BEIR dataset's train/dev split.

The BM25 channel of ``es-rag eval`` (one unit per document, the embedded backend, the plan's routed fields) without
the dense channel, so it needs no embedding model: each query runs :meth:`EmbeddedBackend.retrieve` with no vector,
and the same settings, ``--query-language`` and ``--bm25-fields`` decide the fields as in a search. Set-ups:

* ``base``: ``--query-language none``: the base fields (``--analyzer``, default standard);
* ``routed``: the default (``--query-language auto``): an English query searches ``title.en``/``text.en`` (english);
* ``base+routed``: both field sets in one ``multi_match`` (``--query-language none --bm25-fields`` listing both).

    nice -n 10 .venv/bin/python benchmarks/language_routing.py --dataset ../shared/eval/scifact --split train
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from es_rag.embedded.backend import EmbeddedBackend
from es_rag.evaluation.beir import load_beir
from es_rag.evaluation.metrics import metrics, run_from_ids
from es_rag.filters import SearchFilter
from es_rag.query import bm25_route
from es_rag.records import Chunk
from es_rag.settings import Settings

TENANT = "eval"


def setups(base: Settings) -> dict[str, Settings]:
    """The compared settings."""
    routed = [f for f in bm25_route("an english sentence about science", base).fields]
    return {
        "base": base.replace(query_language="none"),
        "routed": base,
        "base+routed": base.replace(
            query_language="none", bm25_fields=(*base.retrieve.bm25_fields, *(f for f in routed if "." in f))
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", required=True)
    parser.add_argument("--split", default="train")
    parser.add_argument("--max-queries", type=int, default=None)
    parser.add_argument("--depth", type=int, default=100)
    args = parser.parse_args()
    corpus, queries, qrels = load_beir(args.dataset, args.split)
    ids = list(queries)[: args.max_queries] if args.max_queries else list(queries)
    qrels = {q: qrels[q] for q in ids if q in qrels}
    backend = EmbeddedBackend(None, dims=1, analyzer=Settings().index.analyzer)
    chunks = [
        Chunk(
            chunk_id=d,
            source_id=d,
            source_version="1",
            parent_id=None,
            heading_path=(),
            start_offset=0,
            end_offset=len(doc["text"]),
            chunker_version="bench",
            tenant_id=TENANT,
            acl=("public",),
            title=doc["title"],
            text=doc["text"] or doc["title"] or " ",
            token_count=0,
            vector=np.ones(1, dtype=np.float32),
        )
        for d, doc in corpus.items()
    ]
    backend.index(chunks)
    flt = SearchFilter(TENANT)
    out = {}
    for name, settings in setups(Settings(rerank_model=None, candidate_k=args.depth)).items():
        t0 = time.perf_counter()
        run = {}
        languages: dict[str, int] = {}
        for q in ids:
            ret = backend.retrieve(queries[q], None, flt, settings)
            run[q] = run_from_ids([h.chunk_id for h in ret.channels["bm25"]])
            lang = str(bm25_route(queries[q], settings).language.code)
            languages[lang] = languages.get(lang, 0) + 1
        scores = metrics(qrels, run)
        out[name] = {
            "ndcg@10": scores["ndcg@10"],
            "recall@100": scores.get("recall@100"),
            "query_languages": languages,
            "fields": list(bm25_route(queries[ids[0]], settings).fields),
            "seconds": round(time.perf_counter() - t0, 1),
        }
        print(name, json.dumps(out[name]), flush=True)
    print(json.dumps({"dataset": args.dataset, "split": args.split, "queries": len(ids), "setups": out}, indent=1))


if __name__ == "__main__":
    main()
