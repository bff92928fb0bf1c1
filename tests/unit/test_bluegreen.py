"""The pieces of blue-green reindex (issue 19 item 8): generation names, the layout read from ``GET <names>/_alias``,
the swap body and its refusals, a swap that lost a race (``must_exist``), and the embedded pointer file."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import pytest

from es_rag.elasticsearch.aliases import (
    ROLES,
    Layout,
    generation_fingerprint,
    layout_request,
    new_generation,
    parse_layout,
    swap_request,
)
from es_rag.elasticsearch.assets import index_creation_requests
from es_rag.embedded.generations import (
    LEGACY,
    POINTER,
    current_generation,
    generation_dir,
    list_generations,
    live_directory,
    remove_generation,
    write_pointer,
)
from es_rag.errors import ClusterError, ConfigError
from es_rag.settings import Settings
from tests.support.double.client import strict_backend

S = Settings(analyzer="standard", vector_dims=8)


def test_generation_names_sort_by_age_and_name_the_configuration() -> None:
    when = datetime(2026, 12, 1, 6, 15, 2, tzinfo=timezone.utc)
    name = new_generation(S, when)
    assert name == f"20261201t061502-{generation_fingerprint(S)}"
    assert generation_fingerprint(S) != generation_fingerprint(S.replace(embedding_model="other/model"))
    assert generation_fingerprint(S) != generation_fingerprint(S.replace(chunk_max_tokens=128))
    assert generation_fingerprint(S) == generation_fingerprint(S.replace(rerank_k=20))  # not a document property
    assert S.replace(index_generation=name).chunk_index == f"es-rag-chunks-{name}"
    with pytest.raises(ConfigError, match="index_generation: 'Bad Name' is not a generation name"):
        Settings(index_generation="Bad Name")


def test_layout_reads_legacy_indices_generations_and_aliases() -> None:
    legacy = parse_layout({f"es-rag-{r}": {"aliases": {}} for r in ROLES} | {"es-rag-chunks-g1": {"aliases": {}}}, S)
    assert legacy.legacy == sorted(ROLES) and legacy.live_generation(S) == "legacy"
    assert legacy.generations == {"g1": ["chunks"]} and legacy.complete() == []
    aliased = parse_layout(
        {f"es-rag-{r}-{g}": {"aliases": {f"es-rag-{r}": {}} if g == "g2" else {}} for r in ROLES for g in ("g1", "g2")}
        | {"other-index": {"aliases": {"es-rag-chunks-x": {}}}},
        S,
    )
    assert aliased.live_generation(S) == "g2" and aliased.complete() == ["g1", "g2"] and aliased.legacy == []
    with pytest.raises(
        ConfigError, match=r"alias es-rag-chunks points at 2 indices \(es-rag-chunks-g1, es-rag-chunks-g2\)"
    ):
        parse_layout({f"es-rag-chunks-{g}": {"aliases": {"es-rag-chunks": {}}} for g in ("g1", "g2")}, S)
    assert layout_request(S).path == "es-rag-chunks*,es-rag-parents*,es-rag-versions*/_alias"


def test_swap_refusals() -> None:
    full = list(ROLES)
    layout = Layout(live={r: f"es-rag-{r}-g1" for r in ROLES}, generations={"g1": full, "g2": ["chunks"]})
    with pytest.raises(ConfigError, match=r"generation 'g2' is not complete .* complete generations: g1"):
        swap_request(S, layout, "g2")
    with pytest.raises(ConfigError, match="generation 'g1' is already live"):
        swap_request(S, layout, "g1")
    legacy = Layout(live={r: f"es-rag-{r}" for r in ROLES}, legacy=full, generations={"g1": full})
    with pytest.raises(ConfigError, match=r"are concrete indices .* Add --migrate"):
        swap_request(S, legacy, "g1")
    fresh = Layout(live={r: None for r in ROLES}, generations={"g1": full})
    assert swap_request(S, fresh, "g1").body == {
        "actions": [{"add": {"index": f"es-rag-{r}-g1", "alias": f"es-rag-{r}", "is_write_index": True}} for r in ROLES]
    }


def test_a_swap_that_lost_a_race_changes_nothing() -> None:
    """Two operators swap from the same layout: the second request's ``remove ... must_exist: true`` names an alias
    that moved, so Elasticsearch refuses it whole (``40_must_exist.yml``) and the first swap stands."""
    backend, _node, cluster = strict_backend(S)
    backend.setup(create_indices=False)
    for gen in ("g1", "g2", "g3"):
        for req in index_creation_requests(S.replace(index_generation=gen)):
            backend.send(req)
    backend.send(swap_request(S, parse_layout(backend.send(layout_request(S)), S), "g1"))
    seen = parse_layout(backend.send(layout_request(S)), S)  # both operators read this
    backend.send(swap_request(S, seen, "g2"))
    with pytest.raises(ClusterError, match=r"aliases \[es-rag-chunks\] missing") as info:
        backend.send(swap_request(S, seen, "g3"))
    assert info.value.status == 404
    assert {a: list(m) for a, m in cluster.aliases.items()} == {f"es-rag-{r}": [f"es-rag-{r}-g2"] for r in ROLES}


# ------------------------------------------------------------------------------------------------ embedded folder
def _index(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "meta.json").write_text("{}")
    (folder / "chunks.jsonl").write_text("")


def test_the_pointer_file(tmp_path: Path) -> None:
    root = tmp_path / "idx"
    _index(root)
    assert current_generation(root) is None and live_directory(root) == root
    with pytest.raises(ConfigError, match="holds no index"):
        write_pointer(root, "g1")  # never points at nothing
    _index(generation_dir(root, "g1"))
    write_pointer(root, "g1")
    assert (root / POINTER).read_text() == "g1\n" and not (root / (POINTER + ".tmp")).exists()
    assert live_directory(root) == root / "generations" / "g1"
    assert list_generations(root) == [LEGACY, "g1"]
    with pytest.raises(ConfigError, match="is live"):
        remove_generation(root, "g1")
    remove_generation(root, LEGACY)
    assert not (root / "meta.json").exists() and list_generations(root) == ["g1"]
    (root / POINTER).write_text("gone\n")
    with pytest.raises(ConfigError, match=r"names generation 'gone'.*es-rag reindex --status"):
        live_directory(root)


def test_a_second_build_within_the_same_second_still_sorts_after_the_first() -> None:
    """Generation names sort by age; two builds within one second sorted by fingerprint, and ``reindex --swap`` took
    the newer for the older ("no built generation newer than the live one")."""
    when = datetime(2026, 12, 1, 6, 15, 2, tzinfo=timezone.utc)
    first = new_generation(S.replace(embedding_model="zzz/model"), when)
    second = new_generation(S, when, existing=["legacy", first])
    assert second > first and second.startswith("20261201t061503-")
    assert new_generation(S, when, existing=["20201201t000000-abc"]).startswith("20261201t061502-")  # older: as is
