"""Sources worth a look: a ranked list with plain reasons. Never a flag: a lead reads it and decides.

Signals, cheapest first:
- contradiction: a fact the source wrote replaces the previous version of the same key, written from
  another source, with a different value; *loosening* when it drops a restriction the previous one
  had ("verified", "only") or adds a permission ("no checks", "any customer");
- trust: what a lead said about the source (untrusted raises, trusted lowers);
- novelty: how recently it first appeared, among the workspace's sources;
- reach: how much of the desk its blast radius covers (from the topology mirror: cheap).
Those rank every source (the pre-filter); then only the few most promising get a what-if
(repairs.what_if, the exact repair outcome), bounded in number and in radius, which says what
flagging them would change: ticket decisions and money.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from django.conf import settings

from core.money import format_totals
from provenance.graph import queries
from provenance.graph.graph import workspace_graph
from provenance.models import Source, Workspace
from provenance.recording.selectors import blast_radius
from provenance.access.trust import T, fact_rows
from provenance.vocabulary import DEAD
from repairs.models import Incident
from repairs.what_if import compute_what_if

RESTRICTIONS = ("verified", "verify", "verification", "only", "must", "unless", "before", "checked", "standard",
                "require", "required", "proof", "limit")
PERMISSIONS = ("no checks", "no check", "without", "any customer", "anyone", "always", "regardless",
               "no questions", "automatically")
WEIGHTS = {"contradicts": 3.0, "loosens": 2.0, "untrusted": 2.0, "trusted": -3.0, "novelty": 1.0, "reach": 1.0,
           "decisions": 1.5}


@dataclass
class Suggestion:
    source: str
    score: float = 0.0
    reasons: list[str] = field(default_factory=list)
    radius: int = 0
    pk: int | None = None  # the Source row's, for links

    def to_json(self) -> dict:
        return {"source": self.source, "score": round(self.score, 2), "reasons": self.reasons}


def _words(text: str, vocabulary: tuple[str, ...]) -> set[str]:
    low = str(text).lower()
    return {w for w in vocabulary if re.search(rf"\b{re.escape(w)}\b", low)}


def loosening(before, after) -> tuple[list[str], list[str]]:
    """(restrictions the new value drops, permissions it adds) against the previous value."""
    dropped = sorted(_words(before, RESTRICTIONS) - _words(after, RESTRICTIONS))
    added = sorted(_words(after, PERMISSIONS) - _words(before, PERMISSIONS))
    return dropped, added


def _contradictions(graph) -> dict[str, list[tuple[str, int, int, list[str], list[str], list[str]]]]:
    """By source: (key, its version, the previous version, that one's sources, restrictions dropped,
    permissions added) for each live fact it wrote that changes another source's value of the key."""
    out: dict[str, list] = {}
    previous: dict[str, object] = {}
    for f in fact_rows(graph):
        if f.writer_status in DEAD:
            continue
        prev = previous.get(f.key)
        previous[f.key] = f
        if prev is None or prev.value == f.value or not f.sources or set(f.sources) == set(prev.sources):
            continue
        dropped, added = loosening(prev.value, f.value)
        for s in f.sources:
            out.setdefault(s, []).append((f.key, f.version, prev.version, prev.sources, dropped, added))
    return out


