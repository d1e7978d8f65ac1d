"""The recording protocol's staged calls (set, get, handoff, a finish that hands off) answered without
Django's request cycle or DRF: the recording entrance (kintsugi_site.recording_entrance) asks here first,
and serves the request through its Django stack whenever this declines.

Why: such a call is an agent's token and a small JSON object applied to the web process's copy of its
recording and staged in Redis (provenance.recording.remote, staging); the request objects, the middleware,
URL resolution, content negotiation, the parser and renderer classes cost several times the call's own
work. It answers exactly what the Django path would have answered:
- it takes only the plain request: POST to `…/actions/<id>/<op>/` with no query string, one JSON body
  (`Content-Type: application/json`, UTF-8) whose Content-Length says its size, an Accept the JSON renderer
  answers (none, `*/*`, `application/json`), one `Authorization: Bearer <key>`, and no redirect due from
  the security middleware;
- the token is looked up as DRF's recording authentication looks it up (provenance.access.onboarding.
  token_for_key: kept a couple of seconds per process, a revocation honoured within that); an unknown,
  revoked or expired one is declined, and refused by the Django path;
- the body is read as the API's JSON parser reads it (its size, depth and NUL limits), or left to it;
- the call is applied only if it stages (remote.staged_call); a call refused, or one that must take the
  row's lock, is declined before anything was written, and the Django path answers it, its errors and
  their audit records included. A store that fails mid-call is answered here as the API answers it
  (declining would try the call twice).
The answer carries the headers the Django path sets (DRF's Allow and Vary, the security middleware's).
"""
from __future__ import annotations

import re
import threading

import orjson
from django.conf import settings
from django.db import connections
from django.db.backends.signals import connection_created
from django.dispatch import receiver
from django.http import HttpResponse
from django.middleware.security import SecurityMiddleware

from kintsugi_site.api.parsers import MAX_JSON_DEPTH, depth
from provenance import validation

CALL = re.compile(r"/api/v1/recording/actions/([0-9]+)/(set|get|handoff|finish)/")
JSON_TYPES = (b"application/json", b"application/json; charset=utf-8", b"application/json;charset=utf-8")
ACCEPTED = (None, b"*/*", b"application/json")
# orjson reads an integer past 64 bits as a float, the API's parser as an int: such a body is left to it.
LONG_NUMBER = re.compile(rb"[0-9]{19}")
DRF_HEADERS = [("Content-Type", "application/json"), ("Vary", "Accept"), ("Allow", "POST, OPTIONS")]
_security: dict[tuple, tuple[SecurityMiddleware, list[tuple[str, str]]]] = {}


class _Request:
    """What the security middleware reads of a request to set an answer's headers."""

    def __init__(self, path: str, secure: bool):
        self.path, self._secure = path, secure

    def is_secure(self) -> bool:
        return self._secure


def _security_headers(path: str, secure: bool) -> list[tuple[str, str]] | None:
    """The headers the security middleware adds to an answer; None when it would redirect instead."""
    key = (secure, settings.SECURE_SSL_REDIRECT, tuple(settings.SECURE_REDIRECT_EXEMPT), settings.SECURE_HSTS_SECONDS,
           settings.SECURE_HSTS_INCLUDE_SUBDOMAINS, settings.SECURE_HSTS_PRELOAD, settings.SECURE_CONTENT_TYPE_NOSNIFF,
           str(settings.SECURE_REFERRER_POLICY), settings.SECURE_CROSS_ORIGIN_OPENER_POLICY)
    known = _security.get(key)
    if known is None:
        middleware = SecurityMiddleware(lambda request: None)
        answered = middleware.process_response(_Request(path, secure), HttpResponse())
        known = _security[key] = (middleware, [(k, v) for k, v in answered.items() if k != "Content-Type"])
    middleware, headers = known
    if middleware.redirect and not secure and not any(p.search(path.lstrip("/")) for p in middleware.redirect_exempt):
        return None
    return headers


def is_secure(scheme: str, header) -> bool:
    """request.is_secure() as Django answers it: the proxy's header when SECURE_PROXY_SSL_HEADER names one
    and it is there, else the connection's scheme. `header(name)`: a request header's value, or None."""
    if settings.SECURE_PROXY_SSL_HEADER:
        name, secure_value = settings.SECURE_PROXY_SSL_HEADER
        value = header(name.removeprefix("HTTP_").lower().replace("_", "-").encode("latin-1"))
        if value is not None:
            return value.decode("latin-1").split(",", 1)[0].strip() == secure_value
    return scheme == "https"


