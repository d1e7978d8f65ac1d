"""A scriptable stand-in for the Gemini API on 127.0.0.1, for tests that drive the real google-genai client.

It speaks `POST /v1beta/models/<model>:generateContent` and answers with
`{"candidates": [{"content": {"role": "model", "parts": [{"text": ...}]}, "finishReason": "STOP"}]}`.
What it answers is scripted per test:
- `fake.queue(answer, ...)`: answers in order (each a dict -> its JSON as the text, a str -> the text as is,
  or `FakeReply(status, body)` for an error reply);
- `fake.responder = fn`: `fn(request) -> answer` when the queue is empty; `request` is a `FakeRequest`
  with the model, the parsed JSON body, the system instruction and the user text.
Every request is recorded in `fake.requests`.
"""
from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable


@dataclass
class FakeRequest:
    path: str
    model: str
    body: dict
    headers: dict

    @property
    def system_instruction(self) -> str:
        parts = (self.body.get("systemInstruction") or {}).get("parts") or []
        return "".join(p.get("text", "") for p in parts)

    @property
    def user_text(self) -> str:
        return "".join(p.get("text", "") for c in self.body.get("contents", []) for p in c.get("parts", []))

    @property
    def user_json(self) -> dict:
        return json.loads(self.user_text)

    @property
    def response_schema(self) -> dict | None:
        return (self.body.get("generationConfig") or {}).get("responseSchema")


@dataclass
class FakeReply:
    status: int
    body: Any


class FakeGemini:
    def __init__(self) -> None:
        self.requests: list[FakeRequest] = []
        self.responder: Callable[[FakeRequest], Any] | None = None
        self._queue: list[Any] = []
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # --- scripting ---
    def queue(self, *answers: Any) -> None:
        with self._lock:
            self._queue.extend(answers)

    def reset(self) -> None:
        with self._lock:
            self._queue.clear()
            self.requests.clear()
            self.responder = None

    def _answer_for(self, request: FakeRequest) -> Any:
        with self._lock:
            self.requests.append(request)
            if self._queue:
                return self._queue.pop(0)
        if self.responder is not None:
            return self.responder(request)
        return FakeReply(500, {"error": {"code": 500, "message": "fake gemini: nothing scripted", "status": "INTERNAL"}})

    # --- lifecycle ---
    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> "FakeGemini":
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep test output quiet
                pass

            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw or b"{}")
                except json.JSONDecodeError:
                    body = {}
                path = self.path.split("?", 1)[0]
                if not (path.startswith("/v1beta/models/") and path.endswith(":generateContent")):
                    return self._send(404, {"error": {"code": 404, "message": f"no route {path}", "status": "NOT_FOUND"}})
                model = path[len("/v1beta/models/"):-len(":generateContent")]
                try:
                    answer = fake._answer_for(FakeRequest(path, model, body, dict(self.headers)))
                except Exception as exc:  # a broken responder shows up as a server error, not a hang
                    answer = FakeReply(500, {"error": {"code": 500, "message": repr(exc), "status": "INTERNAL"}})
                if isinstance(answer, FakeReply):
                    return self._send(answer.status, answer.body)
                text = answer if isinstance(answer, str) else json.dumps(answer)
                self._send(200, {
                    "candidates": [{"content": {"role": "model", "parts": [{"text": text}]}, "finishReason": "STOP"}],
                    "modelVersion": model,
                })

            def _send(self, status: int, payload: Any) -> None:
                data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="fake-gemini", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
