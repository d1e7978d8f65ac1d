"""The last mile for the example desk in its own process: after a repair, each compensation names the
effects it answers for by the idempotency keys the desk itself recorded them under, and the example
pull loop (examples/compensations.py) carries an approved one out and acknowledges it."""
import json
import os
import subprocess
import sys

import pytest
from django.contrib.auth import get_user_model

from compensation.delivery_models import Delivery, DeliveryState
from compensation.delivery.execution import execute_item
from compensation.delivery.links import compensates
from compensation.models import CompensationItem
from core.roles import REVIEWER
from compensation.review.services import approve_item
from provenance.desk.scenario import POISONED_PAGE
from provenance.access.onboarding import issue_agent_token
from provenance.recording.services import get_workspace
from tests.agents.conftest import ROOT
from tests.compensation.delivery_support import use_connectors
from tests.helpers import create_user, flag_and_repair

pytestmark = pytest.mark.django_db(transaction=True)
K, St = CompensationItem.Kind, CompensationItem.Status
EXAMPLE = ROOT / "examples" / "compensations.py"


def test_a_remote_desks_compensations_carry_its_own_keys_and_the_example_pull_loop_performs_one(
        remote_desk, live_server, tmp_path):
    desk = remote_desk("remote-last-mile")
    desk.start()
    sent = {row["key"] for row in desk.performed()}
    assert sent and all(k.startswith(("refund-", "email-")) for k in sent)
    incident = flag_and_repair("remote-last-mile", POISONED_PAGE)
    assert incident.status == "repaired"

    items = list(incident.compensation_items.filter(kind__in=[K.REFUND_REVERSAL, K.CORRECTION_EMAIL]).order_by("pk"))
    assert items
    linked = compensates(items)
    for item in items:
        invalidated = [e for e in linked[item.pk] if e["role"] == "invalidated"]
        assert invalidated, item
        for effect in invalidated:  # the key the desk sent when it recorded the effect, nothing of ours
            assert effect["idempotency_key"] in sent
            assert effect["idempotency_key"].startswith(f"{effect['kind']}-{effect['ticket']}-")

    workspace = get_workspace("remote-last-mile")
    reviewer = create_user("last-mile-reviewer", REVIEWER, workspaces=[workspace])
    use_connectors(workspace.pk, **{K.REFUND_REVERSAL: ("agent_pull", {})})
    item = next(i for i in items if i.kind == K.REFUND_REVERSAL and i.valid)
    approve_item(item=item, actor=reviewer, reason="checked", via="api")
    execute_item(item_id=item.pk)
    assert Delivery.objects.get(item=item).state == DeliveryState.AWAITING_ACK

    root = get_user_model().objects.filter(is_superuser=True).first()
    _, key = issue_agent_token(workspace=workspace, label="compensations", actor=root, reason="pull", via="cli")
    log = tmp_path / "performed.jsonl"
    env = {k: v for k, v in os.environ.items() if not k.startswith("DJANGO")}
    run = subprocess.run([sys.executable, str(EXAMPLE), "pull", "--base-url", live_server.url, "--token", key,
                          "--once", "--performed-log", str(log)], capture_output=True, text=True, timeout=120,
                         env=env, cwd="/")
    assert run.returncode == 0, run.stderr[-2000:]
    assert json.loads(run.stdout) == {"answered": 1}
    [performed] = [json.loads(line) for line in log.read_text().splitlines()]
    item.refresh_from_db()
    assert performed["key"] == item.execution_key
    assert set(performed["compensates"]) == {e["idempotency_key"] for e in linked[item.pk] if e["role"] == "invalidated"}
    delivery = Delivery.objects.get(item=item)
    assert (delivery.state, delivery.reference) == (DeliveryState.DELIVERED, f"comp-{item.pk}")
    assert item.status == St.EXECUTED
