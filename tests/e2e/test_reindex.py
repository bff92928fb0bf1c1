"""``es-rag reindex`` end to end (issue 19 item 8, seed audit rows 19 and 48): the embedding model changes, a new
generation is built from the sources, evaluated, swapped in atomically, rolled back and cleaned up -- on the strict
double over HTTP (aliases as ``tests/double/test_alias_rules.py`` pins them) and on an embedded folder (pointer file).
Searches keep addressing the same names throughout; the embedding check refuses a query encoder of another model.

Two "models": the tiny bi-encoder and a copy of it in another folder, whose ``embedding_version`` (``local:<dir>``)
differs -- what es_rag records and compares, whatever the weights."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from es_rag.cli import main
from es_rag.embedded.generations import POINTER, current_generation
from tests.support.double.cluster import StrictCluster
from tests.support.double.http import serve

DOCS = {
    "alpha.md": "# Alpha\n\nPasswords are reset from the account page.\n",
    "beta.md": "# Beta\n\nThe version registry is switched atomically.\n",
}


@pytest.fixture(scope="module")
def models(tiny_bi_encoder: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    other = tmp_path_factory.mktemp("other") / "tiny-b"
    shutil.copytree(tiny_bi_encoder, other)
    return tiny_bi_encoder, other


@pytest.fixture
def docs(tmp_path: Path) -> Path:
    folder = tmp_path / "docs"
    folder.mkdir()
    for name, text in DOCS.items():
        (folder / name).write_text(text)
    return folder


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> Iterator[Any]:
    def run(*argv: str) -> tuple[int, str, str]:
        capsys.readouterr()
        code = main(list(argv))
        out = capsys.readouterr()
        return code, out.out, out.err

    yield run


OLD_VERSION = "local:st"
"""The ``embedding_version`` of the tiny bi-encoder (``tests/support/models_factory.py`` saves it under ``st/``)."""


def model(path: Path) -> list[str]:
    return ["--embedding-model", str(path), "--vector-dims", "32"]


def search_sources(cli: Any, target: list[str], encoder: Path, query: str = "reset passwords") -> list[str]:
    code, out, err = cli("search", query, "--tenant", "acme", "--json", *target, *model(encoder))
    assert code == 0, err
    return [h["source_id"] for h in json.loads(out)["hits"]]


# ------------------------------------------------------------------------------------------------ Elasticsearch
def test_blue_green_on_elasticsearch(cli: Any, docs: Path, models: tuple[Path, Path], tmp_path: Path) -> None:
    old, new = models
    cluster = StrictCluster()
    with serve(cluster) as url:
        es = ["--es", url]
        assert cli("setup", *es, "--vector-dims", "32")[0] == 0
        assert cli("ingest", str(docs), "--tenant", "acme", *es, *model(old))[0] == 0
        assert "alpha.md" in search_sources(cli, es, old)

        # the new query encoder is refused on the old index, naming both versions and the command
        code, _, err = cli("search", "reset passwords", "--tenant", "acme", *es, *model(new))
        assert code != 0 and "local:tiny-b" in err and "es-rag reindex" in err and "holds vectors of" in err
        # and so is an ingest that would mix the two models in one index
        code, _, err = cli("ingest", str(docs), "--tenant", "acme", *es, *model(new))
        assert code != 0 and "ingest refused" in err and "local:tiny-b" in err

        # concrete indices (the layout setup creates): refused before anything is built, with the way forward
        code, _, err = cli("reindex", str(docs), "--tenant", "acme", *es, *model(new))
        assert code != 0 and "--migrate" in err and "cannot be rolled back" in err
        assert not any("-chunks-" in n for n in cluster.indices)

        golden = tmp_path / "golden.jsonl"
        golden.write_text(json.dumps({"id": "q1", "question": "reset passwords", "gold": ["alpha.md"]}) + "\n")
        code, out, err = cli(
            "reindex", str(docs), "--tenant", "acme", "--migrate", "--queries", str(golden), "--json", *es, *model(new)
        )
        assert code == 0, err
        first = json.loads(out)
        gen1 = first["generation"]
        assert first["live_before"] == "legacy" and first["swapped"]
        assert first["evaluation"]["counts"]["new"]["chunks"] == 2
        assert first["evaluation"]["recall"]["new"] == 1.0
        # the old index holds another model's vectors: queried with BM25 only, and the report says so
        assert any("BM25 only" in n for n in first["evaluation"]["notes"])
        # the names are aliases now, each over the new generation's index, the legacy indices gone
        assert cluster.aliases == {
            f"es-rag-{r}": {f"es-rag-{r}-{gen1}": {"is_write_index": True}} for r in ("chunks", "parents", "versions")
        }
        assert "es-rag-chunks" not in cluster.indices
        # setup again over the aliases: the page fields (asset version 13) reach the generation's indices through them
        code, _, err = cli("setup", *es, "--vector-dims", "32")
        assert code == 0, err
        assert "page_start" in cluster.indices[f"es-rag-chunks-{gen1}"].mapping.fields
        # searches address the same names: the new encoder is served, the old one refused
        assert "alpha.md" in search_sources(cli, es, new)
        assert cli("search", "reset passwords", "--tenant", "acme", *es, *model(old))[0] != 0
        # ingest, sources and delete-source go through the aliases
        assert cli("ingest", str(docs), "--tenant", "globex", *es, *model(new))[0] == 0
        assert set(cluster.docs("es-rag-versions")) == {"acme", "globex"}

        # a second model change: build without swapping, then swap
        code, out, err = cli("reindex", str(docs), "--tenant", "acme", "--no-swap", "--json", *es, *model(old))
        assert code == 0, err
        gen2 = json.loads(out)["generation"]
        assert json.loads(out)["swapped"] is None and cluster.aliases["es-rag-chunks"] == {
            f"es-rag-chunks-{gen1}": {"is_write_index": True}
        }
        assert cli("reindex", "--swap", *es)[0] == 0
        assert list(cluster.aliases["es-rag-chunks"]) == [f"es-rag-chunks-{gen2}"]
        assert "alpha.md" in search_sources(cli, es, old)
        code, out, _ = cli("reindex", "--status", "--json", *es)
        # each generation says which model's vectors it holds
        assert json.loads(out) == {
            "live": gen2,
            "generations": [
                {
                    "generation": gen1,
                    "live": False,
                    "complete": True,
                    "embedding_versions": {"local:tiny-b": 4},
                },  # acme + globex
                {"generation": gen2, "live": True, "complete": True, "embedding_versions": {OLD_VERSION: 2}},
            ],
        }
        # doctor shows the live generation and the embedding check
        code, out, _ = cli("doctor", "--json", *es, "--embedding-model", str(new))
        index = json.loads(out)["index"]
        assert index["live_generation"] == gen2 and index["embedding_check"].startswith("MISMATCH")

        # rollback: one _aliases request back to gen1; the new encoder works again
        code, out, _ = cli("reindex", "--rollback", *es)
        assert code == 0 and gen1 in out
        assert list(cluster.aliases["es-rag-chunks"]) == [f"es-rag-chunks-{gen1}"]
        assert "alpha.md" in search_sources(cli, es, new)
        # nothing older than gen1 is left (the migration deleted the legacy indices)
        code, _, err = cli("reindex", "--rollback", *es)
        assert code != 0 and "roll back" in err

        # cleanup: gen2 is newer than the live one (built, not served): kept; swap forward and clean gen1 up
        assert "nothing to delete" in cli("reindex", "--cleanup", "--keep", "0", "--yes", *es)[1]
        assert cli("reindex", "--swap", *es)[0] == 0
        code, _, err = cli("reindex", "--cleanup", "--keep", "0", *es)  # stdin is not a terminal: asks for --yes
        assert code != 0 and "--yes" in err and f"es-rag-chunks-{gen1}" in cluster.indices
        code, out, _ = cli("reindex", "--cleanup", "--keep", "0", "--yes", *es)
        assert code == 0 and f"DELETE es-rag-chunks-{gen1},es-rag-parents-{gen1},es-rag-versions-{gen1}" in out
        assert sorted(cluster.indices) == [f"es-rag-{r}-{gen2}" for r in ("chunks", "parents", "versions")]


def test_a_search_notices_a_swap_by_another_process(
    cli: Any, docs: Path, models: tuple[Path, Path], tmp_path: Path
) -> None:
    """A long-lived client checked gen1 once; after another process swaps to a generation of another model, its next
    search sees hits from an index it has not checked (``_index``), checks again, and refuses."""
    from es_rag import RagClient

    old, new = models
    cluster = StrictCluster()
    with serve(cluster) as url:
        es = ["--es", url]
        assert cli("setup", *es, "--vector-dims", "32")[0] == 0
        assert cli("reindex", str(docs), "--tenant", "acme", "--migrate", *es, *model(old))[0] == 0
        with RagClient.from_url(url, embedding_model=str(old), vector_dims=32, rerank_model=None) as rag:
            assert rag.search("reset passwords", tenant="acme").hits
            assert cli("reindex", str(docs), "--tenant", "acme", *es, *model(new))[0] == 0
            with pytest.raises(Exception, match="local:tiny-b"):
                rag.search("reset passwords", tenant="acme")


# ------------------------------------------------------------------------------------------------ embedded
def test_blue_green_on_an_embedded_folder(cli: Any, docs: Path, models: tuple[Path, Path], tmp_path: Path) -> None:
    old, new = models
    idx = tmp_path / "idx"
    target = ["--index-dir", str(idx)]
    assert cli("ingest", str(docs), "--tenant", "acme", *target, *model(old))[0] == 0
    code, _, err = cli("search", "reset passwords", "--tenant", "acme", *target, *model(new))
    assert code != 0 and "local:tiny-b" in err and "es-rag reindex" in err

    code, out, err = cli("reindex", str(docs), "--tenant", "acme", "--json", *target, *model(new))
    assert code == 0, err
    gen = json.loads(out)["generation"]
    assert json.loads(out)["live_before"] == "legacy"
    assert current_generation(idx) == gen and (idx / "generations" / gen / "meta.json").is_file()
    assert (idx / "meta.json").is_file()  # the legacy index stays: the embedded swap deletes nothing
    assert "alpha.md" in search_sources(cli, target, new)
    assert cli("sources", "--tenant", "acme", *target)[0] == 0
    code, out, _ = cli("reindex", "--status", *target)
    assert code == 0 and out.splitlines() == [
        f"legacy  {OLD_VERSION} (2 chunks)",
        f"{gen}  local:tiny-b (2 chunks)  live",
        f"live: {gen}",
    ]

    code, out, _ = cli("reindex", "--rollback", *target)
    assert code == 0 and (idx / POINTER).read_text().strip() == "legacy"
    assert "alpha.md" in search_sources(cli, target, old)
    assert cli("reindex", "--swap", *target)[0] == 0 and current_generation(idx) == gen
    code, out, _ = cli("reindex", "--cleanup", "--keep", "0", "--yes", *target)
    assert code == 0 and not (idx / "meta.json").exists() and (idx / "generations" / gen).is_dir()
    assert "alpha.md" in search_sources(cli, target, new)
    code, _, err = cli("reindex", "--rollback", *target)
    assert code != 0 and "roll back" in err


def test_the_swap_gate() -> None:
    """A generation is not served when a document failed, it holds no chunks for the tenant, or its recall on the
    golden queries is below the live one's (``--force`` overrides in the CLI)."""
    from es_rag.ingest import IngestReport
    from es_rag.reindex import Evaluation, swap_refusal

    def ev(chunks: int, new: float | None = None, live: float | None = None) -> Evaluation:
        return Evaluation(counts={"new": {"chunks": chunks}}, recall={"new": new, "live": live})

    failed = IngestReport()
    failed.failed.append({"document": "a.md", "field": "text", "reason": "empty"})
    assert swap_refusal(failed, ev(3)) == "1 documents failed to ingest into the new generation"
    assert swap_refusal(IngestReport(), ev(0)) == "the new generation holds no chunks for this tenant"
    assert "below the live one's (0.8)" in str(swap_refusal(IngestReport(), ev(3, 0.5, 0.8)))
    assert swap_refusal(IngestReport(), ev(3, 0.8, 0.8)) is None
    assert swap_refusal(IngestReport(), ev(3)) is None


