"""A small FastAPI service over one es_rag RagClient (see docs/apps.md)."""
