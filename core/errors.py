"""Domain errors and the one mapping of an error to what a caller is answered.

A service raises a DomainError subclass that names its API code and HTTP status; `map_domain_error`
turns any exception into (status, code, message, details) for the REST API's handler
(kintsugi_site.api.errors), the MCP tools and a remote agent's replay calls alike. Python's own
refusals keep a meaning too: PermissionError is 403, LookupError 404, ValueError 400.
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


def map_domain_error(exc: Exception) -> tuple[int, str, str, object] | None:
    """(status, code, message, details) for the services' exceptions; None for anything unknown."""
    if isinstance(exc, DomainError):
        return exc.status, exc.code, exc.public_message(), exc.details()
    if isinstance(exc, PermissionError):
        return 403, "permission_denied", first_line(exc), None
    if isinstance(exc, LookupError):
        return 404, "not_found", first_line(exc), None
    if isinstance(exc, ValueError):
        return 400, "invalid", first_line(exc), None
    return None
