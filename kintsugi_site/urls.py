from django.contrib import admin
from django.urls import include, path

from kintsugi_site import health, metrics

urlpatterns = [
    path("healthz", health.healthz, name="healthz"),
    path("readyz", health.readyz, name="readyz"),
    path("metrics", metrics.metrics, name="metrics"),
    path("admin/", admin.site.urls),
    path("api/v1/", include("kintsugi_site.api.urls")),
]

handler403 = "kintsugi_site.refusal_page.permission_denied"
