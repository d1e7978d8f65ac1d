"""What the batching contract test drives its clients with: a recording proxy in front of the live server
(each request's call names and status, in the order they arrive; a gate that can hold the first
several-calls request back) and a run of one client or integration in a process of its own
(batching_driver.py / batching_driver.mjs), its JSON lines read as they come."""
from __future__ import annotations

import http.client
import json
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

HERE = Path(__file__).resolve().parent
DRIVERS = {"python": HERE / "batching_driver.py", "langgraph": HERE / "batching_driver.py",
           "agents_sdk": HERE / "batching_driver.py", "typescript": HERE / "batching_driver.mjs"}


class Proxy:
    """Forwards every request to `upstream` and notes it: (last path part, the ops of a several-calls
    request or None, status). `hold()`: the next several-calls request waits until `release()`."""

    def __init__(self, upstream: str):
        up = urlsplit(upstream)
        self.log: list[list] = []
        self._lock = threading.Lock()
        self.gate = threading.Event()
        self.gate.set()
        self.held = threading.Event()  # a request is waiting at the gate
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _forward(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                tail = self.path.split("?")[0].rstrip("/").rsplit("/", 1)[-1]
                ops = [c.get("op") for c in json.loads(body)["calls"]] if tail == "calls" else None
                entry = [tail, ops, None]
                with proxy._lock:
                    proxy.log.append(entry)
                    gated = tail == "calls" and not proxy.gate.is_set() and not proxy.held.is_set()
                    if gated:
                        proxy.held.set()
                if gated:
                    proxy.gate.wait(timeout=120)
                conn = http.client.HTTPConnection(up.hostname, up.port, timeout=120)
                headers = {k: v for k, v in self.headers.items() if k.lower() in ("authorization", "content-type",
                                                                                  "accept")}
                conn.request(self.command, self.path, body=body or None, headers=headers)
                answer = conn.getresponse()
                data = answer.read()
                entry[2] = answer.status
                self.send_response(answer.status)
                for name in ("Content-Type", "Retry-After"):
                    if answer.getheader(name):
                        self.send_header(name, answer.getheader(name))
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                conn.close()

            do_GET = do_POST = do_PATCH = do_DELETE = _forward

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def hold(self) -> None:
        self.held.clear()
        self.gate.clear()

    def release(self) -> None:
        self.gate.set()

    def requests(self) -> list[tuple]:
        """What arrived since the last reset, as (path part, ops) pairs."""
        with self._lock:
            return [(tail, ops) for tail, ops, _ in self.log]

    def statuses(self) -> list:
        with self._lock:
            return [status for _, _, status in self.log]

    def reset(self) -> None:
        with self._lock:
            self.log.clear()

    def close(self) -> None:
        self.gate.set()
        self.server.shutdown()
        self.server.server_close()


@dataclass
class Run:
    """One driver process: its JSON lines as they arrive, and what it ended with."""
    proc: subprocess.Popen
    errors: "tempfile._TemporaryFileWrapper"
    lines: list[dict] = field(default_factory=list)
    _queue: queue.Queue = field(default_factory=queue.Queue)

    def __post_init__(self):
        def pump(stream, into):
            for line in stream:
                into.put(line)
            into.put(None)
        threading.Thread(target=pump, args=(self.proc.stdout, self._queue), daemon=True).start()

    def read(self, timeout: float) -> bool:
        """Take the lines that came within `timeout` seconds; False once the output has ended."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                return True
            if line is None:
                return False
            if line.strip().startswith("{"):
                self.lines.append(json.loads(line))

    def until(self, predicate, timeout: float = 180) -> None:
        deadline = time.monotonic() + timeout
        while not predicate(self):
            if time.monotonic() > deadline:
                raise AssertionError(f"not seen within {timeout}s; lines so far: {self.lines}")
            if not self.read(0.2) and not predicate(self):
                raise AssertionError(f"the driver ended first: {self.lines}; {self.stderr()}")

    def finish(self, timeout: float = 180) -> "Run":
        deadline = time.monotonic() + timeout
        while self.read(max(0.1, deadline - time.monotonic())):
            if time.monotonic() > deadline:
                self.proc.kill()
                raise AssertionError(f"the driver did not end within {timeout}s: {self.lines}")
        self.proc.wait(timeout=30)
        assert self.proc.returncode == 0, self.stderr()
        return self

    def stderr(self) -> str:
        self.errors.seek(0)
        return self.errors.read()[-3000:]

    def done(self) -> int:
        return max([line["done"] for line in self.lines if "done" in line], default=0)

    def got(self) -> list:
        return [line["got"] for line in self.lines if "got" in line]

    def last(self, name: str):
        found = [line[name] for line in self.lines if name in line]
        return found[-1] if found else None


def start(kind: str, mode: str, base: str, token: str, script: list, *, buffer: int = 64,
          variant: str | None = None) -> Run:
    program = [shutil.which("node") or "node"] if kind == "typescript" else [sys.executable]
    args = [*program, str(DRIVERS[kind]), kind, mode, base, token, str(buffer), json.dumps(script)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("DJANGO")}
    errors = tempfile.TemporaryFile(mode="w+")  # a file, so a chatty library never fills a pipe and stalls
    proc = subprocess.Popen(args + (["--variant", variant] if variant else []), stdout=subprocess.PIPE,
                            stderr=errors, text=True, env=env, cwd=HERE.parents[1])
    return Run(proc, errors)
