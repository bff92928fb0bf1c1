"""``es-rag tune`` on the tiny BEIR dataset: the test split is refused, the dev split is a seeded share of train,
trial 0 is the base settings measured like every trial, and the written profile reads back through ``--settings``
to the best trial's settings and score."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from es_rag.cli import main
from es_rag.errors import ConfigError
from es_rag.evaluation.run import evaluate
from es_rag.evaluation.tune import KNOBS, check_split, select_knobs, split_queries, tune
from es_rag.settings import Settings
from tests.support.beir import write_beir


@pytest.fixture(scope="module")
def beir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_beir(tmp_path_factory.mktemp("beir"))


@pytest.mark.parametrize("split", ["test", "TEST", "test-2024"])
def test_a_test_split_is_refused_with_the_reason(split: str) -> None:
    with pytest.raises(ConfigError, match="tune never reads a test split") as err:
        check_split(split)
    assert "es-rag eval --split test --settings FILE" in str(err.value)


def test_the_cli_refuses_test_before_reading_anything(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["tune", "--dataset", str(tmp_path / "missing"), "--split", "test"]) == 2
    assert "tune never reads a test split" in capsys.readouterr().err
    assert main(["tune", "--dataset", str(tmp_path), "--split", "validation"]) == 2
    assert "tune takes dev or train" in capsys.readouterr().err


def test_dev_is_a_seeded_share_of_train(beir: Path, tmp_path: Path) -> None:
    split, ids, described = split_queries(beir, "dev", fraction=0.5, seed=1)
    assert split == "train" and len(ids) == 3 and set(ids) < {f"tr{t}" for t in range(6)}
    assert split_queries(beir, "dev", fraction=0.5, seed=1)[1] == ids  # reproducible
    assert "0.5 of the train queries, seed 1 (3 of 6 queries)" in described
    assert split_queries(beir, "train")[1] == [f"tr{t}" for t in range(6)]
    # a dataset with its own dev qrels uses them whole
    (beir / "qrels" / "dev.tsv").write_text("query-id\tcorpus-id\tscore\ntr1\td10\t1\n")
    try:
        assert split_queries(beir, "dev")[:2] == ("dev", ["tr1"])
    finally:
        (beir / "qrels" / "dev.tsv").unlink()


def test_knobs_follow_the_stage_and_index_time_needs_the_flag() -> None:
    names = [k.name for k in select_knobs("hybrid")]
    assert names == ["bm25_fields", "bm25_tie_breaker", "rank_constant", "candidate_k", "bm25_weight"]
    assert [k.name for k in select_knobs("bm25")] == ["bm25_fields", "bm25_tie_breaker"]
    assert [k.name for k in select_knobs("bm25", index_time=True)] == [
        "bm25_fields", "bm25_tie_breaker", "bm25_k1", "bm25_b",
    ]  # fmt: skip
    assert [k.name for k in select_knobs("selection")][-1] == "mmr_lambda"
    with pytest.raises(ConfigError, match="no knob of the catalogue changes it"):
        select_knobs("dense")
    with pytest.raises(ConfigError, match="mmr_lambda cannot change stage hybrid"):
        select_knobs("hybrid", names=["mmr_lambda"])
    with pytest.raises(ConfigError, match="unknown bm25_k2"):
        select_knobs("hybrid", names=["bm25_k2"])
    assert all(k.index_time == (k.name in ("bm25_k1", "bm25_b")) for k in KNOBS)


def test_tune_measures_the_defaults_as_trial_0_and_the_profile_reproduces_the_best(
    beir: Path, tiny_bi_encoder: Path, tmp_path: Path
) -> None:
    base = Settings(embedding_model=str(tiny_bi_encoder), vector_dims=32, analyzer="english")
    knobs = select_knobs("hybrid")
    result = tune(beir, settings=base, split="train", stage="hybrid", trials=3, cache_dir=tmp_path, knobs=knobs)
    trials = result["trials"]
    assert sorted(r["trial"] for r in trials) == [0, 1, 2]
    assert [r["score"] for r in trials] == sorted((r["score"] for r in trials), reverse=True)
    # trial 0 is the base settings (reranker off), scored like eval scores them at the product's RRF window
    base_off = base.replace(rerank_model=None)
    plain = evaluate(beir, split="train", settings=base_off, cache_dir=tmp_path, depth=base.retrieve.candidate_k)
    zero = next(r for r in trials if r["trial"] == 0)
    assert zero["score"] == round(plain["stages"]["hybrid"]["ndcg@10"], 4) == result["defaults_score"]
    assert zero["params"]["rank_constant"] == 5 and zero["params"]["bm25_weight"] == 1.0
    assert result["best_score"] == trials[0]["score"] >= result["defaults_score"]

    # the CLI writes the profile; it reads back to the best trial's settings and score
    out = tmp_path / "es-rag.toml"
    argv = ["tune", "--dataset", str(beir), "--split", "train", "--stage", "hybrid", "--trials", "3",
            "--index-dir", str(tmp_path), "--out", str(out), "--bm25-protocol", "settings", "--json",
            "--embedding-model", str(tiny_bi_encoder), "--vector-dims", "32", "--analyzer", "english"]  # fmt: skip
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(argv) == 0
    printed = json.loads(buf.getvalue())

    def untimed(rows: list[dict]) -> list[dict]:  # type: ignore[type-arg]
        return [{k: v for k, v in r.items() if k != "seconds"} for r in rows]

    assert untimed(printed["trials"]) == untimed(result["trials"]) and printed["out"] == str(out)  # same seed
    text = out.read_text()
    assert text.startswith("# es-rag settings profile, written by es-rag tune")
    assert "split: train (6 queries) -- the test split was not read" in text
    assert "objective: ndcg@10 of stage hybrid, tpe sampler, seed 13, 3 trials" in text
    profile = Settings.from_file(out)
    best = result["best_settings"]
    assert profile.replace(rerank_model=None) == best
    assert profile.rerank.model == Settings().rerank.model  # the reranker tune switched off is not written
    again = evaluate(beir, split="train", settings=best, cache_dir=tmp_path, depth=profile.retrieve.candidate_k)
    assert round(again["stages"]["hybrid"]["ndcg@10"], 4) == result["best_score"]
    # and every command takes it
    rc = main(["eval", "--dataset", str(beir), "--split", "train", "--index-dir", str(tmp_path), "--settings",
               str(out), "--rerank-model", "none", "--depth", str(profile.retrieve.candidate_k), "--json"])  # fmt: skip
    assert rc == 0


def test_the_grid_sampler_walks_the_grid(beir: Path, tiny_bi_encoder: Path, tmp_path: Path) -> None:
    base = Settings(embedding_model=str(tiny_bi_encoder), vector_dims=32)
    (knob,) = select_knobs("hybrid", names=["rank_constant"])
    result = tune(beir, settings=base, split="train", stage="hybrid", knobs=[knob], trials=10, sampler="grid",
                  cache_dir=tmp_path)  # fmt: skip
    # the grid (5, 20, 60) holds the default 5: three trials, each value once, whatever the budget
    assert sorted(r["params"]["rank_constant"] for r in result["trials"]) == [5, 20, 60]
    assert next(r for r in result["trials"] if r["trial"] == 0)["params"] == {"rank_constant": 5}
