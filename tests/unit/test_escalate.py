"""The escalate stage (seed 002 §20 dynamic routing): each trigger, the timeout and failure fallbacks, the trace, the
off-by-default path, the async path, and a cross-encoder loaded by the project's own loading code."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from es_rag.cross_encoder.model import Calibration, ranking_text
from es_rag.embedded.backend import EmbeddedBackend
from es_rag.errors import ConfigError
from es_rag.filters import SearchFilter
from es_rag.pipeline import RagPipeline, SearchResult
from es_rag.records import Chunk, Hit
from es_rag.settings import Settings
from es_rag.stages.escalate import CallableScorer, CrossEncoderScorer, build_scorer, judge, version_conflicts
from tests.support.corpus import OverlapReranker
from tests.support.rerank_corpus import TEXTS, Embedder, rerank_backend

FLT = SearchFilter("acme")
BASE = Settings(vector_dims=3, candidate_k=4, num_candidates=4, rerank_k=4, context_k=4, rerank_cache_size=0)
# First-stage raw scores by word: "password" (c0) and "sync" (c1) nearly tie (sigmoid 0.8808 vs 0.8787).
TIE = {"password": 2.0, "sync": 1.98, "checksum": 0.5, "Retention": 0.1}
CLEAR = {"password": 4.0, "sync": 1.0, "checksum": 0.5, "Retention": 0.1}


class Reverse:
    """A fake stronger scorer: prefers the passage the first ranking put last; records every call."""

    name = "reverse-scorer"

    def __init__(self, delay: float = 0.0) -> None:
        self.calls: list[tuple[str, list[str]]] = []
        self.delay = delay
        self.release = threading.Event()
        """Set: a sleeping call returns at once (a test that timed the scorer out lets it go)."""

    def __call__(self, query: str, passages: Sequence[str]) -> list[float]:
        self.calls.append((query, list(passages)))
        if self.delay:
            self.release.wait(self.delay)
        return [float(i) for i in range(len(passages))]


def _pipeline(
    scores: dict[str, float] | None = TIE, scorer: Any = None, backend: EmbeddedBackend | None = None, **flat: Any
) -> RagPipeline:
    settings = BASE.replace(**flat)
    reranker = OverlapReranker(scores) if scores is not None else None
    return RagPipeline(
        backend or rerank_backend(),
        embedder=Embedder(),
        settings=settings,
        tokenizer=_Words(),
        reranker=reranker,  # type: ignore[arg-type]
        escalation_scorer=scorer,
    )


class _Words:
    name = "words"

    def count(self, text: str) -> int:
        return len(text.split())

    def encode(self, text: str) -> list[int]:
        return list(range(len(text.split())))

    def decode(self, ids: Sequence[int]) -> str:  # pragma: no cover - pack never truncates these short chunks
        return " ".join("w" for _ in ids)


def _stage(result: SearchResult) -> Any:
    return result.trace.record("escalate")


def _ids(hits: Sequence[Hit]) -> list[str]:
    return [h.chunk_id for h in hits]


# -- off by default ---------------------------------------------------------------------------------


def test_off_by_default_no_stage_and_the_same_result() -> None:
    assert Settings().escalate.model is None
    plain = _pipeline().search("password", FLT)
    assert _stage(plain) is None and "escalate" not in plain.trace.paths
    assert _ids(plain.candidates) == ["c0", "c1", "c2", "c3"]
    assert [s.name for s in plain.trace.stages][4:6] == ["rerank", "gate"]


def test_no_trigger_fired_leaves_the_ranking_and_does_not_call_the_scorer() -> None:
    scorer = Reverse()
    result = _pipeline(CLEAR, scorer).search("password", FLT)
    st = _stage(result)
    assert st is not None and st.info["fired"] == [] and st.info["escalated"] is False
    assert st.info["triggers"]["tie"]["fired"] is False and st.info["triggers"]["tie"]["gap"] > 0.05
    assert scorer.calls == [] and _ids(result.candidates) == ["c0", "c1", "c2", "c3"]
    assert result.trace.paths["escalate"] == "not escalated: no trigger fired (tie, conflict)"


# -- triggers ---------------------------------------------------------------------------------------


def test_tie_escalates_and_the_trace_has_old_and_new_order() -> None:
    scorer = Reverse()
    pipe = _pipeline(TIE, scorer, escalate_top_n=3)
    first = pipe.rerank_stage.run("password", [])  # nothing to rerank: untouched
    assert first.hits == []
    result = pipe.search("password", FLT)
    st = _stage(result)
    assert st.info["fired"] == ["tie"] and st.info["escalated"] is True and st.info["changed"] is True
    assert st.info["scorer"] == "reverse-scorer" and st.info["timed_out"] is False and st.info["failed"] is None
    assert st.info["ms"] >= 0 and st.info["top_n"] == 3
    assert st.info["old_order"] == ["c0", "c1", "c2"] and st.info["new_order"] == ["c2", "c1", "c0"]
    assert [(r["id"], r["old_rank"], r["new_rank"]) for r in st.info["rows"]] == [
        ("c2", 3, 1),
        ("c1", 2, 2),
        ("c0", 1, 3),
    ]
    assert result.trace.paths["escalate"] == "escalated (tie) to reverse-scorer: order changed"
    # the head is re-ordered, the tail (beyond top_n) untouched
    assert _ids(result.candidates) == ["c2", "c1", "c0", "c3"]
    # the scorer read each hit's ranking text, in the first ranking's order
    (query, passages) = scorer.calls[0]
    assert query == "password" and passages[0] == "".join(ranking_text(_hit(0)))
    # the first ranking's scores move by position: the list stays sorted on the gate's scale
    cal = [h.calibrated_score for h in result.candidates]
    assert cal == sorted(cal, reverse=True)
    assert result.candidates[0].rerank_score == 2.0 and result.candidates[0].final_score == 2.0
    own = {r["id"]: r["first"] for r in st.info["rows"]}
    assert own["c2"] == pytest.approx(1 / (1 + np.exp(-0.5)))  # each hit's own first-stage score is in the trace


def _hit(i: int) -> Hit:
    return Hit(
        chunk_id=f"c{i}",
        source_id=f"s{i}",
        source_version="v1",
        text=TEXTS[i],
        tenant_id="acme",
        title=f"Doc {i}",
        heading_path=("Doc",),
    )


def test_low_top1_fires_below_the_configured_score_only() -> None:
    low = _pipeline(CLEAR, Reverse(), escalate_on="low_top1", escalate_min_top1=0.99).search("password", FLT)
    assert _stage(low).info["fired"] == ["low_top1"]
    row = _stage(low).info["triggers"]["low_top1"]
    assert row["top1"] == pytest.approx(1 / (1 + np.exp(-4.0)), abs=1e-6) and row["min_top1"] == 0.99
    high = _pipeline(CLEAR, Reverse(), escalate_on="low_top1", escalate_min_top1=0.5).search("password", FLT)
    assert _stage(high).info["fired"] == [] and _stage(high).info["triggers"]["low_top1"]["fired"] is False


def _versioned_backend() -> EmbeddedBackend:
    """Source ``policy`` at two versions (chunks written without the registry, as another tool would) and one other
    source."""
    be = EmbeddedBackend(None, dims=3)
    rows = [
        ("p1", "policy", "2025", "Refunds within 30 days of purchase."),
        ("p2", "policy", "2026", "Refunds within 60 days of purchase."),
        ("o1", "other", "v1", "Refunds for gift cards are not possible."),
    ]
    be.index(
        [
            Chunk(
                chunk_id=cid,
                source_id=src,
                source_version=ver,
                parent_id=None,
                heading_path=("Policy",),
                start_offset=0,
                end_offset=len(text),
                chunker_version="t",
                tenant_id="acme",
                acl=("public",),
                title=src,
                text=text,
                token_count=8,
                vector=np.asarray([1.0, i / 3, 0.5], dtype=np.float32),
            )
            for i, (cid, src, ver, text) in enumerate(rows)
        ]
    )
    return be


def test_conflicting_versions_of_one_source_escalate() -> None:
    scores = {"30 days": 5.0, "gift": 1.0, "60 days": 0.0}  # clear margin: only the conflict fires
    result = _pipeline(scores, Reverse(), backend=_versioned_backend(), candidate_k=3, rerank_k=3, context_k=3).search(
        "refunds", FLT
    )
    st = _stage(result)
    assert st.info["fired"] == ["conflict"]
    assert st.info["triggers"]["conflict"]["sources"] == {"policy": ["2025", "2026"]}
    assert st.info["triggers"]["tie"]["fired"] is False
    assert _ids(result.candidates) == ["p2", "o1", "p1"]


def test_version_conflicts_ignore_missing_versions_and_other_tenants() -> None:
    a = _hit(0).replace(source_id="s", source_version="1")
    assert version_conflicts([a, a.replace(chunk_id="x", source_version=None)]) == {}
    assert version_conflicts([a, a.replace(chunk_id="x", tenant_id="other", source_version="2")]) == {}
    assert version_conflicts([a, a.replace(chunk_id="x", source_version="2")]) == {"s": ["1", "2"]}


def test_fused_order_judges_only_conflict_and_always() -> None:
    # no reranker: the tie cannot be judged on RRF scores, "always" still escalates, fused scores move by position
    result = _pipeline(None, Reverse(), escalate_on="tie,always").search("password", FLT)
    st = _stage(result)
    assert st.info["triggers"]["tie"] == {
        "fired": False,
        "why": "not judged: the fused order carries no relevance scores",
    }
    assert st.info["fired"] == ["always"] and st.info["escalated"] is True
    fused = [h.fused_score for h in result.candidates]
    assert fused == sorted(fused, reverse=True)
    assert result.trace.paths["gate"].startswith("undecided")


def test_judge_without_scores_for_a_single_hit() -> None:
    s = BASE.replace(escalate_on="tie,low_top1", escalate_min_top1=0.5).escalate
    fired, record = judge([_hit(0)], [0.9], s)
    assert fired == [] and record["tie"] == {"fired": False, "gap": None, "margin": 0.05}


# -- timeout, failure, fallback ---------------------------------------------------------------------


def test_slow_scorer_times_out_and_the_first_ranking_is_kept() -> None:
    scorer = Reverse(delay=60.0)  # far past the timeout: only a search that waited for it takes a minute
    pipe = _pipeline(TIE, scorer, escalate_timeout=0.05)
    start = time.perf_counter()
    result = pipe.search("password", FLT)
    elapsed = time.perf_counter() - start
    scorer.release.set()
    assert elapsed < 30  # the search did not wait for the scorer (issue 46, item 14: no tight limit under load)
    st = _stage(result)
    assert st.info["timed_out"] is True and st.info["escalated"] is False and st.info["fired"] == ["tie"]
    assert 40 <= st.info["ms"] < 900
    assert result.trace.paths["escalate"] == (
        "fallback: first ranking kept (reverse-scorer timed out after 0.05s; fired: tie)"
    )
    assert _ids(result.candidates) == ["c0", "c1", "c2", "c3"]
    assert result.candidates[0].rerank_score == 2.0
    pipe.close()


def test_raising_scorer_falls_back_with_the_error() -> None:
    def boom(query: str, passages: Sequence[str]) -> list[float]:
        raise RuntimeError("llm endpoint down")

    result = _pipeline(TIE, boom).search("password", FLT)
    st = _stage(result)
    assert st.info["failed"] == "RuntimeError: llm endpoint down" and st.info["timed_out"] is False
    assert "test_raising_scorer_falls_back_with_the_error.<locals>.boom failed" in result.trace.paths["escalate"]
    assert _ids(result.candidates) == ["c0", "c1", "c2", "c3"]


@pytest.mark.parametrize(
    ("returned", "why"),
    [
        ([1.0], "returned 1 scores for 4 passages"),
        ([1.0, float("nan"), 0.0, 0.0], "returned a score that is not a finite number at position 1: nan"),
        (["a", 1.0, 0.0, 0.0], "returned a score that is not a finite number at position 0: 'a'"),
    ],
)
def test_bad_scores_fall_back(returned: list[Any], why: str) -> None:
    result = _pipeline(TIE, lambda q, p: returned).search("password", FLT)
    assert _stage(result).info["failed"] == why
    assert _ids(result.candidates) == ["c0", "c1", "c2", "c3"]


def test_numpy_scores_are_accepted() -> None:
    result = _pipeline(TIE, lambda q, p: np.arange(len(p), dtype=np.float32)).search("password", FLT)
    assert _stage(result).info["escalated"] is True and _ids(result.candidates) == ["c3", "c2", "c1", "c0"]


# -- async ------------------------------------------------------------------------------------------


def test_asearch_escalates_without_blocking_the_loop() -> None:
    pipe = _pipeline(TIE, Reverse(delay=0.3), escalate_timeout=5.0)
    sync = pipe.search("password", FLT)

    async def main() -> tuple[SearchResult, int]:
        ticks = 0
        done = asyncio.Event()

        async def ticker() -> None:
            nonlocal ticks
            while not done.is_set():
                ticks += 1
                await asyncio.sleep(0.01)

        task = asyncio.create_task(ticker())
        result = await pipe.asearch("password", FLT)
        done.set()
        await task
        return result, ticks

    result, ticks = asyncio.run(main())
    assert ticks >= 10  # the loop ran while the scorer slept 0.3 s
    assert _ids(result.candidates) == _ids(sync.candidates) == ["c3", "c2", "c1", "c0"]
    assert _stage(result).info["new_order"] == _stage(sync).info["new_order"]


def test_asearch_timeout_falls_back() -> None:
    scorer = Reverse(delay=60.0)
    pipe = _pipeline(TIE, scorer, escalate_timeout=0.05)
    result = asyncio.run(pipe.asearch("password", FLT))
    scorer.release.set()
    assert _stage(result).info["timed_out"] is True and _ids(result.candidates) == ["c0", "c1", "c2", "c3"]


# -- a cross-encoder as the stronger scorer ---------------------------------------------------------


def test_escalate_model_loads_a_cross_encoder(tiny_cross_encoder: Path) -> None:
    settings = BASE.replace(escalate_model=str(tiny_cross_encoder), escalate_on="always")
    scorer = build_scorer(settings)
    assert isinstance(scorer, CrossEncoderScorer) and scorer.reranker.name == str(tiny_cross_encoder)
    pipe = _pipeline(TIE, None, escalate_model=str(tiny_cross_encoder), escalate_on="always")
    pipe.warm_up()
    result = pipe.search("password", FLT)
    st = _stage(result)
    assert st.info["escalated"] is True and st.info["scorer"] == f"cross-encoder {tiny_cross_encoder}"
    assert len(st.info["rows"]) == 4 and all(np.isfinite(r["escalate"]) for r in st.info["rows"])


def test_unloadable_escalation_model_falls_back(tmp_path: Path) -> None:
    missing = tmp_path / "no-model"
    missing.mkdir()
    result = _pipeline(TIE, None, escalate_model=str(missing)).search("password", FLT)
    st = _stage(result)
    assert st.info["escalated"] is False and "escalation scorer unavailable" in result.trace.paths["escalate"]
    assert _ids(result.candidates) == ["c0", "c1", "c2", "c3"]


def test_a_given_callable_wins_over_the_model_setting(tiny_cross_encoder: Path) -> None:
    scorer = build_scorer(BASE.replace(escalate_model=str(tiny_cross_encoder)), Reverse())
    assert isinstance(scorer, CallableScorer) and scorer.name == "reverse-scorer"
    with pytest.raises(TypeError, match="callable"):
        CallableScorer(42)  # type: ignore[arg-type]


# -- settings ---------------------------------------------------------------------------------------


def test_settings_validate_triggers() -> None:
    assert Settings(escalate_on="low_top1, TIE", escalate_min_top1=0.4).escalate.on == ("low_top1", "tie")
    assert Settings(escalate_on=["conflict"]).escalate.on == ("conflict",)
    assert Settings(escalate_model="none").escalate.model is None
    with pytest.raises(ConfigError, match="escalate_on: unknown trigger 'ties'; valid: low_top1, tie, conflict"):
        Settings(escalate_on="ties")
    with pytest.raises(ConfigError, match="escalate_on low_top1: needs escalate_min_top1"):
        Settings(escalate_on="low_top1")
    with pytest.raises(ConfigError, match="escalate_on: at least one trigger"):
        Settings(escalate_on="")
    with pytest.raises(ConfigError, match="escalate_top_n: must be an integer >= 2"):
        Settings(escalate_top_n=1)
    with pytest.raises(ConfigError, match="escalate_timeout"):
        Settings(escalate_timeout=0)


def test_settings_file_escalate_table(tmp_path: Path) -> None:
    path = tmp_path / "s.toml"
    path.write_text('[escalate]\nescalate_model = "m"\nescalate_on = ["tie", "conflict"]\nescalate_timeout = "off"\n')
    s = Settings.from_file(path)
    assert s.escalate.model == "m" and s.escalate.on == ("tie", "conflict") and s.escalate.timeout is None


def test_calibration_none_judges_raw_scores() -> None:
    from es_rag.stages.escalate import gate_scores

    h = _hit(0).replace(rerank_score=3.0, calibrated_score=None)
    assert gate_scores([h], reranked=True, calibration=Calibration(method="none")) == [3.0]
    assert gate_scores([h], reranked=False, calibration=Calibration(method="none")) is None


def test_calibration_never_escalates() -> None:
    from es_rag.evaluation.calibrate import calibration_settings

    assert calibration_settings(Settings(escalate_model="big"), "m").escalate.model is None


def test_rag_client_takes_an_escalation_scorer(tiny_bi_encoder: Path) -> None:
    from es_rag import RagClient
    from tests.support.apps import ACME_SUPPORT, tiny_settings

    scorer = Reverse()
    with RagClient.open(None, tiny_settings(tiny_bi_encoder), escalation_scorer=scorer, escalate_on="always") as rag:
        rag.ingest_texts(ACME_SUPPORT, tenant="acme", acl="support")
        result = rag.search("reset the password", tenant="acme", acl="support")
        again = asyncio.run(rag.asearch("reset the password", tenant="acme", acl="support"))
    st = _stage(result)
    assert st.info["escalated"] is True and st.info["scorer"] == "reverse-scorer" and len(scorer.calls) == 2
    assert _ids(result.candidates) == _ids(again.candidates) == st.info["new_order"] + _ids(result.candidates)[20:]
