"""gunicorn's settings taken from kintsugi's environment (`gunicorn -c kintsugi_site/gunicorn_conf.py`, as
`make demo` and the README's production command run it): the trusted proxies (KINTSUGI_TRUSTED_PROXIES,
empty by default) instead of gunicorn's and uvicorn's default of believing 127.0.0.1's X-Forwarded-For."""
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kintsugi_site.client_ip import trusted_proxies  # noqa: E402

forwarded_allow_ips = ",".join(trusted_proxies(os.environ.get("KINTSUGI_TRUSTED_PROXIES", "")))
