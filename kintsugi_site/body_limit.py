"""Request bodies as they come, within one size limit (DATA_UPLOAD_MAX_MEMORY_SIZE), for the whole ASGI
app (kintsugi_site.asgi): Django's pages and API, and the MCP endpoint.

A body sent with Content-Length is framed by the server: the MCP endpoint refuses one declared larger than
the limit with 413 before reading it; Django refuses it itself (the API's parser, 413).

A body sent without one (Transfer-Encoding: chunked) is read here as it arrives, counted, and refused with
413 as soon as it passes the limit; within it, it is handed on whole with the Content-Length it turned out
to have. Django's ASGI request reads exactly Content-Length bytes and took a chunked body for an empty one:
an approval sent chunked was decided with the default reason instead of the one it carried.
"""
from __future__ import annotations

import json

from django.conf import settings

# A client still sending its body when the 413 comes reads a broken pipe instead of the answer: the rest of
# a body up to this size is read and dropped first, so the client hears why; a larger one is cut off.
DRAIN_MAX_BYTES = 16 * 1024 * 1024


async def _drain(receive, already: int = 0) -> None:
    drained = already
    while drained <= DRAIN_MAX_BYTES:
        message = await receive()
        if message["type"] != "http.request":
            return
        drained += len(message.get("body", b""))
        if not message.get("more_body", False):
            return


def _jsonrpc_error(message: str) -> dict:  # what an MCP client reads
    return {"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": message}}


def _api_error(message: str) -> dict:  # the API's error shape (kintsugi_site.api.errors)
    return {"error": {"code": "request_too_large", "message": message, "details": None}}


async def _refuse(send, limit: int, shape) -> None:
    body = json.dumps(shape(f"the request body is larger than {limit} bytes")).encode()
    await send({"type": "http.response.start", "status": 413,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


class BodyLimit:
    """`app` with bodies read as described above. `django`: the app is Django's, which refuses a declared
    body too large itself, and whose refusals have the API's error shape (else JSON-RPC's, for MCP)."""

    def __init__(self, app, *, django: bool = False):
        self.app, self.django = app, django
        self.shape = _api_error if django else _jsonrpc_error

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None:
            if not self.django and declared.isdigit() and int(declared) > limit:
                if int(declared) <= DRAIN_MAX_BYTES:
                    await _drain(receive)
                return await _refuse(send, limit, self.shape)
            return await self.app(scope, receive, send)
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client went away before its body was whole: nothing to answer
            body += message.get("body", b"")
            if len(body) > limit:
                if message.get("more_body", False):
                    await _drain(receive, already=len(body))
                return await _refuse(send, limit, self.shape)
            if not message.get("more_body", False):
                break
        if body:
            headers = [(k, v) for k, v in scope["headers"] if k != b"transfer-encoding"]
            scope = {**scope, "headers": [*headers, (b"content-length", str(len(body)).encode())]}
        whole, handed = {"type": "http.request", "body": bytes(body), "more_body": False}, False

        async def replay():
            # The body once, whole; then the server's own messages (a disconnect) as they come.
            nonlocal handed
            if not handed:
                handed = True
                return whole
            return await receive()

        return await self.app(scope, replay, send)
