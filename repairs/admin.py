"""The incident pages as far as repairs knows them: the changelist, the incident page (progress,
outcome, verification, per-ticket before → after, picture), "why is this here?" and retry/close.

What the pages show of compensation (review numbers, the review queue's links, item counts) and the
report export combine repairs and compensation: kintsugi_site.admin registers IncidentAdmin, these
pages with those parts, through the hooks `compensation_context` and `close_context`.
Flagging itself starts from the Source admin (provenance/admin.py). Pages are thin: repairs.selectors
reads, repairs.services changes state, repairs.views serves the small endpoints.
"""
from __future__ import annotations

from functools import partial

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponseNotAllowed, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html

from core.admin_rows import WrittenByServices
from core.errors import DomainError
from provenance.access.admin_tenancy import WorkspaceScoped, refuse_unseen
from provenance.access import capabilities, tenancy
from provenance.recording import containment, quarantine
from repairs import deep_check, explain, phases, radius_picture, selectors, services, ticket_story, views
from repairs.models import Incident, IncidentTransition
from repairs.not_rerun import not_rerun_summary

TICKETS_PER_PAGE = 25
PICTURE_TICKETS_PER_PAGE = 12


def incident_url(incident_id: int) -> str:
    return reverse("admin:repairs_incident_change", args=[incident_id])


