"""Ingest pipelines as Elasticsearch parses and runs them (``server/.../ingest/IngestService.java``,
``ConfigurationUtils.java``, ``modules/ingest-common``, ``x-pack/plugin/ml/.../InferenceProcessor.java``).

Parsing (at ``PUT _ingest/pipeline``) refuses what ``ConfigurationUtils.readProcessor`` refuses: an unknown
processor type (``No processor type exists with name [x]``), a parameter the processor does not take
(``processor [set] doesn't support one or more provided configuration parameters [foo]``), a missing required
parameter (``[field] required property is missing``), an empty ``on_failure`` list (``[on_failure] processors
list cannot be empty``; ``Pipeline.create``: ``pipeline [id] cannot have an empty on_failure option defined``;
``ingest/50_on_failure.yml``). Every ``if`` condition is compiled by the double's
Painless subset (:class:`Painless`); a script outside it is refused at PUT time as a double limit, never
assumed true.

Execution follows the processors' source (research notes of issue 11 in the test docstrings):

* ``set`` (SetProcessor): ``value`` (mustache) or ``copy_from`` (a missing source fails with
  ``field [x] not present as part of path [x]`` unless ``ignore_empty_value``), ``override``;
  ``_id`` must be a string;
* ``fail`` (FailProcessor): mustache message, ``fail_processor_exception``, bulk item status 500;
* ``fingerprint`` (FingerprintProcessor): fields sorted, values only, each scalar ``0x00`` + bytes, map
  entries ``0x00`` + key then the value, lists flattened; salt first; standard padded Base64 of the digest;
* ``remove`` (RemoveProcessor): ``field`` (list) or ``keep``, ``ignore_missing``;
* ``rename`` (RenameProcessor): ``field`` -> ``target_field``, ``ignore_missing``;
* ``bytes`` (BytesProcessor, ``ByteSizeValue.parseBytesSizeValue``): a size string (``1kb``) to its bytes,
  units ``b``, ``k``/``kb``, ``m``/``mb``, ``g``/``gb``, ``t``/``tb``, ``p``/``pb`` (powers of 1024), case-insensitive;
* ``inference`` with ``input_output`` (InferenceProcessor + ``InferenceResults.writeResultToField``): the
  embedding at ``output_field`` and ``model_id`` next to it (the document root for a dotless output field),
  appended when the target exists; floats widened to doubles.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import json
import re
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from tests.support.double.errors import DoubleLimit, EsError

CONFIG_SRC = "server/src/main/java/org/elasticsearch/ingest/ConfigurationUtils.java"
KNOWN_PROCESSORS = {
    "append", "attachment", "bytes", "circle", "community_id", "convert", "csv", "date", "date_index_name",
    "dissect", "dot_expander", "drop", "enrich", "fail", "fingerprint", "foreach", "geo_grid", "geoip", "grok",
    "gsub", "html_strip", "inference", "ip_location", "join", "json", "kv", "lowercase", "network_direction",
    "pipeline", "redact", "registered_domain", "remove", "rename", "reroute", "script", "set", "set_security_user",
    "sort", "split", "terminate", "trim", "uppercase", "uri_parts", "urldecode", "user_agent",
}  # fmt: skip
"""Processor types a default distribution registers; the double runs a subset and refuses the rest as a limit."""
COMMON = {"tag", "description", "if", "ignore_failure", "on_failure"}
PARAMS = {
    "set": {"field", "value", "copy_from", "override", "ignore_empty_value", "media_type"},
    "fail": {"message"},
    "fingerprint": {"fields", "target_field", "salt", "method", "ignore_missing"},
    "remove": {"field", "keep", "ignore_missing"},
    "rename": {"field", "target_field", "ignore_missing", "override"},
    "bytes": {"field", "target_field", "ignore_missing"},
    "inference": {"model_id", "input_output", "target_field", "field_map", "inference_config", "ignore_missing"},
}
FINGERPRINT_METHODS = ("MD5", "SHA-1", "SHA-256", "SHA-512", "MurmurHash3")


def config_error(ptype: str, tag: str | None, prop: str | None, reason: str) -> EsError:
    """``ConfigurationUtils.newConfigurationException``: ``parse_exception`` with the processor metadata."""
    text = f"[{prop}] {reason}" if prop else reason
    meta: dict[str, Any] = {"processor_type": ptype}
    if tag:
        meta["processor_tag"] = tag
    if prop:
        meta["property_name"] = prop
    return EsError(400, "parse_exception", text, source=CONFIG_SRC, **meta)


class IngestFailure(Exception):
    """A document failed in the pipeline: the bulk item's status, type and reason."""

    def __init__(self, status: int, err_type: str, reason: str, **extra: Any) -> None:
        super().__init__(reason)
        self.status = status
        self.err_type = err_type
        self.reason = reason
        self.extra = extra

    def error_object(self) -> dict[str, Any]:
        """The bulk item's ``error``."""
        return {"type": self.err_type, "reason": self.reason, **self.extra}


