"""Checking that a replay request comes from kintsugi: the standard library only; copy it anywhere.

kintsugi signs every replay POST it sends to an agent's replay_url with the registration's replay
secret (`krs_…`, shown once when the agent is registered or its secret rotated):

    X-Kintsugi-Timestamp: <unix seconds>
    X-Kintsugi-Signature: v1=<hex HMAC-SHA256(secret, "<timestamp>." + raw body bytes)>

and the JSON body carries a unique `replay_id`. A client refuses (401) a request whose headers are
missing, whose signature does not match, whose timestamp is more than 300 s from now, or whose
replay_id it has already seen:

    seen = SeenReplays()
    try:
        request = verify_request(raw_body, headers, secret, seen=seen)   # the parsed JSON body
    except ForgedReplay as exc:
        answer 401 (str(exc) says why), run nothing
"""
from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
from collections import OrderedDict
from typing import Mapping

__all__ = ["ForgedReplay", "SeenReplays", "sign", "verify", "verify_request", "TIMESTAMP_HEADER",
           "SIGNATURE_HEADER", "TOLERANCE_SECONDS"]

TIMESTAMP_HEADER = "X-Kintsugi-Timestamp"
SIGNATURE_HEADER = "X-Kintsugi-Signature"
TOLERANCE_SECONDS = 300
VERSION = "v1"


class ForgedReplay(Exception):
    """A replay request that does not prove it comes from kintsugi now: answer 401, run nothing."""


def _mac(body: bytes, secret: str, timestamp: int) -> str:
    return hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()


def sign(body: bytes, secret: str, timestamp: int | None = None) -> tuple[int, str]:
    """(timestamp, X-Kintsugi-Signature value) for `body`, as kintsugi signs a replay request."""
    timestamp = int(time.time()) if timestamp is None else int(timestamp)
    return timestamp, f"{VERSION}={_mac(body, secret, timestamp)}"


def verify(body: bytes, timestamp, signature, secret: str, *, tolerance: int = TOLERANCE_SECONDS,
           now: float | None = None) -> int:
    """Return the timestamp if `signature` signs `body` at `timestamp` with `secret` and the timestamp is
    within `tolerance` seconds of `now`; raise ForgedReplay otherwise. Says nothing of replay_id
    (SeenReplays does)."""
    if timestamp in (None, "") or signature in (None, ""):
        raise ForgedReplay(f"missing {TIMESTAMP_HEADER} or {SIGNATURE_HEADER}")
    try:
        ts = int(str(timestamp).strip())
    except ValueError:
        raise ForgedReplay(f"{TIMESTAMP_HEADER} is not unix seconds") from None
    now = time.time() if now is None else now
    if abs(now - ts) > tolerance:
        raise ForgedReplay(f"{TIMESTAMP_HEADER} is more than {tolerance} s from now")
    expected = f"{VERSION}={_mac(body, secret, ts)}"
    if not hmac.compare_digest(expected.encode(), str(signature).strip().encode()):
        raise ForgedReplay(f"{SIGNATURE_HEADER} does not match the body")
    return ts


class SeenReplays:
    """The replay_ids accepted lately, so the same signed request is run once. An id only needs keeping
    while its timestamp is within the tolerance: after that the timestamp check refuses it anyway."""

    def __init__(self, *, keep_seconds: float = 2 * TOLERANCE_SECONDS, most: int = 100_000):
        self.keep_seconds, self.most = keep_seconds, most
        self._seen: OrderedDict[str, float] = OrderedDict()
        self._lock = threading.Lock()

    def remember(self, replay_id, *, now: float | None = None) -> None:
        """Note `replay_id` as seen; ForgedReplay if it was seen before (or is missing)."""
        if not isinstance(replay_id, str) or not replay_id:
            raise ForgedReplay("the request carries no replay_id")
        now = time.time() if now is None else now
        with self._lock:
            while self._seen and (next(iter(self._seen.values())) < now - self.keep_seconds
                                  or len(self._seen) >= self.most):
                self._seen.popitem(last=False)
            if replay_id in self._seen:
                raise ForgedReplay(f"replay_id {replay_id[:40]!r} was already seen")
            self._seen[replay_id] = now


def _header(headers: Mapping[str, str], name: str):
    value = headers.get(name)
    if value is None:  # a plain dict is not case-insensitive as HTTP headers are
        value = next((v for k, v in headers.items() if k.lower() == name.lower()), None)
    return value


def verify_request(body: bytes, headers: Mapping[str, str], secret: str, *, seen: SeenReplays,
                   tolerance: int = TOLERANCE_SECONDS, now: float | None = None) -> dict:
    """Verify a whole replay request (signature, timestamp, then its replay_id) and return its JSON
    body; ForgedReplay if any check fails. The replay_id is remembered only once the signature holds,
    so a forger cannot spend real ids."""
    verify(body, _header(headers, TIMESTAMP_HEADER), _header(headers, SIGNATURE_HEADER), secret,
           tolerance=tolerance, now=now)
    try:
        request = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise ForgedReplay("the signed body is not JSON") from None
    if not isinstance(request, dict):
        raise ForgedReplay("the signed body is not a JSON object")
    seen.remember(request.get("replay_id"), now=now)
    return request
