"""A request body size limit for the ASGI apps Django does not serve (the MCP endpoint): a body larger
than DATA_UPLOAD_MAX_MEMORY_SIZE answers 413 before the app reads it into memory, as the API does."""
from __future__ import annotations

import json

from django.conf import settings


# A client still sending its body when the 413 comes reads a broken pipe instead of the answer: the rest of
# a body up to this size is read and dropped first, so the client hears why; a larger one is cut off.
DRAIN_MAX_BYTES = 16 * 1024 * 1024


class _TooLarge(Exception):
    pass


async def _drain(receive) -> None:
    drained = 0
    while drained <= DRAIN_MAX_BYTES:
        message = await receive()
        if message["type"] != "http.request":
            return
        drained += len(message.get("body", b""))
        if not message.get("more_body", False):
            return


async def _refuse(send, limit: int) -> None:
    body = json.dumps({"jsonrpc": "2.0", "id": None, "error": {
        "code": -32600, "message": f"the request body is larger than {limit} bytes"}}).encode()
    await send({"type": "http.response.start", "status": 413,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


class BodyLimit:
    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        declared = dict(scope["headers"]).get(b"content-length", b"")
        if declared.isdigit() and int(declared) > limit:
            if int(declared) <= DRAIN_MAX_BYTES:
                await _drain(receive)
            return await _refuse(send, limit)
        seen, started = 0, False

        async def counted():
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:  # no Content-Length (chunked): counted as it arrives
                    raise _TooLarge
            return message

        async def watched(message):
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counted, watched)
        except _TooLarge:
            if not started:
                await _drain(receive)
                await _refuse(send, limit)
