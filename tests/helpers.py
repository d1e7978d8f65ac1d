"""What many tests need: people with roles, and a flagged, repaired
source. Fixtures in the apps' conftest.py files build on these."""
from __future__ import annotations

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group

from core.roles import ensure_roles
from provenance.desk.scenario import POISONED_PAGE
from provenance.services import get_workspace
from repairs.job import run_repair
from repairs.models import Incident
from repairs.services import flag_source

PASSWORD = "pass-1234-kintsugi"


def create_user(username: str, *roles: str, workspaces=(), staff: bool = True, **extra):
    """A user in these roles (core.roles) and a member of these workspaces."""
    ensure_roles()  # a transactional test's flush drops the groups the data migration created
    user = get_user_model().objects.create_user(username, password=PASSWORD, is_staff=staff, **extra)
    for name in roles:
        user.groups.add(Group.objects.get(name=name))
    for ws in workspaces:
        ws.members.add(user)
    return user


def flagger(name: str = "flagger"):
    user, _ = get_user_model().objects.get_or_create(username=name)
    return user


def open_incident(workspace: str, source: str = POISONED_PAGE, *, actor=None, reason: str = "poisoned") -> Incident:
    """Flag a source from the CLI (the repair is enqueued on commit; tests run it themselves)."""
    return flag_source(workspace=get_workspace(workspace), source_id=source, actor=actor or flagger(),
                       reason=reason, via=Incident.Via.CLI)


def flag_and_repair(workspace: str, source: str = POISONED_PAGE, *, actor=None, reason: str = "poisoned") -> Incident:
    """Flag a source and run its repair in this process, as a worker would."""
    return run_repair(incident_id=open_incident(workspace, source, actor=actor, reason=reason).pk)
