"""Every page a support lead, a reviewer and an auditor works in, as screens: which admin URL, for whom,
on which object of a demo desk, and what to wait for before reading it.

`manage.py screenshots` builds a desk and photographs them into docs/screenshots; the browser tests walk
them at 390 px and 1440 px. The admin's URL registry is the list of pages: each URL name is either a
screen here or in NOT_SCREENS with the reason it is not one, and `unlisted()` names any other, so a page
added to the admin cannot be forgotten by either.
"""
from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Callable

from django.contrib import admin
from django.urls import reverse

LEAD, REVIEWER, AUDITOR = "lead", "reviewer", "auditor"
PASSWORD = "screens-pass-1234"
VIEWPORTS = {"phone": {"width": 390, "height": 844}, "desktop": {"width": 1440, "height": 900}}


@dataclass
class Desk:
    """One repaired desk and one not yet flagged, with the people who work them (usernames)."""

    people: dict[str, str]
    incident: object
    workspace: object
    flagged: object  # the repaired desk's poisoned page (a Source)
    to_flag: object  # the other desk's poisoned page, not flagged: the flag page's preview
    item: object  # a refund reversal of the incident
    action_id: int  # an action the repair re-ran with a changed outcome
    rows: dict = field(default_factory=dict)  # one row of each other list: ticket, ledger, outbox, event, transition
    covered: str = ""  # a ticket whose customer's one message is on the case of another of their tickets


@dataclass(frozen=True)
class Screen:
    name: str  # the admin URL name
    role: str
    path: Callable[[Desk], str]
    ready: str  # a selector that is on the page once it is ready to read
    shot: str = ""  # the docs/screenshots/<shot>.png it is, if any
    quick: bool = False  # photographed in the quick run too
    label: str = ""  # when one URL name gives several screens


def _url(name: str, *args) -> str:
    return reverse(f"admin:{name}", args=args)


