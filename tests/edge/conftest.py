"""Shared by the edge tests: people and a repaired incident to refuse things to, the module's repaired
canonical desk (tests/conftest.py's repaired_desk: the refusals change nothing, and each test's own
changes roll back)."""
from __future__ import annotations

from types import SimpleNamespace

import pytest


@pytest.fixture
def people(repaired_desk, db):
    return repaired_desk.people


@pytest.fixture
def repaired(repaired_desk, db):
    from repairs.models import Incident

    incident = Incident.objects.get(pk=repaired_desk.incident_id)
    return SimpleNamespace(incident=incident, people=repaired_desk.people, workspace=incident.workspace.name)
