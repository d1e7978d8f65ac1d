"""The staged calls answered without Django's request cycle (kintsugi_site.recording_calls): the same
answers as the Django path, byte for byte in status and JSON, for generated bodies valid and not (an
entrance with the lean path beside one without it, each on a recording of its own that received the same
calls); the headers the Django path sets; a revoked recording token refused within the per-process cache's
few seconds."""
from __future__ import annotations

import asyncio
import json
import time

import pytest
from django.utils import timezone
from hypothesis import HealthCheck, given, settings, strategies as st

from kintsugi_site import recording_calls
from kintsugi_site.body_limit import BodyLimit
from kintsugi_site.recording_entrance import RecordingApp
from provenance.access import onboarding
from provenance.access.onboarding import issue_agent_token, register_agent
from provenance.models import AgentToken, Workspace
from provenance.recording import remote

pytestmark = pytest.mark.django_db(transaction=True)

WRITER, READER = "lean_writer", "lean_reader"


class Entrance:
    """The recording entrance driven in this process, without a socket, as a server drives it."""

    def __init__(self):
        self.app = BodyLimit(RecordingApp(threads=2), django=True)

    def post(self, path: str, body: bytes | dict, key: str, *, headers: dict | None = None
             ) -> tuple[int, dict[str, str], bytes]:
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        sent = {"content-type": "application/json", "accept": "*/*", "authorization": f"Bearer {key}",
                "content-length": str(len(raw)), **(headers or {})}
        scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
                 "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "",
                 "headers": [(k.encode(), v.encode()) for k, v in sent.items() if v is not None],
                 "server": ("127.0.0.1", 8000), "client": ("127.0.0.1", 40000)}
        answer: dict = {"body": b""}

        async def run():
            delivered = False

            async def receive():
                nonlocal delivered
                if not delivered:
                    delivered = True
                    return {"type": "http.request", "body": raw, "more_body": False}
                await asyncio.sleep(3600)

            async def send(message):
                if message["type"] == "http.response.start":
                    answer["status"] = message["status"]
                    answer["headers"] = {k.decode(): v.decode() for k, v in message["headers"]}
                else:
                    answer["body"] += message.get("body", b"")

            await self.app(scope, receive, send)

        asyncio.run(run())
        return answer["status"], answer["headers"], answer["body"]


@pytest.fixture
def desk(django_user_model):
    admin = django_user_model.objects.create_superuser("lean", "lean@example.com", "pass-1234-kintsugi")
    ws = Workspace.objects.create(name="lean-calls")
    for agent in (WRITER, READER):
        register_agent(workspace=ws, name=agent, replay="http://127.0.0.1:9/replay", actor=admin, reason="t",
                       via="cli")
    token, key = issue_agent_token(workspace=ws, label="t", actor=admin, reason="t", via="cli")
    return {"admin": admin, "ws": ws, "token": token, "key": key}


@pytest.fixture
def entrances(monkeypatch):
    """(lean, django, answered): posts through the entrance as it is, and through the entrance with its
    lean path declining every request (Django and DRF answer, as before the lean path); `answered` says,
    call by call, whether the lean path answered."""
    real, state = recording_calls.answer, {"django": False, "answered": []}

    def answer(**kw):
        if state["django"]:
            return None
        result = real(**kw)
        state["answered"].append(result is not None)
        return result

    monkeypatch.setattr(recording_calls, "answer", answer)
    entrance = Entrance()

    def django(*args, **kw):
        state["django"] = True
        try:
            return entrance.post(*args, **kw)
        finally:
            state["django"] = False

    return entrance.post, django, state["answered"]


def _open(entrance_post, key: str, n: int) -> int:
    status, _, body = entrance_post("/api/v1/recording/actions/", {"agent": WRITER, "payload": {"n": n}}, key)
    assert status == 201, body
    return json.loads(body)["action"]


# --- generated bodies --------------------------------------------------------------------------------------------
_text = st.one_of(st.sampled_from(["faq/1", "shared", "a b", "", "x" * 201, "bad\x00key", "line\u2028sep", "ключ"]),
                  st.text(max_size=12))
_json = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=False, allow_infinity=False),
              _text),
    lambda children: st.one_of(st.lists(children, max_size=3),
                               st.dictionaries(st.one_of(_text, st.sampled_from(["kind", "ticket"])), children,
                                               max_size=3)),
    max_leaves=8)
_clock = st.one_of(st.sampled_from(["2026-03-01", "2026-03-01T12:00:00Z", "yesterday", "", 5]), _text)


def _maybe(**fields):
    """A body with each of `fields` present or left out, and sometimes a field no call takes."""
    return st.fixed_dictionaries({}, optional={**fields, "extra": _json})


