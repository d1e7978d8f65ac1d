"""agent_pull through the real worker and the real HTTP server: an approval is offered by the Celery
worker, the Python client pulls it and acknowledges it, and tasks delivered again offer nothing twice."""
from __future__ import annotations

import time

import pytest
from django.contrib.auth import get_user_model

from compensation.delivery_models import Delivery, DeliveryState
from compensation.models import AuditEvent, CompensationItem
from compensation.review.services import approve_item
from compensation.tasks import execute_compensation
from kintsugi_client import Client, KintsugiError
from provenance.access.onboarding import issue_agent_token
from tests.compensation.delivery_support import use_connectors
from tests.helpers import repaired_incident, wait_for

K, St, S = CompensationItem.Kind, CompensationItem.Status, DeliveryState


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_the_worker_offers_an_approval_and_the_python_client_pulls_and_acknowledges_it(
        people, celery_worker_process, live_server, settings):
    incident = repaired_incident(flagger=people.lead, settings=settings)
    use_connectors(incident.workspace_id, **{K.REFUND_REVERSAL: ("agent_pull", {})})
    item = incident.compensation_items.filter(kind=K.REFUND_REVERSAL, valid=True).order_by("pk").first()
    approve_item(item=item, actor=people.reviewer, reason="checked", via="api")
    wait_for(lambda: Delivery.objects.filter(item=item, state=S.AWAITING_ACK).exists(), timeout=90)

    # The same task again, and the sweep's: the offer stands once, the item stays approved.
    execute_compensation.delay(item.pk)
    execute_compensation.delay(item.pk)
    time.sleep(3)
    delivery = Delivery.objects.get(item=item)
    assert (delivery.state, delivery.attempts, delivery.connector) == (S.AWAITING_ACK, 1, "agent_pull")
    assert CompensationItem.objects.get(pk=item.pk).status == St.APPROVED

    root = get_user_model().objects.create_superuser("pull-worker-root", "root@example.com", "x")
    _, key = issue_agent_token(workspace=incident.workspace, label="team agent", actor=root, reason="pull", via="cli")
    client = Client(live_server.url, key, timeout=30)
    pending = client.pending_compensations(limit=1)
    assert [p["id"] for p in pending] == [item.pk]
    item.refresh_from_db()
    assert pending[0]["idempotency_key"] == item.execution_key
    assert {e["effect_id"] for e in pending[0]["compensates"]} == {e["effect_id"] for e in item.original}

    answer = client.ack_compensation(item.pk, "performed", reference="re_worker_1", message="done")
    assert answer["delivery_state"] == "delivered" and answer["item_status"] == "executed"
    assert client.ack_compensation(item.pk, "performed", reference="re_worker_1") == answer
    with pytest.raises(KintsugiError) as conflict:
        client.ack_compensation(item.pk, "failed", message="changed my mind")
    assert conflict.value.status == 409 and conflict.value.code == "conflict"
    with pytest.raises(KintsugiError) as unknown:
        client.ack_compensation(item.pk + 10_000_000, "performed")
    assert unknown.value.status == 404
    assert client.pending_compensations() == []
    item.refresh_from_db()
    assert item.status == St.EXECUTED
    assert AuditEvent.objects.filter(action="item.delivery_acknowledged", subject_id=str(item.pk)).count() == 1
