"""A desk where every ticket is decided by a notice of its own: the notice reader ingests the ticket's
page and refunds when the page says so. Flagging each page opens as many incidents in one workspace as
there are tickets. Loaded in workers through KINTSUGI_AGENT_MODULES by the tests that record it."""
from provenance.agents import agent


@agent("notice_reader")
def notice_reader(rec, payload: dict) -> dict:
    page = rec.ingest(payload["source"]) or ""
    refund = "refund in full" in page
    rec.set(f"{payload['ticket']}/notice", page.strip() or "none")
    if refund:
        rec.effect("refund", amount=1000, ticket=payload["ticket"])
    return {"refund": refund}
