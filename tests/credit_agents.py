"""A team's own desk with an effect kind kintsugi does not know: a research agent reads a promotions page
into memory, a goodwill agent grants `store_credit` (a kind with no registration) by the rule it reads
and tells the customer by email. Imported by the tests that record it."""
from provenance.agents import agent

PROMO_PAGE = "promo/goodwill-credit"


@agent("promo_research")
def promo_research(rec, payload: dict) -> dict:
    content = rec.ingest(payload["source"])
    if content is None:
        return {"source": payload["source"], "keys": []}
    rec.set("goodwill_rule", content.strip())
    return {"source": payload["source"], "keys": ["goodwill_rule"]}


@agent("goodwill")
def goodwill(rec, payload: dict) -> dict:
    rule = rec.get("goodwill_rule") or ""
    credit = 2000 if "credit everyone" in rule else 0
    if credit:
        rec.effect("store_credit", amount=credit, ticket=payload["ticket"], currency="USD",
                   account=payload["email"])
        rec.effect("email", ticket=payload["ticket"], currency="USD", to=payload["email"],
                   subject=f"Store credit for ticket {payload['ticket']}",
                   body=f"Hello, we added 20.00 USD of store credit to your account for ticket {payload['ticket']}.")
    return {"credit_cents": credit}
