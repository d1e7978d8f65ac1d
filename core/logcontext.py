"""Log lines that say which incident and workspace they are about.

`log_context(incident=..., workspace=...)` binds the ids for the code it wraps (a repair task, a request
to a workspace's API); ContextFilter copies them onto every record, so a plain format can print
`%(incident)s` / `%(workspace)s` and the JSON formatter (KINTSUGI_LOG_JSON, python-json-logger) emits
them as fields a log search can filter on. contextvars keep threads and async tasks apart."""
from __future__ import annotations

import logging
from contextlib import contextmanager
from contextvars import ContextVar

_incident: ContextVar[int | None] = ContextVar("kintsugi_incident", default=None)
_workspace: ContextVar[str | None] = ContextVar("kintsugi_workspace", default=None)


@contextmanager
def log_context(*, incident: int | None = None, workspace: str | int | None = None):
    tokens = []
    if incident is not None:
        tokens.append((_incident, _incident.set(incident)))
    if workspace is not None:
        tokens.append((_workspace, _workspace.set(str(workspace))))
    try:
        yield
    finally:
        for var, token in reversed(tokens):
            var.reset(token)


class ContextFilter(logging.Filter):
    """Adds `incident` and `workspace` (None outside any context) to each record; never drops one."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "incident"):
            record.incident = _incident.get()
        if not hasattr(record, "workspace"):
            record.workspace = _workspace.get()
        return True


def logging_config(*, json_lines: bool, level: str) -> dict:
    """The LOGGING setting: console lines carrying the context, as JSON objects or plain text."""
    fmt = "%(asctime)s %(levelname)s %(name)s incident=%(incident)s workspace=%(workspace)s %(message)s"
    formatter = ({"()": "pythonjsonlogger.json.JsonFormatter",
                  "fmt": "%(asctime)s %(levelname)s %(name)s %(incident)s %(workspace)s %(message)s",
                  "rename_fields": {"levelname": "level", "asctime": "time"}}
                 if json_lines else {"format": fmt})
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "filters": {"context": {"()": "core.logcontext.ContextFilter"}},
        "formatters": {"kintsugi": formatter},
        "handlers": {"console": {"class": "logging.StreamHandler", "filters": ["context"],
                                 "formatter": "kintsugi"}},
        "root": {"handlers": ["console"], "level": level},
    }
