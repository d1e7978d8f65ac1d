"""The workspace and source admin pages: membership, flagging a source (with its preview and what-if),
the suspicious-sources and trust pages. They live with repairs because flagging starts a repair."""
from functools import partial

from django import forms
from django.contrib import admin, messages
from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html

from core.money import format_money
from core.vocabulary import Via
from provenance.access import capabilities, membership, tenancy
from provenance.access.admin_tenancy import WorkspaceScoped, refuse_unseen
from provenance.graph.graph import GraphUnavailable, default_server_key
from provenance.models import Source, Workspace
from provenance.recording.recorder import UnknownSource
from provenance.recording.selectors import blast_radius, workspace_currency
from repairs import decide_admin
from repairs.models import Incident, open_incident_id
from repairs.services import IncidentAlreadyOpen, flag_source

PREVIEW_ACTIONS = 40  # actions listed on the flag preview; the totals always cover the whole radius
FLAG_MANY_LIMIT = 20  # sources one list action may flag at once


class WorkspaceForm(forms.ModelForm):
    membership_reason = forms.CharField(
        required=False, max_length=500, label="Why the members change",
        help_text="Recorded with every member added or removed (required when the members change).")

    class Meta:
        model = Workspace
        fields = "__all__"

    def clean(self):
        cleaned = super().clean()
        changed = {"members", "visible_users"} & set(self.changed_data)
        if changed and not (cleaned.get("membership_reason") or "").strip():
            self.add_error("membership_reason", "Give a reason: membership changes are recorded in the audit trail.")
        return cleaned


