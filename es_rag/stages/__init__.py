"""The post-retrieval stages: fusion, dedup, rerank, gate, boost, select, expand, pack; each returns a StageOutput."""
