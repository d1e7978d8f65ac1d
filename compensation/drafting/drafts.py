"""Drafting compensation items after a repair: from the incident's invalidated and replacement effects
(netted per ticket by compensation.drafting.netting.plan_items) to validated drafts people review, with the path
from the flagged source to each effect. Drafting is split by ticket into parts under advisory locks, so
the repairing worker and idle workers share it; every item and its audit event go in together.
"""
from __future__ import annotations

import hashlib
import logging
import os
import socket
import zlib
from dataclasses import dataclass

from django.db import transaction
from django.db.models import Q

from compensation.drafting import effect_kinds, grouping, templates
from core.audit import trail
from compensation.drafting.customers import ticket_facts, workspace_locale
from compensation.drafting.kinds import MONEY, spec as kinds_spec
from compensation.drafting.netting import PlannedItem, plan_items
from compensation.models import CompensationItem, ReviewNotice
from compensation.drafting.transitions import set_status as _set_status
from compensation.drafting.validation import validate_draft
from core import locks
from core.bulk import copy_create, copy_rows
from core.locks import advisory_lock
from provenance.llm import ModelTask, backend_label, get_client
from provenance.models import Ticket
from core.scrub import scrub_secrets
from core.vocabulary import AuditAction, EffectRole, Via
from provenance.vocabulary import ActionStatus
from repairs.faults import fault_point
from repairs.models import Incident, RepairEffect

log = logging.getLogger(__name__)
NETTED_REFUND = ("refund_reduced", "refund_increased", "refund_unchanged")
K, St = CompensationItem.Kind, CompensationItem.Status


def _effect_dict(e: RepairEffect) -> dict:
    return {"effect_id": e.effect_id, "action_id": e.action_id, "role": e.role, "kind": e.kind, "ticket": e.ticket,
            "amount_cents": e.amount_cents, "currency": e.currency, "details": e.details, "repair_effect": e.pk,
            "incident": e.incident_id}


def _outcome_index(incident: Incident, tickets: set[str] | None = None) -> tuple[dict, list]:
    """Outcomes by action id: all of them, or those of `tickets` and of actions with no ticket (a
    path's handoff chain stays within its ticket; the poisoned actions have none)."""
    rows = incident.outcomes.all()
    if tickets is not None:
        rows = rows.filter(Q(ticket__in=tickets) | Q(ticket="") | Q(ticket__isnull=True) | Q(status=ActionStatus.POISONED))
    outcomes = {o.action_id: o for o in rows}
    return outcomes, sorted((o for o in outcomes.values() if o.status == ActionStatus.POISONED), key=lambda o: o.seq)


def _paths(incident: Incident, effects: list[dict], carried: dict | None = None,
           index: tuple[dict, list] | None = None) -> list[dict]:
    """For each effect, the path from the flagged source to it: the ingesting (poisoned) action, then
    the handoff chain from the root action that read its memory down to the action that caused the
    effect. Built from the repair's outcome rows, because the repair itself rewired the graph (re-runs
    drop the FEEDS edges that made them depend on the bad source)."""
    outcomes, poisoned = index or _outcome_index(incident)
    out = []
    for e in effects:
        if e.get("carried_from") and (carried or {}).get(e["effect_id"]):
            out.append({"effect_id": e["effect_id"], "role": e["role"], "steps": carried[e["effect_id"]]})
            continue
        chain, aid = [], e["action_id"]
        while aid is not None and aid in outcomes and len(chain) < 64:
            chain.append(outcomes[aid])
            aid = outcomes[aid].parent_id
        chain.reverse()
        steps = [{"node": "source", "label": incident.source_id, "edge": ""}]
        if poisoned and (not chain or chain[0].status != ActionStatus.POISONED):
            p = poisoned[0]
            steps.append({"node": "action", "label": f"{p.agent} #{p.action_id}", "status": p.status, "edge": "INGESTED"})
        for i, o in enumerate(chain):
            edge = "INGESTED" if o.status == ActionStatus.POISONED else ("FEEDS" if i == 0 else "HANDED_OFF")
            steps.append({"node": "action", "label": f"{o.agent} #{o.action_id}" + (f" ({o.ticket})" if o.ticket else ""),
                          "status": o.status, "edge": edge})
        steps.append({"node": "effect", "label": f"{e['kind']} #{e['effect_id']}", "status": e["role"], "edge": "CAUSED"})
        out.append({"effect_id": e["effect_id"], "role": e["role"], "steps": steps})
    return out


