"""The case list as a work queue: search, filters, pages and progress computed by the database.

A case is one ticket of one incident. Its figures (items, pending items, money at stake, state) are one
GROUP BY over the incident's items, sorted and cut in SQL; only the page's cases are then built in full
(compensation.cases), so a page of 20,000 cases reads its 50 cases' items, not every item.

Paging is by key ("after" the last case shown: state rank, incident, ticket), which costs the same on the
last page as on the first; `page=N` is kept for links people share and reads with an OFFSET.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from django.db.models import Case as When_, Count, Exists, IntegerField, Max, OuterRef, Q, Sum, Value, When
from django.db.models.functions import Coalesce

from compensation import cases as case_build, delivery_selectors
from compensation.delivery_models import DeliveryState
from compensation.models import CompensationItem
from core.money import format_money, parse_money
from provenance import tenancy

K, St = CompensationItem.Kind, CompensationItem.Status
PAGE_SIZE = 50
STATES = {"needs_decision": 0, "waiting": 1, "done": 2, "decided": None}  # decided: waiting or done
STATE_WORDS = {"needs_decision": "needs a decision", "waiting": "approved, waiting to go out", "done": "done",
               "decided": "decided"}
OUTCOMES = ("approved", "executed", "rejected", "cancelled")
GONE = (St.REJECTED, St.CANCELLED)
DELIVERY_FILTERS = {delivery_selectors.FAILED: sorted(DeliveryState.needs_person())}
DELIVERY_WORDS = {delivery_selectors.FAILED: "delivery failed: a person decides"}


class BadFilter(ValueError):
    """A filter value that is not one (an unknown kind, an amount that is not money, a bad cursor)."""


@dataclass
class Filters:
    q: str = ""
    kind: str = ""
    outcome: str = ""
    state: str = ""  # one of STATES, "" for every state
    min_cents: int | None = None
    max_cents: int | None = None
    assignee: str = ""  # "me", "none" (unassigned), or a username; see compensation.assignments
    delivery: str = ""  # "failed": cases with a delivery no retry will change (compensation.delivery_selectors)

    @classmethod
    def from_query(cls, params) -> "Filters":
        """Filters from a request's GET/POST; a value that is not one raises BadFilter (never guessed)."""
        state = params.get("state") or ""
        f = cls(q=(params.get("q") or "").strip()[:100], kind=params.get("kind") or "",
                outcome=params.get("outcome") or "", state="" if state == "all" else state,
                assignee=(params.get("assignee") or "").strip()[:150], delivery=params.get("delivery") or "")
        if f.delivery and f.delivery not in DELIVERY_FILTERS:
            raise BadFilter(f"unknown delivery filter {f.delivery!r}")
        if f.kind and f.kind not in K.values:
            raise BadFilter(f"unknown kind {f.kind!r}")
        if f.outcome and f.outcome not in OUTCOMES:
            raise BadFilter(f"unknown outcome {f.outcome!r}")
        if f.state and f.state not in STATES:
            raise BadFilter(f"unknown state {f.state!r}")
        for name in ("min", "max"):
            raw = (params.get(name) or "").strip()
            if raw:
                cents = parse_money(raw)
                if cents is None:
                    raise BadFilter(f"{name} {raw!r} is not an amount")
                setattr(f, f"{name}_cents", cents)
        return f

    def query(self) -> dict:
        """The filters as URL parameters (empty ones left out), for links that keep them."""
        out = {"q": self.q, "kind": self.kind, "outcome": self.outcome, "state": self.state or "all",
               "min": f"{self.min_cents / 100:.2f}" if self.min_cents is not None else "",
               "max": f"{self.max_cents / 100:.2f}" if self.max_cents is not None else "", "assignee": self.assignee,
               "delivery": self.delivery}
        return {k: v for k, v in out.items() if v}


def _items(*, user, incident, filters: Filters | None = None):
    qs = tenancy.scoped(CompensationItem.objects.all(), user=user, path="incident__workspace")
    if incident is not None:
        return qs.filter(incident=incident)
    if filters is not None and filters.delivery:
        # A failed delivery's incident may have nothing left to decide: its incidents come from the
        # (indexed, small) failed deliveries, not from the newest incidents with pending items.
        return qs.filter(incident_id__in=delivery_selectors.failed_incident_ids(user=user))
    newest = (qs.filter(status=St.PENDING).order_by("-incident_id").values_list("incident_id", flat=True)
              .distinct()[:case_build.INCIDENT_LIMIT])
    return qs.filter(incident_id__in=list(newest))


