"""The admin site: stock Django admin, with the support lead's dashboard as its index page.

Installed through KintsugiAdminConfig (in INSTALLED_APPS instead of "django.contrib.admin"), so
`admin.site` and `@admin.register` everywhere mean this site.
"""
from django.contrib import admin
from django.contrib.admin.apps import AdminConfig


class KintsugiAdminSite(admin.AdminSite):
    site_header = "kintsugi"
    site_title = "kintsugi admin"
    index_title = "Support lead dashboard"
    index_template = "admin/kintsugi_index.html"

    def index(self, request, extra_context=None):
        from repairs.selectors import dashboard  # apps are loaded by the time a request arrives

        return super().index(request, {"dashboard": dashboard(user=request.user), **(extra_context or {})})


class KintsugiAdminConfig(AdminConfig):
    default_site = "kintsugi_site.admin_site.KintsugiAdminSite"
