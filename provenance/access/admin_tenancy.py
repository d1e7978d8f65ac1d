"""The tenancy rule (provenance.access.tenancy) as the admin applies it: every ModelAdmin of a workspace's data
inherits WorkspaceScoped, so its changelist, change page, history, autocomplete, actions and custom views
all start from a queryset that holds only the workspaces the person may see; its workspace filter
offers only those; and an object outside them answers 404, as the API does, instead of Django's
"doesn't exist" redirect (which would still confirm that the id is taken).
"""
from __future__ import annotations

from django.contrib import admin
from django.http import Http404

from core.vocabulary import Via
from provenance.access import tenancy
from provenance.access.refusals import record_refusal
from provenance.models import Workspace


class WorkspaceFilter(admin.SimpleListFilter):
    """The sidebar's workspace choices: only the workspaces the person may see. The parameter keeps the
    name of Django's related filter, so links such as ?workspace__id__exact=3 keep working."""

    title = "workspace"
    parameter_name = "workspace__id__exact"
    path = "workspace"  # set per admin by workspace_filter()

    def lookups(self, request, model_admin):
        return [(str(pk), name) for pk, name in
                tenancy.visible_workspaces(user=request.user).order_by("name").values_list("pk", "name")[:200]]

    def queryset(self, request, queryset):
        value = self.value()
        if not value:
            return queryset
        if not value.isdigit():
            return queryset.none()
        return queryset.filter(**{f"{self.path}_id": int(value)})


def workspace_filter(path: str) -> type[WorkspaceFilter]:
    return type(f"WorkspaceFilter_{path}", (WorkspaceFilter,), {"path": path})


class WorkspaceScoped:
    """Mixin for a ModelAdmin whose rows belong to a workspace through `workspace_path`."""

    workspace_path = "workspace"

    def get_queryset(self, request):
        return tenancy.scoped(super().get_queryset(request), user=request.user, path=self.workspace_path)

    def get_list_filter(self, request):
        filters = list(super().get_list_filter(request))
        return [workspace_filter(self.workspace_path) if f == self.workspace_path else f for f in filters]

    def formfield_for_foreignkey(self, db_field, request, **kwargs):
        if db_field.related_model is Workspace:
            kwargs["queryset"] = tenancy.visible_workspaces(user=request.user)
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    def _get_obj_does_not_exist_redirect(self, request, opts, object_id):
        raise Http404(f"no {opts.verbose_name} {object_id}")


def refuse_unseen(request, *, attempted: str, subject_type: str, subject_ids) -> None:
    """Put an attempt to change objects the person may not see on the record (their own workspaces'
    chains): only attempts to change something, as the API does; reading a missing page is no event."""
    if request.method in ("GET", "HEAD", "OPTIONS"):
        return
    for subject_id in subject_ids:
        record_refusal(actor=request.user, via=Via.ADMIN, attempted=f"{attempted} ({request.method} {request.path})",
                       subject_type=subject_type, subject_id=subject_id, status=404, code="not_found",
                       message=f"no {subject_type.replace('_', ' ')} {subject_id} in the workspaces this user may see")
