"""Delivery in the admin on the canonical incident: each workspace's connectors page (secrets only as
set / missing, changed by its Workspace admin with a reason, audited), an item's delivery and its
attempts (a receiver's words escaped), "deliver again" from the item and in bulk from the case queue,
the failed-deliveries filter and the dashboard's count, and the report's delivery lines. Each page
answers another workspace's member 404 and a role without the capability 403."""
from __future__ import annotations

import csv
import io
import zipfile

import pytest
from django.urls import reverse

from compensation.review import case_queue
from compensation.delivery_models import Delivery, DeliveryAttempt, DeliveryState, WorkspaceConnector
from compensation.models import AuditEvent, CompensationItem
from compensation.review.services import approve_item
from core.roles import REVIEWER, SUPPORT_LEAD, WORKSPACE_ADMIN
from core.vocabulary import AuditAction
from provenance.models import Workspace
from kintsugi_site import reports
from tests.helpers import create_user

pytestmark = pytest.mark.django_db
K, St, S = CompensationItem.Kind, CompensationItem.Status, DeliveryState
HOSTILE = "mail server refused: 550 <script>alert('x')</script>"
SECRET_VALUE = "sk_live_not_to_be_shown_4242"


def _connectors_url(workspace_id: int) -> str:
    return reverse("admin:compensation_workspaceconnector_workspace", args=[workspace_id])


def _item_url(item) -> str:
    return reverse("admin:compensation_compensationitem_change", args=[item.pk])


def _again_url(item) -> str:
    return reverse("admin:compensation_compensationitem_deliver_again", args=[item.pk])


@pytest.fixture
def outsider(canonical):
    """A Reviewer, Support lead and Workspace admin of another workspace only."""
    other = Workspace.objects.create(name="elsewhere")
    return create_user("outsider", REVIEWER, SUPPORT_LEAD, WORKSPACE_ADMIN, workspaces=[other])


@pytest.fixture
def ws_admin(canonical):
    return create_user("wsadmin1", WORKSPACE_ADMIN, workspaces=[canonical.incident.workspace])


@pytest.fixture
def dead(canonical):
    """An approved reversal whose delivery gave up after three tries, the last reason a server's own words."""
    item = canonical.incident.compensation_items.filter(kind=K.REFUND_REVERSAL, valid=True).order_by("pk").first()
    approve_item(item=item, actor=canonical.people.reviewer, reason="checked", via="admin")
    delivery = Delivery.objects.create(item=item, connector="sandbox_ledger", state=S.DEAD, attempts=3,
                                       reference="re_ref_77", failure_reason=HOSTILE)
    for code in (503, 503, 550):
        DeliveryAttempt.objects.create(delivery=delivery, outcome=S.RETRYING if code == 503 else S.DEAD,
                                       status_code=code, duration_ms=12, detail=HOSTILE)
    return item


def _login(client, user):
    client.force_login(user)
    return client


