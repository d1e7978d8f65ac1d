"""`manage.py screenshots`: build a desk and photograph the lead's, the reviewer's and the auditor's
screens (kintsugi_site.screens) into docs/screenshots, in Debian's chromium through Playwright.

    python manage.py screenshots                       # every screenshot, 1440 px, and phone shots at 390 px
    python manage.py screenshots --quick --out /tmp/x  # three screens, for a smoke run

The desk is recorded in the configured database and graph (two workspaces named screens-<tag>) and
served by a server in this process; nothing is sent (no worker runs). A screen that scrolls sideways or
whose controls overlap is reported, and the command exits 1.
"""
from __future__ import annotations

import os
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from kintsugi_site import screens

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run"]
DOCS = Path(__file__).resolve().parents[3] / "docs" / "screenshots"


class Command(BaseCommand):
    help = "Build a desk and write docs/screenshots/*.png of every lead, reviewer and auditor screen."

    def add_arguments(self, parser):
        parser.add_argument("--out", default=str(DOCS), help="where the PNGs go (default docs/screenshots)")
        parser.add_argument("--quick", action="store_true", help="only the quick screens, desktop only")

    def handle(self, *args, out: str, quick: bool, **options):
        if not Path(CHROMIUM).exists():
            raise CommandError(f"{CHROMIUM} is missing: install Debian's chromium (make system-deps)")
        target = Path(out)
        target.mkdir(parents=True, exist_ok=True)
        desk = screens.build_desk()
        self.stdout.write(f"desk built: incident #{desk.incident.pk} in {desk.workspace.name}")
        wanted = [s for s in screens.SCREENS if s.shot and (s.quick or not quick)]
        server = _serve()
        try:
            written, found = _photograph(server, desk, wanted, target, phone=not quick)
        finally:
            server.terminate()
        for path in written:
            self.stdout.write(f"wrote {path}")
        if found:
            raise CommandError("screens that do not fit: " + "; ".join(found))


def _serve():
    """This process's admin on a free loopback port (static files included), as the browser tests' server.
    The pages name the static files by their plain paths, which the server finds in the apps: under the
    deployment's settings they would name collectstatic's hashed copies, which this server does not serve
    (the pages came out unstyled)."""
    from django.contrib.staticfiles.handlers import StaticFilesHandler
    from django.test.testcases import LiveServerThread
    from django.test.utils import override_settings

    plain = {**settings.STORAGES, "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"}}
    override_settings(STORAGES=plain).enable()  # for the rest of this command's process
    server = LiveServerThread("127.0.0.1", StaticFilesHandler, port=0)
    server.daemon = True
    server.start()
    server.is_ready.wait()
    if server.error:
        raise server.error
    return server


def _photograph(server, desk, wanted, target: Path, *, phone: bool) -> tuple[list[Path], list[str]]:
    from playwright.sync_api import sync_playwright

    base = f"http://127.0.0.1:{server.port}"
    written, found = [], []
    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"  # the server's threads read the ORM beside Playwright's loop
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS, headless=True)
            sizes = [("", screens.VIEWPORTS["desktop"])] + ([("-phone", screens.VIEWPORTS["phone"])] if phone else [])
            for suffix, viewport in sizes:
                pages = {}
                for screen in wanted:
                    if suffix and not screen.quick:
                        continue  # phone shots of the first screens only
                    if screen.role not in pages:
                        pages[screen.role] = screens.sign_in(browser, base, desk.people[screen.role], viewport,
                                                             sidebar=False)
                    page = pages[screen.role]
                    screens.open_screen(page, screen, desk)
                    found += [f"{screen.shot}{suffix}: {p}" for p in screens.problems(page, screen)]
                    path = target / f"{screen.shot}{suffix}.png"
                    page.screenshot(path=path, full_page=True)
                    written.append(path)
                for page in pages.values():
                    page.context.close()
            browser.close()
    finally:
        if previous is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous
    return written, found
