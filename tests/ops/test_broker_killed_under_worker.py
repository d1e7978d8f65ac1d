"""The broker killed under a worker in the middle of a task (the worker then acknowledges on a channel
whose connection is gone): a reconnect, not a worker death. The red case: the worker died with
"Unrecoverable error: AttributeError('NoneType' object has no attribute 'hostname')", raised by kombu's
Redis transport when a task is acknowledged on a channel whose connection the reconnect closed (the second
test puts a real channel in that state; the first kills a real broker under a real worker)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from celery import Celery
from django.conf import settings
from django.db import connection

from core import embedded
from tests.helpers import worker_env
from tests.ops.test_frozen_falkordb import _free_port

ROOT = Path(__file__).resolve().parent.parent.parent


def _wait_for(path: Path, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if path.exists():
            return True
        time.sleep(0.1)
    return False


@pytest.fixture
def broker(tmp_path, monkeypatch):
    monkeypatch.setenv("KINTSUGI_HOME", str(tmp_path / "home"))
    port = _free_port()
    state = {"proc": None}

    def start():
        state["proc"] = embedded.start_redis_server(data_dir=tmp_path / "broker", port=port, with_graph=False,
                                                    die_with_parent=True)

    def kill():
        state["proc"].kill()
        state["proc"].wait(timeout=20)
    start()
    yield {"url": embedded.server_url(port, db=0), "start": start, "kill": kill}
    if state["proc"] is not None and state["proc"].poll() is None:
        state["proc"].terminate()
        state["proc"].wait(timeout=20)


@pytest.mark.django_db
def test_a_broker_killed_while_a_task_runs_is_a_reconnect_not_a_worker_death(broker, tmp_path, monkeypatch):
    marks, log = tmp_path / "marks", tmp_path / "worker.log"
    marks.mkdir()
    # The test database: the worker's start-up resumes orphaned repairs, which reads the schema.
    env = worker_env(connection.settings_dict["NAME"], CELERY_BROKER_URL=broker["url"])
    worker = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "tests.ops.broker_kill_app", "worker", "-l", "warning", "-c", "1",
         "--without-gossip", "--without-mingle", "--without-heartbeat", "-n", f"killed{time.time_ns()}@%h"],
        cwd=ROOT, env=env, stdout=open(log, "ab"), stderr=subprocess.STDOUT, start_new_session=True,
        preexec_fn=embedded.stop_when_parent_dies)
    monkeypatch.delenv("CELERY_BROKER_URL", raising=False)  # Celery prefers it to the app's own broker
    sender = Celery("sender", broker=broker["url"], set_as_current=False)
    # The worker's keys carry this test process's prefix (each xdist worker its own): send under the same.
    sender.conf.broker_transport_options = settings.CELERY_BROKER_TRANSPORT_OPTIONS
    try:
        sender.send_task("kintsugi_test.slow_mark", args=[str(marks), "first", 3.0])
        assert _wait_for(marks / "first.started", 60), log.read_text()[-3000:]
        broker["kill"]()  # mid-task: the worker's connection is gone when it acknowledges
        time.sleep(0.5)
        broker["start"]()
        assert _wait_for(marks / "first.done", 30), log.read_text()[-3000:]
        time.sleep(3)  # the acknowledgement, and the reconnect
        assert worker.poll() is None, log.read_text()[-3000:]
        sender = Celery("sender-again", broker=broker["url"], set_as_current=False)
        sender.conf.broker_transport_options = settings.CELERY_BROKER_TRANSPORT_OPTIONS
        sender.send_task("kintsugi_test.slow_mark", args=[str(marks), "second", 0.1])
        assert _wait_for(marks / "second.done", 60), log.read_text()[-3000:]  # consuming again
        assert worker.poll() is None and "Unrecoverable error" not in log.read_text()
    finally:
        if worker.poll() is None:
            os.killpg(worker.pid, signal.SIGTERM)
            try:
                worker.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(worker.pid, signal.SIGKILL)


def test_an_acknowledgement_on_a_channel_whose_connection_was_closed_is_a_lost_connection(broker, monkeypatch):
    """The state the worker reaches: its old connection closed by the reconnect (the transport has no
    client any more, the channel no pool), and a task of that channel acknowledged after."""
    from kombu import Connection
    from kombu.transport import redis as transport

    from core.broker import closed_channel_is_a_lost_connection

    closed_channel_is_a_lost_connection()  # as kintsugi_site.celery installs it in every process
    conn = Connection(broker["url"])
    queue = conn.SimpleQueue("kintsugi-test-acks")
    queue.put({"n": 1})
    message = queue.get(timeout=5)
    lost = conn.connection_errors
    broker["kill"]()
    try:
        conn.collect()
    except lost:
        pass
    message.channel._disconnect_pools()  # what a clean close of the channel leaves behind
    assert message.channel.connection.client is None
    patched = transport.Channel._connparams
    with monkeypatch.context() as m:  # the red case: kombu as it comes
        m.setattr(transport.Channel, "_connparams", patched.unpatched)
        with pytest.raises(AttributeError, match="hostname"):  # Celery's "Unrecoverable error"
            message.ack()
    with pytest.raises(lost):  # one Celery logs (ack_log_error) and reconnects from
        message.ack()
