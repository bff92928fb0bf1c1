"""Question -> passage data for reranker training: SQuAD files, golden sets with spans, hold-apart splits."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from es_rag.errors import InputError
from es_rag.evaluation.passages import (
    golden_articles,
    load_golden,
    load_squad,
    paragraphs,
    passage_text,
    readable_title,
    sample,
    split_holdout,
)


def _squad(tmp_path: Path, data: list[dict], name: str = "s.json") -> Path:  # type: ignore[type-arg]
    path = tmp_path / name
    path.write_text(json.dumps({"version": "1.1", "data": data}), encoding="utf-8")
    return path


def _article(title: str, contexts: list[str], prefix: str = "q") -> dict:  # type: ignore[type-arg]
    return {
        "title": title,
        "paragraphs": [
            {"context": c, "qas": [{"id": f"{prefix}-{i}-0", "question": f"question {i}?", "answers": []}]}
            for i, c in enumerate(contexts)
        ],
    }


def test_squad_articles_keep_their_passages_in_order_and_questions_point_at_their_paragraph(tmp_path: Path) -> None:
    path = _squad(tmp_path, [_article("Ice_hockey", ["first", "second"]), _article("Amazon_Reviews_2030", ["r"])])
    data = load_squad(path)
    assert [a.passages for a in data.articles] == [("first", "second"), ("r",)]
    assert [(q.article, q.passage, q.text) for q in data.questions] == [
        (0, 0, "question 0?"),
        (0, 1, "question 1?"),
        (1, 0, "question 0?"),
    ]
    # a title that reads as words is shown; an identifier (a name with digits) is not
    assert data.articles[0].title == "Ice hockey" and data.articles[1].title is None
    assert data.passage(data.questions[1]) == "Title: Ice hockey\nContent:\nsecond"
    assert passage_text(data.articles[1], 0) == "Content:\nr"


def test_unanswerable_questions_are_skipped_and_counted(tmp_path: Path) -> None:
    article = _article("T", ["text"])
    article["paragraphs"][0]["qas"].append({"id": "x", "question": "none?", "is_impossible": True, "answers": []})
    data = load_squad(_squad(tmp_path, [article]))
    assert len(data.questions) == 1 and data.skipped == {"unanswerable": 1}


def test_articles_of_an_evaluation_set_are_left_out_by_question_id_prefix_or_title(tmp_path: Path) -> None:
    path = _squad(
        tmp_path,
        [_article("Kept", ["a"], prefix="tr-001"), _article("Gone", ["b"], prefix="tr-009"), _article("X_Y", ["c"])],
    )
    data = load_squad(path, exclude_ids={"tr-009"}, exclude_titles={"X Y"})
    assert [a.passages for a in data.articles] == [("a",)]
    assert data.skipped == {"excluded article": 2}


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ("not json", "file"),
        (json.dumps({"nodata": []}), "data"),
        (json.dumps({"data": [{"title": "t", "paragraphs": [{"context": " ", "qas": []}]}]}), "context"),
        (
            json.dumps({"data": [{"title": "t", "paragraphs": [{"context": "c", "qas": [{"question": ""}]}]}]}),
            "question",
        ),
    ],
)
def test_bad_squad_files_name_the_file_and_field(tmp_path: Path, payload: str, field: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(payload, encoding="utf-8")
    with pytest.raises(InputError) as err:
        load_squad(path)
    assert str(path) in str(err.value) and field in str(err.value)


def test_paragraph_offsets_are_the_stripped_blank_line_blocks() -> None:
    text = "# Title\n\n  one two\n\n\nthree\n \nfour\n"
    assert [text[a:b] for a, b in paragraphs(text)] == ["# Title", "one two", "three", "four"]


def test_golden_questions_get_the_paragraph_holding_their_first_span(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    text = "# Ice hockey\n\nPucks are rubber.\n\nGoalies wear pads.\n"
    (docs / "Ice_hockey.md").write_text(text, encoding="utf-8")
    start = text.index("pads")
    golden = tmp_path / "golden.jsonl"
    rows = [
        {"id": "a1", "question": "What do goalies wear?", "gold": ["Ice_hockey.md"],
         "spans": [{"source_id": "Ice_hockey.md", "start": start, "end": start + 4}]},
        {"id": "a2", "question": "Unanswerable?", "gold": [], "spans": []},
    ]  # fmt: skip
    golden.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    data = load_golden(golden, docs)
    assert data.articles[0].title == "Ice hockey"
    assert data.articles[0].passages == ("Pucks are rubber.", "Goalies wear pads.")
    assert [(q.qid, q.passage) for q in data.questions] == [("a1", 1)]
    assert data.skipped == {"no answer span": 1}
    assert golden_articles(golden) == {"Ice_hockey"}


def test_a_golden_span_in_the_title_line_is_an_error_naming_the_line(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# A\n\nbody\n", encoding="utf-8")
    golden = tmp_path / "g.jsonl"
    golden.write_text(json.dumps({"question": "q", "spans": [{"source_id": "a.md", "start": 1, "end": 2}]}) + "\n")
    with pytest.raises(InputError, match=r"g\.jsonl:1.*spans\[0\]\.start"):
        load_golden(golden, docs)


def test_jaquad_style_ids_give_their_article_prefix(tmp_path: Path) -> None:
    golden = tmp_path / "g.jsonl"
    golden.write_text(json.dumps({"id": "tr-009-00-002", "question": "q", "gold": ["マーシア王国.md"]}) + "\n")
    assert golden_articles(golden) == {"tr-009", "マーシア王国"}


def test_hold_apart_splits_small_articles_whole_and_large_ones_by_passage(tmp_path: Path) -> None:
    small = [_article(f"A{i}", [f"p{j}" for j in range(3)]) for i in range(20)]
    large = _article("Big", [f"post {j}" for j in range(60)])
    data = load_squad(_squad(tmp_path, [*small, large]))
    train, held = split_holdout(data, 0.25, seed=7)
    assert len(train.questions) + len(held.questions) == len(data.questions)
    held_small = {q.article for q in held.questions if q.article < 20}
    assert len(held_small) == 5  # a quarter of the small articles, every question of each
    assert not held_small & {q.article for q in train.questions}
    held_big = {q.passage for q in held.questions if q.article == 20}
    assert len(held_big) == 15 and not held_big & {q.passage for q in train.questions if q.article == 20}
    # seeded: the same split again
    again_train, again_held = split_holdout(data, 0.25, seed=7)
    assert again_held.questions == held.questions and again_train.questions == train.questions
    with pytest.raises(InputError, match="holdout"):
        split_holdout(data, 1.0, seed=7)


def test_sample_is_seeded_and_keeps_order(tmp_path: Path) -> None:
    data = load_squad(_squad(tmp_path, [_article("T", [f"p{i}" for i in range(30)])]))
    picked = sample(data.questions, 10, seed=3)
    assert len(picked) == 10 and picked == sorted(picked, key=lambda q: q.passage)
    assert picked == sample(data.questions, 10, seed=3) and sample(data.questions, None, 3) == data.questions


def test_readable_title() -> None:
    assert readable_title("Sierra_Nevada_(U.S.)") == "Sierra Nevada (U.S.)"
    assert readable_title("Amazon_Reviews_2030") is None
    assert readable_title("2013年チェリャビンスク州の隕石落下") == "2013年チェリャビンスク州の隕石落下"
    assert readable_title(None) is None and readable_title("  ") is None
