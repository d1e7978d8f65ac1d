"""Sources worth a look: the poisoned page ranks first, with its reasons, on the canonical and generated
desks, and not once its poison is gone; trust set by a lead moves a source and follows lineage."""
import pytest
from django.contrib.auth.models import Group

from compensation.models import AuditEvent
from core.roles import SUPPORT_LEAD, ensure_roles
from provenance.recording import services as provenance_services
from provenance.desk.scenario import PAGES, POISONED_PAGE
from provenance.graph.graph import workspace_graph
from provenance.models import Source, Workspace
from provenance.recording.services import desk_run
from provenance.access.trust import TrustRefused, fact_rows, fact_trust, set_source_trust
from provenance.validation import InvalidInput
from repairs.suspicious import loosening, suspicious_sources
from tests.helpers import flagger, graph_dump

pytestmark = pytest.mark.django_db(transaction=True)


def _ranked(name: str):
    return suspicious_sources(workspace=Workspace.objects.get(name=name))


@pytest.mark.parametrize("tickets,seed", [(None, 0), (120, 4), (300, 9)])
def test_the_poisoned_page_ranks_first_with_its_reasons_and_nothing_is_flagged(tickets, seed):
    desk_run(workspace="sus", tickets=tickets, seed=seed)
    dump = graph_dump("sus")
    ranked = _ranked("sus")
    assert ranked[0].source == POISONED_PAGE
    reasons = " | ".join(ranked[0].reasons)
    assert "contradicts v1 from acme/vip-program" in reasons
    assert "loosens it" in reasons and "no checks" in reasons and "verified" in reasons
    assert "the newest by first appearance" in reasons
    assert "ticket decisions and reverse $" in reasons
    assert ranked[0].score > ranked[1].score
    assert graph_dump("sus") == dump  # the ranking's what-ifs changed nothing
    from repairs.models import Incident
    assert not Incident.objects.exists()


def test_with_the_poison_removed_the_page_is_no_longer_first(monkeypatch):
    """Red test: the same page, saying what the VIP programme says, has nothing to contradict or loosen."""
    vip = next(p for p in PAGES if p[0] == "acme/vip-program")
    benign = [(POISONED_PAGE, title, vip[2]) if pid == POISONED_PAGE else (pid, title, content)
              for pid, title, content in PAGES]
    monkeypatch.setattr(provenance_services, "PAGES", benign)
    desk_run(workspace="sus-clean")
    ranked = _ranked("sus-clean")
    assert ranked[0].source != POISONED_PAGE
    page = next(s for s in ranked if s.source == POISONED_PAGE)
    assert not any("contradicts" in r or "loosens" in r for r in page.reasons)


def test_loosening_names_dropped_restrictions_and_added_permissions():
    assert loosening("Verified VIPs only get a full refund.", "Any customer gets a full refund, no checks.") == (
        ["only", "verified"], ["any customer", "no checks"])
    assert loosening("Refunds within 30 days.", "Refunds within 30 days.") == ([], [])


def test_a_lead_marks_a_source_and_trust_follows_lineage():
    desk_run(workspace="trust")
    ws = Workspace.objects.get(name="trust")
    lead = flagger("trust-lead")
    ensure_roles()
    lead.groups.add(Group.objects.get(name=SUPPORT_LEAD))
    ws.members.add(lead)
    page = Source.objects.get(workspace=ws, source_id=POISONED_PAGE)
    events = AuditEvent.objects.count()
    set_source_trust(source=page, level="untrusted", actor=lead, reason="a partner blog is not our policy", via="admin")
    event = AuditEvent.objects.order_by("-pk").first()
    assert AuditEvent.objects.count() == events + 1
    assert (event.action, event.from_status, event.to_status, event.actor_id) == ("source.trust_set", "unknown",
                                                                                  "untrusted", lead.pk)
    set_source_trust(source=Source.objects.get(workspace=ws, source_id="acme/vip-program"), level="trusted",
                     actor=lead, reason="our own page", via="admin")
    rows = fact_rows(workspace_graph("trust"))
    trust = fact_trust(workspace=ws, rows=rows)
    by_key_version = {(f.key, f.version): trust[f.id] for f in rows}
    assert by_key_version[("vip_rules", 1)] == "trusted"
    assert by_key_version[("vip_rules", 2)] == "untrusted"
    assert by_key_version[("refund_policy", 1)] == "unknown"
    reasons = _ranked("trust")
    assert reasons[0].source == POISONED_PAGE and "a lead marked it untrusted" in reasons[0].reasons
    # The judgement outlives a new desk run of the workspace.
    desk_run(workspace="trust")
    assert Source.objects.get(workspace=ws, source_id=POISONED_PAGE).trust == "untrusted"


def test_setting_trust_refuses_bad_input_and_people_without_the_role():
    desk_run(workspace="trust-no")
    page = Source.objects.get(workspace__name="trust-no", source_id=POISONED_PAGE)
    events = AuditEvent.objects.count()
    nobody = flagger("no-role")
    Workspace.objects.get(name="trust-no").members.add(nobody)
    events = AuditEvent.objects.count()
    with pytest.raises(TrustRefused):
        set_source_trust(source=page, level="untrusted", actor=nobody, reason="x", via="admin")
    with pytest.raises(InvalidInput):
        set_source_trust(source=page, level="very", actor=nobody, reason="x", via="cli")
    with pytest.raises(InvalidInput):
        set_source_trust(source=page, level="trusted", actor=nobody, reason="", via="cli")
    assert Source.objects.get(pk=page.pk).trust == "unknown"
    assert AuditEvent.objects.count() == events
