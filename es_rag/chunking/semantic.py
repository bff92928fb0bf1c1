"""Semantic chunking: a new child starts where the topic changes, measured with the embedding model itself.

The common algorithm (LangChain ``SemanticChunker``, LlamaIndex ``SemanticSplitterNodeParser``), over the
structure layout and in model tokens with exact spans:

1. The structure layout gives the sections (heading paths, the parents) and their blocks. A paragraph is cut into
   sentences (:func:`~es_rag.chunking.spans.sentences_in`); a heading, table, list or code block stays one unit
   while it fits, else it is split as :class:`~es_rag.chunking.chunkers.StructureChunker` splits it (rows, items,
   lines, sentences, token windows). Every unit fits the child budget.
2. Each unit is embedded together with ``buffer`` neighbours on each side (within its section), in one call per
   document; the distance between consecutive units is ``1 - cosine`` of their groups.
3. A child ends after unit ``i`` where that distance is at or above the ``breakpoint_percentile`` of the document's
   distances (and above zero: a document on one topic has no breakpoint), never right after a heading.
4. A run still over ``max_tokens`` is cut at its largest inner distance, again and again, until every piece fits.
5. A piece under ``min_tokens`` joins the neighbour it is closest to (smaller distance) when the union fits.

Children keep ``text == source[start_offset:end_offset]`` (a child is the span from its first unit's start to its
last unit's end). Parents are the sections, capped by ``parent_max_tokens`` as in ``parent-child``.

``chunker_version`` names a hash of the embedding model's version, the percentile, the buffer and the minimum: a new
model moves the boundaries, so its chunks are new chunks.
"""

from __future__ import annotations

import hashlib
import itertools
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from es_rag.chunking.chunkers import Layout, Strategy, StructureChunker, _Group
from es_rag.chunking.spans import Section, sentences_in
from es_rag.encoders.tokenizer import Tokenizer
from es_rag.errors import ConfigError

_ATOMIC_RE = re.compile(
    r"(?:\||[-*+][ \t]|\d{1,9}[.)][ \t]|```|~~~|\.\. |<(?:table|ul|ol|dl|pre|code|figure)\b)", re.IGNORECASE
)
"""A block that is not prose: a table row, a list item, a code fence, an RST directive, an HTML table / list /
preformatted block. It stays whole while it fits."""
_DELIMITER_ROW_RE = re.compile(r"\n[ \t]*\|?[ \t]*:?-+:?[ \t]*(?:\|[ \t]*:?-+:?[ \t]*)+\|?[ \t]*(?:\n|$)")
_FLAT = 1e-6
"""Distances at or below this are no topic change (identical neighbours)."""
Span2 = tuple[int, int]
"""A run of units ``units[a:b]``, by index."""


@dataclass(frozen=True)
class _Unit:
    start: int
    end: int
    heading: bool


