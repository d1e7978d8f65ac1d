"""Refused attempts to change something leave a record (who, what, when, why refused)."""
from __future__ import annotations

import logging

log = logging.getLogger("kintsugi.api.refusals")


def record_refusal(*, request, view, status: int, code: str, message: str) -> None:
    """Record a refused state-changing request. Never raises: auditing must not turn a 403 into a 500."""
    user = getattr(request, "user", None)
    actor = user if user is not None and user.is_authenticated else None
    log.warning("refused %s %s (%s %s) for %s: %s", request.method, request.path, status, code,
                actor.get_username() if actor else "anonymous", message)