SCREENS = [
    # The support lead: what to look at, what flagging does, how an incident goes.
    Screen("index", LEAD, lambda d: _url("index"), "#open-incidents", "dashboard", quick=True),
    Screen("provenance_source_flag", LEAD, lambda d: _url("provenance_source_flag", d.to_flag.pk), "#flag-confirm",
           "flag-preview"),
    Screen("provenance_source_flag_many", LEAD, lambda d: _url("provenance_source_flag_many") + f"?ids={d.to_flag.pk}",
           "#flag-confirm"),
    Screen("repairs_incident_change", LEAD, lambda d: _url("repairs_incident_change", d.incident.pk), "#outcome-table",
           "incident"),
    Screen("repairs_incident_changelist", LEAD, lambda d: _url("repairs_incident_changelist"), "#result_list"),
    Screen("repairs_incident_explain", LEAD,
           lambda d: _url("repairs_incident_explain", d.incident.pk) + f"?action={d.action_id}", "#explain-chain"),
    Screen("repairs_incident_close", LEAD, lambda d: _url("repairs_incident_close", d.incident.pk), "#content form"),
    Screen("provenance_source_changelist", LEAD, lambda d: _url("provenance_source_changelist"), "#result_list"),
    Screen("provenance_source_change", LEAD, lambda d: _url("provenance_source_change", d.flagged.pk), "#content-main"),
    Screen("provenance_workspace_changelist", LEAD, lambda d: _url("provenance_workspace_changelist"), "#result_list"),
    Screen("provenance_workspace_change", LEAD, lambda d: _url("provenance_workspace_change", d.workspace.pk),
           "#content-main"),
    Screen("provenance_workspace_suspicious", LEAD, lambda d: _url("provenance_workspace_suspicious", d.to_flag.workspace_id),
           "#content-main", "sources-worth-a-look"),
    Screen("provenance_workspace_action", LEAD, lambda d: _url("provenance_workspace_action", d.workspace.pk, d.action_id),
           "#content-main"),
    Screen("provenance_workspace_fact", LEAD, lambda d: _url("provenance_workspace_fact", d.workspace.pk, "vip_rules"),
           "#content-main"),
    Screen("provenance_workspace_members", LEAD, lambda d: _url("provenance_workspace_members", d.workspace.pk),
           "#content-main"),
    Screen("provenance_ticket_changelist", LEAD, lambda d: _url("provenance_ticket_changelist"), "#result_list"),
    Screen("provenance_ticket_change", LEAD, lambda d: _url("provenance_ticket_change", d.rows["ticket"]), "#content-main"),
    Screen("app_list", LEAD, lambda d: _url("app_list", "repairs"), "#content-main"),
    Screen("compensation_messagetemplate_changelist", LEAD, lambda d: _url("compensation_messagetemplate_changelist"),
           "#template-workspaces"),
    Screen("compensation_messagetemplate_workspace", LEAD,
           lambda d: _url("compensation_messagetemplate_workspace", d.workspace.pk), "#template-form"),
    # The reviewer: the inbox, an incident's cases, a case, the bulk confirmation, the per-item pages.
    Screen("compensation_compensationitem_cases", REVIEWER, lambda d: _url("compensation_compensationitem_cases"),
           "#case-inbox", "inbox", label="inbox"),
    Screen("compensation_compensationitem_cases", REVIEWER,
           lambda d: _url("compensation_compensationitem_cases") + f"?incident={d.incident.pk}", "#cases-table", "cases",
           quick=True),
    Screen("compensation_compensationitem_case", REVIEWER,
           lambda d: _url("compensation_compensationitem_case", d.incident.pk, d.item.ticket_id) + f"?incident={d.incident.pk}",
           "#case-messages .message-body", "case"),
    Screen("compensation_compensationitem_case", REVIEWER,
           lambda d: _url("compensation_compensationitem_case", d.incident.pk, d.covered) + f"?incident={d.incident.pk}",
           "#message-elsewhere", label="covered-case"),
    Screen("compensation_compensationitem_cases_bulk", REVIEWER,
           lambda d: _url("compensation_compensationitem_cases") + f"?incident={d.incident.pk}", "#bulk-messages",
           "bulk-confirmation"),  # reached by ticking every case and pressing Approve…: see open_screen
    Screen("compensation_compensationitem_changelist", REVIEWER,
           lambda d: _url("compensation_compensationitem_changelist") + f"?incident__id__exact={d.incident.pk}",
           "#result_list", "review-queue"),
    Screen("compensation_compensationitem_change", REVIEWER,
           lambda d: _url("compensation_compensationitem_change", d.item.pk), "#approve-form"),
    # The auditor: the record at a glance, its search, one event, the chain's verification.
    Screen("compensation_auditevent_changelist", AUDITOR, lambda d: _url("compensation_auditevent_changelist"),
           "#audit-summary", "audit", quick=True),
    Screen("compensation_auditevent_change", AUDITOR, lambda d: _url("compensation_auditevent_change", d.rows["event"]),
           "#content-main"),
    Screen("compensation_auditevent_verify", AUDITOR, lambda d: _url("compensation_auditevent_verify"), "#content-main"),
    Screen("repairs_incidenttransition_changelist", AUDITOR, lambda d: _url("repairs_incidenttransition_changelist"),
           "#result_list"),
    Screen("repairs_incidenttransition_change", AUDITOR,
           lambda d: _url("repairs_incidenttransition_change", d.rows["transition"]), "#content-main"),
    Screen("provenance_ledgerentry_changelist", AUDITOR, lambda d: _url("provenance_ledgerentry_changelist"), "#changelist"),
    Screen("provenance_ledgerentry_change", AUDITOR, lambda d: _url("provenance_ledgerentry_change", d.rows["ledger"]),
           "#content-main"),
    Screen("provenance_outboxemail_changelist", AUDITOR, lambda d: _url("provenance_outboxemail_changelist"), "#changelist"),
    Screen("provenance_outboxemail_change", AUDITOR, lambda d: _url("provenance_outboxemail_change", d.rows["outbox"]),
           "#content-main"),
]

