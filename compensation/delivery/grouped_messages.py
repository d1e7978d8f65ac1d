"""A customer's one message about several tickets says only what actually happens.

The message (compensation.drafting.grouping) explains every ticket's money item. When a reviewer rejects
one of them (or one is cancelled), that ticket's entry would promise money that will not move; when the
rejection is undone, the entry saying "your refund stays as it is" is no longer sure. `rewrite` writes
the message again from its facts with each entry matching its money item's decision now, so:
- a pending message simply reads the new text (the reviewer approves what they read: the page's
  digest and the approval hash bind the new content, compensation.delivery.approval);
- an approved one not yet sent is reopened first (approved -> pending): its approval bound the old
  text, and a person approves the new one;
- a message a reviewer edited is theirs: it is not rewritten, and is held and marked like a one-ticket
  message (compensation.delivery.sequencing, compensation.review.services);
- a sent one is history.
Execution checks again right before sending (compensation.delivery.execution), so a decision that raced
the rewrite never lets the older text leave.
"""
from __future__ import annotations

from compensation.delivery import sequencing
from compensation.drafting import templates
from compensation.drafting.grouping import is_grouped
from compensation.drafting.transitions import set_status
from compensation.drafting.validation import validate_draft
from compensation.models import CompensationItem
from core.audit import trail
from core.vocabulary import AuditAction

St = CompensationItem.Status
REFUSED = (St.REJECTED, St.CANCELLED)


def refused_now(item: CompensationItem) -> set[str]:
    """The tickets of `item` whose money item is rejected or cancelled now."""
    return {m.ticket_id for m in sequencing.explained_items(item) if m.status in REFUSED}


def stale(item: CompensationItem) -> bool:
    """Whether `item` (a grouped message kintsugi wrote) no longer matches its money items' decisions."""
    return (is_grouped(item.facts) and not item.edited and item.executed_at is None
            and item.status in (St.PENDING, St.APPROVED) and refused_now(item) != sequencing.said_kept(item))


def rewrite(item: CompensationItem, *, actor, via: str, reason: str, money: CompensationItem | None = None) -> bool:
    """Write `item` (locked by the caller) again when it is stale; True when it changed."""
    if not stale(item):
        return False
    refused = refused_now(item)
    facts = {**item.facts, "sections": [{**s, "money_refused": s.get("ticket") in refused}
                                        for s in item.facts["sections"]]}
    template, version = templates.current(workspace_id=item.incident.workspace_id)
    draft = templates.render_draft(template, facts, team=item.incident.workspace.name)
    problems = validate_draft(kind=item.kind, draft=draft, facts=facts)
    before = {"subject": item.subject, "body": item.body}
    if item.status == St.APPROVED:
        # Its execution key stays: approved again later, it is still sent at most once.
        set_status(item, St.PENDING, actor=actor, via=via, action=AuditAction.ITEM_REOPENED, reason=reason,
                   data={"rejected": money.pk if money is not None else None,
                         "was_approved_by": item.decided_by.get_username() if item.decided_by else None},
                   decided_by=None, decided_at=None, decision_reason="", approved_hash="")
    drafted_by = (f"kintsugi (one message for {len(facts['sections'])} tickets"
                  + (f", template v{version}" if version else "") + ", rewritten after a decision)")
    item.facts, item.subject, item.body = facts, draft["subject"][:300], draft["body"]
    item.valid, item.problems, item.drafted_by = not problems, problems, drafted_by[:120]
    item.save(update_fields=["facts", "subject", "body", "valid", "problems", "drafted_by", "updated_at"])
    trail.record(action=AuditAction.ITEM_REDRAFTED, subject_type="compensation_item", subject_id=item.pk, via=via,
                 actor=actor, reason=reason, incident_id=item.incident_id, from_status=item.status,
                 to_status=item.status, workspace=item.incident.workspace_id,
                 data={"before": before, "after": {"subject": item.subject, "body": item.body}, "valid": item.valid,
                       "problems": problems, "drafted_by": item.drafted_by})
    return True


def rewrite_for(money: CompensationItem, *, actor, via: str, reason: str) -> list[int]:
    """Rewrite every grouped message that explains `money` (just decided or undone); their ids."""
    changed = []
    for email in (sequencing.explaining_emails(money).select_for_update(of=("self",)).select_related("incident__workspace")
                  .order_by("pk")):
        if rewrite(email, actor=actor, via=via, reason=reason, money=money):
            changed.append(email.pk)
    return changed
