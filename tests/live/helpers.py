"""Desks recorded by concurrent agents, interleaved by a seeded scheduler."""
import random

from provenance.desk.scenario import PAGES
from provenance.graph.graph import workspace_graph
from provenance.recording.live import SnapshotRecording
from provenance.models import LedgerEntry, Workspace
from provenance.recording.services import desk_run
from tests.helpers import app_role_may_delete


def schedule(roots: int, *, seed: int, width: int) -> list[tuple[str, int]]:
    """Open and commit events over root indices: up to `width` recordings open at once, each committed
    at a moment (and so in an order) the seed chooses."""
    rng, events, open_, nxt = random.Random(seed), [], [], 0
    while nxt < roots or open_:
        if nxt < roots and len(open_) < width and (not open_ or rng.random() < 0.55):
            events.append(("open", nxt))
            open_.append(nxt)
            nxt += 1
        else:
            events.append(("commit", open_.pop(rng.randrange(len(open_)))))
    return events


def late_page_schedule(roots: int, *, page: int, opened: int) -> list[tuple[str, int]]:
    """Every page but one recorded first; then `opened` tickets open, that page commits, and they
    commit after it: their snapshot lacks the page, their place in the order is after it."""
    pages = len(PAGES)
    events = [e for i in range(pages) if i != page for e in (("open", i), ("commit", i))]
    events.append(("open", page))
    tickets = range(pages, min(roots, pages + opened))
    events += [("open", i) for i in tickets] + [("commit", page)] + [("commit", i) for i in tickets]
    return events + [e for i in range(pages + opened, roots) for e in (("open", i), ("commit", i))]


def desk_roots(workspace: str) -> list[tuple[str, dict]]:
    """The roots of a desk run, in the order desk_run records them (the excluded pages' too)."""
    ws = Workspace.objects.get(name=workspace)
    return ([("research", {"source": page}) for page, _, _ in PAGES]
            + [("triage", t.as_payload()) for t in ws.tickets.order_by("ticket_id")])


def concurrent_desk(workspace: str, *, tickets: int | None, seed: int, order_seed: int, width: int = 6,
                    exclude_source: str | None = None, events: list | None = None) -> None:
    """The desk of desk_run, each root recorded as a SnapshotRecording in the seeded schedule's order.
    A clean run (exclude_source) runs the same schedule without the excluded page's root."""
    desk_run(workspace=workspace, tickets=tickets, seed=seed, exclude_source=exclude_source)
    ws = Workspace.objects.get(name=workspace)
    workspace_graph(workspace).delete()
    with app_role_may_delete(LedgerEntry):  # the app role may not delete money rows: the owner lends it
        LedgerEntry.objects.filter(workspace=ws).delete()
    Workspace.objects.filter(pk=ws.pk).update(action_count=0)
    roots = desk_roots(workspace)
    sources = dict(ws.sources.values_list("source_id", "content"))
    open_: dict[int, SnapshotRecording] = {}
    for kind, i in events or schedule(len(roots), seed=order_seed, width=width):
        agent, payload = roots[i]
        if agent == "research" and payload["source"] == exclude_source:
            continue
        if kind == "open":
            open_[i] = SnapshotRecording(ws, sources=sources)
            open_[i].run(agent, payload)
        else:
            open_.pop(i).commit()
