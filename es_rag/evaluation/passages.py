"""Question -> passage data for training and measuring a reranker: SQuAD JSON files and golden sets with spans.

A :class:`PassageSet` holds articles (a title and its passages, in order) and questions (the passage that holds
the answer). Two readers fill it:

* :func:`load_squad`: SQuAD-format JSON (``data[].title``, ``data[].paragraphs[].context``, ``qas[].question``,
  ``qas[].id``); a paragraph is a passage; unanswerable questions (``is_impossible``, SQuAD 2.0) are skipped and
  counted;
* :func:`load_golden`: a golden file (``es-rag eval --golden``: ``question``, ``gold`` and answer ``spans`` with
  character offsets into ``docs/<source_id>``) with its documents; a passage is a blank-line paragraph of the
  document (its first line, a Markdown title, is left out), and the question's passage is the one holding its
  first span.

The passage a model reads is :func:`passage_text`, the header the rerank stage gives a hit
(:func:`~es_rag.cross_encoder.model.ranking_text`: ``Title: ...``) then the passage; an article whose title is an
identifier rather than words (``Amazon_Reviews_2030``) gets no title line.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from es_rag.errors import InputError

_BLANK = re.compile(r"\n[ \t]*\n")


@dataclass(frozen=True)
class Article:
    """One article: its title (None: no title line) and passages in order.

    Args:
        title: Title shown to the model, or None.
        passages: Passage texts.
        origin: File the article came from.
    """

    title: str | None
    passages: tuple[str, ...]
    origin: str


@dataclass(frozen=True)
class Question:
    """One question and the passage that answers it.

    Args:
        qid: Question id.
        text: Question text.
        article: Index into :attr:`PassageSet.articles`.
        passage: Index into that article's passages.
    """

    qid: str
    text: str
    article: int
    passage: int


@dataclass
class PassageSet:
    """Articles and their questions.

    Args:
        articles: The articles.
        questions: The questions.
        skipped: What the readers left out and why (reason -> count).
    """

    articles: list[Article] = field(default_factory=list)
    questions: list[Question] = field(default_factory=list)
    skipped: dict[str, int] = field(default_factory=dict)

    def passage(self, q: Question, index: int | None = None) -> str:
        """The model's text of passage ``index`` (default: the answer's) of ``q``'s article."""
        article = self.articles[q.article]
        return passage_text(article, q.passage if index is None else index)

    def extend(self, other: PassageSet) -> None:
        """Append ``other``'s articles and questions (its article indices shifted)."""
        shift = len(self.articles)
        self.articles.extend(other.articles)
        self.questions.extend(Question(q.qid, q.text, q.article + shift, q.passage) for q in other.questions)
        for reason, n in other.skipped.items():
            self.skipped[reason] = self.skipped.get(reason, 0) + n

    def summary(self) -> dict[str, object]:
        """Counts for reports."""
        return {
            "articles": len(self.articles),
            "passages": sum(len(a.passages) for a in self.articles),
            "questions": len(self.questions),
            "skipped": dict(self.skipped),
        }


def readable_title(title: object) -> str | None:
    """A title as words (underscores to spaces), or None for none or an identifier: an underscored name with a digit
    (``Amazon_Reviews_2030``). A collection name such as ``Filtered_Reddit_Comments`` reads as words and is kept (every
    passage of its one article shares it, so it tells them nothing apart)."""
    if not isinstance(title, str) or not title.strip():
        return None
    words = title.replace("_", " ").strip()
    if any(ch.isdigit() for ch in words) and "_" in title:
        return None
    return words


def passage_text(article: Article, index: int) -> str:
    """Header and passage as the rerank stage shows a hit to the model (``ranking_text``)."""
    header = f"Title: {article.title}\n" if article.title else ""
    return f"{header}Content:\n{article.passages[index]}"


def load_squad(
    path: str | Path, *, exclude_titles: Iterable[str] = (), exclude_ids: Iterable[str] = (), titles: bool = True
) -> PassageSet:
    """Read a SQuAD-format JSON file.

    Args:
        path: The file.
        exclude_titles: Articles to leave out, by title (underscores and spaces are the same).
        exclude_ids: Articles to leave out when one of their question ids starts with ``<id>-`` (JaQuAD's
            ``tr-009-00-002`` belongs to article ``tr-009``).
        titles: Show article titles to the model (:func:`readable_title`); False: never.

    Raises:
        InputError: Unreadable JSON, no ``data`` list, or an answerable question without a passage.
    """
    name = str(path)
    try:
        raw = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(name, "file", f"not readable SQuAD JSON: {exc}") from exc
    data = raw.get("data") if isinstance(raw, dict) else None
    if not isinstance(data, list):
        raise InputError(name, "data", "a SQuAD file has a top-level 'data' list")
    banned_titles = {t.replace("_", " ").strip() for t in exclude_titles}
    banned_ids = set(exclude_ids)
    out = PassageSet()
    for a_index, item in enumerate(data):
        if not isinstance(item, dict) or not isinstance(item.get("paragraphs"), list):
            raise InputError(name, f"data[{a_index}].paragraphs", "missing or not a list")
        title = item.get("title")
        ids = [
            str(qa.get("id", ""))
            for p in item["paragraphs"]
            if isinstance(p, dict)
            for qa in p.get("qas", [])
            if isinstance(qa, dict)
        ]
        if (isinstance(title, str) and title.replace("_", " ").strip() in banned_titles) or any(
            i.startswith(f"{b}-") for i in ids for b in banned_ids
        ):
            out.skipped["excluded article"] = out.skipped.get("excluded article", 0) + 1
            continue
        passages: list[str] = []
        questions: list[Question] = []
        for p_index, para in enumerate(item["paragraphs"]):
            context = para.get("context") if isinstance(para, dict) else None
            if not isinstance(context, str) or not context.strip():
                raise InputError(name, f"data[{a_index}].paragraphs[{p_index}].context", "missing or empty")
            passages.append(context.strip())
            for q_index, qa in enumerate(para.get("qas", [])):
                text = qa.get("question") if isinstance(qa, dict) else None
                if not isinstance(text, str) or not text.strip():
                    raise InputError(
                        name, f"data[{a_index}].paragraphs[{p_index}].qas[{q_index}].question", "missing or empty"
                    )
                if qa.get("is_impossible"):
                    out.skipped["unanswerable"] = out.skipped.get("unanswerable", 0) + 1
                    continue
                qid = str(qa.get("id", f"{a_index}-{p_index}-{q_index}"))
                questions.append(Question(qid, text.strip(), len(out.articles), len(passages) - 1))
        out.articles.append(Article(readable_title(title) if titles else None, tuple(passages), name))
        out.questions.extend(questions)
    return out


