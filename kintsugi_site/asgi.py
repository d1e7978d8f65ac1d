"""The one ASGI app a production server runs (gunicorn with uvicorn workers, as `make demo` does): the
admin and the REST API through Django, and the MCP endpoint at /mcp with the same tokens. Both read their
bodies through kintsugi_site.body_limit: one size limit, and a chunked body read whole, never dropped.

The recording protocol (/api/v1/recording/…) goes to its own entrance, Django with a lean middleware stack
on threads of its own (kintsugi_site.recording_entrance), through the same body limit.

Lifespan events go to the MCP app, whose session manager needs them; Django's ASGI handler has none.
"""
import os

from django.core.asgi import get_asgi_application

from kintsugi_site.body_limit import BodyLimit
from kintsugi_site.recording_entrance import RecordingApp, is_recording

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kintsugi_site.settings.base")
# A web process: its requests' statements have a deadline (kintsugi_site.settings.deadlines).
os.environ.setdefault("KINTSUGI_PROCESS", "web")
django_app = BodyLimit(get_asgi_application(), django=True)  # sets Django up before anything imports models


def _mcp_app():
    from django.conf import settings

    from kintsugi_site.mcp_server import build_app

    public = [h for h in settings.ALLOWED_HOSTS if h and h != "*"]
    origins = list(getattr(settings, "CSRF_TRUSTED_ORIGINS", []))
    return build_app(host=settings.KINTSUGI_WEB_HOST, port=settings.KINTSUGI_WEB_PORT,
                     extra_hosts=public + [f"{h}:{settings.KINTSUGI_WEB_PORT}" for h in public],
                     extra_origins=origins)


mcp_app = _mcp_app()
recording_app = BodyLimit(RecordingApp(), django=True)


async def application(scope, receive, send):
    if scope["type"] == "lifespan":
        return await mcp_app(scope, receive, send)
    if scope["type"] == "http" and (scope["path"] == "/mcp" or scope["path"].startswith("/mcp/")):
        return await mcp_app(scope, receive, send)
    if scope["type"] == "http" and is_recording(scope["path"]):
        return await recording_app(scope, receive, send)
    return await django_app(scope, receive, send)
