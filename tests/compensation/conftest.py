"""Fixtures for the compensation tests: people in the three roles, a repaired canonical incident, the
fake Gemini server wired to the real google-genai client, and Celery running tasks in-process."""
from __future__ import annotations

import os
from types import SimpleNamespace

import pytest

from repairs.models import Incident
from tests.fake_gemini import FakeGemini
from tests.helpers import create_user, make_people


@pytest.fixture
def make_user(db):
    return create_user


@pytest.fixture
def people(db):
    return make_people()


@pytest.fixture
def canonical(repaired_desk, db):
    """The module's repaired canonical incident (tests/conftest.py's repaired_desk, flagged by `leadrev1`,
    who is Support lead and Reviewer), fetched fresh for each test: tests change it, their changes roll
    back. Only for modules without transactional tests."""
    return SimpleNamespace(people=repaired_desk.people, incident=Incident.objects.get(pk=repaired_desk.incident_id))


@pytest.fixture
def eager_celery():
    """Tasks enqueued with .delay run in-process (the same code a worker runs), so tests need no broker."""
    from kintsugi_site.celery import app

    old = app.conf.task_always_eager, app.conf.task_eager_propagates
    app.conf.task_always_eager, app.conf.task_eager_propagates = True, True
    yield app
    app.conf.task_always_eager, app.conf.task_eager_propagates = old


@pytest.fixture
def outbox_backend(settings):
    """The project's own email backend (pytest-django swaps in locmem): mail lands in OutboxEmail."""
    settings.EMAIL_BACKEND = "provenance.mail.OutboxBackend"


@pytest.fixture
def fake_gemini(settings, monkeypatch, fresh_model_cache):
    """The real google-genai client against tests/fake_gemini.py (nothing leaves the machine)."""
    from provenance import llm

    for name in list(os.environ):
        if name.startswith(("GOOGLE_", "GEMINI_")):
            monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GOOGLE_GENAI_API_VERSION", "v1beta")
    fake = FakeGemini().start()
    settings.KINTSUGI_MODEL_BACKEND = "gemini"
    settings.GEMINI_API_KEY = "test-key-not-real"
    settings.GEMINI_BASE_URL = fake.url
    settings.GEMINI_MODEL = "gemini-fake"
    llm.reset_client()
    yield fake
    fake.stop()
    llm.reset_client()
