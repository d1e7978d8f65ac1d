"""What leaves, as it leaves: each item's message rendered the way its connector sends it, grouped by
template for a reviewer who approves many at once, and the digest that binds a decision to what was shown.

A reviewer approves what they read. The page that shows messages carries `shown_digest` of the items it
showed (their approval content hashes, compensation.delivery.approval); the decision is refused when the items'
content no longer matches it (an edit or a redraft between the page and the click), so nobody approves
text they never saw.

Grouping: two messages share a template when they say the same once the customer's own details (name,
address, ticket, amounts) are set aside. One sample per template is shown in full with "N like this";
a message that differs from every other is its own sample, shown in full too.
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field

from compensation.drafting import kinds
from compensation.delivery.approval import content_hash
from compensation.models import CompensationItem

K = CompensationItem.Kind
# Money in any form a draft writes it: "$1,200.00", "100.00 USD", "75 EUR".
_AMOUNT = re.compile(r"[$€£¥]?\d[\d,]*(?:\.\d+)?(?:\s?[A-Z]{3}\b)?")


@dataclass(frozen=True)
class Message:
    """One item's outgoing message: to whom, the subject line and the text, exactly as sent."""

    item_id: int
    kind: str
    kind_label: str
    to: str
    subject: str
    body: str
    content_hash: str

    @property
    def is_email(self) -> bool:
        return self.kind in kinds.MESSAGES

    def as_dict(self) -> dict:
        return {"item": self.item_id, "kind": self.kind, "to": self.to,
                "subject": self.subject, "body": self.body, "content_hash": self.content_hash}


def message(item: CompensationItem) -> Message:
    """The message `item` sends: an email goes to the customer's address with its subject and text (as the
    SMTP connector builds it); a money item's note goes to payments with its reference."""
    if item.kind in kinds.MESSAGES:
        to, subject = item.customer_email, item.subject
    else:
        to = "payments"
        subject = item.subject or (f"{item.get_kind_display()} of {item.amount_display}"
                                   + (f" (reference {item.payment_reference})" if item.payment_reference else ""))
    return Message(item_id=item.pk, kind=item.kind, kind_label=item.get_kind_display(), to=to, subject=subject, body=item.body, content_hash=content_hash(item))


def shown_digest(items) -> str:
    """SHA-256 over the (item id, content hash) of `items`, in id order: what a page showed."""
    lines = "\n".join(f"{i.pk}:{content_hash(i)}" for i in sorted(items, key=lambda i: i.pk))
    return hashlib.sha256(lines.encode()).hexdigest()


def _shape(text: str, item: CompensationItem) -> str:
    """`text` with the customer's own details set aside, so that equal templates compare equal."""
    for value, mark in ((item.facts.get("customer"), "{customer}"), (item.customer_email, "{email}"),
                        (item.ticket_id, "{ticket}"), (item.payment_reference, "{reference}")):
        if value:
            text = text.replace(str(value), mark)
    return _AMOUNT.sub("{amount}", text)


@dataclass
class Sample:
    """One template: a message shown in full, and the other items that say the same."""

    message: Message
    ticket: str
    like_this: list[tuple[int, str]] = field(default_factory=list)  # (item id, ticket) of the others

    @property
    def count(self) -> int:
        return 1 + len(self.like_this)


def samples(items) -> list[Sample]:
    """One Sample per template among `items` (money notes and emails apart), the largest first; edited
    items are never folded into another's template."""
    groups: dict[tuple, Sample] = {}
    for item in sorted(items, key=lambda i: i.pk):
        key = ((item.kind, _shape(item.subject, item), _shape(item.body, item)) if not item.edited
               else ("edited", item.pk))
        if key in groups:
            groups[key].like_this.append((item.pk, item.ticket_id))
        else:
            groups[key] = Sample(message(item), item.ticket_id)
    return sorted(groups.values(), key=lambda s: (-s.count, s.message.item_id))
