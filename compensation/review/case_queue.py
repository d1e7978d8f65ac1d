"""The case list as a work queue: search, filters, pages and progress computed by the database.

A case is one ticket of one incident. Its figures (items, pending items, money at stake, state) are one
GROUP BY over the incident's items, sorted and cut in SQL; only the page's cases are then built in full
(compensation.review.cases), so a page of 20,000 cases reads its 50 cases' items, not every item.

Paging is by key ("after" the last case shown: state rank, incident, ticket), which costs the same on the
last page as on the first; `page=N` is kept for links people share and reads with an OFFSET.

Within one incident, the cases that need a decision (the desk's default view) are paged without grouping
every case first: their tickets come in order from the pending items' index (compensation_status_queue),
the filters narrow them by uncorrelated subqueries (the text search through the trigram indexes), and
only the page's tickets are grouped. The figures every page prints (the incident's progress and what the
filters match) are one pass over the covering index compensation_case_key. Measured by `bench desk`.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from django.db.models import Case as When_, Count, Exists, IntegerField, Max, OuterRef, Q, Sum, Value, When
from django.db.models.functions import Coalesce

from compensation.drafting import kinds
from compensation.review import cases as case_build
from compensation.delivery import delivery_selectors
from compensation.delivery_models import DeliveryState
from compensation.models import CaseAssignment, CompensationItem
from core.money import format_money, parse_money
from provenance.access import tenancy

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
    assignee: str = ""  # "me", "none" (unassigned), or a username; see compensation.review.assignments
    delivery: str = ""  # "failed": cases with a delivery no retry will change (compensation.delivery.delivery_selectors)

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


def _has_item(incident, **lookups) -> Q:
    """Cases "with an item that …": within one incident an uncorrelated `ticket_id IN (…)` (computed once,
    hashed; the text search reads the trigram indexes), across incidents a correlated EXISTS."""
    match = lookups.pop("match", Q())
    if incident is not None:
        return Q(ticket_id__in=CompensationItem.objects.filter(match, incident=incident, **lookups)
                 .order_by().values("ticket_id"))
    return Q(Exists(_same_case(CompensationItem.objects.all()).filter(match, **lookups)))


def _case_match(*, incident, filters: Filters, actor) -> Q:
    """The item-level filters (delivery, text, kind, outcome, assignee) as one condition on an item row that holds
    for every item of a matching case."""
    from compensation.review.assignments import assignee_filter

    match = Q()
    if filters.delivery:
        match &= _has_item(incident, delivery__state__in=DELIVERY_FILTERS[filters.delivery])
    if filters.q:
        match &= _has_item(incident, match=_text_match(filters.q))
    if filters.kind:
        match &= _has_item(incident, kind=filters.kind)
    if filters.outcome:
        match &= _has_item(incident, status=filters.outcome)
    if filters.assignee:
        match &= assignee_filter(filters.assignee, actor=actor, incident=incident)
    return match


def _text_match(q: str) -> Q:
    match = Q(ticket_id__icontains=q) | Q(customer_email__icontains=q) | Q(facts__customer__icontains=q)
    cents = parse_money(q) if any(ch.isdigit() for ch in q) else None
    if cents is not None:
        match |= Q(amount_cents=cents)
    return match


def _per_case(qs):
    """One row per case of the items `qs`: incident_id, ticket_id, items, pending, approved, stake (cents),
    rank (0 needs a decision, 1 approved waiting, 2 done)."""
    return (qs.values("incident_id", "ticket_id")
            # Counting ticket_id, not id: every column read is in the compensation_case_key index, so the
            # grouping is an index-only scan instead of a pass over the wide item rows.
            .annotate(items=Count("ticket_id"), pending=Count("ticket_id", filter=Q(status=St.PENDING)),
                      approved=Count("ticket_id", filter=Q(status=St.APPROVED)),
                      stake=Coalesce(Sum("amount_cents", filter=Q(kind__in=kinds.MONEY)
                                         & ~Q(status__in=GONE)), Value(0)))
            .annotate(rank=When_(When(pending__gt=0, then=Value(0)), When(approved__gt=0, then=Value(1)),
                                 default=Value(2), output_field=IntegerField())))


def _case_level(filters: Filters) -> Q:
    """The filters on a case's figures (state, money at stake), on _per_case rows."""
    found = Q()
    if filters.state == "decided":
        found &= Q(rank__gt=0)
    elif filters.state:
        found &= Q(rank=STATES[filters.state])
    if filters.min_cents is not None:
        found &= Q(stake__gte=filters.min_cents)
    if filters.max_cents is not None:
        found &= Q(stake__lte=filters.max_cents)
    return found