def not_present(path: str, doc: Mapping[str, Any] | None = None) -> IngestFailure:
    """``IngestDocument.Errors.notPresent(fullPath, pathElement)``: ``field [k] not present as part of path [p]``
    (400), ``k`` the first element of ``path`` the (classic) resolution does not find (``IngestDocument.resolve``
    fails at it; ``removeField`` resolves the parent then ``removeDirectChildField`` names the leaf). The double
    names the element where the walk stops also when an intermediate value is not an object (Elasticsearch then
    says ``cannot resolve [k] from object of type [...]``)."""
    key = path.split(".", 1)[0]
    if doc is not None:
        node: Any = doc
        for part in path.split("."):
            if not isinstance(node, Mapping) or part not in node:
                key = part
                break
            node = node[part]
    return IngestFailure(400, "illegal_argument_exception", f"field [{key}] not present as part of path [{path}]")


# -- document access ---------------------------------------------------------------------------------------
def _get(doc: Mapping[str, Any], path: str) -> tuple[bool, Any]:
    node: Any = doc
    for part in path.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return False, None
        node = node[part]
    return True, node


def _set(doc: dict[str, Any], path: str, value: Any) -> None:
    parts = path.split(".")
    node = doc
    for part in parts[:-1]:
        nxt = node.get(part)
        if not isinstance(nxt, dict):
            nxt = {}
            node[part] = nxt
        node = nxt
    node[parts[-1]] = value


def _remove(doc: dict[str, Any], path: str) -> bool:
    parts = path.split(".")
    node: Any = doc
    for part in parts[:-1]:
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    if isinstance(node, dict) and parts[-1] in node:
        del node[parts[-1]]
        return True
    return False


# -- mustache (the variable forms ingest templates use) ------------------------------------------------------
_SECTION = re.compile(r"\{\{[#^/]")


def render_mustache(template: str, ctx: Mapping[str, Any]) -> str:
    """``{{{x}}}`` (raw) and ``{{x}}`` (JSON-escaped) over the document and ``_ingest``; a missing variable renders
    as ``""``. Sections are outside the double's subset and refused."""
    if _SECTION.search(template):
        raise DoubleLimit(f"mustache sections in ingest templates ({template!r})")

    def value(name: str) -> str:
        found, v = _get(ctx, name.strip())
        if not found or v is None:
            return ""
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, (dict, list)):
            return json.dumps(v, separators=(",", ":"))
        return str(v)

    out = re.sub(r"\{\{\{([^}]*)\}\}\}", lambda m: value(m.group(1)), template)
    return re.sub(r"\{\{([^{}]*)\}\}", lambda m: json.dumps(value(m.group(1)))[1:-1], out)


def java_utc_timestamp(now: datetime) -> str:
    """``ZonedDateTime.toString`` of the UTC ingest timestamp (``{{{_ingest.timestamp}}}``): fraction of 3 or 6
    digits when non-zero, seconds left out when seconds and fraction are both zero."""
    s = now.strftime("%Y-%m-%dT%H:%M")
    us = now.microsecond
    if now.second or us:
        s += f":{now.second:02d}"
        if us:
            s += f".{us // 1000:03d}" if us % 1000 == 0 else f".{us:06d}"
    return s + "Z"


# -- a Painless subset ---------------------------------------------------------------------------------------
_TOKEN = re.compile(
    r"\s*(?:(?P<str>'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\")|(?P<num>\d+(?:\.\d+)?)|(?P<op>==|!=|\|\||&&|\?\.|[()\[\];=.!])"
    r"|(?P<id>[A-Za-z_][A-Za-z_0-9]*))"
)


class PainlessError(Exception):
    """A runtime failure of a condition (``script_exception`` ``runtime error``)."""


