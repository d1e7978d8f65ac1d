"""Benchmark: reviewers work every case of a repaired incident in chromium, through the admin a person uses.

Data: a desk of 1,500 tickets (48 with --quick; provenance.recording.services.desk_run, seed 7) with the poisoned
page flagged by a Support lead and repaired in-process with drafting on: at 1,500 tickets, 313 cases and
870 items. Three copies of it (one workspace each, the same tickets and amounts), one per run below.
The admin is the production server (gunicorn, 2 uvicorn workers) on loopback with an undo window of
UNDO_SECONDS; no Celery worker listens, so approved items stay approved (decided, waiting to go out).

Runs, each on its own copy, in Debian's chromium driven by Playwright (async API, one browser):
- two reviewers at once (the figure): each signs in, opens the incident's cases and, until an ask gives
  no case (its warning says why): asks for the next batch of the incident ("Give me the next N", which
  hands out disjoint batches under a lock, as a team gets its work), lands on its cases, approves those
  with at most APPROVE_UP_TO at stake in bulk (amount filter, Approve…, the confirmation page, Yes),
  rejects those with at least REJECT_FROM at stake in bulk with a reason, searches one remaining case by
  its ticket, opens it and approves it with `a`, approves the rest of the batch in bulk, and rejects
  with a reason whatever could not be approved. The first reviewer, once, takes back the case it
  approved with `a` through the toast's Undo, and approves it again;
- one reviewer alone, the same plan (the baseline for what a second reviewer adds);
- one reviewer alone, case by case with the keyboard (the desk before bulk decisions): `j` opens the
  first case, then `a` approves each case (`r`, a reason and Enter for the cases the two reviewers
  rejected), each decision opening the next case.

Measured per run: wall time from the first sign-in to the last decision, page loads (the `load` event
of each page's main frame: every navigation a person waits for, sign-in included), and how long each
navigation took (click to load, p50 and p95). The wall time is the machine's: a person adds reading
time per page, which is why the page loads are reported beside it.

Checked from the database after each run: every item of the incident decided (none pending), each
exactly once (its approvals and rejections in the audit trail minus its undos is one, the last one
matching its status), the undone case undone once and decided again, no case taken from the reviewer
who claimed it, no colliding claim (a case ever assigned to two reviewers, from the audit trail), no item decided by someone other than its case's reviewer, the incident's progress at
every case decided, the three runs' outcomes alike, no error message in the admin and no
Content-Security-Policy error on the console. A failed check makes the run exit 1.
"""
from __future__ import annotations

import asyncio
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from bench import common

PASSWORD = "bench-reviewers-1234"
SEED = 7  # the repair bench's desk: at 1,500 tickets its incident has 313 cases and 870 items
SIZES = {"full": {"tickets": 1_500, "batch": 50}, "quick": {"tickets": 48, "batch": 6}}
UNDO_SECONDS = 120
APPROVE_UP_TO = "100"  # dollars at stake: approved in bulk first
REJECT_FROM = "180"  # dollars at stake: rejected in bulk (a stand-in for a team's judgement)
REJECT_REASON = "customer already returned the refund"
INVALID_REASON = "the draft cannot be approved as written"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run"]
CASE_PAGE = re.compile(r"/cases/\d+/([^/?]+)/")
TIMEOUT_MS = 120_000  # one navigation; a confirmation of 50 cases on a busy box takes seconds


# --- the desks and the server ------------------------------------------------------------------------------
def _people(run_id: str) -> dict:
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group

    from core.roles import REVIEWER, SUPPORT_LEAD, ensure_roles

    ensure_roles()
    people = {}
    for label, role in (("lead", SUPPORT_LEAD), ("ana", REVIEWER), ("ben", REVIEWER), ("cy", REVIEWER)):
        user = get_user_model().objects.create_user(f"{label}-{run_id}", password=PASSWORD, is_staff=True)
        user.groups.add(Group.objects.get(name=role))
        people[label] = user
    return people


