"""What a person may do with an incident, in one place (Incident.may_retry / may_close): the services
refuse exactly what the admin does not offer."""
import pytest

from repairs.models import Incident

S = Incident.Status
EXPECTED = {  # status: (may retry, may close)
    S.OPEN: (False, True), S.REPAIRING: (False, False), S.REPAIRED: (False, True),
    S.FAILED: (True, True), S.BLOCKED: (True, True), S.CLOSED: (False, False), S.NEEDS_ATTENTION: (True, True),
}


def test_every_status_has_its_rule():
    assert set(EXPECTED) == set(S)


@pytest.mark.parametrize("status", list(S))
def test_retry_and_close_by_status(status):
    incident = Incident(status=status)
    assert (incident.may_retry(), incident.may_close()) == EXPECTED[status]