class Painless:
    """The Painless ``if`` conditions es_rag's assets and the replayed REST tests use, compiled at PUT time and
    evaluated on every document (``ConditionalProcessor``): ``def x = <expr>;`` statements, ``return <expr>;``
    or a bare expression; ``||``, ``&&``, ``!``, ``==``, ``!=``, ``instanceof String|List|Map``, ``ctx.a.b``,
    ``ctx['a']``, ``ctx?.a``, string and number literals, ``null``, ``true``, ``false`` and the methods
    ``trim()``, ``isEmpty()``, ``length()``, ``size()``, ``containsKey(k)``. A null or non-boolean result
    fails the document as Painless does (``cannot cast def [..] to boolean``); anything else is refused at
    compile time.

    Args:
        source: The script source.
    """

    def __init__(self, source: str) -> None:
        self.source = source
        self.tokens = self._lex(source)
        self.pos = 0
        self.program = self._statements()

    # lexer / parser
    def _lex(self, source: str) -> list[tuple[str, str]]:
        out = []
        pos = 0
        while pos < len(source):
            if source[pos:].strip() == "":
                break
            m = _TOKEN.match(source, pos)
            if not m or m.end() == pos:
                raise DoubleLimit(f"Painless outside the double's subset: {source!r} (at {source[pos : pos + 20]!r})")
            kind = m.lastgroup or ""
            out.append((kind, m.group(kind)))
            pos = m.end()
        return out

    def _peek(self, value: str | None = None) -> tuple[str, str] | None:
        if self.pos >= len(self.tokens):
            return None
        tok = self.tokens[self.pos]
        if value is not None and tok[1] != value:
            return None
        return tok

    def _take(self, value: str | None = None) -> tuple[str, str]:
        tok = self._peek(value)
        if tok is None:
            raise DoubleLimit(f"Painless outside the double's subset: {self.source!r}")
        self.pos += 1
        return tok

    def _statements(self) -> list[tuple[str, Any]]:
        stmts: list[tuple[str, Any]] = []
        while self._peek() is not None:
            if self._peek("def"):
                self._take("def")
                name = self._take()[1]
                self._take("=")
                stmts.append(("def", (name, self._expr())))
            elif self._peek("return"):
                self._take("return")
                stmts.append(("return", self._expr()))
            else:
                stmts.append(("return", self._expr()))
            if self._peek(";"):
                self._take(";")
        if not stmts or stmts[-1][0] != "return":
            raise DoubleLimit(f"Painless without a result: {self.source!r}")
        return stmts

    def _expr(self) -> Any:
        left = self._and()
        while self._peek("||"):
            self._take()
            left = ("or", left, self._and())
        return left

    def _and(self) -> Any:
        left = self._cmp()
        while self._peek("&&"):
            self._take()
            left = ("and", left, self._cmp())
        return left

    def _cmp(self) -> Any:
        left = self._unary()
        while True:
            if self._peek("==") or self._peek("!="):
                op = self._take()[1]
                left = (op, left, self._unary())
            elif self._peek("instanceof"):
                self._take()
                kind = self._take()[1]
                if kind not in ("String", "List", "Map"):
                    raise DoubleLimit(f"instanceof {kind}")
                left = ("instanceof", left, kind)
            else:
                return left

    def _unary(self) -> Any:
        if self._peek("!"):
            self._take()
            return ("not", self._unary())
        return self._postfix(self._primary())

    def _primary(self) -> Any:
        kind, value = self._take()
        if value == "(":
            inner = self._expr()
            self._take(")")
            return inner
        if kind == "str":
            return ("lit", bytes(value[1:-1], "utf-8").decode("unicode_escape"))
        if kind == "num":
            return ("lit", float(value) if "." in value else int(value))
        if value in ("null", "true", "false"):
            return ("lit", {"null": None, "true": True, "false": False}[value])
        if kind == "id":
            return ("var", value)
        raise DoubleLimit(f"Painless token {value!r}")

    def _postfix(self, node: Any) -> Any:
        while True:
            if self._peek(".") or self._peek("?."):
                safe = self._take()[1] == "?."
                name = self._take()[1]
                if self._peek("("):
                    self._take("(")
                    args = [] if self._peek(")") else [self._expr()]
                    self._take(")")
                    if name not in ("trim", "isEmpty", "length", "size", "containsKey"):
                        raise DoubleLimit(f"Painless method {name}()")
                    node = ("call", node, name, args, safe)
                else:
                    node = ("get", node, ("lit", name), safe)
            elif self._peek("["):
                self._take("[")
                key = self._expr()
                self._take("]")
                node = ("get", node, key, False)
            else:
                return node

    # evaluation
    def evaluate(self, ctx: Mapping[str, Any]) -> bool:
        """Run the condition on a read-only view of the document.

        Args:
            ctx: The document (``ctx``).

        Raises:
            PainlessError: Null dereference, or a null / non-boolean result.
        """
        env: dict[str, Any] = {"ctx": ctx}
        result: Any = None
        for kind, payload in self.program:
            if kind == "def":
                env[payload[0]] = self._eval(payload[1], env)
            else:
                result = self._eval(payload, env)
                break
        if not isinstance(result, bool):
            shown = "null" if result is None else f"java.lang.{type(result).__name__}"
            raise PainlessError(f"cannot cast def [{shown}] to boolean")
        return result

    def _eval(self, node: Any, env: dict[str, Any]) -> Any:
        op = node[0]
        if op == "lit":
            return node[1]
        if op == "var":
            if node[1] not in env:
                raise PainlessError(f"cannot resolve symbol [{node[1]}]")
            return env[node[1]]
        if op == "or":
            return bool(self._eval(node[1], env)) or bool(self._eval(node[2], env))
        if op == "and":
            return bool(self._eval(node[1], env)) and bool(self._eval(node[2], env))
        if op == "not":
            return not self._eval(node[1], env)
        if op in ("==", "!="):
            same = self._eval(node[1], env) == self._eval(node[2], env)
            return same if op == "==" else not same
        if op == "instanceof":
            value = self._eval(node[1], env)
            return isinstance(value, {"String": str, "List": list, "Map": dict}[node[2]])
        if op == "get":
            target = self._eval(node[1], env)
            key = self._eval(node[2], env)
            if target is None:
                if node[3]:
                    return None
                raise PainlessError(f"cannot access method/field [{key}] from a null def reference")
            return target.get(key) if isinstance(target, Mapping) else None
        if op == "call":
            target = self._eval(node[1], env)
            if target is None:
                if node[4]:
                    return None
                raise PainlessError(f"cannot access method/field [{node[2]}] from a null def reference")
            name, args = node[2], [self._eval(a, env) for a in node[3]]
            if name == "trim":
                return str(target).strip()
            if name == "isEmpty":
                return len(target) == 0
            if name in ("length", "size"):
                return len(target)
            return args[0] in target
        raise AssertionError(op)


