"""The audit trail in the admin: each user sees the chains of the workspaces they may see (superusers:
all of them, the system chain included), newest first, with each chain's verification and its latest
signed checkpoint above the list, filters by incident, item and actor, and a "verify the chain" page
that prints what `manage.py verify_audit` prints. The export is scoped the same way: another
workspace's rows never appear."""
from __future__ import annotations

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.db.models import Q
from django.http import Http404, HttpResponse
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html

from compensation.review import selectors
from core.audit import chains, export, verification
from compensation.models import AuditEvent, CompensationItem
from core.admin_rows import WrittenByServices
from core.vocabulary import AuditAction
from core.wording import event_words
from provenance.access import tenancy
from provenance.access.admin_tenancy import WorkspaceScoped


class AuditIncidentFilter(admin.SimpleListFilter):
    """The newest incidents the person may see (the parameter the history links already use)."""

    title = "incident"
    parameter_name = "incident__id__exact"

    def lookups(self, request, model_admin):
        from provenance.access import tenancy
        from repairs.models import Incident

        rows = (tenancy.scoped(Incident.objects.all(), user=request.user).order_by("-pk")
                .values_list("pk", "source_id")[:50])
        return [(str(pk), f"#{pk} {source}") for pk, source in rows]

    def queryset(self, request, queryset):
        value = self.value()
        if not value:
            return queryset
        if not value.isdigit():
            return queryset.none()
        return queryset.filter(Q(incident_id=int(value)) | Q(subject_type="incident", subject_id=value))


class ActorFilter(admin.SimpleListFilter):
    """Who acted, among the events the person may read."""

    title = "actor"
    parameter_name = "actor_name"

    def lookups(self, request, model_admin):
        names = (selectors.visible_audit_events(user=request.user).exclude(actor_name="").order_by("actor_name")
                 .values_list("actor_name", flat=True).distinct()[:100])
        return [(n, n) for n in names]

    def queryset(self, request, queryset):
        return queryset.filter(actor_name=self.value()) if self.value() else queryset


class ItemFilter(admin.SimpleListFilter):
    """One compensation item's events (the item pages link here with it). The choices are the items of
    the incident chosen in the incident filter, else the newest items the person may see."""

    title = "compensation item"
    parameter_name = "item"

    def lookups(self, request, model_admin):
        from provenance.access import tenancy

        items = tenancy.scoped(CompensationItem.objects.all(), user=request.user, path="incident__workspace")
        incident = request.GET.get("incident__id__exact", "")
        if incident.isdigit():
            items = items.filter(incident_id=int(incident))
        rows = items.order_by("-pk").values_list("pk", "kind", "ticket_id")[:50]
        labels = dict(CompensationItem.Kind.choices)
        return [(str(pk), f"#{pk} {labels.get(kind, kind)} · {ticket}") for pk, kind, ticket in rows]

    def queryset(self, request, queryset):
        value = self.value()
        if not value:
            return queryset
        if not value.isdigit():
            return queryset.none()
        return queryset.filter(subject_type="compensation_item", subject_id=value)


class ActionFilter(admin.SimpleListFilter):
    """What happened, in words ("Item: decision undone"), not the record's action names."""

    title, parameter_name = "what happened", "action"

    def lookups(self, request, model_admin):
        return [(a.value, event_words(a.value)) for a in AuditAction]

    def queryset(self, request, queryset):
        return queryset.filter(action=self.value()) if self.value() else queryset


def _events_of_items(request, queryset, items: Q, *, ticket: str = ""):
    """The events of the items `items` selects among those the person may see (at most 1,000 of them):
    an item's events name the item, not its ticket or customer; with `ticket`, its cases' events too."""
    ids = [str(pk) for pk in tenancy.scoped(CompensationItem.objects.all(), user=request.user,
                                            path="incident__workspace").filter(items).values_list("pk", flat=True)[:1000]]
    found = Q(subject_type="compensation_item", subject_id__in=ids)
    if ticket:
        found |= Q(subject_type="case", data__ticket__iexact=ticket)
    return queryset.filter(found)


class _TextFilter(admin.SimpleListFilter):
    """A filter typed into the search form above the list. The admin applies only filters with a choice,
    so the typed value is its one choice (shown in the sidebar, where it can be cleared)."""

    def lookups(self, request, model_admin):
        value = (self.value() or "").strip()
        return [(value, value)] if value else ()


