"""Model answers fetched ahead of the repair walk, many per round trip.

A re-run's model call is keyed by its task, its input and the facts it has read so far
(provenance.llm.cache_key), so the key is known only once the agent has run up to the call. The walk
would fetch each answer alone, one FalkorDB round trip per re-run. Instead, before visiting an action
it has not looked ahead for, the walk runs the next window of actions as probes: each agent runs
against the walk's fact mirror as it stands, with a recorder that answers a model call from the
client's memo and otherwise notes the request and stops the agent. The noted requests are fetched in
one CACHE_GET_MANY, the probes run again with those answers, and the handoffs they produce are probed
as the actions they would reach (matched children with their new payload, unmatched ones as new
actions), a few levels deep.

A probe only predicts: nothing it does is kept but the fetched answers in the memo. The walk's real
execution computes its own key, so a prediction gone stale (an earlier re-run in the window changed a
fact, or a payload) costs one ordinary cache lookup, never a wrong answer. Probes run only registered
in-process agents, which touch nothing but their recorder. A poisoning action whose probe leaves
nothing will be masked when visited; its writes are hidden from the mirror for that window's probes
(and put back after), so what comes after it is predicted against the memory the walk will see.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from provenance.agents import get_agent
from provenance.llm import get_client
from provenance.recording.recorder import ActionRecord, ActionRecorder
from provenance.vocabulary import DEAD

if TYPE_CHECKING:
    from repairs.engine import RepairWalk

WINDOW = 2000  # actions probed per window: a few round trips each
LEVELS = 4  # handoff depth followed inside a window (the desk's deepest chain is triage → refund → notifier)


class _Unanswered(Exception):
    """The probed agent asked the model something the memo does not hold yet."""

    def __init__(self, request: tuple[str, dict, dict]):
        self.request = request


class _ProbeRecorder(ActionRecorder):
    """A recorder for predictions: writes, handoffs and effects are noted unchecked (the real
    execution checks them) and a model call is answered from the memo only."""

    def set(self, key: str, value: Any, **clocks: Any) -> None:
        self._record.writes.append({"key": key, "value": value})

    def handoff(self, agent: str, payload: dict) -> None:
        self._record.handoffs.append((agent, dict(payload)))

    def effect(self, kind: str, **details: Any) -> None:
        pass

    def ask(self, task: str, input: dict) -> dict:
        facts = dict(self._facts_read)
        answer = self.client.memo_answer(task, input, facts, workspace=self._session.workspace)
        if answer is None:
            raise _Unanswered((task, input, facts))
        return answer


def _probe(walk: "RepairWalk", agent: str, payload: dict, *, id: int, seq: float,
           parent: int | None) -> ActionRecord | tuple[str, dict, dict] | None:
    """The agent's whole record when every model answer it needs is in the memo, the first request
    that is not, or None when the probe failed (the real execution will say why)."""
    owner = walk.nodes.get(id) or walk.nodes.get(parent)  # a new handoff reads as its parent's recording
    record = ActionRecord(id=id, agent=agent, payload=payload, seq=seq, parent=parent,
                          ticket=payload.get("ticket"), hidden=owner.hidden if owner else None)
    recorder = _ProbeRecorder(walk.session, record)
    recorder.client = walk.lookahead.client  # once per window: get_client() reads settings on every call
    try:
        get_agent(agent)(recorder, payload)
    except _Unanswered as asked:
        return asked.request
    except Exception:  # noqa: BLE001 - a prediction only; the walk's own execution raises it properly
        return None
    return record


class ModelLookahead:
    def __init__(self, walk: "RepairWalk"):
        self.walk = walk
        self.probed: set[int] = set()
        self.windows = 0
        self.client = get_client()

    def before_visit(self, aid: int) -> None:
        if aid not in self.probed:
            self._window(aid)

    def _window(self, visiting: int) -> None:
        walk = self.walk
        # The action about to be visited is off the heap already; it opens the window (a poisoning
        # action the walk re-runs first decides what everything after it reads).
        upcoming = [visiting] + [aid for _, aid in sorted(walk.heap)
                                 if aid not in walk.status and aid not in self.probed and aid != visiting]
        first = upcoming[:WINDOW]
        self.probed.update(first)
        self.windows += 1
        # (agent, payload, id, seq, parent, old children) of each action to probe. A handoff child of
        # an action in the window is probed as its parent's probe hands off to it, with that payload.
        work: list[tuple[str, dict, int, float, int | None, list[int]]] = []
        window = set(first)
        for aid in first:
            node = walk.nodes[aid]
            preds = walk.preds.get(aid, set())
            # Predecessors come earlier in seq order: visited already, or in this window. With none
            # changed and none still to come, the walk will skip the action; nothing to fetch for it.
            if node.parent in window or (aid not in walk.forced and preds.isdisjoint(walk.changed)
                                         and preds.isdisjoint(window)):
                continue
            work.append((node.agent, walk.pending_payload.get(aid, node.payload), aid, node.seq, node.parent,
                         node.children))
        client = self.client = get_client()
        hidden = self._hide_predicted_masks(window)
        try:
            self._fetch(work, client)
        finally:
            for fv in hidden:
                fv.active = True

    def _hide_predicted_masks(self, window: set[int]) -> list:
        """A poisoning action the walk will mask (its clean re-run leaves nothing) still has its writes
        in the fact mirror until it is visited; the probes after it would read them and predict requests
        nobody makes. Take those writes (and its handoffs', which masking supersedes) out for this
        window's probes only; the caller puts them back."""
        walk, hidden = self.walk, []
        for aid in sorted(window & walk.maskable, key=lambda a: walk.nodes[a].seq):
            node = walk.nodes[aid]
            record = _probe(walk, node.agent, walk.pending_payload.get(aid, node.payload), id=aid, seq=node.seq,
                            parent=node.parent)
            if not isinstance(record, ActionRecord) or record.writes or record.effects or record.handoffs:
                continue
            stack = [aid]
            while stack:
                gone = walk.nodes.get(stack.pop())
                if gone is None:
                    continue
                for fid, _, _ in gone.writes:
                    fv = walk.session.facts.by_id.get(fid)
                    if fv is not None and fv.active:
                        fv.active = False
                        hidden.append(fv)
                stack.extend(gone.children)
        return hidden

    def _fetch(self, work: list, client) -> None:
        walk = self.walk
        fetched: set[str] = set()
        for _ in range(LEVELS + 1):
            requests: dict[str, tuple] = {}
            retry, deeper = [], []
            for item in work:
                agent, payload, aid, seq, parent, children = item
                outcome = _probe(walk, agent, payload, id=aid, seq=seq, parent=parent)
                if isinstance(outcome, tuple):
                    key = client.request_key(*outcome)
                    if key not in fetched:  # fetched already and not in the cache: a real model call later
                        requests[key] = outcome
                        retry.append(item)
                elif outcome is not None:
                    deeper.extend(self._handoffs(outcome, children))
            if requests:
                client.prefetch(list(requests.values()), workspace=walk.session.workspace)
                fetched.update(requests)
            work = retry + deeper
            if not work:
                break

    def _handoffs(self, record: ActionRecord, children: list[int]) -> list[tuple[str, dict, int, float, int | None, list]]:
        """The actions a probed record hands off to, as the walk would match them to the old children."""
        nodes = self.walk.nodes
        old = [c for c in children if c in nodes and nodes[c].status not in DEAD]
        out: list[tuple[str, dict, int, float, int | None, list[Any]]] = []
        for agent, payload in record.handoffs:
            ticket = payload.get("ticket", record.ticket)
            match = next((c for c in old if nodes[c].agent == agent and nodes[c].ticket == ticket), None)
            if match is not None:
                old.remove(match)
                child = nodes[match]
                out.append((agent, payload, child.id, child.seq, record.id, child.children))
            else:  # a new action: slotted right after its parent; its id only matters to its own writes
                out.append((agent, payload, -1, record.seq + 1e-6, record.id, []))
        return out
