"""Chunking with exact lineage: strategies, Markdown/HTML layouts, stable ids.

``from es_rag.chunking import StructureChunker, stable_chunk_id, CHUNKER_VERSION, parse_markdown``
"""

from es_rag.chunking.chunkers import (
    CHUNKER_VERSION,
    FORMATS,
    RULES,
    Chunker,
    FixedTokenChunker,
    RecursiveChunker,
    Strategy,
    StructureChunker,
)
from es_rag.chunking.factory import make_chunker
from es_rag.chunking.html import HtmlLayout, visible_text
from es_rag.chunking.markdown import Section, TextLayout, parse_markdown, parse_plain
from es_rag.chunking.spans import stable_chunk_id

__all__ = [
    "CHUNKER_VERSION",
    "FORMATS",
    "RULES",
    "Chunker",
    "FixedTokenChunker",
    "HtmlLayout",
    "RecursiveChunker",
    "Section",
    "Strategy",
    "StructureChunker",
    "TextLayout",
    "make_chunker",
    "parse_markdown",
    "parse_plain",
    "stable_chunk_id",
    "visible_text",
]
