"""The API's JSON parser: a body larger than DATA_UPLOAD_MAX_MEMORY_SIZE is refused with 413 before it
is parsed, and one nested deeper than MAX_JSON_DEPTH with 400, instead of the decoder's RecursionError
(a 40 KB body of brackets) or Django's RequestDataTooBig surfacing as a 500."""
from __future__ import annotations

import json

from django.conf import settings
from rest_framework import parsers, status
from rest_framework.exceptions import APIException, ParseError
from rest_framework.utils.json import strict_constant

from provenance import validation

MAX_JSON_DEPTH = 64


class RequestTooLarge(APIException):
    # Not kintsugi_site.api.errors.ApiError: that module imports DRF's views, which import this parser.
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_code = "request_too_large"


def too_large(limit: int | None = None) -> RequestTooLarge:
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE if limit is None else limit
    return RequestTooLarge(f"the request body is larger than {limit} bytes")


def too_deep() -> ParseError:
    return ParseError(f"JSON parse error - nested deeper than {MAX_JSON_DEPTH} levels")


def depth(value) -> int:
    """How deeply `value` nests lists and objects, walked without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        node, level = stack.pop()
        if isinstance(node, dict):
            node = node.values()
        elif not isinstance(node, list):
            continue
        deepest = max(deepest, level)
        if level > MAX_JSON_DEPTH:
            return level
        stack.extend((child, level + 1) for child in node if isinstance(child, (dict, list)))
    return deepest


def loads_limited(raw: bytes, *, encoding: str = "utf-8", strict: bool = True):
    """json.loads with the depth limit; ParseError for anything that is not acceptable JSON."""
    try:
        data = json.loads(raw.decode(encoding), parse_constant=strict_constant if strict else None)
    except RecursionError:
        raise too_deep() from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, NaN/Infinity
        raise ParseError(f"JSON parse error - {exc}") from None
    if depth(data) > MAX_JSON_DEPTH:
        raise too_deep()
    # A raw NUL is not JSON; an escaped one is, and nothing here can store it (Postgres text, a graph
    # parameter): refused wherever it is, so no field's own check can forget it.
    if b"\\u0000" in raw and validation.holds_nul(data):
        raise ParseError("JSON parse error - a string holds a NUL character (\\u0000)")
    return data


class JSONParser(parsers.JSONParser):
    def parse(self, stream, media_type=None, parser_context=None):
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        raw = stream.read(limit + 1) if stream is not None else b""
        if limit is not None and len(raw) > limit:
            raise too_large(limit)
        encoding = (parser_context or {}).get("encoding") or settings.DEFAULT_CHARSET
        return loads_limited(raw, encoding=encoding, strict=self.strict)