def _facts(planned: PlannedItem, ticket: Ticket | None, incident: Incident, locale: str = "en_US") -> dict:
    # Messages: emails, and the declared message kinds (which carry to/subject/body like an email).
    inv_emails = [e for e in planned.effects if e["role"] == "invalidated" and "body" in (e["details"] or {})]
    facts = {
        "ticket": planned.ticket, "source": incident.source_id, "situation": planned.situation,
        "refunded_cents": planned.netting.get("refunded_cents", 0),
        "replacement_cents": planned.netting.get("replacement_cents", 0),
        "reverse_cents": planned.netting.get("reverse_cents", 0),
        "netted": planned.netting.get("netted", False),
        "max_cents": planned.amount_cents if planned.kind in MONEY else None,
        # What a manual item carries: the amount of the effect a person compensates by hand.
        "effect_cents": planned.amount_cents if planned.kind == K.MANUAL_COMPENSATION else None,
        "original_subject": inv_emails[0]["details"].get("subject", "") if inv_emails else "",
        "original_body": inv_emails[0]["details"].get("body", "") if inv_emails else "",
    }
    # The new message folded into a correction (compensation.drafting): the corrected answer it carries.
    # A netted refund's new confirmation is not quoted: the correction states the corrected refund itself.
    corrected = [e for e in planned.effects if e["role"] == "replacement" and "body" in (e["details"] or {})]
    if corrected and planned.kind == K.CORRECTION_EMAIL and planned.situation not in NETTED_REFUND:
        facts["corrected_subject"] = corrected[-1]["details"].get("subject", "")
        facts["corrected_body"] = "\n\n".join(e["details"].get("body", "") for e in corrected)
    facts.update(ticket_facts(ticket, currency=planned.currency, locale=locale))
    return facts


def _planned_facts(planned: PlannedItem, tickets: dict, incident: Incident, locale: str) -> dict:
    """An item's facts; a customer's message about several tickets gets one section per ticket."""
    if not planned.sections:
        return _facts(planned, tickets.get(planned.ticket), incident, locale)
    sections = []
    for s in planned.sections:
        facts = _facts(s, tickets.get(s.ticket), incident, locale)
        sections.append((facts, grouping.section_facts(s, facts, tickets.get(s.ticket))))
    return {**grouping.grouped_facts(planned, sections), "source": incident.source_id,
            "locale": grouping.customer_locale([tickets.get(s.ticket) for s in planned.sections], locale)}


def _model_request(planned: PlannedItem, facts: dict, template=None) -> tuple[ModelTask, dict] | None:
    """(task, model input) for the items whose words the model writes (their spec says so); None for the others
    (for the customer message of a workspace that wrote its own template, and for one customer's message
    about several tickets: kintsugi's template writes it, a numbered entry per ticket)."""
    if (template is not None and planned.kind == K.CORRECTION_EMAIL) or grouping.is_grouped(facts):
        return None
    words = kinds_spec(planned.kind).model_words
    return (words.task, words.request(facts)) if words is not None else None


def write_draft(planned: PlannedItem, facts: dict, *, workspace: str | None = None,
                kinds=effect_kinds.effect_kind, template: tuple | None = None) -> tuple[dict, str, str, list[str]]:
    """(draft fields, drafted_by, prompt_version, drafting problems) for one planned item, in the words its
    kind's spec gives (compensation.drafting.kinds); the model's answers come from (and go to) `workspace`'s cache;
    `kinds` names the workspace's effect kinds; `template` is the workspace's own (Template, version) for its
    customer messages, if it wrote one."""
    registration = kinds_spec(planned.kind)  # an unknown kind fails here, loudly
    if grouping.is_grouped(facts):
        words, version = template or (templates.customer_message.DEFAULT, 0)
        by = f"kintsugi (one message for {len(facts['sections'])} tickets" + (f", template v{version})" if version else ")")
        return templates.render_draft(words, facts, team=workspace or ""), by, "", []
    if template is not None and planned.kind == K.CORRECTION_EMAIL:
        return (templates.render_draft(template[0], facts, team=workspace or ""),
                f"kintsugi (message template v{template[1]})", "", [])
    if registration.words is not None:  # kintsugi's own words
        written = registration.words(planned, facts, kinds)
        return written.fields, written.by, written.prompt_version, []
    task, model_input = _model_request(planned, facts)
    try:
        # Deferred: the caller saves every new answer to the shared cache in one write.
        answer = get_client().complete(task, model_input, defer=True, workspace=workspace)
    except Exception as exc:  # noqa: BLE001 - any model failure leaves an invalid draft, never a failed repair
        message = scrub_secrets(str(exc).splitlines()[0] if str(exc) else "")
        log.warning("drafting %s for ticket %s failed: %s", planned.kind, planned.ticket, message)
        return ({"to": "", "subject": "", "body": "", "amount_cents": 0, "currency": facts["currency"],
                 "payment_reference": ""}, backend_label(), task.prompt_version,
                [f"drafting failed: {type(exc).__name__}: {message}"])
    return registration.model_words.fields(answer, facts), backend_label(), task.prompt_version, []


