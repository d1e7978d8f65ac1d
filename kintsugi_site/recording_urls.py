"""The routes served by the recording entrance (kintsugi_site.recording_entrance): the recording protocol's
own, under the names and paths the whole API gives them (kintsugi_site.api.urls), and nothing else."""
from django.urls import include, path, re_path

from kintsugi_site.api import views
from kintsugi_site.api.urls import recording_urlpatterns

urlpatterns = [
    path("api/v1/", include((recording_urlpatterns + [
        re_path(r"^[\s\S]*$", views.NotFoundView.as_view(), name="not-found")], "api"))),
]
