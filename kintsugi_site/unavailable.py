"""Pages outside the REST API (/metrics, the admin, the dashboard) answer a store that did not answer in
time as the API does: 503 in the error shape with Retry-After, never a 500 (core.errors is the one mapping
of an error to an answer; kintsugi_site.api.errors says how long to wait)."""
from __future__ import annotations

import logging

from django.http import JsonResponse

from core.errors import error_body, store_unavailable

log = logging.getLogger("kintsugi.web")


class AnswerUnavailableStores:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        return self.get_response(request)

    def process_exception(self, request, exception):
        mapped = store_unavailable(exception)
        if mapped is None:
            return None  # Django's own handling: a 500 for what is a bug
        from kintsugi_site.api.errors import RETRY_AFTER_SECONDS

        log.warning("%s %s: a store did not answer: %s", request.method, request.path, exception)
        response = JsonResponse(error_body(*mapped), status=503)
        response["Retry-After"] = str(RETRY_AFTER_SECONDS)
        return response
