"""The embedded backend: Elasticsearch's analyzers and BM25 mirrored in Python, exact kNN, persisted to a
directory, with its version store."""