_DJANGO_OWN = "Django's own add, delete or history form: the record is written by services, and read on the pages above"
_NOT_A_PAGE = "not a page a person reads"
NOT_SCREENS = {
    None: "the admin's catch-all redirects and object shortcuts",
    "login": "signing in, before any role", "logout": "signing out",
    "password_change": "the person's own password form", "password_change_done": "the person's own password form",
    "jsi18n": _NOT_A_PAGE, "autocomplete": "JSON for the members picker", "view_on_site": "a redirect",
    "provenance_source_trust": "a form's POST (from the source page)",
    "provenance_source_what_if_progress": "JSON the flag page polls",
    "repairs_incident_progress": "JSON the incident page polls", "repairs_incident_graph": "the SVG the incident page embeds",
    "repairs_incident_report": "a download (PDF, CSV, JSON)", "repairs_incident_retry": "a form's POST (incident page)",
    "repairs_incident_verify_full": "a form's POST (incident page)",
    "compensation_compensationitem_decide": "a form's POST (item page)",
    "compensation_compensationitem_case_decide": "a form's POST (case page)",
    "compensation_compensationitem_cases_next": "a form's POST (cases page)",
    "compensation_compensationitem_cases_undo": "a form's POST (the undo toast)",
    "compensation_compensationitem_deliver_again": "a form's POST (item page)",
    "compensation_compensationitem_message": "the exact message as plain text, not HTML",
    "compensation_auditevent_export": "a download (CSV, JSON)",
    "compensation_messagetemplate_change": "a redirect to the workspace's template page",
}
# Pages a superuser or a Workspace admin works in: people, groups, API tokens, agents, recording tokens,
# the delivery connectors.
_ADMINS_OWN = ("auth_", "authtoken_", "provenance_agentregistration_", "provenance_agenttoken_",
               "compensation_workspaceconnector_")


def not_a_screen(name: str | None) -> str | None:
    """Why admin URL `name` is not a lead's, reviewer's or auditor's screen; None when it should be one."""
    if name in NOT_SCREENS:
        return NOT_SCREENS[name]
    if name.startswith(_ADMINS_OWN):
        return "a superuser's or Workspace admin's page"
    if name.rsplit("_", 1)[-1] in ("add", "delete", "history"):
        return _DJANGO_OWN
    return None


def admin_url_names() -> set:
    names = set()

    def walk(patterns):
        for p in patterns:
            if hasattr(p, "url_patterns"):
                walk(p.url_patterns)
            else:
                names.add(p.name)
    walk(admin.site.urls[0])
    return names


def unlisted() -> list[str]:
    """Admin URL names that are neither a screen nor said not to be one."""
    screens = {s.name for s in SCREENS}
    return sorted(str(n) for n in admin_url_names() if n not in screens and not_a_screen(n) is None)


# One customer behind three of the repaired desk's tickets (their address written three ways, the locale
# named on the second only): the repair drafts them one message, in that locale, on the first one's case.
ONE_CUSTOMER = {"t05": ("elif.yilmaz@customers.example", ""), "t06": ("Elif.Yilmaz@Customers.example", "de_DE"),
                "t07": ("ELIF.YILMAZ@customers.example", "")}


