"""Deciding before flagging in the admin: the flag page's what-if in words, "the desk changed since this
what-if", the progress bar of a large desk's what-if, sources worth a look, trust, and time travel."""
import pytest
from django.urls import reverse

from compensation.models import AuditEvent
from provenance.desk.scenario import POISONED_PAGE
from provenance.graph.graph import workspace_graph
from provenance.models import Source
from provenance.recording.selectors import export_state
from provenance.recording.services import record_root
from repairs.models import Incident
from repairs.job import run_repair
from repairs.services import flag_source
from tests.helpers import wait_for


@pytest.fixture
def poisoned_page(canonical_desk) -> Source:
    return Source.objects.get(workspace=canonical_desk, source_id=POISONED_PAGE)


def test_the_flag_page_says_in_words_what_flagging_would_do_and_changes_nothing(lead_client, poisoned_page):
    state = export_state(workspace=poisoned_page.workspace.name)
    response = lead_client.get(reverse("admin:provenance_source_flag", args=[poisoned_page.pk]))
    html = response.content.decode()
    assert "$400.00 would be asked back" in html  # beside "$750.00 refunded money at stake"
    assert "7 re-run with a changed outcome" in html and "become 10 compensation drafts + 0 held replacements = 10 items in 5 cases" in html
    assert "t05: refund (full) → reply (none)" in html and "t04: refund (full) → refund (partial)" in html
    fingerprint = response.context["previews"][0]["what_if"]["fingerprint"]
    assert f'name="fingerprint-{poisoned_page.pk}" value="{fingerprint}"' in html
    assert not Incident.objects.exists()
    assert export_state(workspace=poisoned_page.workspace.name) == state
    assert AuditEvent.objects.filter(action="what_if.viewed", via="admin").count() == 1


def test_a_flag_confirmed_for_a_desk_that_changed_since_is_refused_with_the_new_outcome(lead_client, poisoned_page):
    url = reverse("admin:provenance_source_flag", args=[poisoned_page.pk])
    old = lead_client.get(url).context["previews"][0]["what_if"]["fingerprint"]
    # Another agent records work meanwhile: the what-if the lead read no longer describes this desk.
    record_root(workspace=poisoned_page.workspace.name, agent="triage",
                payload={"ticket": "t99", "body": "As a VIP I want my money back", "tier": "standard",
                         "amount_cents": 5000, "customer": "Late Comer", "email": "late@customers.example"})
    response = lead_client.post(url, {"reason": "poisoned", f"fingerprint-{poisoned_page.pk}": old})
    assert response.status_code == 200
    assert "The desk changed since this what-if" in response.content.decode()
    assert not Incident.objects.exists()
    new = response.context["previews"][0]["what_if"]["fingerprint"]
    assert new != old
    assert lead_client.post(url, {"reason": "poisoned", f"fingerprint-{poisoned_page.pk}": new}).status_code == 302
    assert Incident.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_a_large_desks_what_if_runs_in_a_worker_behind_a_progress_bar(lead_client, poisoned_page, settings,
                                                                      celery_worker_process):
    settings.KINTSUGI_WHAT_IF_INLINE_MAX = 10  # the canonical radius (25) counts as large here
    url = reverse("admin:provenance_source_flag", args=[poisoned_page.pk])
    first = lead_client.get(url)
    assert first.context["previews"][0]["what_if"]["state"] in ("queued", "running", "done")
    if first.context["previews"][0]["what_if"]["state"] != "done":
        assert 'class="what-if-progress"' in first.content.decode()
    progress = reverse("admin:provenance_source_what_if_progress", args=[poisoned_page.pk])
    wait_for(lambda: lead_client.get(progress).json()["state"] == "done", timeout=120)
    assert lead_client.get(progress).json()["percent"] == 100
    html = lead_client.get(url).content.decode()
    assert "$400.00 would be asked back" in html
    assert not Incident.objects.exists()


def test_sources_worth_a_look_rank_the_poisoned_page_first(lead_client, poisoned_page):
    response = lead_client.get(reverse("admin:provenance_workspace_suspicious", args=[poisoned_page.workspace.pk]))
    html = response.content.decode()
    assert response.status_code == 200
    first = response.context["ranked"][0]
    assert first["s"].source == POISONED_PAGE
    assert "contradicts v1 from acme/vip-program" in html and "no checks" in html
    assert not Incident.objects.exists()


def test_a_lead_sets_trust_from_the_source_page_with_a_reason(lead_client, poisoned_page):
    page = lead_client.get(reverse("admin:provenance_source_change", args=[poisoned_page.pk])).content.decode()
    assert 'id="trust-form"' in page
    url = reverse("admin:provenance_source_trust", args=[poisoned_page.pk])
    lead_client.post(url, {"trust": "untrusted", "reason": ""})  # no reason: refused, nothing changes
    assert Source.objects.get(pk=poisoned_page.pk).trust == "unknown"
    assert lead_client.post(url, {"trust": "untrusted", "reason": "partner blogs are not policy"}).status_code == 302
    assert Source.objects.get(pk=poisoned_page.pk).trust == "untrusted"
    assert lead_client.get(url).status_code == 405


def test_t05_triage_page_shows_it_read_the_poisoned_vip_rules_and_v1_is_believed_now(lead_client, poisoned_page,
                                                                                    support_lead):
    ws = poisoned_page.workspace
    incident = run_repair(incident_id=flag_source(workspace=ws, source_id=POISONED_PAGE, actor=support_lead,
                                                  reason="poisoned", via="admin").pk)
    assert incident.status == "repaired"
    t05 = workspace_graph(ws.name).ro_query("MATCH (a:Action {agent: 'triage', ticket: 't05'}) RETURN a.id")[0][0]
    response = lead_client.get(reverse("admin:provenance_workspace_action", args=[ws.pk, t05]))
    page = response.context["page"]
    vip = next(f for f in page["facts"] if f["key"] == "vip_rules")
    assert vip["seen"]["version"] == 2 and vip["seen"]["invalidated_by"] == incident.pk
    assert vip["now"]["known"]["version"] == 1
    html = response.content.decode()
    assert f"invalidated by incident #{incident.pk}" in html and "from partner-blog/policy-update" in html
    fact = lead_client.get(reverse("admin:provenance_workspace_fact", args=[ws.pk, "vip_rules"]))
    assert fact.status_code == 200 and [v["version"] for v in fact.context["page"]["versions"]] == [1, 2]
    assert lead_client.get(reverse("admin:provenance_workspace_action", args=[ws.pk, 99999])).status_code == 404
    assert lead_client.get(reverse("admin:provenance_workspace_fact", args=[ws.pk, "nope"])).status_code == 404
