"""Schemathesis against the served OpenAPI schema: generated requests to every operation (a bounded
number of examples) get no server error and no response that breaks the schema."""
import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from hypothesis import HealthCheck, settings

from tests.api.conftest import client_for

pytestmark = pytest.mark.django_db

MAX_EXAMPLES = 12

# Loaded from the app itself at collection (the schema view needs no database). Lazy loading from a
# fixture (schemathesis.pytest.from_fixture) fails on pytest 9 in schemathesis 4.32 (Function._nodeid).
schema = schemathesis.openapi.from_wsgi("/api/v1/schema/", get_wsgi_application())


@pytest.fixture
def token(make_user, canonical_desk):
    ws, source = canonical_desk("api-fuzz")
    return make_user("fuzzer", roles=["Support lead"], workspaces=[ws]).auth_token.key


@pytest.fixture
def keep_test_connection():
    # The WSGI handler closes the database connection when a request finishes, which would close the
    # test's transaction under it; Django's own test client disconnects the same receiver.
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


@schema.parametrize()
@settings(max_examples=MAX_EXAMPLES, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
def test_every_operation_keeps_to_the_schema(case, token, keep_test_connection):
    case.call_and_validate(headers={"Authorization": f"Token {token}"})


def test_the_schema_documents_the_error_shape():
    doc = client_for().get("/api/v1/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()
    assert doc["components"]["schemas"]["Error"]["required"] == ["error"]
    flag = doc["paths"]["/api/v1/sources/{id}/flag/"]["post"]["responses"]
    assert {"201", "400", "401", "403", "404", "409", "429"} <= set(flag)