def build_desk(*, tag: str | None = None) -> Desk:
    """The canonical desk recorded twice: one copy flagged by a lead and repaired here (drafting on), with a
    case claimed by the reviewer and three tickets of one customer (ONE_CUSTOMER); the other left
    unflagged for the flag page. Returns its Desk."""
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group

    from compensation.review import assignments
    from compensation.models import AuditEvent, CompensationItem
    from core.roles import AUDITOR as AUDITOR_ROLE, REVIEWER as REVIEWER_ROLE, SUPPORT_LEAD, ensure_roles
    from provenance.desk.scenario import POISONED_PAGE
    from provenance.models import LedgerEntry, OutboxEmail, Source, Ticket, Workspace
    from provenance.recording.services import desk_run
    from repairs.tasks import repair_incident
    from repairs.models import Incident
    from repairs.services import flag_source

    tag = tag or uuid.uuid4().hex[:6]
    ensure_roles()
    people, users = {}, []
    for role, group in ((LEAD, SUPPORT_LEAD), (REVIEWER, REVIEWER_ROLE), (AUDITOR, AUDITOR_ROLE)):
        user = get_user_model().objects.create_user(f"{role}-{tag}", password=PASSWORD, is_staff=True)
        user.groups.add(Group.objects.get(name=group))
        people[role] = user.username
        users.append(user)
    names = {"repaired": f"screens-{tag}", "unflagged": f"screens-{tag}-new"}
    for name in names.values():
        desk_run(workspace=name)
        Workspace.objects.get(name=name).members.add(*users)
    workspace = Workspace.objects.get(name=names["repaired"])
    for ticket, (address, locale) in ONE_CUSTOMER.items():
        Ticket.objects.filter(workspace=workspace, ticket_id=ticket).update(
            customer_name="Elif Yilmaz", customer_email=address, locale=locale)
    lead = users[0]
    incident = flag_source(workspace=workspace, source_id=POISONED_PAGE, actor=lead,
                           reason="The partner blog tells agents to refund any VIP claim without checks.",
                           via=Incident.Via.ADMIN)
    # Repaired here, as a worker would (the task is safe to deliver twice if a worker also takes it).
    repair_incident.apply(args=[incident.pk], throw=True)
    incident = Incident.objects.get(pk=incident.pk)
    if incident.status != Incident.Status.REPAIRED:
        raise RuntimeError(f"the demo desk's repair ended {incident.status}, not repaired: {incident.error or ''}")
    items = CompensationItem.objects.filter(incident=incident, kind=CompensationItem.Kind.REFUND_REVERSAL).order_by("pk")
    item = items.first()
    assignments.claim(keys=[(incident.pk, i.ticket_id) for i in items[:2]], actor=users[1], reason="my share",
                      via=Incident.Via.ADMIN)
    if not OutboxEmail.objects.filter(workspace=workspace).exists():
        # Under Django's in-memory mail backend (the tests') the notifier's mail never reaches the outbox;
        # the outbox's pages still need a row to show.
        OutboxEmail.objects.create(workspace=workspace, run_number=1, to=item.customer_email, subject="Your refund",
                                   body="Your refund has been sent.", idempotency_key=f"screens-{tag}")
    rows = {"ticket": Ticket.objects.filter(workspace=workspace).order_by("pk").first().pk,
            "ledger": LedgerEntry.objects.filter(workspace=workspace).order_by("pk").first().pk,
            "outbox": OutboxEmail.objects.filter(workspace=workspace).order_by("pk").first().pk,
            "event": AuditEvent.objects.filter(incident_id=incident.pk).order_by("pk").first().pk,
            "transition": incident.transitions.order_by("pk").first().pk}
    return Desk(people=people, incident=incident, workspace=workspace, item=item, rows=rows,
                flagged=Source.objects.get(workspace=workspace, source_id=POISONED_PAGE),
                to_flag=Source.objects.get(workspace__name=names["unflagged"], source_id=POISONED_PAGE),
                action_id=incident.outcomes.filter(status="rerun_changed").first().action_id,
                covered=sorted(ONE_CUSTOMER)[1])


# --- in the browser (Playwright's sync API) ---------------------------------------------------------------
def sign_in(browser, base_url: str, username: str, viewport: dict, *, sidebar: bool = True):
    """A page of a fresh context (its own cookies) signed in as `username`; `sidebar`: the admin's
    navigation sidebar as a new browser has it (open), else closed (the screenshots get the full width)."""
    context = browser.new_context(viewport=viewport, base_url=base_url)
    context.set_default_timeout(20_000)
    if not sidebar:
        context.add_init_script("localStorage.setItem('django.admin.navSidebarIsOpen', 'false')")
    page = context.new_page()
    page.goto("/admin/login/?next=/admin/")
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_url(lambda url: "/login/" not in url)
    return page


def open_screen(page, screen: Screen, desk: Desk) -> None:
    """Go to `screen` and wait until it is ready; the bulk confirmation is reached as a reviewer does."""
    page.goto(screen.path(desk))
    if screen.name == "compensation_compensationitem_cases_bulk":
        page.check("#select-all")
        page.click("#cases-bulk button[value=approve]")
    page.locator(screen.ready).first.wait_for()