# -- inference endpoints ---------------------------------------------------------------------------------------
@dataclass
class InferenceEndpoint:
    """An inference endpoint of the double: ``text_embedding`` with a deterministic embedding of ``dims``.

    Args:
        inference_id: Endpoint id.
        dims: Embedding size (``service_settings.dimensions``).
        task_type: ``text_embedding`` or ``sparse_embedding``.
        service: ``elasticsearch`` (ML node) or ``elastic`` (EIS).
        similarity: ``service_settings.similarity``.
        model_id: ``service_settings.model_id`` (default: the id without its leading dot, as the preconfigured
            ``.multilingual-e5-small-elasticsearch`` reports ``.multilingual-e5-small``-like names).
    """

    inference_id: str
    dims: int = 4
    task_type: str = "text_embedding"
    service: str = "elasticsearch"
    similarity: str = "cosine"
    model_id: str | None = None
    calls: list[str] = field(default_factory=list)

    def embed(self, text: str) -> list[float]:
        """A unit-length hashed bag of words, each component widened from float32 (``asDoubleArray``)."""
        self.calls.append(text)
        vec = [0.0] * self.dims
        for word in re.findall(r"\w+", text.lower()):
            h = int.from_bytes(hashlib.sha256(word.encode()).digest()[:4], "little")
            vec[h % self.dims] += 1.0 if (h >> 31) & 1 else -1.0
        if not any(vec):
            vec[0] = 1.0
        norm = sum(v * v for v in vec) ** 0.5
        return [struct.unpack("f", struct.pack("f", v / norm))[0] for v in vec]

    def rerank(self, query: str, text: str) -> float:
        """A ``rerank`` endpoint's relevance score (>= 0, as ``TextSimilarityRankRetrieverBuilder`` asserts): the
        share of the query's distinct words found in ``text``, plus a tie-breaking 1e-3 per word of overlap."""
        self.calls.append(text)
        q = set(re.findall(r"\w+", query.lower()))
        t = set(re.findall(r"\w+", text.lower()))
        common = len(q & t)
        return common / len(q) + 1e-3 * common if q else 0.0

    def to_dict(self) -> dict[str, Any]:
        """``GET _inference/_all`` entry."""
        settings: dict[str, Any] = {"model_id": self.model_id or self.inference_id.strip("."), "num_threads": 1}
        if self.task_type == "text_embedding":
            settings.update({"dimensions": self.dims, "similarity": self.similarity})
        return {
            "inference_id": self.inference_id,
            "task_type": self.task_type,
            "service": self.service,
            "service_settings": settings,
            "chunking_settings": {"strategy": "sentence", "max_chunk_size": 250, "sentence_overlap": 1},
        }


# -- fingerprint -----------------------------------------------------------------------------------------------
def _fp_bytes(value: Any) -> bytes:
    if isinstance(value, bool):
        return b"\x01" if value else b"\x02"
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, int):
        return struct.pack("<i", value) if -(2**31) <= value < 2**31 else struct.pack("<q", value)
    if isinstance(value, float):
        return struct.pack("<d", value)
    if value is None:
        return b""
    raise IngestFailure(400, "illegal_argument_exception", f"cannot convert object of type [{type(value)}] to bytes")


