"""The WSGI app: the admin and the REST API through Django; the recording protocol through its own lean
middleware stack (kintsugi_site.recording_entrance), as under ASGI."""
import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kintsugi_site.settings.base")
# A web process: its requests' statements have a deadline (kintsugi_site.settings.deadlines).
os.environ.setdefault("KINTSUGI_PROCESS", "web")
django_application = get_wsgi_application()  # sets Django up before the entrance loads its middleware

from kintsugi_site.recording_entrance import LeanHandler, wsgi_dispatch  # noqa: E402

application = wsgi_dispatch(django_application, LeanHandler())
