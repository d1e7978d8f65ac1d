"""The client's address as login throttling sees it, and which proxies may name it.

One setting, KINTSUGI_TRUSTED_PROXIES (comma-separated addresses or CIDRs of the reverse proxies in front
of the app; empty by default), decides whose `X-Forwarded-For` is believed. The web server applies it:
gunicorn's `forwarded_allow_ips` (kintsugi_site/gunicorn_conf.py, which `make demo` and the production
command load) hands it to uvicorn's proxy-headers middleware, which replaces the peer address with the
forwarded one only when the peer is a listed proxy. Left to their own defaults both trust 127.0.0.1, so
anyone who reaches the server on loopback could name any address per request and step around the
per-address lockout; with nothing listed they trust nobody.

Django's side therefore takes REMOTE_ADDR as it comes: reading `X-Forwarded-For` again here would let a
client add entries the server already judged."""
from __future__ import annotations

import ipaddress

from django.core.exceptions import ImproperlyConfigured


def trusted_proxies(value: str | list[str]) -> list[str]:
    """The trusted-proxy setting as a list of networks (gunicorn's own strict spelling); a typo or a
    bare count stops the start instead of trusting the wrong hosts."""
    entries = value.split(",") if isinstance(value, str) else value
    out = []
    for entry in (e.strip() for e in entries):
        if not entry:
            continue
        if entry.isdigit() and "." not in entry:
            raise ImproperlyConfigured(f"KINTSUGI_TRUSTED_PROXIES lists the proxies' addresses (e.g. 10.0.0.2 or "
                                       f"10.0.0.0/24), not how many there are: {entry!r}")
        try:
            out.append(str(ipaddress.ip_network(entry, strict=False)))
        except ValueError:
            raise ImproperlyConfigured(f"KINTSUGI_TRUSTED_PROXIES entry {entry!r} is not an address or CIDR "
                                       f"network") from None
    return out


def client_ip(request) -> str | None:
    """REMOTE_ADDR: the peer, or the client a trusted proxy named (the web server decided which)."""
    return request.META.get("REMOTE_ADDR")
