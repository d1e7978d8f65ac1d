"""Idle sessions expire KINTSUGI_SESSION_IDLE_SECONDS after the last request. Saving the session on every
request (Django's SESSION_SAVE_EVERY_REQUEST) would cost every page a database write; pushing the expiry
forward at most once a minute costs one write a minute, and moves the idle deadline by at most that
minute."""
from __future__ import annotations

import time

TOUCH_KEY = "_touched"
TOUCH_EVERY_SECONDS = 60


class SessionTouchMiddleware:
    """Placed after SessionMiddleware, so that the session it marks modified is saved, with a fresh
    expiry and cookie, by SessionMiddleware on the way out."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        session = getattr(request, "session", None)
        # Only a session the request already read: an anonymous page that never looked at it stays free.
        if session is not None and session.accessed and not session.is_empty():
            now = int(time.time())
            if now - int(session.get(TOUCH_KEY, 0)) >= TOUCH_EVERY_SECONDS:
                session[TOUCH_KEY] = now
        return response


def touched_at_login(sender, request, user, **kwargs) -> None:
    """A login has just set the session's expiry: the minute starts there."""
    if getattr(request, "session", None) is not None:
        request.session[TOUCH_KEY] = int(time.time())
