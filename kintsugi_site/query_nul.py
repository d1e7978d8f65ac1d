"""A NUL in a query string (`?q=%00`, a key or a value) answers 400 in the API's error shape before any
view runs. Postgres refuses a NUL in a string parameter and the graph's parameters cannot carry one, so a
filter that forgot to check for it answered 500 (the case desk's search and assignee filters, the item
list's ticket filter); no page or endpoint has a use for one. Form and JSON bodies are checked where they
are read: a form field says so on its page, the API's JSON parser refuses a NUL anywhere in a body."""
from __future__ import annotations

from django.http import JsonResponse

from provenance import validation


class RefuseNulInQueryString:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if "%00" in request.META.get("QUERY_STRING", "") or "\x00" in request.META.get("QUERY_STRING", ""):
            if any(validation.holds_nul([key, *values]) for key, values in request.GET.lists()):
                return JsonResponse({"error": {"code": "invalid", "details": None,
                                               "message": "the query string contains a control character (NUL)"}},
                                    status=400)
        return self.get_response(request)