@admin.register(Workspace)
class WorkspaceAdmin(WorkspaceScoped, admin.ModelAdmin):
    """Workspaces the person may see. Members are changed only through provenance.access.membership (superuser,
    or the workspace's own Workspace admin), each change audited; everything else is read-only here."""

    workspace_path = "pk"  # a workspace is its own scope
    form = WorkspaceForm
    list_display = ("name", "run_number", "action_count", "falkordb_placement", "member_count", "created_at")
    search_fields = ("name",)
    # An autocomplete, not a list of every user: it offers only membership.pickable_users (admin_site).
    autocomplete_fields = ("members",)
    filter_horizontal = ("visible_users",)

    def get_urls(self):
        wrap, name = self.admin_site.admin_view, "provenance_workspace"
        return [
            path("<int:workspace_pk>/suspicious/", wrap(partial(decide_admin.suspicious_view, self)), name=f"{name}_suspicious"),
            path("<int:workspace_pk>/actions/<int:action_id>/", wrap(partial(decide_admin.action_view, self)),
                 name=f"{name}_action"),
            path("<int:workspace_pk>/facts/<path:key>/", wrap(partial(decide_admin.fact_view, self)), name=f"{name}_fact"),
            path("<int:workspace_pk>/members/", wrap(self.members_view), name=f"{name}_members"),
        ] + super().get_urls()

    def members_view(self, request, workspace_pk: int):
        """Who works in the workspace, by role; its Workspace admin or a Support lead there adds and removes
        Reviewers (provenance.access.membership), each change audited. Another workspace is a 404."""
        workspace = tenancy.scoped(Workspace.objects.all(), user=request.user, path="pk").filter(pk=workspace_pk).first()
        if workspace is None:
            refuse_unseen(request, attempted="change members", subject_type="workspace", subject_ids=[workspace_pk])
            raise Http404("no such workspace")
        if not membership.may_manage_reviewers(request.user, workspace):
            raise PermissionDenied("adding and removing reviewers needs the Support lead or Workspace admin role "
                                   "in this workspace")
        here = reverse("admin:provenance_workspace_members", args=[workspace.pk])
        if request.method == "POST":
            people = get_user_model().objects.filter(pk=request.POST.get("user", "0") or 0).first() \
                if request.POST.get("user", "").isdigit() else None
            change = {"add": membership.add_reviewer, "remove": membership.remove_reviewer}.get(request.POST.get("do", ""))
            try:
                if people is None or change is None:
                    raise ValueError("choose a person and what to do")
                change(workspace=workspace, user=people, actor=request.user, reason=request.POST.get("reason", ""),
                       via=Via.ADMIN)
            except (PermissionError, ValueError) as exc:
                self.message_user(request, f"Refused: {exc}", messages.ERROR)
            else:
                done = "added to" if request.POST["do"] == "add" else "removed from"
                self.message_user(request, f"{people.get_username()} {done} {workspace.name}.", messages.SUCCESS)
            return HttpResponseRedirect(here)
        members = list(workspace.members.filter(is_active=True).prefetch_related("groups").order_by("username"))
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": f"Members of {workspace.name}",
            "workspace": workspace,
            "members": [{"user": u, "roles": sorted(g.name for g in u.groups.all()),
                         "removable": membership.may_manage_members(request.user, workspace)
                         or membership.is_reviewer_only(u)} for u in members],
            "candidates": membership.reviewer_candidates(request.user, workspace)[:200],
        }
        return TemplateResponse(request, "admin/provenance/workspace/members.html", context)

    @admin.display(description="members")
    def member_count(self, obj: Workspace) -> str:
        return format_html('<a href="{}">{}</a>', reverse("admin:provenance_workspace_members", args=[obj.pk]),
                           f"{obj.members.count():,}")

    @admin.display(description="FalkorDB server", ordering="falkordb_server")
    def falkordb_placement(self, obj: Workspace) -> str:
        # host:port only: the configured URLs carry passwords.
        return obj.falkordb_server or f"{default_server_key()} (default)"

    def formfield_for_manytomany(self, db_field, request, **kwargs):
        if db_field.name == "members":
            kwargs["queryset"] = membership.pickable_users(request.user).order_by("username")
        elif db_field.name == "visible_users":
            kwargs["queryset"] = get_user_model().objects.filter(is_active=True).order_by("username")
        return super().formfield_for_manytomany(db_field, request, **kwargs)

    def has_change_permission(self, request, obj=None) -> bool:
        if request.user.is_superuser:
            return True
        if obj is None:
            return membership.manageable_workspaces(request.user).exists()
        return membership.may_manage_members(request.user, obj)

    def get_fields(self, request, obj=None):
        fields = ["name", "members", "membership_reason", "run_number", "run_params", "action_count",
                  "falkordb_placement"]
        if request.user.is_superuser:
            fields.insert(2, "visible_users")
        return fields if self.has_change_permission(request, obj) else ["name", "members", "run_number",
                                                                          "run_params", "action_count",
                                                                          "falkordb_placement"]

    def get_readonly_fields(self, request, obj=None):
        if request.user.is_superuser and obj is None:
            return ("run_number", "run_params", "action_count", "falkordb_placement")
        if self.has_change_permission(request, obj):
            return ("name", "run_number", "run_params", "action_count", "falkordb_placement")  # members only
        return ("name", "members", "run_number", "run_params", "action_count", "falkordb_placement")

    def save_related(self, request, form, formsets, change):
        # Not form.save_m2m(): the membership service checks who may change it and audits each change.
        reason = form.cleaned_data.get("membership_reason") or ("workspace created" if not change else "")
        if request.user.is_superuser and "visible_users" in form.changed_data:
            membership.set_visible_users(workspace=form.instance, users=list(form.cleaned_data["visible_users"]),
                                         actor=request.user, reason=reason or "visible users changed", via=Via.ADMIN)
        if "members" not in form.cleaned_data:
            return
        if not change and not form.cleaned_data["members"]:
            return
        try:
            added, removed = membership.set_members(workspace=form.instance, users=list(form.cleaned_data["members"]),
                                                    actor=request.user, reason=reason, via=Via.ADMIN)
        except membership.MembershipRefused as exc:
            raise PermissionDenied(str(exc)) from None
        if added or removed:
            self.message_user(request, "Members: " + ", ".join(
                [f"+{u.get_username()}" for u in added] + [f"−{u.get_username()}" for u in removed]) + ".",
                messages.SUCCESS)