def _fp_feed(hasher: Any, value: Any) -> None:
    if isinstance(value, list):
        for item in value:
            _fp_feed(hasher, item)
    elif isinstance(value, dict):
        for key in sorted(value):
            hasher.update(b"\x00")
            hasher.update(_fp_bytes(key))
            _fp_feed(hasher, value[key])
    else:
        hasher.update(b"\x00")
        hasher.update(_fp_bytes(value))


def fingerprint(values: list[Any], method: str, salt: str) -> str:
    """The digest ``FingerprintProcessor`` writes for field values already in sorted field-name order."""
    if method == "MurmurHash3":
        raise DoubleLimit("fingerprint method MurmurHash3")
    hasher = hashlib.new({"MD5": "md5", "SHA-1": "sha1", "SHA-256": "sha256", "SHA-512": "sha512"}[method])
    if salt.strip():
        hasher.update(salt.encode("utf-8"))
    for value in values:
        _fp_feed(hasher, value)
    return base64.b64encode(hasher.digest()).decode("ascii")


# -- pipeline ------------------------------------------------------------------------------------------------
@dataclass
class Processor:
    """One parsed processor."""

    type: str
    config: dict[str, Any]
    tag: str | None
    condition: Painless | None
    ignore_failure: bool
    on_failure: list[Processor]


@dataclass
class Pipeline:
    """A parsed pipeline (the PUT body is kept for GET)."""

    pipeline_id: str
    body: dict[str, Any]
    processors: list[Processor]
    on_failure: list[Processor]


FIELD_ACCESS_PATTERN_SRC = (
    "server/src/main/java/org/elasticsearch/ingest/IngestPipelineFieldAccessPattern.java; "
    "PR https://github.com/elastic/elasticsearch/pull/133270 (9.2; docs applies_to stack: ga 9.2)"
)


def parse_pipeline(pipeline_id: str, body: Any, *, version: tuple[int, ...] = (9, 5, 0)) -> Pipeline:
    """``IngestService.validatePipeline`` / ``Pipeline.create``.

    Args:
        pipeline_id: Id.
        body: PUT body.
        version: Cluster version (``field_access_pattern`` is a 9.2 key).
    """
    if not isinstance(body, Mapping):
        raise EsError(400, "parse_exception", "request body is required", source=CONFIG_SRC)
    keys = ["description", "processors", "on_failure", "version", "_meta", "deprecated"]
    if tuple(version[:2]) >= (9, 2):
        keys.append("field_access_pattern")
    for key in body:
        if key not in keys:
            raise EsError(
                400,
                "parse_exception",
                f"pipeline [{pipeline_id}] doesn't support one or more provided configuration parameters [{key}]",
                source="server/src/main/java/org/elasticsearch/ingest/Pipeline.java",
            )
    pattern = body.get("field_access_pattern")
    if pattern is not None and pattern != "classic":
        # IngestPipelineFieldAccessPattern: classic (the default, what the double runs) or flexible
        raise DoubleLimit(
            "the flexible field access pattern"
            if pattern == "flexible"
            else f"the field_access_pattern value [{pattern}] (refusal text not modelled)"
        )
    if "processors" not in body:
        raise config_error("pipeline", None, "processors", "required property is missing")
    if body.get("on_failure") is not None and not body["on_failure"]:
        raise EsError(
            400,
            "parse_exception",
            f"pipeline [{pipeline_id}] cannot have an empty on_failure option defined",
            source="server/src/main/java/org/elasticsearch/ingest/Pipeline.java",
        )
    return Pipeline(
        pipeline_id,
        copy.deepcopy(dict(body)),
        [_parse_processor(p) for p in body.get("processors") or []],
        [_parse_processor(p) for p in body.get("on_failure") or []],
    )


