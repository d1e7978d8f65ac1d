"""Where an open HTTP recording's calls are staged between its durable points: one Redis hash per recording
(the cache's Redis), written by one atomic script per call, with no Postgres transaction.

What is durable when: the Recording row in Postgres is written when an action opens (its id is allocated
under the workspace's row lock), when an effect is recorded (before the agent is told it may perform it,
the row holds the effect and everything staged before it), and when the recording commits, is abandoned or
expires. Between those points the calls that only stage (set, get, handoff, an action's finish that does
not commit) go to the hash: `v` the state's version, `s` the state (JSON, as the row's), `o` the open
action's record when only it changed since `s` was written (a set, get or handoff writes that record alone,
not the whole recording again: the state is `s` with `o` in its place), `t` when it was last touched, `f`
a fence.

The two writers never overwrite each other:
- a staged call is written only if the hash's version is still the one its copy was built from and no
  fence is up (`STAGE`); otherwise its process reloads the hash, or takes the row's lock;
- a Postgres writer holds the row's lock and raises the fence before it reads the state (`claim`: the
  newer of the hash's and the row's), so no staged call lands while it works; after its transaction
  commits it publishes the state it wrote and lowers its own fence (`release`), never a later writer's.
  A writer that rolled back leaves its fence up: the next one, under the lock, claims the newer state again.

A recording whose hash is gone while its row is open (the staging store was emptied) may have lost calls
its agent was answered: it is refused and closed, never committed short (provenance.recording.remote).
"""
from __future__ import annotations

import json
import threading
import time
import uuid
from typing import NamedTuple

from django.conf import settings

# KEYS[1] the hash; ARGV: the version the copy was built from, the new state (or the open action's record),
# now, the idle timeout, TTL, the field written: 's' or 'o'.
# Answers 1 (written), 0 (another version, or no hash), -1 (a writer holds the row), -2 (idle too long).
STAGE = """
if redis.call('HEXISTS', KEYS[1], 'f') == 1 then return -1 end
local v = redis.call('HGET', KEYS[1], 'v')
if not v or tonumber(v) ~= tonumber(ARGV[1]) then return 0 end
local t = redis.call('HGET', KEYS[1], 't')
if t and tonumber(ARGV[3]) - tonumber(t) > tonumber(ARGV[4]) then return -2 end
if ARGV[6] == 'o' then
  redis.call('HSET', KEYS[1], 'v', tonumber(ARGV[1]) + 1, 'o', ARGV[2], 't', ARGV[3])
else
  redis.call('HSET', KEYS[1], 'v', tonumber(ARGV[1]) + 1, 's', ARGV[2], 't', ARGV[3])
  redis.call('HDEL', KEYS[1], 'o')
end
redis.call('EXPIRE', KEYS[1], ARGV[5])
return 1
"""
# KEYS[1]; ARGV: the fence's token. Raises it and answers what is staged: {v, s, t} (nil when no hash).
CLAIM = """
local staged = redis.call('HMGET', KEYS[1], 'v', 's', 't', 'o')
if staged[1] then redis.call('HSET', KEYS[1], 'f', ARGV[1]) end
return staged
"""
# KEYS[1], and KEYS[2] the open action's index key when one is open; ARGV: version, state, fence token,
# TTL, the row's touched_at, the hash's name (the index's value). Writes the state (and the row's touched_at,
# `r`) unless a newer one is there; lowers the fence only if it is this writer's. (`t` is a staged call's.)
RELEASE = """
local v = redis.call('HGET', KEYS[1], 'v')
if not v or tonumber(ARGV[1]) >= tonumber(v) then
  redis.call('HSET', KEYS[1], 'v', ARGV[1], 's', ARGV[2], 'r', ARGV[5])
  redis.call('HDEL', KEYS[1], 'o')
end
if ARGV[3] == '' or redis.call('HGET', KEYS[1], 'f') == ARGV[3] then redis.call('HDEL', KEYS[1], 'f') end
redis.call('EXPIRE', KEYS[1], ARGV[4])
if KEYS[2] then redis.call('SET', KEYS[2], ARGV[6], 'EX', ARGV[4]) end
return 1
"""
WRITTEN, STALE, FENCED, IDLE = 1, 0, -1, -2

_client = None
_client_lock = threading.Lock()
_scripts: dict = {}


class Staged(NamedTuple):
    version: int
    state: dict
    touched: float
    row_touched: float | None = None  # the row's touched_at when its writer published this state


class Located(NamedTuple):
    """An open recording found by one of its actions' ids, as staged: what a web process holding no copy
    of it needs to rebuild one (provenance.recording.remote)."""

    pk: int
    staged: Staged