def _same_case(qs):
    return qs.filter(incident_id=OuterRef("incident_id"), ticket_id=OuterRef("ticket_id"))


def _text_match(q: str) -> Q:
    match = Q(ticket_id__icontains=q) | Q(customer_email__icontains=q) | Q(facts__customer__icontains=q)
    cents = parse_money(q) if any(ch.isdigit() for ch in q) else None
    if cents is not None:
        match |= Q(amount_cents=cents)
    return match


def grouped(*, user, incident, filters: Filters, actor=None):
    """One row per case matching `filters`: incident_id, ticket_id, items, pending, approved, stake
    (cents), rank (0 needs a decision, 1 approved waiting, 2 done), ordered as the desk works."""
    from compensation.assignments import assignee_filter

    base = CompensationItem.objects.all()
    qs = _items(user=user, incident=incident, filters=filters)
    if filters.delivery:
        qs = qs.filter(Exists(_same_case(base).filter(delivery__state__in=DELIVERY_FILTERS[filters.delivery])))
    if filters.q:
        qs = qs.filter(Exists(_same_case(base).filter(_text_match(filters.q))))
    if filters.kind:
        qs = qs.filter(Exists(_same_case(base).filter(kind=filters.kind)))
    if filters.outcome:
        qs = qs.filter(Exists(_same_case(base).filter(status=filters.outcome)))
    if filters.assignee:
        qs = qs.filter(assignee_filter(filters.assignee, actor=actor))
    rows = (qs.values("incident_id", "ticket_id")
            # Counting ticket_id, not id: every column read is in the compensation_case_key index, so the
            # grouping is an index-only scan instead of a pass over the wide item rows.
            .annotate(items=Count("ticket_id"), pending=Count("ticket_id", filter=Q(status=St.PENDING)),
                      approved=Count("ticket_id", filter=Q(status=St.APPROVED)),
                      stake=Coalesce(Sum("amount_cents", filter=Q(kind__in=CompensationItem.MONEY_KINDS)
                                         & ~Q(status__in=GONE)), Value(0)))
            .annotate(rank=When_(When(pending__gt=0, then=Value(0)), When(approved__gt=0, then=Value(1)),
                                 default=Value(2), output_field=IntegerField())))
    if filters.state == "decided":
        rows = rows.filter(rank__gt=0)
    elif filters.state:
        rows = rows.filter(rank=STATES[filters.state])
    if filters.min_cents is not None:
        rows = rows.filter(stake__gte=filters.min_cents)
    if filters.max_cents is not None:
        rows = rows.filter(stake__lte=filters.max_cents)
    return rows.order_by("rank", "-incident_id", "ticket_id")


def cursor_of(row) -> str:
    return f"{row['rank']}.{row['incident_id']}.{row['ticket_id']}"


def _after(rows, cursor: str):
    rank, _, rest = cursor.partition(".")
    incident_id, _, ticket = rest.partition(".")
    if not (rank.isdigit() and incident_id.isdigit() and ticket):
        raise BadFilter(f"bad cursor {cursor!r}")
    rank, incident_id = int(rank), int(incident_id)
    return rows.filter(Q(rank__gt=rank) | Q(rank=rank, incident_id__lt=incident_id)
                       | Q(rank=rank, incident_id=incident_id, ticket_id__gt=ticket))


@dataclass
class CasePage:
    cases: list = field(default_factory=list)
    number: int = 1
    next_cursor: str = ""
    has_next: bool = False


def page(*, user, incident, filters: Filters, after: str = "", number: int = 1, actor=None,
         size: int | None = None) -> CasePage:
    """One page of cases: after the key `after` when given (keyset), else page `number` (offset)."""
    size = size or PAGE_SIZE
    rows = grouped(user=user, incident=incident, filters=filters, actor=actor)
    window = _after(rows, after) if after else rows[(max(number, 1) - 1) * size:]
    found = list(window[: size + 1])
    has_next, found = len(found) > size, found[:size]
    return CasePage(cases=build(found), number=number, has_next=has_next,
                    next_cursor=cursor_of(found[-1]) if has_next else "")


