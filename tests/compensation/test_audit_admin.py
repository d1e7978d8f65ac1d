"""The audit trail's admin shows and exports only the chains of the workspaces a user may see."""
import csv
import io

import pytest
from django.urls import reverse

from core.audit import chains, trail
from core.roles import AUDITOR
from provenance.models import Workspace

pytestmark = pytest.mark.django_db


@pytest.fixture
def trails():
    mine, theirs = Workspace.objects.create(name="trail-mine"), Workspace.objects.create(name="trail-theirs")
    for ws, reason in ((mine, "mine-event"), (theirs, "theirs-event"), (None, "system-event")):
        for i in range(3):
            trail.record(action="test.event", subject_type="test", subject_id=i, via="cli", reason=f"{reason}-{i}",
                         workspace=ws)
    return mine, theirs


def _export(client, fmt="csv"):
    return client.get(reverse("admin:compensation_auditevent_export"), {"format": fmt}).content.decode()


def test_a_member_sees_and_exports_only_their_workspaces_chain(client, make_user, trails):
    mine, _ = trails
    auditor = make_user("auditor1", AUDITOR)
    mine.members.add(auditor)
    client.force_login(auditor)
    page = client.get(reverse("admin:compensation_auditevent_changelist")).content.decode()
    assert "mine-event-2" in page and "theirs-event" not in page and "system-event" not in page
    # Newest first.
    assert page.index("mine-event-2") < page.index("mine-event-0")
    assert f'data-chain="workspace:{mine.pk}"' in page and 'data-chain="system"' not in page and "verified" in page
    rows = list(csv.DictReader(io.StringIO(_export(client))))
    assert [r["reason"] for r in rows] == ["mine-event-0", "mine-event-1", "mine-event-2"]
    assert "theirs-event" not in _export(client, "json")


def test_a_non_member_sees_nothing_and_another_chains_row_is_not_found(client, make_user, trails):
    _, theirs = trails
    client.force_login(make_user("auditor2", AUDITOR))
    assert "theirs-event" not in client.get(reverse("admin:compensation_auditevent_changelist")).content.decode()
    row = chains.chain_events(theirs).first()
    response = client.get(reverse("admin:compensation_auditevent_change", args=[row.pk]), follow=True)
    assert "theirs-event" not in response.content.decode()


def test_a_superuser_sees_every_chain_the_system_chain_included(client, django_user_model, trails):
    client.force_login(django_user_model.objects.create_superuser("root", password="pass-1234-kintsugi"))
    page = client.get(reverse("admin:compensation_auditevent_changelist")).content.decode()
    assert all(s in page for s in ("mine-event", "theirs-event", "system-event", 'data-chain="system"'))
    assert "system-event-0" in _export(client)


def test_the_audit_list_reads_for_a_person_hashes_and_filters_by_actor_within_the_workspace(client, make_user, trails):
    from django.contrib.auth import get_user_model

    mine, theirs = trails
    auditor = make_user("auditor2", AUDITOR)
    mine.members.add(auditor)
    alice = get_user_model().objects.create_user("alice-actor")
    mallory = get_user_model().objects.create_user("mallory-actor")
    trail.record(action="test.event", subject_type="test", subject_id=9, via="cli", actor=alice, reason="by alice",
                 workspace=mine)
    trail.record(action="test.event", subject_type="test", subject_id=9, via="cli", actor=mallory,
                 reason="by mallory", workspace=theirs)
    client.force_login(auditor)
    url = reverse("admin:compensation_auditevent_changelist")
    page = client.get(url).content.decode()
    newest = chains.chain_events(mine).order_by("-seq").first()
    # The first 12 digits to read, the whole hash and the one it chains to on demand.
    assert (f'<summary><code>{newest.hash[:12]}…</code></summary><code>{newest.hash}</code>'
            f'<span class="muted">after</span> <code>{newest.prev_hash}</code>') in page
    assert "alice-actor" in page and "mallory-actor" not in page  # the actor filter offers this workspace's only
    filtered = client.get(url, {"actor_name": "alice-actor"}).content.decode()
    assert "by alice" in filtered and "mine-event" not in filtered
    assert "by mallory" not in client.get(url, {"actor_name": "mallory-actor"}).content.decode()


def test_the_audit_list_filters_by_item_and_the_item_page_links_to_it(client, canonical):
    from compensation.models import AuditEvent, CompensationItem
    from compensation.review.services import reject_item

    incident, reviewer = canonical.incident, canonical.people.reviewer
    item, other = incident.compensation_items.filter(kind=CompensationItem.Kind.REFUND_REVERSAL).order_by("pk")[:2]
    reject_item(item=item, actor=reviewer, reason="kept the goods, reversal refused", via="admin")
    client.force_login(reviewer)
    url = reverse("admin:compensation_auditevent_changelist")
    response = client.get(url, {"item": item.pk})
    shown = list(response.context["cl"].result_list)
    assert {e.subject_id for e in shown} == {str(item.pk)} and len(shown) == AuditEvent.objects.filter(
        subject_type="compensation_item", subject_id=str(item.pk)).count() >= 2
    assert "kept the goods, reversal refused" in response.content.decode()
    assert not list(client.get(url, {"item": "abc"}).context["cl"].result_list)
    # The sidebar offers the chosen incident's items; the item page links to its own trail.
    choices = client.get(url, {"incident__id__exact": incident.pk}).content.decode()
    assert f"?incident__id__exact={incident.pk}&amp;item={other.pk}" in choices
    page = client.get(reverse("admin:compensation_compensationitem_change", args=[item.pk])).content.decode()
    assert f'href="{url}?item={item.pk}"' in page


def test_the_audit_list_opens_on_a_summary_and_finds_a_customers_ticket_and_item_events(client, canonical):
    from compensation.models import CompensationItem
    from compensation.review.services import reject_item

    incident, people = canonical.incident, canonical.people
    item = incident.compensation_items.filter(kind=CompensationItem.Kind.REFUND_REVERSAL).order_by("pk").first()
    other = incident.compensation_items.exclude(ticket_id=item.ticket_id).order_by("pk").first()
    reject_item(item=item, actor=people.reviewer, reason="the customer returned it", via="admin")
    client.force_login(people.auditor)
    url = reverse("admin:compensation_auditevent_changelist")
    page = client.get(url).content.decode()
    # The summary comes before the list, in words, never the record's action names.
    assert page.index('id="audit-summary"') < page.index('id="audit-search"') < page.index('id="result_list"')
    assert "every chain verifies" in page and "Item: rejected</a>: 1" in page and ">item.rejected<" not in page
    for params in ({"ticket": item.ticket_id}, {"customer": item.customer_email}, {"item": item.pk}):
        shown = list(client.get(url, params).context["cl"].result_list)
        subjects = {(e.subject_type, e.subject_id) for e in shown}
        assert ("compensation_item", str(item.pk)) in subjects, params
        assert ("compensation_item", str(other.pk)) not in subjects, params
    assert not list(client.get(url, {"ticket": "no-such-ticket"}).context["cl"].result_list)
