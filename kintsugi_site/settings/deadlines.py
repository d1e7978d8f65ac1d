"""How long anything a request waits on may take (docs/operations.md, "Deadlines"): past it the request
answers 503 with Retry-After (kintsugi_site.api.errors, kintsugi_site.unavailable), never 500 and never
a hang. Imported by kintsugi_site.settings.base."""
import os

import environ

env = environ.Env()

# Postgres: a connection that is not established within this long is an outage (a frozen server accepts
# the TCP connection and never answers the login). libpq counts whole seconds, at least 2.
KINTSUGI_DB_CONNECT_TIMEOUT_SECONDS = max(2, env.int("KINTSUGI_DB_CONNECT_TIMEOUT_SECONDS", default=3))
# A web request's statement is cancelled past this (0: never). Only web processes (kintsugi_site.asgi and
# .wsgi say they are one): the worker's repairs and verifications and the migrations run as long as they need.
KINTSUGI_WEB_STATEMENT_TIMEOUT_SECONDS = env.float("KINTSUGI_WEB_STATEMENT_TIMEOUT_SECONDS", default=30.0)
WEB_PROCESS = os.environ.get("KINTSUGI_PROCESS", "") == "web"


def with_database_deadlines(databases: dict) -> dict:
    """Every alias gets the connect timeout; in a web process the application's alias (`default`, never the
    owner's, which migrates) gets the statement timeout too."""
    for alias, config in databases.items():
        options = config.setdefault("OPTIONS", {})
        options.setdefault("connect_timeout", KINTSUGI_DB_CONNECT_TIMEOUT_SECONDS)
        if alias == "default" and WEB_PROCESS and KINTSUGI_WEB_STATEMENT_TIMEOUT_SECONDS > 0:
            statement = f"-c statement_timeout={int(KINTSUGI_WEB_STATEMENT_TIMEOUT_SECONDS * 1000)}"
            options["options"] = f"{options.get('options', '')} {statement}".strip()
    return databases


# FalkorDB: how long a call may wait for an answer before the server counts as away (a repair then blocks
# and waits; it never fails for it). Long enough for the largest single query of a million-action graph;
# a web process waits KINTSUGI_WEB_FALKORDB_TIMEOUT_SECONDS instead (its questions are small, and a
# frozen server must cost a request seconds, not minutes).
KINTSUGI_FALKORDB_TIMEOUT_SECONDS = env.float("KINTSUGI_FALKORDB_TIMEOUT_SECONDS", default=120.0)
KINTSUGI_WEB_FALKORDB_TIMEOUT_SECONDS = env.float("KINTSUGI_WEB_FALKORDB_TIMEOUT_SECONDS", default=15.0)
if WEB_PROCESS:
    KINTSUGI_FALKORDB_TIMEOUT_SECONDS = min(KINTSUGI_FALKORDB_TIMEOUT_SECONDS, KINTSUGI_WEB_FALKORDB_TIMEOUT_SECONDS)

# The broker. A task sent by a request (an approval, a flag, a retry) is waited for at most
# KINTSUGI_BROKER_SEND_DEADLINE_SECONDS (core.broker.send): the request has already stored its decision,
# and what the broker did not take in time is sent by the outage sweep, exactly once (an approved item
# executes once whatever number of tasks name it; a blocked repair resumes from its checkpoint). Below it,
# the client's own deadlines: a broker that refuses, or accepts and never answers (frozen), costs a sender
# at most about two KINTSUGI_BROKER_TIMEOUT_SECONDS.
KINTSUGI_BROKER_SEND_DEADLINE_SECONDS = env.float("KINTSUGI_BROKER_SEND_DEADLINE_SECONDS", default=1.0)
KINTSUGI_BROKER_TIMEOUT_SECONDS = env.float("KINTSUGI_BROKER_TIMEOUT_SECONDS", default=5.0)
CELERY_BROKER_CONNECTION_TIMEOUT = KINTSUGI_BROKER_TIMEOUT_SECONDS
CELERY_BROKER_TRANSPORT_OPTIONS = {"socket_timeout": KINTSUGI_BROKER_TIMEOUT_SECONDS,
                                   "socket_connect_timeout": KINTSUGI_BROKER_TIMEOUT_SECONDS}
CELERY_TASK_PUBLISH_RETRY_POLICY = {"max_retries": 1, "interval_start": 0, "interval_step": 0.5, "interval_max": 0.5}
# A worker that lost the broker reconnects for as long as it takes (Celery's default gives up after 100
# tries and the worker exits); a task acknowledged on the lost connection is a logged connection error
# (core.broker.closed_channel_is_a_lost_connection), delivered again and safe to run twice.
CELERY_BROKER_CONNECTION_RETRY = True
CELERY_BROKER_CONNECTION_MAX_RETRIES = None
# The shared cache (throttle counters, login lockouts) lives on the broker's Redis server: a request waits
# for it at most this long per call.
KINTSUGI_CACHE_TIMEOUT_SECONDS = env.float("KINTSUGI_CACHE_TIMEOUT_SECONDS", default=1.0)
CACHE_OPTIONS = {"socket_timeout": KINTSUGI_CACHE_TIMEOUT_SECONDS,
                 "socket_connect_timeout": KINTSUGI_CACHE_TIMEOUT_SECONDS}
# Probes and scrapes (kintsugi_site.health, kintsugi_site.metrics): /readyz waits this long for its
# dependencies, then names each that did not answer in it (1.5 s: the whole answer within 2 s).
KINTSUGI_READYZ_TIMEOUT_SECONDS = env.float("KINTSUGI_READYZ_TIMEOUT_SECONDS", default=1.5)
