"""One module per ``es-rag`` command: ``register(subparsers)`` adds its parser with only its own options,
``run(args)`` runs it and returns the exit code."""

from __future__ import annotations

from types import ModuleType

from es_rag.cli.commands import (
    calibrate,
    chunk,
    delete_source,
    demo,
    doctor,
    eval,
    explain,
    ingest,
    reindex,
    search,
    selftest,
    serve,
    setup,
    sources,
    train_reranker,
    tune,
)

COMMANDS: dict[str, ModuleType] = {
    "demo": demo,
    "ingest": ingest,
    "search": search,
    "serve": serve,
    "explain": explain,
    "setup": setup,
    "selftest": selftest,
    "doctor": doctor,
    "chunk": chunk,
    "sources": sources,
    "delete-source": delete_source,
    "reindex": reindex,
    "eval": eval,
    "train-reranker": train_reranker,
    "calibrate": calibrate,
    "tune": tune,
}
"""Command name -> module, in the order ``es-rag --help`` lists them."""
