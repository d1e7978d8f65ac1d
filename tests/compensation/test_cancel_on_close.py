"""Closing an incident cancels its pending items without loading the repair's plan once per item (on a
large repair the plan is megabytes and the items tens of thousands)."""
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from repairs.services import close_incident
from tests.helpers import repaired_incident

pytestmark = pytest.mark.django_db


def test_closing_an_incident_cancels_its_pending_items_without_reading_its_plan_per_item(people):
    incident = repaired_incident(flagger=people.lead)
    pending = incident.compensation_items.filter(status="pending").count()
    assert pending == 10
    with CaptureQueriesContext(connection) as queries:
        close_incident(incident=incident, actor=people.lead, reason="run replaced", via="admin")
    item_selects = [q["sql"] for q in queries if q["sql"].startswith('SELECT "compensation_compensationitem"')
                    and "FOR UPDATE" in q["sql"]]
    assert item_selects and not any('"repairs_incident"."plan"' in sql for sql in item_selects)
    assert incident.compensation_items.filter(status="cancelled").count() == pending
