"""`manage.py check --deploy`: the audit record fails closed, so a deployment without a usable signing
key is an error, not a warning (every audited change would be refused)."""
from __future__ import annotations

from django.conf import settings
from django.core.checks import Error, Tags, register


@register(Tags.security, deploy=True)
def audit_signing_key(app_configs=None, **kwargs):
    from core.audit import keys

    if not settings.KINTSUGI_AUDIT_SIGNING_KEY_REQUIRED:
        return [Error("KINTSUGI_AUDIT_SIGNING_KEY_REQUIRED is off: a missing audit signing key would be generated "
                      "instead of refusing audited writes", hint="use kintsugi_site.settings.production",
                      id="kintsugi.E002")]
    problem = keys.signer_problem()
    if problem:
        return [Error(f"the audit signing key is not usable: {problem}",
                      hint="install the Ed25519 key at KINTSUGI_AUDIT_SIGNING_KEY, readable by the app only",
                      id="kintsugi.E001")]
    return []