def _repaired_desk(name: str, tickets: int, people: dict):
    """The desk recorded, its poisoned page flagged by the lead and repaired here, drafting on."""
    import repairs.job as job
    import repairs.services as services
    from bench.repair import drafting
    from provenance.desk.scenario import POISONED_PAGE
    from provenance.models import Workspace
    from provenance.recording.services import desk_run
    from repairs.models import Incident

    summary = desk_run(workspace=name, tickets=tickets, seed=SEED, reason="bench")
    ws = Workspace.objects.get(name=name)
    ws.members.add(*people.values())
    incident = services.flag_source(workspace=ws, source_id=POISONED_PAGE, actor=people["lead"], reason="bench",
                                    via=Incident.Via.CLI)
    with drafting(True, lambda seconds: None):
        incident = job.run_repair(incident_id=incident.pk)
    return incident, summary["actions"]


def _server(port: int, log: Path) -> subprocess.Popen:
    from kintsugi_site.demo import web_server_command

    env = dict(os.environ, KINTSUGI_UNDO_SECONDS=str(UNDO_SECONDS), KINTSUGI_DB_POOL_MAX_SIZE="4")
    proc = subprocess.Popen(web_server_command(sys.executable, bind=f"127.0.0.1:{port}", workers=2), cwd=common.ROOT,
                            env=env, stdout=open(log, "ab"), stderr=subprocess.STDOUT, start_new_session=True)
    try:
        common.wait_until_healthy(f"http://127.0.0.1:{port}", {"web": proc}, lambda name: log.read_text()[-1500:],
                                  timeout=60)
    except RuntimeError:
        _stop(proc)
        raise
    return proc


def _stop(proc: subprocess.Popen) -> None:
    import signal

    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


