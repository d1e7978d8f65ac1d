"""drf-spectacular hooks: every operation documents the error shape and the statuses it can answer with, and
what each body really takes."""
import json


ERROR_SCHEMA = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["code", "message", "details"],
            "properties": {
                "code": {"type": "string", "description": "stable machine-readable code"},
                "message": {"type": "string"},
                "details": {"nullable": True, "description": "field errors, or what the code needs"},
            },
        }
    },
}

_DESCRIPTIONS = {
    "400": "Invalid request", "401": "Not authenticated", "403": "Refused: the role does not allow it",
    "404": "Not found (or in a workspace the caller is not a member of)", "405": "Method not allowed",
    "406": "Not acceptable", "409": "Conflict", "415": "Unsupported media type",
    "429": "Throttled", "503": "A backing store is unavailable",
}
_EVERY_OPERATION = ("401", "403", "404", "405", "406", "429", "503")
_WITH_BODY = ("400", "409", "415")


def add_error_responses(result, generator, request, public):
    result.setdefault("components", {}).setdefault("schemas", {})["Error"] = ERROR_SCHEMA
    ref = {"$ref": "#/components/schemas/Error"}
    for path, operations in result.get("paths", {}).items():
        for method, operation in operations.items():
            codes = _EVERY_OPERATION + (_WITH_BODY if method in ("post", "put", "patch") else ("400",))
            responses = operation.setdefault("responses", {})
            for code in codes:
                responses.setdefault(code, {"description": _DESCRIPTIONS[code],
                                            "content": {"application/json": {"schema": ref}}})
    return result


# drf-spectacular's callbacks take no parameters: the replay callback's signature headers are added here.
REPLAY_HEADERS = [
    {"name": "X-Kintsugi-Timestamp", "in": "header", "required": True, "schema": {"type": "integer"},
     "description": "Unix seconds when kintsugi signed the request; refuse it more than 300 s from now."},
    {"name": "X-Kintsugi-Signature", "in": "header", "required": True,
     "schema": {"type": "string", "pattern": "^v1=[0-9a-f]{64}$"},
     "description": 'v1=<hex HMAC-SHA256(replay_secret, "<timestamp>." + raw body bytes)>.'},
]


def add_replay_headers(result, generator, request, public):
    for operations in result.get("paths", {}).values():
        for operation in operations.values():
            for expressions in (operation.get("callbacks") or {}).get("replay", {}).values():
                for callback in expressions.values():
                    callback["parameters"] = REPLAY_HEADERS
    return result


def patch_takes_what_put_takes(result, generator, request, public):
    """PATCH here is the same update as PUT (sources and tickets are keyed by the id in the body, and the
    reason is always required), not a partial one: its body is documented as PUT's, so that a client
    generated from the schema sends the id and the reason. drf-spectacular documents every PATCH body as
    partial ("Patched…", nothing required), which called an empty body valid."""
    for ops in result.get("paths", {}).values():
        if "patch" in ops and "put" in ops and "requestBody" in ops["put"]:
            ops["patch"]["requestBody"] = ops["put"]["requestBody"]
    used = json.dumps(result.get("paths", {}))
    schemas = result.get("components", {}).get("schemas", {})
    for name in [n for n in schemas if n.startswith("Patched") and f'"#/components/schemas/{n}"' not in used]:
        del schemas[name]
    return result