class CustomerFilter(_TextFilter):
    title, parameter_name = "customer", "customer"

    def queryset(self, request, queryset):
        value = (self.value() or "").strip()
        if not value:
            return queryset
        return _events_of_items(request, queryset, Q(customer_email__icontains=value) | Q(facts__customer__icontains=value))


class TicketFilter(_TextFilter):
    title, parameter_name = "ticket", "ticket"

    def queryset(self, request, queryset):
        value = (self.value() or "").strip()
        return _events_of_items(request, queryset, Q(ticket_id__iexact=value), ticket=value) if value else queryset


SUMMARY_ROWS = 5_000  # the newest events the summary above the list counts (a bounded read)


def summary(*, user, chains_: list) -> dict:
    """What an auditor reads first: the chains and whether they hold, and what the newest events were, in
    words ("Item: approved" 412), most frequent first."""
    newest = list(selectors.visible_audit_events(user=user).order_by("-id").values_list("action", "at")[:SUMMARY_ROWS])
    counts: dict[str, int] = {}
    for action, _at in newest:
        counts[action] = counts.get(action, 0) + 1
    return {"events": sum(c.rows for c in chains_), "chains": len(chains_),
            "broken": [c.name for c in chains_ if not c.holds], "since": newest[-1][1] if newest else None,
            "counted": len(newest), "capped": len(newest) == SUMMARY_ROWS,
            "what": [(event_words(a), n, a) for a, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))]}