# --- one reviewer in the browser ---------------------------------------------------------------------------
class Reviewer:
    """One person's browser context: its page loads, how long each navigation took, what it saw."""

    def __init__(self, label: str, username: str, page, cases_url: str):
        self.label, self.username, self.page, self.cases_url = label, username, page, cases_url
        self.loads, self.nav_ms, self.console = 0, [], []
        self.claimed = self.asked = self.undone = 0
        self.none_given: list[str] = []  # the warning of each ask that gave no case (it ends the loop)
        # Each approval's screen before the decision (a bulk confirmation, a case page): did it show the
        # body of an email that approval sends? (approvals that send an email, of those the body was shown)
        self.approvals_with_email = self.emails_shown = 0
        self.seconds = 0.0
        self.messages: list[str] = []
        self.said: list[str] = []  # the messages of the page the last navigation opened
        self.errors: list[str] = []  # the admin's error messages (a refusal): none in a clean run
        page.on("load", lambda _page: self._loaded())
        page.on("console", lambda m: self.console.append(m.text))

    def _loaded(self) -> None:
        self.loads += 1

    async def nav(self, action, step: str) -> None:
        """Do `action` (a click, a key) and wait for the page it leads to; its time is counted under `step`."""
        t0 = time.perf_counter()
        async with self.page.expect_navigation(wait_until="load", timeout=TIMEOUT_MS):
            await action()
        self.nav_ms.append((step, (time.perf_counter() - t0) * 1e3))
        said = await self.page.locator("ul.messagelist li").evaluate_all(
            "notes => notes.map(n => [n.className, n.innerText])")
        self.said = [text for _level, text in said]
        for level, text in said:
            self.messages.append(text)
            if "error" in level:
                self.errors.append(text)
                common.log(f"reviewers: {self.label}: {text}")

    async def sign_in(self) -> None:
        page = self.page
        await self.nav(lambda: page.goto("/admin/login/?next=/admin/"), "sign in")
        await page.fill("#id_username", self.username)
        await page.fill("#id_password", PASSWORD)
        await self.nav(lambda: page.click("input[type=submit]"), "sign in")
        if "/login/" in page.url:
            raise RuntimeError(f"{self.username} could not sign in")

    async def rows(self) -> list[str]:
        return await self.page.locator("tr.case").evaluate_all("rows => rows.map(r => r.dataset.case)")

    async def filter(self, **fields) -> None:
        """Set the search form's fields (the others emptied) and search."""
        page = self.page
        for name in ("q", "min", "max", "assignee"):
            await page.fill(f"#case-search input[name={name}]", fields.get(name, ""))
        await page.select_option("#case-search select[name=state]", fields.get("state", "needs_decision"))
        await self.nav(lambda: page.click("#case-search input[type=submit]"), "list (filter, search)")

    async def bulk(self, decision: str, *, reason: str = "", tick: int | None = None) -> int:
        """Tick the listed cases (all, or the first `tick`), press the decision, confirm. Returns how many."""
        page = self.page
        found = await self.rows()
        if not found:
            return 0
        if tick is None or tick >= len(found):
            await page.check("#select-all")
        else:
            for key in found[:tick]:
                await page.check(f"tr.case[data-case='{key}'] input.case-select")
        await self.nav(lambda: page.click(f"#cases-bulk button[value={decision}]"), "confirmation page")
        if decision == "approve":
            await self._email_before_approval("#bulk-messages")
        if decision in ("approve", "reject"):
            if reason:
                await page.fill("#id_reason", reason)
            await self.nav(lambda: page.click("input[type=submit][value^='Yes']"), "bulk decision (Yes)")
        return min(len(found), tick or len(found))

    async def _email_before_approval(self, section: str) -> None:
        """Count an approval about to be made, and whether the email it sends is shown in full before it."""
        page = self.page
        if not await page.locator(f"{section} .ks-message").count():
            return  # nothing this approval sends is an email
        self.approvals_with_email += 1
        body = page.locator(f"{section} .message-body").first
        box = await body.bounding_box() if await body.is_visible() else None
        width = page.viewport_size["width"]
        if box and box["height"] > 0 and box["x"] >= 0 and box["x"] + box["width"] <= width + 1 \
                and (await body.inner_text()).strip():
            self.emails_shown += 1

    async def open_cases(self) -> None:
        await self.nav(lambda: self.page.goto(self.cases_url), "list (filter, search)")

    async def my_cases(self) -> None:
        await self.nav(lambda: self.page.click("#case-workload a:text-is('my cases')"), "list (filter, search)")

    async def one_case_by_search(self, *, undo: bool) -> str | None:
        """Search a remaining case of mine by its ticket, open it, approve it with `a` (and, if `undo`,
        take that back through the toast and approve it again). Returns its ticket."""
        page = self.page
        found = await self.rows()
        if not found:
            return None
        ticket = found[0].split("/", 1)[1]
        await self.filter(q=ticket, assignee="me")
        await self.nav(lambda: page.click("tr.case a:text('open')"), "case page")
        await self._email_before_approval("#case-messages")
        await self.nav(lambda: page.keyboard.press("a"), "case decision (a, r)")
        if undo:
            toast = page.locator("#undo-toast")
            if not await toast.is_visible():
                raise RuntimeError(f"no undo toast after approving case {ticket}")
            await self.nav(lambda: toast.locator("button").click(), "undo")
            if not re.search(rf"/cases/\d+/{re.escape(ticket)}/", page.url):
                raise RuntimeError(f"undo did not bring back case {ticket}: {page.url}")
            self.undone += 1
            await self.nav(lambda: page.keyboard.press("a"), "case decision (a, r)")
        if CASE_PAGE.search(page.url):  # the next case opened (else the list did: nothing left for me)
            await self.nav(lambda: page.click("a:text-is('all cases')"), "list (filter, search)")
        return ticket

    async def next_cases(self, count: int) -> int:
        """Ask for the next `count` cases of the incident ("Give me the next N", handed out under a lock, so
        two reviewers asking at once get disjoint batches). Returns how many were given (0: the warning says
        why, and the reviewer's loop ends)."""
        page = self.page
        if not await page.locator("#next-batch").count():
            await self.open_cases()
        await page.fill("#next-count", str(count))
        await self.nav(lambda: page.click("#next-batch input[type=submit]"), "next cases")
        self.asked += 1
        got = re.search(r"([\d,]+) cases? given to you", " ".join(self.said))  # "1 case given", "1,204 cases given"
        given = int(got.group(1).replace(",", "")) if got else 0
        if not given:
            self.none_given += [m for m in self.said if m.startswith("No cases given to you")][:1] or self.said[:1]
        self.claimed += given
        return given

    async def work_batches(self, *, batch: int, undo_once: bool) -> None:
        """Ask for the next batch of cases and decide them, until none is given."""
        while await self.next_cases(batch):
            # The answer is my cases of the incident (assignee=me).
            await self.filter(max=APPROVE_UP_TO, assignee="me")
            await self.bulk("approve")
            await self.filter(min=REJECT_FROM, assignee="me")
            await self.bulk("reject", reason=REJECT_REASON)
            await self.filter(assignee="me")
            await self.one_case_by_search(undo=undo_once and not self.undone)
            await self.my_cases()
            await self.bulk("approve")
            if await self.rows():  # what could not be approved as drafted
                await self.bulk("reject", reason=INVALID_REASON)

    async def keyboard_walk(self, *, reject: set[str]) -> None:
        """`j` to the first case, then `a` (or `r`, a reason, Enter) on each until no case is left. A case
        that stays after `a` (an item could not be approved as drafted) is then rejected with a reason."""
        page, refused = self.page, set()
        await self.nav(lambda: page.keyboard.press("j"), "case page")
        for _ in range(10_000):
            here = CASE_PAGE.search(page.url)
            if here is None:
                return
            ticket = here.group(1)
            if ticket in reject or ticket in refused:
                await page.keyboard.press("r")
                await page.keyboard.type(REJECT_REASON if ticket in reject else INVALID_REASON)
                await self.nav(lambda: page.keyboard.press("Enter"), "case decision (a, r)")
            else:
                await self._email_before_approval("#case-messages")
                await self.nav(lambda: page.keyboard.press("a"), "case decision (a, r)")
                still = CASE_PAGE.search(page.url)
                if still and still.group(1) == ticket:
                    refused.add(ticket)
        raise RuntimeError("the keyboard walk did not end")


