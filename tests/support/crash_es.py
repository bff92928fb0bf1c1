"""Crash harness of an Elasticsearch ingest, against the strict double served over HTTP by the test's own process.

Run as ``python -m tests.support.crash_es URL JOB KILL_AT WHEN`` it ingests JOB's documents (:data:`JOBS`, no
model: :class:`tests.support.corpus.RandomEmbedder`) into the cluster at URL through the real client, counting every
write request (anything but a ``GET``/``HEAD`` and the read-only ``_search``/``_count``/``_msearch``). At write
request KILL_AT (1-based) the process dies with ``os._exit``, as SIGKILL would leave it: ``before`` the request is
sent (it never reaches the cluster), or ``after`` its answer came back (the cluster applied it, the client never knew).
KILL_AT 0 runs to the end and prints the number of write requests.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import elasticsearch.helpers  # noqa: F401  # imported once by the forker, not by each forked run

from es_rag.chunking import make_chunker
from es_rag.elasticsearch.backend import ElasticsearchBackend
from es_rag.ingest import SourceDoc, ingest_documents
from es_rag.settings import Settings
from tests.support.corpus import DIMS, RandomEmbedder, WordTokenizer

KILLED = 86
SETTINGS = Settings(vector_dims=DIMS, candidate_k=8, num_candidates=16, rerank_k=8, context_k=4, rerank_model=None)
GUIDE_V1 = "# Guide\n\n## Sync\n\nThe sync engine retries E1042.\n\n## Wipe\n\nRemote wipe needs a token.\n"
GUIDE_V2 = "# Guide\n\n## Sync\n\nThe sync engine retries E2077 twice.\n\n## Wipe\n\nRemote wipe needs a passcode.\n"
POLICY = "# Policy\n\nLegal hold keeps every message for seven years.\n"


def _doc(source: str, version: str, text: str) -> SourceDoc:
    return SourceDoc(source_id=source, text=text, tenant_id="acme", acl=("public",), source_version=version)


JOBS: dict[str, list[SourceDoc]] = {
    "a": [_doc("guide", "v1", GUIDE_V1), _doc("policy", "p1", POLICY)],
    "b": [_doc("guide", "v2", GUIDE_V2), _doc("policy", "p1", POLICY)],
}
"""``a``: the first ingest; ``b``: guide changes to v2, policy is unchanged."""


def run(url: str, job: str) -> None:
    """Ingest ``job`` into the cluster at ``url``."""
    backend = ElasticsearchBackend.connect(url, SETTINGS)
    chunker = make_chunker(WordTokenizer(), strategy="parent-child", max_tokens=8, overlap=0)
    ingest_documents(
        JOBS[job], chunker=chunker, embedder=RandomEmbedder(), backend=backend, queue_size=0, corpus_language="en"
    )


def _instrument(kill_at: int, when: str) -> Any:
    from elastic_transport import Transport

    real = Transport.perform_request
    count = {"n": 0}

    def perform(self: Any, method: str, target: str, *args: Any, **kwargs: Any) -> Any:
        path = target.split("?", 1)[0]
        read = method in ("GET", "HEAD") or path.endswith(("/_search", "/_count", "/_msearch"))
        if not read:
            count["n"] += 1
            if count["n"] == kill_at and when == "before":
                os._exit(KILLED)
        answer = real(self, method, target, *args, **kwargs)
        if not read and count["n"] == kill_at and when == "after":
            os._exit(KILLED)
        return answer

    Transport.perform_request = perform  # type: ignore[method-assign]
    return count


def main(argv: list[str]) -> int:
    url, job, kill_at, when = argv[0], argv[1], int(argv[2]), argv[3]
    count = _instrument(kill_at, when)
    run(url, job)
    print(json.dumps({"writes": count["n"]}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
