"""The embedded backend's exact kNN (:mod:`es_rag.embedded.vectors`) against Lucene 10.5's
``VectorSimilarityFunction`` as Elasticsearch applies it to float vectors: every document's score within 1e-6
(relative above 1: ``max_inner_product`` grows with the norms) and the same top 10, for 10 queries over 1,000
seeded 384-dim vectors per similarity.

Elasticsearch normalises a cosine vector only when its squared length is more than 1e-3 from 1
(``DenseVectorFieldMapper.isNotUnitVector``) and scores the rest by their dot product as they are; the embedded
backend does the same (``es_rag/embedded/vectors.py``, ``COSINE_UNIT_EPS``). Before, it normalised every vector, and
vectors between 1e-7 and 1e-3 off unit length (float16 outputs, say) differed by up to about 5e-4.
"""

from __future__ import annotations

import functools

import pytest

from tests.support.lucene_oracle import KnnAgreement, LuceneOracle, compare_knn, knn_vectors

SIMILARITIES = ["cosine", "dot_product", "l2_norm", "max_inner_product"]


@pytest.mark.parametrize("similarity", SIMILARITIES)
def test_embedded_knn_scores_are_lucenes(lucene: LuceneOracle, similarity: str) -> None:
    seed = SIMILARITIES.index(similarity)
    vectors = knn_vectors(seed, 1000, 384, similarity)
    queries = knn_vectors(seed + 100, 10, 384, similarity)
    got = compare_knn(lucene, similarity, vectors, queries)
    assert got.scores_compared == 10_000
    assert got.max_diff <= 1e-6
    assert got.top10_identical == got.queries


@functools.cache
def _near_unit_cosine(lucene: LuceneOracle) -> KnnAgreement:
    vectors = knn_vectors(7, 1000, 384, "cosine", near_unit=True)
    return compare_knn(lucene, "cosine", vectors, knn_vectors(8, 10, 384, "cosine", near_unit=True))


def test_cosine_of_almost_unit_vectors_is_scored_as_elasticsearch_does(lucene: LuceneOracle) -> None:
    agreement = _near_unit_cosine(lucene)
    assert agreement.max_diff <= 1e-6
    assert agreement.top10_identical == agreement.queries
