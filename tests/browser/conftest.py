"""Playwright (sync API) driving Debian's chromium against pytest-django's live server.

Playwright's sync API keeps an event loop running in the test thread, so Django's ORM calls made by the
test itself need DJANGO_ALLOW_ASYNC_UNSAFE: it is set for this module's browser only and restored after.
Screenshots go to $KINTSUGI_SCREENSHOTS (e.g. docs/screenshots) when set, else to a temporary directory.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run"]


@pytest.fixture(scope="module")
def chromium():
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: install Debian's chromium (make system-deps)")
    from playwright.sync_api import sync_playwright

    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    playwright = sync_playwright().start()
    browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS, headless=True)
    try:
        yield browser
    finally:
        browser.close()
        playwright.stop()
        if previous is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous


@pytest.fixture
def screenshots(tmp_path) -> Path:
    target = Path(os.environ.get("KINTSUGI_SCREENSHOTS") or tmp_path / "screenshots")
    target.mkdir(parents=True, exist_ok=True)
    return target


@pytest.fixture
def new_page(chromium, live_server):
    """A fresh browser context (its own cookies) per person, closed at the end of the test."""
    contexts = []

    def make(username: str, password: str):
        context = chromium.new_context(viewport={"width": 1400, "height": 900}, accept_downloads=True,
                                       base_url=live_server.url)
        context.set_default_timeout(15_000)
        # The admin's navigation sidebar closed: the pages (and the screenshots) get the full width.
        context.add_init_script("localStorage.setItem('django.admin.navSidebarIsOpen', 'false')")
        contexts.append(context)
        page = context.new_page()
        page.goto("/admin/login/?next=/admin/")
        page.fill("#id_username", username)
        page.fill("#id_password", password)
        page.click("input[type=submit]")
        # Each role lands on its own door (a Reviewer on the cases): any admin page but the login's.
        page.wait_for_url(lambda url: "/admin/" in url and "/login/" not in url)
        return page

    yield make
    for context in contexts:
        context.close()
