"""Training groups for a listwise cross-encoder, mined with es_rag's own retrieval, and the within-article measure.

A group is one question, the passage that answers it, and hard negatives: the other passages of the same article
(the ones es_rag's retrieval ranks high first) and passages of other articles that es_rag's search pipeline ranks
high for the question (:func:`~es_rag.evaluation.train_reranker.pipeline_first_stage`: BM25 + dense, fused as
``es-rag search`` fuses them). Passages held apart for measurement never become negatives.

:func:`within_article` is the measure the reranker is chosen by: for each question, the model scores every passage
of the question's article; top-1 is the share of questions whose answer passage scores highest (chance is
1 / passages per article).
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from es_rag.errors import InputError
from es_rag.evaluation.passages import PassageSet, Question

Scorer = Callable[[Sequence[tuple[str, str]]], list[float]]
"""Scores ``(question, passage)`` pairs, one raw score each."""


@dataclass(frozen=True)
class Group:
    """One question, its answer passage first, then its hard negatives, and where each negative came from.

    Args:
        qid: Question id.
        query: Question text.
        passages: Positive first, then the negatives.
        origins: ``same-article@R`` / ``other-article@R`` (R: rank in the fused list, 0 when not in it) per negative.
    """

    qid: str
    query: str
    passages: tuple[str, ...]
    origins: tuple[str, ...]

    def to_json(self) -> str:
        """One JSONL line."""
        return json.dumps(
            {"qid": self.qid, "query": self.query, "passages": list(self.passages), "origins": list(self.origins)},
            ensure_ascii=False,
        )

    @classmethod
    def from_json(cls, line: str) -> Group:
        """Read a :meth:`to_json` line."""
        row = json.loads(line)
        return cls(row["qid"], row["query"], tuple(row["passages"]), tuple(row["origins"]))


def passage_key(article: int, passage: int) -> str:
    """The id a passage is indexed under for mining."""
    return f"a{article}p{passage}"


def _parse_key(key: str) -> tuple[int, int]:
    a, p = key[1:].split("p")
    return int(a), int(p)


def pick_negatives(
    question: Question,
    fused: Sequence[tuple[int, int]],
    article_size: int,
    *,
    negatives: int,
    forbidden: set[tuple[int, int]],
    rng: random.Random,
) -> list[tuple[int, int, str]]:
    """The hard negatives of one question: ``(article, passage, origin)``.

    Two thirds (rounded up) come from the question's own article, those es_rag ranks highest first, then the rest of
    the article in seeded random order; the others are the best-ranked passages of other articles. When one kind runs
    short the other fills in.

    Args:
        question: The question.
        fused: Its fused candidates, best first, as ``(article, passage)``.
        article_size: Passages in the question's article.
        negatives: How many.
        forbidden: Passages that must not be used (held apart for measurement).
        rng: Seeded generator for the unranked rest of the article.
    """
    answer = (question.article, question.passage)
    rank = {key: r for r, key in enumerate(fused, start=1)}
    same_ranked = [k for k in fused if k[0] == question.article and k != answer and k not in forbidden]
    rest = [
        (question.article, p)
        for p in range(article_size)
        if (question.article, p) not in rank and p != question.passage and (question.article, p) not in forbidden
    ]
    rng.shuffle(rest)
    same = same_ranked + rest
    other = [k for k in fused if k[0] != question.article and k not in forbidden]
    n_same = min(len(same), negatives - min(len(other), negatives // 3))
    chosen = same[:n_same] + other[: negatives - n_same]
    return [(a, p, f"{'same' if a == question.article else 'other'}-article@{rank.get((a, p), 0)}") for a, p in chosen]


def mine_groups(
    data: PassageSet,
    questions: Sequence[Question],
    first_stage: Callable[[str], list[str]] | None,
    *,
    negatives: int,
    depth: int,
    forbidden: Iterable[tuple[int, int]] = (),
    seed: int = 13,
    progress: bool = False,
) -> list[Group]:
    """One :class:`Group` per question with at least one negative.

    Args:
        data: The articles.
        questions: The training questions.
        first_stage: A question's fused passage keys (:func:`passage_key`), best first; None: negatives from the
            question's article only, in seeded random order.
        negatives: Negatives per question.
        depth: Fused candidates looked at.
        forbidden: Passages never used as negatives.
        seed: Seed of the random order of unranked passages.
        progress: Show a progress bar.
    """
    from es_rag.progress import tqdm

    banned = set(forbidden)
    rng = random.Random(seed)
    groups = []
    import sys

    for q in tqdm(
        questions,
        desc="mining negatives",
        unit="q",
        disable=not progress,
        mininterval=0.1 if sys.stderr.isatty() else 30.0,
    ):
        fused = [_parse_key(k) for k in first_stage(q.text)[:depth]] if first_stage is not None else []
        picked = pick_negatives(
            q, fused, len(data.articles[q.article].passages), negatives=negatives, forbidden=banned, rng=rng
        )
        if not picked:
            continue
        passages = (
            data.passage(q),
            *(data.passage(q, p) if a == q.article else _text(data, a, p) for a, p, _ in picked),
        )
        groups.append(Group(q.qid, q.text, passages, tuple(o for _, _, o in picked)))
    return groups


def _text(data: PassageSet, article: int, passage: int) -> str:
    from es_rag.evaluation.passages import passage_text

    return passage_text(data.articles[article], passage)


def channel_first_stage(index: Any, settings: Any, tenant: str, depth: int) -> Callable[[str], list[str]]:
    """A question's passage keys as es_rag's BM25 and dense (kNN) channels rank them, fused by its reciprocal rank
    fusion (the client-side fusion ``es-rag search`` runs, with the settings' rank constant), without the rest of the
    search pipeline (dedup, packing), which mining does not need and which costs 10x the time.

    Args:
        index: An :class:`~es_rag.evaluation.index.EvalIndex` of :func:`mining_corpus`.
        settings: Gives the rank constant.
        tenant: Tenant the corpus was indexed under.
        depth: Candidates per channel.
    """
    from es_rag.filters import SearchFilter
    from es_rag.stages.fusion import reciprocal_rank_fusion

    flt = SearchFilter(tenant)

    def fused(text: str) -> list[str]:
        bm25 = [h.chunk_id for h in index.backend.bm25(text, flt, depth)]
        dense = [h.chunk_id for h in index.backend.knn(index.embedder.embed_query(text), flt, depth)]
        return [f.id for f in reciprocal_rank_fusion([bm25, dense], rank_constant=settings.fusion.rank_constant)]

    return fused


def mining_corpus(data: PassageSet) -> dict[str, dict[str, str]]:
    """Every passage as a corpus document for :func:`~es_rag.evaluation.index.build_index` (title, text)."""
    return {
        passage_key(a, p): {"title": article.title or "", "text": text}
        for a, article in enumerate(data.articles)
        for p, text in enumerate(article.passages)
    }


def write_groups(groups: Sequence[Group], path: Path) -> None:
    """Write groups as JSONL (atomically: a temporary file renamed over the target)."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text("".join(g.to_json() + "\n" for g in groups), encoding="utf-8")
    tmp.replace(path)


def read_groups(path: Path) -> list[Group]:
    """Read groups written by :func:`write_groups`."""
    try:
        return [Group.from_json(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    except (OSError, ValueError, KeyError) as exc:
        raise InputError(str(path), "groups", f"unreadable mined groups: {exc}") from exc


def within_article(
    score: Scorer,
    data: PassageSet,
    questions: Sequence[Question],
    *,
    max_passages: int | None = None,
) -> dict[str, Any]:
    """Within-article ranking of the answer passage: top-1, MRR and chance. Ties count as a random order of the tied
    passages would (a constant scorer measures chance).

    Args:
        score: The model.
        data: The articles.
        questions: The questions measured.
        max_passages: Score at most this many passages of an article (the answer and the ones before it in article
            order, then after); None: all.
    """
    if not questions:
        return {"questions": 0, "top1": None, "mrr": None, "chance": None}
    top1 = 0.0
    mrr = 0.0
    chance = 0.0
    for q in questions:
        size = len(data.articles[q.article].passages)
        candidates = list(range(size))
        if max_passages is not None and size > max_passages:
            candidates = sorted(candidates, key=lambda p: (p != q.passage, abs(p - q.passage)))[:max_passages]
        scores = score([(q.text, data.passage(q, p)) for p in candidates])
        answer = scores[candidates.index(q.passage)]
        higher = sum(1 for s in scores if s > answer)
        ties = sum(1 for s in scores if s == answer) - 1
        # expectations under a random order of the tied passages: a model that cannot tell them apart gets chance
        top1 += 1.0 / (ties + 1) if higher == 0 else 0.0
        mrr += sum(1.0 / (higher + 1 + k) for k in range(ties + 1)) / (ties + 1)
        chance += 1.0 / len(candidates)
    n = len(questions)
    out: dict[str, Any] = {
        "questions": n,
        "top1": round(top1 / n, 4),
        "mrr": round(mrr / n, 4),
        "chance": round(chance / n, 4),
    }
    return out
