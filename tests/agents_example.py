"""A team's own agents, loaded through KINTSUGI_AGENT_MODULES in the tests."""
from provenance.agents import agent


@agent("faq_writer")
def faq_writer(rec, payload: dict) -> dict:
    rec.set(f"faq/{payload['topic']}", payload["answer"], valid_from=payload.get("valid_from"),
            observed_at=payload.get("observed_at"))
    rec.handoff("faq_reader", {"topic": payload["topic"]})
    return {"topic": payload["topic"]}


@agent("faq_reader")
def faq_reader(rec, payload: dict) -> dict:
    answer = rec.get(f"faq/{payload['topic']}")
    return {"has_answer": answer is not None}
