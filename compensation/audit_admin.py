"""The audit trail in the admin: each user sees the chains of the workspaces they may see (superusers:
all of them, the system chain included), newest first, with each chain's verification and its latest
signed checkpoint above the list. The export is scoped the same way: another workspace's rows never
appear."""
from __future__ import annotations

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.db.models import Q
from django.http import HttpResponse
from django.urls import path, reverse
from django.utils.html import format_html

from compensation import audit, chains, selectors
from compensation.models import AuditEvent
from kintsugi_site.admin_tenancy import WorkspaceScoped


@admin.register(AuditEvent)
class AuditEventAdmin(WorkspaceScoped, admin.ModelAdmin):
    list_display = ("chain", "seq", "at", "actor_name", "via", "action", "subject", "incident_id", "status_change", "reason")
    list_filter = ("via", "subject_type", "action")
    search_fields = ("reason", "actor_name", "subject_id", "action")
    list_per_page = 100
    # Ids grow across all chains: the newest event first, whichever chain it is in (the changelist
    # applies this over the queryset's own order).
    ordering = ("-id",)
    show_full_result_count = False  # the trail only grows; skip the second COUNT(*) per page
    actions = None
    change_list_template = "admin/compensation/auditevent/change_list.html"
    # The history pages link here with these filters (an incident, or one item or incident).
    EXTRA_LOOKUPS = {"incident__id__exact", "subject_id", "subject_type"}

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    def lookup_allowed(self, lookup, value, request=None):
        return lookup in self.EXTRA_LOOKUPS or super().lookup_allowed(lookup, value, request)

    def get_queryset(self, request):
        # Not WorkspaceScoped's query: the system chain has no workspace and is for superusers only.
        return selectors.visible_audit_events(user=request.user).select_related("workspace").order_by("-id")

    @admin.display(description="chain", ordering="workspace__name")
    def chain(self, obj):
        return obj.workspace.name if obj.workspace_id and obj.workspace else chains.chain_name(obj.workspace_id)

    @admin.display(description="subject")
    def subject(self, obj):
        # A refusal names what was tried, which may be another workspace's id: text, never a link to it.
        if obj.subject_type == "compensation_item" and obj.subject_id and obj.action != "refused":
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
        return [path("export/", wrap(self.export_view), name="compensation_auditevent_export")] + super().get_urls()

    def changelist_view(self, request, extra_context=None):
        extra = {"can_export": request.user.has_perm("compensation.export_auditevent"),
                 "export_url": reverse("admin:compensation_auditevent_export"),
                 "export_query": request.GET.urlencode(),
                 "chains": chains.verify_all(workspace_ids=selectors.visible_chains(user=request.user))}
        return super().changelist_view(request, {**extra, **(extra_context or {})})

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
            response = HttpResponse(audit.export_json(events), content_type="application/json; charset=utf-8")
        else:
            fmt = "csv"
            response = HttpResponse(audit.export_csv(events), content_type="text/csv; charset=utf-8")
        suffix = f"-incident-{int(incident)}" if incident and str(incident).isdigit() else ""
        response["Content-Disposition"] = f'attachment; filename="audit{suffix}.{fmt}"'
        response["X-Content-Type-Options"] = "nosniff"
        return response
