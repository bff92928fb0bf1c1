"""The exact channel's compact index (es_rag.embedded.ident) answers as the naive token lists did: the same candidate
documents and phrase frequencies, on random documents and phrases."""

from __future__ import annotations

import random

import numpy as np

from es_rag.embedded.ident import IdentIndex


def _naive_freq(tokens: list[str], phrase: list[str]) -> int:
    n = len(phrase)
    return sum(1 for i in range(len(tokens) - n + 1) if tokens[i : i + n] == phrase)


def test_candidates_and_phrase_frequencies_match_the_naive_lists() -> None:
    rng = random.Random(7)
    vocab = [f"t{i}" for i in range(12)]
    docs = [[rng.choice(vocab) for _ in range(rng.randrange(0, 30))] for _ in range(200)]
    index = IdentIndex(docs)
    assert len(index) == 200 and index.lengths.tolist() == [float(len(d)) for d in docs]
    for _ in range(300):
        phrase = [rng.choice(vocab) for _ in range(rng.randrange(1, 4))]
        ids = index.phrase_ids(phrase)
        assert ids is not None
        holding = [i for i, d in enumerate(docs) if all(t in d for t in phrase)]
        assert index.candidates(ids).tolist() == holding
        for i in holding:
            assert index.phrase_freq(i, ids) == _naive_freq(docs[i], phrase), (i, phrase)


def test_an_unknown_token_matches_nothing_and_empty_fields_are_allowed() -> None:
    index = IdentIndex([[], ["e1042", "sync"], []])
    assert index.phrase_ids(["e1042", "nope"]) is None and index.phrase_ids([]) is None
    ids = index.phrase_ids(["e1042"])
    assert ids is not None and index.candidates(ids).tolist() == [1] and index.phrase_freq(0, ids) == 0
    assert np.array_equal(index.lengths, [0.0, 2.0, 0.0])
    assert len(IdentIndex([])) == 0
