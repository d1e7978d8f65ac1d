"""Fixtures for the admin tests: people in the roles, and a canonical incident repaired in-process
(the same run_repair the Celery task calls), so pages can be read without a worker."""
from __future__ import annotations

import uuid

import pytest

from core.roles import REVIEWER, SUPPORT_LEAD, ensure_roles
from provenance.desk.scenario import POISONED_PAGE
from provenance.services import desk_run, get_workspace
from repairs.models import Incident
from repairs.services import flag_source
from repairs.job import run_repair
from tests.helpers import create_user


@pytest.fixture
def make_user(db, django_user_model):
    ensure_roles()

    def make(username: str, *groups: str, member_of=None, **extra):
        return create_user(username, *groups, workspaces=[member_of] if member_of is not None else [], **extra)

    return make


@pytest.fixture
def support_lead(make_user):
    return make_user("lead-admin", SUPPORT_LEAD)


@pytest.fixture
def reviewer(make_user):
    return make_user("reviewer-admin", REVIEWER)


@pytest.fixture
def lead_client(client, support_lead):
    client.force_login(support_lead)
    return client


@pytest.fixture
def workspace_name() -> str:
    return f"adm-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def canonical_desk(db, workspace_name, settings, support_lead, reviewer):
    """The canonical desk recorded into a workspace whose members are the lead and the reviewer."""
    settings.CELERY_TASK_ALWAYS_EAGER = False
    desk_run(workspace=workspace_name)
    workspace = get_workspace(workspace_name)
    workspace.members.add(support_lead, reviewer)
    return workspace


@pytest.fixture
def repaired(canonical_desk, support_lead) -> Incident:
    """The canonical desk, the poisoned page flagged by the lead and repaired in-process."""
    incident = flag_source(workspace=canonical_desk, source_id=POISONED_PAGE, actor=support_lead,
                           reason="poisoned partner page", via=Incident.Via.CLI)
    return run_repair(incident_id=incident.pk)
