"""The admin site: stock Django admin, with the support lead's dashboard as its index page.

Installed through KintsugiAdminConfig (in INSTALLED_APPS instead of "django.contrib.admin"), so
`admin.site` and `@admin.register` everywhere mean this site.
"""
from django.contrib import admin
from django.contrib.admin.apps import AdminConfig
from django.contrib.admin.views.autocomplete import AutocompleteJsonView


class PickerAutocomplete(AutocompleteJsonView):
    """The admin's autocomplete, with the workspace members picker answering by the membership rule
    (provenance.access.membership.pickable_users) instead of the user admin's own permission and list: a
    Workspace admin finds only the people they may add, never every user of the deployment."""

    def _members_picker(self) -> bool:
        from provenance.models import Workspace

        return self.source_field.model is Workspace and self.source_field.name == "members"

    def has_perm(self, request, obj=None) -> bool:
        if self._members_picker():
            from provenance.access.membership import manageable_workspaces

            return manageable_workspaces(request.user).exists()
        return super().has_perm(request, obj)

    def get_queryset(self):
        queryset = super().get_queryset()
        if self._members_picker():
            from provenance.access.membership import pickable_users

            queryset = queryset.filter(pk__in=pickable_users(self.request.user).values("pk"))
        return queryset


from django.http import HttpResponseRedirect
from django.urls import reverse


def door(user) -> str:
    """Where a person lands after signing in, by role: a Reviewer on the cases to review, an Auditor on the
    audit trail, a Support lead (and everyone else) on the incidents dashboard."""
    if user.is_superuser or user.has_perm("repairs.flag_source"):
        return reverse("admin:index")
    if user.has_perm("compensation.review_compensationitem"):
        return reverse("admin:compensation_compensationitem_cases")
    if user.has_perm("compensation.export_auditevent"):
        return reverse("admin:compensation_auditevent_changelist")
    return reverse("admin:index")


class KintsugiAdminSite(admin.AdminSite):
    site_header = "kintsugi"
    site_title = "kintsugi admin"
    index_title = "Support lead dashboard"
    index_template = "admin/kintsugi_index.html"

    def index(self, request, extra_context=None):
        from kintsugi_site.dashboard import dashboard  # apps are loaded by the time a request arrives

        return super().index(request, {"dashboard": dashboard(user=request.user), **(extra_context or {})})

    def autocomplete_view(self, request):
        return PickerAutocomplete.as_view(admin_site=self)(request)

    def login(self, request, extra_context=None):
        asked = request.GET.get("next") or request.POST.get("next")
        response = super().login(request, extra_context)
        if (request.method == "POST" and isinstance(response, HttpResponseRedirect) and request.user.is_authenticated
                and (not asked or asked == reverse("admin:index"))):
            return HttpResponseRedirect(door(request.user))
        return response


class KintsugiAdminConfig(AdminConfig):
    default_site = "kintsugi_site.admin_site.KintsugiAdminSite"