def _redis():
    global _client
    with _client_lock:
        if _client is None:
            import redis

            _client = redis.Redis.from_url(settings.KINTSUGI_CACHE_URL, socket_timeout=5, socket_connect_timeout=5)
            for name, text in (("stage", STAGE), ("claim", CLAIM), ("release", RELEASE)):
                _scripts[name] = _client.register_script(text)
        return _client


def _prefix() -> str:
    return settings.CACHES["default"].get("KEY_PREFIX", "")


def _key(row) -> str:
    # The row's id and the staging id its state was given when it opened: a key no other recording (of
    # another database that reused the id) can hold.
    return f"{_prefix()}:recording:{row.pk}:{row.state.get('staged')}"


def _action_key(workspace_id: int, action_id: int) -> str:
    # Which recording holds an action: written when the action opens, so that a web process that holds
    # no copy of the recording (its calls reach the other workers too) finds what is staged of it.
    return f"{_prefix()}:recording-action:{workspace_id}:{action_id}"


def _ttl() -> int:
    return 2 * settings.KINTSUGI_RECORDING_TIMEOUT_SECONDS + 60


def stage(row, *, version: int, state: dict, record: dict | None = None) -> int:
    """Write a staged call's state over `version`: WRITTEN, STALE, FENCED or IDLE (nothing written).
    `record`: the open action's record, when the call changed nothing else of the state (then only it is
    written: a recording's earlier actions are not written again with every call of its latest)."""
    _redis()
    payload, field = (json.dumps(state), "s") if record is None else (json.dumps(record), "o")
    return int(_scripts["stage"](keys=[_key(row)], args=[version, payload, time.time(),
                                                       settings.KINTSUGI_RECORDING_TIMEOUT_SECONDS, _ttl(), field]))


def _state(s: bytes, o: bytes | None) -> dict:
    """The staged state: `s`, with `o` (the open action's record written since) in its record's place."""
    state = json.loads(s)
    if o is not None:
        record = json.loads(o)
        records = state["records"]
        records[next(i for i, r in enumerate(records) if r["id"] == record["id"])] = record
        state["keys"].setdefault(str(record["id"]), {})  # as every call of the action leaves it
    return state


def read(row) -> Staged | None:
    """What is staged, without a fence (None: nothing, or a writer holds the row)."""
    return _read(_key(row))


def _read(key: str) -> Staged | None:
    v, s, t, f, r, o = _redis().hmget(key, "v", "s", "t", "f", "r", "o")
    if v is None or f is not None:
        return None
    return Staged(int(v), _state(s, o), float(t or 0), float(r) if r is not None else None)


def version(row) -> int | None:
    """The staged version, if a staged call may land on it now (None: nothing staged, or a writer holds
    the row)."""
    v, f = _redis().hmget(_key(row), "v", "f")
    return int(v) if v is not None and f is None else None


def locate(workspace_id: int, action_id: int) -> Located | None:
    """The open recording holding `action_id` in the workspace and what is staged of it, found without
    Postgres; None: not known here, or a writer holds it (the row, under its lock, answers)."""
    name = _redis().get(_action_key(workspace_id, action_id))
    if name is None:
        return None
    staged = _read(name.decode())
    if staged is None or staged.row_touched is None:
        return None
    return Located(int(name.decode().rsplit(":", 2)[1]), staged)


def claim(row) -> tuple[str, Staged | None]:
    """Under the row's lock: raise a fence and read what is staged. Returns the fence's token."""
    token = uuid.uuid4().hex
    _redis()
    v, s, t, o = _scripts["claim"](keys=[_key(row)], args=[token])
    return token, (Staged(int(v), _state(s, o), float(t or 0)) if v is not None else None)


def release(row, *, version: int, state: dict, token: str = "") -> None:
    """After the row's transaction committed: publish what it wrote and lower this writer's fence; the
    open action, if one is, is indexed (locate)."""
    _redis()
    key = _key(row)
    index = [_action_key(row.workspace_id, state["open"])] if state.get("open") is not None else []
    _scripts["release"](keys=[key, *index], args=[version, json.dumps(state), token, _ttl(),
                                                  row.touched_at.timestamp(), key])


def drop(row) -> None:
    """The recording is closed (committed, abandoned, expired): nothing of it is staged any more."""
    _redis().delete(_key(row), *(_action_key(row.workspace_id, r["id"]) for r in row.state.get("records", ())))


def touched(row) -> float | None:
    """When a staged call last touched the recording (None: none did)."""
    t = _redis().hget(_key(row), "t")
    return float(t) if t is not None else None
