"""Fixtures for the compensation tests: people in the three roles, a repaired canonical incident, the
fake Gemini server wired to the real google-genai client, and Celery running tasks in-process."""
from __future__ import annotations

import os
import uuid
from types import SimpleNamespace

import pytest
from django.db import transaction

from core.roles import AUDITOR, REVIEWER, SUPPORT_LEAD
from provenance.services import desk_run, get_workspace
from repairs.models import Incident
from tests.fake_gemini import FakeGemini
from tests.helpers import create_user, flag_and_repair


_make_user = create_user


def _make_people() -> SimpleNamespace:
    return SimpleNamespace(
        lead=_make_user("lead1", SUPPORT_LEAD),
        reviewer=_make_user("reviewer1", REVIEWER),
        auditor=_make_user("auditor1", AUDITOR),
        # Both roles: only four-eyes stops them from approving their own incident.
        lead_reviewer=_make_user("leadrev1", SUPPORT_LEAD, REVIEWER),
    )


@pytest.fixture
def make_user(db):
    return _make_user


@pytest.fixture
def people(db):
    return _make_people()


@pytest.fixture(scope="module")
def canonical_module(django_db_setup, django_db_blocker):
    """One repaired canonical incident (flagged by `leadrev1`, who is Support lead and Reviewer) shared
    by a module's non-transactional tests: built once inside a module-wide transaction that each test's
    own transaction nests in (Django's setUpTestData pattern) and rolled back at the end. Only for
    modules without transactional tests; FalkorDB changes are not rolled back (tests here only read it)."""
    with django_db_blocker.unblock():
        atomic = transaction.atomic()
        atomic.__enter__()
        try:
            people = _make_people()
            incident = repaired_incident(flagger=people.lead_reviewer)
            yield SimpleNamespace(people=people, incident_id=incident.pk)
        finally:
            transaction.set_rollback(True)
            atomic.__exit__(None, None, None)


@pytest.fixture
def canonical(canonical_module, db):
    """The shared incident, fetched fresh for each test (tests change it; their changes roll back)."""
    return SimpleNamespace(people=canonical_module.people, incident=Incident.objects.get(pk=canonical_module.incident_id))


def repaired_incident(*, flagger, workspace: str | None = None, settings=None, members=None) -> Incident:
    """The canonical desk run, the poisoned page flagged by `flagger` and repaired in-process. The
    workspace's members are `members`, by default every non-superuser the test made (its team)."""
    from django.contrib.auth import get_user_model

    if settings is not None:
        settings.CELERY_TASK_ALWAYS_EAGER = False
    name = workspace or f"comp-{uuid.uuid4().hex[:8]}"
    desk_run(workspace=name)
    team = members if members is not None else get_user_model().objects.filter(is_superuser=False)
    get_workspace(name).members.add(*team)
    return flag_and_repair(name, actor=flagger, reason="poisoned partner page")


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


def offline_answer(request) -> dict:
    """A fake Gemini responder that answers each registered task with its offline implementation (the
    request's system instruction names the task)."""
    from provenance import llm

    for name in llm.task_names():
        task = llm.registered_task(name)
        if task.instruction == request.system_instruction:
            payload = request.user_json
            return task.offline(payload["input"], payload["facts"])
    raise AssertionError(f"unknown task instruction: {request.system_instruction[:60]!r}")
