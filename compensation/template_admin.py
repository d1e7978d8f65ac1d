"""The workspace's customer message template in the admin: one page per workspace where its Support lead
edits subject and body, previews them against a real incident's drafts and re-drafts that incident's
messages while nothing of it is approved. Thin: compensation.drafting.templates decides and audits; the page
shows the template and every rendered message through autoescaping templates only (a customer's name
or an agent's words are text, never markup)."""
from __future__ import annotations

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponseNotAllowed, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse

from compensation.drafting import customer_message
from compensation.drafting import templates
from compensation.drafting.customer_message import Template
from compensation.drafting.customers import workspace_locale
from compensation.models import MessageTemplate
from core.money import format_money
from core.admin_rows import WrittenByServices
from core.vocabulary import AuditAction, Via
from provenance.access import capabilities
from provenance.access import tenancy
from provenance.access.admin_tenancy import WorkspaceScoped, refuse_unseen
from repairs.models import Incident

VIA = Via.ADMIN


@admin.register(MessageTemplate)
class MessageTemplateAdmin(WrittenByServices, WorkspaceScoped, admin.ModelAdmin):
    """Rows change only through the workspace page (compensation.drafting.templates.set_template), never the stock
    add/change pages."""

    def has_module_permission(self, request) -> bool:
        return capabilities.may(request.user, templates.EDIT)

    def has_view_permission(self, request, obj=None) -> bool:
        return capabilities.may(request.user, templates.EDIT)

    def get_urls(self):
        wrap = self.admin_site.admin_view
        return [path("workspace/<int:workspace_pk>/", wrap(self.workspace_view),
                     name="compensation_messagetemplate_workspace")] + super().get_urls()

    def changelist_view(self, request, extra_context=None):
        if not self.has_view_permission(request):
            raise PermissionDenied
        workspaces = list(tenancy.visible_workspaces(user=request.user).order_by("name")[:500])
        context = {**self.admin_site.each_context(request), "opts": self.opts,
                   "title": "Customer message templates", "workspaces": workspaces}
        return TemplateResponse(request, "admin/compensation/messagetemplate/index.html", context)

    def change_view(self, request, object_id, form_url="", extra_context=None):
        row = self.get_queryset(request).filter(pk=object_id).first() if str(object_id).isdigit() else None
        if row is None:
            raise Http404(f"no template {object_id}")
        return HttpResponseRedirect(reverse("admin:compensation_messagetemplate_workspace", args=[row.workspace_id]))

    def workspace_view(self, request, workspace_pk: int):
        workspace = tenancy.visible_workspaces(user=request.user).filter(pk=workspace_pk).first()
        if workspace is None:
            refuse_unseen(request, attempted="edit message template", subject_type="workspace",
                          subject_ids=[workspace_pk])
            raise Http404(f"no workspace {workspace_pk}")
        if not self.has_view_permission(request):
            raise PermissionDenied
        here = reverse("admin:compensation_messagetemplate_workspace", args=[workspace.pk])
        saved, version = templates.current(workspace_id=workspace.pk)
        incidents = list(Incident.objects.filter(workspace=workspace).order_by("-pk")[:20])
        form = {"subject": saved.subject, "body": saved.body, "reason": "",
                "incident": str(incidents[0].pk) if incidents else ""}
        rows, incident = None, None
        if request.method == "POST":
            form = {k: request.POST.get(k, form.get(k, "")) for k in ("subject", "body", "reason", "incident")}
            incident = next((i for i in incidents if str(i.pk) == form["incident"]), None)
            step = request.POST.get("step", "preview")
            try:
                if step == "locale":
                    chosen = templates.set_locale(workspace=workspace, locale=request.POST.get("locale", ""),
                                                  actor=request.user, reason=form["reason"], via=VIA)
                    messages.success(request, f"Money in new messages is written for {chosen or 'the default locale'}.")
                    return HttpResponseRedirect(here)
                if step == "save":
                    row = templates.set_template(workspace=workspace, subject=form["subject"], body=form["body"],
                                                 actor=request.user, reason=form["reason"], via=VIA)
                    messages.success(request, f"Template saved (version {row.version}): new drafts use it.")
                    return HttpResponseRedirect(here)
                if step == "apply" and incident is not None:
                    changed = templates.apply_to_incident(incident=incident, actor=request.user,
                                                          reason=form["reason"], via=VIA)
                    messages.success(request, f"Incident #{incident.pk}: {changed} message(s) re-drafted from "
                                              f"template version {version}.")
                    return HttpResponseRedirect(here)
            except (PermissionError, ValueError) as exc:
                messages.error(request, f"Refused: {exc}")
            problems = customer_message.template_problems(form["subject"], form["body"])
            if incident is not None and not problems:
                rows = templates.preview(incident=incident, template=Template(form["subject"], form["body"]))
            for p in problems:
                messages.error(request, p)
        elif request.method not in ("GET", "HEAD"):
            return HttpResponseNotAllowed(["GET", "POST"])
        context = {
            **self.admin_site.each_context(request), "opts": self.opts,
            "title": f"Customer message template of {workspace.name}", "workspace": workspace,
            "version": version, "form": form, "placeholders": customer_message.PLACEHOLDERS.items(),
            "incidents": incidents, "incident": incident, "rows": rows,
            "approved": templates.approved_any(incident) if incident is not None else False,
            "action_url": here, "locale": workspace.message_locale, "default_locale": workspace_locale(None),
            "locale_sample": format_money(123450, "EUR", workspace_locale(workspace)),
            "history_url": reverse("admin:compensation_auditevent_changelist")
                           + f"?action__exact={AuditAction.MESSAGE_TEMPLATE_CHANGED.value}",
        }
        return TemplateResponse(request, "admin/compensation/messagetemplate/workspace.html", context)
