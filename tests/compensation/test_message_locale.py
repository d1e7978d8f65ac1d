"""Money in a customer's message is written the customer's way: the ticket's locale, else the workspace's
(set by its Support lead, audited), else KINTSUGI_MESSAGE_LOCALE; stored amounts stay integer cents, and
formatting never raises nor loses the amount for any currency and locale babel knows."""
from __future__ import annotations

from decimal import ROUND_HALF_UP, Context, Decimal

import pytest
from babel.localedata import locale_identifiers
from babel.numbers import get_currency_precision, list_currencies
from hypothesis import given, settings as hsettings, strategies as st

from compensation.drafting import templates
from compensation.drafting.drafts import draft_planned, planned_items, _effect_dict
from compensation.drafting.validation import text_problems
from compensation.models import CompensationItem
from core.money import amount_of, format_money
from provenance import validation
from provenance.access import onboarding, tenancy
from provenance.models import Ticket

K = CompensationItem.Kind
LOCALES, CURRENCIES = sorted(locale_identifiers()), sorted(list_currencies())
WIDE = Context(prec=80)


@pytest.mark.parametrize("cents, currency, locale, text", [
    (123450, "EUR", "de_DE", "1.234,50\xa0€"),
    (123450, "JPY", "en_US", "¥1,235"),  # no minor units: rounded half up, as people round money
    (123450, "JPY", "ja_JP", "￥1,235"),
    (123450, "USD", "fr_FR", "1\u202f234,50\xa0$US"),
    (7500, "USD", "en_US", "$75.00"),  # the reviewers' pages keep en_US
    (7500, "USD", "xx_NOWHERE", "$75.00"),  # a locale babel does not know writes en_US, never fails a message
])
def test_money_is_written_in_the_currency_and_locale(cents, currency, locale, text):
    assert format_money(cents, currency, locale=locale) == text


@hsettings(max_examples=400, deadline=None)
@given(cents=st.integers(min_value=-10**15, max_value=10**15) | st.integers(),
       currency=st.sampled_from(CURRENCIES), locale=st.sampled_from(LOCALES))
def test_formatting_never_raises_and_never_loses_the_amount(cents, currency, locale):
    text = format_money(cents, currency, locale=locale)
    read = amount_of(text, currency, locale)  # babel's own parse of what a customer reads
    exact = Decimal(cents).scaleb(-2, context=WIDE)
    digits = get_currency_precision(currency)
    assert read == exact.quantize(Decimal(1).scaleb(-digits), rounding=ROUND_HALF_UP, context=WIDE)
    if digits >= 2 or cents % 10 ** (2 - digits) == 0:
        assert read == exact  # every amount the currency can hold comes back whole


def test_amounts_in_a_locales_format_are_checked_by_that_locale():
    facts = {"currency": "EUR", "paid_cents": 150000, "locale": "de_DE", "ticket_text": ""}
    assert text_problems("Sie behalten 1.234,50\xa0€.", field="body", facts=facts) == []
    assert text_problems("Wir zahlen 1.600,00 €.", field="body", facts=facts) == [
        "body: mentions 1.600,00 €, more than the €1,500.00 the customer paid"]
    # Read as en_US (the old reading: "1.234,50" as 1.2345) the same text hid nothing; now it is an alarm.
    assert text_problems("Wir zahlen 1.600,00 €.", field="body", facts={**facts, "locale": "en_US"})


@pytest.mark.django_db
def test_the_workspace_and_the_ticket_choose_how_money_is_written(canonical):
    incident, people = canonical.incident, canonical.people
    ws = incident.workspace
    with pytest.raises(templates.TemplateRefused):
        templates.set_locale(workspace=ws, locale="de_DE", actor=people.reviewer, reason="x", via="admin")
    with pytest.raises(ValueError, match="unknown locale"):
        templates.set_locale(workspace=ws, locale="xx_NOWHERE", actor=people.lead, reason="x", via="admin")
    assert templates.set_locale(workspace=ws, locale="de-DE", actor=people.lead, reason="our customers", via="admin") == "de_DE"
    event = ws.audit_events.filter(action="message_template.changed").latest("seq")
    assert event.data == {"before": {"locale": ""}, "after": {"locale": "de_DE"}} and event.reason == "our customers"
    onboarding.put_ticket(workspace=ws, ticket_id="t05", fields={"locale": "fr-FR"}, actor=None,
                          reason="the customer writes French", via=tenancy.OPERATOR_VIA)
    assert Ticket.objects.get(workspace=ws, ticket_id="t05").locale == "fr_FR"
    with pytest.raises(validation.InvalidInput):
        onboarding.put_ticket(workspace=ws, ticket_id="t05", fields={"locale": "klingon"}, actor=None,
                              reason="x", via=tenancy.OPERATOR_VIA)
    # What drafting would write now (a what-if: nothing saved).
    _, planned, _ = planned_items(incident=incident, effects=[_effect_dict(e) for e in incident.effects.all()], lock=False)
    drafted = {(d.planned.kind, d.planned.ticket): d for d in draft_planned(planned=planned, incident=incident)}
    t04 = drafted[(K.CORRECTION_EMAIL, "t04")]
    assert "110,00\xa0$" in t04.draft["body"] and "55,00\xa0$" in t04.draft["body"] and t04.problems == []
    t05 = drafted[(K.CORRECTION_EMAIL, "t05")]
    assert t05.facts["locale"] == "fr_FR" and "75,00\xa0$US" in t05.draft["body"] and t05.problems == []
    reversal = drafted[(K.REFUND_REVERSAL, "t04")]
    assert reversal.draft["amount_cents"] == 5500  # stored money stays integer cents
    # The drafted items of the incident keep the locale they were written in.
    assert incident.compensation_items.get(kind=K.CORRECTION_EMAIL, ticket_id="t04").facts["locale"] == "en_US"


@pytest.mark.django_db
def test_the_lead_sets_the_locale_on_the_template_page(canonical, client):
    ws, people = canonical.incident.workspace, canonical.people
    url = f"/admin/compensation/messagetemplate/workspace/{ws.pk}/"
    client.force_login(people.lead)
    page = client.get(url).content.decode()
    assert 'id="locale-form"' in page and "€1,234.50" in page  # the deployment's en_US, shown as a sample
    client.post(url, {"step": "locale", "locale": "de_DE", "reason": "German customers"})
    ws.refresh_from_db()
    assert ws.message_locale == "de_DE" and "1.234,50\xa0€" in client.get(url).content.decode()
    client.force_login(people.reviewer)  # a reviewer may not: refused, nothing changes
    client.post(url, {"step": "locale", "locale": "fr_FR", "reason": "x"})
    ws.refresh_from_db()
    assert ws.message_locale == "de_DE"
