"""Deciding, claiming and assigning many cases at once from the case list. Thin: the cases are read by
compensation.review.case_queue, decided by compensation.review.case_decisions (so every item still meets the
checks of a decision alone: four-eyes, the Reviewer role, tenancy and the audit record), and
assignments are compensation.review.assignments'. Approving or rejecting always shows a confirmation page
first: how many cases and items, the money, and what would leave."""
from __future__ import annotations

from collections import Counter
from urllib.parse import parse_qsl, urlencode

from django.contrib import messages
from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponseNotAllowed, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse

from compensation.review import assignments, case_decisions, case_queue, case_undo

from compensation.delivery import deliveries
from compensation.delivery import messages as messages_
from compensation.delivery_models import delivery_needs_person
from core.money import format_money
from core.wording import counted, past, plural
from core.vocabulary import Via
from provenance.access import tenancy
from provenance.access.admin_tenancy import refuse_unseen
from repairs.models import Incident

VIA = Via.ADMIN
CONFIRM_LIMIT = 5000  # cases one confirmation decides; beyond it, narrow the filters


def _keys(raw: list[str]) -> list[tuple[int, str]]:
    out = []
    for value in raw:
        incident, _, ticket = value.partition("/")
        if incident.isdigit() and ticket:
            out.append((int(incident), ticket))
    return list(dict.fromkeys(out))


def _money(items) -> dict[str, int]:
    money: dict[str, int] = {}
    for item in items:
        if item.moves_money:
            money[item.currency] = money.get(item.currency, 0) + item.amount_cents
    return money


