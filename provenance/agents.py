"""The agents registry: plain Python functions registered by name with @agent("triage").

An agent receives a ActionRecorder and an input payload, touches memory only through the recorder and
returns a structured decision (a dict of JSON values; the decision hash covers exactly these).
"""
from __future__ import annotations

import importlib
import re
from typing import Callable

from django.conf import settings

AgentFn = Callable[..., dict]
_registry: dict[str, AgentFn] = {}


class UnknownAgent(LookupError):
    pass


NAME_PATTERN = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


def agent(name: str) -> Callable[[AgentFn], AgentFn]:
    if not NAME_PATTERN.match(name):
        raise ValueError(f"agent name {name!r} must match {NAME_PATTERN.pattern}")

    def register(fn: AgentFn) -> AgentFn:
        _registry[name] = fn
        fn.agent_name = name
        return fn

    return register


def get_agent(name: str) -> AgentFn:
    try:
        return _registry[name]
    except KeyError:
        raise UnknownAgent(f"unknown agent {name!r}; registered: {', '.join(sorted(_registry))}") from None


def registered() -> list[str]:
    return sorted(_registry)


def registered_names():
    """The in-process agents' names, as a live view (no copy per lookup)."""
    return _registry.keys()


def load_agent_modules() -> None:
    importlib.import_module("provenance.desk.agents")
    for module in settings.KINTSUGI_AGENT_MODULES:
        importlib.import_module(module)
