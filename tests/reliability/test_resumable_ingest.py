"""Issue 31, item 3: an interrupted ingest keeps what its checkpoints switched, and the next run embeds only the rest;
an unchanged re-run embeds nothing -- on the embedded backend (reopened from its folder) and on the strict double."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from es_rag.chunking import make_chunker
from es_rag.embedded.backend import EmbeddedBackend
from es_rag.filters import SearchFilter
from es_rag.ingest import SourceDoc, ingest_documents
from es_rag.settings import Settings
from tests.support.corpus import DIMS, RandomEmbedder
from tests.support.es_cluster import cluster_backend

S = Settings(vector_dims=DIMS)


class CountingEmbedder(RandomEmbedder):
    """Counts the texts it embeds."""

    def __init__(self) -> None:
        self.texts: list[str] = []

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        self.texts.extend(texts)
        return super().embed_documents(texts)


def _docs(n: int = 8, changed: int | None = None) -> list[SourceDoc]:
    out = []
    for i in range(n):
        words = " ".join(f"topic{i} word{j}" for j in range(30))
        extra = " changed" if i == changed else ""
        out.append(
            SourceDoc(
                source_id=f"doc{i}", text=f"# Doc {i}\n\n{words}{extra}\n", tenant_id="acme", acl=("public",),
                source_version=f"v{i}{extra.strip()}",
            )
        )  # fmt: skip
    return out


def _interrupted(docs: Sequence[SourceDoc], after: int) -> Iterator[SourceDoc]:
    """The documents, then Ctrl-C once ``after`` of them were read."""
    for i, doc in enumerate(docs):
        if i == after:
            raise KeyboardInterrupt
        yield doc


@pytest.fixture(scope="module")
def chunker(minilm_tokenizer: Any) -> Any:
    return make_chunker(minilm_tokenizer, strategy="parent-child", max_tokens=24, overlap=4)


def _open(kind: str, folder: Path, state: dict[str, Any]) -> tuple[Any, Any]:
    """The backend (the embedded one reopened from its folder: only what was flushed survives) and a function
    returning the sources it serves."""
    if kind == "embedded":
        backend = EmbeddedBackend(folder, dims=DIMS)

        def served() -> set[str]:
            flt = backend.snapshot_versions(SearchFilter("acme"))
            return {d["source_id"] for d in backend._children.values() if flt.matches(d)}

        return backend, served
    if "cluster" not in state:
        state["backend"], _, state["cluster"] = cluster_backend(S)
    backend, cluster = state["backend"], state["cluster"]

    def served_es() -> set[str]:
        flt = backend.snapshot_versions(SearchFilter("acme"))
        return {d["source_id"] for d in cluster.docs(S.chunk_index).values() if flt.matches(d)}

    return backend, served_es


@pytest.mark.parametrize("kind", ["embedded", "elasticsearch"])
def test_an_interrupted_ingest_resumes_where_its_last_checkpoint_stopped(
    kind: str, chunker: Any, tmp_path: Path
) -> None:
    docs, state = _docs(), {}
    backend, served = _open(kind, tmp_path, state)
    first = CountingEmbedder()
    with pytest.raises(KeyboardInterrupt):  # a checkpoint after every batch; Ctrl-C while the 6th source is read
        ingest_documents(
            _interrupted(docs, 5), chunker=chunker, embedder=first, backend=backend, batch_size=4, queue_size=0,
            checkpoint_s=1e-9,
        )  # fmt: skip
    backend, served = _open(kind, tmp_path, state)
    kept = served()
    assert kept and kept < {f"doc{i}" for i in range(5)}, kept  # whole sources only, none after the interruption
    second = CountingEmbedder()
    report = ingest_documents(docs, chunker=chunker, embedder=second, backend=backend, batch_size=4, queue_size=0)
    assert sorted(report.unchanged) == sorted(kept)  # what the checkpoints switched is not embedded again
    assert report.failed == [] and {s["source_id"] for s in report.switched} == {d.source_id for d in docs} - kept
    embedded_again = {k for k in kept if any(f"topic{k[3:]} " in t for t in second.texts)}
    assert second.texts and embedded_again == set()
    if kind == "embedded":
        backend.flush()
        backend, served = _open(kind, tmp_path, state)
    assert served() == {d.source_id for d in docs}
    third = CountingEmbedder()  # an unchanged re-run embeds nothing; one changed source is embedded alone
    report = ingest_documents(_docs(changed=3), chunker=chunker, embedder=third, backend=backend, batch_size=4)
    assert sorted(report.unchanged) == sorted(f"doc{i}" for i in range(8) if i != 3)
    assert third.texts and all("topic3 " in t or "Doc 3" in t for t in third.texts)
    assert [s["source_id"] for s in report.switched] == ["doc3"] and report.switched[0]["retired"] == "v3"


def test_checkpoints_are_spaced_by_the_interval(chunker: Any, tmp_path: Path) -> None:
    """``checkpoint_s``: none before the interval has passed; some before the end when it is tiny (each is followed
    by a pause of at least ten times its cost, so how many depends on the machine)."""
    backend = EmbeddedBackend(tmp_path / "a", dims=DIMS)
    report = ingest_documents(
        _docs(), chunker=chunker, embedder=RandomEmbedder(), backend=backend, batch_size=4, queue_size=0,
        checkpoint_s=3600,
    )  # fmt: skip
    assert "checkpoints" not in report.extra and len(report.switched) == 8
    backend = EmbeddedBackend(tmp_path / "b", dims=DIMS)
    report = ingest_documents(
        _docs(), chunker=chunker, embedder=RandomEmbedder(), backend=backend, batch_size=4, queue_size=2,
        checkpoint_s=1e-9,
    )  # fmt: skip
    assert report.extra["checkpoints"] >= 1 and len(report.switched) == 8  # switched in the writer thread too
    assert sorted(s["source_id"] for s in report.switched) == [f"doc{i}" for i in range(8)]


def test_the_cli_says_what_an_interrupted_ingest_kept_and_how_to_resume(
    tiny_bi_encoder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 46, item 12: Ctrl-C printed only ``es-rag ingest: interrupted``."""
    from es_rag.cli import main
    from es_rag.cli.commands.ingest import interrupted_message
    from es_rag.ingest import sources
    from es_rag.ingest.report import IngestReport

    docs = tmp_path / "docs"
    docs.mkdir()
    for i in range(3):
        (docs / f"d{i}.md").write_text(f"# D{i}\n\nText of document {i}.\n")
    real = sources.read_source

    def ctrl_c_at_the_last(name: str, *args: Any, **kwargs: Any) -> Any:
        if name.endswith("d2.md"):
            raise KeyboardInterrupt
        return real(name, *args, **kwargs)

    monkeypatch.setattr(sources, "read_source", ctrl_c_at_the_last)
    model = ["--embedding-model", str(tiny_bi_encoder), "--vector-dims", "32"]
    code = main(["ingest", str(docs), "--tenant", "acme", "--index-dir", str(tmp_path / "idx"), *model])
    err = capsys.readouterr().err
    assert code == 130
    assert "es-rag ingest: interrupted: 0 sources kept in the embedded index" in err
    assert "Run the same command again to resume" in err
    report = IngestReport()
    report.switched = [{"source_id": "a"}, {"source_id": "b"}]
    report.unchanged = ["c"]
    assert interrupted_message(report, True).startswith("es-rag ingest: interrupted: 3 sources kept in Elasticsearch")