# --- the connectors page -------------------------------------------------------------------------------------
def test_the_connectors_page_shows_each_kind_and_its_secrets_only_as_set_or_missing(canonical, ws_admin, client,
                                                                                    monkeypatch):
    ws = canonical.incident.workspace_id
    monkeypatch.setenv("KINTSUGI_STRIPE_API_KEY", SECRET_VALUE)
    monkeypatch.delenv("KINTSUGI_WEBHOOK_SECRET", raising=False)
    WorkspaceConnector.objects.create(workspace_id=ws, kind=K.REFUND_REVERSAL, connector="stripe", options={})
    WorkspaceConnector.objects.create(workspace_id=ws, kind=K.CORRECTION_EMAIL, connector="webhook",
                                      options={"url": "https://desk.example.com/hook?token=tok_hidden_9"})
    html = _login(client, ws_admin).get(_connectors_url(ws)).content.decode()
    rows = {r.kind: r for r in client.get(_connectors_url(ws)).context["rows"]}
    assert set(rows) == set(K.values)
    assert (rows[K.REFUND_REVERSAL].connector, rows[K.REFUND_REVERSAL].configured) == ("stripe", True)
    assert rows[K.REFUND_REVERSAL].secrets == (("api_key_env", "KINTSUGI_STRIPE_API_KEY", True),)
    assert (rows[K.CORRECTION_EMAIL].connector, rows[K.CORRECTION_EMAIL].configured) == ("webhook", False)
    assert rows[K.CORRECTION_EMAIL].secrets == (("secret_env", "KINTSUGI_WEBHOOK_SECRET", False),)
    assert rows[K.REPLACEMENT_EMAIL].connector == "outbox" and not rows[K.REPLACEMENT_EMAIL].chosen
    assert SECRET_VALUE not in html and "tok_hidden_9" not in html
    assert 'data-env="KINTSUGI_STRIPE_API_KEY"><code>KINTSUGI_STRIPE_API_KEY</code>: <span class="set">set' in html
    assert 'data-env="KINTSUGI_WEBHOOK_SECRET"><code>KINTSUGI_WEBHOOK_SECRET</code>: <span class="missing">missing' in html
    assert "https://desk.example.com/hook?…" in html
    assert 'id="choose-refund_reversal"' in html


def test_choosing_a_connector_on_the_page_is_audited_and_a_bad_url_changes_nothing(canonical, ws_admin, client):
    ws = canonical.incident.workspace_id
    _login(client, ws_admin)
    bad = client.post(_connectors_url(ws), {"kind": K.CORRECTION_EMAIL, "connector": "webhook",
                                            "options": '{"url": "https://user:pw@desk.example.com/hook"}',
                                            "reason": "helpdesk tickets"})
    assert bad.status_code == 200 and "must not carry credentials" in bad.content.decode()
    assert 'value="helpdesk tickets"' in bad.content.decode()  # what was typed is kept
    assert not WorkspaceConnector.objects.filter(workspace_id=ws).exists()
    no_reason = client.post(_connectors_url(ws), {"kind": K.CORRECTION_EMAIL, "connector": "webhook",
                                                  "options": '{"url": "https://desk.example.com/hook"}', "reason": ""})
    assert "needs a reason" in no_reason.content.decode()
    assert not WorkspaceConnector.objects.filter(workspace_id=ws).exists()
    done = client.post(_connectors_url(ws), {"kind": K.CORRECTION_EMAIL, "connector": "webhook",
                                             "options": '{"url": "https://desk.example.com/hook"}',
                                             "reason": "helpdesk tickets"})
    assert done.status_code == 302
    row = WorkspaceConnector.objects.get(workspace_id=ws, kind=K.CORRECTION_EMAIL)
    assert (row.connector, row.options) == ("webhook", {"url": "https://desk.example.com/hook"})
    event = AuditEvent.objects.get(action=AuditAction.CONNECTOR_SET, subject_id=str(ws))
    assert (event.actor_name, event.via, event.reason) == ("wsadmin1", "admin", "helpdesk tickets")
    # Empty options keep the current ones when the connector stays the same.
    client.post(_connectors_url(ws), {"kind": K.CORRECTION_EMAIL, "connector": "webhook", "options": "",
                                      "reason": "same receiver"})
    assert WorkspaceConnector.objects.get(workspace_id=ws, kind=K.CORRECTION_EMAIL).options == {
        "url": "https://desk.example.com/hook"}


def test_the_connectors_page_refuses_another_workspace_and_roles_without_the_capability(canonical, outsider, client):
    ws = canonical.incident.workspace_id
    choose = {"kind": K.REFUND_REVERSAL, "connector": "stripe", "options": "{}", "reason": "go live"}
    assert _login(client, outsider).get(_connectors_url(ws)).status_code == 404
    assert client.post(_connectors_url(ws), choose).status_code == 404
    assert AuditEvent.objects.filter(action=AuditAction.REFUSED, actor_name="outsider").exists()
    assert _login(client, canonical.people.reviewer).get(_connectors_url(ws)).status_code == 403
    lead = _login(client, canonical.people.lead)
    page = lead.get(_connectors_url(ws))
    assert page.status_code == 200 and 'id="choose-' not in page.content.decode()  # a lead reads, never chooses
    assert lead.post(_connectors_url(ws), choose).status_code == 403
    assert not WorkspaceConnector.objects.filter(workspace_id=ws).exists()
    assert not AuditEvent.objects.filter(action=AuditAction.CONNECTOR_SET).exists()