def neighbours(*, user, incident, key: tuple[int, str]) -> tuple[object | None, object | None, int]:
    """The cases needing a decision before and after `key` in desk order (after: wrapping to the first
    other one), and how many need one: three small queries whatever the size of the desk."""
    rows = grouped(user=user, incident=incident, filters=Filters(state="needs_decision"))
    incident_id, ticket = key
    before = (rows.filter(Q(incident_id__gt=incident_id) | Q(incident_id=incident_id, ticket_id__lt=ticket))
              .order_by("rank", "incident_id", "-ticket_id").first())
    after = _after(rows, f"0.{incident_id}.{ticket}").first()
    if after is None:
        after = rows.exclude(incident_id=incident_id, ticket_id=ticket).first()
    left = rows.count()
    prev_case, next_case = (build([r])[0] if r else None for r in (before, after))
    return prev_case, next_case, left


def keys(*, user, incident, filters: Filters, actor=None, limit: int = 5000) -> list[tuple[int, str]]:
    """Every matching case's key (incident, ticket), in desk order: what "select all matching" decides."""
    rows = grouped(user=user, incident=incident, filters=filters, actor=actor)
    return [(r["incident_id"], r["ticket_id"]) for r in rows[:limit]]


def build(rows) -> list:
    """The full cases (items, sentence, ordering notes) of `rows`, in their order."""
    if not rows:
        return []
    pairs = {(r["incident_id"], r["ticket_id"]) for r in rows}
    # incident IN … AND ticket IN … (one index range per incident), then the exact pairs kept here.
    items = [i for i in CompensationItem.objects.filter(incident_id__in={p[0] for p in pairs},
                                                        ticket_id__in={p[1] for p in pairs})
             .select_related("incident", "decided_by", "delivery").defer("incident__plan", "incident__verification")
             if (i.incident_id, i.ticket_id) in pairs]
    by_key = {c.key: c for c in case_build._build(items)}
    return [by_key[(r["incident_id"], r["ticket_id"])] for r in rows if (r["incident_id"], r["ticket_id"]) in by_key]


def by_keys(*, user, keys_: list[tuple[int, str]]) -> list:
    """The cases of `keys_` that `user` may see (others are silently not there, as missing ones)."""
    if not keys_:
        return []
    rows = [{"incident_id": i, "ticket_id": t} for i, t in keys_]
    wanted = Q()
    for i, t in keys_:
        wanted |= Q(incident_id=i, ticket_id=t)
    visible = set(tenancy.scoped(CompensationItem.objects.filter(wanted), user=user, path="incident__workspace")
                  .values_list("incident_id", "ticket_id").distinct())
    return build([r for r in rows if (r["incident_id"], r["ticket_id"]) in visible])


def matching_totals(*, user, incident, filters: Filters, actor=None) -> dict:
    """What the matching cases add up to: cases, those needing a decision, items, pending items and the
    money at stake per currency (every page, not only the one shown), in one aggregate over the cases."""
    rows = grouped(user=user, incident=incident, filters=filters, actor=actor).annotate(currency=Max("currency"))
    currencies = sorted(set(_items(user=user, incident=incident, filters=filters).order_by().values_list("currency", flat=True).distinct()))
    sums = {f"m_{n}": Coalesce(Sum("stake", filter=Q(currency=c)), Value(0)) for n, c in enumerate(currencies)}
    found = rows.aggregate(t_cases=Count("ticket_id"), t_left=Count("ticket_id", filter=Q(rank=0)),
                           t_items=Coalesce(Sum("items"), Value(0)), t_pending=Coalesce(Sum("pending"), Value(0)),
                           **sums)
    agg = {"cases": found.pop("t_cases"), "left": found.pop("t_left"), "items": found.pop("t_items"),
           "pending_items": found.pop("t_pending"), **found}
    money = [(c, agg.pop(f"m_{n}")) for n, c in enumerate(currencies)]
    agg["money"] = [{"currency": c, "cents": cents, "text": format_money(cents, c)} for c, cents in money if cents]
    return agg


def progress(*, incident) -> dict:
    """How far the review of `incident` has come, counted from the items themselves, so every way of
    deciding (a case, a bulk confirmation, the item queue, the API, a policy) moves it."""
    items = CompensationItem.objects.filter(incident=incident)
    agg = items.aggregate(items=Count("id"), pending=Count("id", filter=Q(status=St.PENDING)),
                          cases=Count("ticket_id", distinct=True),
                          cases_pending=Count("ticket_id", distinct=True, filter=Q(status=St.PENDING)))
    agg["items_decided"] = agg["items"] - agg["pending"]
    agg["cases_decided"] = agg["cases"] - agg["cases_pending"]
    return agg
