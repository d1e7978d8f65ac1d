"""The toast that offers to take back the decision just made on the case desk, while its undo window
(KINTSUGI_UNDO_SECONDS, compensation.delivery.approval) is open.

After a case, an item or a bulk confirmation is decided, the items it decided are remembered in the
person's session (ids only: what the undo takes back is read again from the database, and
compensation.delivery.approval.undo checks that the person decided each of them and that the window is open).
The case pages show the toast until the window closes or a newer decision replaces it. With the window
set to 0 seconds there is no toast (a deployment has 10 by default; the tests, 0).
"""
from __future__ import annotations

from django.urls import reverse
from django.utils import timezone

from compensation.delivery import approval
from compensation.models import CompensationItem
from core.vocabulary import Via
from provenance.access import tenancy

SESSION_KEY = "kintsugi.case_undo"


def remember(request, *, items: list[CompensationItem], text: str, case_url: str, back: str) -> None:
    """Offer to undo `items` (just decided by request.user). `case_url`: where the undo leads when one
    case was decided (its page, to decide it again), else `back` (the list it was decided from)."""
    ends = [approval.undo_ends(i) for i in items]
    if not items or any(e is None for e in ends):
        request.session.pop(SESSION_KEY, None)
        return
    request.session[SESSION_KEY] = {"items": [i.pk for i in items], "text": text, "case_url": case_url,
                                    "back": back, "until": min(ends).timestamp()}


def forget(request) -> None:
    request.session.pop(SESSION_KEY, None)


def toast(request) -> dict | None:
    """What the toast shows (None: nothing to undo, or its window has closed)."""
    entry = request.session.get(SESSION_KEY)
    if not entry:
        return None
    left = entry["until"] - timezone.now().timestamp()
    if left <= 0:
        forget(request)
        return None
    return {"text": entry["text"], "seconds_left": int(left), "until_ms": int(entry["until"] * 1000),
            "url": reverse("admin:compensation_compensationitem_cases_undo")}


def take_back(request) -> tuple[str, list[CompensationItem], list[tuple[CompensationItem, str]]]:
    """Undo the remembered decision, as request.user (approval.undo_decisions). Returns where to go next,
    the items undone and those refused with why. Nothing remembered: nothing undone, back to the cases."""
    entry = request.session.get(SESSION_KEY)
    forget(request)
    if not entry:
        return reverse("admin:compensation_compensationitem_cases"), [], []
    items = list(tenancy.scoped(CompensationItem.objects.filter(pk__in=entry["items"]), user=request.user,
                                path="incident__workspace").select_related("incident"))
    undone, refused = approval.undo_decisions(items=items, actor=request.user, reason="undone from the toast",
                                              via=Via.ADMIN)
    return (entry["case_url"] or entry["back"]), undone, refused

