"""A ticket's before → after in a support lead's words: who the customer is, what the desk did for them
under the flagged source, what it does under the clean one, and which of those changed.

"Mia Chen (t05): before, a full refund; $75.00 paid back; an email confirming the $75.00 refund. After the
repair: a reply, no refund; an email saying the order does not qualify for a refund." Phrases that are
not on both sides are marked `changed`, so pages highlight them (<mark>) and the PDF prints them bold.

Built from the repair's outcome rows (ActionOutcome: each action's decision before and after) and the
ticket row for the customer's name. Agents the wording does not know read through repairs.wording's
`describe` ("choice: …"), never dropped.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from provenance.models import Ticket
from repairs.models import ActionOutcome, Incident
from repairs.wording import human_decision

# Outcomes whose "after" no longer happens, and those that did not happen before the repair.
GONE_AFTER = ("superseded", "poisoned")
NEW_BEFORE = ("new",)


@dataclass(frozen=True)
class Phrase:
    text: str
    changed: bool


@dataclass
class TicketStory:
    ticket: str
    customer: str
    before: list[Phrase] = field(default_factory=list)
    after: list[Phrase] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return any(p.changed for p in self.before + self.after)

    @property
    def text(self) -> str:
        """The story as one plain sentence (CSV, JSON, messages)."""
        def side(phrases):
            return "; ".join(p.text for p in phrases) or "nothing"
        who = f"{self.customer} ({self.ticket})" if self.customer else self.ticket
        return f"{who}: before, {side(self.before)}. After the repair: {side(self.after)}."

    def as_dict(self) -> dict:
        return {"ticket": self.ticket, "customer": self.customer, "changed": self.changed, "text": self.text,
                "before": [{"text": p.text, "changed": p.changed} for p in self.before],
                "after": [{"text": p.text, "changed": p.changed} for p in self.after]}


def _phrases(steps: list[ActionOutcome], *, after: bool, currency: str | None) -> list[str]:
    out = []
    for o in sorted(steps, key=lambda o: o.seq):
        if (o.status in GONE_AFTER) if after else (o.status in NEW_BEFORE):
            continue
        text = human_decision(o.agent, o.after if after else o.before, currency=currency)
        if text and text not in out:
            out.append(text)
    return out


def build(ticket: str, steps: list[ActionOutcome], *, customer: str = "", currency: str | None = None) -> TicketStory:
    before, after = _phrases(steps, after=False, currency=currency), _phrases(steps, after=True, currency=currency)
    return TicketStory(ticket=ticket, customer=customer,
                       before=[Phrase(t, t not in after) for t in before],
                       after=[Phrase(t, t not in before) for t in after])


def _customers(workspace_id: int, tickets) -> dict[str, tuple[str, str]]:
    rows = Ticket.objects.filter(workspace_id=workspace_id, ticket_id__in=list(tickets)).values_list(
        "ticket_id", "customer_name", "currency")
    return {t: (name, currency) for t, name, currency in rows}


def stories(*, incident: Incident, changes) -> dict[str, TicketStory]:
    """The story of each ticket of `changes` (repairs.selectors.TicketChange rows, or dicts with "ticket"
    and "steps"), with the customers' names in one query."""
    rows = [(c.ticket, c.steps) for c in changes if c.ticket]
    people = _customers(incident.workspace_id, [t for t, _ in rows])
    fallback = getattr(incident, "currency", None)
    return {t: build(t, steps, customer=people.get(t, ("", None))[0], currency=people.get(t, ("", None))[1] or fallback)
            for t, steps in rows}


def story(*, incident: Incident, ticket: str) -> TicketStory | None:
    """One ticket's story in one incident (None when the repair did not touch the ticket)."""
    steps = list(ActionOutcome.objects.filter(incident=incident, ticket=ticket).order_by("seq"))
    if not steps:
        return None
    name, currency = _customers(incident.workspace_id, [ticket]).get(ticket, ("", None))
    return build(ticket, steps, customer=name, currency=currency or getattr(incident, "currency", None))
