"""Domain errors and the one mapping of an error to what a caller is answered.

A service raises a DomainError subclass that names its API code and HTTP status; `map_domain_error`
turns any exception into (status, code, message, details) for the REST API's handler
(kintsugi_site.api.errors), the MCP tools and a remote agent's replay calls alike. Python's own
refusals keep a meaning too: PermissionError is 403, LookupError 404, ValueError 400. A store that did
not answer within its deadline (Postgres, the broker and cache's Redis) is 503: the caller retries later.
"""
from __future__ import annotations

from core.scrub import scrub_secrets


class DomainError(Exception):
    """A refusal or failure a service raises on purpose. Subclasses set `code` and `status`; they may
    also derive from LookupError, ValueError, ... where callers already catch those."""

    code = "invalid"
    status = 400

    def public_message(self) -> str:
        return first_line(self)

    def details(self):
        return None


def error_body(code: str, message: str, details=None) -> dict:
    return {"error": {"code": code, "message": message, "details": details}}


def first_line(exc: BaseException) -> str:
    """The message an API, MCP or CLI caller sees: its first line, scrubbed of secrets."""
    text = str(exc).strip()
    return scrub_secrets(text.splitlines()[0]) if text else type(exc).__name__


def store_unavailable(exc: BaseException) -> tuple[str, str] | None:
    """(code, message) when `exc` says a store did not answer in time or refused the connection: Postgres
    (connect or statement timeout, server gone), the broker or the cache's Redis. The store's own message
    (addresses, ports) stays in the log."""
    import redis
    from django.db import InterfaceError, OperationalError
    from kombu.exceptions import OperationalError as BrokerError

    if isinstance(exc, (OperationalError, InterfaceError)):
        return "database_unavailable", "the database did not answer in time; try again shortly"
    if isinstance(exc, BrokerError):
        return "broker_unavailable", "the broker did not answer in time; try again shortly"
    if isinstance(exc, (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError)):  # the cache, mostly
        return "store_unavailable", "a store did not answer in time; try again shortly"
    return None


def map_domain_error(exc: Exception) -> tuple[int, str, str, object] | None:
    """(status, code, message, details) for the services' exceptions; None for anything unknown."""
    if isinstance(exc, DomainError):
        return exc.status, exc.code, exc.public_message(), exc.details()
    unavailable = store_unavailable(exc)
    if unavailable is not None:
        return 503, *unavailable, None
    if isinstance(exc, PermissionError):
        return 403, "permission_denied", first_line(exc), None
    if isinstance(exc, LookupError):
        return 404, "not_found", first_line(exc), None
    if isinstance(exc, ValueError):
        return 400, "invalid", first_line(exc), None
    return None
