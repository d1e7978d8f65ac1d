"""Login lockout by username and address together (django-axes, counters in the shared Redis cache),
and the per-user budget of the admin's report downloads."""
import pytest
from django.urls import reverse

pytestmark = pytest.mark.django_db

WRONG = 30


def _login(client, username, password, address="10.0.0.7"):
    response = client.post(reverse("admin:login") + "?next=/admin/", {"username": username, "password": password,
                                                                     "next": "/admin/"}, REMOTE_ADDR=address)
    return response.status_code


def test_wrong_passwords_lock_that_account_from_that_address_only(client, people, settings):
    for i in range(WRONG):
        assert _login(client, "reviewer1", f"wrong-{i}") in (200, 429)
    assert _login(client, "reviewer1", "pass-1234-kintsugi") == 429  # the right password no longer helps
    assert _login(client, "auditor1", "pass-1234-kintsugi") == 302  # another account, same address
    client.logout()
    assert _login(client, "reviewer1", "pass-1234-kintsugi", address="10.0.0.8") == 302  # same account elsewhere


def test_lockout_counters_live_in_the_shared_cache(client, people):
    from django.core.cache import cache

    for i in range(settings_limit()):
        _login(client, "reviewer1", f"wrong-{i}")
    client_redis = cache._cache.get_client(None)
    assert any(b"axes" in key for key in client_redis.scan_iter(match=cache.make_key("*")))


def settings_limit() -> int:
    from django.conf import settings

    return settings.AXES_FAILURE_LIMIT


def test_report_downloads_are_throttled_per_user(client, repaired, settings):
    settings.KINTSUGI_REPORT_DOWNLOAD_RATE = "3/min"
    url = reverse("admin:repairs_incident_report", args=[repaired.incident.pk, "json"])
    client.force_login(repaired.people.lead)
    assert [client.get(url).status_code for _ in range(3)] == [200, 200, 200]
    throttled = client.get(url)
    assert throttled.status_code == 429 and int(throttled["Retry-After"]) >= 1
    client.force_login(repaired.people.lead_reviewer)  # another user keeps a budget of their own
    assert client.get(url).status_code == 200