class IncidentPages(WrittenByServices, WorkspaceScoped, admin.ModelAdmin):
    # Opened by flagging a source, with a preview first; retried and closed through their own forms.
    list_display = ("number", "source_id", "workspace", "status_display", "progress_display", "blast_radius",
                    "flagged_by", "created_at")
    list_display_links = ("number", "source_id")
    list_filter = ("status", "workspace")
    search_fields = ("source_id",)
    list_select_related = ("workspace", "flagged_by")
    show_full_result_count = False  # no count over the whole table on every changelist load
    ordering = ("-created_at",)

    def get_queryset(self, request):
        return super().get_queryset(request).defer("plan", "verification")

    @admin.display(description="#", ordering="pk")
    def number(self, obj: Incident) -> str:
        return f"#{obj.pk}"

    @admin.display(description="status", ordering="status")
    def status_display(self, obj: Incident) -> str:
        return selectors.status_label(obj)

    @admin.display(description="progress")
    def progress_display(self, obj: Incident) -> str:
        return f"{obj.percent}%" + (f" ({obj.phase})" if obj.status in selectors.RUNNING and obj.phase else "")

    def has_lead_permission(self, request) -> bool:
        return capabilities.may(request.user, "flag")

    # --- URLs -------------------------------------------------------------------------------------------
    def get_urls(self):
        wrap = self.admin_site.admin_view
        name = "repairs_incident"
        return [
            path("<int:incident_id>/progress/", wrap(self.progress_view), name=f"{name}_progress"),
            path("<int:incident_id>/graph.svg", wrap(self.graph_view), name=f"{name}_graph"),
            path("<int:incident_id>/explain/", wrap(self.explain_view), name=f"{name}_explain"),
            path("<int:incident_id>/retry/", wrap(self.retry_view), name=f"{name}_retry"),
            path("<int:incident_id>/verify-full/", wrap(self.verify_full_view), name=f"{name}_verify_full"),
            path("<int:incident_id>/close/", wrap(self.close_view), name=f"{name}_close"),
        ] + super().get_urls()

    def _incident(self, request, incident_id, *, for_page: bool = False) -> Incident:
        """The incident behind every custom view, through the tenancy rule: another workspace's incident
        is a 404 like a missing one (and an attempt to change it is on the actor's record)."""
        try:
            pk = int(incident_id)
            visible = tenancy.scoped(Incident.objects.all(), user=request.user)
            incident = (selectors.incident_for_page(pk, within=visible) if for_page
                        else visible.select_related("workspace").defer("plan").get(pk=pk))
        except (Incident.DoesNotExist, ValueError):
            refuse_unseen(request, attempted="incident", subject_type="incident", subject_ids=[incident_id])
            raise Http404(f"no incident {incident_id}") from None
        if not self.has_view_permission(request, incident):
            raise PermissionDenied
        return incident

    # --- the incident page ------------------------------------------------------------------------------
    def compensation_context(self, request, incident: Incident) -> dict:
        """What the incident page shows of the layers above repairs (kintsugi_site.admin fills it in):
        the review numbers and status, item counts, the review queue's links and the report downloads."""
        return {}

    def close_context(self, request, incident: Incident) -> dict:
        """What the close confirmation shows of the layers above repairs (the items closing cancels)."""
        return {}

    def change_view(self, request, object_id, form_url="", extra_context=None):
        incident = self._incident(request, object_id, for_page=True)
        page = views.page_number(request, "tickets")
        picture_page = views.page_number(request, "picture")
        tickets = selectors.ticket_changes(incident=incident, page=page, per_page=TICKETS_PER_PAGE)
        effects = selectors.effect_rows(incident=incident)
        base = incident_url(incident.pk)
        explain_url = reverse("admin:repairs_incident_explain", args=[incident.pk])
        graph_url = reverse("admin:repairs_incident_graph", args=[incident.pk])
        held = quarantine.state_of(incident_id=incident.pk)
        context = {
            **self.admin_site.each_context(request),
            "title": f"Incident #{incident.pk}: {incident.source_id}",
            "subtitle": None,
            "opts": self.opts,
            "incident": incident,
            "status_label": selectors.status_label(incident),
            "progress": selectors.progress(incident),
            "timings": phases.timings(incident),
            "progress_url": reverse("admin:repairs_incident_progress", args=[incident.pk]),
            "outcome_rows": selectors.outcome_rows(incident),
            "status_keys": selectors.STATUSES,
            "verification": selectors.verification_view(incident.verification),
            "ticket_rows": tickets["rows"],
            "ticket_stories": ticket_story.stories(incident=incident, changes=tickets["rows"]),
            "tickets": tickets,
            "tickets_next": f"{base}?tickets={page + 1}#tickets" if tickets["has_next"] else None,
            "tickets_previous": f"{base}?tickets={page - 1}#tickets" if tickets["has_previous"] else None,
            "invalidated_effects": effects,
            "effects_more": max(0, (incident.effects_invalidated or 0) - len(effects)),
            "transitions": selectors.transition_rows(incident=incident),
            "quarantine": held,
            "containment": containment.state_of(incident_id=incident.pk),
            "not_rerun": not_rerun_summary(incident),
            "explain_url": explain_url,
            "picture_template": "admin/repairs/incident/_picture.html",
            "picture": {
                "url": f"{graph_url}?page={picture_page}&per_page={PICTURE_TICKETS_PER_PAGE}",
                "overview_url": f"{graph_url}?overview=1" if (incident.blast_radius or 0) > radius_picture.DETAIL_LIMIT else None,
                "page": picture_page,
                "previous": f"{base}?picture={picture_page - 1}#picture" if picture_page > 1 else None,
                "next": (f"{base}?picture={picture_page + 1}#picture"
                         if (incident.tickets_in_radius or 0) > picture_page * PICTURE_TICKETS_PER_PAGE else None),
            },
            # The API's PROV export (the admin's session signs the request in): the same read rule as the page.
            "prov": [{"fmt": f, "label": label, "url": f"{reverse('api:incident-prov', args=[incident.pk])}?format={f}"}
                     for f, label in (("json", "PROV-JSON"), ("ttl", "PROV-O (Turtle)"))],
            "can_retry": self.has_lead_permission(request) and incident.may_retry(),
            "can_verify_full": (self.has_lead_permission(request) and incident.finished_at is not None
                                and incident.status in deep_check.FINISHED),
            "can_close": self._can_close(request, incident),
            "can_lift": (incident.status == Incident.Status.CLOSED and self.has_lead_permission(request)
                         and bool(held and held["held"])),
            "close_url": reverse("admin:repairs_incident_close", args=[incident.pk]),
            **self.compensation_context(request, incident),
            **(extra_context or {}),
        }
        return TemplateResponse(request, "admin/repairs/incident/incident_page.html", context)

    # --- the small endpoints ------------------------------------------------------------------------------
    def progress_view(self, request, incident_id):
        return views.progress_json(request, self._incident(request, incident_id))

    def graph_view(self, request, incident_id):
        incident = self._incident(request, incident_id)
        return views.graph_picture(request, incident,
                                   explain_url=reverse("admin:repairs_incident_explain", args=[incident.pk]))

    def explain_view(self, request, incident_id):
        incident = self._incident(request, incident_id)
        try:
            action = int(request.GET["action"]) if "action" in request.GET else None
            effect = int(request.GET["effect"]) if "effect" in request.GET else None
            path = explain.explain(incident=incident, action_id=action, effect_id=effect)
        except (ValueError, explain.NotInIncident) as exc:
            raise Http404(str(exc)) from None
        target = f"effect #{effect}" if effect is not None else f"action #{action}"
        context = {
            **self.admin_site.each_context(request),
            "title": f"Why is {target} in incident #{incident.pk}?",
            "opts": self.opts,
            "incident": incident,
            "path": path,
            "incident_url": incident_url(incident.pk),
            "explain_url": reverse("admin:repairs_incident_explain", args=[incident.pk]),
        }
        return TemplateResponse(request, "admin/repairs/incident/explain.html", context)

    # --- retry and close (a reason each, through the services) --------------------------------------------
    def _lead_post(self, request, incident_id, service, done: str):
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        incident = self._incident(request, incident_id)
        if not self.has_lead_permission(request):
            raise PermissionDenied
        reason = request.POST.get("reason", "").strip()
        if not reason:
            self.message_user(request, "Give a reason: it goes into the incident's history.", messages.ERROR)
            return HttpResponseRedirect(incident_url(incident.pk))
        try:
            service(incident=incident, actor=request.user, reason=reason, via=Incident.Via.ADMIN)
        except (services.RefusedTransition, PermissionError, ValueError, DomainError) as exc:
            self.message_user(request, str(exc), messages.ERROR)
        else:
            self.message_user(request, format_html("Incident #{} {}.", incident.pk, done), messages.SUCCESS)
        return HttpResponseRedirect(incident_url(incident.pk))

    def retry_view(self, request, incident_id):
        return self._lead_post(request, incident_id, services.retry_incident, "sent back to the worker")

    def verify_full_view(self, request, incident_id):
        return self._lead_post(request, incident_id, deep_check.request_full_verification,
                               "is being replayed whole by a worker: the result lands in its verification and history")

    def _can_close(self, request, incident: Incident) -> bool:
        return self.has_lead_permission(request) and incident.may_close()

    def close_view(self, request, incident_id):
        """GET: what closing does (pending items cancelled, with their counts and money) and a reason
        field. POST: close through repairs.services.close_incident."""
        if request.method == "POST":
            false_alarm = request.POST.get("false_alarm") == "on"
            return self._lead_post(request, incident_id, partial(services.close_incident, false_alarm=false_alarm),
                                   "closed as a false alarm: its source reads again" if false_alarm else "closed")
        if request.method != "GET":
            return HttpResponseNotAllowed(["GET", "POST"])
        incident = self._incident(request, incident_id)
        if not self.has_lead_permission(request):
            raise PermissionDenied
        context = {
            **self.admin_site.each_context(request),
            "title": f"Close incident #{incident.pk}?",
            "opts": self.opts,
            "incident": incident,
            "status_label": selectors.status_label(incident),
            "can_close": self._can_close(request, incident),
            "quarantine": quarantine.state_of(incident_id=incident.pk),
            "incident_url": incident_url(incident.pk),
            **self.close_context(request, incident),
        }
        return TemplateResponse(request, "admin/repairs/incident/close_confirmation.html", context)


@admin.register(IncidentTransition)
class IncidentTransitionAdmin(WrittenByServices, WorkspaceScoped, admin.ModelAdmin):
    """Read-only: the append-only status history of the incidents the person may see."""

    workspace_path = "incident__workspace"

    list_display = ("at", "incident", "from_status", "to_status", "actor", "via", "reason")
    list_filter = ("to_status", "via")
    list_select_related = ("incident__workspace", "actor")
    show_full_result_count = False


# Workspaces and sources are administered here: flagging a source starts a repair.
from repairs.workspace_admin import SourceAdmin, WorkspaceAdmin  # noqa: E402,F401
