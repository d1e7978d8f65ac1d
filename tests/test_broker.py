"""core.broker.send: one place where a broker's refusal becomes an answer the caller acts on."""
import logging

from celery import Celery

from core.broker import send


def echo(*args):
    return args


def _app(broker: str, monkeypatch) -> Celery:
    monkeypatch.delenv("CELERY_BROKER_URL", raising=False)  # Celery prefers it to the app's own broker
    app = Celery("broker-test", broker=broker, set_as_current=False)
    app.conf.broker_connection_retry = False
    app.conf.broker_connection_timeout = 1
    return app


def test_a_task_the_broker_takes_is_sent_and_nothing_is_logged(caplog, monkeypatch):
    app = _app("memory://", monkeypatch)
    task = app.task(name="broker_test.echo")(echo)
    with caplog.at_level(logging.WARNING, logger="kintsugi.broker"):
        assert send(task, 1, 2, what="an echo", retry=False) is None
    assert not [r for r in caplog.records if r.name == "kintsugi.broker"]
    with app.connection_for_write() as conn:  # the message is on the queue, with its arguments
        message = conn.SimpleQueue("celery").get(timeout=1)
        assert message.headers["task"] == "broker_test.echo" and message.headers["argsrepr"] == "(1, 2)"


def test_a_refusing_broker_is_returned_and_logged_with_what_was_sent(caplog, monkeypatch):
    app = _app("redis://127.0.0.1:1/0", monkeypatch)  # nothing listens on port 1
    task = app.task(name="broker_test.echo")(echo)
    with caplog.at_level(logging.WARNING, logger="kintsugi.broker"):
        refused = send(task, 1, what="part 3 of incident 7", retry=False)
    assert isinstance(refused, Exception)
    assert "could not send part 3 of incident 7 to a worker" in caplog.text


def test_a_forked_process_sends_within_the_deadline_too(monkeypatch):
    """A worker's pool processes and the web workers are forked: each sends through threads of its own
    (the parent's pool object comes along, its threads do not, and every send timed out)."""
    import os

    app = _app("memory://", monkeypatch)
    task = app.task(name="broker_test.echo")(echo)
    assert send(task, 1, what="an echo in the parent") is None  # the parent's senders are started
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report what its send answered, and leave without pytest's clean-up
        refused = send(task, 2, what="an echo in the child")
        os.write(write, b"sent" if refused is None else str(refused).encode()[:200])
        os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    assert os.read(read, 300) == b"sent"
