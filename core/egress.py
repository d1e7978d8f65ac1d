"""Egress policy: where the worker may send a request that an administrator's URL points it at (an
agent's replay URL; any outbound webhook belongs here too).

A destination is allowed when every address its host resolves to is global (not loopback, private,
link-local, multicast, reserved, shared or unspecified; that covers cloud metadata addresses such as
169.254.169.254) or is covered by KINTSUGI_EGRESS_ALLOW (comma-separated CIDRs, for agents on the
premises). The deployment's own services (its Postgres, FalkorDB servers, broker, cache, web and MCP
ports, read from settings) are refused even where the allow-list covers their address.

The check runs when a URL is registered (`check_url`) and again when the worker connects (`post_json`):
the host is resolved once, the resolved address is checked, and the connection goes to that address
with the original Host header (and TLS server name), so a DNS answer that changes between the check and
the connection changes nothing. Redirects are never followed. A failure is told in a fixed vocabulary
(the `Outcome` strings), never with the remote side's own text: an incident page must not become a port
scanner of whatever the URL points at.

The delivery connectors (compensation.delivery.connectors) use the same door: the webhook and Stripe through
`exchange`, SMTP through `checked_address` (smtplib connects to the address checked, and keeps the
server's name for TLS). A destination the operator configured for a connector's purpose (its own mail
relay, one of the services above) is passed as `exempt`; nothing a workspace types can add to it.
"""
from __future__ import annotations

import ipaddress
import logging
import socket
from dataclasses import dataclass
from functools import lru_cache
from urllib.parse import urlsplit

import urllib3
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

log = logging.getLogger(__name__)

Address = ipaddress.IPv4Address | ipaddress.IPv6Address


class Outcome:
    """The only words a failed outbound request is described with."""
    REFUSED = "refused by egress policy"
    UNREACHABLE = "unreachable"
    TIMEOUT = "did not answer in time"
    REDIRECT = "answered with a redirect (not followed)"
    ANSWERED_4XX = "answered 4xx"
    ANSWERED_5XX = "answered 5xx"


class EgressRefused(ValueError):
    """The URL's destination is not allowed; the message says why (shown to whoever registered it)."""


class Unresolved(EgressRefused):
    """The host does not resolve (now): nothing to check, and nothing to connect to."""


class EgressFailed(ConnectionError):
    """An outbound request did not get a 2xx answer; `outcome` is one of the Outcome strings, `status`
    the answer's status code (None without an answer)."""

    def __init__(self, outcome: str, status: int | None = None):
        super().__init__(outcome)
        self.outcome = outcome
        self.status = status


@dataclass(frozen=True)
class Answer:
    status: int
    headers: urllib3.HTTPHeaderDict
    body: bytes


@dataclass(frozen=True)
class Destination:
    scheme: str
    host: str
    port: int
    address: Address
    host_header: str
    path: str


def allowed_networks() -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    return _networks(tuple(settings.KINTSUGI_EGRESS_ALLOW))


@lru_cache(maxsize=8)
def _networks(entries: tuple[str, ...]):
    return [ipaddress.ip_network(e.strip(), strict=False) for e in entries if e.strip()]


def parse_allow_list(entries) -> list[str]:
    """The allow-list setting, each entry checked to be a CIDR (a typo must stop the start, not allow
    nothing or everything)."""
    out = []
    for entry in entries:
        entry = entry.strip()
        if not entry:
            continue
        try:
            ipaddress.ip_network(entry, strict=False)
        except ValueError:
            raise ImproperlyConfigured(f"KINTSUGI_EGRESS_ALLOW entry {entry!r} is not an address or CIDR "
                                       f"network") from None
        out.append(entry)
    return out


def _plain(address: Address) -> Address:
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def _resolve(host: str, port: int) -> list[Address]:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError, OSError):
        return []
    seen: list[Address] = []
    for *_, sockaddr in infos:
        address = _plain(ipaddress.ip_address(sockaddr[0].split("%", 1)[0]))
        if address not in seen:
            seen.append(address)
    return seen