async def _browse(base: str, usernames: list[tuple[str, str]], cases_url: str, work) -> tuple[list[Reviewer], float]:
    """Sign each person in on a context of their own in one chromium and run `work(reviewer, index)` for
    all of them at once. Returns the reviewers and the wall time from the first sign-in to the last step."""
    from playwright.async_api import async_playwright

    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS, headless=True)
        try:
            people = []
            for label, username in usernames:
                context = await browser.new_context(viewport={"width": 1400, "height": 900}, base_url=base)
                context.set_default_timeout(TIMEOUT_MS)
                people.append(Reviewer(label, username, await context.new_page(), cases_url))

            async def one(reviewer: Reviewer, index: int) -> None:
                t0 = time.perf_counter()
                await reviewer.sign_in()
                await reviewer.open_cases()
                await work(reviewer, index)
                reviewer.seconds = time.perf_counter() - t0

            t0 = time.perf_counter()
            await asyncio.gather(*(one(r, i) for i, r in enumerate(people)))
            return people, time.perf_counter() - t0
        finally:
            await browser.close()


# --- what the database says --------------------------------------------------------------------------------
def verify(incident, *, undo_expected: bool) -> dict:
    """Every item decided exactly once (undos netted), the undone case decided again, no claim taken
    over, the progress at every case decided. `problems` lists what does not hold (empty: all hold)."""
    from compensation.review import case_queue
    from compensation.models import AuditEvent, CaseAssignment, CompensationItem
    from core.vocabulary import AuditAction

    St = CompensationItem.Status
    items = {i.pk: i for i in CompensationItem.objects.filter(incident=incident).select_related("decided_by")}
    events: dict[int, list] = {pk: [] for pk in items}
    for e in (AuditEvent.objects.filter(incident_id=incident.pk, subject_type="compensation_item",
                                        action__in=[AuditAction.ITEM_APPROVED, AuditAction.ITEM_REJECTED,
                                                    AuditAction.ITEM_DECISION_UNDONE])
              .order_by("seq").values("subject_id", "action", "actor_name")):
        events[int(e["subject_id"])].append(e)
    problems, undone_items = [], set()
    decided_by = Counter()
    for pk, item in items.items():
        seen = events[pk]
        undos = sum(e["action"] == AuditAction.ITEM_DECISION_UNDONE for e in seen)
        decisions = len(seen) - undos
        if undos:
            undone_items.add(pk)
        if item.status == St.PENDING:
            problems.append(f"item #{pk} ({item.ticket_id}) is still pending")
            continue
        if decisions - undos != 1:
            problems.append(f"item #{pk} ({item.ticket_id}) decided {decisions}x, undone {undos}x")
        last = seen[-1] if seen else None
        want = AuditAction.ITEM_REJECTED if item.status == St.REJECTED else AuditAction.ITEM_APPROVED
        if last is None or last["action"] != want:
            problems.append(f"item #{pk} ({item.ticket_id}) is {item.status}, its last decision event "
                            f"{last['action'] if last else 'missing'}")
        decided_by[item.decided_by.get_username() if item.decided_by else ""] += 1
    undone_cases = sorted({items[pk].ticket_id for pk in undone_items})
    if undo_expected and len(undone_cases) != 1:
        problems.append(f"expected one undone case, found {undone_cases}")
    if not undo_expected and undone_cases:
        problems.append(f"no undo expected, found {undone_cases}")
    assigned_events = list(AuditEvent.objects.filter(incident_id=incident.pk, action=AuditAction.CASE_ASSIGNED)
                           .order_by("seq").values_list("subject_id", "from_status", "to_status"))
    problems += [f"case {s} taken from {a} by {b}" for s, a, b in assigned_events if a]
    # Colliding claims: cases ever assigned to more than one reviewer (none when batches are disjoint).
    holders: dict[str, set[str]] = {}
    for subject, _before, after in assigned_events:
        if after:
            holders.setdefault(subject, set()).add(after)
    colliding = sorted(s for s, who in holders.items() if len(who) > 1)
    if colliding:
        problems.append(f"{len(colliding)} case(s) assigned to more than one reviewer: {colliding[:5]}")
    assigned = dict(CaseAssignment.objects.filter(incident=incident).values_list("ticket_id", "assignee__username"))
    if assigned:
        others = [pk for pk, i in items.items() if i.decided_by and assigned.get(i.ticket_id) != i.decided_by.get_username()]
        problems += [f"{len(others)} item(s) decided by someone other than their case's reviewer"] if others else []
    progress = case_queue.progress(incident=incident)
    if progress["cases_pending"] or progress["cases_decided"] != progress["cases"]:
        problems.append(f"progress says {progress['cases_decided']} of {progress['cases']} cases decided")
    statuses = Counter(i.status for i in items.values())
    return {"items": len(items), "cases": progress["cases"], "cases_decided": progress["cases_decided"],
            "colliding_claims": len(colliding), "cases_assigned": len(holders),
            "statuses": dict(statuses), "decided_by": dict(decided_by), "undone_cases": undone_cases,
            "cases_by_reviewer": dict(Counter(assigned.values())),
            "outcomes": {t: "/".join(sorted(v)) for t, v in _by_ticket(items.values()).items()},
            # The cases the plan rejected (the keyboard walk rejects the same ones on its copy).
            "rejected_cases": sorted({i.ticket_id for i in items.values() if i.decision_reason == REJECT_REASON}),
            "problems": problems}


