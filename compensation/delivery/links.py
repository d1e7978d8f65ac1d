"""What an item compensates, as the team that performed the effect knows it: each effect's action, id,
kind, ticket, amount and the idempotency key the effect went out with. The review API, the signed
webhook and the pull list (compensation.delivery.acknowledgements) all show this one list, so a team can find its
own record of the effect without asking kintsugi which of its payments or emails "#1042" was.

The key is, in order:
- the key the agent sent when it recorded the effect over HTTP (provenance.recording.effect_keys);
- for an effect an in-process agent recorded, the key kintsugi itself sent it out with, when the sandbox
  ledger or the outbox holds a row under it (provenance.recording.effects.idempotency_key);
- null otherwise: an effect that never left (a held replacement a repair produced), or one an in-process
  agent performed itself.
"""
from __future__ import annotations

from collections import defaultdict

from compensation.models import CompensationItem
from provenance.recording import effect_keys
from provenance.recording.effects import idempotency_key
from provenance.models import LedgerEntry, OutboxEmail
from repairs.models import Incident


def compensates(items) -> dict[int, list[dict]]:
    """The compensated (or released) effects of each item, by item id, their keys looked up in a few
    queries for the whole batch (a page of the review queue)."""
    items = list(items)
    incidents = {i.pk: i for i in Incident.objects.filter(pk__in={item.incident_id for item in items})
                 .select_related("workspace").defer("plan", "verification")}
    effects_of = defaultdict(set)  # incident id -> effect ids
    for item in items:
        effects_of[item.incident_id].update(e["effect_id"] for e in item.original)
    keys: dict[tuple[int, int], str] = {}  # (incident id, effect id) -> key
    for incident_id, effect_ids in effects_of.items():
        incident = incidents[incident_id]
        agent = effect_keys.of_effects(workspace_id=incident.workspace_id, effect_ids=effect_ids)
        keys.update({(incident_id, e): k for e, k in agent.items()})
        ours = {idempotency_key(incident.workspace.name, incident.run_number, e): e
                for e in effect_ids if e not in agent}
        sent = set(LedgerEntry.objects.filter(idempotency_key__in=ours).values_list("idempotency_key", flat=True))
        sent |= set(OutboxEmail.objects.filter(idempotency_key__in=ours).values_list("idempotency_key", flat=True))
        keys.update({(incident_id, ours[k]): k for k in sent})
    return {item.pk: [_effect(e, keys.get((item.incident_id, e["effect_id"]))) for e in item.original]
            for item in items}


def _effect(e: dict, key: str | None) -> dict:
    return {"action_id": e["action_id"], "effect_id": e["effect_id"], "role": e["role"], "kind": e["kind"],
            "ticket": e.get("ticket") or "", "amount_cents": e["amount_cents"], "currency": e.get("currency", "USD"),
            "idempotency_key": key}


def item_payload(item: CompensationItem, compensated: list[dict] | None = None) -> dict:
    """An approved item as the team that carries it out receives it (webhook event, pull list)."""
    if compensated is None:
        compensated = compensates([item])[item.pk]
    return {"id": item.pk, "kind": item.kind, "ticket": item.ticket_id, "customer_email": item.customer_email,
            "to": item.to, "subject": item.subject, "body": item.body, "amount_cents": item.amount_cents,
            "currency": item.currency, "payment_reference": item.payment_reference, "original": item.original,
            "compensates": compensated}
