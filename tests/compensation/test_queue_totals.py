"""QueueTotal: the per (incident, status, currency) item counts and cents that the item table's triggers
keep, which the dashboard, the incident page and the review queue's counts read instead of the items."""
import pytest
from django.db import connection, transaction
from django.db.models import Count, F, Sum

from compensation.models import CompensationItem, QueueTotal
from compensation.review.selectors import pending_totals, queue_count
from compensation.review.services import approve_item, reject_item
from compensation.review.selectors import compensation_summary
from tests.helpers import app_role_may_delete

pytestmark = pytest.mark.django_db
K = CompensationItem.Kind


def _from_items() -> dict:
    rows = CompensationItem.objects.values("incident_id", "status", "currency").annotate(
        n=Count("*"), cents=Sum("amount_cents")).order_by()
    return {(r["incident_id"], r["status"], r["currency"]): (r["n"], r["cents"]) for r in rows}


def _from_totals() -> dict:
    rows = QueueTotal.objects.values_list("incident_id", "status", "currency", "items", "cents")
    assert all(items >= 0 for *_, items, _ in rows)
    assert all(cents == 0 for *_, items, cents in rows if items == 0)  # an emptied group keeps a zero row
    return {(i, s, c): (items, cents) for i, s, c, items, cents in rows if items}


def _copies(incident, n: int) -> list[CompensationItem]:
    """n new rows copied from the incident's items, the way the admin bench bulk-creates its 100k."""
    templates = list(incident.compensation_items.order_by("pk"))
    skip = {"id", "draft_key", "execution_key", "created_at", "updated_at"}
    fields = [f.attname for f in CompensationItem._meta.concrete_fields if f.attname not in skip]
    return [CompensationItem(**{f: getattr(templates[i % len(templates)], f) for f in fields}, draft_key=f"copy:{i}")
            for i in range(n)]


def test_totals_follow_every_kind_of_write_to_the_items(canonical):
    incident, people = canonical.incident, canonical.people
    assert _from_totals() == _from_items() and _from_items()  # the drafting service's inserts
    refund = incident.compensation_items.get(kind=K.REFUND_REVERSAL, ticket_id="t05")
    approve_item(item=refund, actor=people.reviewer, reason="checked", via="admin")
    reject_item(item=incident.compensation_items.get(kind=K.CORRECTION_EMAIL, ticket_id="t05"),
                actor=people.reviewer, reason="called instead", via="admin")
    assert _from_totals() == _from_items()

    CompensationItem.objects.bulk_create(_copies(incident, 250), batch_size=100)  # three INSERT statements
    assert _from_totals() == _from_items()
    pending = CompensationItem.objects.filter(incident=incident, status="pending")
    pending.filter(kind=K.REFUND_REVERSAL).update(amount_cents=F("amount_cents") + 101)  # amounts only
    CompensationItem.objects.filter(pk=pending.filter(kind=K.REFUND_REVERSAL).first().pk).update(currency="EUR")
    CompensationItem.objects.filter(draft_key__startswith="copy:", kind=K.CORRECTION_EMAIL).update(status="executed")
    assert _from_totals() == _from_items()

    with app_role_may_delete(CompensationItem):
        CompensationItem.objects.filter(draft_key__startswith="copy:").delete()
    assert _from_totals() == _from_items()
    member = people.reviewer  # a member of the incident's workspace sees every item of it
    assert queue_count(user=member) == CompensationItem.objects.count()
    assert queue_count(user=member, status="pending", incident_id=incident.pk) == pending.count()
    assert queue_count(user=member, status="pending", incident_id=incident.pk + 1000) == 0


def test_a_text_edit_writes_nothing_to_the_totals(canonical):
    """An update that changes no status, currency or amount takes no row lock on the hot total rows."""
    def versions():
        with connection.cursor() as cur:
            cur.execute("SELECT id, xmin::text FROM compensation_queuetotal ORDER BY id")
            return cur.fetchall()

    before = versions()
    CompensationItem.objects.filter(incident=canonical.incident).update(body="rewritten", subject="rewritten")
    assert versions() == before


def test_truncating_the_items_empties_the_totals(canonical):
    assert QueueTotal.objects.exists()
    # Only the owner may truncate items (core.db_roles); the totals must follow all the same.
    # In a savepoint rolled back before the privilege is taken back: TRUNCATE holds the table (and its
    # catalog row) until its (sub)transaction ends, and the owner's REVOKE would wait for it.
    with app_role_may_delete(CompensationItem, privilege="TRUNCATE"):
        with pytest.raises(_Undone), transaction.atomic(), connection.cursor() as cur:
            cur.execute("SET CONSTRAINTS ALL IMMEDIATE")  # TRUNCATE refuses tables with pending FK checks
            cur.execute("TRUNCATE compensation_compensationitem CASCADE")
            assert not QueueTotal.objects.exists()
            raise _Undone
    assert QueueTotal.objects.exists()


class _Undone(Exception):
    pass


def test_pending_summary_is_exact_per_currency(canonical):
    incident = canonical.incident
    euro = incident.compensation_items.filter(status="pending", kind=K.REFUND_REVERSAL).order_by("pk").first()
    CompensationItem.objects.filter(pk=euro.pk).update(currency="EUR", amount_cents=12345)
    pending = CompensationItem.objects.filter(status="pending")
    expected = list(pending.values("currency").annotate(items=Count("*"), cents=Sum("amount_cents")).order_by("currency"))
    assert [r["currency"] for r in expected] == ["EUR", "USD"]
    member = canonical.people.reviewer
    assert pending_totals(user=member) == expected == pending_totals(incident=incident)
    summary = compensation_summary(incident=incident)
    assert summary["pending"] == pending.count()
    assert [(a["currency"], a["cents"]) for a in summary["amounts"]] == [(r["currency"], r["cents"]) for r in expected]
    assert [a["text"] for a in summary["amounts"]][-1].startswith("$")
    CompensationItem.objects.filter(pk=euro.pk).update(status="rejected")  # no pending EUR left: not listed
    assert [r["currency"] for r in pending_totals(user=member)] == ["USD"]