# --- an item's delivery and "deliver again" ----------------------------------------------------------------------
def test_the_item_page_shows_its_delivery_and_attempts_with_the_servers_words_escaped(dead, canonical, client):
    html = _login(client, canonical.people.reviewer).get(_item_url(dead)).content.decode()
    assert 'id="delivery" data-state="dead"' in html
    assert "re_ref_77" in html and "gave up after its last try" in html
    assert html.count("<td class=\"num\">503</td>") == 2 and "<td class=\"num\">550</td>" in html
    assert "<script>alert(" not in html and "&lt;script&gt;alert(" in html
    assert 'id="deliver-again-form"' in html
    auditor = _login(client, canonical.people.auditor).get(_item_url(dead)).content.decode()
    assert "re_ref_77" in auditor and 'id="deliver-again-form"' not in auditor  # reads, may not send


def test_deliver_again_requeues_the_item_through_its_connector_and_is_audited(dead, canonical, client, eager_celery,
                                                                             django_capture_on_commit_callbacks):
    _login(client, canonical.people.reviewer)
    assert client.get(_again_url(dead)).status_code == 405
    client.post(_again_url(dead), {"reason": "  "})
    assert Delivery.objects.get(item=dead).state == S.DEAD  # no reason: refused, nothing changes
    with django_capture_on_commit_callbacks(execute=True):
        answer = client.post(_again_url(dead), {"reason": "card updated by the customer"})
    assert answer.status_code == 302 and answer["Location"].endswith("#delivery")
    delivery = Delivery.objects.get(item=dead)
    dead.refresh_from_db()
    assert delivery.state == S.DELIVERED and delivery.attempts == 4 and dead.status == St.EXECUTED
    event = AuditEvent.objects.get(action=AuditAction.ITEM_DELIVERY_RETRIED, subject_id=str(dead.pk))
    assert (event.actor_name, event.reason, event.from_status, event.to_status) == (
        "reviewer1", "card updated by the customer", S.DEAD, S.QUEUED)
    client.post(_again_url(dead), {"reason": "once more"})  # delivered now: refused
    assert AuditEvent.objects.filter(action=AuditAction.ITEM_DELIVERY_RETRIED).count() == 1


def test_deliver_again_is_refused_to_another_workspace_and_to_a_role_without_review(dead, canonical, outsider, client):
    assert _login(client, outsider).post(_again_url(dead), {"reason": "x"}).status_code == 404
    assert _login(client, canonical.people.lead).post(_again_url(dead), {"reason": "x"}).status_code == 403
    assert _login(client, outsider).get(_item_url(dead)).status_code == 404
    assert Delivery.objects.get(item=dead).state == S.DEAD
    assert not AuditEvent.objects.filter(action=AuditAction.ITEM_DELIVERY_RETRIED).exists()


