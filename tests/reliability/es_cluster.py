"""A tiny in-memory Elasticsearch behind :class:`tests.fakes.FakeNode`: it *evaluates* the bodies es_rag sends.

The real ``elasticsearch`` client talks to it (serialisation, NDJSON, helpers.streaming_bulk). It keeps
documents per index and answers ``_bulk`` (with the ingest pipeline's required-field ``fail`` checks),
the version-registry ``_doc`` GET/PUT (``_seq_no``/``_primary_term``, ``op_type=create``, 409 on a
conflict), ``_refresh``, ``_delete_by_query``, ``_count``, ``_search`` and ``_msearch`` by evaluating the
query clauses it receives: ``term``, ``terms`` (inline and terms *lookup* on the registry document),
``bool``, ``ids``, ``range``, ``match_all``, ``multi_match`` (word overlap), ``dis_max``/``match_phrase``
(identifier phrases), ``knn`` (cosine, ``(1 + cos) / 2``) and the ``standard``/``knn``/``rrf`` retrievers.

Only the clauses present in the body restrict the result: a body that forgets a filter returns the
documents that filter would have hidden, so the isolation tests catch it.
"""

from __future__ import annotations

import copy
import hashlib
import re
import urllib.parse
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

import numpy as np

from es_rag.config import Settings
from es_rag.fusion import reciprocal_rank_fusion
from es_rag.queries import identifier_tokens
from tests.fakes import (
    Canned,
    FakeNode,
    RecordedRequest,
    bulk_item_fail_processor,
    bulk_item_ok,
    bulk_response,
    cluster_routes,
    error_body,
    fail_processor_message,
    index_not_found_error,
    make_client,
    search_response,
)

REQUIRED = ("chunk_id", "tenant_id", "source_id", "text")
_WORD = re.compile(r"\w+", re.UNICODE)


class SearchPhaseError(Exception):
    def __init__(self, status: int, body: dict[str, Any]) -> None:
        self.status = status
        self.body = body


def _values(doc: dict[str, Any], fld: str) -> list[Any]:
    value = doc.get(fld)
    if value is None:
        return []
    return list(value) if isinstance(value, list) else [value]


