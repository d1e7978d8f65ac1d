"""The model client used by every agent and drafter.

One interface, `complete(task, input, facts)`, two backends:
- `offline`: deterministic Python implementations of each task, no network; the default when no
  Gemini key is configured and labelled "offline (deterministic)" wherever its output is shown;
- `gemini`: google-genai with the task's instruction and a structured output schema.
Every call goes through a response cache in FalkorDB keyed by
sha256(model, prompt version, input, sorted facts): the same input gets the same answer, which is what
makes the repair's early stop and the verification baseline meaningful. Each workspace has a cache of
its own, on the FalkorDB server its graphs are placed on (provenance.graph.graph): moving the workspace
moves its answers with it, and one tenant's answers are never served to another.
"""
from __future__ import annotations

import hashlib
import json
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Callable

from django.conf import settings
from pydantic import BaseModel, ValidationError

from core.scrub import scrub_secrets

from provenance.graph import queries
from provenance.graph.graph import Graph, cache_graph_name, workspace_cache_graph


@dataclass(frozen=True)
class ModelTask:
    name: str
    prompt_version: str
    instruction: str
    schema: type[BaseModel]
    offline: Callable[[dict, dict], dict]


_tasks: dict[str, ModelTask] = {}


class ModelCallFailed(ValueError):
    """The model backend refused or failed the call; the message is scrubbed of secrets."""


class ModelOutputError(ValueError):
    """The model's answer did not match the task's schema."""


def _spec(task: str | ModelTask) -> ModelTask:
    """A task registered here by name (the desk's), or the task itself as its caller owns it (a layer
    above provenance passes its own ModelTask: nothing of it is registered here)."""
    return task if isinstance(task, ModelTask) else _tasks[task]


def model_task(name: str, *, prompt_version: str, instruction: str, schema: type[BaseModel]):
    """Register a task: the decorated function is its offline (deterministic) implementation."""

    def register(fn: Callable[[dict, dict], dict]) -> Callable[[dict, dict], dict]:
        _tasks[name] = ModelTask(name, prompt_version, instruction, schema, fn)
        return fn

    return register


def backend_name() -> str:
    return settings.KINTSUGI_MODEL_BACKEND


def model_name() -> str:
    return settings.GEMINI_MODEL if backend_name() == "gemini" else "offline-deterministic-1"


def backend_label() -> str:
    if backend_name() == "gemini":
        return f"Gemini ({settings.GEMINI_MODEL})"
    return "offline (deterministic) model backend"


