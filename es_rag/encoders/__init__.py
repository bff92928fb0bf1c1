"""Embedding models, tokenizers, the on-disk embedding cache and model-hub access."""