class SemanticChunker(StructureChunker):
    """Children cut where the embedding distance between neighbouring sentences jumps, inside the structure
    sections (see the module docstring); parents are the sections.

    Args:
        tokenizer: The embedding model's tokenizer.
        embed: The embedding model's document encoder: texts -> one unit-length row per text.
        embed_version: That model's version (``Embedder.version``); a hash of it enters ``chunker_version``.
        breakpoint_percentile: A child starts where the distance is at or above this percentile (0, 100] of the
            document's distances.
        buffer: Neighbouring units embedded with each unit on each side (1 smooths single odd sentences).
        min_tokens: A piece under this many tokens joins a neighbour (default ``max_tokens // 8``).
        max_tokens: Largest child, in model tokens.
        overlap: Overlap in tokens when one sentence must be cut into token windows.
        contextual: Embed ``title + heading path`` with each child.
        parent_max_tokens: Cap on a parent's size (None keeps whole sections).

    Raises:
        ConfigError: A bad percentile, buffer, minimum, embedding function or version.
    """

    def __init__(
        self,
        tokenizer: Tokenizer,
        *,
        embed: Callable[[list[str]], Any],
        embed_version: str,
        breakpoint_percentile: float = 95.0,
        buffer: int = 1,
        min_tokens: int | None = None,
        max_tokens: int = 200,
        overlap: int = 30,
        contextual: bool = False,
        parent_max_tokens: int | None = None,
    ) -> None:
        super().__init__(
            tokenizer,
            max_tokens=max_tokens,
            overlap=overlap,
            contextual=contextual,
            parents=True,
            parent_max_tokens=parent_max_tokens,
        )
        self.strategy = Strategy.SEMANTIC
        if not callable(embed):
            raise ConfigError(f"embed: needs a function texts -> vectors, got {type(embed).__name__}")
        if not isinstance(embed_version, str) or not embed_version.strip():
            raise ConfigError(f"embed_version: needs the embedding model's version, got {embed_version!r}")
        try:
            percentile = float(breakpoint_percentile)
        except (TypeError, ValueError):
            raise ConfigError(
                f"breakpoint_percentile: needs a number in (0, 100], got {breakpoint_percentile!r}"
            ) from None
        if not 0 < percentile <= 100:
            raise ConfigError(f"breakpoint_percentile: must be > 0 and <= 100, got {breakpoint_percentile}")
        if isinstance(buffer, bool) or not isinstance(buffer, int) or buffer < 0:
            raise ConfigError(f"buffer: must be an integer >= 0, got {buffer!r}")
        minimum = max(1, max_tokens // 8) if min_tokens is None else min_tokens
        if isinstance(minimum, bool) or not isinstance(minimum, int) or not 0 <= minimum < max_tokens:
            raise ConfigError(
                f"min_tokens: must be an integer >= 0 and < max_tokens ({max_tokens}), got {min_tokens!r}"
            )
        self.embed = embed
        self.embed_version = embed_version
        self.breakpoint_percentile = percentile
        self.buffer = buffer
        self.min_tokens = minimum

    def _params(self) -> str:
        model = hashlib.sha256(self.embed_version.encode("utf-8")).hexdigest()[:8]
        return f"{super()._params()}.B{self.breakpoint_percentile:g}.W{self.buffer}.M{self.min_tokens}.emb={model}"

    # -- units -----------------------------------------------------------------------------------
    @staticmethod
    def _prose(text: str, start: int, end: int) -> bool:
        """Whether a block is running text to cut into sentences (not a table, list, code or directive)."""
        if _ATOMIC_RE.match(text, start):
            return False
        line_start = text.rfind("\n", 0, start) + 1
        if text[line_start:start].expandtabs(4).startswith("    "):  # an indented code block
            return False
        return _DELIMITER_ROW_RE.search(text, start, end) is None  # a pipe table without leading pipes

    def _units(self, layout: Layout, section: Section, budget: int, fits: Callable[[int, int], bool]) -> list[_Unit]:
        text = layout.text
        units: list[_Unit] = []
        for i, (start, end) in enumerate(section.blocks):
            heading = i == 0 and bool(section.heading_path)
            if heading or not self._prose(text, start, end):
                pieces = [(start, end)]
            else:
                pieces = sentences_in(text, start, end) or [(start, end)]
            for s, e in pieces:
                units.extend(_Unit(a, b, heading) for a, b in self._split(layout, s, e, budget, fits))
        return units

    def _distances(self, layout: Layout, sections: Sequence[list[_Unit]]) -> list[np.ndarray]:
        """Per section, ``1 - cosine`` between each unit's group (it and ``buffer`` neighbours) and the next's."""
        texts: list[str] = []
        w = self.buffer
        for units in sections:
            if len(units) < 2:
                continue
            views = [layout.view(u.start, u.end) for u in units]
            texts.extend(" ".join(views[max(0, i - w) : i + w + 1]) for i in range(len(units)))
        out: list[np.ndarray] = []
        if not texts:
            return [np.zeros(0) for _ in sections]
        vectors = np.asarray(self.embed(texts), dtype=np.float64)
        if vectors.ndim != 2 or vectors.shape[0] != len(texts):
            raise ConfigError(
                f"semantic chunking: the embedding function returned shape {vectors.shape} for {len(texts)} texts; "
                "it must return one row per text"
            )
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        vectors = vectors / np.where(norms > 0, norms, 1.0)
        row = 0
        for units in sections:
            if len(units) < 2:
                out.append(np.zeros(0))
                continue
            v = vectors[row : row + len(units)]
            row += len(units)
            out.append(np.clip(1.0 - np.sum(v[:-1] * v[1:], axis=1), 0.0, 2.0))
        return out

    # -- cutting ---------------------------------------------------------------------------------
    @staticmethod
    def _fit(units: list[_Unit], dist: np.ndarray, a: int, b: int, fits: Callable[[int, int], bool]) -> list[Span2]:
        """Cut the run ``units[a:b]`` at its largest inner distances (not after a heading unless nothing else is
        left) until every piece fits."""
        out: list[Span2] = []
        todo = [(a, b)]
        while todo:
            lo, hi = todo.pop()
            if hi - lo == 1 or fits(units[lo].start, units[hi - 1].end):
                out.append((lo, hi))
                continue
            inner = range(lo, hi - 1)
            eligible = [i for i in inner if not units[i].heading] or list(inner)
            mid = (lo + hi - 1) / 2
            cut = max(eligible, key=lambda i: (float(dist[i]), -abs(i - mid))) + 1
            todo.extend([(cut, hi), (lo, cut)])  # popped left first: pieces come out in order
        return out

    def _merge_small(
        self,
        units: list[_Unit],
        dist: np.ndarray,
        pieces: list[Span2],
        fits: Callable[[int, int], bool],
        size: Callable[[int, int], int],
    ) -> list[Span2]:
        """Join every piece under ``min_tokens`` to its closer neighbour (smaller boundary distance) that it fits
        with."""
        pieces = list(pieces)
        j = 0
        while j < len(pieces):
            a, b = pieces[j]
            if len(pieces) < 2 or size(units[a].start, units[b - 1].end) >= self.min_tokens:
                j += 1
                continue
            options: list[tuple[float, int]] = []
            if j > 0 and fits(units[pieces[j - 1][0]].start, units[b - 1].end):
                options.append((float(dist[a - 1]), j - 1))
            if j + 1 < len(pieces) and fits(units[a].start, units[pieces[j + 1][1] - 1].end):
                options.append((float(dist[b - 1]), j + 1))
            if not options:
                j += 1
                continue
            _, k = min(options)
            lo, hi = min(j, k), max(j, k)
            pieces[lo : hi + 1] = [(pieces[lo][0], pieces[hi][1])]
            j = max(0, lo)  # the merged piece may still be small: look at it again
        return pieces

    def _plan(self, layout: Layout, prefix: Callable[[tuple[str, ...]], str]) -> list[_Group]:
        planned: list[tuple[Section, int, Callable[[int, int], bool], list[_Unit]]] = []
        for section in layout.sections:
            budget = self._budget(prefix(section.heading_path))
            fits = self._fits(layout, budget)
            units = self._units(layout, section, budget, fits)
            if units:
                planned.append((section, budget, fits, units))
        dists = self._distances(layout, [units for *_, units in planned])
        every = np.concatenate(dists) if dists else np.zeros(0)
        threshold = float(np.percentile(every, self.breakpoint_percentile)) if every.size else float("inf")
        count = self.tokenizer.count
        sizes: dict[Span2, int] = {}

        def size(start: int, end: int) -> int:
            key = (start, end)
            if key not in sizes:
                sizes[key] = count(self._header(layout, start, end) + layout.view(start, end))
            return sizes[key]

        groups: list[_Group] = []
        for (section, budget, fits, units), dist in zip(planned, dists, strict=True):
            cuts = [i + 1 for i in range(len(units) - 1) if dist[i] >= threshold and dist[i] > _FLAT]
            cuts = [c for c in cuts if not units[c - 1].heading]
            bounds = [0, *cuts, len(units)]
            pieces = [p for a, b in itertools.pairwise(bounds) for p in self._fit(units, dist, a, b, fits)]
            pieces = self._merge_small(units, dist, pieces, fits, size)
            children = [(units[a].start, units[b - 1].end) for a, b in pieces]
            groups.extend(self._groups(layout, section, children, budget))
        return groups


def document_encoder(model: Any) -> Callable[[list[str]], Any]:
    """An embedder's ``embed_documents`` as :class:`SemanticChunker`'s ``embed``: one call per document, without the
    embedder's progress bar (shown for the ingest's own batches) on each.

    Args:
        model: The embedding model (``embed_documents``, ``show_progress``).
    """

    def embed(texts: list[str]) -> Any:
        shown = getattr(model, "show_progress", False)
        model.show_progress = False
        try:
            return model.embed_documents(texts)
        finally:
            model.show_progress = shown

    return embed