def cache_key(model: str, prompt_version: str, input: dict, facts: dict) -> str:
    blob = json.dumps([model, prompt_version, input, sorted(facts.items())], sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


class GeminiBackend:
    def __init__(self) -> None:
        from google import genai
        from google.genai import types

        http_options = None
        if settings.GEMINI_BASE_URL:
            http_options = types.HttpOptions(base_url=settings.GEMINI_BASE_URL, api_version="v1beta")
        self._types = types
        self._client = genai.Client(api_key=settings.GEMINI_API_KEY, http_options=http_options)

    def generate(self, task: ModelTask, input: dict, facts: dict) -> dict:
        config = self._types.GenerateContentConfig(
            system_instruction=task.instruction,
            response_mime_type="application/json",
            response_schema=task.schema,
            temperature=0,
        )
        contents = json.dumps({"input": input, "facts": facts}, sort_keys=True)
        try:
            response = self._client.models.generate_content(model=settings.GEMINI_MODEL, contents=contents,
                                                            config=config)
        except Exception as exc:
            # The client's errors repeat the request (URL, headers): only a scrubbed message goes on, and
            # `from None` keeps the original out of logged tracebacks too.
            raise ModelCallFailed(scrub_secrets(f"{task.name}: {type(exc).__name__}: {exc}")) from None
        try:
            return json.loads(response.text or "")
        except json.JSONDecodeError as exc:
            raise ModelOutputError(f"{task.name}: model answer is not JSON") from exc


class ModelClient:
    """Cached access to the configured backend. `calls` counts real backend calls (cache misses)."""

    def __init__(self) -> None:
        self.backend = backend_name()
        self.model = model_name()
        self._gemini = GeminiBackend() if self.backend == "gemini" else None
        # Memo and unsaved answers per workspace: the same key may hold different answers in two
        # workspaces (a live model is not deterministic), and each answer is saved where it was asked.
        self._memo: dict[tuple[str | None, str], dict] = {}
        self.calls = 0
        self.hits = 0
        self._unsaved: dict[tuple[str | None, str | None], list[dict]] = {}
        self._absent: set[tuple[str | None, str]] = set()  # found in no cache by the open prefetched() blocks

    def complete(self, task: str | ModelTask, input: dict, facts: dict | None = None, *, defer: bool = False,
                 workspace: str | None = None, server_url: str | None = None) -> dict:
        """The answer for this task, input and facts in `workspace`'s cache: from the cache, or from
        the backend once. Without a workspace: the shared cache on the default server. `server_url`:
        the server the caller already resolved for the workspace (a recording session's graph), which
        spares a placement lookup per call.

        With defer=True a new answer is saved at the next flush() (the recorder batches them)."""
        spec = _spec(task)
        facts = facts or {}
        key = cache_key(self.model, spec.prompt_version, input, facts)
        if (workspace, key) in self._memo:
            self.hits += 1
            return self._memo[(workspace, key)]
        absent = (workspace, key) in self._absent
        rows = [] if absent else _cache_graph(workspace, server_url).ro_query(queries.CACHE_GET, {"key": key})
        if rows:
            self.hits += 1
            answer = json.loads(rows[0][0])
        else:
            answer = self._generate(spec, input, facts)
            # Saved in batches (flush): the memo answers repeats in this process meanwhile.
            unsaved = self._unsaved.setdefault((workspace, server_url), [])
            unsaved.append({"key": key, "value": json.dumps(answer, sort_keys=True), "model": self.model,
                            "task": spec.name, "at": datetime.now(timezone.utc).isoformat()})
            if not defer or len(unsaved) >= 500:
                self.flush()
        self._memo[(workspace, key)] = answer
        return answer

    def prefetch(self, requests: list[tuple[str | ModelTask, dict, dict | None]], *, workspace: str | None = None
                 ) -> set[tuple[str | None, str]]:
        """Load the cached answers to many (task, input, facts) requests in a few queries, so the
        complete() calls that follow are memo hits. Returns the (workspace, key) pairs no cache had."""
        keys = {cache_key(self.model, _spec(task).prompt_version, input, facts or {}) for task, input, facts in requests}
        missing = sorted(k for k in keys if (workspace, k) not in self._memo)
        if not missing:
            return set()
        cache = workspace_cache_graph(workspace)
        for i in range(0, len(missing), 1000):
            for key, value in cache.ro_query(queries.CACHE_GET_MANY, {"keys": missing[i:i + 1000]}):
                self._memo[(workspace, key)] = json.loads(value)
        return {(workspace, k) for k in missing if (workspace, k) not in self._memo}

    @contextmanager
    def prefetched(self, requests: list[tuple[str | ModelTask, dict, dict | None]], *, workspace: str | None = None):
        """prefetch(), and inside the block a request no cache had is computed without asking the cache
        again: one round trip per miss was a fifth of drafting a large repair with a cold cache. Only
        for work that asks right after the prefetch (an answer another process saves meanwhile is not
        read); outside the block every miss asks the cache on its own."""
        absent = self.prefetch(requests, workspace=workspace) - self._absent
        self._absent |= absent
        try:
            yield
        finally:
            self._absent -= absent

    def request_key(self, task: str | ModelTask, input: dict, facts: dict | None = None) -> str:
        return cache_key(self.model, _spec(task).prompt_version, input, facts or {})

    def memo_answer(self, task: str, input: dict, facts: dict | None = None, *,
                    workspace: str | None = None) -> dict | None:
        """The answer this process already holds for `workspace` (fetched, prefetched or computed),
        without a round trip or a backend call; None when it holds none."""
        return self._memo.get((workspace, self.request_key(task, input, facts)))

    def flush(self) -> None:
        """Write new answers to their workspaces' caches in FalkorDB."""
        while self._unsaved:
            (workspace, server_url), rows = self._unsaved.popitem()
            if rows:
                _cache_graph(workspace, server_url).query(queries.CACHE_PUT_MANY, {"rows": rows})

    def _generate(self, spec: ModelTask, input: dict, facts: dict) -> dict:
        self.calls += 1
        raw = self._gemini.generate(spec, input, facts) if self._gemini else spec.offline(input, facts)
        try:
            return spec.schema.model_validate(raw).model_dump(mode="json")
        except ValidationError as exc:
            raise ModelOutputError(f"{spec.name}: model answer does not match its schema: {exc.error_count()} errors") from exc


def _cache_graph(workspace: str | None, server_url: str | None) -> Graph:
    if server_url and workspace is not None:
        return Graph(cache_graph_name(workspace), server_url)
    return workspace_cache_graph(workspace)


_client: ModelClient | None = None


def get_client() -> ModelClient:
    """One client per process (its memo is a per-process layer over the shared FalkorDB cache)."""
    global _client
    if _client is None or _client.backend != backend_name() or _client.model != model_name():
        _client = ModelClient()
    return _client


def reset_client() -> None:
    global _client
    _client = None


def registered_task(name: str) -> ModelTask:
    return _tasks[name]


def task_names() -> list[str]:
    return sorted(_tasks)