class CaseBulkViews:
    """Mixed into CompensationItemAdmin next to CaseViews."""

    def case_bulk_urls(self):
        return [path("cases/bulk/", self.admin_site.admin_view(self.cases_bulk_view),
                     name="compensation_compensationitem_cases_bulk"),
                path("cases/next/", self.admin_site.admin_view(self.cases_next_view),
                     name="compensation_compensationitem_cases_next")]

    def cases_next_view(self, request):
        """"Give me the next N": cases of one incident handed to the reviewer (compensation.review.assignments
        next_batch), then their own cases of it; none handed out is a warning that says why."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        if not self.has_review_permission(request):
            raise PermissionDenied("taking cases needs the Reviewer role")
        raw, count = request.POST.get("incident", ""), request.POST.get("count", "")
        incident = tenancy.scoped(Incident.objects.defer("plan", "verification"), user=request.user).filter(
            pk=raw).first() if raw.isdigit() else None
        if incident is None:
            refuse_unseen(request, attempted="take cases", subject_type="incident", subject_ids=[raw or "?"])
            raise Http404("no such incident")
        back = reverse("admin:compensation_compensationitem_cases") + f"?incident={incident.pk}"
        try:
            batch = assignments.next_batch(incident=incident, actor=request.user, count=int(count) if count.isdigit()
                                           else 0, reason=request.POST.get("reason", "").strip(), via=VIA)
        except (PermissionError, ValueError) as exc:
            messages.error(request, f"Refused: {exc}")
            return HttpResponseRedirect(back)
        (messages.success if batch.count else messages.warning)(request, assignments.batch_message(batch))
        return HttpResponseRedirect(back + ("&assignee=me" if batch.count else ""))

    def _bulk_back(self, request) -> str:
        params = dict(parse_qsl(request.POST.get("filters", "")))
        return reverse("admin:compensation_compensationitem_cases") + ("?" + urlencode(params) if params else "")

    def _bulk_keys(self, request) -> list[tuple[int, str]]:
        if request.POST.get("all_matching") != "1":
            return _keys(request.POST.getlist("case"))
        params = dict(parse_qsl(request.POST.get("filters", "")))
        incident = None
        if params.get("incident", "").isdigit():
            incident = tenancy.scoped(Incident.objects.defer("plan", "verification"), user=request.user).filter(
                pk=params["incident"]).first()
            if incident is None:
                raise Http404("no such incident")
        filters = case_queue.Filters.from_query(params)
        if "state" not in params and not filters.delivery:
            filters.state = "needs_decision"  # the list's default: the cases that need a decision
        return case_queue.keys(user=request.user, incident=incident, filters=filters, actor=request.user,
                               limit=CONFIRM_LIMIT)

    def cases_bulk_view(self, request):
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        if not self.has_review_permission(request):
            raise PermissionDenied("deciding and assigning cases needs the Reviewer role")
        back, decision = self._bulk_back(request), request.POST.get("decision", "")
        try:
            keys = self._bulk_keys(request)
        except case_queue.BadFilter as exc:
            messages.error(request, f"Refused: {exc}")
            return HttpResponseRedirect(back)
        if not keys:
            messages.warning(request, "No cases selected: tick some cases, or all matching cases.")
            return HttpResponseRedirect(back)
        found = case_queue.by_keys(user=request.user, keys_=keys)
        if len(found) != len(keys):
            unseen = sorted({k[0] for k in keys} - {c.incident_id for c in found})
            refuse_unseen(request, attempted=f"{decision} cases", subject_type="incident", subject_ids=unseen or [keys[0][0]])
            raise Http404("no such case")
        reason = request.POST.get("reason", "").strip()
        if decision in ("claim", "unassign", "assign"):
            return self._bulk_assign(request, keys=keys, decision=decision, reason=reason, back=back)
        if decision == "deliver_again":
            return self._bulk_deliver_again(request, found=found, reason=reason, back=back)
        if decision not in ("approve", "reject"):
            messages.error(request, f"Refused: unknown decision {decision!r}")
            return HttpResponseRedirect(back)
        if request.POST.get("confirm") != "yes" or (decision == "reject" and not reason):
            if request.POST.get("confirm") == "yes":
                messages.error(request, "A reason is required to reject cases.")
            return self._bulk_confirm(request, decision=decision, found=found, reason=reason)
        shown = request.POST.get("shown") or None
        if decision == "approve":
            try:
                case_decisions.check_shown([c.item for case in found for c in case.pending], shown)
            except case_decisions.ContentChanged as exc:
                messages.error(request, f"Nothing approved: {exc}")
                return self._bulk_confirm(request, decision=decision, found=found, reason=reason)
        decided, refused, done = 0, 0, []
        try:
            # CHUNK_CASES cases per transaction: the workspace's audit chain is held for one short write each.
            results = case_decisions.decide_cases(cases=found, actor=request.user, decision=decision, reason=reason,
                                                  via=VIA, shown=shown is not None)
        except (PermissionError, ValueError) as exc:
            messages.error(request, f"Refused: {exc}")
            return HttpResponseRedirect(back)
        for case, result in zip(found, results):
            decided += len(result.decided)
            done += result.decided
            refused += len(result.refused)
            for item, why in result.refused[:20]:
                messages.error(request, f"Case {case.ticket}, item #{item.pk} refused: {why}")
        said = f"{counted(len(found), 'case')}: {counted(decided, 'item')} {past(decision)}" + (f", {refused:,} refused" if refused else "") + "."
        messages.success(request, said)
        case_undo.remember(request, items=done, text=said, case_url="", back=back)
        return HttpResponseRedirect(back)

    def _bulk_assign(self, request, *, keys: list[tuple[int, str]], decision: str, reason: str, back: str):
        """Claim (cases another reviewer holds stay theirs, and the reviewer is told), unassign, or assign
        to the chosen reviewer (a deliberate hand-over: it may move a case from one reviewer to another)."""
        held = {}
        try:
            if decision == "claim":
                n, held = assignments.claim(keys=keys, actor=request.user, reason=reason or decision, via=VIA)
            else:
                assignee = None if decision == "unassign" else \
                    get_user_model().objects.filter(username=request.POST.get("assignee", "")).first()
                if decision == "assign" and assignee is None:
                    raise ValueError("choose a reviewer to assign the cases to")
                n = assignments.assign(keys=keys, assignee=assignee, actor=request.user, reason=reason or decision,
                                       via=VIA)
        except (PermissionError, ValueError) as exc:
            messages.error(request, f"Refused: {exc}")
            return HttpResponseRedirect(back)
        done = {"claim": "claimed", "unassign": "unassigned"}.get(decision) or \
            f"assigned to {request.POST.get('assignee', '')}"
        by = ", ".join(f"{who} {count:,}" for who, count in sorted(Counter(held.values()).items()))
        if n:
            messages.success(request, f"{counted(n, 'case')} {done}.")
        else:
            why = (f"every one of them is already with another reviewer ({by})" if held
                   else f"they were already {done}")
            messages.warning(request, f"No cases {done}: {why}.")
        if held and n:
            messages.warning(request, f"{counted(len(held), 'case')} {plural('was', len(held))} already claimed by "
                                      f"another reviewer and {'stays' if len(held) == 1 else 'stay'} theirs ({by}).")
        return HttpResponseRedirect(back)

    def _bulk_deliver_again(self, request, *, found: list, reason: str, back: str):
        """Send the selected cases' failed, dead or uncertain deliveries once more: a confirmation page
        listing each one and its last reason, then compensation.delivery.deliveries.deliver_again per item (the
        Reviewer role, tenancy and the audit record are the service's)."""
        failed = [(case, c.item) for case in found for c in case.items if delivery_needs_person(c.item)]
        if request.POST.get("confirm") != "yes" or not reason:
            if request.POST.get("confirm") == "yes":
                messages.error(request, "A reason is required to deliver again.")
            context = {
                **self.admin_site.each_context(request),
                "opts": self.opts,
                "title": f"Deliver again {counted(len(failed), 'item')}?",
                "cases": found,
                "failed": failed,
                "money": ", ".join(format_money(n, c) for c, n in sorted(_money(i for _, i in failed).items()) if n)
                or "no money (emails only)",
                "reason": reason,
                "filters": request.POST.get("filters", ""),
                "back": back,
                "placeholder": "why sending these again is right now (the receiver is fixed, the card updated…)",
            }
            return TemplateResponse(request, "admin/compensation/compensationitem/cases_deliver_again.html", context)
        done = 0
        for _, item in failed:
            try:
                deliveries.deliver_again(item=item, actor=request.user, reason=reason, via=VIA)
                done += 1
            except (PermissionError, ValueError) as exc:
                messages.error(request, f"Item #{item.pk} refused: {exc}")
        messages.success(request, f"{done} deliver{'y' if done == 1 else 'ies'} queued again.")
        return HttpResponseRedirect(back)

    def _bulk_confirm(self, request, *, decision: str, found: list, reason: str):
        money: dict[str, int] = {}
        pending = refused = 0
        for case in found:
            pending += len(case.pending)
            if decision == "approve":
                refused += len(case.pending) - len([c for c in case.approvable if c.refused_money is None])
                for c in case.approvable:
                    if c.item.moves_money and c.refused_money is None:
                        money[c.item.currency] = money.get(c.item.currency, 0) + c.item.amount_cents
            else:
                for c in case.pending:
                    if c.item.moves_money:
                        money[c.item.currency] = money.get(c.item.currency, 0) + c.item.amount_cents
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": f"{decision.capitalize()} {counted(len(found), 'case')}?",
            "decision": decision,
            "cases": found,
            "pending": pending,
            "refused_items": refused,
            "money": ", ".join(format_money(n, c) for c, n in sorted(money.items()) if n) or "no money (emails only)",
            # Every message that would leave (approve) or that is turned down (reject), one sample per template.
            "samples": messages_.samples([c.item for case in found for c in
                                          (case.leaving if decision == "approve" else case.pending)
                                          if c.item.status == c.item.Status.PENDING and c.message is not None]),
            "shown": messages_.shown_digest([c.item for case in found for c in case.pending]),
            "reason": reason or ("approved in bulk from the case list" if decision == "approve" else ""),
            "filters": request.POST.get("filters", ""),
            "back": self._bulk_back(request),
            "placeholder": "why these cases are " + ("approved" if decision == "approve" else "rejected"),
        }
        return TemplateResponse(request, "admin/compensation/compensationitem/cases_confirm.html", context)



