"""One exception handler for the whole API: every error is `{"error": {"code", "message", "details"}}`
with the right status, and nothing ever returns a stack trace.

Domain exceptions from the services are mapped here (core.errors.map_domain_error: each carries its code and
status), not caught in views, so a view stays a thin caller.
Refused attempts to change something (POST answered 401/403/404/409/429) leave an audit record too.
"""
from __future__ import annotations

import logging

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied, RequestDataTooBig
from django.http import Http404
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from compensation.review.services import DecisionRefused, ReviewRefused
from core.errors import error_body, first_line, map_domain_error  # noqa: F401  (the API's names for them)
from core.vocabulary import Via
from kintsugi_site.api.parsers import too_large
from provenance.access.refusals import record_refusal

log = logging.getLogger("kintsugi.api")

REFUSALS_AUDITED = {401, 403, 404, 409, 429}
# A 503 (FalkorDB, the broker or a remote agent away, or past its deadline) asks the client to retry after
# this long: about one outage sweep, after which blocked work has been picked up again.
RETRY_AFTER_SECONDS = 30


class ApiError(exceptions.APIException):
    """An error a view raises on purpose, with its own stable code and optional details."""

    def __init__(self, message: str, *, code: str, status_code: int = 400, details=None):
        super().__init__(detail=message, code=code)
        self.status_code, self.code, self.details = status_code, code, details


_DRF_CODES = {
    exceptions.NotAuthenticated: "not_authenticated",
    exceptions.AuthenticationFailed: "authentication_failed",
    exceptions.PermissionDenied: "permission_denied",
    exceptions.NotFound: "not_found",
    exceptions.MethodNotAllowed: "method_not_allowed",
    exceptions.NotAcceptable: "not_acceptable",
    exceptions.UnsupportedMediaType: "unsupported_media_type",
    exceptions.Throttled: "throttled",
    exceptions.ParseError: "parse_error",
    exceptions.ValidationError: "invalid",
}


def exception_handler(exc: Exception, context: dict) -> Response:
    request = context.get("request")
    if isinstance(exc, RequestDataTooBig):  # a body Django itself refused to read into memory
        exc = too_large()
    elif isinstance(exc, Http404):
        exc = exceptions.NotFound()
    elif isinstance(exc, DjangoPermissionDenied):
        exc = exceptions.PermissionDenied()
    if isinstance(exc, exceptions.APIException):
        response = drf_exception_handler(exc, context)  # keeps WWW-Authenticate and Retry-After headers
        if isinstance(exc, ApiError):
            body = error_body(exc.code, str(exc.detail), exc.details)
        elif isinstance(exc, exceptions.ValidationError):
            body = error_body("invalid", "the request is not valid; see details", exc.detail)
        elif isinstance(exc, exceptions.Throttled):
            body = error_body("throttled", str(exc.detail), {"retry_after": exc.wait})
        else:
            code = next((c for cls, c in _DRF_CODES.items() if isinstance(exc, cls)), exc.default_code)
            body = error_body(code, str(exc.detail), None)
        response.data = body
    else:
        mapped = map_domain_error(exc)
        if mapped is None:
            # Unknown failure: log it with its traceback for operators, answer without one.
            log.exception("API request failed: %s %s", getattr(request, "method", "?"), getattr(request, "path", "?"))
            response = Response(error_body("server_error", "internal error; it has been logged", None),
                                status=status.HTTP_500_INTERNAL_SERVER_ERROR)
        else:
            code_status, code, message, details = mapped
            response = Response(error_body(code, message, details), status=code_status)
            if code_status == 503:  # a dependency is away: say when to come back
                response["Retry-After"] = str(RETRY_AFTER_SECONDS)
            elif isinstance(details, dict) and isinstance(details.get("retry_after"), int):
                response["Retry-After"] = str(details["retry_after"])  # a 409 that passes: as its message says
    # The compensation services record their own refusals (item.refused) before raising them.
    already_recorded = isinstance(exc, (ReviewRefused, DecisionRefused))
    if request is not None and request.method not in ("GET", "HEAD", "OPTIONS") and \
            response.status_code in REFUSALS_AUDITED and not already_recorded:
        _record_refusal(request, context.get("view"), response)
    return response


def _record_refusal(request, view, response: Response) -> None:
    kwargs = getattr(view, "kwargs", None) or {}
    subject_type = getattr(view, "basename", None) or "api"
    subject_id = kwargs.get("pk", "")
    incident_id = None
    if subject_type == "incident" and str(subject_id).isdigit() and response.status_code != 404:
        incident_id = int(subject_id)
    error = response.data["error"]
    actor, workspace, attempted = getattr(request, "user", None), None, f"{request.method} {request.path}"
    token = getattr(actor, "token", None)
    if token is not None:  # a recording token: not a person, its workspace's chain records the refusal
        actor, workspace, attempted = None, token.workspace, f"{attempted} (recording token {token.prefix})"
    record_refusal(actor=actor, via=Via.API, attempted=attempted, subject_type=subject_type, subject_id=subject_id,
                   status=response.status_code, code=error["code"], message=error["message"],
                   incident_id=incident_id, workspace=workspace)