@admin.register(Source)
class SourceAdmin(WorkspaceScoped, admin.ModelAdmin):
    list_display = ("source_id", "workspace", "title", "trust", "open_incident")
    readonly_fields = ("trust",)  # changed only through the trust form: decide_admin.trust_view, audited
    list_filter = ("workspace",)
    search_fields = ("source_id", "title")
    list_select_related = ("workspace",)
    actions = ["flag_sources"]
    change_form_template = "admin/provenance/source/change_form.html"

    def formfield_for_dbfield(self, db_field, request, **kwargs):
        field = super().formfield_for_dbfield(db_field, request, **kwargs)
        if db_field.name == "content":  # a page that says nothing is still a page (the API and CLI agree)
            field.required, field.strip = False, False
        return field

    def get_queryset(self, request):
        # The open incident of each source, in the changelist's own query (no query per row).
        return super().get_queryset(request).annotate(open_incident_id=open_incident_id())

    @admin.display(description="open incident")
    def open_incident(self, obj: Source) -> str:
        if not obj.open_incident_id:
            return "—"
        return format_html('<a href="{}">#{}</a>', reverse("admin:repairs_incident_change", args=[obj.open_incident_id]),
                           obj.open_incident_id)

    # --- flagging: an object action and a list action, both through the preview page -------------------------
    def has_flag_permission(self, request) -> bool:
        return capabilities.may(request.user, "flag")

    @admin.action(permissions=["flag"], description="Flag as bad source (preview the blast radius first)")
    def flag_sources(self, request, queryset):
        ids = ",".join(str(pk) for pk in queryset.values_list("pk", flat=True)[:FLAG_MANY_LIMIT + 1])
        return HttpResponseRedirect(f"{reverse('admin:provenance_source_flag_many')}?ids={ids}")

    def get_urls(self):
        wrap = self.admin_site.admin_view
        return [
            path("flag/", wrap(self.flag_view), name="provenance_source_flag_many"),
            path("<int:source_pk>/flag/", wrap(self.flag_view), name="provenance_source_flag"),
            path("<int:source_pk>/trust/", wrap(partial(decide_admin.trust_view, self)), name="provenance_source_trust"),
            path("<int:source_pk>/what-if/progress/", wrap(decide_admin.what_if_progress),
                 name="provenance_source_what_if_progress"),
        ] + super().get_urls()

    def change_view(self, request, object_id, form_url="", extra_context=None):
        extra = {"can_flag": self.has_flag_permission(request), "trust_levels": Source.Trust.choices,
                 **(extra_context or {})}
        return super().change_view(request, object_id, form_url, extra)

    def flag_view(self, request, source_pk: int | None = None):
        """GET: the blast-radius preview of each source and a reason field. POST: flag them through the
        same service as the CLI and the API. A source that already has an open incident shows it instead."""
        from repairs.admin import incident_url

        if not self.has_flag_permission(request):
            raise PermissionDenied
        if source_pk is not None:
            ids = [source_pk]
        else:
            try:
                ids = [int(i) for i in request.GET.get("ids", "").split(",") if i][:FLAG_MANY_LIMIT]
            except ValueError:
                raise Http404("ids must be source ids") from None
        asked = Source.objects.filter(pk__in=ids)
        sources = list(tenancy.scoped(asked, user=request.user).select_related("workspace")
                       .order_by("workspace__name", "source_id"))
        if len(sources) < len(set(ids)):
            # Another workspace's source is answered like a missing one; the attempt is on the record.
            refuse_unseen(request, attempted="flag source", subject_type="source",
                          subject_ids=sorted(set(ids) - {s.pk for s in sources}))
            raise Http404("no such source")
        open_incidents = {(i.workspace_id, i.source_id): i for i in Incident.objects.open().filter(
            source_id__in=[s.source_id for s in sources], workspace__in={s.workspace_id for s in sources})}
        if len(sources) == 1 and (sources[0].workspace_id, sources[0].source_id) in open_incidents:
            incident = open_incidents[(sources[0].workspace_id, sources[0].source_id)]
            self.message_user(request, f"{sources[0].source_id} already has an open incident: #{incident.pk} "
                                       f"({incident.status}).", messages.WARNING)
            return HttpResponseRedirect(incident_url(incident.pk))
        error = None
        if request.method == "POST":
            reason = request.POST.get("reason", "").strip()
            changed = [s.source_id for s in sources
                       if decide_admin.desk_changed(s, request.POST.get(f"fingerprint-{s.pk}"))]
            if not reason:
                error = "Give a reason: it is recorded with the incident and shown to reviewers."
            elif changed:
                error = (f"The desk changed since this what-if ({', '.join(changed)}): the outcome below is "
                         f"computed again on the desk as it is now. Read it and confirm again.")
            else:
                opened, already = [], []
                for source in sources:
                    if (source.workspace_id, source.source_id) in open_incidents:
                        continue
                    try:
                        opened.append(flag_source(workspace=source.workspace, source_id=source.source_id,
                                                  actor=request.user, reason=reason, via=Incident.Via.ADMIN))
                    except IncidentAlreadyOpen as exc:  # flagged by someone else since the preview
                        already.append(exc.incident)
                    except (PermissionError, UnknownSource, ValueError) as exc:
                        self.message_user(request, f"{source.source_id}: {exc}", messages.ERROR)
                for incident in opened:
                    self.message_user(request, f"Flagged {incident.source_id}: incident #{incident.pk} opened, "
                                               "the repair is queued.", messages.SUCCESS)
                for incident in already:
                    self.message_user(request, f"{incident.source_id} already has an open incident: "
                                               f"#{incident.pk}.", messages.WARNING)
                if len(opened) + len(already) == 1:
                    return HttpResponseRedirect(incident_url((opened or already)[0].pk))
                return HttpResponseRedirect(reverse("admin:repairs_incident_changelist"))
        previews = []
        for source in sources:
            incident = open_incidents.get((source.workspace_id, source.source_id))
            preview, problem = None, None
            if incident is None:
                try:
                    preview = blast_radius(workspace=source.workspace, source=source.source_id, limit=PREVIEW_ACTIONS)
                except GraphUnavailable as exc:
                    problem = f"The provenance graph is unreachable, so there is no preview: {exc}"
            # The radius counts cents without a currency: its refunds are in the workspace's tickets' one.
            stake = (format_money(round(preview["amount_at_stake"] * 100),
                                  workspace_currency(workspace_id=source.workspace_id) or "") if preview else None)
            what_if = decide_admin.what_if_preview(request, source, preview["size"]) if preview else None
            previews.append({"source": source, "incident": incident, "radius": preview, "problem": problem, "stake": stake,
                             "what_if": what_if,
                             "incident_url": incident_url(incident.pk) if incident else None,
                             "agents": sorted((preview or {}).get("by_agent", {}).items(), key=lambda kv: -kv[1])})
        context = {
            **self.admin_site.each_context(request),
            "title": "Flag a bad source" if len(sources) == 1 else f"Flag {len(sources)} bad sources",
            "opts": self.opts,
            "previews": previews,
            "flaggable": [p for p in previews if p["incident"] is None],
            "error": error,
            "reason": request.POST.get("reason", ""),
            "preview_actions": PREVIEW_ACTIONS,
            "list_page": decide_admin.LIST_PAGE,
        }
        return TemplateResponse(request, "admin/provenance/source/flag_confirmation.html", context)
