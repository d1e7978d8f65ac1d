"""A workspace's customer message template: the lead writes it, sees it against an incident's real
drafts, and re-drafts the incident's messages with it while nothing of the incident is approved yet.

- `set_template`: a Support lead of the workspace saves subject and body (placeholders checked by
  compensation.drafting.customer_message.template_problems), audited with what it said before and after.
- `preview`: each customer message of an incident as it reads now and as the template would write it,
  with what validation would find wrong in the new text. Writes nothing.
- `apply_to_incident`: the incident's pending, unedited customer messages re-drafted from the template,
  refused once any item of the incident was approved (an approved message was read in the old words;
  customers of one incident get one wording). Each re-draft is audited; the approval hash binds the new
  subject and body like any other content.
- `set_locale`: the same lead sets the locale money is written in (1.234,50 € for de_DE), audited as a
  change of the template's settings; a ticket's own locale wins (compensation.drafting.customers).
New drafts use the workspace's template from the moment it is saved (compensation.drafting.drafts).
"""
from __future__ import annotations

from dataclasses import dataclass

from django.db import transaction

from compensation.drafting import customer_message
from compensation.drafting.customer_message import Template
from compensation.models import CompensationItem, MessageTemplate
from compensation.drafting.validation import validate_draft
from core.audit import trail
from core.money import valid_locale
from core.vocabulary import AuditAction, ItemStatus
from provenance.access import capabilities
from provenance.access import tenancy
from provenance.models import Workspace
from repairs.models import Incident

EDIT = "edit_message_template"
K = CompensationItem.Kind


class TemplateRefused(PermissionError):
    pass


def current(*, workspace_id: int) -> tuple[Template, int]:
    """(the template the workspace's messages are drafted from, its version; 0: the desk's default)."""
    row = MessageTemplate.objects.filter(workspace_id=workspace_id).first()
    return (Template(row.subject, row.body), row.version) if row else (customer_message.DEFAULT, 0)


def may_edit(actor, workspace: Workspace) -> bool:
    return tenancy.may_see(actor, workspace) and capabilities.may(actor, EDIT)


def set_template(*, workspace: Workspace, subject: str, body: str, actor, reason: str, via: str) -> MessageTemplate:
    """Save the workspace's template (a Support lead there); ValueError for a template that cannot render."""
    if not may_edit(actor, workspace):
        raise TemplateRefused(f"user {getattr(actor, 'username', None)!r} may not edit the message template of "
                              f"workspace {workspace.name!r} (its Support lead needed)")
    reason = (reason or "").strip()
    if not reason:
        raise ValueError("changing the message template needs a reason")
    subject, body = (subject or "").strip(), (body or "").replace("\r\n", "\n").strip()
    problems = customer_message.template_problems(subject, body)
    if problems:
        raise ValueError("; ".join(problems))
    with transaction.atomic():
        trail.lock_chain(workspace)
        row = MessageTemplate.objects.select_for_update().filter(workspace=workspace).first()
        before = {"subject": row.subject, "body": row.body, "version": row.version} if row else \
            {"subject": customer_message.DEFAULT.subject, "body": customer_message.DEFAULT.body, "version": 0}
        if row is None:
            row = MessageTemplate(workspace=workspace, version=0)
        row.subject, row.body, row.version, row.updated_by = subject, body, row.version + 1, actor
        row.save()
        trail.record(action=AuditAction.MESSAGE_TEMPLATE_CHANGED, subject_type="workspace", subject_id=workspace.pk,
                     via=via, actor=actor, reason=reason, workspace=workspace,
                     data={"before": before, "after": {"subject": subject, "body": body, "version": row.version}})
    return row


