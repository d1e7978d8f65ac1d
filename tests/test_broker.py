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
