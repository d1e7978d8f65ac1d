"""Fixtures for the admin tests: people in the roles, the canonical desk recorded for a test that changes
it, and the canonical incident repaired in-process (the same run_repair the Celery task calls) once for
a module whose tests only read it, so pages can be read without a worker."""
from __future__ import annotations

import uuid
from types import SimpleNamespace

import pytest

from core.roles import REVIEWER, SUPPORT_LEAD, ensure_roles
from provenance.desk.scenario import POISONED_PAGE
from provenance.recording.services import desk_run, get_workspace
from repairs.job import run_repair
from repairs.models import Incident
from repairs.services import flag_source
from tests.helpers import create_user, module_transaction, shared_graphs


@pytest.fixture
def make_user(db, django_user_model):
    ensure_roles()

    def make(username: str, *groups: str, member_of=None, **extra):
        return create_user(username, *groups, workspaces=[member_of] if member_of is not None else [], **extra)

    return make


@pytest.fixture(scope="module")
def repaired_admin_desk(django_db_setup, django_db_blocker):
    """For the module (tests.helpers.module_transaction and shared_graphs): the lead `lead-admin` and the
    reviewer `reviewer-admin`, the canonical desk recorded into a workspace they are members of, and its
    poisoned page flagged by the lead and repaired in-process."""
    with module_transaction(django_db_blocker):
        lead, reviewer = create_user("lead-admin", SUPPORT_LEAD), create_user("reviewer-admin", REVIEWER)
        workspace = _record(f"adm-{uuid.uuid4().hex[:8]}", lead, reviewer)
        incident = run_repair(incident_id=_flag(workspace, lead).pk)
        with shared_graphs(workspace.name):
            yield SimpleNamespace(lead=lead, reviewer=reviewer, incident_id=incident.pk)


def _record(name: str, *members):
    desk_run(workspace=name)
    workspace = get_workspace(name)
    workspace.members.add(*members)
    return workspace


def _flag(workspace, lead) -> Incident:
    return flag_source(workspace=workspace, source_id=POISONED_PAGE, actor=lead, reason="poisoned partner page",
                       via=Incident.Via.CLI)


def _person(make_user, username: str, role: str):
    """The module desk's `username` once a test of the module has read it (`repaired`), else one made for
    the test."""
    from django.contrib.auth import get_user_model

    return get_user_model().objects.filter(username=username).first() or make_user(username, role)


@pytest.fixture
def support_lead(make_user):
    return _person(make_user, "lead-admin", SUPPORT_LEAD)


@pytest.fixture
def reviewer(make_user):
    return _person(make_user, "reviewer-admin", REVIEWER)


@pytest.fixture
def lead_client(client, support_lead):
    client.force_login(support_lead)
    return client


@pytest.fixture
def workspace_name() -> str:
    return f"adm-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def canonical_desk(db, workspace_name, settings, support_lead, reviewer):
    """The canonical desk recorded into a workspace of the test's own whose members are the lead and the
    reviewer (for tests that flag, repair or otherwise change it)."""
    settings.CELERY_TASK_ALWAYS_EAGER = False
    return _record(workspace_name, support_lead, reviewer)


@pytest.fixture
def repaired(repaired_admin_desk, db) -> Incident:
    """The module's canonical desk, the poisoned page flagged by the lead and repaired in-process; fetched
    fresh for each test (tests may change its rows: their changes roll back, not its graphs)."""
    return Incident.objects.get(pk=repaired_admin_desk.incident_id)