def grouped(*, user, incident, filters: Filters, actor=None):
    """One row per case matching `filters` (see _per_case), ordered as the desk works."""
    qs = _items(user=user, incident=incident, filters=filters).filter(_case_match(incident=incident, filters=filters,
                                                                                 actor=actor))
    return _per_case(qs).filter(_case_level(filters)).order_by("rank", "-incident_id", "ticket_id")


def _keyed(incident, filters: Filters) -> bool:
    """Whether the page can come from the pending items' index: one incident, the cases that need a
    decision, no filter on the case's money (a figure of the whole case, known only once grouped)."""
    return (incident is not None and filters.state == "needs_decision" and filters.min_cents is None
            and filters.max_cents is None)


def _pending_tickets(*, user, incident, filters: Filters, actor=None):
    """The tickets of `incident`'s cases that need a decision and match `filters`, in desk order: an
    ordered range of compensation_status_queue (status, incident, ticket), no grouping."""
    return (_items(user=user, incident=incident).filter(status=St.PENDING)
            .filter(_case_match(incident=incident, filters=filters, actor=actor))
            .order_by("ticket_id").values_list("ticket_id", flat=True).distinct())


def cursor_of(row) -> str:
    return f"{row['rank']}.{row['incident_id']}.{row['ticket_id']}"


def _cursor(cursor: str) -> tuple[int, int, str]:
    rank, _, rest = cursor.partition(".")
    incident_id, _, ticket = rest.partition(".")
    if not (rank.isdigit() and incident_id.isdigit() and ticket):
        raise BadFilter(f"bad cursor {cursor!r}")
    return int(rank), int(incident_id), ticket


def _after(rows, cursor: str):
    rank, incident_id, ticket = _cursor(cursor)
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
    if _keyed(incident, filters):
        tickets = _pending_tickets(user=user, incident=incident, filters=filters, actor=actor)
        if after:
            rank, incident_id, ticket = _cursor(after)
            tickets = tickets.filter(ticket_id__gt=ticket) if (rank, incident_id) == (0, incident.pk) else tickets.none()
            window = tickets[: size + 1]
        else:
            start = (max(number, 1) - 1) * size
            window = tickets[start: start + size + 1]
        # The page's tickets as a subquery: one statement, grouping only the page's cases.
        found = list(_per_case(CompensationItem.objects.filter(incident=incident, ticket_id__in=window))
                     .order_by("rank", "-incident_id", "ticket_id"))
    else:
        rows = grouped(user=user, incident=incident, filters=filters, actor=actor)
        window = _after(rows, after) if after else rows[(max(number, 1) - 1) * size:]
        found = list(window[: size + 1])
    has_next, found = len(found) > size, found[:size]
    return CasePage(cases=build(found), number=number, has_next=has_next,
                    next_cursor=cursor_of(found[-1]) if has_next else "")


