"""Credentials never leave the process in text: URLs with a password, API keys and passwords from the environment are
masked in every message, JSON report, ``repr``, trace and log line es_rag writes.

The URL a backend keeps for messages (``ElasticsearchBackend.url``) is redacted where it is made
(:meth:`es_rag.elasticsearch.cluster.ClusterClient.connect`), so everything built from it is clean; :func:`redact` is
the last net, applied to each error and warning the CLI prints.
"""

from __future__ import annotations

import json
import logging
import os
import re
import urllib.parse

MASK = "***"
SECRET_ENV = ("ES_PASSWORD", "ES_API_KEY")
"""Environment variables whose values are secrets (``ES_USERNAME`` is not one)."""
# The user-info of a URL in free text ends at the last "@" before whitespace or a quote: a password may hold "/", "@",
# ":", "?" or "#" (typed unencoded); one that holds whitespace or a quote is caught by the seen-secret list below.
_USERINFO = re.compile(r"(?P<scheme>\b[a-zA-Z][a-zA-Z0-9+.-]*://)(?P<user>[^\s/:@'\"]*):(?P<pw>[^\s'\"]*)@")
_AUTH_HEADER = re.compile(r"(?i)\b(authorization['\"]?\s*[:=]\s*['\"]?(?:basic|apikey|bearer)\s+)[A-Za-z0-9+/=._-]+")
_SEEN: set[str] = set()
"""Every password :func:`split_userinfo` has taken out of a URL in this process, in each form a message may quote
it (as typed, percent-decoded, percent-encoded, ``repr``- and JSON-escaped): :func:`redact` masks them wherever they
appear, whatever characters they hold."""
_MIN_SEEN = 4  # a one-letter "secret" would mask letters everywhere; shorter ones rely on the URL pattern


def _remember(password: str) -> None:
    decoded = urllib.parse.unquote(password)
    for secret in (password, decoded):
        forms = {
            secret,
            urllib.parse.quote(secret, safe=""),
            repr(secret)[1:-1],
            json.dumps(secret)[1:-1],
            json.dumps(secret, ensure_ascii=False)[1:-1],
        }
        _SEEN.update(f for f in forms if len(f) >= _MIN_SEEN)


def split_userinfo(url: str) -> tuple[str, str | None, str | None]:
    """``(url without its user-info, user, password)``; ``(url, None, None)`` when it has none.

    The user-info ends at the last ``@`` (RFC 3986 forbids an unencoded ``@`` there, but users type passwords as they
    are: ``http://elastic:S3/cr@t@host:9200`` is user ``elastic``, password ``S3/cr@t``); the user ends at the first
    ``:``. User and password are returned as written (percent-decode them for use). The password is remembered, so
    that :func:`redact` masks it in any later text.

    Args:
        url: A URL, with or without its scheme.
    """
    scheme, sep, rest = url.partition("://")
    if not sep:
        scheme, rest = "", url
    userinfo, at, host = rest.rpartition("@")
    if not at:
        return url, None, None
    user, colon, password = userinfo.partition(":")
    if colon:
        _remember(password)
    return f"{scheme}{sep}{host}", user, password if colon else None


def redact_url(url: str) -> str:
    """``url`` with the password of its user-info masked (``http://elastic:***@host:9200``); the rest unchanged.

    Args:
        url: Any URL (or text that is not one: returned as it is).
    """
    bare, user, password = split_userinfo(url)
    if password is None:
        return url
    scheme, sep, host = bare.rpartition("://")
    return f"{scheme}{sep}{user}:{MASK}@{host}"


def redact(text: str) -> str:
    """``text`` with every URL password, ``Authorization`` header value, secret from the environment
    (:data:`SECRET_ENV`) and password seen in a URL (:func:`split_userinfo`) masked.

    Args:
        text: A message, a JSON document, a log line.
    """
    out = _USERINFO.sub(lambda m: f"{m['scheme']}{m['user']}:{MASK}@", text)
    out = _AUTH_HEADER.sub(lambda m: f"{m[1]}{MASK}", out)
    secrets = set(_SEEN)
    for name in SECRET_ENV:
        value = os.environ.get(name) or ""
        if len(value) >= _MIN_SEEN:
            secrets.add(value)
    for secret in sorted(secrets, key=len, reverse=True):  # a longer form first: no half-masked secret
        out = out.replace(secret, MASK)
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
