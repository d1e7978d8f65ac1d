"""Delivery in the admin: each workspace's connectors page (which connector delivers each item kind,
whether it has what it needs, and the form to choose another) and an item's "deliver again".

Thin: compensation.delivery.connectors.config and compensation.delivery.delivery_selectors read; every change is one call
of compensation.delivery.deliveries (set_connector, deliver_again), the same calls as `manage.py connectors --set`
and the services' other callers, which check the role and tenancy again and write the audit row. Pages
ask the same rule as the API: another workspace is a 404 (an attempt to change it on the actor's
record), a role without the capability a 403. Secrets are never shown: only whether each is set."""
from __future__ import annotations

import json

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponseNotAllowed, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse

from compensation.delivery import deliveries, delivery_selectors
from compensation.delivery.connectors import config
from compensation.delivery_models import WorkspaceConnector
from core.admin_rows import WrittenByServices
from core.vocabulary import Via
from provenance.access import capabilities, tenancy
from provenance.access.admin_tenancy import WorkspaceScoped, refuse_unseen

VIA = Via.ADMIN
# Reading a workspace's connectors is reading its settings; choosing one is a Workspace admin's act, the
# capability set_connector itself asks (provenance.access.onboarding.may_manage_agents).
READ, CHOOSE = "read_workspace", "manage_agents"


class DeliveryViews:
    """Mixed into CompensationItemAdmin: the item page's delivery section and its "deliver again"."""

    def delivery_urls(self):
        return [path("<int:item_id>/deliver-again/", self.admin_site.admin_view(self.deliver_again_view),
                     name="compensation_compensationitem_deliver_again")]

    def delivery_context(self, request, item) -> dict:
        delivery = delivery_selectors.item_delivery(item)
        return {"delivery": delivery,
                "can_deliver_again": bool(delivery and delivery["needs_person"]) and self.has_review_permission(request),
                "deliver_again_url": reverse("admin:compensation_compensationitem_deliver_again", args=[item.pk])}

    def deliver_again_view(self, request, item_id):
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        item = self._item(request, item_id)  # another workspace's item: 404, the attempt on the record
        if not self.has_review_permission(request):
            raise PermissionDenied("delivering again needs the Reviewer role")
        back = reverse("admin:compensation_compensationitem_change", args=[item.pk])
        try:
            deliveries.deliver_again(item=item, actor=request.user, reason=request.POST.get("reason", ""), via=VIA)
        except (PermissionError, ValueError) as exc:
            messages.error(request, f"Refused: {exc}")
            return HttpResponseRedirect(back + "#delivery")
        messages.success(request, f"Item #{item.pk}: queued to be delivered again.")
        return HttpResponseRedirect(back + "#delivery")


@admin.register(WorkspaceConnector)
class WorkspaceConnectorAdmin(WrittenByServices, WorkspaceScoped, admin.ModelAdmin):
    """The connectors of the workspaces a person may see; rows change only through the workspace page's
    form (set_connector), never the stock add/change pages."""

    def has_module_permission(self, request) -> bool:
        return capabilities.may(request.user, READ)

    def has_view_permission(self, request, obj=None) -> bool:
        return capabilities.may(request.user, READ)

    def get_urls(self):
        wrap = self.admin_site.admin_view
        return [path("workspace/<int:workspace_pk>/", wrap(self.workspace_view),
                     name="compensation_workspaceconnector_workspace")] + super().get_urls()

    def changelist_view(self, request, extra_context=None):
        if not self.has_view_permission(request):
            raise PermissionDenied
        workspaces = list(tenancy.visible_workspaces(user=request.user).order_by("name")[:500])
        context = {**self.admin_site.each_context(request), "opts": self.opts, "title": "Connectors by workspace",
                   "workspaces": workspaces}
        return TemplateResponse(request, "admin/compensation/workspaceconnector/index.html", context)

    def change_view(self, request, object_id, form_url="", extra_context=None):
        row = self.get_queryset(request).filter(pk=object_id).first() if str(object_id).isdigit() else None
        if row is None:
            raise Http404(f"no connector {object_id}")
        if not self.has_view_permission(request, row):
            raise PermissionDenied
        return HttpResponseRedirect(reverse("admin:compensation_workspaceconnector_workspace", args=[row.workspace_id]))

    def workspace_view(self, request, workspace_pk: int):
        workspace = tenancy.visible_workspaces(user=request.user).filter(pk=workspace_pk).first()
        if workspace is None:
            refuse_unseen(request, attempted="choose connector", subject_type="workspace", subject_ids=[workspace_pk])
            raise Http404(f"no workspace {workspace_pk}")
        if not self.has_view_permission(request):
            raise PermissionDenied
        can_choose = capabilities.may(request.user, CHOOSE)
        here = reverse("admin:compensation_workspaceconnector_workspace", args=[workspace.pk])
        posted: dict = {}
        if request.method == "POST":
            if not can_choose:
                raise PermissionDenied("choosing connectors needs the Workspace admin role")
            posted = {k: request.POST.get(k, "") for k in ("kind", "connector", "options", "reason")}
            try:
                deliveries.set_connector(workspace=workspace, kind=posted["kind"], name=posted["connector"],
                                         options=self._options(workspace, posted), actor=request.user,
                                         reason=posted["reason"], via=VIA)
            except (PermissionError, ValueError) as exc:
                # Shown again with what was typed: bad input loses nothing.
                messages.error(request, f"Refused: {exc}")
            else:
                messages.success(request, f"{posted['kind']} is now delivered by {posted['connector']}.")
                return HttpResponseRedirect(here)
        elif request.method not in ("GET", "HEAD"):
            return HttpResponseNotAllowed(["GET", "POST"])
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": f"Connectors of {workspace.name}",
            "workspace": workspace,
            "rows": config.rows(workspace_id=workspace.pk),
            "can_choose": can_choose,
            "posted": posted,
            "action_url": here,
            "history_url": reverse("admin:compensation_auditevent_changelist") + "?action__exact=connector.set",
        }
        return TemplateResponse(request, "admin/compensation/workspaceconnector/workspace.html", context)

    @staticmethod
    def _options(workspace, posted: dict) -> dict:
        """The form's options: a JSON object; left empty, the kind keeps its current options when its
        connector stays the same (the page never prints them whole: a URL's query may hold a token)."""
        raw = posted["options"].strip()
        if not raw:
            name, options = config.choice(workspace_id=workspace.pk, kind=posted["kind"])
            return options if name == posted["connector"] else {}
        try:
            options = json.loads(raw)
        except ValueError:
            raise ValueError("options must be a JSON object, such as {\"url\": \"https://…\"}") from None
        if not isinstance(options, dict):
            raise ValueError("options must be a JSON object, such as {\"url\": \"https://…\"}")
        return options