def _service_urls() -> list[str]:
    from core import embedded

    urls = [settings.FALKORDB_URL or f"redis://127.0.0.1:{embedded.FALKORDB_PORT}",
            *settings.KINTSUGI_FALKORDB_URLS, settings.CELERY_BROKER_URL,
            getattr(settings, "KINTSUGI_CACHE_URL", "")]
    return [u for u in urls if u]


def own_services() -> set[tuple[str, int]]:
    """(host, port) of every service of this deployment that a request must never reach: its Postgres,
    FalkorDB servers, broker, cache, SMTP server, web and MCP ports."""
    services: set[tuple[str, int]] = set()
    for url in _service_urls():
        try:
            parts = urlsplit(url)
            if parts.hostname and parts.port:
                services.add((parts.hostname, parts.port))
        except ValueError:
            continue
    for db in settings.DATABASES.values():
        host = db.get("HOST") or ""
        # Reached over a unix socket (or libpq's default, which is one), the same server commonly listens
        # on that port on loopback too (a distribution's Postgres, the embedded one started with TCP): the
        # port counts on loopback, where nothing else of this deployment may be reached anyway.
        local = not host or host.startswith("/")
        services.add(("127.0.0.1" if local else host, int(db.get("PORT") or 5432)))
    if getattr(settings, "EMAIL_HOST", ""):
        services.add((settings.EMAIL_HOST, int(settings.EMAIL_PORT)))  # the outbox's SMTP server
    services.add((settings.KINTSUGI_WEB_HOST, int(settings.KINTSUGI_WEB_PORT)))
    services.add((settings.KINTSUGI_MCP_HOST, int(settings.KINTSUGI_MCP_PORT)))
    return services


def _is_own_service(address: Address, port: int) -> bool:
    for host, service_port in own_services():
        if service_port != port:
            continue
        try:
            bound = _plain(ipaddress.ip_address(host))
        except ValueError:
            bound = None
        if bound is not None and bound.is_unspecified:
            return True  # a server bound to every address answers on this port at every local one
        reached = [bound] if bound is not None else _resolve(host, port)
        if address in reached:
            return True
        if address.is_loopback and any(r.is_loopback for r in reached):
            return True  # reached on loopback, it may well listen on every loopback address (127.0.0.2, ::1)
    return False


def refusal(address: Address, port: int) -> str | None:
    """Why `address:port` is refused, or None when a request may go there."""
    address = _plain(address)
    if _is_own_service(address, port):
        return f"{address}:{port} is a service of this deployment"
    if any(address in network for network in allowed_networks()):
        return None
    if not address.is_global or address.is_multicast:
        return f"{address} is not a public address (allow it with KINTSUGI_EGRESS_ALLOW)"
    return None


def checked_address(host: str, port: int, *, exempt: frozenset[tuple[str, int]] = frozenset(),
                    unresolved_ok: bool = False) -> Address | None:
    """Resolve `host` once and check every address it answers (a name that also resolves inward is
    refused); the address to connect to, EgressRefused otherwise. A host that does not resolve is
    Unresolved, or None with `unresolved_ok` (when a destination is saved: the name may exist later, and
    it is checked again on connecting). `exempt`: the operator's own (host, port) for this purpose."""
    addresses = _resolve(host, port)
    if not addresses:
        if unresolved_ok:
            return None
        raise Unresolved(f"host {host!r} does not resolve")
    if (host.lower(), port) not in {(h.lower(), p) for h, p in exempt}:
        for address in addresses:
            why = refusal(address, port)
            if why:
                raise EgressRefused(f"{Outcome.REFUSED}: {why}")
    return addresses[0]