def paragraphs(text: str) -> list[tuple[int, int]]:
    """``(start, end)`` offsets of the blank-line paragraphs of ``text`` (stripped of surrounding whitespace)."""
    out = []
    start = 0
    for m in [*_BLANK.finditer(text), None]:
        end = m.start() if m is not None else len(text)
        seg = text[start:end]
        if seg.strip():
            lead = len(seg) - len(seg.lstrip())
            out.append((start + lead, start + len(seg.rstrip())))
        if m is not None:
            start = m.end()
    return out


def load_golden(golden: str | Path, docs: str | Path) -> PassageSet:
    """Read a golden file with answer spans and its documents (one article per gold document).

    Questions without spans (``no-answer``) are skipped and counted; a document whose first paragraph is a Markdown
    title (``# ...``) gives the article's title and no passage.

    Args:
        golden: JSONL, one ``{"id", "question", "gold", "spans"}`` per line.
        docs: The folder the spans' ``source_id`` are relative to.

    Raises:
        InputError: Unreadable lines, a missing document or a span outside every paragraph.
    """
    out = PassageSet()
    by_source: dict[str, tuple[int, list[tuple[int, int]], int]] = {}
    for n, line in enumerate(Path(golden).read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{golden}:{n}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(where, "line", f"not JSON: {exc}") from exc
        spans = row.get("spans") or []
        if not spans:
            out.skipped["no answer span"] = out.skipped.get("no answer span", 0) + 1
            continue
        source = spans[0].get("source_id")
        if source not in by_source:
            file = Path(docs) / str(source)
            try:
                text = file.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                raise InputError(where, "spans[0].source_id", f"{file}: {exc}") from exc
            paras = paragraphs(text)
            title = None
            first = 0
            if paras and text[paras[0][0] : paras[0][1]].startswith("# "):
                title = text[paras[0][0] + 2 : paras[0][1]].strip()
                first = 1
            article = Article(title, tuple(text[a:b] for a, b in paras[first:]), str(file))
            by_source[source] = (len(out.articles), paras, first)
            out.articles.append(article)
        a_index, paras, first = by_source[source]
        start = int(spans[0]["start"])
        hit = next((i for i, (a, b) in enumerate(paras) if a <= start < b), None)
        if hit is None or hit < first:
            raise InputError(where, "spans[0].start", f"offset {start} is in no paragraph of {source}")
        out.questions.append(Question(str(row.get("id", n)), str(row["question"]).strip(), a_index, hit - first))
    return out


def golden_articles(golden: str | Path) -> set[str]:
    """The article keys of a golden file's questions, to keep them out of training: each question id's article prefix
    (``tr-009`` of ``tr-009-00-002``) and each gold document's name without its suffix (titles)."""
    keys: set[str] = set()
    for line in Path(golden).read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        row = json.loads(line)
        qid = str(row.get("id", ""))
        if qid.count("-") >= 2:
            keys.add(qid.rsplit("-", 2)[0])
        for g in row.get("gold") or []:
            keys.add(Path(str(g)).stem)
    return keys


def split_holdout(data: PassageSet, share: float, seed: int) -> tuple[PassageSet, PassageSet]:
    """Hold apart ``share`` of the articles (seeded): ``(train, held)``. An article with more than 50 passages (a
    whole file as one article, as in SQuADShifts Reddit) is split by passage instead, so its held questions are
    about passages training never saw.

    Args:
        data: Everything.
        share: Share of articles (passages, for the large ones) held apart, in [0, 1).
        seed: Shuffling seed.
    """
    if not 0.0 <= share < 1.0:
        raise InputError("train-reranker", "holdout", f"must be within [0, 1), got {share}")
    rng = random.Random(seed)
    held_articles: set[int] = set()
    held_passages: set[tuple[int, int]] = set()
    small = [i for i, a in enumerate(data.articles) if len(a.passages) <= 50]
    rng.shuffle(small)
    held_articles.update(small[: round(len(small) * share)])
    for i, a in enumerate(data.articles):
        if len(a.passages) > 50:
            order = list(range(len(a.passages)))
            rng.shuffle(order)
            held_passages.update((i, p) for p in order[: round(len(order) * share)])
    train = PassageSet(data.articles, [], dict(data.skipped))
    held = PassageSet(data.articles, [])
    for q in data.questions:
        is_held = q.article in held_articles or (q.article, q.passage) in held_passages
        (held if is_held else train).questions.append(q)
    return train, held


def sample(questions: Sequence[Question], n: int | None, seed: int) -> list[Question]:
    """At most ``n`` questions (seeded choice, original order kept); all when ``n`` is None."""
    if n is None or n >= len(questions):
        return list(questions)
    keep = sorted(random.Random(seed).sample(range(len(questions)), n))
    return [questions[i] for i in keep]