# What the browser tests and the screenshots check on every screen: the page never scrolls sideways, and
# no two visible controls (buttons, inputs, selects, button links) cover each other.
MEASURE = """() => {
  const shown = e => { const r = e.getBoundingClientRect(), s = getComputedStyle(e);
    return r.width > 0 && r.height > 0 && s.visibility !== 'hidden' && e.offsetParent !== null; };
  const name = e => e.tagName.toLowerCase() + (e.id ? '#' + e.id : '') + (e.name ? '[name=' + e.name + ']' : '')
    + ((e.value || e.innerText || '').trim() ? ' "' + (e.value || e.innerText).trim().slice(0, 30) + '"' : '');
  const controls = [...document.querySelectorAll(
    'button, input:not([type=hidden]), select, textarea, a.button, input[type=submit]')].filter(shown);
  const boxes = controls.map(e => e.getBoundingClientRect()), overlaps = [];
  for (let i = 0; i < controls.length; i++) for (let j = i + 1; j < controls.length; j++) {
    if (controls[i].contains(controls[j]) || controls[j].contains(controls[i])) continue;
    const a = boxes[i], b = boxes[j];
    const w = Math.min(a.right, b.right) - Math.max(a.left, b.left), h = Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top);
    if (w > 1 && h > 1) overlaps.push(name(controls[i]) + ' / ' + name(controls[j]));
  }
  // What sticks out: the outermost elements past the window's right edge whose parent is not.
  const clipped = e => { for (let a = e.parentElement; a; a = a.parentElement) {
    if (getComputedStyle(a).overflowX !== 'visible') return a.getBoundingClientRect().right <= window.innerWidth + 1; }
    return false; };
  const past = e => e.getBoundingClientRect().right > window.innerWidth + 1 && !clipped(e);
  const wide = [...document.body.querySelectorAll('*')].filter(e => shown(e) && past(e) && !past(e.parentElement))
    .slice(0, 3).map(e => e.tagName.toLowerCase() + (e.id ? '#' + e.id : '') + (e.className && e.className.baseVal === undefined
      ? '.' + String(e.className).trim().split(/\s+/).join('.') : ''));
  return {overflow: document.scrollingElement.scrollWidth - window.innerWidth, overlaps: overlaps.slice(0, 5), wide};
}"""
# The email a reviewer approves is on the screen before they approve it: its body has a size and starts
# inside the window (it may be below the fold, never off to the side).
EMAIL_BODY = """(selector) => { const e = document.querySelector(selector); if (!e) return 'missing';
  const r = e.getBoundingClientRect();
  return r.width > 0 && r.height > 0 && r.left >= 0 && r.right <= window.innerWidth + 1 ? 'shown' : 'hidden'; }"""
EMAIL_SCREENS = {"compensation_compensationitem_case": "#case-messages .message-body",
                 "compensation_compensationitem_cases_bulk": "#bulk-messages .message-body"}


# A stylesheet the page links that did not load (a 404, or text served as HTML): an unstyled page has
# nothing wide and nothing overlapping, so the measures above would pass it.
UNSTYLED = """() => [...document.querySelectorAll('link[rel=stylesheet]')]
  .filter(l => { try { return !l.sheet || l.sheet.cssRules.length === 0; } catch (e) { return false; } })
  .map(l => l.getAttribute('href'))"""


def problems(page, screen: Screen) -> list[str]:
    """What is wrong with the screen open in `page` (empty: nothing)."""
    missing = page.evaluate(UNSTYLED)
    if missing:
        return [f"unstyled: {', '.join(missing[:3])} did not load"]
    found = page.evaluate(MEASURE)
    out = [f"{found['overflow']} px wider than the window"
           + (f" ({', '.join(found['wide'])} past its edge)" if found["wide"] else "")] if found["overflow"] > 1 else []
    out += [f"controls overlap: {pair}" for pair in found["overlaps"]]
    if screen.name in EMAIL_SCREENS and page.evaluate(EMAIL_BODY, EMAIL_SCREENS[screen.name]) != "shown":
        out.append("the email body is not shown")
    return out