def destination(url: str, *, unresolved_ok: bool = False, schemes: tuple[str, ...] = ("http", "https"),
                exempt: frozenset[tuple[str, int]] = frozenset()) -> Destination | None:
    """Parse, resolve and check `url`; EgressRefused when it may not be called. A host that does not
    resolve is refused too, unless `unresolved_ok` (registration: the name may exist later, and the
    worker checks it again when it connects); then None."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise EgressRefused("the URL does not parse") from None
    if parts.scheme not in schemes or not parts.hostname:
        raise EgressRefused(f"only {' and '.join(s + '://' for s in schemes)} URLs with a host are called")
    if parts.username or parts.password:
        raise EgressRefused("the URL must not carry credentials")
    port = port or {"https": 443, "http": 80, "smtp": 25}[parts.scheme]
    address = checked_address(parts.hostname, port, exempt=exempt, unresolved_ok=unresolved_ok)
    if address is None:
        return None
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return Destination(scheme=parts.scheme, host=parts.hostname, port=port, address=address,
                       host_header=parts.netloc, path=path)


def check_url(url: str, *, exempt: frozenset[tuple[str, int]] = frozenset(),
              schemes: tuple[str, ...] = ("http", "https")) -> str:
    """`url` when it may be registered (a connector's mail server: smtp://host:port among `schemes`);
    EgressRefused (its reason) otherwise."""
    destination(url, unresolved_ok=True, schemes=schemes, exempt=exempt)
    return url


def exchange(method: str, url: str, *, body: bytes | None, timeout: float, headers: dict[str, str] | None = None,
             max_answer: int = 512 * 1024, exempt: frozenset[tuple[str, int]] = frozenset()) -> Answer:
    """One request to `url` at the address checked now, never following a redirect: the answer whatever its
    status (its body cut at `max_answer`). EgressRefused (a subclass, Unresolved, for a name that does not
    resolve now) before connecting; EgressFailed(UNREACHABLE or TIMEOUT) when no answer came (the reason
    is logged, never returned)."""
    dest = destination(url, exempt=exempt)
    kwargs = dict(port=dest.port, timeout=urllib3.Timeout(connect=timeout, read=timeout), retries=False, maxsize=1)
    if dest.scheme == "https":
        pool = urllib3.HTTPSConnectionPool(str(dest.address), server_hostname=dest.host, assert_hostname=dest.host,
                                           cert_reqs="CERT_REQUIRED", **kwargs)
    else:
        pool = urllib3.HTTPConnectionPool(str(dest.address), **kwargs)
    try:
        response = pool.urlopen(method, dest.path, body=body, redirect=False, retries=False, preload_content=False,
                                assert_same_host=False, headers={**(headers or {}), "Host": dest.host_header})
        try:
            content = response.read(max_answer)
        finally:
            response.release_conn()
    except urllib3.exceptions.NewConnectionError as exc:  # before its base class, ConnectTimeoutError
        log.warning("egress to %s failed: %s", url, exc)
        raise EgressFailed(Outcome.UNREACHABLE) from None
    except (urllib3.exceptions.ConnectTimeoutError, urllib3.exceptions.ReadTimeoutError, TimeoutError) as exc:
        log.warning("egress to %s timed out: %s", url, exc)
        raise EgressFailed(Outcome.TIMEOUT) from None
    except (urllib3.exceptions.HTTPError, OSError) as exc:
        log.warning("egress to %s failed: %s", url, exc)
        raise EgressFailed(Outcome.UNREACHABLE) from None
    finally:
        pool.close()
    return Answer(status=response.status, headers=response.headers, body=content)


def post_json(url: str, body: bytes, *, timeout: float, max_answer: int = 512 * 1024,
              headers: dict[str, str] | None = None) -> int:
    """POST `body` to `url` at the address checked now, never following a redirect, with `headers` beside
    the Host and Content-Type it sets. Returns the 2xx status; EgressFailed(outcome, status) otherwise (the
    remote text is logged, never returned)."""
    try:
        answer = exchange("POST", url, body=body, timeout=timeout, max_answer=max_answer,
                          headers={**(headers or {}), "Content-Type": "application/json"})
    except Unresolved as exc:  # a name server away is an outage like any other: retried, not refused
        log.warning("egress to %s: %s", url, exc)
        raise EgressFailed(Outcome.UNREACHABLE) from None
    except EgressRefused as exc:
        log.warning("egress refused %s: %s", url, exc)
        raise EgressFailed(Outcome.REFUSED) from None
    status = answer.status
    if 300 <= status < 400:
        raise EgressFailed(Outcome.REDIRECT, status)
    if 400 <= status < 500:
        raise EgressFailed(Outcome.ANSWERED_4XX, status)
    if status >= 500 or status < 200:
        raise EgressFailed(Outcome.ANSWERED_5XX, status)
    return status
