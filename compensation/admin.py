"""The review queue and the audit trail in the admin. Thin: every decision goes through
compensation.review.services (which enforce the Reviewer role and four-eyes and record refusals); these views
parse the form, call one service and render. All draft, ticket and page text is shown through
autoescaping templates or format_html, never mark_safe."""
from __future__ import annotations

from django.contrib import admin, messages
from django.contrib.admin.options import IncorrectLookupParameters
from django.contrib.admin.views.main import ERROR_FLAG, IGNORED_PARAMS, PAGE_VAR, SEARCH_VAR
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponseNotAllowed, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html
from django.utils.text import Truncator

from compensation.drafting import kinds
from compensation.review import edits, selectors, services
from compensation.drafting import effect_kinds
from compensation.delivery import sequencing
from compensation.case_admin import CaseViews
from compensation.case_bulk_admin import CaseBulkViews
from compensation.delivery_admin import DeliveryViews
from compensation.review.paginator import CappedCount, QueuePaginator  # noqa: F401 - CappedCount: the tests' name for it
from compensation.models import CompensationItem
from core.admin_rows import WrittenByServices
from provenance.access.admin_tenancy import WorkspaceScoped, refuse_unseen
from core.money import format_totals, parse_money
from core.vocabulary import Via
from core.wording import counted, plural
from provenance.access import capabilities, tenancy
from provenance.models import Ticket
from repairs import ticket_story
from repairs.models import Incident
from repairs.not_rerun import item_not_rerun

VIA = Via.ADMIN


class CustomerFilter(admin.SimpleListFilter):
    title = "customer"
    parameter_name = "customer"

    def lookups(self, request, model_admin):
        # Pending items' customers first would need a second query; the first 200 addresses keep the
        # sidebar bounded on a large queue (the search box finds the rest).
        items = tenancy.scoped(CompensationItem.objects.all(), user=request.user, path="incident__workspace")
        emails = items.order_by("customer_email").values_list("customer_email", flat=True).distinct()[:200]
        return [(e, e) for e in emails]

    def queryset(self, request, queryset):
        return queryset.filter(customer_email=self.value()) if self.value() else queryset


class IncidentFilter(admin.SimpleListFilter):
    """The newest incidents only, without loading them as rows: the stock related filter loaded every
    incident whole (with its repair plan) and took seconds beside 100k items."""

    title = "incident"
    parameter_name = "incident__id__exact"

    def lookups(self, request, model_admin):
        rows = (tenancy.scoped(Incident.objects.all(), user=request.user).order_by("-pk")
                .values_list("pk", "source_id", "workspace__name")[:100])
        return [(str(pk), f"#{pk} {source} ({workspace})") for pk, source, workspace in rows]

    def queryset(self, request, queryset):
        if self.value() and not self.value().isdigit():
            raise IncorrectLookupParameters(f"incident {self.value()!r}")  # the admin's "?e=1", not a 500
        return queryset.filter(incident_id=self.value()) if self.value() else queryset