def _parse_processor(spec: Any) -> Processor:
    """``ConfigurationUtils.readProcessor``: the tag is read first; an unknown type is a configuration exception
    (``processor_type`` / ``processor_tag`` metadata); then the ``on_failure`` processors are parsed and an empty
    list refused, then ``factory.create`` (required properties), then the leftover keys are refused."""
    if not isinstance(spec, Mapping) or len(spec) != 1:
        raise EsError(400, "parse_exception", "processor definition must be an object with one key", source=CONFIG_SRC)
    ((ptype, cfg),) = spec.items()
    tag = cfg.get("tag") if isinstance(cfg, Mapping) else None
    if ptype not in KNOWN_PROCESSORS:
        raise config_error(ptype, tag, None, f"No processor type exists with name [{ptype}]")
    if ptype not in PARAMS:
        raise DoubleLimit(f"the [{ptype}] processor")
    cfg = dict(cfg or {})
    on_failure = [_parse_processor(p) for p in cfg.get("on_failure") or []]
    if cfg.get("on_failure") is not None and not cfg["on_failure"]:
        raise config_error(ptype, tag, "on_failure", "processors list cannot be empty")
    _check_config(ptype, tag, cfg)
    extra = sorted(set(cfg) - PARAMS[ptype] - COMMON)
    if extra:
        raise config_error(
            ptype,
            tag,
            None,
            f"processor [{ptype}] doesn't support one or more provided configuration parameters [{', '.join(extra)}]",
        )
    condition = Painless(cfg["if"]) if isinstance(cfg.get("if"), str) else None
    if "if" in cfg and condition is None:
        raise DoubleLimit("a non-string (script object) if condition")
    return Processor(ptype, cfg, tag, condition, bool(cfg.get("ignore_failure", False)), on_failure)


def _check_config(ptype: str, tag: str | None, cfg: dict[str, Any]) -> None:
    def required(prop: str) -> None:
        if cfg.get(prop) is None:
            raise config_error(ptype, tag, prop, "required property is missing")

    if ptype == "set":
        required("field")
        if "value" in cfg and "copy_from" in cfg:
            raise config_error(ptype, tag, "copy_from", "cannot set both `copy_from` and `value` in the same processor")
        if "value" not in cfg and "copy_from" not in cfg:
            raise config_error(ptype, tag, "value", "required property is missing")
    elif ptype == "fail":
        required("message")
    elif ptype == "fingerprint":
        # FingerprintProcessor.Factory: ConfigurationUtils.readList (required, a list), then the size check
        fields = cfg.get("fields")
        if fields is None:
            raise config_error(ptype, tag, "fields", "required property is missing")
        if isinstance(fields, str):
            raise config_error(ptype, tag, "fields", "property isn't a list, but of type [java.lang.String]")
        if not isinstance(fields, list) or not fields:
            raise config_error(ptype, tag, "fields", "must specify at least one field")
        method = cfg.get("method", "SHA-1")
        if method not in FINGERPRINT_METHODS:
            raise config_error(
                ptype,
                tag,
                "method",
                f"[{method}] must be one of the supported hash methods [{','.join(FINGERPRINT_METHODS)}]",
            )
    elif ptype == "remove":
        if cfg.get("field") is None and cfg.get("keep") is None:
            raise config_error(ptype, tag, "keep", "or [field] must be specified")
        if cfg.get("field") is not None and cfg.get("keep") is not None:
            raise config_error(ptype, tag, "keep", "and [field] cannot both be used in the same processor")
    elif ptype == "rename":
        required("field")
        required("target_field")
    elif ptype == "bytes":
        required("field")
    elif ptype == "inference":
        required("model_id")
        if "input_output" in cfg and "target_field" in cfg:
            raise config_error(
                ptype,
                tag,
                "target_field",
                "option is incompatible with [input_output]. Use the [output_field] option to specify where to write "
                "the inference results to.",
            )
        if "input_output" not in cfg:
            raise DoubleLimit("the inference processor without input_output")
        for io in cfg["input_output"] if isinstance(cfg["input_output"], list) else [cfg["input_output"]]:
            for key in ("input_field", "output_field"):
                if not isinstance(io, Mapping) or not io.get(key):
                    raise config_error(ptype, tag, key, "required property is missing")


@dataclass
class IngestContext:
    """What a processor may reach besides the document: the inference endpoints and the timestamp."""

    endpoints: Mapping[str, InferenceEndpoint]
    now: datetime = field(default_factory=lambda: datetime.now(timezone.utc))


def run_pipeline(pipeline: Pipeline, doc: dict[str, Any], meta: dict[str, Any], ictx: IngestContext) -> None:
    """Run ``pipeline`` on ``doc`` (source) and ``meta`` (``_id``, ``_index``), in place.

    Raises:
        IngestFailure: The document fails (the bulk item's error).
    """
    try:
        for proc in pipeline.processors:
            _run(proc, doc, meta, ictx)
    except IngestFailure as exc:
        if not pipeline.on_failure:
            raise
        ingest_meta = {"on_failure_message": exc.reason, "on_failure_processor_type": getattr(exc, "ptype", "")}
        for proc in pipeline.on_failure:
            _run(proc, doc, meta, ictx, ingest_extra=ingest_meta)


