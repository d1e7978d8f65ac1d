"""The review desk by case, under the compensation item admin: the list of cases (the queue's landing),
one case's page, and its decisions. Thin: compensation.review.cases reads, compensation.review.case_decisions decides
(through compensation.review.services). A case outside the person's workspaces is a 404 like a missing one,
and an attempt to decide it is on their own record."""
from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse

from urllib.parse import urlencode

from compensation.review import assignments, case_decisions, case_queue, cases as case_selectors, review_numbers, selectors
from compensation.review import case_undo, services
from compensation.review import incident_figures
from compensation.delivery import delivery_selectors, sequencing
from compensation.delivery import messages as messages_
from compensation.delivery_models import DeliveryState
from compensation.models import CompensationItem
from core.vocabulary import Via
from provenance.access import tenancy
from provenance.access.admin_tenancy import refuse_unseen
from repairs.models import Incident
from core.wording import counted, past, plural

VIA = Via.ADMIN


class CaseViews:
    """Mixed into CompensationItemAdmin; `case_urls()` goes before the admin's own URLs."""

    def case_urls(self):
        wrap = self.admin_site.admin_view
        return [
            path("cases/", wrap(self.cases_view), name="compensation_compensationitem_cases"),
            path("cases/undo/", wrap(self.case_undo_view), name="compensation_compensationitem_cases_undo"),
            # <path:>: a ticket id may hold a slash; the decisions live under their own prefix so that no
            # ticket id can read as "…/decide".
            path("cases/<int:incident_id>/<path:ticket>/", wrap(self.case_view), name="compensation_compensationitem_case"),
            path("case-decisions/<int:incident_id>/<path:ticket>/", wrap(self.case_decide_view),
                 name="compensation_compensationitem_case_decide"),
            path("messages/<int:item_id>/", wrap(self.message_view), name="compensation_compensationitem_message"),
        ]

    def message_view(self, request, item_id: int):
        """The exact message an item sends (recipient, subject, text), as plain text: nothing in it is
        ever interpreted as markup. Another workspace's item is a 404 like a missing one."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        item = tenancy.scoped(CompensationItem.objects.all(), user=request.user,
                              path="incident__workspace").filter(pk=item_id).first()
        if item is None:
            raise Http404(f"no item {item_id}")
        shown = messages_.message(item)
        text = f"To: {shown.to}\nSubject: {shown.subject}\n\n{shown.body}\n"
        response = HttpResponse(text, content_type="text/plain; charset=utf-8")
        response["X-Content-Type-Options"] = "nosniff"
        response["X-Kintsugi-Content-Hash"] = shown.content_hash
        return response

    def _filters(self, request) -> tuple[Incident | None, case_queue.Filters]:
        raw = request.GET.get("incident", "")
        incident = None
        if raw:
            incident = (tenancy.scoped(Incident.objects.select_related("flagged_by"), user=request.user)
                        .defer("plan", "verification")
                        .filter(pk=raw).first() if raw.isdigit() else None)
            if incident is None:
                raise Http404(f"no incident {raw}")
        try:
            filters = case_queue.Filters.from_query(request.GET)
        except case_queue.BadFilter as exc:
            messages.error(request, f"Filter ignored: {exc}")
            filters = case_queue.Filters()
        if not filters.state and "state" not in request.GET and not filters.delivery:
            # The older `status` switch (needs a decision / decided / all) reads as a state filter.
            status = request.GET.get("status", "pending")
            filters.state = {"pending": "needs_decision", "decided": "decided"}.get(status, "" if status == "all" else "needs_decision")
        return incident, filters

    def cases_view(self, request):
        if not self.has_view_permission(request):
            raise PermissionDenied
        incident, filters = self._filters(request)
        after, number = request.GET.get("after", ""), request.GET.get("page", "1")
        number = int(number) if number.isdigit() and int(number) > 0 else 1
        try:
            found = case_queue.page(user=request.user, incident=incident, filters=filters, after=after,
                                    number=number, actor=request.user)
        except case_queue.BadFilter as exc:
            messages.error(request, f"Refused: {exc}")
            found = case_queue.page(user=request.user, incident=incident, filters=filters, actor=request.user)
        base = {**({"incident": incident.pk} if incident else {}), **filters.query()}
        url = reverse("admin:compensation_compensationitem_cases")
        link = lambda **extra: url + "?" + urlencode({**base, **extra})  # noqa: E731
        query = f"?incident={incident.pk}" if incident else ""
        counts = selectors.item_counts(incident=incident) if incident else None
        if incident:
            # The incident's progress and what the filters match: one pass over its cases.
            totals, progress = case_queue.figures(user=request.user, incident=incident, filters=filters,
                                                  actor=request.user, currencies=sorted(counts.currencies))
        else:
            totals, progress = case_queue.matching_totals(user=request.user, incident=None, filters=filters,
                                                          actor=request.user), None
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": "Cases to review" + (f": incident #{incident.pk}" if incident else ""),
            "cases": found.cases,
            "page": found,
            "assigned": assignments.assignees(keys=[c.key for c in found.cases]),
            "totals": totals,
            "progress": progress,
            "workload": assignments.workload(incident=incident, cases_pending=progress["cases_pending"]) if incident else None,
            "mine_left": assignments.left_in_batch(incident=incident, user=request.user) if incident else None,
            "next_batch_url": reverse("admin:compensation_compensationitem_cases_next"),
            "reviewers": assignments.reviewers(incident=incident) if incident else [],
            "review": review_numbers.from_counts(counts, cases_pending=progress["cases_pending"],
                                                 cases=progress["cases"]) if incident else None,
            # The item counts every page prints (one incident's by kind and status, else the queue's).
            "item_counts": counts,
            "queue": selectors.compensation_summary(incident=None, user=request.user) if not incident else None,
            # The landing without an incident: an inbox per incident, the ones holding my cases first.
            "inbox": incident_figures.inbox(user=request.user) if not incident else None,
            "incident": incident,
            "filters": filters,
            "kinds": CompensationItem.Kind.choices,
            "outcomes": case_queue.OUTCOMES,
            "states": case_queue.STATE_WORDS.items(),
            "delivery_filters": case_queue.DELIVERY_WORDS.items(),
            "failed_deliveries_url": delivery_selectors.failed_url(),
            "hidden": {k: v for k, v in base.items() if k in ("incident",)},
            "state_links": [(value, label, link(state=value)) for value, label in case_queue.STATE_WORDS.items()],
            "next_url": link(after=found.next_cursor) if found.has_next else "",
            "page_next_url": link(page=number + 1) if found.has_next and not after else "",
            "prev_url": link(page=number - 1) if number > 1 and not after else "",
            "first_page_url": link() if after or number > 1 else "",
            "filter_query": urlencode(base),
            "can_review": self.has_review_permission(request),
            "bulk_url": reverse("admin:compensation_compensationitem_cases_bulk"),
            "first_url": found.cases[0].url + query if found.cases else "",
            "items_url": reverse("admin:compensation_compensationitem_changelist")
            + (f"?incident__id__exact={incident.pk}" if incident else ""),
            "undo": case_undo.toast(request),
        }
        return TemplateResponse(request, "admin/compensation/compensationitem/cases.html", context)

    def _case(self, request, incident_id: int, ticket: str):
        found = case_selectors.case(user=request.user, incident_id=incident_id, ticket=ticket)
        if found is None:
            refuse_unseen(request, attempted="decide case", subject_type="incident", subject_ids=[incident_id])
            raise Http404(f"no case {incident_id}/{ticket}")
        return found

    def case_view(self, request, incident_id: int, ticket: str):
        if not self.has_view_permission(request):
            raise PermissionDenied
        case = self._case(request, incident_id, ticket)
        within = self._within(request)
        prev_case, next_case, left = case_queue.neighbours(user=request.user, incident=within, key=case.key)
        suffix = f"?incident={within.pk}" if within else ""
        prev_url = prev_case.url + suffix if prev_case else ""
        incident = case.items[0].item.incident
        four_eyes = settings.KINTSUGI_FOUR_EYES and incident.flagged_by_id == request.user.pk
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": f"Case {case.ticket} of incident #{case.incident_id}",
            "case": case,
            "left": left,
            "mine_left": assignments.left_in_batch(incident=within, user=request.user) if within else None,
            "can_review": self.has_review_permission(request) and bool(case.pending) and not four_eyes,
            "why_no_decide": self._why_no_decide(request, case, four_eyes) if case.pending else "",
            "decide_url": reverse("admin:compensation_compensationitem_case_decide", args=[case.incident_id, case.ticket])
            + suffix,
            "prev_url": prev_url,
            "next_url": next_case.url + suffix if next_case else "",
            "cases_url": reverse("admin:compensation_compensationitem_cases") + suffix,
            "needs_person": sorted(DeliveryState.needs_person()),
            "undo": case_undo.toast(request),
        }
        return TemplateResponse(request, "admin/compensation/compensationitem/case.html", context)

    def _why_no_decide(self, request, case, four_eyes: bool) -> str:
        """Why this person sees no decision buttons on a case that needs one (empty when they do)."""
        if four_eyes:
            return (f"You flagged incident #{case.incident_id}, so four-eyes keeps its decisions for another "
                    f"reviewer: what leaves for a customer is approved by a second person, never the one who "
                    f"flagged the source.")
        if not self.has_review_permission(request):
            return "Deciding needs the Reviewer role; a workspace admin can give it to you."
        return ""

    def _within(self, request) -> Incident | None:
        """The incident the reviewer is working through (?incident=), if it is theirs to see."""
        raw = request.GET.get("incident", "")
        if not raw.isdigit():
            return None
        return tenancy.scoped(Incident.objects.all(), user=request.user).defer("plan", "verification").filter(pk=raw).first()

    def case_decide_view(self, request, incident_id: int, ticket: str):
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        case = self._case(request, incident_id, ticket)
        decision, reason = request.POST.get("decision", ""), request.POST.get("reason", "")
        item_id = request.POST.get("item", "")
        within = self._within(request)
        suffix = f"?incident={within.pk}" if within else ""
        here = case.url + suffix
        try:
            if item_id:
                if not item_id.isdigit():
                    raise services.DecisionRefused("no such item")
                done = case_decisions.decide_case_item(case=case, item_id=int(item_id), actor=request.user,
                                                       decision=decision, reason=reason, via=VIA,
                                                       shown=request.POST.get("shown") or None)
                messages.success(request, f"Item #{done.pk}: {decision} recorded.")
                if decision == "undo":
                    case_undo.forget(request)
                else:
                    case_undo.remember(request, items=[done], text=f"Case {case.ticket}: item #{done.pk} {done.status}.",
                                       case_url=here, back=here)
                if warning := sequencing.rejection_warning(done):
                    messages.warning(request, warning)
                held = sequencing.waits_for(done) if done.status == done.Status.APPROVED else None
                if held is not None:
                    messages.info(request, f"Item #{done.pk} waits for the {held.get_kind_display()} #{held.pk}: "
                                           f"it is sent once that is approved.")
            else:
                result = case_decisions.decide_case(case=case, actor=request.user, decision=decision.removesuffix("_all"),
                                                    reason=reason, via=VIA, shown=request.POST.get("shown") or None)
                if result.decided:
                    said = f"Case {case.ticket}: {counted(len(result.decided), 'item')} {past(decision.removesuffix('_all'))}."
                    messages.success(request, said)
                    case_undo.remember(request, items=result.decided, text=said, case_url=here,
                                       back=reverse("admin:compensation_compensationitem_cases") + suffix)
                for item, why in result.refused:
                    messages.error(request, f"Item #{item.pk} refused: {why}")
        except (PermissionError, ValueError) as exc:
            messages.error(request, f"Refused: {exc}")
            return HttpResponseRedirect(here)
        still = case_selectors.case(user=request.user, incident_id=incident_id, ticket=ticket)
        if still is not None and still.pending:
            return HttpResponseRedirect(here)
        _, following, left = case_queue.neighbours(user=request.user, incident=within, key=case.key)
        if following is None:
            messages.info(request, f"No cases left for you: {left} that other reviewers claimed still need a decision."
                          if left else "No cases left.")
            return HttpResponseRedirect(reverse("admin:compensation_compensationitem_cases") + suffix)
        return HttpResponseRedirect(following.url + suffix)

    def case_undo_view(self, request):
        """The toast's Undo: takes back the decision the toast names, then opens the case it decided (or
        the list a bulk decision came from) to decide again."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        if not self.has_review_permission(request):
            raise PermissionDenied("undoing a decision needs the Reviewer role")
        target, undone, refused = case_undo.take_back(request)
        if undone:
            messages.success(request, f"Undone: {counted(len(undone), 'item')} {plural('needs', len(undone))} a decision again.")
        for item, why in refused[:20]:
            messages.error(request, f"Item #{item.pk} not undone: {why}")
        if not undone and not refused:
            messages.warning(request, "Nothing to undo.")
        return HttpResponseRedirect(target)