@dataclass
class DraftedItem:
    """What drafting makes of one planned item before anything is saved."""

    planned: PlannedItem
    facts: dict
    draft: dict
    drafted_by: str
    prompt_version: str
    problems: list[str]


def draft_key(incident: Incident, planned: PlannedItem) -> str:
    key = f"{incident.pk}:{planned.kind}:{planned.ticket}:{planned.draft_suffix}"
    if len(key) <= KEY_LENGTH:
        return key
    # A customer's message about many tickets carries many effects: the same key, digested to fit the column.
    return f"{key[:KEY_LENGTH - 66]}:#{hashlib.sha256(key.encode()).hexdigest()}"


KEY_LENGTH = CompensationItem._meta.get_field("draft_key").max_length


def planned_items(*, incident: Incident, effects: list[dict], lock: bool) -> tuple[list, list[PlannedItem], dict]:
    """(earlier items this repair supersedes, the items its effects net to, the superseded items' paths
    by effect id). `effects` are RepairEffect-shaped dicts; with `lock` the superseded items are locked
    for update (the caller's transaction), without it they are only read (a what-if)."""
    cancelled = {e["effect_id"] for e in effects if e["role"] == RepairEffect.Role.CANCELLED}
    superseded, carried, carried_paths = _superseded_items(incident, cancelled, lock=lock)
    planned = plan_items([e for e in effects if e["role"] != RepairEffect.Role.CANCELLED] + carried,
                         effect_kinds.kinds_of(incident.workspace_id))
    # One message per customer: the messages of a customer's several tickets become one.
    planned = grouping.group_messages(planned, grouping.customer_keys(incident.workspace_id, {p.ticket for p in planned}))
    return superseded, planned, carried_paths


def draft_planned(*, planned: list[PlannedItem], incident: Incident) -> list[DraftedItem]:
    """Draft each planned item: its facts, the model's text and what validation finds wrong with it.
    Writes nothing but new model answers to the shared response cache, so the same planned items
    drafted again (the real repair after a what-if) come out the same."""
    wanted = {s.ticket for p in planned for s in (p.sections or [p])}
    tickets = {t.ticket_id: t for t in Ticket.objects.filter(workspace_id=incident.workspace_id, ticket_id__in=wanted)}
    locale = workspace_locale(incident.workspace)
    todo = [(p, _planned_facts(p, tickets, incident, locale)) for p in planned]
    client = get_client()
    ws_name = incident.workspace.name
    kinds = effect_kinds.kinds_of(incident.workspace_id)
    own, version = templates.current(workspace_id=incident.workspace_id)
    template = (own, version) if version else None
    out = []
    with client.prefetched([(*r, None) for r in (_model_request(p, facts, template) for p, facts in todo)
                            if r is not None], workspace=ws_name):
        for p, facts in todo:
            draft, drafted_by, version, drafting_problems = write_draft(p, facts, workspace=ws_name, kinds=kinds,
                                                                        template=template)
            # validate_draft says too when the item waits for its ticket (compensation.drafting.customers).
            problems = drafting_problems or validate_draft(kind=p.kind, draft=draft, facts=facts)
            out.append(DraftedItem(p, facts, draft, drafted_by, version, problems))
    client.flush()
    return out


# Drafting is split by ticket into this many parts, so that idle workers can share it and a reviewer
# can decide the first items after an eighth of the drafting (a quarter took 6 s at 100k actions).
DRAFT_PARTS = 8


