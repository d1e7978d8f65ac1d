"""`python -m bench fuzz [--minutes N] [--quick] [--http]`: the repair fuzzer run long. Random agent programs
(bench.fuzzdesk.programs) are recorded, flagged and repaired, each compared with the reference
interpreter's clean run, and each repaired desk verified twice (the radius check and the whole-desk
replay, which must agree), until N minutes have passed (default 10; --quick: 1). Prints examples tried
per minute, the program shapes the run exercised, and each counterexample hypothesis shrank, written as a
desk file (bench/results/fuzz-counterexample-K.json) that replays it: copy it into tests/repairs/fuzz_desks/
and the suite keeps it as a red case.

--http: each desk is set up and recorded through the API by kintsugi_client against the production web
server (gunicorn with 2 uvicorn workers on loopback), its agents remote ones whose replay endpoint
kintsugi_client serves (bench.fuzzdesk.remote); the repair here re-runs them through it."""
from __future__ import annotations

import json
import time

from bench import common

SHAPES = ("get", "ingest", "fill", "set", "decide", "refund", "email", "pay", "declared effect kind", "handoff",
          "handoff chain", "conditional handoff", "read after own write", "several flagged sources",
          "a ticket worked twice", "concurrent recordings")


WARM_DESK = {"sources": {"src/0": "src/0: BAD"}, "flagged": ["src/0"], "tickets": {"t0": 5000},
             "roots": [{"agent": "fuzz_agent_0", "ticket": "t0", "ops": [["ingest", "src/0", "a"], ["decide", ["a"]]]}]}


class _TimeUp(BaseException):
    """Ends hypothesis's run without counting as a failure (it lets BaseException through)."""


def _http_checker(actor):
    """A checker over HTTP: the web server started, a superuser's API token, and its stop."""
    from django.contrib.auth import get_user_model
    from rest_framework.authtoken.models import Token

    from bench import agents
    from bench.fuzzdesk import remote
    from kintsugi_client import Client

    admin, _ = get_user_model().objects.get_or_create(username="fuzz-admin", defaults={"is_superuser": True,
                                                                                       "is_staff": True})
    Token.objects.filter(user=admin).delete()
    key = Token.objects.create(user=admin).plain_key
    port = common._free_port()
    server = agents._server(port)
    client = Client(f"http://127.0.0.1:{port}", key)

    def stop():
        server.terminate()
        server.wait(timeout=20)

    # Warm the web workers (their first requests load the application: 20 s on this machine) before the
    # clock starts, as bench.agents does: a tiny desk, a few times, so both workers have served.
    try:
        for _ in range(3):
            found = remote.check(WARM_DESK, admin=client, actor=actor)
            if found:
                raise RuntimeError(f"the warm-up desk did not repair to the reference: {found}")
    except BaseException:
        stop()
        raise
    return (lambda desk: remote.check(desk, admin=client, actor=actor)), stop


def run(quick: bool, *, minutes: float | None = None, http: bool = False) -> dict:
    from django.contrib.auth import get_user_model
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis.reporting import default, with_reporter

    from bench.fuzzdesk import harness, programs, reference

    budget = 60 * (minutes if minutes is not None else (1 if quick else 10))
    actor, _ = get_user_model().objects.get_or_create(username="fuzz-flagger")
    check, stop = _http_checker(actor) if http else ((lambda desk: harness.check(desk, actor=actor)), lambda: None)
    tried, affected, shapes, failures = 0, 0, set(), []
    started = time.perf_counter()
    last_failure: dict = {}

    @settings(max_examples=10 ** 7, deadline=None, database=None, suppress_health_check=list(HealthCheck),
              phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink])
    @given(desk=programs.desks())
    def one(desk):
        nonlocal tried, affected
        if time.perf_counter() - started > budget:
            raise _TimeUp
        tried += 1
        shapes.update(programs.shapes(desk))
        # Worth knowing what the run saw: a desk whose flag changes nothing only checks that a repair
        # leaves alone what it must not touch.
        affected += reference.run(desk, clean=False) != reference.run(desk, clean=True)
        found = check(desk)
        if found:
            last_failure.update(desk=desk, differences=found)  # the last one hypothesis tries is the shrunk one
            raise AssertionError("\n".join(found))
        if tried % 10 == 0:
            common.log(f"fuzz: {tried} desks, {time.perf_counter() - started:.0f}s, 0 counterexamples")

    try:
        # The time-up ends hypothesis's run as an error it did not find, and it offers a seed to
        # "reproduce this failure": no failure, so not said (a counterexample is said below).
        with with_reporter(lambda text: None if str(text).startswith("You can reproduce") else default(text)):
            one()
    except _TimeUp:
        pass
    except AssertionError:
        common.RESULTS_DIR.mkdir(parents=True, exist_ok=True)
        path = common.RESULTS_DIR / f"fuzz-counterexample-{int(time.time())}.json"
        path.write_text(json.dumps(last_failure["desk"], indent=1, sort_keys=True) + "\n")
        failures.append({"file": str(path), "differences": last_failure["differences"]})
    finally:
        stop()
    seconds = time.perf_counter() - started
    per_minute = tried / (seconds / 60) if seconds else 0.0
    rows = [["desks tried", tried], ["of them, changed by their flag", affected], ["per minute", round(per_minute, 1)], ["counterexamples", len(failures)],
            ["seconds", round(seconds)]]
    mode = "over HTTP (kintsugi_client, remote agents, gunicorn)" if http else "in-process"
    common.table(f"repair fuzzer, recorded {mode}", ["", "value"], rows,
                 notes=["checked: the repaired state against the reference's clean run; the radius check and the "
                        "whole-desk replay agree",
                        f"shapes exercised: {', '.join(s for s in SHAPES if s in shapes)}",
                        f"shapes not met this run: {', '.join(s for s in SHAPES if s not in shapes) or 'none'}",
                        *(f"counterexample: {f['file']}: {f['differences'][0][:200]}" for f in failures)])
    return {"mode": "http" if http else "in-process", "tried": tried, "affected": affected, "per_minute": per_minute, "counterexamples": failures, "shapes": sorted(shapes),
            "ok": not failures}