class FakeCluster:
    """State + evaluator. ``install(node)`` routes every data request of ``node`` here.

    Args:
        settings: Index names (prefix).
        missing: Index names that do not exist (searches on them answer 404 ``index_not_found``).
    """

    def __init__(self, settings: Settings, *, missing: tuple[str, ...] = ()) -> None:
        self.settings = settings
        self.indices: dict[str, dict[str, dict[str, Any]]] = {
            settings.chunk_index: {},
            settings.parent_index: {},
            f"{settings.index_prefix}-versions": {},
        }
        for name in missing:
            self.indices.pop(name, None)
        self.seq: dict[tuple[str, str], tuple[int, int]] = {}
        self._seq_no = 0
        self.after_write: list[Callable[[str], None]] = []
        """Called with a label after every state-changing request (observers of intermediate states)."""
        self.bulk_fault: Callable[[str, dict[str, Any], dict[str, Any] | None], dict[str, Any] | None] | None = None

    # -- routing -------------------------------------------------------------------------------
    def install(self, node: FakeNode, *, license_type: str = "trial", version: str = "9.1.0") -> FakeNode:
        node.route("GET|POST|PUT|HEAD|DELETE", ".*", self.respond)
        node.routes(cluster_routes(self.settings, license_type=license_type, version=version))
        return node

    def respond(self, req: RecordedRequest) -> Canned:
        path = req.path.strip("/")
        query = urllib.parse.parse_qs(req.query)
        parts = path.split("/")
        try:
            if parts[-1] == "_bulk":
                return self._bulk(req.body or [])
            if parts[-1] == "_msearch":
                default = parts[0] if len(parts) == 2 else None
                return 200, self._msearch(req.body or [], default)
            if parts[-1] == "_search":
                return 200, self._search(parts[0], req.body or {})
            if parts[-1] == "_count":
                return 200, self._count(parts[0], req.body or {})
            if parts[-1] == "_refresh":
                return 200, {"_shards": {"total": 2, "successful": 2, "failed": 0}}
            if parts[-1] == "_delete_by_query":
                return 200, self._delete_by_query(parts[0], req.body or {})
            if len(parts) == 3 and parts[1] == "_doc":
                return self._doc(req.method, parts[0], urllib.parse.unquote(parts[2]), req.body, query)
            if req.method == "HEAD" and len(parts) == 1:
                return (200 if parts[0] in self.indices else 404), None
        except SearchPhaseError as exc:
            return exc.status, exc.body
        raise AssertionError(f"FakeCluster: unsupported request {req.line}")

    def _notify(self, label: str) -> None:
        for fn in list(self.after_write):
            fn(label)

    # -- writes --------------------------------------------------------------------------------
    def _bulk(self, lines: list[dict[str, Any]]) -> Canned:
        items = []
        i = 0
        while i < len(lines):
            op, meta = next(iter(lines[i].items()))
            src = lines[i + 1] if op != "delete" else None
            i += 2 if op != "delete" else 1
            index, doc_id = meta.get("_index", self.settings.chunk_index), str(meta.get("_id"))
            custom = self.bulk_fault(op, meta, src) if self.bulk_fault is not None else None
            if custom is not None:
                items.append(custom)
                continue
            if op == "delete":
                self.indices.get(index, {}).pop(doc_id, None)
                items.append(bulk_item_ok(index, doc_id, op=op))
                continue
            assert src is not None
            what = "parent" if index == self.settings.parent_index else "chunk"
            bad = next((f for f in REQUIRED if src.get(f) in (None, "") or str(src.get(f)).strip() == ""), None)
            if bad is not None:
                msg = fail_processor_message(bad, str(src.get("chunk_id")), str(src.get("source_id")), what)
                items.append(bulk_item_fail_processor(index, doc_id, msg, op=op))
                continue
            doc = dict(src)
            doc["content_hash"] = hashlib.sha256(str(doc["text"]).encode()).hexdigest()
            doc["ingested_at"] = datetime.now(timezone.utc).isoformat()
            self.indices.setdefault(index, {})[str(doc["chunk_id"])] = doc
            items.append(bulk_item_ok(index, doc_id, op=op))
        self._notify("bulk")
        return 200, bulk_response(items)

    def _doc(self, method: str, index: str, doc_id: str, body: Any, query: dict[str, list[str]]) -> Canned:
        if index not in self.indices:
            return 404, index_not_found_error(index)
        store = self.indices[index]
        if method == "GET":
            if doc_id not in store:
                return 404, {"_index": index, "_id": doc_id, "found": False}
            seq_no, term = self.seq[(index, doc_id)]
            return 200, {
                "_index": index,
                "_id": doc_id,
                "_version": seq_no + 1,
                "_seq_no": seq_no,
                "_primary_term": term,
                "found": True,
                "_source": copy.deepcopy(store[doc_id]),
            }
        if method == "PUT":
            exists = doc_id in store
            if query.get("op_type") == ["create"] and exists:
                return 409, error_body(409, "version_conflict_engine_exception", f"[{doc_id}]: document exists")
            if "if_seq_no" in query:
                current = self.seq.get((index, doc_id))
                want = (int(query["if_seq_no"][0]), int(query["if_primary_term"][0]))
                if current != want:
                    return 409, error_body(
                        409, "version_conflict_engine_exception", f"[{doc_id}]: version conflict, required {want}"
                    )
            store[doc_id] = copy.deepcopy(body)
            self._seq_no += 1
            self.seq[(index, doc_id)] = (self._seq_no, 1)
            self._notify("registry")
            return (200 if exists else 201), {
                "_index": index,
                "_id": doc_id,
                "result": "updated" if exists else "created",
                "_seq_no": self._seq_no,
                "_primary_term": 1,
            }
        raise AssertionError(f"unsupported {method} on _doc")

    def _delete_by_query(self, index: str, body: dict[str, Any]) -> dict[str, Any]:
        store = self._index(index)
        doomed = [i for i, d in store.items() if self._filter(body.get("query", {"match_all": {}}), d)]
        for i in doomed:
            del store[i]
        self._notify("delete_by_query")
        return {"took": 3, "timed_out": False, "total": len(doomed), "deleted": len(doomed), "failures": []}

    # -- reads ---------------------------------------------------------------------------------
    def _index(self, name: str) -> dict[str, dict[str, Any]]:
        if name not in self.indices:
            raise SearchPhaseError(404, index_not_found_error(name))
        return self.indices[name]

    def _count(self, index: str, body: dict[str, Any]) -> dict[str, Any]:
        store = self._index(index)
        self._rewrite(body)
        q = body.get("query", {"match_all": {}})
        n = sum(1 for d in store.values() if self._filter(q, d))
        return {"count": n, "_shards": {"total": 1, "successful": 1, "skipped": 0, "failed": 0}}

    def _msearch(self, lines: list[dict[str, Any]], default: str | None) -> dict[str, Any]:
        responses = []
        for header, body in zip(lines[0::2], lines[1::2], strict=True):
            index = header.get("index", default)
            try:
                item = self._search(str(index), body)
                item["status"] = 200
            except SearchPhaseError as exc:
                item = {**exc.body, "status": exc.status}
            responses.append(item)
        return {"took": 5, "responses": responses}

    def _rewrite(self, node: Any) -> None:
        """Like the coordinating node's query rewrite: every terms lookup is fetched before any document
        is looked at, so a missing lookup index fails the whole search."""
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "terms" and isinstance(value, dict):
                    for spec in value.values():
                        if isinstance(spec, dict) and "index" in spec:
                            self._lookup(spec)
                self._rewrite(value)
        elif isinstance(node, list):
            for item in node:
                self._rewrite(item)

    def _search(self, index: str, body: dict[str, Any]) -> dict[str, Any]:
        store = self._index(index)
        self._rewrite(body)
        size = int(body.get("size", 10))
        if "retriever" in body:
            ranked = self._retriever(body["retriever"], store)[:size]
        elif "knn" in body:
            ranked = self._knn(body["knn"], store)[:size]
        else:
            q = body.get("query", {"match_all": {}})
            scored = [(i, self._score(q, d)) for i, d in store.items()]
            ranked = [(i, s) for i, s in scored if s is not None]
            if "sort" in body:
                ((fld, spec),) = body["sort"][0].items()
                ranked.sort(key=lambda x: store[x[0]][fld], reverse=spec.get("order") == "desc")
                ranked = [(i, None) for i, _ in ranked]  # type: ignore[misc]
            else:
                ranked.sort(key=lambda x: -float(x[1] or 0.0))
            ranked = ranked[:size]
        src_spec = body.get("_source", {})
        hits = []
        for doc_id, score in ranked:
            src = dict(store[doc_id])
            if isinstance(src_spec, dict) and "includes" in src_spec:
                src = {k: v for k, v in src.items() if k in src_spec["includes"]}
            for k in src_spec.get("excludes", []) if isinstance(src_spec, dict) else []:
                src.pop(k, None)
            hits.append({"_index": index, "_id": doc_id, "_score": score, "_source": src})
        return search_response(hits)

    def _retriever(self, retriever: dict[str, Any], store: dict[str, dict[str, Any]]) -> list[tuple[str, float]]:
        ((kind, spec),) = ((k, v) for k, v in retriever.items())
        if kind == "standard":
            filters = spec.get("filter", [])
            filters = filters if isinstance(filters, list) else [filters]
            out = []
            for i, d in store.items():
                if not all(self._filter(f, d) for f in filters):
                    continue
                s = self._score(spec["query"], d)
                if s is not None:
                    out.append((i, s))
            out.sort(key=lambda x: -x[1])
            return out
        if kind == "knn":
            return self._knn(spec, store)
        if kind == "rrf":
            lists = []
            weights = []
            for child in spec["retrievers"]:
                inner = child.get("retriever", child)
                weights.append(float(child.get("weight", 1.0)) if "retriever" in child else 1.0)
                lists.append([i for i, _ in self._retriever(inner, store)])
            window = int(spec.get("rank_window_size", 10))
            fused = reciprocal_rank_fusion(
                lists, rank_constant=int(spec.get("rank_constant", 60)), rank_window_size=window, weights=weights
            )
            return [(f.id, float(f.score)) for f in fused]
        raise AssertionError(f"FakeCluster: unsupported retriever {kind}")

    def _knn(self, spec: dict[str, Any], store: dict[str, dict[str, Any]]) -> list[tuple[str, float]]:
        filters = spec.get("filter", [])
        filters = filters if isinstance(filters, list) else [filters]
        q = np.asarray(spec["query_vector"], dtype=np.float64)
        out = []
        for i, d in store.items():
            if "vector" not in d or not all(self._filter(f, d) for f in filters):
                continue
            v = np.asarray(d["vector"], dtype=np.float64)
            cos = float(v @ q / ((np.linalg.norm(v) * np.linalg.norm(q)) or 1.0))
            out.append((i, (1.0 + cos) / 2.0))
        out.sort(key=lambda x: -x[1])
        return out[: int(spec.get("k", 10))]

    # -- clause evaluation ---------------------------------------------------------------------
    def _lookup(self, spec: dict[str, Any]) -> list[str]:
        index = spec["index"]
        if index not in self.indices:
            raise SearchPhaseError(404, index_not_found_error(index))
        doc = self.indices[index].get(spec["id"])
        if doc is None:
            return []
        value: Any = doc
        for part in spec["path"].split("."):
            value = value.get(part) if isinstance(value, dict) else None
        return [str(v) for v in (value or [])]

    def _filter(self, clause: dict[str, Any], doc: dict[str, Any]) -> bool:
        return self._score(clause, doc) is not None

    def _score(self, clause: dict[str, Any], doc: dict[str, Any]) -> float | None:
        """None: no match; else the clause's score (0 in filter-only clauses)."""
        ((kind, spec),) = clause.items()
        if kind == "match_all":
            return 1.0
        if kind == "term":
            ((fld, value),) = spec.items()
            value = value.get("value") if isinstance(value, dict) else value
            return 0.0 if str(value) in [str(v) for v in _values(doc, fld)] else None
        if kind == "terms":
            ((fld, values),) = spec.items()
            allowed = self._lookup(values) if isinstance(values, dict) else [str(v) for v in values]
            return 0.0 if set(map(str, _values(doc, fld))) & set(allowed) else None
        if kind == "ids":
            return 0.0 if str(doc.get("chunk_id")) in spec["values"] else None
        if kind == "range":
            ((fld, ops),) = spec.items()
            v = doc.get(fld)
            if v is None:
                return None
            checks = {"lt": v < ops.get("lt", v + 1), "gt": v > ops.get("gt", v - 1)}
            checks["lte"] = v <= ops.get("lte", v)
            checks["gte"] = v >= ops.get("gte", v)
            return 0.0 if all(checks.values()) else None
        if kind == "bool":
            total = 0.0
            for f in _as_list(spec.get("filter")):
                if not self._filter(f, doc):
                    return None
            for f in _as_list(spec.get("must_not")):
                if self._filter(f, doc):
                    return None
            for m in _as_list(spec.get("must")):
                s = self._score(m, doc)
                if s is None:
                    return None
                total += s
            return total
        if kind == "multi_match":
            q = {w.lower() for w in _WORD.findall(spec["query"])}
            best = 0.0
            for f in spec["fields"]:
                name, _, boost = f.partition("^")
                text = " ".join(str(v) for v in _values(doc, name))
                words = [w.lower() for w in _WORD.findall(text)]
                s = sum(1 for w in words if w in q) * (float(boost) if boost else 1.0)
                best = max(best, s / (1 + 0.1 * len(words)))
            return best if best > 0 else None
        if kind == "dis_max":
            scores = [self._score(q, doc) for q in spec["queries"]]
            hit = [s for s in scores if s is not None]
            return sum(hit) if hit else None
        if kind == "match_phrase":
            ((fld, q),) = spec.items()
            base = fld.removesuffix(".ident")
            tokens = identifier_tokens(" ".join(str(v) for v in _values(doc, base)))
            phrase = identifier_tokens(q["query"] if isinstance(q, dict) else str(q))
            n = len(phrase)
            count = sum(1 for i in range(len(tokens) - n + 1) if tokens[i : i + n] == phrase) if n else 0
            return float(count) if count else None
        raise AssertionError(f"FakeCluster: unsupported clause {kind}")


def _as_list(value: Any) -> list[dict[str, Any]]:
    if value is None:
        return []
    return list(value) if isinstance(value, list) else [value]


def cluster_backend(
    settings: Settings, *, license_type: str = "trial", missing: tuple[str, ...] = (), **client_kwargs: Any
) -> tuple[Any, FakeNode, FakeCluster]:
    """An :class:`ElasticsearchBackend` whose real client talks to a :class:`FakeCluster`."""
    from es_rag.backends.elasticsearch import ElasticsearchBackend

    client, node = make_client(**client_kwargs)
    cluster = FakeCluster(settings, missing=missing)
    cluster.install(node, license_type=license_type)
    return ElasticsearchBackend(client, settings), node, cluster
