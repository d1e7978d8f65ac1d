"""Secrets out of text that is about to be stored or shown: model errors echo their request, and a
request to Gemini carries the API key (in a header, or `?key=` when a proxy rewrites it)."""
from __future__ import annotations

import re
from urllib.parse import quote, urlsplit, urlunsplit

from django.conf import settings

REDACTED = "[redacted]"
_PATTERNS = (
    # Google API keys (the Gemini key's shape): AIza + 35 URL-safe characters.
    (re.compile(r"AIza[0-9A-Za-z_-]{20,}"), REDACTED),
    # key=..., api_key: ..., "token": "...", password=... in URLs, headers, JSON and log lines.
    (re.compile(r"(?i)\b((?:x-goog-)?api[_-]?key|key|access[_-]?token|token|secret|password|passwd)"
                r"(\"?'?\s*[:=]\s*\"?'?)([^\s\"'&,;}]+)"), rf"\1\2{REDACTED}"),
    # Authorization: Bearer <token> / Token <token>.
    (re.compile(r"(?i)\b(bearer|token|basic)\s+[A-Za-z0-9._~+/=-]{12,}"), rf"\1 {REDACTED}"),
    # redis://:password@host and other credentials in URLs.
    (re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s:@]*:[^/\s@]+@"), rf"\1{REDACTED}@"),
)


_URL = re.compile(r"(?i)\b[a-z][a-z0-9+.-]*://[^\s\"'<>]+")


def redact_url(url: str) -> str:
    """`url` as it may be shown or stored beside who set it: without the user part (credentials) and with
    its query and fragment replaced by "…" (a receiver's token often rides there). Where, never with what."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port
    except ValueError:
        return REDACTED
    if not parts.scheme or not parts.netloc:
        return url if "?" not in url else url.split("?", 1)[0] + "?…"
    netloc = (f"[{host}]" if ":" in host else host) + (f":{port}" if port else "")
    if parts.username is not None or parts.password is not None:
        netloc = f"{REDACTED}@{netloc}"
    return urlunsplit((parts.scheme, netloc, parts.path, "", "")) + ("?…" if parts.query or parts.fragment else "")


def redact_urls(text: str) -> str:
    """`text` with every URL in it redacted (redact_url)."""
    return _URL.sub(lambda m: redact_url(m.group(0)), text) if text else text


def scrub_secrets(text: str) -> str:
    """`text` with the configured GEMINI_API_KEY and anything shaped like a key or password replaced by
    "[redacted]". Pattern based beyond the configured key: a secret of an unknown shape can get through."""
    if not text:
        return text
    key = getattr(settings, "GEMINI_API_KEY", "") or ""
    if len(key) >= 4:
        for form in {key, quote(key, safe=""), quote(key)}:
            text = text.replace(form, REDACTED)
    for pattern, replacement in _PATTERNS:
        text = pattern.sub(replacement, text)
    return redact_urls(text)