def ticket_parts(incident: Incident, parts: int) -> dict:
    """The drafting part of each ticket of the incident's effects: by its customer (grouping.customer_key),
    so that one customer's tickets are drafted together into their one message."""
    tickets = set(incident.effects.values_list("ticket", flat=True).distinct())
    keys = grouping.customer_keys(incident.workspace_id, tickets)
    return {t: zlib.crc32((keys.get(t) or t or "").encode()) % parts for t in tickets}


def draft_compensations(*, incident: Incident, actor=None, reason: str = "repair finished",
                        via: str = Via.WORKER, part: int = 0, parts: int = 1) -> int | None:
    """Turn a finished repair's effects into review items, idempotently (a second call adds nothing).

    Returns how many items of this incident compensate invalidated effects (the incident's
    `compensations` count); replacement items are created beside them but not counted.

    Effects this repair cancelled are held replacements of an earlier incident of the same run. The
    earlier items holding them are superseded: a pending one is cancelled and its other effects (e.g.
    the invalidated refund it netted against the cancelled replacement) are netted again here; an
    approved or executed one already let its replacement leave, so that replacement is compensated here
    as an invalidated effect.

    With `parts` > 1 only the tickets of one part (by a hash of their customer) are drafted, and nothing
    is counted (None): items never span customers (a customer's one message spans their tickets, and
    parts are split by customer), so parts drafted apart (draft_repair) come out as one call would."""
    effects, items = incident.effects.all(), CompensationItem.objects.filter(incident=incident)
    part_tickets = None
    if parts > 1:
        # By customer, not by ticket: one customer's tickets are drafted together into their one message.
        part_tickets = {t for t, p in ticket_parts(incident, parts).items() if p == part}
        effects, items = effects.filter(ticket__in=part_tickets), items.filter(ticket_id__in=part_tickets)
    effects = [_effect_dict(e) for e in effects]
    with transaction.atomic():
        if any(e["role"] == RepairEffect.Role.CANCELLED for e in effects):
            trail.lock_chain(incident.workspace_id)  # chain before item locks, like every audited transaction
        superseded, planned, carried_paths = planned_items(incident=incident, effects=effects, lock=True)
        existing = set(items.values_list("draft_key", flat=True))
        # An item whose every effect an item of this incident already holds is drafted already, under
        # another grouping (a customer's tickets grouped otherwise since: a ticket that arrived, an
        # address that changed): drafting it again would send the customer a second message.
        held = set(CompensationItem.effects.through.objects.filter(compensationitem__in=items)
                   .values_list("repaireffect_id", flat=True))
        # Model calls before the chain lock (when nothing was cancelled), so audit writers elsewhere
        # wait only for the short write part.
        drafted = draft_planned(planned=[p for p in planned if draft_key(incident, p) not in existing
                                         and not (p.effects and all(e["repair_effect"] in held for e in p.effects))],
                                incident=incident)
        # Loaded once: building each item's path from a fresh query made drafting quadratic.
        index = _outcome_index(incident, part_tickets) if drafted else None
        trail.lock_chain(incident.workspace_id)
        for old in superseded:
            if old.status == St.PENDING:
                _set_status(old, St.CANCELLED, actor=actor, via=via, action=AuditAction.ITEM_CANCELLED,
                            reason=f"its held replacement was cancelled by incident #{incident.pk}; "
                                   f"what it compensated is drafted again there")
        # In bulk: one INSERT for the items, one for their effect links, one for their audit events
        # (a statement trigger keeps the queue totals), instead of ~10 round trips per item.
        new_items = []
        for d in drafted:
            p, facts, draft = d.planned, d.facts, d.draft
            new_items.append(CompensationItem(
                incident=incident, kind=p.kind, draft_key=draft_key(incident, p), ticket_id=p.ticket,
                customer_email=facts["customer_email"], facts=facts, original=p.effects,
                path=_paths(incident, p.effects, carried_paths, index),
                to=draft["to"][:320], subject=draft["subject"][:300], body=draft["body"],
                payment_reference=draft["payment_reference"][:64], amount_cents=draft["amount_cents"],
                currency=(draft["currency"] or "")[:8], drafted_by=d.drafted_by, prompt_version=d.prompt_version,
                valid=not d.problems, problems=d.problems,
            ))
        copy_create(new_items, with_ids=True)  # COPY, not INSERT: see core.bulk
        if new_items:
            # The reviewers are owed a notice from the commit of the first items on (compensation.notices):
            # written here, in the items' own transaction, it cannot be lost to a broker that refuses its task.
            ReviewNotice.objects.bulk_create([ReviewNotice(incident=incident)], ignore_conflicts=True)
        copy_rows(CompensationItem.effects.through, ({"compensationitem_id": item.pk, "repaireffect_id": e["repair_effect"]}
                                                     for item, d in zip(new_items, drafted) for e in d.planned.effects))
        worker = f"{socket.gethostname()}:{os.getpid()}"  # which process drafted (several may share a repair)
        trail.record_many([dict(
            action=AuditAction.ITEM_DRAFTED, subject_type="compensation_item", subject_id=item.pk, via=via, actor=actor,
            reason=reason, incident_id=incident.pk, to_status=St.PENDING,
            data={"kind": item.kind, "ticket": item.ticket_id, "amount_cents": item.amount_cents,
                  "currency": item.currency, "valid": item.valid, "problems": item.problems,
                  "drafted_by": item.drafted_by, "effects": [e["effect_id"] for e in d.planned.effects],
                  "carried_from": sorted({e["carried_from"] for e in d.planned.effects if e.get("carried_from")}),
                  "worker": worker})
            for item, d in zip(new_items, drafted)], workspace=incident.workspace_id)
    if parts > 1:
        return None
    return compensation_count(incident=incident)