# --- the case queue, its bulk action and the dashboard -------------------------------------------------------------
def test_the_failed_filter_and_the_dashboard_count_show_only_failed_deliveries(dead, canonical, outsider, client):
    cases = reverse("admin:compensation_compensationitem_cases")
    _login(client, canonical.people.reviewer)
    found = client.get(cases, {"delivery": "failed"})
    assert [c.ticket for c in found.context["cases"]] == [dead.ticket_id]
    assert found.context["totals"]["cases"] == 1
    assert len(client.get(cases, {"state": "all"}).context["cases"]) > 1
    page = client.get(cases, {"delivery": "failed", "incident": canonical.incident.pk}).content.decode()
    assert f'data-case="{canonical.incident.pk}/{dead.ticket_id}"' in page
    case_page = client.get(reverse("admin:compensation_compensationitem_case",
                                   args=[canonical.incident.pk, dead.ticket_id])).content.decode()
    assert "re_ref_77" in case_page and "&lt;script&gt;" in case_page and "<script>alert(" not in case_page
    with pytest.raises(case_queue.BadFilter):
        case_queue.Filters.from_query({"delivery": "sideways"})
    board = _login(client, canonical.people.lead).get(reverse("admin:index"))
    assert board.context["dashboard"]["failed_deliveries"]["count"] == 1
    assert 'id="failed-deliveries" data-count="1"' in board.content.decode()
    assert board.context["dashboard"]["failed_deliveries"]["url"].endswith("?delivery=failed&state=all")
    Delivery.objects.filter(item=dead).update(state=S.PENDING)
    assert client.get(reverse("admin:index")).context["dashboard"]["failed_deliveries"]["count"] == 0
    Delivery.objects.filter(item=dead).update(state=S.FAILED)
    assert _login(client, outsider).get(reverse("admin:index")).context["dashboard"]["failed_deliveries"]["count"] == 0


def test_bulk_deliver_again_shows_what_will_be_sent_then_requeues_with_the_reason(dead, canonical, client):
    bulk = reverse("admin:compensation_compensationitem_cases_bulk")
    key = f"{canonical.incident.pk}/{dead.ticket_id}"
    other = canonical.incident.compensation_items.exclude(ticket_id=dead.ticket_id).first()
    ask = {"decision": "deliver_again", "case": [key, f"{canonical.incident.pk}/{other.ticket_id}"],
           "filters": "delivery=failed&state=all"}
    assert _login(client, canonical.people.lead).post(bulk, ask).status_code == 403
    confirm = _login(client, canonical.people.reviewer).post(bulk, ask)
    assert confirm.status_code == 200 and [i.pk for _, i in confirm.context["failed"]] == [dead.pk]
    assert "&lt;script&gt;" in confirm.content.decode() and "<script>alert(" not in confirm.content.decode()
    assert Delivery.objects.get(item=dead).state == S.DEAD  # nothing before the confirmation
    client.post(bulk, {**ask, "confirm": "yes", "reason": ""})
    assert Delivery.objects.get(item=dead).state == S.DEAD
    done = client.post(bulk, {**ask, "confirm": "yes", "reason": "receiver fixed"})
    assert done.status_code == 302
    assert Delivery.objects.get(item=dead).state == S.QUEUED
    assert AuditEvent.objects.get(action=AuditAction.ITEM_DELIVERY_RETRIED, subject_id=str(dead.pk)).reason == "receiver fixed"


# --- the incident report -------------------------------------------------------------------------------------
def test_the_report_lists_each_items_delivery_in_json_html_and_csv(dead, canonical):
    report = reports.build_report(canonical.incident)
    by_id = {c["id"]: c for c in report["compensation"]}
    line = by_id[dead.pk]["delivery"]
    assert {k: line[k] for k in ("state", "connector", "reference", "attempts")} == {
        "state": "dead", "connector": "sandbox_ledger", "reference": "re_ref_77", "attempts": 3}
    assert all(c["delivery"] is None for c in report["compensation"] if c["status"] == St.PENDING)
    html = reports.render_html(report)
    assert f'<tr class="delivery" data-item="{dead.pk}">' in html and "re_ref_77" in html
    assert "<script>alert(" not in html and "&lt;script&gt;alert(" in html
    with zipfile.ZipFile(io.BytesIO(reports._csv_zip(report))) as z:
        rows = list(csv.DictReader(io.StringIO(z.read(f"incident-{canonical.incident.pk}/compensation.csv").decode())))
    row = next(r for r in rows if r["id"] == str(dead.pk))
    assert (row["delivery_state"], row["delivery_connector"], row["delivery_reference"], row["delivery_attempts"]) == (
        "dead", "sandbox_ledger", "re_ref_77", "3")
