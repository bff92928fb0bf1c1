"""Credentials never leave the process in text: URLs with a password, API keys and passwords from the environment are
masked in every message, JSON report, ``repr``, trace and log line es_rag writes.

The URL a backend keeps for messages (``ElasticsearchBackend.url``) is redacted where it is made
(:meth:`es_rag.elasticsearch.cluster.ClusterClient.connect`), so everything built from it is clean; :func:`redact` is
the last net, applied to each error and warning the CLI prints.
"""

from __future__ import annotations

import logging
import os
import re
import urllib.parse

MASK = "***"
SECRET_ENV = ("ES_PASSWORD", "ES_API_KEY")
"""Environment variables whose values are secrets (``ES_USERNAME`` is not one)."""
_USERINFO = re.compile(r"(?P<scheme>\b[a-zA-Z][a-zA-Z0-9+.-]*://)(?P<user>[^\s/:@]*):(?P<pw>[^\s/@]+)@")
_AUTH_HEADER = re.compile(r"(?i)\b(authorization['\"]?\s*[:=]\s*['\"]?(?:basic|apikey|bearer)\s+)[A-Za-z0-9+/=._-]+")


def redact_url(url: str) -> str:
    """``url`` with the password of its user-info masked (``http://elastic:***@host:9200``); the rest unchanged.

    Args:
        url: Any URL (or text that is not one: returned as it is).
    """
    if "://" not in url:  # "elastic:pw@host:9200", given without its scheme
        user, at, rest = url.rpartition("@")
        return f"{user.partition(':')[0]}:{MASK}@{rest}" if at and ":" in user else url
    parts = urllib.parse.urlsplit(url)
    if parts.password is None:
        return url
    host = parts.netloc.rpartition("@")[2]
    return urllib.parse.urlunsplit(parts._replace(netloc=f"{parts.username or ''}:{MASK}@{host}"))


def redact(text: str) -> str:
    """``text`` with every URL password, ``Authorization`` header value and secret from the environment
    (:data:`SECRET_ENV`) masked.

    Args:
        text: A message, a JSON document, a log line.
    """
    out = _USERINFO.sub(lambda m: f"{m['scheme']}{m['user']}:{MASK}@", text)
    out = _AUTH_HEADER.sub(lambda m: f"{m[1]}{MASK}", out)
    for name in SECRET_ENV:
        value = os.environ.get(name) or ""
        if len(value) >= 4:  # a one-letter "secret" would mask letters everywhere
            out = out.replace(value, MASK)
    return out


class RedactingFilter(logging.Filter):
    """A logging filter that masks credentials (:func:`redact`) in a record's message before any handler sees it."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        clean = redact(message)
        if clean != message:
            record.msg, record.args = clean, None
        return True


def get_logger(name: str) -> logging.Logger:
    """``logging.getLogger(name)`` with :class:`RedactingFilter` on it: a logger's filters run on the records it
    creates, so an app's own handlers receive them masked too.

    Args:
        name: The module's ``__name__``.
    """
    logger = logging.getLogger(name)
    if not any(isinstance(f, RedactingFilter) for f in logger.filters):
        logger.addFilter(RedactingFilter())
    return logger