BODIES = {
    "set": _maybe(key=_text, value=_json, valid_from=_clock, valid_until=_clock, observed_at=_clock),
    "get": _maybe(key=_text, default=_json),
    "handoff": _maybe(agent=st.one_of(st.sampled_from([READER, WRITER, "nobody", 7]), _text),
                      payload=st.one_of(st.dictionaries(st.sampled_from(["n", "ticket", "amount_cents"]), _json,
                                                        max_size=3), _json)),
}
CALLS = st.lists(st.one_of(
    st.tuples(st.sampled_from(sorted(BODIES)), st.just(None)).flatmap(
        lambda pair: st.tuples(st.just(pair[0]), BODIES[pair[0]])),
    # The well-formed calls too, so that later calls meet a recording that took some.
    st.tuples(st.just("set"), st.fixed_dictionaries({"key": st.sampled_from(["faq/1", "shared"]), "value": _json})),
    st.tuples(st.just("get"), st.fixed_dictionaries({"key": st.sampled_from(["faq/1", "shared", "never"])})),
    st.tuples(st.just("handoff"), st.just({"agent": READER, "payload": {"n": 1}})),
    st.tuples(st.just("get"), _json),  # not an object
), min_size=1, max_size=4)

_run = iter(range(10**6))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(calls=CALLS, decision=_json)
def test_generated_calls_are_answered_as_the_django_path_answers_them(desk, entrances, calls, decision):
    lean, django, _ = entrances
    n = next(_run)
    actions = {"lean": _open(lean, desk["key"], n), "django": _open(django, desk["key"], n)}
    for op, body in [*calls, ("finish", {"decision": decision})]:
        answers = {}
        for which, post in (("lean", lean), ("django", django)):
            status, _, raw = post(f"/api/v1/recording/actions/{actions[which]}/{op}/", body, desk["key"])
            answer = json.loads(raw)
            if isinstance(answer, dict):  # a finish names its own actions and recording
                answer.pop("action", None), answer.pop("recording", None), answer.pop("actions", None)
                if isinstance(answer.get("next"), dict):
                    answer["next"].pop("parent", None)
            answers[which] = (status, answer)
        assert answers["lean"] == answers["django"], (op, body)


def test_the_lean_path_answers_the_plain_staged_calls_with_the_django_paths_headers(desk, entrances):
    lean, django, answered = entrances
    key = desk["key"]
    a, b = _open(lean, key, 1), _open(django, key, 1)
    calls = [("set", {"key": "faq/1", "value": "one\u2028two"}), ("get", {"key": "faq/1"}),
             ("handoff", {"agent": READER, "payload": {"n": 1}}), ("finish", {"decision": {"n": 1}})]
    for op, body in calls:
        answered.clear()
        got = lean(f"/api/v1/recording/actions/{a}/{op}/", body, key)
        assert answered == [True], op  # answered by the lean path, not declined
        want = django(f"/api/v1/recording/actions/{b}/{op}/", body, key)
        assert got[0] == want[0] == 200 and got[1] == want[1], (op, got[1], want[1])
        if op != "finish":
            assert got[2] == want[2], op  # the same bytes (U+2028 escaped as DRF's renderer escapes it)


@pytest.mark.parametrize("headers, raw", [
    ({"content-type": "application/json; charset=latin-1"}, None),
    ({"content-type": "text/plain"}, None),
    ({"accept": "text/html"}, None),
    ({"accept": "application/xml"}, None),
    ({"authorization": "Token abc"}, None),
    ({}, b'{"key": "faq/1", "value": 18446744073709551616}'),  # past 64 bits: an int, not a float
    ({}, b'{"key": "faq/1", "value": NaN}'),
    ({}, b'\xef\xbb\xbf{"key": "faq/1"}'),
    ({}, b'{"key": "faq/1", "value": "\\ud800"}'),
    ({}, b'{"key": "faq/1", "value": "\\u0000"}'),
    ({}, b'{"key": "faq/1", "value": ' + b"[" * 70 + b"]" * 70 + b"}"),
    ({}, b""),
    ({}, b"[1, 2]"),
])
def test_requests_the_lean_path_declines_are_answered_as_before(desk, entrances, headers, raw):
    lean, django, _ = entrances
    key = desk["key"]
    a, b = _open(lean, key, 2), _open(django, key, 2)
    body = raw if raw is not None else json.dumps({"key": "faq/1", "value": "v"}).encode()
    got = lean(f"/api/v1/recording/actions/{a}/set/", body, key, headers=headers)
    want = django(f"/api/v1/recording/actions/{b}/set/", body, key, headers=headers)
    assert got[0] == want[0] and {k: v for k, v in got[1].items() if k != "content-length"} == \
        {k: v for k, v in want[1].items() if k != "content-length"}
    if got[1]["content-type"] == "application/json":  # the browsable API's page names its own action
        assert got[2] == want[2]