def _run(
    proc: Processor,
    doc: dict[str, Any],
    meta: dict[str, Any],
    ictx: IngestContext,
    *,
    ingest_extra: Mapping[str, Any] | None = None,
) -> None:
    view = {**doc, **{k: v for k, v in meta.items() if v is not None}}
    if proc.condition is not None:
        try:
            if not proc.condition.evaluate(view):
                return
        except PainlessError as exc:
            failure = IngestFailure(
                400,
                "script_exception",
                "runtime error",
                caused_by={"type": "class_cast_exception", "reason": str(exc)},
                script=proc.condition.source,
                lang="painless",
            )
            failure.ptype = "conditional"  # type: ignore[attr-defined]
            raise failure from None
    try:
        _execute(proc, doc, meta, ictx, ingest_extra or {})
    except IngestFailure as exc:
        exc.ptype = proc.type  # type: ignore[attr-defined]
        if proc.ignore_failure:
            return
        if proc.on_failure:
            extra = {"on_failure_message": exc.reason, "on_failure_processor_type": proc.type}
            for handler in proc.on_failure:
                _run(handler, doc, meta, ictx, ingest_extra=extra)
            return
        raise


def _target(doc: dict[str, Any], meta: dict[str, Any], path: str) -> tuple[dict[str, Any], str]:
    if path in ("_id", "_index", "_routing"):
        return meta, path
    return doc, path


def _execute(
    proc: Processor, doc: dict[str, Any], meta: dict[str, Any], ictx: IngestContext, ingest_extra: Mapping[str, Any]
) -> None:
    cfg = proc.config
    ingest = {"timestamp": java_utc_timestamp(ictx.now), **ingest_extra}
    template_ctx = {**doc, **{k: v for k, v in meta.items() if v is not None}, "_ingest": ingest}
    if proc.type == "set":
        target, key = _target(doc, meta, render_mustache(str(cfg["field"]), template_ctx))
        if "copy_from" in cfg:
            found, value = _get({**doc, **meta}, str(cfg["copy_from"]))
            if not found:
                if cfg.get("ignore_empty_value"):
                    return
                raise not_present(str(cfg["copy_from"]), {**doc, **meta})
            value = copy.deepcopy(value)
        else:
            raw = cfg["value"]
            value = render_mustache(raw, template_ctx) if isinstance(raw, str) else copy.deepcopy(raw)
        if cfg.get("ignore_empty_value") and (value is None or value == ""):
            return
        if cfg.get("override", True) is False:
            found, current = _get(target, key)
            if found and current is not None:
                return
        if key == "_id" and value is not None and not isinstance(value, str):
            java = {int: "Integer", float: "Double", bool: "Boolean", list: "ArrayList", dict: "LinkedHashMap"}
            raise IngestFailure(
                400,
                "illegal_argument_exception",
                f"_id [{value}] is wrong type, expected assignable to [java.lang.String], not "
                f"[java.lang.{java.get(type(value), type(value).__name__)}]",
            )
        if target is meta:
            meta[key] = value
        else:
            _set(doc, key, value)
    elif proc.type == "fail":
        raise IngestFailure(500, "fail_processor_exception", render_mustache(str(cfg["message"]), template_ctx))
    elif proc.type == "fingerprint":
        values = []
        for name in sorted(cfg["fields"]):
            found, value = _get(doc, name)
            if not found or value is None:
                if cfg.get("ignore_missing"):
                    continue
                raise IngestFailure(
                    400, "illegal_argument_exception", f"missing field [{name}] when calculating fingerprint"
                )
            values.append(value)
        if values:
            _set(
                doc,
                str(cfg.get("target_field", "fingerprint")),
                fingerprint(values, cfg.get("method", "SHA-1"), str(cfg.get("salt", ""))),
            )
    elif proc.type == "remove":
        if cfg.get("keep") is not None:
            raise DoubleLimit("remove with keep")
        fields = cfg["field"] if isinstance(cfg["field"], list) else [cfg["field"]]
        for name in fields:
            path = render_mustache(str(name), template_ctx)
            if not _remove(doc, path) and not cfg.get("ignore_missing"):
                raise not_present(path, doc)
    elif proc.type == "rename":
        src, dst = (
            render_mustache(str(cfg["field"]), template_ctx),
            render_mustache(str(cfg["target_field"]), template_ctx),
        )
        found, value = _get(doc, src)
        if not found:
            if cfg.get("ignore_missing"):
                return
            # RenameProcessor.execute: hasField(path, true) == false -> "field [" + path + "] doesn't exist"
            raise IngestFailure(400, "illegal_argument_exception", f"field [{src}] doesn't exist")
        if _get(doc, dst)[0] and not cfg.get("override", False):
            raise IngestFailure(400, "illegal_argument_exception", f"field [{dst}] already exists")
        _remove(doc, src)
        _set(doc, dst, value)
    elif proc.type == "bytes":
        src = render_mustache(str(cfg["field"]), template_ctx)
        found, value = _get(doc, src)
        if not found or value is None:
            if cfg.get("ignore_missing"):
                return
            if not found:
                raise not_present(src, doc)
            raise IngestFailure(400, "illegal_argument_exception", f"field [{src}] is null, cannot process it.")
        values = value if isinstance(value, list) else [value]
        out = []
        for v in values:
            if not isinstance(v, str):
                raise IngestFailure(
                    400,
                    "illegal_argument_exception",
                    f"field [{src}] of type [{_java_type(v)}] cannot be cast to [java.lang.String]",
                )
            out.append(parse_bytes(v, src))
        _set(doc, str(cfg.get("target_field", src)), out if isinstance(value, list) else out[0])
    elif proc.type == "inference":
        _inference(cfg, doc, ictx)
    else:  # pragma: no cover - parse_pipeline refuses the rest
        raise DoubleLimit(f"the [{proc.type}] processor")


