import uvicorn
from django.conf import settings

from kintsugi_site.mcp_server import _is_loopback, build_app
from core.commands import KintsugiCommand


class Command(KintsugiCommand):
    help = ("Serve the MCP endpoint (streamable HTTP at /mcp) for agents: blast_radius, explain_path, "
            "flag_source, incident_status. Bearer-token authenticated (the REST API's tokens).")

    def add_arguments(self, parser):
        parser.add_argument("--host", default=settings.KINTSUGI_MCP_HOST,
                            help="bind address (default %(default)s: loopback only)")
        parser.add_argument("--port", type=int, default=settings.KINTSUGI_MCP_PORT)
        parser.add_argument("--allow-host", action="append", default=[], metavar="HOST:PORT",
                            help="also accept this Host header (e.g. behind a reverse proxy); repeatable")
        parser.add_argument("--allow-origin", action="append", default=[], metavar="ORIGIN",
                            help="also accept this Origin header (e.g. https://tools.example); repeatable")

    def handle(self, *args, **o):
        if not _is_loopback(o["host"]):
            self.stderr.write(f"warning: serving MCP on {o['host']}, not loopback: put TLS in front of it")
        app = build_app(host=o["host"], port=o["port"], extra_hosts=o["allow_host"], extra_origins=o["allow_origin"])
        self.stdout.write(f"kintsugi MCP endpoint on http://{o['host']}:{o['port']}/mcp")
        self.stdout.flush()
        # The trusted proxies as the web server has them (kintsugi_site.client_ip): none by default, where
        # uvicorn on its own believes loopback's X-Forwarded-For.
        proxies = settings.KINTSUGI_TRUSTED_PROXIES
        uvicorn.run(app, host=o["host"], port=o["port"], log_level="warning", access_log=False,
                    proxy_headers=bool(proxies), forwarded_allow_ips=proxies or None)