def read_body(raw: bytes):
    """The body as the API's JSON parser reads it; None when that parser would refuse it (or might read
    it otherwise): the Django path then answers."""
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    if (limit is not None and len(raw) > limit) or LONG_NUMBER.search(raw) is not None:
        return None
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    if depth(data) > MAX_JSON_DEPTH or (b"\\u0000" in raw and validation.holds_nul(data)):
        return None
    return data


def render(answer: dict) -> bytes:
    """The answer as DRF's JSON renderer writes it (compact, UTF-8, U+2028 and U+2029 escaped)."""
    body = orjson.dumps(answer)
    if b"\xe2\x80\xa8" in body or b"\xe2\x80\xa9" in body:
        body = body.replace(b"\xe2\x80\xa8", b"\\u2028").replace(b"\xe2\x80\xa9", b"\\u2029")
    return body


def answer(*, method: str, path: str, query: bytes, headers, body: bytes,
           scheme: str) -> tuple[int, list[tuple[str, str]], bytes] | None:
    """(status, headers, body) of a staged call answered here; None: the Django path answers the request.
    `headers`: the request's (name, value) pairs as bytes, names in lower case (ASGI's form)."""
    if method != "POST" or query:
        return None
    matched = CALL.fullmatch(path)
    if matched is None:
        return None
    found: dict[bytes, bytes | None] = {b"content-type": None, b"accept": None, b"authorization": None,
                                        b"content-length": None}
    for name, value in headers:
        if name in found:
            if found[name] is not None:
                return None  # a header given twice: Django would read them joined
            found[name] = value
    if found[b"content-type"] not in JSON_TYPES or found[b"accept"] not in ACCEPTED:
        return None
    if found[b"content-length"] != str(len(body)).encode():
        return None
    extra = _security_headers(path, is_secure(scheme, lambda name: next((v for k, v in headers if k == name), None)))
    parts = (found[b"authorization"] or b"").split()
    if extra is None or len(parts) != 2 or parts[0].lower() != b"bearer":
        return None
    data = read_body(body)
    if not isinstance(data, dict):
        return None
    from provenance.access.onboarding import token_for_key
    from provenance.recording import remote

    token, _opened.connections = None, False
    try:
        token = token_for_key(parts[1].decode("latin-1"))
        if token is None:
            return None  # unknown, revoked or expired: refused (and the refusal recorded) by the Django path
        result = remote.staged_call(token=token, action_id=int(matched[1]), op=matched[2], body=data)
    except Exception as exc:  # noqa: BLE001 - a store away (or a bug): answered as the API answers it
        # Not declined: the call may have reached the store, and the Django path would try it again.
        _opened.connections = True  # a connection that failed is tidied too
        status, own_headers, result = _failed(exc, path, token)
    else:
        if result is None:
            return None
        status, own_headers = 200, []
    finally:
        if _opened.connections:
            _tidy_connections()
    content = render(result)
    return status, [*DRF_HEADERS, *own_headers, *extra, ("Content-Length", str(len(content)))], content


def _failed(exc: Exception, path: str, token) -> tuple[int, list[tuple[str, str]], dict]:
    """The API's answer to an exception (kintsugi_site.api.errors.exception_handler, which logs what is
    unknown and records a refusal): its status, its own headers (Retry-After) and its body."""
    from types import SimpleNamespace

    from kintsugi_site.api.agents import AgentPrincipal
    from kintsugi_site.api.errors import exception_handler

    request = SimpleNamespace(method="POST", path=path, user=AgentPrincipal(token) if token is not None else None)
    response = exception_handler(exc, {"request": request, "view": None})
    return response.status_code, [(k, v) for k, v in response.items() if k != "Content-Type"], response.data


# Whether this thread opened a database connection during the call being answered: a staged call needs
# none, but a token's lookup every few seconds does, and so may rebuilding a copy of a recording (an agent
# registration). Walking every connection after every call instead cost a tenth of the call.
_opened = threading.local()


@receiver(connection_created)
def _note_connection(sender, **kwargs) -> None:
    _opened.connections = True


def _tidy_connections() -> None:
    """Connections opened while answering are tidied as Django tidies them after a request (closed, or
    handed back to the pool: the web processes run with CONN_MAX_AGE=0, so every connection a call used
    was opened by it)."""
    _opened.connections = False
    for conn in connections.all(initialized_only=True):
        if conn.connection is not None:
            conn.close_if_unusable_or_obsolete()