def neighbours(*, user, incident, key: tuple[int, str]) -> tuple[object | None, object | None, int]:
    """The cases needing a decision before and after `key` in desk order (after: wrapping to the first
    other one), and how many need one: within one incident three reads of the pending items' index and
    one build of both cases, whatever the size of the desk. Within one incident the walk passes over
    the cases another reviewer has claimed, so that reviewers who split an incident and each press `a`
    stay in their own cases and the unassigned ones; `left` still counts every case."""
    if incident is not None:
        tickets = _pending_tickets(user=user, incident=incident, filters=Filters(state="needs_decision"))
        theirs = CaseAssignment.objects.filter(incident=incident).exclude(assignee=user).order_by().values("ticket_id")
        walk, ticket = tickets.exclude(ticket_id__in=theirs), key[1]
        before = walk.filter(ticket_id__lt=ticket).order_by("-ticket_id").first()
        after = walk.filter(ticket_id__gt=ticket).first() or walk.exclude(ticket_id=ticket).first()
        left = tickets.count()
        built = {c.ticket: c for c in build([{"incident_id": incident.pk, "ticket_id": t}
                                             for t in dict.fromkeys((before, after)) if t])}
        return built.get(before), built.get(after), left
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
    if incident is not None:
        currencies = sorted(set(_items(user=user, incident=incident).order_by().values_list("currency", flat=True)
                                .distinct()))
        return figures(user=user, incident=incident, filters=filters, actor=actor, currencies=currencies)[0]
    rows = grouped(user=user, incident=incident, filters=filters, actor=actor).annotate(currency=Max("currency"))
    currencies = sorted(set(_items(user=user, incident=incident, filters=filters).order_by().values_list("currency", flat=True).distinct()))
    sums = {f"m_{n}": Coalesce(Sum("stake", filter=Q(currency=c)), Value(0)) for n, c in enumerate(currencies)}
    found = rows.aggregate(t_cases=Count("ticket_id"), t_left=Count("ticket_id", filter=Q(rank=0)),
                           t_items=Coalesce(Sum("items"), Value(0)), t_pending=Coalesce(Sum("pending"), Value(0)),
                           **sums)
    return _totals(found, currencies)


def _totals(found: dict, currencies) -> dict:
    agg = {"cases": found.pop("t_cases"), "left": found.pop("t_left"), "items": found.pop("t_items"),
           "pending_items": found.pop("t_pending")}
    money = [(c, found.pop(f"m_{n}")) for n, c in enumerate(currencies)]
    agg["money"] = [{"currency": c, "cents": cents, "text": format_money(cents, c)} for c, cents in money if cents]
    return agg


def figures(*, user, incident, filters: Filters, actor=None, currencies) -> tuple[dict, dict]:
    """One incident's matching totals (as matching_totals) and its progress (as progress), in one pass
    over its cases: every case grouped from the covering index, the filters marking the matching ones
    (item-level filters as hashed `ticket_id IN (…)` lists), then one aggregate. `currencies`: the
    incident's (ItemCounts.currencies, read already by the caller)."""
    rows = _per_case(_items(user=user, incident=incident)).annotate(currency=Max("currency"))
    match = _case_match(incident=incident, filters=filters, actor=actor)
    chosen = _case_level(filters)
    if match:
        rows = rows.annotate(hit=Max(When_(When(match, then=Value(1)), default=Value(0), output_field=IntegerField())))
        chosen &= Q(hit=1)

    def where(*extra) -> dict:
        cond = chosen
        for q in extra:
            cond &= q
        return {"filter": cond} if cond else {}

    sums = {f"m_{n}": Coalesce(Sum("stake", **where(Q(currency=c))), Value(0)) for n, c in enumerate(currencies)}
    found = rows.aggregate(
        p_cases=Count("ticket_id"), p_pending=Count("ticket_id", filter=Q(rank=0)),
        p_items=Coalesce(Sum("items"), Value(0)), p_items_pending=Coalesce(Sum("pending"), Value(0)),
        t_cases=Count("ticket_id", **where()), t_left=Count("ticket_id", **where(Q(rank=0))),
        t_items=Coalesce(Sum("items", **where()), Value(0)), t_pending=Coalesce(Sum("pending", **where()), Value(0)),
        **sums)
    progress_ = {"items": found.pop("p_items"), "pending": found.pop("p_items_pending"), "cases": found.pop("p_cases"),
                 "cases_pending": found.pop("p_pending")}
    progress_["items_decided"] = progress_["items"] - progress_["pending"]
    progress_["cases_decided"] = progress_["cases"] - progress_["cases_pending"]
    return _totals(found, currencies), progress_


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
