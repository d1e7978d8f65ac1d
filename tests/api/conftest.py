"""API fixtures: users in roles with tokens, a canonical desk in a workspace of its own, API clients."""
from __future__ import annotations

import pytest
from django.contrib.auth.models import Group
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from core.roles import ensure_roles
from provenance.desk.scenario import POISONED_PAGE
from provenance.models import Source
from provenance.services import desk_run, get_workspace
from tests.helpers import create_user


def role(name: str) -> Group:
    """The role's group with its permissions (core.roles; a transactional test's flush empties it)."""
    ensure_roles()
    return Group.objects.get(name=name)


@pytest.fixture
def make_user(django_user_model):
    def make(username: str, *, roles=(), workspaces=(), superuser: bool = False):
        user = create_user(username, *roles, workspaces=workspaces, staff=superuser, is_superuser=superuser)
        Token.objects.create(user=user)
        return user
    return make


def client_for(user=None) -> APIClient:
    client = APIClient()
    if user is not None:
        client.credentials(HTTP_AUTHORIZATION=f"Token {user.auth_token.key}")
    return client


@pytest.fixture
def canonical_desk():
    """Record the canonical desk into a workspace named after nothing else; returns (workspace, poisoned source)."""
    def make(name: str):
        desk_run(workspace=name)
        ws = get_workspace(name)
        return ws, Source.objects.get(workspace=ws, source_id=POISONED_PAGE)
    return make
