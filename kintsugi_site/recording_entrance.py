"""The recording protocol's own entrance: `/api/v1/recording/…` served by Django with a lean middleware
stack, on threads of its own, beside the admin's stack (kintsugi_site.asgi and wsgi route to it by path, as
they route /mcp to the MCP app).

Why: a recording call is an agent's token and a small JSON body. The admin's stack (sessions, their idle
touch, CSRF, the auth middleware, messages, the content-security policy, clickjacking headers, pghistory's
context, axes) did nothing for it and cost more CPU than the call's own work. Here a call passes only what
answers it correctly: the security middleware (TLS redirect and HSTS, as every page), the NUL refusal, a
store past its deadline answered 503; DRF authenticates the recording token (the only credential the
recording views take) and maps errors as everywhere in the API.

Threads: Django's ASGI handler runs every synchronous view of a process on one thread, so a worker's
recording calls waited for each other's Postgres and FalkorDB round trips. Here each call runs on a pool
of KINTSUGI_RECORDING_THREADS threads per web process (each thread its own database connection, bounded by
KINTSUGI_DB_POOL_MAX_SIZE when pooled), and the event loop stays free for the next request.
"""
from __future__ import annotations

import asyncio
import io
from concurrent.futures import ThreadPoolExecutor
from http import HTTPStatus

from asgiref.wsgi import WsgiToAsgiInstance
from django.conf import settings
from django.core.handlers.exception import convert_exception_to_response
from django.core.handlers.wsgi import WSGIHandler
from django.utils.module_loading import import_string

from kintsugi_site import recording_calls

PREFIX = "/api/v1/recording/"
URLCONF = "kintsugi_site.recording_urls"
MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "kintsugi_site.query_nul.RefuseNulInQueryString",
    "kintsugi_site.unavailable.AnswerUnavailableStores",
    "kintsugi_site.recording_entrance.RecordingURLs",
]


def is_recording(path: str) -> bool:
    """Whether a request path is the recording protocol's (and so served here)."""
    return path.startswith(PREFIX)


class RecordingURLs:
    """Resolves the request against the recording protocol's routes only: nothing of the admin or the
    rest of the API is reachable through this entrance."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        request.urlconf = URLCONF
        return self.get_response(request)


class LeanHandler(WSGIHandler):
    """Django's WSGI handler with the recording entrance's middleware instead of settings.MIDDLEWARE."""

    def load_middleware(self, is_async=False):
        # BaseHandler.load_middleware, for this list and synchronous middleware only (all of it is).
        self._view_middleware, self._template_response_middleware, self._exception_middleware = [], [], []
        handler = convert_exception_to_response(self._get_response)
        for middleware_path in reversed(MIDDLEWARE):
            mw = import_string(middleware_path)(handler)
            if hasattr(mw, "process_view"):
                self._view_middleware.insert(0, mw.process_view)
            if hasattr(mw, "process_template_response"):
                self._template_response_middleware.append(mw.process_template_response)
            if hasattr(mw, "process_exception"):
                self._exception_middleware.append(mw.process_exception)
            handler = convert_exception_to_response(mw)
        self._middleware_chain = handler


class RecordingApp:
    """An ASGI app running LeanHandler on a thread pool of its own (the body is read on the event loop)."""

    def __init__(self, threads: int | None = None):
        self.handler = LeanHandler()
        self.executor = ThreadPoolExecutor(max_workers=threads or settings.KINTSUGI_RECORDING_THREADS,
                                           thread_name_prefix="recording")

    async def __call__(self, scope, receive, send):
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client went away before its body was whole
            body += message.get("body", b"")
            if not message.get("more_body", False):
                break
        start, chunks = await asyncio.get_running_loop().run_in_executor(self.executor, self._respond, scope,
                                                                          bytes(body))
        body = b"".join(chunks)
        if not any(name == b"content-length" for name, _ in start["headers"]):
            start["headers"].append((b"content-length", str(len(body)).encode()))  # not chunked: one write
        await send(start)
        await send({"type": "http.response.body", "body": body})

    def _respond(self, scope, body: bytes):
        lean = None if scope.get("root_path") else recording_calls.answer(
            method=scope["method"], path=scope["path"], query=scope.get("query_string", b""), headers=scope["headers"],
            body=body, scheme=scope.get("scheme", "http"))
        if lean is not None:
            status, headers, content = lean
            return {"type": "http.response.start", "status": status,
                    "headers": [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers]}, [content]
        adapter = WsgiToAsgiInstance(None)
        adapter.scope = scope
        environ = adapter.build_environ(scope, io.BytesIO(body))
        answer: dict = {}

        def start_response(status, headers, exc_info=None):
            answer["start"] = {"type": "http.response.start", "status": int(status.split(" ", 1)[0]),
                               "headers": [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers]}

        response = self.handler(environ, start_response)
        try:
            chunks = list(response)
        finally:
            response.close()  # request_finished: the thread's database connection is tidied as after any request
        return answer["start"], chunks


def lean_wsgi(handler):
    """A WSGI app answering the staged calls it can (kintsugi_site.recording_calls), the rest through `handler`."""

    def application(environ, start_response):
        if environ.get("REQUEST_METHOD") == "POST" and not environ.get("SCRIPT_NAME"):
            length = environ.get("CONTENT_LENGTH") or ""
            limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
            if length.isdigit() and (limit is None or int(length) <= limit):
                body = environ["wsgi.input"].read(int(length))
                environ["wsgi.input"] = io.BytesIO(body)  # read again by Django if declined here
                lean = recording_calls.answer(
                    method="POST", path=environ.get("PATH_INFO", ""), query=environ.get("QUERY_STRING", "").encode(
                        "latin-1"), headers=_wsgi_headers(environ), body=body, scheme=environ.get("wsgi.url_scheme",
                                                                                                   "http"))
                if lean is not None:
                    status, headers, content = lean
                    start_response(f"{status} {HTTPStatus(status).phrase}", headers)
                    return [content]
        return handler(environ, start_response)

    return application


def _wsgi_headers(environ) -> list[tuple[bytes, bytes]]:
    headers = [(name[5:].lower().replace("_", "-").encode("latin-1"), value.encode("latin-1"))
               for name, value in environ.items() if name.startswith("HTTP_")]
    headers += [(name.lower().replace("_", "-").encode("latin-1"), environ[name].encode("latin-1"))
                for name in ("CONTENT_TYPE", "CONTENT_LENGTH") if name in environ]
    return headers


def wsgi_dispatch(full, lean):
    """A WSGI app sending the recording protocol's paths to `lean`, everything else to `full`."""
    lean = lean_wsgi(lean)

    def application(environ, start_response):
        app = lean if is_recording(environ.get("PATH_INFO", "")) else full
        return app(environ, start_response)

    return application
