"""Serve a :class:`~tests.support.double.cluster.StrictCluster` over HTTP on loopback, so the real CLI
(``es-rag selftest --es http://127.0.0.1:PORT``) talks to it through its own client, sockets included.
Every response carries ``X-Elastic-Product: Elasticsearch`` and the ``compatible-with`` media type a
9.x/8.x node answers with."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.support.double.cluster import StrictCluster


def _handler(cluster: StrictCluster, lock: threading.Lock) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # headers and body leave in two writes: with Nagle's algorithm each answer waited for the client's delayed
        # ACK (about 40 ms a request on Linux loopback)
        disable_nagle_algorithm = True

        def log_message(self, format: str, *args: Any) -> None:
            return

        def _dispatch(self) -> None:
            path, _, query = self.path.partition("?")
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length) if length else b""
            ctype = self.headers.get("content-type", "")
            body: Any = None
            if raw:
                text = raw.decode("utf-8")
                body = (
                    [json.loads(x) for x in text.splitlines() if x.strip()] if "ndjson" in ctype else json.loads(text)
                )
            headers = {k.lower(): v for k, v in self.headers.items()}
            with lock:
                status, payload = cluster.handle(self.command, path, query, body, headers)
            data = b"" if payload is None else json.dumps(payload).encode("utf-8")
            major = cluster.version_tuple[0]
            self.send_response(status)
            self.send_header("X-Elastic-Product", "Elasticsearch")
            self.send_header("Content-Type", f"application/vnd.elasticsearch+json;compatible-with={major}")
            if status == 401:
                self.send_header("WWW-Authenticate", 'Basic realm="security", charset="UTF-8"')
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)

        do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = _dispatch

    return Handler


@contextlib.contextmanager
def serve(cluster: StrictCluster) -> Iterator[str]:
    """Serve ``cluster`` on ``127.0.0.1`` (a free port) while the context is open; yields the base URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(cluster, threading.Lock()))
    # shutdown() waits for the serve loop's next poll: 0.5 s by default, per served double
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
