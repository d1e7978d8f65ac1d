"""`manage.py screenshots` builds a desk and photographs the screens (kintsugi_site.screens). A module of
its own: the command runs Playwright itself, which cannot start while another module's browser runs."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
from django.core.management import call_command

from kintsugi_site import screens

pytestmark = [pytest.mark.browser]


@pytest.mark.django_db(transaction=True)
def test_the_screenshots_command_writes_the_quick_screens(tmp_path):
    """Quick mode into a temporary directory; with KINTSUGI_SCREENSHOTS=docs/screenshots, every screenshot
    there (how the documentation's pictures are made without the demo's services running)."""
    full = os.environ.get("KINTSUGI_SCREENSHOTS")
    out = Path(full) if full else tmp_path
    call_command("screenshots", *([] if full else ["--quick"]), "--out", str(out))
    wanted = [s.shot for s in screens.SCREENS if s.shot and (full or s.quick)]
    wanted += [f"{s.shot}-phone" for s in screens.SCREENS if s.shot and s.quick and full]
    assert all((out / f"{name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for name in wanted)
    if not full:
        assert sorted(p.name for p in out.glob("*.png")) == sorted(f"{name}.png" for name in wanted)