def compensation_count(*, incident: Incident) -> int:
    """How many of the incident's items compensate invalidated effects (its `compensations` count);
    replacement items are drafted beside them but not counted."""
    return CompensationItem.objects.filter(incident=incident, original__contains=[{"role": EffectRole.INVALIDATED}]).count()


def draft_repair(*, incident: Incident, wait: bool) -> bool:
    """Draft a repair's items as soon as its plan is checkpointed, while the repair is still being
    applied and verified: by the repairing worker and by idle ones meanwhile, each taking the parts
    nobody has taken. Items are decided once the plan is applied (compensation.delivery.gates). False when
    another worker is drafting a part and `wait` is off; with `wait` it returns once every part is
    drafted."""
    done = True
    for part in range(DRAFT_PARTS):
        with advisory_lock(locks.DRAFT_PART, incident.pk * DRAFT_PARTS + part, wait=wait) as mine:
            if mine:
                draft_compensations(incident=incident, actor=None, reason="repair planned", via=Via.WORKER,
                                    part=part, parts=DRAFT_PARTS)
                fault_point(f"drafted:{part}")
            done = done and mine
    return done


def _superseded_items(incident: Incident, cancelled: set[int], *, lock: bool = True
                      ) -> tuple[list[CompensationItem], list[dict], dict]:
    """Earlier items (same workspace run) holding a replacement this repair cancelled, locked (unless
    `lock` is off); the effects to net again here; and their old paths by effect id."""
    if not cancelled:
        return [], [], {}
    pks = set(CompensationItem.objects.filter(
        incident__workspace_id=incident.workspace_id, incident__run_number=incident.run_number,
        effects__effect_id__in=cancelled, effects__role=RepairEffect.Role.REPLACEMENT,
        status__in=(St.PENDING, St.APPROVED, St.EXECUTED)).exclude(incident_id=incident.pk).values_list("pk", flat=True))
    rows = CompensationItem.objects.select_for_update(of=("self",)) if lock else CompensationItem.objects
    # Without the incidents' plans (megabytes of JSON each on a large repair), or each comes once per item.
    items = list(rows.select_related("incident").defer("incident__plan").filter(pk__in=pks).order_by("pk"))
    carried, paths = [], {}
    for item in items:
        for p in item.path:
            paths.setdefault(p["effect_id"], p["steps"] + [{"node": "item", "label": f"compensation item #{item.pk}",
                                                          "status": item.status, "edge": "HELD_BY"}])
        for row in item.effects.all():
            was_cancelled = row.role == RepairEffect.Role.REPLACEMENT and row.effect_id in cancelled
            if item.status == St.PENDING and not was_cancelled:
                carried.append({**_effect_dict(row), "carried_from": item.pk})
            elif item.status != St.PENDING and was_cancelled:
                # Approved: the replacement left (or is leaving) with the item; compensate it like any
                # effect that left on a decision that no longer holds.
                carried.append({**_effect_dict(row), "role": RepairEffect.Role.INVALIDATED, "carried_from": item.pk})
    return items, carried, paths
