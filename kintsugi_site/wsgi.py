import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kintsugi_site.settings.base")
# A web process: its requests' statements have a deadline (kintsugi_site.settings.deadlines).
os.environ.setdefault("KINTSUGI_PROCESS", "web")
application = get_wsgi_application()