def test_a_new_installation_can_start_with_reindex(cli: Any, docs: Path, models: tuple[Path, Path]) -> None:
    """No ``setup`` and no concrete indices: the first build installs the assets, creates the generation and adds the
    aliases (nothing to remove, no ``--migrate`` needed); searches work through them at once."""
    old, _ = models
    cluster = StrictCluster()
    with serve(cluster) as url:
        es = ["--es", url]
        code, out, err = cli("reindex", str(docs), "--tenant", "acme", "--json", *es, *model(old))
        assert code == 0, err
        gen = json.loads(out)["generation"]
        assert json.loads(out)["live_before"] is None
        assert sorted(cluster.indices) == [f"es-rag-{r}-{gen}" for r in ("chunks", "parents", "versions")]
        assert set(cluster.aliases) == {"es-rag-chunks", "es-rag-parents", "es-rag-versions"}
        assert "alpha.md" in search_sources(cli, es, old)


def test_the_demo_golden_file_gates_a_reindex(cli: Any, models: tuple[Path, Path], tmp_path: Path) -> None:
    """Issue 32 item 3: one golden format. ``reindex --queries`` reads the file ``eval --golden`` and ``calibrate
    --golden`` read; the demo's sample folder (its manifest names the source ids its golden file judges) and its
    golden file gate a build: recall over the build tenant's questions, another tenant's left out and said so."""
    from es_rag.evaluation.golden import load_golden
    from es_rag.wiring import SAMPLE_DIR

    golden = SAMPLE_DIR / "golden.jsonl"
    questions = load_golden(golden)
    target = ["--index-dir", str(tmp_path / "idx")]
    argv = ["reindex", str(SAMPLE_DIR), "--tenant", "acme", "--queries", str(golden), "--json", *target]
    code, out, err = cli(*argv, *model(models[0]))
    assert code == 0, err
    report = json.loads(out)
    evaluation = report["evaluation"]
    acme = [q for q in questions if q.tenant in (None, "acme")]
    assert acme and len(evaluation["queries"]) == len(acme)
    assert evaluation["recall"]["new"] is not None and report["swapped"]
    # the sources are the manifest's, the ids the golden file judges: the new generation finds them
    found = {s for row in evaluation["queries"] for s in row["new"]}
    assert {g for q in acme for g in q.gold} & found
    # another tenant's build: every question is acme's, each left out and said so; a smoke query instead
    other = ["--index-dir", str(tmp_path / "other")]
    argv = ["reindex", str(SAMPLE_DIR), "--tenant", "globex", "--queries", str(golden), "--json", *other]
    code, out, err = cli(*argv, *model(models[0]))
    assert code == 0, err
    notes = json.loads(out)["evaluation"]["notes"]
    assert sum("left out" in n for n in notes) == len(questions) and any("smoke query" in n for n in notes)


def test_the_old_queries_format_is_refused_with_the_new_names(cli: Any, docs: Path, tmp_path: Path) -> None:
    old = tmp_path / "old.jsonl"
    old.write_text(json.dumps({"query": "reset passwords", "source_ids": ["alpha.md"]}) + "\n")
    code, _, err = cli("reindex", str(docs), "--tenant", "acme", "--queries", str(old), "--index-dir", str(tmp_path))
    assert code != 0 and "names it 'question'" in err and "'gold'" in err and f"{old}:1" in err
