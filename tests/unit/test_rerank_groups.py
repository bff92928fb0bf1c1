"""Hard negatives for listwise training, and the within-article measure, on hand-made data."""

from __future__ import annotations

import random
from collections.abc import Sequence

import pytest

from es_rag.evaluation.passages import Article, PassageSet, Question
from es_rag.evaluation.rerank_groups import Group, mine_groups, passage_key, pick_negatives, within_article


def _data() -> PassageSet:
    return PassageSet(
        articles=[
            Article("Hockey", tuple(f"hockey {i}" for i in range(6)), "x"),
            Article(None, tuple(f"other {i}" for i in range(4)), "x"),
        ],
        questions=[Question("q0", "which puck?", 0, 2), Question("q1", "which other?", 1, 0)],
    )


def test_two_thirds_of_the_negatives_come_from_the_article_ranked_ones_first() -> None:
    q = Question("q", "text", 0, 2)
    fused = [(0, 2), (1, 0), (0, 4), (1, 3), (0, 1), (1, 1)]
    picked = pick_negatives(q, fused, 6, negatives=6, forbidden=set(), rng=random.Random(0))
    same = [(a, p) for a, p, _ in picked if a == 0]
    other = [(a, p) for a, p, _ in picked if a == 1]
    assert len(same) == 4 and len(other) == 2
    assert same[:2] == [(0, 4), (0, 1)]  # the ones es_rag ranked high, in its order
    assert set(same[2:]) <= {(0, 0), (0, 3), (0, 5)}  # then the rest of the article
    assert other == [(1, 0), (1, 3)]  # the best-ranked of other articles
    assert (0, 2) not in same  # never the answer
    origins = {(a, p): o for a, p, o in picked}
    assert origins[(0, 4)] == "same-article@3" and origins[(1, 0)] == "other-article@2"
    assert origins[same[2]] == "same-article@0"  # not in the fused list


def test_forbidden_passages_are_never_negatives_and_the_other_kind_fills_in() -> None:
    q = Question("q", "text", 0, 0)
    fused = [(1, 0), (1, 1), (1, 2), (0, 1)]
    picked = pick_negatives(q, fused, 2, negatives=4, forbidden={(1, 1)}, rng=random.Random(0))
    assert [(a, p) for a, p, _ in picked] == [(0, 1), (1, 0), (1, 2)]  # the article has one negative only


def test_mined_groups_put_the_answer_first_with_model_text() -> None:
    data = _data()
    stage = {"which puck?": [passage_key(1, 2), passage_key(0, 5)], "which other?": []}
    groups = mine_groups(data, data.questions, lambda t: stage[t], negatives=3, depth=10, seed=1)
    assert groups[0].passages[0] == "Title: Hockey\nContent:\nhockey 2"
    assert groups[0].passages[1] == "Title: Hockey\nContent:\nhockey 5"
    assert "Content:\nother 2" in groups[0].passages
    assert groups[1].passages[0] == "Content:\nother 0" and len(groups[1].passages) == 4
    assert Group.from_json(groups[0].to_json()) == groups[0]


def _scorer(table: dict[str, float]):  # type: ignore[no-untyped-def]
    def score(pairs: Sequence[tuple[str, str]]) -> list[float]:
        return [table.get(p.rsplit("\n", 1)[-1], 0.0) for _, p in pairs]

    return score


def test_within_article_counts_top1_mrr_and_chance_by_hand() -> None:
    data = _data()
    # q0 (answer hockey 2): one passage scores higher -> rank 2; q1 (answer other 0): best -> rank 1
    score = _scorer({"hockey 2": 0.5, "hockey 4": 0.9, "other 0": 0.7})
    result = within_article(score, data, data.questions)
    assert result == {"questions": 2, "top1": 0.5, "mrr": 0.75, "chance": round((1 / 6 + 1 / 4) / 2, 4)}


def test_ties_count_as_a_random_order_so_a_constant_model_measures_chance() -> None:
    data = _data()
    result = within_article(_scorer({"other 0": 1.0, "other 3": 1.0}), data, [data.questions[1]])
    assert result["top1"] == 0.5 and result["mrr"] == 0.75  # rank 1 or 2, equally likely
    constant = within_article(_scorer({}), data, data.questions)
    assert constant["top1"] == constant["chance"]


def test_a_capped_measure_keeps_the_answer_and_its_neighbours() -> None:
    data = _data()
    seen: list[str] = []

    def score(pairs: Sequence[tuple[str, str]]) -> list[float]:
        seen.extend(p.rsplit("\n", 1)[-1] for _, p in pairs)
        return [0.0] * len(pairs)

    within_article(score, data, [data.questions[0]], max_passages=3)
    assert sorted(seen) == ["hockey 1", "hockey 2", "hockey 3"]


def test_no_question_measures_nothing() -> None:
    assert within_article(_scorer({}), _data(), [])["top1"] is None


@pytest.mark.parametrize("negatives", [1, 2])
def test_small_negative_counts_prefer_the_article(negatives: int) -> None:
    q = Question("q", "t", 0, 0)
    picked = pick_negatives(q, [(1, 0), (0, 1)], 3, negatives=negatives, forbidden=set(), rng=random.Random(0))
    assert picked[0][0] == 0 and len(picked) == negatives