@admin.register(CompensationItem)
class CompensationItemAdmin(WrittenByServices, CaseViews, CaseBulkViews, DeliveryViews, WorkspaceScoped, admin.ModelAdmin):
    workspace_path = "incident__workspace"
    list_display = ("item_link", "incident", "kind", "ticket_id", "customer_email", "amount", "status", "valid",
                    "draft_summary", "drafted_by")
    list_display_links = None
    list_filter = ("status", "kind", "valid", IncidentFilter, CustomerFilter)
    search_fields = ("ticket_id", "customer_email")
    list_per_page = 50
    show_full_result_count = False  # no second count of the whole queue; QueuePaginator counts the filtered one
    actions = ["bulk_approve", "redraft"]

    def has_review_permission(self, request) -> bool:
        return capabilities.may(request.user, "review")

    def get_queryset(self, request):
        # The items of the workspaces the person may see; _count_from_totals counts the same set from the
        # maintained totals, so both must keep the same scope.
        # Unordered: get_ordering gives the order, and the changelist appends a queryset's own ordering
        # after it, which would stop the status index from serving a one-status page.
        return tenancy.scoped(selectors.review_queue().order_by(), user=request.user, path=self.workspace_path)

    # Sidebar filters whose count the maintained totals answer exactly (compensation.models.QueueTotal is
    # per incident and status): the unfiltered queue and the dashboard's and incident page's links.
    TOTALS_FILTERS = {"status__exact", "incident__id__exact"}

    def get_paginator(self, request, queryset, per_page, orphans=0, allow_empty_first_page=True):
        return QueuePaginator(queryset, per_page, orphans, allow_empty_first_page,
                              known_count=self._count_from_totals(request))

    def _count_from_totals(self, request) -> int | None:
        """The exact number of items the request's filters select, when they are only status and incident
        (one value each) and no search; None when the paginator has to count rows."""
        if any(request.GET.getlist(SEARCH_VAR)):
            return None
        params = {name: values for name, values in request.GET.lists()
                  if name not in IGNORED_PARAMS and name not in (PAGE_VAR, ERROR_FLAG)}
        if not params.keys() <= self.TOTALS_FILTERS or any(len(values) != 1 for values in params.values()):
            return None
        status = params.get("status__exact", [None])[0]
        incident = params.get("incident__id__exact", [None])[0]
        if incident is not None and not incident.isdigit():
            return None
        return selectors.queue_count(user=request.user, status=status,
                                     incident_id=int(incident) if incident is not None else None)

    def get_ordering(self, request):
        # Same order either way. Under a one-status filter the rank is constant, and leaving it out lets
        # the compensation_status_queue index serve the page (Postgres can't tell the rank is constant).
        if len(request.GET.getlist("status__exact")) == 1:
            return ("-incident_id", "ticket_id", "kind", "pk")
        return ("status_order", "-incident_id", "ticket_id", "kind", "pk")

    @admin.display(description="item", ordering="pk")
    def item_link(self, obj):
        return format_html('<a href="{}">#{}</a>', reverse("admin:compensation_compensationitem_change", args=[obj.pk]), obj.pk)

    @admin.display(description="amount", ordering="amount_cents")
    def amount(self, obj):
        return obj.amount_display if obj.moves_money else "—"

    @admin.display(description="draft")
    def draft_summary(self, obj):
        text = obj.subject if obj.kind in kinds.MESSAGES else obj.body
        return Truncator(text).chars(80)  # plain str: the changelist escapes it

    # --- the review page -------------------------------------------------------------------------------
    def get_urls(self):
        wrap = self.admin_site.admin_view
        return self.case_bulk_urls() + self.case_urls() + self.delivery_urls() + [
            path("<int:item_id>/decide/", wrap(self.decide_view), name="compensation_compensationitem_decide"),
        ] + super().get_urls()

    def _item(self, request, item_id) -> CompensationItem:
        """The item behind the review page and the decision: another workspace's item is a 404 like a
        missing one, and an attempt to decide it is on the actor's own record."""
        item = self.get_queryset(request).filter(pk=item_id).first() if str(item_id).isdigit() else None
        if item is None:
            refuse_unseen(request, attempted="decide item", subject_type="compensation_item", subject_ids=[item_id])
            raise Http404(f"no compensation item {item_id}")
        return item

    def change_view(self, request, object_id, form_url="", extra_context=None):
        item = self._item(request, object_id)
        if not self.has_view_permission(request, item):
            raise PermissionDenied
        source = selectors.flagged_source(item=item)
        ticket = Ticket.objects.filter(workspace_id=item.incident.workspace_id, ticket_id=item.ticket_id).first()
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": f"Review item #{item.pk}: {item.get_kind_display()} for {item.ticket_id}",
            "item": item,
            "ticket": ticket,
            "source": source,
            "source_excerpt": (source.content[:2000] if source else ""),
            "paths": [{"effect_id": p["effect_id"], "role": p["role"], "text": selectors.path_text(p["steps"]),
                       "steps": p["steps"]} for p in item.path],
            "history": selectors.item_history(item=item),
            "edits": edits.edit_diffs([item]).get(item.pk, []),
            "story": ticket_story.story(incident=item.incident, ticket=item.ticket_id),
            "decides": effect_kinds.decides(item),
            "not_rerun": item_not_rerun(item),
            "can_set_customer": (self.has_review_permission(request) and item.status == CompensationItem.Status.PENDING
                                 and item.waiting_for_ticket and not item.moves_money),
            "waits_for": sequencing.waits_for(item) if item.status in (CompensationItem.Status.PENDING,
                                                                        CompensationItem.Status.APPROVED) else None,
            "case_url": reverse("admin:compensation_compensationitem_case", args=[item.incident_id, item.ticket_id]),
            "can_review": self.has_review_permission(request) and item.status == CompensationItem.Status.PENDING,
            "editable": kinds.spec(item.kind).editable,
            "decide_url": reverse("admin:compensation_compensationitem_decide", args=[item.pk]),
            "item_history_url": reverse("admin:compensation_auditevent_changelist") + f"?item={item.pk}",
            "incident_history_url": reverse("admin:compensation_auditevent_changelist") + f"?incident__id__exact={item.incident_id}",
            **self.delivery_context(request, item),
            "can_export": request.user.has_perm("compensation.export_auditevent"),
            "export_url": reverse("admin:compensation_auditevent_export"),
            **(extra_context or {}),
        }
        return TemplateResponse(request, "admin/compensation/compensationitem/review.html", context)

    def decide_view(self, request, item_id):
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        item = self._item(request, item_id)
        decision = request.POST.get("decision", "")
        reason = request.POST.get("reason", "")
        back = reverse("admin:compensation_compensationitem_change", args=[item.pk])
        try:
            if decision == "approve":
                services.approve_item(item=item, actor=request.user, reason=reason, via=VIA)
            elif decision == "edit_approve":
                edits = {name: request.POST.get(name, "") for name in kinds.spec(item.kind).editable
                         if name in request.POST}
                if "amount" in request.POST and "amount_cents" in kinds.spec(item.kind).editable:
                    # The page asks for money ("75.00"); text that is not an amount changes nothing.
                    cents = parse_money(request.POST["amount"])
                    if cents is None:
                        raise ValueError("amount must be an amount of money, such as 75.00")
                    edits["amount_cents"] = cents
                services.approve_item(item=item, actor=request.user, reason=reason, via=VIA, edits=edits)
            elif decision == "reject":
                rejected = services.reject_item(item=item, actor=request.user, reason=reason, via=VIA)
                if warning := sequencing.rejection_warning(rejected):
                    messages.warning(request, warning)
            elif decision == "set_customer":
                services.set_customer(item=item, name=request.POST.get("customer_name", ""),
                                      email=request.POST.get("customer_email", ""), actor=request.user,
                                      reason=reason, via=VIA)
            elif decision == "redraft":
                services.redraft_item(item=item, actor=request.user, reason=reason or "redraft", via=VIA)
            else:
                messages.error(request, "Unknown decision.")
                return HttpResponseRedirect(back)
        except (PermissionError, ValueError) as exc:
            messages.error(request, f"Refused: {exc}")
            return HttpResponseRedirect(back)
        messages.success(request, f"Item #{item.pk}: {decision.replace('_', ' ')} recorded.")
        return HttpResponseRedirect(back)

    # --- actions -----------------------------------------------------------------------------------------
    def _refuse_unseen_selection(self, request, queryset) -> None:
        # The changelist drops selected ids outside the person's workspaces without a word; an attempt to
        # act on them is still an attempt, so it goes on the record.
        asked = {int(i) for i in request.POST.getlist(admin.helpers.ACTION_CHECKBOX_NAME) if str(i).isdigit()}
        unseen = sorted(asked - set(queryset.filter(pk__in=asked).values_list("pk", flat=True)))
        if unseen:
            refuse_unseen(request, attempted="bulk action", subject_type="compensation_item", subject_ids=unseen)
            messages.error(request, f"{counted(len(unseen), 'selected item')} {plural('does', len(unseen))} not exist for you; nothing was done with {plural('it', len(unseen))}.")

    @admin.action(description="Approve selected items…", permissions=["review"])
    def bulk_approve(self, request, queryset):
        if request.POST.get("confirm") != "yes":
            self._refuse_unseen_selection(request, queryset)
        items = list(queryset.order_by("pk"))
        if request.POST.get("confirm") == "yes":
            result = services.bulk_approve(items=items, actor=request.user, reason=request.POST.get("reason", ""), via=VIA)
            if result.approved:
                totals = format_totals(selectors.money_totals(result.approved), empty="")
                messages.success(request, f"Approved {counted(len(result.approved), 'item')}" + (f" moving {totals}." if totals else "."))
            for item, why in result.refused:
                messages.error(request, f"Item #{item.pk} refused: {why}")
            return None
        pending = [i for i in items if i.status == CompensationItem.Status.PENDING]
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": "Approve compensation items",
            "items": items,
            "count": len(items),
            "approvable": sum(1 for i in pending if i.valid),
            "not_approvable": [i for i in items if not i.approvable],
            "totals": selectors.money_totals(i for i in items if i.approvable),
            "action_checkbox_name": admin.helpers.ACTION_CHECKBOX_NAME,
        }
        return TemplateResponse(request, "admin/compensation/compensationitem/bulk_approve_confirmation.html", context)

    @admin.action(description="Draft selected pending items again", permissions=["review"])
    def redraft(self, request, queryset):
        self._refuse_unseen_selection(request, queryset)
        done = 0
        for item in queryset.filter(status=CompensationItem.Status.PENDING):
            try:
                services.redraft_item(item=item, actor=request.user, reason="redraft from the admin", via=VIA)
                done += 1
            except (PermissionError, ValueError) as exc:
                messages.error(request, f"Item #{item.pk}: {exc}")
        messages.info(request, f"Redrafted {counted(done, 'item')}.")


# The audit trail's changelist and export live in their own module.
from compensation.audit_admin import AuditEventAdmin  # noqa: E402,F401
from compensation.ticket_admin import TicketAdmin  # noqa: E402,F401
from compensation.delivery_admin import WorkspaceConnectorAdmin  # noqa: E402,F401
from compensation.template_admin import MessageTemplateAdmin  # noqa: E402,F401
