"""Per-stage retrieval evaluation on BEIR-layout datasets: loading, indexing, metrics, runs, ablations, the ladder,
reports and reranker training."""
