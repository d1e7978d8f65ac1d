"""Calls a lower layer makes into a higher one, without importing it.

A lower layer names what it needs from above (`Provided("...", "draft_repair", ...)`); the higher layer
provides the functions in its AppConfig.ready(). Imports then only point down (the layers contract in
.importlinter), and a call nobody provided is a clear error instead of an AttributeError mid-run.
"""
from __future__ import annotations

from typing import Callable

from django.core.exceptions import ImproperlyConfigured


class Provided:
    def __init__(self, purpose: str, *names: str):
        self._purpose, self._names, self._functions = purpose, frozenset(names), {}

    def provide(self, **functions: Callable) -> None:
        unknown = set(functions) - self._names
        if unknown:
            raise TypeError(f"{self._purpose} needs no {', '.join(sorted(unknown))}")
        self._functions.update(functions)

    def __getattr__(self, name: str) -> Callable:
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            return self._functions[name]
        except KeyError:
            if name in self._names:
                raise ImproperlyConfigured(f"{self._purpose}: nothing provides {name} (is its app installed?)") from None
            raise AttributeError(name) from None
