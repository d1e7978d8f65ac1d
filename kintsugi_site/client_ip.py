"""The client's address as login throttling sees it."""
from __future__ import annotations

from django.conf import settings


def client_ip(request) -> str | None:
    """REMOTE_ADDR; behind KINTSUGI_TRUSTED_PROXIES proxies, the X-Forwarded-For entry the outermost
    trusted proxy appended. Entries left of it are whatever the client claimed, so they are never used:
    otherwise a guesser would pick a fresh address for every attempt."""
    proxies = settings.KINTSUGI_TRUSTED_PROXIES
    remote = request.META.get("REMOTE_ADDR")
    if proxies <= 0:
        return remote
    forwarded = [a.strip() for a in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",") if a.strip()]
    if len(forwarded) < proxies:
        return remote
    return forwarded[-proxies]
