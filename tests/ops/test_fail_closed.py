"""The audit record fails closed: where a signing key is required, no audited change commits without a
usable one and `check --deploy` calls it an error; verify_audit fails when rows stay unsigned too long."""
from __future__ import annotations

import io

import pytest
from django.core.checks import run_checks
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command

from core.audit import keys, trail
from provenance.access import onboarding
from provenance.models import Workspace

pytestmark = pytest.mark.django_db


@pytest.fixture
def no_key(settings, tmp_path):
    settings.KINTSUGI_AUDIT_SIGNING_KEY = str(tmp_path / "absent" / "signing-key.pem")
    settings.KINTSUGI_AUDIT_SIGNING_KEY_REQUIRED = True


def _deploy_errors() -> list[str]:
    return [m.id for m in run_checks(include_deployment_checks=True) if m.id and m.id.startswith("kintsugi.")]


def test_an_audited_change_is_refused_without_a_usable_key_and_nothing_is_kept(no_key, django_user_model):
    admin = django_user_model.objects.create_superuser("root-fc", "r@example.com", "pass-1234-kintsugi")
    with pytest.raises(ImproperlyConfigured, match="does not exist"):
        onboarding.create_workspace(name="ops-unsigned", actor=admin, reason="setup", via="cli")
    assert not Workspace.objects.filter(name="ops-unsigned").exists()


def test_the_deploy_check_calls_a_missing_key_an_error(no_key):
    assert "kintsugi.E001" in _deploy_errors()


def test_the_deploy_check_is_clean_with_a_usable_required_key(settings):
    keys.signing_key()  # the session's key exists
    settings.KINTSUGI_AUDIT_SIGNING_KEY_REQUIRED = True
    assert _deploy_errors() == []
    settings.KINTSUGI_AUDIT_SIGNING_KEY_REQUIRED = False  # generated on demand: not fit for a deployment
    assert _deploy_errors() == ["kintsugi.E002"]


def test_verify_audit_fails_when_rows_stay_unsigned_past_the_allowed_delay(settings):
    trail.record(action="probe", subject_type="test", subject_id=1, via="cli", reason="r", workspace=None)
    # Inside this test's transaction the row is never signed (signing follows the commit).
    call_command("verify_audit", stdout=io.StringIO(), stderr=io.StringIO())  # young: within the delay
    settings.KINTSUGI_AUDIT_UNSIGNED_MAX_SECONDS = 0
    err = io.StringIO()
    with pytest.raises(SystemExit) as exit_:
        call_command("verify_audit", stdout=io.StringIO(), stderr=err)
    assert exit_.value.code == 1