@admin.register(AuditEvent)
class AuditEventAdmin(WrittenByServices, WorkspaceScoped, admin.ModelAdmin):
    # What a person reads first: when, who, what and why; the chain position and hash after.
    list_display = ("at", "actor_name", "what", "subject", "reason", "status_change", "place", "short_hash")
    list_filter = (AuditIncidentFilter, ItemFilter, ActorFilter, ActionFilter, "via", "subject_type", CustomerFilter,
                   TicketFilter)
    search_fields = ("reason", "actor_name", "subject_id", "action")
    list_per_page = 100
    # Ids grow across all chains: the newest event first, whichever chain it is in (the changelist
    # applies this over the queryset's own order).
    ordering = ("-id",)
    show_full_result_count = False  # the trail only grows; skip the second COUNT(*) per page
    actions = None
    change_list_template = "admin/compensation/auditevent/change_list.html"
    # The history pages link here with these filters (an incident, or one item or incident).
    EXTRA_LOOKUPS = {"subject_id", "subject_type"}

    def lookup_allowed(self, lookup, value, request=None):
        return lookup in self.EXTRA_LOOKUPS or super().lookup_allowed(lookup, value, request)

    def get_search_results(self, request, queryset, search_term):
        """Also the events of the items of a ticket or customer ("t05", "Ada", "ada@example.com"): an
        item's events name the item, not its ticket, so the term is looked up among the items the person
        may see first (at most 1,000 of them)."""
        found, may_have_duplicates = super().get_search_results(request, queryset, search_term)
        term = search_term.strip()
        if len(term) < 2:
            return found, may_have_duplicates
        items = Q(ticket_id__iexact=term) | Q(customer_email__icontains=term) | Q(facts__customer__icontains=term)
        return found | _events_of_items(request, queryset, items, ticket=term), True

    def get_queryset(self, request):
        # Not WorkspaceScoped's query: the system chain has no workspace and is for superusers only.
        return selectors.visible_audit_events(user=request.user).select_related("workspace").order_by("-id")

    @admin.display(description="what happened", ordering="action")
    def what(self, obj: AuditEvent) -> str:
        return event_words(obj.action)

    @admin.display(description="chain", ordering="workspace__name")
    def chain(self, obj):
        return obj.workspace.name if obj.workspace_id and obj.workspace else chains.chain_name(obj.workspace_id)

    @admin.display(description="from · chain · position", ordering="seq")
    def place(self, obj) -> str:
        # One column for where the change came from and where it sits in the record: the list keeps its
        # hash column inside a 1440 px window with the filters beside it.
        return f"{obj.get_via_display()} · {self.chain(obj)} #{obj.seq}"

    @admin.display(description="hash")
    def short_hash(self, obj):
        # The first 12 hex digits identify the row to a person; the whole hash (and the previous row's, which
        # it chains to) opens on demand, to compare with an export or verify_audit.
        return format_html('<details class="whole-hash"><summary><code>{}…</code></summary><code>{}</code>'
                           '<span class="muted">after</span> <code>{}</code></details>', obj.hash[:12], obj.hash,
                           obj.prev_hash)

    @admin.display(description="subject")
    def subject(self, obj):
        # A refusal names what was tried, which may be another workspace's id: text, never a link to it.
        if obj.subject_type == "compensation_item" and obj.subject_id and obj.action != AuditAction.REFUSED:
            url = reverse("admin:compensation_compensationitem_change", args=[obj.subject_id])
            return format_html('<a href="{}">item #{}</a>', url, obj.subject_id)
        return f"{obj.subject_type} {obj.subject_id}".strip()

    @admin.display(description="status")
    def status_change(self, obj):
        if obj.from_status or obj.to_status:
            return f"{obj.from_status or '—'} → {obj.to_status or '—'}"
        return ""

    def get_urls(self):
        wrap = self.admin_site.admin_view
        return [path("export/", wrap(self.export_view), name="compensation_auditevent_export"),
                path("verify/", wrap(self.verify_view), name="compensation_auditevent_verify")] + super().get_urls()

    def changelist_view(self, request, extra_context=None):
        extra = {"can_export": request.user.has_perm("compensation.export_auditevent"),
                 "verify_url": reverse("admin:compensation_auditevent_verify"),
                 "export_url": reverse("admin:compensation_auditevent_export"),
                 "export_query": request.GET.urlencode(),
                 "chains": verification.verify_all(workspace_ids=selectors.visible_chains(user=request.user)),
                 "search": {name: request.GET.get(name, "") for name in ("customer", "ticket", "item")}}
        extra["summary"] = summary(user=request.user, chains_=extra["chains"])
        return super().changelist_view(request, {**extra, **(extra_context or {})})

    def verify_view(self, request):
        """"Verify the chain": the result `manage.py verify_audit` gives (the same function, the same
        lines), for the chains the person may see. The system chain (users and memberships of every
        workspace) is a superuser's only, as its rows are: a workspace's auditor would read other teams'
        membership changes in it. ?workspace=<id> verifies one chain (`system`: the system chain)."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        visible = selectors.visible_chains(user=request.user)
        wanted = request.GET.get("workspace", "")
        if wanted:
            chain = None if wanted == "system" else (int(wanted) if wanted.isdigit() else "?")
            if chain not in visible:
                raise Http404(f"no audit chain {wanted}")
            visible = [chain]
        result = verification.verify_output(verification.verify_all(workspace_ids=visible))
        context = {**self.admin_site.each_context(request), "opts": self.opts, "title": "Verify the audit chain",
                   "result": result, "command": "python manage.py verify_audit" + (
                       f" --workspace {'system' if wanted == 'system' else chains.chain_name(visible[0])}"
                       if wanted else ""),
                   "changelist_url": reverse("admin:compensation_auditevent_changelist")}
        return TemplateResponse(request, "admin/compensation/auditevent/verify.html", context)

    def export_view(self, request):
        """The (filtered) trail as CSV (formula-safe) or JSON, each chain oldest first."""
        if not request.user.has_perm("compensation.export_auditevent"):
            raise PermissionDenied
        events = selectors.visible_audit_events(user=request.user).order_by("workspace_id", "seq")
        incident = request.GET.get("incident__id__exact") or request.GET.get("incident")
        if incident:
            events = events.filter(Q(incident_id=incident) | Q(subject_type="incident", subject_id=str(incident)))
        for name in ("subject_type", "subject_id", "via", "action"):
            if request.GET.get(name):
                events = events.filter(**{name: request.GET[name]})
        fmt = request.GET.get("format", "csv")
        if fmt == "json":
            response = HttpResponse(export.export_json(events), content_type="application/json; charset=utf-8")
        else:
            fmt = "csv"
            response = HttpResponse(export.export_csv(events), content_type="text/csv; charset=utf-8")
        suffix = f"-incident-{int(incident)}" if incident and str(incident).isdigit() else ""
        response["Content-Disposition"] = f'attachment; filename="audit{suffix}.{fmt}"'
        response["X-Content-Type-Options"] = "nosniff"
        return response
