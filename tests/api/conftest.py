"""API fixtures: users in roles with tokens, and `record_desk`, which records the canonical desk into a
workspace of the test's naming."""
from __future__ import annotations

import pytest
from rest_framework.authtoken.models import Token

from provenance.desk.scenario import POISONED_PAGE
from provenance.models import Source
from provenance.recording.services import desk_run, get_workspace
from tests.helpers import create_user


@pytest.fixture
def make_user(django_user_model):
    def make(username: str, *, roles=(), workspaces=(), superuser: bool = False):
        user = create_user(username, *roles, workspaces=workspaces, staff=superuser, is_superuser=superuser)
        user.api_key = Token.objects.create(user=user).plain_key  # shown once: the row holds its digest
        return user
    return make


@pytest.fixture
def record_desk():
    """Record the canonical desk into a workspace named `name`; returns (workspace, poisoned source)."""
    def make(name: str):
        desk_run(workspace=name)
        ws = get_workspace(name)
        return ws, Source.objects.get(workspace=ws, source_id=POISONED_PAGE)
    return make