_BYTE_UNITS = {"b": 1, "k": 1024, "kb": 1024, "m": 1024**2, "mb": 1024**2, "g": 1024**3, "gb": 1024**3,
               "t": 1024**4, "tb": 1024**4, "p": 1024**5, "pb": 1024**5}  # fmt: skip


def parse_bytes(text: str, setting: str) -> int:
    """``ByteSizeValue.parseBytesSizeValue``: ``-1`` and ``0`` alone, else a number and a unit."""
    value = text.strip().lower()
    if value in ("-1", "0"):
        return int(value)
    m = re.fullmatch(r"(.*?)(pb|tb|gb|mb|kb|p|t|g|m|k|b)", value)
    if m is None:
        raise IngestFailure(
            400,
            "parse_exception",
            f"failed to parse setting [{setting}] with value [{text}] as a size in bytes: unit is missing or "
            "unrecognized",
        )
    number = m.group(1).strip()
    if re.fullmatch(r"\d+", number):
        return int(number) * _BYTE_UNITS[m.group(2)]
    raise DoubleLimit(f"the byte size [{text}] (fractional or malformed sizes)")


def _java_type(value: Any) -> str:
    names = {bool: "Boolean", int: "Integer", float: "Double", list: "ArrayList", dict: "LinkedHashMap"}
    return "java.lang." + names.get(type(value), type(value).__name__)


def _inference(cfg: dict[str, Any], doc: dict[str, Any], ictx: IngestContext) -> None:
    model_id = str(cfg["model_id"])
    endpoint = ictx.endpoints.get(model_id)
    if endpoint is None:
        raise IngestFailure(404, "resource_not_found_exception", f"Could not find trained model [{model_id}]")
    if endpoint.task_type != "text_embedding":
        raise DoubleLimit(f"inference processor on a {endpoint.task_type} endpoint")
    ios = cfg["input_output"] if isinstance(cfg["input_output"], list) else [cfg["input_output"]]
    results = []
    for io in ios:
        found, text = _get(doc, io["input_field"])
        if not found or text is None:
            if not cfg.get("ignore_missing"):
                raise not_present(str(io["input_field"]), doc)
            text = ""
        elif not isinstance(text, str):
            raise IngestFailure(
                400,
                "illegal_argument_exception",
                f"input field [{io['input_field']}] cannot be processed because it is not a text field",
            )
        results.append(endpoint.embed(text))
    for i, (io, vector) in enumerate(zip(ios, results, strict=True)):
        out = str(io["output_field"])
        base, _, leaf = out.rpartition(".")
        entries: dict[str, Any] = {leaf: vector}
        if i == 0:
            entries["model_id"] = model_id
        for key, value in entries.items():
            path = f"{base}.{key}" if base else key
            found, current = _get(doc, path)
            if found:  # InferenceResults.setOrAppendValue
                _set(doc, path, [*current, value] if isinstance(current, list) else [current, value])
            else:
                _set(doc, path, value)


def simulate_doc(
    pipeline: Pipeline, source: dict[str, Any], meta: dict[str, Any], ictx: IngestContext
) -> dict[str, Any]:
    """One ``_simulate`` result: ``{"doc": {...}}`` or ``{"error": {...}}``."""
    doc = copy.deepcopy(source)
    meta = dict(meta)
    try:
        run_pipeline(pipeline, doc, meta, ictx)
    except IngestFailure as exc:
        return {"error": {"root_cause": [exc.error_object()], **exc.error_object()}}
    return {
        "doc": {
            "_index": meta.get("_index"),
            "_id": meta.get("_id"),
            "_version": "-3",
            "_source": doc,
            "_ingest": {"timestamp": ictx.now.isoformat().replace("+00:00", "Z")},
        }
    }


Handler = Callable[[dict[str, Any]], None]