def _by_ticket(items) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for item in items:
        out.setdefault(item.ticket_id, set()).add(f"{item.kind}:{item.status}")
    return out


# --- the runs -------------------------------------------------------------------------------------------------
def _summary(name: str, people: list[Reviewer], wall: float, checked: dict) -> dict:
    nav = [ms for r in people for _step, ms in r.nav_ms]
    steps: dict[str, list[float]] = {}
    for r in people:
        for step, ms in r.nav_ms:
            steps.setdefault(step, []).append(ms)
    csp = [m for r in people for m in r.console if "Content Security Policy" in m or "Content-Security-Policy" in m]
    if csp:
        checked["problems"].append(f"Content-Security-Policy errors on the console: {csp[:3]}")
    errors = [m for r in people for m in r.errors]
    if errors:
        checked["problems"].append(f"{len(errors)} error message(s) in the admin: {errors[:3]}")
    return {"run": name, "reviewers": len(people), "wall_s": wall, "page_loads": sum(r.loads for r in people),
            "nav_p50_ms": common.median(nav), "nav_p95_ms": common.pct(nav, 95), "navigations": len(nav),
            "steps": {step: {"n": len(ms), "p50_ms": common.median(ms), "p95_ms": common.pct(ms, 95)}
                      for step, ms in steps.items()},
            "per_reviewer": [{"reviewer": r.label, "seconds": r.seconds, "page_loads": r.loads,
                              "cases_claimed": r.claimed, "batches_asked": r.asked, "undone": r.undone,
                              "approvals_with_email": r.approvals_with_email, "emails_shown": r.emails_shown,
                              "none_given": r.none_given[:5]}
                             for r in people],
            "colliding_claims": checked["colliding_claims"], "batches_asked": sum(r.asked for r in people),
            "approvals_with_email": sum(r.approvals_with_email for r in people),
            "emails_shown_before_approval": sum(r.emails_shown for r in people),
            "cases": checked["cases"], "items": checked["items"], "check": checked}


