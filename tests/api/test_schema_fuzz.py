"""Schemathesis against the served OpenAPI schema: generated requests to every operation (a bounded
number of examples) get no server error and no response that breaks the schema: the default checks, with
response_schema_conformance named so that it cannot be dropped unnoticed, against a workspace with a
repaired incident and decided and undecided review items (so nullable fields meet both cases)."""
import pytest
import schemathesis
from schemathesis.checks import not_a_server_error, response_schema_conformance
from django.core.signals import request_finished, request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from hypothesis import HealthCheck, settings

from tests.helpers import api_key, client_for

pytestmark = pytest.mark.django_db

MAX_EXAMPLES = 12

# Loaded from the app itself at collection (the schema view needs no database). Lazy loading from a
# fixture (schemathesis.pytest.from_fixture) fails on pytest 9 in schemathesis 4.32 (Function._nodeid).
schema = schemathesis.openapi.from_wsgi("/api/v1/schema/", get_wsgi_application())
# Every door refuses a NUL anywhere in a request with 400 (tests/edge/test_nul_anywhere.py), which the
# schema's string types cannot say: strings with one are not the valid data the positive checks expect.
schema.config.generation.update(allow_x00=False)


@pytest.fixture(scope="module")
def fuzz_workspace(django_db_setup, django_db_blocker):
    """One repaired incident for the module, inside a module-wide transaction that each test's own nests
    in and that is rolled back at the end (the WSGI app runs on this thread's connection)."""
    from django.db import transaction

    from compensation.review.services import reject_item
    from tests.helpers import make_people, repaired_incident

    with django_db_blocker.unblock():
        atomic = transaction.atomic()
        atomic.__enter__()
        try:
            people = make_people()
            incident = repaired_incident(flagger=people.lead, workspace="api-fuzz")
            item = incident.compensation_items.filter(status="pending").order_by("pk").first()
            reject_item(item=item, actor=people.reviewer, reason="decided, so decided_by is a name", via="api")
            yield incident.workspace
        finally:
            transaction.set_rollback(True)
            atomic.__exit__(None, None, None)


@pytest.fixture
def token(make_user, fuzz_workspace):
    return api_key(make_user("fuzzer", roles=["Support lead"], workspaces=[fuzz_workspace]))


@pytest.fixture
def keep_test_connection():
    # The WSGI handler closes the database connection when a request finishes, which would close the
    # test's transaction under it; Django's own test client disconnects the same receiver.
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


# Providers' webhooks are left out: their only valid request is one signed with a secret, which no
# generator makes, so every generated body is rightly refused (tests/compensation/test_delivery_webhooks.py).
@schema.exclude(path_regex="^/api/v1/webhooks/").parametrize()
@settings(max_examples=MAX_EXAMPLES, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
def test_every_operation_keeps_to_the_schema(case, token, keep_test_connection):
    case.call_and_validate(headers={"Authorization": f"Token {token}"},
                           additional_checks=[not_a_server_error, response_schema_conformance])


def test_the_schema_documents_the_error_shape():
    doc = client_for().get("/api/v1/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()
    assert doc["components"]["schemas"]["Error"]["required"] == ["error"]
    flag = doc["paths"]["/api/v1/sources/{id}/flag/"]["post"]["responses"]
    assert {"201", "400", "401", "403", "404", "409", "429"} <= set(flag)


def test_a_patch_body_is_documented_with_what_the_update_requires():
    """PATCH on sources and tickets is PUT's update (keyed by the id in the body, with a reason). Documented
    as drf-spectacular's partial body, an empty PATCH was schema-valid and answered 400: the case above
    found it once its examples reached that operation."""
    doc = client_for().get("/api/v1/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()
    schemas = doc["components"]["schemas"]
    for path, key in (("/api/v1/workspaces/{id}/sources/", "source_id"), ("/api/v1/workspaces/{id}/tickets/", "ticket_id")):
        ops = doc["paths"][path]
        assert ops["patch"]["requestBody"] == ops["put"]["requestBody"]
        ref = ops["patch"]["requestBody"]["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[1]
        assert {key, "reason"} <= set(schemas[ref]["required"])
    assert not [name for name in schemas if name.startswith("Patched")]