def test_red_a_lean_answer_that_differs_is_caught(desk, entrances, monkeypatch):
    """The comparison's red case: a lean path that renders its answer otherwise is told apart."""
    lean, django, answered = entrances
    key = desk["key"]
    a, b = _open(lean, key, 3), _open(django, key, 3)
    monkeypatch.setattr(recording_calls, "render", lambda answer: json.dumps({"key": answer["key"]}).encode())
    got = lean(f"/api/v1/recording/actions/{a}/set/", {"key": "k", "value": 1}, key)
    want = django(f"/api/v1/recording/actions/{b}/set/", {"key": "k", "value": 1}, key)
    assert answered[-1] is True and json.loads(got[2]) != json.loads(want[2])


# --- the recording token, cached per process ---------------------------------------------------------------------
def _refused_after(post, path: str, key: str, *, within: float) -> float | None:
    """Seconds until a call with `key` is refused (401), polling; None if it is not refused within `within`."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < within:
        status, _, _ = post(path, {"key": "faq/1"}, key)
        if status == 401:
            return time.monotonic() - t0
        assert status == 200, status
        time.sleep(0.1)
    return None


def test_a_token_revoked_by_another_process_is_refused_within_the_cache_ttl(desk, entrances):
    lean, _, answered = entrances
    key = desk["key"]
    a = _open(lean, key, 4)
    answered.clear()
    assert lean(f"/api/v1/recording/actions/{a}/get/", {"key": "faq/1"}, key)[0] == 200 and answered == [True]
    # Revoked as another web process revokes it: this process is not told, its cached token goes stale.
    AgentToken.objects.filter(pk=desk["token"].pk).update(revoked_at=timezone.now())
    waited = _refused_after(lean, f"/api/v1/recording/actions/{a}/get/", key,
                            within=onboarding.TOKEN_CACHE_SECONDS + 3)
    assert waited is not None and waited <= onboarding.TOKEN_CACHE_SECONDS + 1, waited


def test_red_a_cache_that_outlives_its_ttl_keeps_a_revoked_token(desk, entrances, monkeypatch):
    """The TTL test's red case: with the cache kept for an hour, the revoked token is still taken."""
    lean, _, _ = entrances
    monkeypatch.setattr(onboarding, "TOKEN_CACHE_SECONDS", 3600.0)
    key = desk["key"]
    a = _open(lean, key, 5)
    assert lean(f"/api/v1/recording/actions/{a}/get/", {"key": "faq/1"}, key)[0] == 200
    AgentToken.objects.filter(pk=desk["token"].pk).update(revoked_at=timezone.now())
    assert _refused_after(lean, f"/api/v1/recording/actions/{a}/get/", key, within=3.0) is None


def test_a_token_revoked_here_is_refused_at_once(desk, entrances):
    lean, _, _ = entrances
    key = desk["key"]
    a = _open(lean, key, 6)
    assert lean(f"/api/v1/recording/actions/{a}/get/", {"key": "faq/1"}, key)[0] == 200
    onboarding.revoke_agent_token(token=AgentToken.objects.get(pk=desk["token"].pk), actor=desk["admin"],
                                  reason="leaked", via="cli")
    status, _, body = lean(f"/api/v1/recording/actions/{a}/get/", {"key": "faq/1"}, key)
    assert status == 401 and json.loads(body)["error"]["code"] == "authentication_failed"


def test_a_committing_finish_reuses_the_processs_copy_instead_of_rebuilding_it(desk, entrances, monkeypatch):
    """A finish that commits is declined by the staged path before anything is applied: the recording's
    copy is handed back for the locked path, which then rebuilds nothing from the graph."""
    lean, _, _ = entrances
    key = desk["key"]
    a = _open(lean, key, 7)
    assert lean(f"/api/v1/recording/actions/{a}/set/", {"key": "faq/7", "value": 7}, key)[0] == 200
    rebuilt = []
    on_snapshot = remote._on_snapshot
    monkeypatch.setattr("provenance.recording.recording_copies._on_snapshot",
                        lambda *args: rebuilt.append(1) or on_snapshot(*args))
    status, _, body = lean(f"/api/v1/recording/actions/{a}/finish/", {"decision": {"n": 7}}, key)
    assert status == 200 and json.loads(body)["committed"] is True and rebuilt == []


def test_a_connection_the_lean_path_opened_for_a_token_lookup_is_closed_after_the_call(desk, entrances):
    """The lean path runs no request cycle, so nothing else closes what it opened (a pool thread would
    keep the connection, or a pool slot, for as long as it lives)."""
    from django.db import connection

    lean, _, _ = entrances
    key = desk["key"]
    a = _open(lean, key, 8)
    body = json.dumps({"key": "faq/8"}).encode()
    call = dict(method="POST", path=f"/api/v1/recording/actions/{a}/get/", query=b"", body=body, scheme="http",
                headers=[(b"content-type", b"application/json"), (b"authorization", f"Bearer {key}".encode()),
                         (b"content-length", str(len(body)).encode())])
    connection.close()
    with onboarding._tokens_lock:
        onboarding._tokens.clear()  # the token is looked up in Postgres again
    answered = recording_calls.answer(**call)
    assert answered is not None and answered[0] == 200
    assert connection.connection is None
