"""Log lines carry the incident and workspace they are about."""
from __future__ import annotations

import io
import json
import logging
import logging.config

from core.logcontext import log_context, logging_config


def _logger(json_lines: bool) -> tuple[logging.Logger, io.StringIO]:
    config = logging_config(json_lines=json_lines, level="INFO")
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(logging.config.DictConfigurator(config).configure_filter(config["filters"]["context"]))
    formatter_cfg = dict(config["formatters"]["kintsugi"])
    if "()" in formatter_cfg:
        from pythonjsonlogger.json import JsonFormatter
        formatter_cfg.pop("()")
        handler.setFormatter(JsonFormatter(**formatter_cfg))
    else:
        handler.setFormatter(logging.Formatter(formatter_cfg["format"]))
    log = logging.getLogger(f"test.logcontext.{json_lines}")
    log.handlers[:] = [handler]
    log.setLevel(logging.INFO)
    log.propagate = False
    return log, stream


def test_json_lines_carry_incident_and_workspace_inside_the_context_only():
    log, stream = _logger(True)
    with log_context(incident=42, workspace="acme"):
        log.warning("repair blocked")
    log.warning("outside")
    inside, outside = (json.loads(line) for line in stream.getvalue().splitlines())
    assert inside["incident"] == 42 and inside["workspace"] == "acme" and inside["message"] == "repair blocked"
    assert inside["level"] == "WARNING"
    assert outside["incident"] is None and outside["workspace"] is None


def test_plain_lines_name_them_too_and_nested_contexts_restore():
    log, stream = _logger(False)
    with log_context(workspace="acme"):
        with log_context(incident=7):
            log.warning("a")
        log.warning("b")
    a, b = stream.getvalue().splitlines()
    assert "incident=7 workspace=acme a" in a
    assert "incident=None workspace=acme b" in b