def run(quick: bool) -> dict:
    mode = "quick" if quick else "full"
    size = SIZES[mode]
    run_id = str(int(time.time()))
    people = _people(run_id)
    common.log(f"reviewers: three repaired desks of {size['tickets']:,} tickets (desk_run + flag_source + run_repair)")
    t0 = time.perf_counter()
    desks = {}
    for run_name in ("two", "solo", "keyboard"):
        desks[run_name] = _repaired_desk(f"bench-reviewers-{run_name}-{size['tickets']}-{run_id}", size["tickets"], people)
    setup_s = time.perf_counter() - t0
    tmp = Path(tempfile.mkdtemp(prefix="kintsugi-bench-reviewers-"))
    port = common._free_port()
    server = _server(port, tmp / "web.log")
    base = f"http://127.0.0.1:{port}"
    rows = []
    try:
        def cases_url(run_name: str) -> str:
            return f"/admin/compensation/compensationitem/cases/?incident={desks[run_name][0].pk}"

        async def plan(reviewer: Reviewer, index: int) -> None:
            await reviewer.work_batches(batch=size["batch"], undo_once=index == 0)

        for run_name, who, label in (("two", [("ana", people["ana"]), ("ben", people["ben"])], "two reviewers at once"),
                                     ("solo", [("cy", people["cy"])], "one reviewer, the same plan")):
            common.log(f"reviewers: {label}")
            found, wall = asyncio.run(_browse(base, [(n, u.get_username()) for n, u in who], cases_url(run_name), plan))
            rows.append(_summary(label, found, wall, verify(desks[run_name][0], undo_expected=True)))
        reject = set(rows[0]["check"]["rejected_cases"])

        async def walk(reviewer: Reviewer, index: int) -> None:
            await reviewer.keyboard_walk(reject=reject)

        common.log("reviewers: one reviewer, case by case with the keyboard")
        found, wall = asyncio.run(_browse(base, [("cy", people["cy"].get_username())], cases_url("keyboard"), walk))
        rows.append(_summary("one reviewer, case by case (keyboard)", found, wall,
                             verify(desks["keyboard"][0], undo_expected=False)))
    finally:
        _stop(server)
        shutil.rmtree(tmp, ignore_errors=True)
    for r in rows[1:]:  # the same work on each copy: the same cases approved and rejected
        if (r["check"]["outcomes"], r["check"]["items"]) != (rows[0]["check"]["outcomes"], rows[0]["check"]["items"]):
            r["check"]["problems"].append(f"its outcomes differ from the two reviewers': {r['check']['statuses']} "
                                          f"against {rows[0]['check']['statuses']}")
    incident, actions = desks["two"]
    base_row = rows[-1]
    common.table(
        f"Reviewers in chromium: incident #{incident.pk}, {actions:,} actions, {rows[0]['items']:,} items in "
        f"{rows[0]['cases']:,} cases (each run on its own copy)",
        ["run", "reviewers", "wall s", "page loads", "per reviewer", "navigation p50 ms", "p95 ms",
         "colliding claims", "emails shown before approval", "wall vs keyboard", "loads vs keyboard", "checks"],
        [[r["run"], r["reviewers"], r["wall_s"], r["page_loads"],
          " / ".join(f"{p['reviewer']} {p['page_loads']} in {p['seconds']:.0f}s"
                     + (f" ({p['cases_claimed']} cases, {p['batches_asked']} asks)" if p["batches_asked"] else "")
                     for p in r["per_reviewer"]),
          r["nav_p50_ms"], r["nav_p95_ms"], r["colliding_claims"],
          f"{r['emails_shown_before_approval']} of {r['approvals_with_email']}",
          f"{r['wall_s'] / base_row['wall_s']:.2f}x",
          f"{r['page_loads'] / base_row['page_loads']:.2f}x", "ok" if not r["check"]["problems"] else "FAILED"]
         for r in rows],
        [f"setup {setup_s:.0f}s (three desks of {size['tickets']:,} tickets recorded, flagged, repaired with drafting)",
         f"plan: ask for the next {size['batch']} cases (\"Give me the next N\") until none is given; approve <= ${APPROVE_UP_TO} at stake in bulk; "
         f"reject >= ${REJECT_FROM} in bulk with a reason; one case searched by ticket and approved with `a`; the "
         "rest in bulk; the first reviewer undoes its `a` once through the toast and approves again",
         "wall: the machine's time from the first sign-in to the last decision (a person adds reading time per page "
         "load); page loads: main-frame `load` events, sign-in included",
         f"gunicorn with 2 uvicorn workers on loopback, chromium headless, undo window {UNDO_SECONDS}s, no Celery worker",
         f"load average {common.load_avg()} (other work may share the box)"])
    two = rows[0]
    common.table(f"Where the two reviewers waited: each navigation, click to load ({two['navigations']} in all)",
                 ["step", "navigations", "p50 ms", "p95 ms", "keyboard run p50 ms"],
                 [[step, v["n"], v["p50_ms"], v["p95_ms"], base_row["steps"].get(step, {}).get("p50_ms")]
                  for step, v in sorted(two["steps"].items(), key=lambda kv: -kv[1]["n"] * kv[1]["p50_ms"])],
                 ["bulk decision (Yes): one confirmation's cases decided in one short transaction per 50 cases "
                  "(compensation.review.decisions), under the workspace's audit-chain lock only for its writes"])
    for r in rows:
        for p in r["check"]["problems"][:20]:
            common.log(f"reviewers: {r['run']}: {p}")
    return {"mode": mode, **size, "incident": incident.pk, "actions": actions, "setup_s": setup_s, "runs": rows,
            "ok": not any(r["check"]["problems"] for r in rows)}