def suspicious_sources(*, workspace: Workspace, what_ifs: int | None = None, reach_for: int | None = None) -> list[Suggestion]:
    """The workspace's sources ranked by how much they are worth a look, best first, with reasons.
    Sources with an incident still open are left out: they are being dealt with. `reach_for`: measure
    the blast radius (one graph query per source) of only that many sources, the best by the other
    signals, and return only those (the dashboard's short list); None measures every source."""
    what_ifs = settings.KINTSUGI_SUSPICIOUS_WHAT_IFS if what_ifs is None else what_ifs
    graph = workspace_graph(workspace.name)
    flagged = set(Incident.objects.filter(workspace=workspace).exclude(status=Incident.Status.CLOSED)
                  .values_list("source_id", flat=True))
    sources = [s for s in Source.objects.filter(workspace=workspace).order_by("source_id") if s.source_id not in flagged]
    first_seen = {r.source: r for r in graph.ro_query(queries.SOURCE_FIRST_SEEN, {"dead": list(DEAD)})}
    contradictions = _contradictions(graph)
    total_actions = graph.ro_query(queries.ACTION_COUNT)[0].n or 1
    order = sorted(first_seen, key=lambda s: first_seen[s].seq)
    suggestions = []
    for source in sources:
        s = Suggestion(source.source_id, pk=source.pk)
        for key, version, prev_version, prev_sources, dropped, added in contradictions.get(source.source_id, []):
            s.score += WEIGHTS["contradicts"]
            s.reasons.append(f"its {key} (v{version}) contradicts v{prev_version} from {', '.join(prev_sources)}")
            if dropped or added:
                s.score += WEIGHTS["loosens"]
                what = ([f"drops “{', '.join(dropped)}”"] if dropped else []) + ([f"adds “{', '.join(added)}”"] if added else [])
                s.reasons.append(f"and loosens it: {' and '.join(what)}")
        if source.trust == T.UNTRUSTED:
            s.score += WEIGHTS["untrusted"]
            s.reasons.append("a lead marked it untrusted")
        elif source.trust == T.TRUSTED:
            s.score += WEIGHTS["trusted"]
            s.reasons.append("a lead marked it trusted")
        if source.source_id in first_seen and len(order) > 1:  # novelty
            action, at = first_seen[source.source_id].action, first_seen[source.source_id].ran_at
            rank = order.index(source.source_id)
            s.score += WEIGHTS["novelty"] * rank / (len(order) - 1)
            when = "the newest" if rank == len(order) - 1 else f"number {rank + 1} of {len(order)}"
            s.reasons.append(f"first appeared {(at or '')[:19].replace('T', ' ')} (action #{action}), {when} by "
                             f"first appearance")
        suggestions.append(s)
    suggestions.sort(key=lambda s: (-s.score, s.source))
    if reach_for is not None:
        suggestions = suggestions[:reach_for]
    for s in suggestions:
        _add_reach(workspace, s, total_actions)
    suggestions.sort(key=lambda s: (-s.score, s.source))
    for s in [s for s in suggestions if s.radius][:what_ifs]:
        _add_what_if(workspace, s)
    suggestions.sort(key=lambda s: (-s.score, s.source))
    return suggestions


def _add_reach(workspace: Workspace, s: Suggestion, total_actions: int) -> None:
    radius = blast_radius(workspace=workspace, source=s.source)
    s.radius = radius["size"]
    if radius["size"]:
        s.score += WEIGHTS["reach"] * min(1.0, radius["size"] / total_actions)
        s.reasons.append(f"reached {_n(radius['size'], 'action')} on {_n(radius['tickets'], 'ticket')}, "
                         f"{_n(radius['effects'], 'live effect')}")


def _add_what_if(workspace: Workspace, s: Suggestion) -> None:
    """What flagging it would change, from its what-if; skipped above the radius bound (it would cost a
    repair walk of that size: the lead can ask what_if for it)."""
    if s.radius > settings.KINTSUGI_SUSPICIOUS_WHAT_IF_MAX_RADIUS:
        s.reasons.append(f"its radius is over {settings.KINTSUGI_SUSPICIOUS_WHAT_IF_MAX_RADIUS} actions: ask what_if "
                         f"for what flagging it would change")
        return
    wi = compute_what_if(workspace=workspace, source=s.source)
    tickets = max(1, len({t["ticket"] for t in wi.tickets_changed}) + wi.counts["rerun_same"])
    changed = len(wi.tickets_changed)
    s.score += WEIGHTS["decisions"] * changed / tickets
    money = format_totals(wi.amount_reversed, empty="no money")
    s.reasons.append(f"flagging it would change {_n(changed, 'ticket decision')} and "
                     f"reverse {money} (what-if)")


def _n(count: int, noun: str) -> str:
    return f"{count:,} {noun}{'' if count == 1 else 's'}"
