"""Honest status: a repair whose verification differs from the clean run is never `repaired`. It needs
attention, with the differing rows on the incident page, in the API, in MCP and in `flag_source --json`;
`flag_source --wait` exits 1; its approved items stay held and say why."""
import json

import pytest
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from compensation.review.cases import CaseItem
from compensation.delivery.execution import execute_item
from compensation.models import CompensationItem
from core.roles import SUPPORT_LEAD
from kintsugi_site import mcp_server
from provenance.vocabulary import ActionStatus as S
from repairs.engine import RepairWalk
from repairs.models import Incident
from repairs.outages import blocked_by_outage
from repairs.verify import verification_differs
from tests.helpers import create_user, flagger, run_command
from tests.repairs.test_rerun_reads import LATE_FAQ, POISON, _desk

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def eager_repairs():
    """flag_source enqueues the repair; here it runs in-process, as the worker would run it."""
    from kintsugi_site.celery import app

    old = app.conf.task_always_eager, app.conf.task_eager_propagates
    app.conf.task_always_eager, app.conf.task_eager_propagates = True, True
    yield
    app.conf.task_always_eager, app.conf.task_eager_propagates = old


def _drop_one_rerun(monkeypatch):
    """A deliberately broken walk: the re-run of ticket t3's triage is dropped (left as it was)."""
    visit = RepairWalk._visit

    def broken(self, node):
        if node.ticket == "t3":
            return self._set(node, S.SKIPPED)
        return visit(self, node)

    monkeypatch.setattr(RepairWalk, "_visit", broken)


def test_a_broken_repair_needs_attention_exits_1_and_says_where_it_differs(monkeypatch, capsys):
    _desk("honest", POISON)
    flagger("lead")
    _drop_one_rerun(monkeypatch)
    code, out = run_command(capsys, "flag_source", "--workspace", "honest", "--source", LATE_FAQ, "--reason",
                            "poisoned faq", "--user", "lead", "--wait", "--json", "--timeout", "120")
    summary = json.loads(out[out.index("{"):])
    # Red: the repair ended `repaired` and --wait exited 0; only the JSON counts showed the difference.
    assert code == 1
    assert summary["status"] == "needs_attention"
    v = summary["verification"]
    assert v["decisions"] == 2 and v["effects"] == 1 and v["differences_total"] == 3
    assert {"table": "decisions", "side": "repaired",
            "row": {"ticket": "t3", "choice": "refund", "level": "full"}} in v["differences"]
    incident = Incident.objects.get(pk=summary["incident"])
    assert incident.finished_at is not None and "verification found differences" in incident.error
    assert incident.transitions.filter(to_status="needs_attention").exists()
    assert incident.pk not in blocked_by_outage()  # nothing resumes it on its own: a person looks

    lead = create_user("honest-lead", SUPPORT_LEAD, workspaces=[incident.workspace])
    api = APIClient()
    api.force_authenticate(lead)
    body = api.get(f"/api/v1/incidents/{incident.pk}/").json()
    assert body["status"] == "needs_attention" and body["verification"]["differences"] == v["differences"]
    assert mcp_server.incident_status(user=lead, incident=incident.pk)["verification"] == v
    page = Client()
    page.force_login(lead)
    html = page.get(reverse("admin:repairs_incident_change", args=[incident.pk])).content.decode()
    assert "needs attention" in html and "differs from the clean re-run" in html and "&quot;t3&quot;" in html

    # An item approved while the repair was verified stays held, and says why.
    item = CompensationItem.objects.filter(incident=incident).order_by("pk").first()
    CompensationItem.objects.filter(pk=item.pk).update(status=CompensationItem.Status.APPROVED)
    assert execute_item(item_id=item.pk).status == CompensationItem.Status.APPROVED
    item.refresh_from_db()
    assert CaseItem(item).note.startswith("held: the repair's verification found differences")
    assert mcp_server._item_summary(item, [])["held"].startswith("held: the repair's verification")


def test_a_repair_verified_clean_is_repaired_and_wait_exits_0(capsys):
    _desk("honest-clean", POISON)
    flagger("lead")
    code, out = run_command(capsys, "flag_source", "--workspace", "honest-clean", "--source", LATE_FAQ, "--reason",
                            "poisoned faq", "--user", "lead", "--wait", "--json", "--timeout", "120")
    summary = json.loads(out[out.index("{"):])
    assert (code, summary["status"]) == (0, "repaired")
    v = summary["verification"]
    assert {k: v[k] for k in ("facts", "decisions", "effects", "differences", "differences_total")} == {
        "facts": 0, "decisions": 0, "effects": 0, "differences": [], "differences_total": 0}
    # In proportion to the damage: the three tickets' triage, not a replay of the desk.
    assert (v["scope"], v["actions_rerun"], v["replay_calls"], v["full"]) == ("radius", 3, 0, None)


def test_no_verification_is_no_proof():
    assert verification_differs({"facts": 0, "decisions": 0, "effects": 0, "rows": []}) == ""
    assert "not verified" in verification_differs(None)
    assert "decisions 2" in verification_differs({"facts": 0, "decisions": 2, "effects": 0})