def set_locale(*, workspace: Workspace, locale: str, actor, reason: str, via: str) -> str:
    """Set how money is written in the workspace's customer messages (a Support lead there; empty: the
    deployment's KINTSUGI_MESSAGE_LOCALE), audited with the template's changes. New drafts use it; a
    ticket's own locale still wins. ValueError for a locale babel does not know."""
    if not may_edit(actor, workspace):
        raise TemplateRefused(f"user {getattr(actor, 'username', None)!r} may not change the message locale of "
                              f"workspace {workspace.name!r} (its Support lead needed)")
    reason = (reason or "").strip()
    if not reason:
        raise ValueError("changing the message locale needs a reason")
    locale = valid_locale(locale) if (locale or "").strip() else ""
    with transaction.atomic():
        trail.lock_chain(workspace)
        before = Workspace.objects.select_for_update().values_list("message_locale", flat=True).get(pk=workspace.pk)
        Workspace.objects.filter(pk=workspace.pk).update(message_locale=locale)
        workspace.message_locale = locale
        trail.record(action=AuditAction.MESSAGE_TEMPLATE_CHANGED, subject_type="workspace", subject_id=workspace.pk,
                     via=via, actor=actor, reason=reason, workspace=workspace,
                     data={"before": {"locale": before}, "after": {"locale": locale}})
    return locale


def render_draft(template: Template, facts: dict, *, team: str) -> dict:
    subject, body = customer_message.render(template, facts, team=team)
    return {"to": facts.get("customer_email", ""), "subject": subject, "body": body, "amount_cents": 0,
            "currency": facts.get("currency") or "USD", "payment_reference": ""}


@dataclass(frozen=True)
class PreviewRow:
    item: CompensationItem
    subject: str
    body: str
    problems: list[str]

    @property
    def changes(self) -> bool:
        return (self.subject, self.body) != (self.item.subject, self.item.body)


def messages_of(incident: Incident):
    return (CompensationItem.objects.filter(incident=incident, kind=K.CORRECTION_EMAIL)
            .order_by("ticket_id", "pk"))


def preview(*, incident: Incident, template: Template, limit: int = 50) -> list[PreviewRow]:
    """The incident's customer messages as `template` would write them (the first `limit`)."""
    rows = []
    for item in messages_of(incident)[:limit]:
        draft = render_draft(template, item.facts, team=incident.workspace.name)
        rows.append(PreviewRow(item, draft["subject"], draft["body"],
                               validate_draft(kind=item.kind, draft=draft, facts=item.facts)))
    return rows


def approved_any(incident: Incident) -> bool:
    """Whether any item of the incident was ever approved (its approval audited, even if undone since)."""
    return (CompensationItem.objects.filter(incident=incident, status__in=(ItemStatus.APPROVED, ItemStatus.EXECUTED))
            .exists() or incident.audit_events.filter(action=AuditAction.ITEM_APPROVED).exists())


def apply_to_incident(*, incident: Incident, actor, reason: str, via: str) -> int:
    """Re-draft the incident's pending, unedited customer messages from the workspace's template; how many
    changed. Refused once any item of the incident was approved."""
    workspace = incident.workspace
    if not may_edit(actor, workspace):
        raise TemplateRefused(f"user {getattr(actor, 'username', None)!r} may not re-draft the messages of "
                              f"workspace {workspace.name!r} (its Support lead needed)")
    reason = (reason or "").strip() or "the workspace's message template changed"
    template, version = current(workspace_id=workspace.pk)
    changed = 0
    with transaction.atomic():
        trail.lock_chain(workspace)
        if approved_any(incident):
            raise TemplateRefused(f"incident #{incident.pk} already has an approved item: its customers' messages "
                                  f"keep the wording reviewers approved")
        items = list(messages_of(incident).filter(status=ItemStatus.PENDING, edited=False).select_for_update())
        for item in items:
            draft = render_draft(template, item.facts, team=workspace.name)
            if (draft["subject"], draft["body"]) == (item.subject, item.body):
                continue
            problems = validate_draft(kind=item.kind, draft=draft, facts=item.facts)
            item.subject, item.body = draft["subject"], draft["body"]
            item.valid, item.problems = not problems, problems
            item.drafted_by = f"kintsugi (message template v{version})"
            item.save(update_fields=["subject", "body", "valid", "problems", "drafted_by", "updated_at"])
            trail.record(action=AuditAction.ITEM_REDRAFTED, subject_type="compensation_item", subject_id=item.pk,
                         via=via, actor=actor, reason=reason, incident_id=incident.pk,
                         data={"template_version": version, "valid": item.valid, "problems": problems})
            changed += 1
    return changed
